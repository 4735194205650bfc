"""Performance model of one plan for one workload: time to first token, time per output token, output tokens/s.

An engine iteration (one step) of in-flight batching runs the decode token of
every sequence that is generating plus new prompts, each whole (or a chunk of
at most maxNumTokens): the prefill work of new requests shares the steps, and
a step's time is averaged over steps with and without a prompt in them
(Model.whole_chunks_step). One pipeline stage's step:

    linear layers  = corner(weights read / achievable HBM bandwidth,
                            2 x active parameters x step tokens / tp / achievable FLOPS),
                     corner(m, c) = (m^p + c^p)^(1/p), p = 4 as the H200's measured products have it
                     (benchmarks/perf_calibrate.py --corner; a sharp max() is p = infinity); for MoE models
                     once for the dense part (attention projections, lm_head) and once for the routed experts,
                     separate kernels at different tokens per weight
    attention      = max(KV cache read of the decoding sequences / achievable KV read bandwidth,
                         QK^T and AV FLOPs (prompt tokens attend to half their prompt on average) / achievable FLOPS)
    TP all-reduce  = 2 per layer: link latency + 2 (tp-1)/tp x step tokens x hidden x 2 bytes
                     / achievable link bandwidth
    step           = linear layers + attention + all-reduces + a fixed cost per layer of the stage (measured: an
                     H200 decoder layer replayed from a CUDA graph, less its weights' streaming time; not launches
                     alone, docs/performance-model.md variant 14; no cost per step beyond it)

(per GPU: weights, KV and FLOPs are the 1/tp share of the stage's layers; MoE
models compute with the active parameters and read the experts a step's
tokens touch).

Attention data parallelism (MoE, `attention_dp`): each of the tp GPUs runs
attention, dense layers and lm_head for its own 1/tp of the step's sequences
(replicated weights, read whole by every GPU) and its share of the routed
experts for the tokens of all GPUs. Per GPU the FLOPs are the same as with TP
(1/tp of the tokens through whole layers = all tokens through 1/tp of them);
the KV read is 1/tp of the sequences at their full size (MLA's latent is not
split by TP, so this is where attention DP saves: TP reads every sequence's
latent on every GPU). Instead of 2 all-reduces a layer, MoE layers exchange
tokens all-to-all (dispatch and combine): each GPU sends its tokens' hidden
states to the min(k, tp) ranks that hold their experts, (tp - 1)/tp of them
to other GPUs. Peak FLOPS are the product table's dense tensor figure for the
math precision (fp8 for fp8 weights, fp4 for NVFP4, 16-bit otherwise:
weight-only int8/int4 compute in 16-bit).

Steady state at C requests in flight (a closed loop: a request leaves, the
next enters), input I and output O tokens:
- a request spends ceil(I / maxNumTokens) steps in prefill and O - 1 in decode;
  the decoding share of C and the prompt tokens per step (O decode tokens of a
  request come with its I prompt tokens) follow from that;
- time per output token = the time between a sequence's tokens: pp stage steps
  (+ the hops between stages); the other requests' prompt chunks are in those
  steps, whole: some steps carry one (compute-bound), the others none;
- TTFT = the steps that carry this request's prompt (+ half a step's wait for
  the step in progress when others are running);
- throughput = C x O / (TTFT + (O - 1) x TPOT) (Little's law);
- in flight is at most maxBatchSize and what the KV cache holds at I + O
  tokens a sequence; requests beyond wait (their wait is in TTFT); a step takes
  at most maxNumTokens tokens, so long prompts limit the decoders that can be
  kept fed.
- PP: C is split into min(C, pp) micro-batches; with fewer micro-batches than
  stages some stages idle (the bubble) and each token still crosses every stage.

`Efficiency` holds the achievable fractions of peak HBM bandwidth (weights and
KV cache apart), compute and link bandwidth, and the fixed cost per layer. The
weights' bandwidth and the fixed cost come from kernels measured on an H200
(benchmarks/data/h200/); the rest is fitted on TensorRT-LLM's published
throughput tables by benchmarks/perf_calibrate.py (docs/performance-model.md
has the fit and the validation on other published figures). These are
estimates, not promises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..api.v1alpha1 import EngineSpec, ModelArchitecture
from .memory import (
    _value,
    draft_bytes_per_param,
    draft_shape,
    input_embedding_bytes_per_gpu,
    kv_bytes_per_sequence,
    routed_expert_params,
    routed_weight_bytes_per_gpu,
    stage_layers,
    weight_bytes_per_gpu,
)

ACTIVATION_BYTES = 2  # 16-bit activations cross the TP all-reduces and PP hops


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achievable fractions of the data sheet's peaks, and the fixed cost of one layer in an engine step."""

    bandwidth: float
    compute: float
    layer_overhead_s: float
    compute_fp4: float = 0.0  # fp4 tensor math's own fraction (0: the same as compute)
    link_bandwidth: float = 1.0  # achievable fraction of the link's per-direction bandwidth in an all-reduce
    kv_bandwidth: float = 0.0  # achievable fraction of HBM bandwidth reading the KV cache in a step (0: bandwidth)
    corner: float = 0.0  # p of a kernel's time (memory^p + compute^p)^(1/p), the roofline's corner (0: max of the two)

    def roofline_s(self, memory_s: float, compute_s: float) -> float:
        """One kernel's time from its weights' streaming time and its tensor math's time: near the corner (as many
        tokens as the GPU's FLOPs per byte) a measured product takes longer than either alone."""
        if not self.corner:
            return max(memory_s, compute_s)
        top = max(memory_s, compute_s)
        if top <= 0:
            return 0.0
        p = self.corner
        return top * ((memory_s / top) ** p + (compute_s / top) ** p) ** (1 / p)


