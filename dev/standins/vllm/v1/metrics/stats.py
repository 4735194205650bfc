"""SchedulerStats / IterationStats / FinishedRequestStats (vLLM 0.31.0 fields the operator's logger reads)."""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass
class SchedulerStats:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0
    num_skipped_waiting_reqs: int = 0  # waiting requests the scheduler skipped this step (0.31.0; never here)


@dataclasses.dataclass
class FinishedRequestStats:
    finish_reason: str
    e2e_latency: float = 0.0
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    max_tokens_param: int | None = None
    queued_time: float = 0.0       # seconds: scheduled - queued
    prefill_time: float = 0.0
    inference_time: float = 0.0    # seconds: last token - scheduled
    decode_time: float = 0.0
    mean_time_per_output_token: float = 0.0


class IterationStats:
    def __init__(self) -> None:
        self.iteration_timestamp = time.time()
        self.num_generation_tokens = 0
        self.num_prompt_tokens = 0
        self.num_preempted_reqs = 0
        self.finished_requests: list[FinishedRequestStats] = []
