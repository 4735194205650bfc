"""AsyncEngineArgs: the engine arguments the operator renders into model.json (vLLM 0.31.0 names and defaults).

A dataclass like upstream's, so an argument vLLM does not know fails with TypeError here too.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class AsyncEngineArgs:
    model: str = "facebook/opt-125m"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    disable_log_stats: bool = False
    served_model_name: str | list[str] | None = None
    enable_lora: bool = False
    max_lora_rank: int = 16
    max_loras: int = 1
    max_cpu_loras: int | None = None