# bandwidth, layer_overhead_s and corner: measured on an H200 (benchmarks/data/h200/); the rest fitted by
# benchmarks/perf_calibrate.py on TensorRT-LLM's perf-overview tables (fitting set only);
# tests/unit/test_perf_model.py checks that the script's measurement and fit still land here.
CALIBRATED = Efficiency(bandwidth=0.92, compute=0.54, layer_overhead_s=78e-6, compute_fp4=0.34, link_bandwidth=0.58,
                        kv_bandwidth=0.77, corner=4.0)


@dataclass(frozen=True, slots=True)
class Link:
    kind: str
    gbps: float  # per direction
    latency_s: float
    text: str


@dataclass(frozen=True, slots=True)
class Workload:
    """The traffic a prediction is for: prompt and output lengths, and requests in flight (None: as many as fit)."""

    input_tokens: int
    output_tokens: int
    concurrency: int | None = None

    def describe(self) -> str:
        c = "the most requests in flight the engine holds" if self.concurrency is None else \
            f"{self.concurrency} request(s) in flight"
        return f"{self.input_tokens} input / {self.output_tokens} output tokens, {c}"


@dataclass(frozen=True, slots=True)
class Hardware:
    """What the model needs of one GPU product and the links of a plan."""

    hbm_gbps: float
    tflops: float  # dense peak at the plan's math precision (the linear layers)
    tp_link: Link | None
    stage_link: Link | None
    attention_tflops: float = 0.0  # attention's math (fp8 at most: fp4 models attend in fp8); 0 = tflops
    precision: str = "16bit"


@dataclass(frozen=True, slots=True)
class Prediction:
    workload: Workload
    in_flight: float  # requests the engine runs at once (<= concurrency)
    waiting: float  # requests of the workload queued for a slot
    decoding: float  # sequences generating a token in each step (all micro-batches)
    prefill_tokens_per_step: float
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    step_ms: float  # one stage step in steady state
    allreduce_ms: float  # of one stage step
    bound: str  # what limits the linear layers in steady state: "memory" or "compute"
    pipeline_idle: float  # fraction of stage time idle for want of micro-batches (PP bubble)
    token_budget_limited: bool  # maxNumTokens caps the decoders the prompt stream keeps fed


