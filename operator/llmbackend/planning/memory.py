"""Per-GPU memory estimate for one model shard (architecture, engine, TP, PP).

The estimate is for the most loaded GPU of a replica: the largest pipeline
stage (ceil(layers / pp) layers) holding its 1/tp share.

- Weights: parameters x bytes per parameter (bf16/fp16 2, fp8 1, int8
  weight-only 1, int4 AWQ 0.5 plus ~3% for group scales and zeros). The
  embedding and lm_head (vocab x hidden each, inside `parameterCount`) are
  counted separately: with pp = 1 both sit on the one stage; with pp > 1 the
  first stage holds the embedding and the last the lm_head, so the largest
  stage carries one of them on top of its layers. All parameters use the
  quantized width (the small error is covered by the usable fraction).
- KV cache for maxBatchSize x maxSeqLen tokens, per token and GPU:
  2 (K and V) x ceil(layers / pp) x kv_heads_per_gpu x head_dim x kv bytes,
  kv_heads_per_gpu = max(1, kv_heads / tp): once tp exceeds the KV heads they
  are replicated and per-GPU KV stops shrinking. kv bytes: kvCacheDtype, and
  `auto` = fp8 (1 byte) when quantization is fp8, else 2.
- Activations / workspace: maxNumTokens x hidden x 2 bytes x ACTIVATION_FACTOR
  / tp (about that many hidden-sized 16-bit buffers live at once: QKV,
  attention output, the wider MLP intermediate), plus fp32 logits for
  maxBatchSize x vocab / tp.
- Overhead: CUDA context and runtime (2 GiB) plus NCCL buffers (0.35 GB)
  when the replica spans more than one GPU.

Usable GPU memory = labelled memory x USABLE_FRACTION (0.9): the rest is
left for the driver, fragmentation and the error of this estimate. vLLM
backends use their engine.vllm.gpuMemoryUtilization instead: vLLM keeps
everything inside that fraction of total memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..api.v1alpha1 import EngineSpec, ModelArchitecture

GIB = 1024**3
USABLE_FRACTION = 0.9
CUDA_CONTEXT_BYTES = 2 * GIB
NCCL_BYTES = 350_000_000
ACTIVATION_FACTOR = 8
INT4_SCALE_OVERHEAD = 0.03

BYTES_PER_PARAM = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8_wo": 1.0,
    "int4_awq": 0.5 * (1 + INT4_SCALE_OVERHEAD),
}


def _value(x: Any) -> str:
    """Enum or plain string (the API models store enum values)."""
    return str(getattr(x, "value", x))


def bytes_per_param(quantization: Any) -> float:
    return BYTES_PER_PARAM[_value(quantization)]


def kv_bytes_per_element(engine: EngineSpec) -> int:
    dtype = _value(engine.kv_cache_dtype)
    if dtype == "auto":
        return 1 if _value(engine.quantization) == "fp8" else 2
    return 1 if dtype == "fp8" else 2


def kv_dtype_name(engine: EngineSpec) -> str:
    dtype = _value(engine.kv_cache_dtype)
    if dtype == "auto":
        return "fp8" if _value(engine.quantization) == "fp8" else "bf16"
    return dtype


def stage_layers(num_layers: int, pp: int) -> int:
    """Layers on the largest pipeline stage."""
    return math.ceil(num_layers / pp)


def kv_heads_per_gpu(num_kv_heads: int, tp: int) -> int:
    # tp > kv_heads: each GPU keeps one (replicated) KV head.
    return max(1, math.ceil(num_kv_heads / tp))


def kv_bytes_per_token(arch: ModelArchitecture, engine: EngineSpec, tp: int = 1, pp: int = 1) -> int:
    """KV cache bytes per token on the most loaded GPU."""
    return (
        2 * stage_layers(arch.num_layers, pp) * kv_heads_per_gpu(arch.num_key_value_heads, tp)
        * arch.head_dim * kv_bytes_per_element(engine)
    )


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes on the most loaded GPU of a replica."""

    tp: int
    pp: int
    weights: int
    kv_cache: int
    activations: int
    overhead: int
    kv_tokens: int
    kv_dtype: str

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.overhead

    def describe(self, usable: int | None = None) -> str:
        text = (
            f"weights {fmt_gib(self.weights)} + KV cache {fmt_gib(self.kv_cache)} "
            f"({self.kv_tokens:,} tokens, {self.kv_dtype}) + activations {fmt_gib(self.activations)} "
            f"+ overhead {fmt_gib(self.overhead)} = {fmt_gib(self.total)}"
        )
        if usable is not None:
            text += f" of {fmt_gib(usable)} usable"
        return text

    def to_json(self) -> dict[str, int]:
        return {
            "weightsBytes": self.weights, "kvCacheBytes": self.kv_cache,
            "activationsBytes": self.activations, "overheadBytes": self.overhead,
            "totalBytes": self.total,
        }


def fmt_gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB"


def weight_bytes_per_gpu(arch: ModelArchitecture, quantization: Any, tp: int, pp: int) -> int:
    embed = arch.vocab_size * arch.hidden_size
    # Untied embedding + lm_head; clamp for odd explicit architectures.
    layer_params = max(arch.parameter_count - 2 * embed, 0)
    extra = 2 * embed if pp == 1 else embed
    if layer_params == 0:
        extra = min(extra, arch.parameter_count)
    params = layer_params * stage_layers(arch.num_layers, pp) / arch.num_layers + extra
    return math.ceil(params * bytes_per_param(quantization) / tp)


def estimate(arch: ModelArchitecture, engine: EngineSpec, tp: int = 1, pp: int = 1) -> MemoryBreakdown:
    """Memory on the most loaded GPU for this TP x PP shard (see module docstring)."""
    tokens = engine.max_batch_size * engine.max_seq_len
    activations = (
        engine.max_num_tokens * arch.hidden_size * 2 * ACTIVATION_FACTOR
        + engine.max_batch_size * arch.vocab_size * 4
    ) // tp
    overhead = CUDA_CONTEXT_BYTES + (NCCL_BYTES if tp * pp > 1 else 0)
    return MemoryBreakdown(
        tp=tp, pp=pp,
        weights=weight_bytes_per_gpu(arch, engine.quantization, tp, pp),
        kv_cache=tokens * kv_bytes_per_token(arch, engine, tp, pp),
        activations=activations,
        overhead=overhead,
        kv_tokens=tokens,
        kv_dtype=kv_dtype_name(engine),
    )


def usable_fraction(engine: EngineSpec | None = None) -> float:
    """Fraction of each GPU's memory a replica is planned into: for vLLM its gpuMemoryUtilization (a fraction of
    TOTAL memory that weights, activations and KV cache all share), else USABLE_FRACTION."""
    if engine is not None and _value(engine.backend) == "vllm":
        return float(engine.vllm.gpu_memory_utilization)
    return USABLE_FRACTION


def usable_bytes(gpu_memory_bytes: int, engine: EngineSpec | None = None) -> int:
    return int(gpu_memory_bytes * usable_fraction(engine))


def unsharded_bytes(arch: ModelArchitecture, engine: EngineSpec) -> int:
    """What one replica needs in total if it were on one (huge) GPU."""
    return estimate(arch, engine, 1, 1).total
