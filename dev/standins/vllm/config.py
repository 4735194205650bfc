"""The parts of VllmConfig a stat logger reads (vLLM 0.31.0 attribute names)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class CacheConfig:
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks: int | None = None
    cache_dtype: str = "auto"


@dataclasses.dataclass
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192


@dataclasses.dataclass
class VllmConfig:
    cache_config: CacheConfig
    scheduler_config: SchedulerConfig