def attention_precision(precision: str) -> str:
    """Attention runs fp8 at most (fp4 checkpoints keep an fp8 KV cache and fp8 attention)."""
    return "fp8" if precision in ("fp8", "fp4") else "16bit"


def math_precision(quantization: str, fp4_tensor_cores: bool = True) -> str:
    """The tensor math a quantization runs: fp8 weights (and activations) in fp8, nvfp4 in fp4, mxfp4 in fp4 where
    the GPU has FP4 tensor cores and weight-only (16-bit math) elsewhere, other weight-only formats in 16-bit."""
    q = _value(quantization)
    if q == "mxfp4":
        return "fp4" if fp4_tensor_cores else "16bit"
    return {"fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4"}.get(q, "16bit")


class Model:
    """One plan's shape on one product: step times and steady-state predictions."""

    def __init__(self, arch: ModelArchitecture, engine: EngineSpec, hw: Hardware, tp: int, pp: int,
                 eff: Efficiency = CALIBRATED, attention_dp: bool = False) -> None:
        self.arch, self.engine, self.hw, self.tp, self.pp, self.eff = arch, engine, hw, tp, pp, eff
        self.dp = tp if attention_dp else 1  # attention data-parallel ranks
        self.attention_tp = tp // self.dp
        self.layers = stage_layers(arch.num_layers, pp)
        self.weights = weight_bytes_per_gpu(arch, engine.quantization, tp, pp, attention_dp)
        self.routed_weights = routed_weight_bytes_per_gpu(arch, engine.quantization, tp, pp, attention_dp)
        self.gathered = input_embedding_bytes_per_gpu(arch, tp, pp, attention_dp)
        # Speculative decoding: k drafted tokens verified in one step, `accepted` output tokens a step on average
        # ((1 - a^(k+1)) / (1 - a) for a per-token acceptance a: the chain stops at the first rejection, and the
        # verifying step always yields one token of its own).
        spec = engine.speculative
        self.draft_tokens = spec.draft_tokens if spec is not None else 0
        a = spec.acceptance if spec is not None else 0.0
        self.accepted = (1 - a ** (self.draft_tokens + 1)) / (1 - a) if spec is not None else 1.0
        draft_bytes, self.draft_layers = draft_shape(arch, engine)
        self.draft_weights = draft_bytes / tp
        self.draft_flops_per_token = 2 * draft_bytes / draft_bytes_per_param(arch, engine) / tp if draft_bytes else 0.0
        embed = arch.vocab_size * arch.hidden_size
        matrices = 1 if arch.tie_word_embeddings else 2
        active = arch.active_parameter_count or arch.parameter_count
        layer_params = max(active - matrices * embed, active * 0.5)
        # Per GPU and token: the stage's share of the layers' matmuls; lm_head once per sampled token.
        self.flops_per_token = 2 * layer_params * self.layers / arch.num_layers / tp
        self.lm_head_flops = 2 * embed / tp
        # The routed experts' share of a token's layer FLOPs (attention DP splits only these over the GPUs).
        experts, k = arch.num_experts or 0, arch.num_experts_per_token or 0
        routed_active = routed_expert_params(arch) * k / experts if experts else 0.0
        self.routed_flops_share = min(routed_active / layer_params, 1.0)
        heads = max(arch.num_attention_heads // self.attention_tp, 1)
        self.attn_width = heads * arch.head_dim
        # MLA decodes in the absorbed form: every head scores the kv_lora + rope latent and sums the kv_lora values
        # (2 x kv_lora + rope per head, 4.5x DeepSeek's 192-wide q/k head per FLOP of 2 x width): prompts run the
        # expanded form, as wide as the heads.
        self.decode_attn_width = (heads * (2 * arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)) / 2
                                  if arch.kv_lora_rank else self.attn_width)
        self.bw = hw.hbm_gbps * 1e9 * eff.bandwidth
        self.kv_bw = hw.hbm_gbps * 1e9 * (eff.kv_bandwidth or eff.bandwidth)
        compute = eff.compute_fp4 if (hw.precision == "fp4" and eff.compute_fp4) else eff.compute
        self.flops = hw.tflops * 1e12 * compute
        self.attn_flops_rate = (hw.attention_tflops or hw.tflops) * 1e12 * eff.compute

    # ---- one step ----

    def _read_fraction(self, tokens: float) -> float:
        """Fraction of the weights a step reads (MoE: shared part + experts its tokens touch)."""
        arch = self.arch
        experts, k = arch.num_experts, arch.num_experts_per_token
        active, total = arch.active_parameter_count, arch.parameter_count
        if not experts or not k or not active or active >= total or k >= experts:
            return 1.0
        routed = experts * (total - active) / (experts - k)
        dense = max(total - routed, 0.0)
        touched = experts * (1 - (1 - k / experts) ** max(tokens, 1.0))
        return min(1.0, (dense + routed * touched / experts) / total)

    def kv_bytes(self, tokens: float) -> float:
        return kv_bytes_per_sequence(self.arch, self.engine, self.attention_tp, self.pp, max(int(tokens), 1))

    def _touched(self, tokens: float) -> float:
        """Fraction of the routed experts a step of `tokens` tokens reaches (routing uniform and independent)."""
        experts, k = self.arch.num_experts or 1, self.arch.num_experts_per_token or 1
        return 1 - (1 - k / experts) ** max(tokens, 1.0)

    def _weights_read(self, tokens: float) -> float:
        """Bytes of weights one GPU reads in a step of `tokens` tokens (all ranks' tokens reach the experts)."""
        if self.dp == 1:
            return max(self.weights * self._read_fraction(tokens) - self.gathered, 0.0)
        return self.weights - self.gathered - self.routed_weights * (1 - self._touched(tokens))

    def alltoall_s(self, tokens: float) -> float:
        """Attention DP: dispatch and combine of one GPU's tokens to the expert ranks, in every layer of the stage
        (DeepSeek's few dense layers included: a bound on the side of caution)."""
        link = self.hw.tp_link
        if link is None:
            return 0.0
        fanout = min(self.arch.num_experts_per_token or 1, self.tp) * (self.tp - 1) / self.tp
        message = tokens / self.dp * fanout * self.arch.hidden_size * ACTIVATION_BYTES
        bandwidth = link.gbps * 1e9 * self.eff.link_bandwidth
        return 2 * self.layers * (link.latency_s + message / bandwidth)

    def allreduce_s(self, tokens: float) -> float:
        link = self.hw.tp_link
        if self.tp <= 1 or link is None:
            return 0.0
        if self.dp > 1:
            return self.alltoall_s(tokens)
        message = tokens * self.arch.hidden_size * ACTIVATION_BYTES
        bandwidth = link.gbps * 1e9 * self.eff.link_bandwidth
        return 2 * self.layers * (link.latency_s + 2 * (self.tp - 1) / self.tp * message / bandwidth)

    def hop_s(self, tokens: float) -> float:
        link = self.hw.stage_link
        if self.pp <= 1 or link is None:
            return 0.0
        return link.latency_s + tokens * self.arch.hidden_size * ACTIVATION_BYTES / (link.gbps * 1e9)

    def step(self, decode: float, prefill: float, context: float, prompt: float) -> tuple[float, float, bool]:
        """(seconds, all-reduce seconds, compute-bound linear layers) of one stage step.

        decode: sequences generating one token each at `context` tokens of KV; prefill: prompt tokens of
        prompts `prompt` tokens long.
        """
        drafting_s = self.draft_s(decode)
        decode_in, decode = decode, decode * (1 + self.draft_tokens)  # the verify step runs every drafted token
        tokens = decode + prefill
        sampled = decode + (prefill / prompt if prompt else 0.0)
        weights_s = self._weights_read(tokens) / self.bw
        roofline = self.eff.roofline_s
        # Attention DP: a GPU attends for its 1/dp of the sequences, at full width. Prompts come in whole chunks,
        # each to one rank, and every rank waits for the busiest one at the experts: the step carries the prompt
        # work of the busiest rank (a whole chunk, or the even share once there are more chunks than ranks).
        ranks = self.dp
        busiest_prefill = prefill
        if ranks > 1:
            chunk = min(prompt, self.engine.max_num_tokens) if prompt else prefill
            busiest_prefill = min(prefill, max(prefill / ranks, chunk)) * ranks
        if ranks > 1:
            # The replicated part (attention projections, dense layers, lm_head) runs the busiest rank's tokens, the
            # experts all tokens: separate kernels one after the other, each bound by its own weights or FLOPs.
            replicated = 1 - self.routed_flops_share
            busiest_tokens = decode + busiest_prefill
            busiest_sampled = decode + (busiest_prefill / prompt if prompt else 0.0)
            dense_mm = (self.flops_per_token * replicated * busiest_tokens
                        + self.lm_head_flops * busiest_sampled) / self.flops
            routed_mm = self.flops_per_token * (1 - replicated) * tokens / self.flops
            dense_w = self.weights - self.gathered - self.routed_weights
            routed_w = self._weights_read(tokens) - dense_w
            matmul_s = dense_mm + routed_mm
            weights_s = dense_w / self.bw + routed_w / self.bw
            linear_s = roofline(dense_w / self.bw, dense_mm) + roofline(routed_w / self.bw, routed_mm)
        else:
            # MoE: the routed experts' GEMMs are kernels of their own, each expert's at about k/E of the step's tokens
            # (TensorRT-LLM's MoE runner permutes the tokens by expert and runs one grouped GEMM over the experts:
            # CutlassMoeFCRunner::runMoe in cpp/tensorrt_llm/kernels/mixtureOfExperts/moe_kernels.cu at 0.17, the
            # validation rows' version, cutlass_kernels/moe_gemm/moe_kernels.cu in 1.x): they stream
            # their weights at a quarter of a dense layer's FLOPs per byte (Mixtral: 2 of 8), and the attention and
            # lm_head's math does not hide them. Dense models: one group, the experts' empty.
            routed_w = self.routed_weights * self._touched(tokens) if self.routed_weights else 0.0
            dense_w = max(self._weights_read(tokens) - routed_w, 0.0)
            routed_mm = self.flops_per_token * self.routed_flops_share * tokens / self.flops
            dense_mm = (self.flops_per_token * (1 - self.routed_flops_share) * tokens
                        + self.lm_head_flops * sampled) / self.flops
            matmul_s = dense_mm + routed_mm
            linear_s = roofline(dense_w / self.bw, dense_mm) + roofline(routed_w / self.bw, routed_mm)
        kv_s = decode_in / ranks * self.kv_bytes(context) / self.kv_bw
        attn_flops = 4 * self.layers * (self.decode_attn_width * decode * context
                                        + self.attn_width * busiest_prefill * prompt / 2) / ranks
        attn_s = attn_flops / self.attn_flops_rate
        comm_s = self.allreduce_s(tokens)
        overhead_s = self.layers * self.eff.layer_overhead_s
        total = linear_s + max(kv_s, attn_s) + comm_s + overhead_s + drafting_s
        return total, comm_s, matmul_s > weights_s

    def whole_chunks_step(self, decode: float, prefill: float, context: float, prompt: float, chunk: float,
                          own: float = 0.0, cap: float = math.inf) -> tuple[float, float, bool]:
        """step() averaged over the steps of a steady state whose prompts come as whole chunks.

        `prefill` prompt tokens a step on average are n = prefill / chunk chunks: a share n - floor(n) of the steps
        carries floor(n) + 1 of them, the rest floor(n) (the least uneven split whole chunks allow). `own`: this
        request's chunk, in every step averaged (its prompt step). A step's time is convex in its tokens (flat while
        the weights stream, rising with the FLOPs past the corner), so one step with a whole 467-token prompt costs
        the decoders in it more than 1/16 of that prompt in each of 16 steps would.

        Why whole: TensorRT-LLM's scheduler gives a prompt that fits the step's token budget all its tokens in one
        step, with chunked context on or off; it chunks only when the prompts do not all fit maxNumTokens
        (MicroBatchScheduler::operator(), cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp), and that step
        also runs the decoders (in-flight batching, docs/source/advanced/gpt-attention.md). The Triton backend the
        v0.14 online rows ran leaves chunked context off unless configured (tensorrtllm_backend
        inflight_batcher_llm/src/model_instance_state.cc, getExecutorConfigFromParams): there every prompt is one
        step's work, as their 467-token prompts would be with it on. Where one more whole chunk would not fit
        `cap` tokens, the scheduler fills the step by chunking: the even spread.

        Returns (mean seconds, mean all-reduce seconds, compute-bound linear layers at the mean tokens)."""
        even = self.step(decode, own + prefill, context, prompt)
        if prefill <= 0 or chunk <= 0:
            return even
        n = prefill / chunk
        fewer = math.floor(n)
        share = n - fewer
        if not share or decode + own + (fewer + 1) * chunk > cap:
            return even
        low = self.step(decode, own + fewer * chunk, context, prompt)
        high = self.step(decode, own + (fewer + 1) * chunk, context, prompt)
        return ((1 - share) * low[0] + share * high[0], (1 - share) * low[1] + share * high[1], even[2])

    def draft_s(self, decode: float) -> float:
        """The drafter's k sequential passes over the decoding sequences: its weights (or FLOPs), the lm_head for
        each drafted token, and the fixed cost of each of its layers."""
        if not self.draft_tokens or decode <= 0:
            return 0.0
        weights = self.draft_weights / self.bw
        flops = (self.draft_flops_per_token + self.lm_head_flops) * decode / self.flops
        return self.draft_tokens * (self.eff.roofline_s(weights, flops) + self.draft_layers * self.eff.layer_overhead_s)

    # ---- steady state ----

    def capacity(self, kv_capacity_bytes: float, workload: Workload) -> float:
        """Requests the engine holds at once: maxBatchSize (per micro-batch) and the KV cache at I + O tokens."""
        per_seq = max(self.kv_bytes(workload.input_tokens + workload.output_tokens), 1)
        # Attention DP: kv_capacity_bytes is each rank's, for its own sequences.
        return max(min(self.engine.max_batch_size * self.pp, kv_capacity_bytes // per_seq * self.dp), 1)

    def predict(self, workload: Workload, kv_capacity_bytes: float) -> Prediction:
        users = float(workload.concurrency) if workload.concurrency is not None else None
        return self._steady(workload, users, kv_capacity_bytes)

    def _steady(self, workload: Workload, users_or_none: float | None, kv_capacity_bytes: float) -> Prediction:
        isl, osl = max(workload.input_tokens, 1), max(workload.output_tokens, 1)
        cap = self.capacity(kv_capacity_bytes, workload)
        users = cap if users_or_none is None else max(users_or_none, 1.0)
        in_flight = min(users, cap)
        budget = max(self.engine.max_num_tokens, 1) * self.dp  # attention DP: each rank steps its own tokens
        prefill_steps = math.ceil(isl / budget)
        chunk = isl / prefill_steps
        context = isl + osl / 2
        micro = min(in_flight, self.pp)  # micro-batches in the pipeline
        if osl == 1:
            return self._prefill_only(workload, users, in_flight, micro, budget, prefill_steps, chunk)
        # Decoders per step: a request decodes O - 1 of its prefill_steps + O - 1 steps (refined below).
        decoding = in_flight * (osl - 1) / (osl - 1 + prefill_steps) if osl > 1 else 0.0
        limited = False
        ttft_s = tpot_s = step_s = comm_s = 0.0
        compute_bound = False
        for _ in range(4):
            # The token budget of a step caps the decoders the prompt stream can keep fed.
            # (Speculative decoding: a decoder spends 1 + k tokens of the budget and gains `accepted` tokens a step.)
            per_micro_cap = budget / (1 + self.draft_tokens + self.accepted * isl / osl)
            limited = decoding / micro > per_micro_cap
            dec = min(decoding / micro, per_micro_cap)
            others = max(in_flight - 1, 0) / max(in_flight, 1)
            prefill = dec * self.accepted * isl / osl * others  # the other requests' prompt chunks in each step
            step_s, comm_s, compute_bound = self.whole_chunks_step(dec, prefill, context, isl, chunk, cap=budget)
            hop = self.hop_s(dec + prefill)
            tpot_s = self.pp * (step_s + hop) / self.accepted
            # This request's prompt: its chunk in a steady-state step (the others' chunks whole), prefill_steps times.
            first, _, _ = self.whole_chunks_step(dec if in_flight > 1 else 0.0, prefill, context, isl, chunk,
                                                 own=chunk, cap=budget)
            ttft_s = prefill_steps * self.pp * (first + self.hop_s(dec + prefill + chunk))
            if in_flight > 1:
                ttft_s += tpot_s / 2  # waits for the step in progress
            e2e = ttft_s + (osl - 1) * tpot_s
            decoding = in_flight * (osl - 1) * tpot_s / e2e if osl > 1 else 0.0
        if limited:
            throughput = micro * min(decoding / micro, per_micro_cap) / tpot_s * osl / max(osl - 1, 1)
        else:
            throughput = in_flight * osl / (ttft_s + (osl - 1) * tpot_s)
        waiting = max(users - in_flight, 0.0)
        if limited or waiting:
            # Requests beyond what the engine keeps going wait; Little's law puts the wait in TTFT.
            ttft_s = max(ttft_s, users * osl / throughput - (osl - 1) * tpot_s)
        return Prediction(
            workload=workload, in_flight=in_flight, waiting=waiting, decoding=decoding,
            prefill_tokens_per_step=decoding * isl / osl, ttft_ms=ttft_s * 1e3, tpot_ms=tpot_s * 1e3,
            output_tokens_per_s=throughput, step_ms=step_s * 1e3, allreduce_ms=comm_s * 1e3,
            bound="compute" if compute_bound else "memory", pipeline_idle=1 - micro / self.pp,
            token_budget_limited=limited,
        )

    def _prefill_only(self, workload: Workload, users: float, in_flight: float, micro: float, budget: int,
                      prefill_steps: int, chunk: float) -> Prediction:
        """One output token a request (scoring, classification): every step is prompt chunks, as many as the budget."""
        prompts = min(in_flight, micro * budget / chunk)  # requests whose chunk fits a step
        per_micro = prompts * chunk / micro
        step_s, comm_s, compute_bound = self.step(0.0, per_micro, chunk, workload.input_tokens)
        request_s = prefill_steps * self.pp * (step_s + self.hop_s(per_micro))
        throughput = prompts / request_s
        ttft_s = max(request_s, users / throughput)  # requests beyond a step's budget wait their turn
        return Prediction(
            workload=workload, in_flight=in_flight, waiting=max(users - in_flight, 0.0), decoding=0.0,
            prefill_tokens_per_step=prompts * chunk, ttft_ms=ttft_s * 1e3, tpot_ms=0.0,
            output_tokens_per_s=throughput, step_ms=step_s * 1e3, allreduce_ms=comm_s * 1e3,
            bound="compute" if compute_bound else "memory", pipeline_idle=1 - micro / self.pp,
            token_budget_limited=prompts < in_flight,
        )

    def at_rate(self, input_tokens: int, output_tokens: int, requests_per_s: float,
                kv_capacity_bytes: float) -> Prediction:
        """Open loop: the concurrency a steady arrival rate builds up (C = rate x request time), solved by iteration."""
        workload = Workload(input_tokens, output_tokens, None)
        users = 1.0
        pred = self._steady(workload, users, kv_capacity_bytes)
        for _ in range(50):
            e2e = (pred.ttft_ms + (output_tokens - 1) * pred.tpot_ms) / 1e3
            target = max(requests_per_s * e2e, 1.0)
            if abs(target - users) < 0.01 * users:
                break
            users += 0.5 * (target - users)
            pred = self._steady(workload, users, kv_capacity_bytes)
        return pred
