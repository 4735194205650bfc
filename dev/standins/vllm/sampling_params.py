"""SamplingParams (vLLM 0.31.0, vllm/sampling_params.py): the fields the operator's model sets, validated as
vLLM validates them (SamplingParams._verify_args), raising VLLMValidationError as 0.31 does."""

from __future__ import annotations

import dataclasses
import enum

from .exceptions import VLLMValidationError


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclasses.dataclass
class StructuredOutputsParams:
    """vllm/sampling_params.py StructuredOutputsParams (0.31.0): exactly one constraint (`__post_init__`)."""

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None

    def __post_init__(self) -> None:
        count = sum(getattr(self, name) is not None
                    for name in ("json", "regex", "choice", "grammar", "json_object", "structural_tag"))
        if count > 1:
            raise VLLMValidationError("You can only use one kind of structured outputs constraint but multiple are "
                                      f"specified: {self.__dict__}")
        if count < 1:
            raise VLLMValidationError("You must use one kind of structured outputs constraint but none are "
                                      f"specified: {self.__dict__}")


@dataclasses.dataclass
class SamplingParams:
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] | str | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    skip_special_tokens: bool = True  # the stand-in's vocabulary has no special tokens
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        if self.n < 1:
            raise VLLMValidationError(f"n must be at least 1, got {self.n}.")
        if self.logprobs is not None and self.logprobs < 0:
            raise VLLMValidationError(f"logprobs must be non-negative, got {self.logprobs}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise VLLMValidationError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise VLLMValidationError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if self.repetition_penalty <= 0.0:
            raise VLLMValidationError(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}.")
        if self.temperature < 0.0:
            raise VLLMValidationError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise VLLMValidationError(f"top_k must be 0 or -1 (disable), or at least 1, got {self.top_k}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(f"max_tokens must be at least 1, got {self.max_tokens}.")
