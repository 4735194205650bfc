"""Per-GPU memory estimate for one model shard, and whether it fits a GPU.

The estimate is for the most loaded GPU of a replica: the largest pipeline
stage (ceil(layers / pp) layers) holding its 1/tp share.

- Weights: `weightBytes` of the checkpoint when known (exact; used when the
  checkpoint is already in the served precision), else layer parameters x
  bytes per parameter (bf16/fp16 2, fp8 1, int8 weight-only 1, int4 AWQ 0.5
  plus ~3% for group scales and zeros; nvfp4 0.5 + one fp8 scale per 16 values = 0.5625;
  mxfp4 0.5 + one e8m0 scale per 32 = 0.53125). Embedding and lm_head (vocab x hidden
  each, one matrix when tied) stay 16-bit in quantized checkpoints (ModelOpt,
  AWQ, GPTQ): Llama-3.1-8B fp8 is ~9.1 GB, not 8.0. With pp = 1 both sit on the
  one stage; with pp > 1 the largest stage carries one of them. MoE: every
  expert is resident; expert parallelism (EP) spreads routed experts over EP of
  the TP ranks and splits each over TP / EP (moe_expert_parallel_size x
  moe_tensor_parallel_size = tensor_parallel_size in TensorRT-LLM), so the
  per-GPU share is 1/tp either way.
- KV cache per token and GPU: 2 (K and V) x stage layers x kv_heads_per_gpu x
  head_dim x kv bytes, kv_heads_per_gpu = max(1, kv_heads / tp) (replicated
  beyond the KV heads). MLA (DeepSeek-V2/V3): one latent of kv_lora_rank +
  qk_rope_head_dim elements per token and layer, the same on every TP rank.
  Sliding-window layers cache at most the window per sequence. kv bytes:
  kvCacheDtype; `auto` = fp8 (1 byte) when quantization is fp8, else 2 (fp4 models keep a 16-bit KV
  cache unless fp8 is chosen explicitly).
- KV sizing (the knob): worst case maxBatchSize x maxSeqLen (default), or
  `kvCacheMinSequences` full-length sequences; the engine then batches as many
  as the KV cache holds (achievable concurrency, reported in status).
- Activations / workspace: maxNumTokens x hidden x 2 bytes x ACTIVATION_FACTOR
  / tp, plus fp32 logits for maxBatchSize x vocab / tp.
- Attention data parallelism (MoE only; TensorRT-LLM's enable_attention_dp, vLLM's data parallel attention
  with expert parallel): each of the tp GPUs runs attention for its own requests. Everything but the
  routed experts (attention, dense and shared-expert MLPs, embeddings, lm_head) is replicated on every GPU,
  the routed experts are split 1/tp as before; each GPU's KV cache holds only its 1/tp of the sequences,
  at the full per-sequence size (attention TP 1: all KV heads, or MLA's latent, which plain TP copies to
  every rank anyway). maxBatchSize stays the replica's total: each rank gets ceil(maxBatchSize / tp).
- Overhead: CUDA context and runtime (2 GiB) plus NCCL buffers (0.35 GB) when
  the replica spans more than one GPU.
- LoRA cache (spec.engine.lora, on while spec.adapters lists one; `lora_cache`):
  maxLoras adapters of maxRank resident on every GPU, each lora_A (rank x in)
  and lora_B (out x rank) in 16 bits for q, k, v, o, gate, up and down of the
  stage's layers (the modules both engines apply LoRA to: the worst case, as
  target_modules are known only after the download); the sharded side of each
  pair is split over TP as vLLM's default layers split it (column-parallel
  q/k/v/gate/up: lora_B; row-parallel o/down: lora_A). MLP width from the
  parameter count (dense models; MoE experts' LoRA is not counted). Host memory:
  maxCpuLoras whole adapters, said in the explanation (not GPU memory).

Fit (`fit()`): usable = memory x (1 - the product's reserve fraction, 4-7%,
see inventory.PRODUCTS). TensorRT-LLM gives the KV cache
kvCacheFreeGpuMemFraction of what is free after weights, activations and
overhead; vLLM gives weights + activations + KV cache gpu_memory_utilization
of the TOTAL memory (pass `total_fraction`). A shard fits when that KV
capacity holds the sized KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..api.v1alpha1 import EngineSpec, ModelArchitecture

GIB = 1024**3
DEFAULT_RESERVE_FRACTION = 0.05
CUDA_CONTEXT_BYTES = 2 * GIB
NCCL_BYTES = 350_000_000
ACTIVATION_FACTOR = 8
INT4_SCALE_OVERHEAD = 0.03
# fp4 block scales: NVFP4 one fp8 (1-byte) scale per 16 values, MXFP4 one e8m0 (1-byte) scale per 32 (plus NVFP4's
# one fp32 scale per tensor, negligible).
NVFP4_BYTES = 0.5 + 1 / 16
MXFP4_BYTES = 0.5 + 1 / 32
EMBEDDING_BYTES_PER_PARAM = 2  # embeddings and lm_head stay 16-bit in quantized checkpoints

BYTES_PER_PARAM = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8_wo": 1.0,
    "int4_awq": 0.5 * (1 + INT4_SCALE_OVERHEAD),
    "nvfp4": NVFP4_BYTES,
    "mxfp4": MXFP4_BYTES,
}
SIXTEEN_BIT = ("bf16", "fp16")


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


def is_mla(arch: ModelArchitecture) -> bool:
    return arch.kv_lora_rank is not None


def is_moe(arch: ModelArchitecture) -> bool:
    return bool(arch.num_experts)


def routed_expert_params(arch: ModelArchitecture) -> float:
    """Parameters of the routed experts (all layers): total - active = (experts - k) / experts of them."""
    experts, k = arch.num_experts or 0, arch.num_experts_per_token or 0
    active, total = arch.active_parameter_count, arch.parameter_count
    if not experts or not k or not active or active >= total or k >= experts:
        return 0.0
    return experts * (total - active) / (experts - k)


def ranks_share(count: int, dp: int) -> int:
    """What one of dp attention data-parallel ranks holds of count sequences (the most loaded rank)."""
    return math.ceil(count / dp)


def _kv_bytes_per_token_layer(arch: ModelArchitecture, engine: EngineSpec, tp: int) -> int:
    if is_mla(arch):
        return ((arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0)) * kv_bytes_per_element(engine)
    return 2 * kv_heads_per_gpu(arch.num_key_value_heads, tp) * arch.head_dim * kv_bytes_per_element(engine)


def kv_bytes_per_token(arch: ModelArchitecture, engine: EngineSpec, tp: int = 1, pp: int = 1) -> int:
    """KV cache bytes per token of full-attention context on the most loaded GPU (all stage layers)."""
    return stage_layers(arch.num_layers, pp) * _kv_bytes_per_token_layer(arch, engine, tp)


def _stage_layer_split(arch: ModelArchitecture, pp: int) -> tuple[int, int]:
    """(full-attention layers, sliding-window layers) on the largest stage (full layers counted generously)."""
    layers = stage_layers(arch.num_layers, pp)
    if not arch.sliding_window:
        return layers, 0
    windowed = arch.num_layers if arch.sliding_window_layers is None else min(arch.sliding_window_layers, arch.num_layers)
    full = min(layers, math.ceil((arch.num_layers - windowed) / pp))
    return full, layers - full


def kv_bytes_per_sequence(arch: ModelArchitecture, engine: EngineSpec, tp: int, pp: int, seq_len: int) -> int:
    """KV bytes of one sequence of seq_len tokens on the most loaded GPU (windows cap windowed layers)."""
    full, windowed = _stage_layer_split(arch, pp)
    per_layer = _kv_bytes_per_token_layer(arch, engine, tp)
    window = min(arch.sliding_window or seq_len, seq_len)
    return per_layer * (full * seq_len + windowed * window)


def draft_bytes_per_param(arch: ModelArchitecture, engine: EngineSpec) -> float:
    """MTP's layer is in the checkpoint's precision; EAGLE-3 heads and draft models are sized 16-bit."""
    spec = engine.speculative
    if spec is not None and _value(spec.method) == "mtp":
        return bytes_per_param(engine.quantization)
    return 2.0


def draft_shape(arch: ModelArchitecture, engine: EngineSpec) -> tuple[float, int]:
    """(weight bytes of the whole drafter, layers of it that keep a KV cache like one of the model's).

    MTP (DeepSeek-V3/R1): the checkpoint's next-token-prediction module, one decoder layer (an MoE layer) plus a
    2 x hidden -> hidden projection, sharing the embedding and lm_head (TensorRT-LLM reuses the one layer for every
    drafted token). EAGLE-3: a head of one dense decoder layer, a 3 x hidden -> hidden fusion of the target's hidden
    states and its own lm_head, unless draftParameterCount says. A draft model: draftParameterCount, with as many
    KV layers as the model has per parameter (an estimate: its own shape is not read).
    """
    spec = engine.speculative
    if spec is None:
        return 0.0, 0
    embed = arch.vocab_size * arch.hidden_size
    matrices = 1 if arch.tie_word_embeddings else 2
    layer = max(arch.parameter_count - matrices * embed, 0) / arch.num_layers
    method = _value(spec.method)
    if method == "mtp":
        params = layer + 2 * arch.hidden_size * arch.hidden_size
        return params * draft_bytes_per_param(arch, engine), 1
    if method == "eagle3":
        active = arch.active_parameter_count or arch.parameter_count
        dense_layer = max(active - matrices * embed, 0) / arch.num_layers
        params = spec.draft_parameter_count or (dense_layer + 3 * arch.hidden_size * arch.hidden_size + embed)
        return params * 2.0, 1
    params = float(spec.draft_parameter_count or 0)
    return params * 2.0, max(1, math.ceil(arch.num_layers * params / arch.parameter_count))


def sized_sequences(engine: EngineSpec) -> int:
    """Full-length sequences the KV cache is sized for (the KV sizing knob)."""
    minimum = getattr(engine, "kv_cache_min_sequences", None)
    return minimum if minimum else engine.max_batch_size


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
    kv_per_sequence: int = 0
    sequences: int = 0  # the replica's (all attention data-parallel ranks together)
    attention_dp: int = 1  # attention data-parallel ranks (1: attention is tensor parallel)
    lora: LoRACache | None = None

    @property
    def lora_gpu(self) -> int:
        return self.lora.gpu_bytes if self.lora is not None else 0

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.overhead + self.lora_gpu

    @property
    def non_kv(self) -> int:
        return self.weights + self.activations + self.overhead + self.lora_gpu

    def describe(self, usable: int | None = None) -> str:
        text = (
            f"weights {fmt_gib(self.weights)} + KV cache {fmt_gib(self.kv_cache)} "
            f"({self.kv_tokens:,} tokens, {self.kv_dtype}) + activations {fmt_gib(self.activations)} "
            f"+ overhead {fmt_gib(self.overhead)}"
        )
        if self.lora is not None:
            text += f" + {self.lora.describe_gpu()}"
        text += f" = {fmt_gib(self.total)}"
        if usable is not None:
            text += f" of {fmt_gib(usable)} usable"
        return text

    def to_json(self) -> dict[str, int]:
        return {
            "weightsBytes": self.weights, "kvCacheBytes": self.kv_cache,
            "activationsBytes": self.activations, "overheadBytes": self.overhead,
            "totalBytes": self.total,
        } | ({"loraCacheBytes": self.lora.gpu_bytes, "loraHostBytes": self.lora.host_bytes} if self.lora else {})


def fmt_gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB"


def exact_weights_apply(arch: ModelArchitecture, quantization: Any) -> bool:
    """weightBytes describes the served weights: the checkpoint is already quantized, or both are 16-bit."""
    return arch.weight_bytes is not None and (bool(arch.checkpoint_quantization) or _value(quantization) in SIXTEEN_BIT)


def weight_bytes_per_gpu(arch: ModelArchitecture, quantization: Any, tp: int, pp: int,
                         attention_dp: bool = False) -> int:
    """Weight bytes on the most loaded GPU; with attention data parallelism only the routed experts are split."""
    replicated, split = _weight_parts(arch, quantization, tp, pp, attention_dp)
    return math.ceil(replicated + split / tp)


def routed_weight_bytes_per_gpu(arch: ModelArchitecture, quantization: Any, tp: int, pp: int,
                                attention_dp: bool = False) -> float:
    """The routed experts' share of weight_bytes_per_gpu (what a step reads only where its tokens go)."""
    return _weight_parts(arch, quantization, tp, pp, attention_dp, routed_only=True)[1] / tp


def input_embedding_bytes_per_gpu(arch: ModelArchitecture, tp: int, pp: int, attention_dp: bool = False) -> float:
    """Bytes of weight_bytes_per_gpu that are the input embedding table: a step gathers its tokens' rows of it and
    never streams the rest. Zero where the table is also the lm_head (tied: read whole for every sampled token) or
    where the largest stage's one matrix may be the lm_head (pp > 1)."""
    if arch.tie_word_embeddings or pp > 1:
        return 0.0
    embed_bytes = arch.vocab_size * arch.hidden_size * EMBEDDING_BYTES_PER_PARAM
    if arch.parameter_count <= 2 * arch.vocab_size * arch.hidden_size:  # odd shapes: all "embedding"; keep it read
        return 0.0
    return embed_bytes if attention_dp else embed_bytes / tp


def _weight_parts(arch: ModelArchitecture, quantization: Any, tp: int, pp: int, attention_dp: bool,
                  routed_only: bool = False) -> tuple[float, float]:
    """(bytes every GPU of a stage holds whole, bytes the stage's tp GPUs split) of the largest stage."""
    embed = arch.vocab_size * arch.hidden_size
    matrices = 1 if arch.tie_word_embeddings else 2
    embed_bytes: float = embed * EMBEDDING_BYTES_PER_PARAM
    layer_bytes: float
    if exact_weights_apply(arch, quantization):
        assert arch.weight_bytes is not None
        layer_bytes = max(arch.weight_bytes - matrices * embed_bytes, 0)
        if layer_bytes == 0:
            embed_bytes = arch.weight_bytes // matrices
    else:
        layer_params = max(arch.parameter_count - matrices * embed, 0)
        layer_bytes = layer_params * bytes_per_param(quantization)
        if layer_params == 0:  # odd explicit architectures: everything is "embedding"
            embed_bytes = arch.parameter_count * bytes_per_param(quantization) / matrices
    extra = matrices if pp == 1 else 1
    layer_share = stage_layers(arch.num_layers, pp) / arch.num_layers
    layer_params_all = max(arch.parameter_count - matrices * embed, 1)
    routed = layer_bytes * min(routed_expert_params(arch) / layer_params_all, 1.0) * layer_share
    if routed_only:
        return 0.0, routed
    stage = layer_bytes * layer_share + extra * embed_bytes
    if attention_dp:
        return stage - routed, routed
    return 0.0, stage


LORA_BYTES_PER_PARAM = 2  # adapters stay 16-bit (vLLM lora_dtype auto: the model's dtype; TensorRT-LLM: the same)


@dataclass(frozen=True, slots=True)
class LoRACache:
    """The LoRA cache of spec.engine.lora on the most loaded GPU, and in host memory."""

    max_loras: int
    max_cpu_loras: int
    rank: int
    per_adapter_gpu: int  # one adapter of `rank`, this GPU's share
    per_adapter: int  # one whole adapter (host copy)

    @property
    def gpu_bytes(self) -> int:
        return self.max_loras * self.per_adapter_gpu

    @property
    def host_bytes(self) -> int:
        return self.max_cpu_loras * self.per_adapter

    def describe_gpu(self) -> str:
        return (f"LoRA cache {fmt_gib(self.gpu_bytes)} ({self.max_loras} adapters of rank {self.rank}; "
                f"{self.max_cpu_loras} in host memory, {fmt_gib(self.host_bytes)})")


def mlp_width(arch: ModelArchitecture) -> int:
    """The MLP's intermediate size, from what a layer's parameters leave after attention (dense: 3 matrices)."""
    matrices = 1 if arch.tie_word_embeddings else 2
    per_layer = max(arch.parameter_count - matrices * arch.vocab_size * arch.hidden_size, 0) / arch.num_layers
    if arch.active_parameter_count is not None and is_moe(arch):
        per_layer = max(arch.active_parameter_count - matrices * arch.vocab_size * arch.hidden_size, 0) / arch.num_layers
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    attention = arch.hidden_size * (2 * q + 2 * kv)
    return max(int((per_layer - attention) / (3 * arch.hidden_size)), 0)


def lora_cache(arch: ModelArchitecture, engine: EngineSpec, tp: int = 1, pp: int = 1) -> LoRACache | None:
    """The LoRA cache spec.engine.lora asks for (None when LoRA is off); see the module docstring."""
    lora = engine.lora
    if lora is None:
        return None
    h, q, kv, m = arch.hidden_size, arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim, mlp_width(arch)
    column = [(h, q), (h, kv), (h, kv), (h, m), (h, m)]  # (in, out): q, k, v, gate, up; lora_B is split over TP
    row = [(q, h), (m, h)]  # o, down: lora_A is split over TP
    r = lora.max_rank
    whole = sum(r * (i + o) for i, o in column + row)
    shard = sum(r * i + math.ceil(r * o / tp) for i, o in column) + sum(math.ceil(r * i / tp) + r * o for i, o in row)
    layers = stage_layers(arch.num_layers, pp)
    return LoRACache(max_loras=lora.max_loras, max_cpu_loras=lora.max_cpu_loras, rank=r,
                     per_adapter_gpu=shard * layers * LORA_BYTES_PER_PARAM,
                     per_adapter=whole * arch.num_layers * LORA_BYTES_PER_PARAM)


def estimate(arch: ModelArchitecture, engine: EngineSpec, tp: int = 1, pp: int = 1,
             attention_dp: bool = False) -> MemoryBreakdown:
    """Memory on the most loaded GPU for this TP x PP shard (see module docstring)."""
    dp = tp if attention_dp else 1
    attention_tp = tp // dp
    sequences = sized_sequences(engine)
    draft_bytes, draft_layers = draft_shape(arch, engine)
    spec = engine.speculative
    if spec is not None and _value(spec.method) == "mtp" and exact_weights_apply(arch, engine.quantization):
        draft_bytes = 0  # DeepSeek's MTP layer is part of the checkpoint: weightBytes (its total_size) holds it
    # The drafter's layers keep full-context KV of their own (on the last stage: counted as if on the largest).
    per_sequence = (kv_bytes_per_sequence(arch, engine, attention_tp, pp, engine.max_seq_len)
                    + draft_layers * _kv_bytes_per_token_layer(arch, engine, attention_tp) * engine.max_seq_len)
    on_gpu = ranks_share(sequences, dp)
    # Attention DP: each rank runs its own step of up to maxNumTokens tokens and samples its own requests.
    activations = (
        engine.max_num_tokens * arch.hidden_size * 2 * ACTIVATION_FACTOR
        + ranks_share(engine.max_batch_size, dp) * arch.vocab_size * 4
    ) // attention_tp
    overhead = CUDA_CONTEXT_BYTES + (NCCL_BYTES if tp * pp > 1 else 0)
    return MemoryBreakdown(
        tp=tp, pp=pp,
        weights=weight_bytes_per_gpu(arch, engine.quantization, tp, pp, attention_dp) + math.ceil(draft_bytes / tp),
        kv_cache=on_gpu * per_sequence,
        activations=activations,
        overhead=overhead,
        kv_tokens=on_gpu * engine.max_seq_len,
        kv_dtype=kv_dtype_name(engine),
        kv_per_sequence=per_sequence,
        sequences=sequences,
        attention_dp=dp,
        lora=lora_cache(arch, engine, tp, pp),
    )


def usable_bytes(gpu_memory_bytes: int, reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> int:
    return int(gpu_memory_bytes * (1 - reserve_fraction))


def total_memory_fraction(engine: EngineSpec) -> float | None:
    """vLLM's gpu_memory_utilization when the spec has it (a fraction of TOTAL memory), else None."""
    if _value(engine.backend) != "vllm":
        return None
    return float(engine.vllm.gpu_memory_utilization)


@dataclass(frozen=True, slots=True)
class Fit:
    fits: bool
    usable: int  # bytes the shard may use on this GPU
    kv_capacity: int  # KV cache bytes the engine would allocate
    concurrency: int  # full-length sequences in flight (<= maxBatchSize)


def fit(mem: MemoryBreakdown, gpu_memory_bytes: int, engine: EngineSpec,
        reserve_fraction: float = DEFAULT_RESERVE_FRACTION, total_fraction: float | None = None) -> Fit:
    """Does the shard fit, how much KV cache the engine gets, and how many full sequences that holds."""
    if total_fraction is not None:  # vLLM: one budget for everything, the user's fraction is the reserve
        usable = int(gpu_memory_bytes * total_fraction)
        capacity = usable - mem.non_kv
    else:  # TensorRT-LLM: a fraction of what is free after weights
        usable = usable_bytes(gpu_memory_bytes, reserve_fraction)
        capacity = int((usable - mem.non_kv) * engine.kv_cache_free_gpu_mem_fraction)
    capacity = max(capacity, 0)
    per_seq = max(mem.kv_per_sequence, 1)
    # Attention DP: every rank has this capacity for its own sequences.
    concurrency = min(engine.max_batch_size, capacity // per_seq * mem.attention_dp)
    return Fit(fits=mem.non_kv <= usable and capacity >= mem.kv_cache and concurrency >= 1,
               usable=usable, kv_capacity=capacity, concurrency=concurrency)


def unsharded_bytes(arch: ModelArchitecture, engine: EngineSpec) -> int:
    """What one replica needs in total if it were on one (huge) GPU."""
    return estimate(arch, engine, 1, 1).total
