"""vllm/logprobs.py (0.31.0): Logprob, a token's log probability, its rank in the vocabulary and its text."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None
