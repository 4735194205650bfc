"""vllm/v1/engine/exceptions.py (0.31.0): the engine client's errors; both are server errors (5xx) in 0.31."""

from __future__ import annotations

from ...exceptions import VLLMServerError


class EngineGenerateError(VLLMServerError):
    """generate() failed for this request; the engine lives on."""


class EngineDeadError(VLLMServerError):
    """The engine-core process is gone: every request in flight and every later one fails with this."""

    def __init__(self, *args: object, suppress_context: bool = False) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.", *args)
        self.__suppress_context__ = suppress_context
