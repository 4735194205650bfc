"""vllm/exceptions.py (0.31.0): request validation failures raise VLLMValidationError, a VLLMClientError (4xx), no
longer a ValueError."""

from __future__ import annotations

from typing import Any


class VLLMError(Exception):
    pass


class VLLMClientError(VLLMError):
    pass


class VLLMServerError(VLLMError):
    pass


class VLLMValidationError(VLLMClientError):
    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter, self.value = parameter, value
