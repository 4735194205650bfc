"""Topology-aware TP/PP/EP planning: the shape of one replica, from the GPUs at hand.

`plan()` is pure: it takes the model architecture, engine limits, the user's
parallelism request and the GPU nodes, and returns a `Plan` (fits or not, with
a reason, a performance estimate and a human explanation). No Kubernetes calls.

Rules (a candidate is tensor parallel `tp` x pipeline parallel `pp` on one GPU
product; MoE models add expert parallel `ep` inside the TP group):
- tp divides the attention heads; tp divides the KV heads, or (tp > KV heads)
  is a multiple of them (KV heads are then replicated); pp <= layers.
- A pipeline stage is tp GPUs of one node: inside one NVLink domain when one
  is wide enough, else over PCIe inside the node (allowed with the cost of
  PCIe all-reduces, and a note: NVIDIA ships TP2/TP4 engines for L4, L40S,
  A10G and H100 PCIe); or, for nodes sharing an `nvidia.com/gpu.clique`
  (multi-node NVLink, GB200 NVL), tp GPUs over whole trays of one clique.
- A replica is pp stages. Replicas are uniform: k stages on each of pp / k
  nodes, k as large as possible (fewest nodes). One GPU product per replica.
- EP (MoE): ep divides tp and the routed experts; TensorRT-LLM runs
  moe_expert_parallel_size = ep x moe_tensor_parallel_size = tp / ep; vLLM's
  --enable-expert-parallel uses ep = tp. Automatic: the widest ep that divides
  both. Memory per GPU is the same for every split of tp (each GPU holds 1/tp
  of the experts); EP trades all-reduces of each expert for token all-to-all.
- fp8 needs compute capability >= 8.9 (not A100), nvfp4 >= 10.0 (Blackwell);
  int8/int4 weight-only and mxfp4 (weight-only without FP4 tensor cores) run
  anywhere. Without GFD labels the capability comes from the product table.
- Only nodes that are not cordoned, match the nodeSelector and tolerate all
  NoSchedule/NoExecute taints count; serving pods always tolerate
  `nvidia.com/gpu` taints (GKE, AKS), so those do not exclude a node.
- Memory: `memory.fit()`: the KV cache the engine would get (TensorRT-LLM:
  kvCacheFreeGpuMemFraction of the memory free after weights; vLLM: the total
  memory fraction) must hold the sized KV cache (maxBatchSize x maxSeqLen, or
  kvCacheMinSequences sequences); usable memory = memory less the product's
  reserve (4-7%) with the fixed runtime overhead charged in the estimate.

Cost model (lower wins, compared in this order):
1. No pipeline when one node's GPUs (or one NVLink clique) can hold the model:
   plans with pp = 1 win over any plan with pp > 1.
2. Among pp = 1 plans, the objective, from the performance model's estimate
   (perf_model.py, via roofline.py) for the workload (default: the spec's limits):
   - throughput: most output tokens/s per GPU at the workload (the fewest
     GPUs per token/s), then fewest GPUs;
   - latency: per product, start from the throughput plan's TP and widen TP
     while each step to the next valid TP cuts one request's estimated time
     (TTFT + output tokens x time per output token; at the workload's
     concurrency when given, else alone) by at least LATENCY_MIN_GAIN (15%),
     up to LATENCY_TP_FACTOR (2) x that TP (NVIDIA's NIM latency profiles use
     about twice the throughput TP); then the product with the lowest request
     time, then fewest GPUs.
   TP over PCIe pays its all-reduces at PCIe speed (and 20 us a hop), so it
   wins only where the HBM saving outweighs it.
3. Among pp > 1 plans (the model fits no single node or clique): least
   communication first (PP stages inside one NVLink domain or clique (3) <
   PP over PCIe inside one node (4) < PP across nodes (5)), then no stranded
   GPUs (a TP1 x PP3 on a 4-GPU node loses to an even split), then higher
   link bandwidth, then the widest TP (each stage fills its domain: TP8 x PP2
   on two DGX H100, not TP1 x PP14), then fewest GPUs.
4. Balanced pipeline stages (pp divides the layers) before uneven ones.
5. More memory headroom, then product name.

Explicit tp/pp/ep are checked with the same rules and honoured whenever they
fit memory (TP over PCIe included); when invalid the plan does not fit and
`reason` names the first rule broken.

The published plans this reproduces are listed in docs/planner.md ("Published
plans") and tested in tests/unit/test_planner_published.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..api.v1alpha1 import EngineSpec, ModelArchitecture, ParallelismSpec
from . import roofline
from .inventory import LABEL_PRODUCT, GPUNode
from .memory import (
    Fit,
    MemoryBreakdown,
    _value,
    draft_shape,
    estimate,
    fit,
    fmt_gib,
    is_mla,
    is_moe,
    total_memory_fraction,
    unsharded_bytes,
)
from .placement import (
    COMM_CLIQUE,
    COMM_NVLINK,
    COMM_PP_NETWORK,
    COMM_PP_NVLINK,
    COMM_PP_PCIE,
    COMM_TP_PCIE,
    UNLISTED_HBM_GBPS,
    UNLISTED_TFLOPS_16BIT,
    GPUGroup,
    Placement,
    eligible_groups,
    place,
    stage_slots,
)

FITS = "Fits"
NO_GPU_NODES = "NoGPUNodes"
NO_SCHEDULABLE_GPU_NODES = "NoSchedulableGPUNodes"
UNKNOWN_GPU_PRODUCT = "UnknownGPUProduct"
INSUFFICIENT_GPU_MEMORY = "InsufficientGPUMemory"
INSUFFICIENT_GPUS = "InsufficientGPUs"
QUANTIZATION_UNSUPPORTED = "QuantizationUnsupported"
TP_DOES_NOT_DIVIDE_HEADS = "TensorParallelDoesNotDivideHeads"
TP_INCOMPATIBLE_KV_HEADS = "TensorParallelIncompatibleWithKVHeads"
TP_EXCEEDS_NVLINK_DOMAIN = "TensorParallelExceedsNVLinkDomain"  # kept name: TP wider than any node or clique
PP_EXCEEDS_LAYERS = "PipelineParallelExceedsLayers"
EP_INVALID = "ExpertParallelInvalid"
ADP_INVALID = "AttentionDataParallelInvalid"
SPECULATIVE_INVALID = "SpeculativeDecodingInvalid"

FP8_MIN_COMPUTE_CAPABILITY = (8, 9)
# NVFP4 needs FP4 tensor cores: Blackwell (compute capability 10.0 and up). MXFP4 runs weight-only without them.
NVFP4_MIN_COMPUTE_CAPABILITY = (10, 0)
MIN_COMPUTE_CAPABILITY = {"fp8": FP8_MIN_COMPUTE_CAPABILITY, "nvfp4": NVFP4_MIN_COMPUTE_CAPABILITY}
_MIN_CC_WHY = {"fp8": "fp8 tensor cores: Ada, Hopper, Blackwell",
               "nvfp4": "FP4 tensor cores: Blackwell; use fp8 on Hopper and Ada"}
MAX_PARALLEL = 64  # ParallelismSpec bounds tp and pp to 64 each
# Each TP step of the latency objective must cut one request's estimated time by this much. The steps NIM's
# published latency profiles take (tests/unit/test_planner_published.py) cut 22-35% in the calibrated model, and
# no published profile stops for want of gain (the 2x cap stops them): 15% keeps every one of them.
LATENCY_MIN_GAIN = 0.15
LATENCY_TP_FACTOR = 2
_COMM_TEXT = {
    COMM_NVLINK: "inside one NVLink domain",
    COMM_CLIQUE: "tensor parallel over a multi-node NVLink clique",
    COMM_TP_PCIE: "tensor parallel over PCIe inside one node (no NVLink between these GPUs; all-reduces at PCIe speed)",
    COMM_PP_NVLINK: "pipeline stages inside one NVLink domain",
    COMM_PP_PCIE: "pipeline stages over PCIe inside one node (no NVLink between them; slower)",
    COMM_PP_NETWORK: "pipeline stages across nodes over the network",
}


@dataclass(frozen=True, slots=True)
class Plan:
    """The shape of one replica, or why there is none.

    When `fits` is False: tensor_parallel/pipeline_parallel are the requested
    values (explicit) or 0 (automatic), gpus/nodes are 0, memory_per_gpu_bytes
    is the per-GPU need of the closest attempt, required_memory_bytes the
    replica's unsharded need and largest_domain_gpus the widest NVLink domain
    (or clique) among eligible nodes.
    """

    fits: bool
    reason: str
    tensor_parallel: int = 0
    pipeline_parallel: int = 0
    gpus_per_replica: int = 0
    nodes_per_replica: int = 0
    gpus_per_node: int = 0
    memory_per_gpu_bytes: int = 0
    usable_memory_per_gpu_bytes: int = 0
    gpu_product: str | None = None
    topology_source: str | None = None
    domain: str = ""
    explanation: str = ""
    breakdown: MemoryBreakdown | None = None
    nodes: tuple[str, ...] = ()
    largest_domain_gpus: int = 0
    required_memory_bytes: int = 0
    explicit: bool = False
    objective: str = "latency"
    spans_clique: bool = False
    expert_parallel: int | None = None
    estimate: roofline.Estimate | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tp_over_pcie: bool = False
    attention_dp: bool = False  # MoE: attention data parallel over the tp GPUs, experts over EP

    @property
    def stages_per_node(self) -> int:
        """Pipeline stages each node of a replica hosts (0 when TP spans nodes)."""
        if not self.fits or self.spans_clique:
            return 0
        return self.gpus_per_node // self.tensor_parallel

    def _estimates_json(self) -> dict[str, Any]:
        e = self.estimate
        if e is None:
            return {}
        w = e.workload
        return {
            "estimate": (f"estimate for {w.input_tokens} input / {w.output_tokens} output tokens at {e.concurrency} "
                         f"request(s) in flight, from a model calibrated on TensorRT-LLM's published tables"),
            "timeToFirstTokenMs": round(e.time_to_first_token_ms, 1),
            "timePerOutputTokenMs": round(e.time_per_output_token_ms, 3),
            "tokensPerSecond": round(e.tokens_per_second, 1),
            "achievableConcurrency": e.concurrency,
            "estimateInputTokens": w.input_tokens,
            "estimateOutputTokens": w.output_tokens,
            "hbmBandwidthGbps": e.hbm_gbps,
            "tflopsPerGpu": round(e.tflops, 1),
            "interconnect": e.tp_link if self.gpus_per_replica > 1 else "",
        }

    def to_json(self) -> dict[str, Any]:
        """The `llmbackend plan -o json` contract (camelCase)."""
        doc: dict[str, Any] = {
            "fits": self.fits,
            "reason": self.reason,
            "tensorParallel": self.tensor_parallel,
            "pipelineParallel": self.pipeline_parallel,
            "gpusPerReplica": self.gpus_per_replica,
            "nodesPerReplica": self.nodes_per_replica,
            "gpusPerNode": self.gpus_per_node,
            "memoryPerGpuBytes": self.memory_per_gpu_bytes,
            "usableMemoryPerGpuBytes": self.usable_memory_per_gpu_bytes,
            "gpuProduct": self.gpu_product,
            "topologySource": self.topology_source,
            "domain": self.domain,
            "nodes": list(self.nodes),
            "explicit": self.explicit,
            "objective": self.objective,
            "explanation": self.explanation,
        }
        if self.expert_parallel is not None:
            doc["expertParallel"] = self.expert_parallel
            doc["attentionDataParallel"] = self.attention_dp
        doc.update(self._estimates_json())
        if self.node_selector:
            doc["nodeSelector"] = dict(self.node_selector)
        if self.breakdown is not None:
            doc["memoryBreakdown"] = self.breakdown.to_json()
        if not self.fits:
            doc["largestDomainGpus"] = self.largest_domain_gpus
            doc["requiredMemoryBytes"] = self.required_memory_bytes
        return doc

    def to_status(self) -> dict[str, Any]:
        """Wire form of `status.plan` (PlanStatus) for a plan that fits."""
        from ..api.v1alpha1 import PlanStatus

        extra = self._estimates_json()
        return PlanStatus(
            tensor_parallel=self.tensor_parallel, pipeline_parallel=self.pipeline_parallel,
            expert_parallel=self.expert_parallel,
            attention_data_parallel=self.attention_dp or None,
            gpus_per_replica=self.gpus_per_replica, nodes_per_replica=self.nodes_per_replica,
            memory_per_gpu_bytes=self.memory_per_gpu_bytes, gpu_product=self.gpu_product,
            spans_nvlink_clique=(self.nodes_per_replica > 1 and self.spans_clique) or None,
            # The planner carries sources as plain strings (inventory: annotation|inferred|explicit); pydantic checks
            # them against the Literal when the status is built.
            topology_source=self.topology_source,  # type: ignore[arg-type]
            explanation=self.explanation[:8192],
            objective=self.objective,
            estimate=extra.get("estimate"),
            time_to_first_token_ms=extra.get("timeToFirstTokenMs"),
            time_per_output_token_ms=extra.get("timePerOutputTokenMs"),
            tokens_per_second=extra.get("tokensPerSecond"),
            achievable_concurrency=extra.get("achievableConcurrency"),
            estimate_input_tokens=extra.get("estimateInputTokens"),
            estimate_output_tokens=extra.get("estimateOutputTokens"),
            hbm_bandwidth_gbps=extra.get("hbmBandwidthGbps"),
            interconnect=extra.get("interconnect") or None,
            node_selector=dict(self.node_selector) or None,
        ).dump()


# ---- validation ----


def tp_rule_violation(arch: ModelArchitecture, tp: int) -> str | None:
    """Reason code when tp is invalid for the model's heads, else None."""
    if arch.num_attention_heads % tp:
        return TP_DOES_NOT_DIVIDE_HEADS
    kv = arch.num_key_value_heads
    if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
        return TP_INCOMPATIBLE_KV_HEADS
    return None


def valid_tensor_parallel(arch: ModelArchitecture, limit: int = MAX_PARALLEL) -> list[int]:
    return [tp for tp in range(1, min(limit, arch.num_attention_heads) + 1) if tp_rule_violation(arch, tp) is None]


def quantization_supported(quantization: Any, compute_capability: tuple[int, int]) -> bool:
    minimum = MIN_COMPUTE_CAPABILITY.get(_value(quantization))
    return minimum is None or compute_capability >= minimum


def valid_expert_parallel(arch: ModelArchitecture, engine: EngineSpec, tp: int) -> list[int]:
    """EP sizes the engine accepts for this TP (empty list: dense model)."""
    experts = arch.num_experts or 0
    if not experts:
        return []
    if _value(engine.backend) == "vllm":  # --enable-expert-parallel: EP spans the TP group
        return [1] + ([tp] if tp > 1 and experts % tp == 0 else [])
    return [ep for ep in range(1, tp + 1) if tp % ep == 0 and experts % ep == 0]


# ---- search ----


@dataclass(slots=True)
class _Candidate:
    group: GPUGroup
    tp: int
    pp: int
    ep: int | None
    mem: MemoryBreakdown
    fit: Fit
    placement: Placement
    est: roofline.Estimate
    attention_dp: bool = False
    layout_note: str = ""  # why this attention layout over the other one (MoE with tp > 1)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def per_gpu(self) -> float:
        return self.est.tokens_per_second / self.gpus

    @property
    def headroom(self) -> float:
        return (self.fit.usable - self.mem.total) / self.fit.usable

    def pipeline_key(self, arch: ModelArchitecture) -> tuple:
        p = self.placement
        return (p.comm_rank, p.stranded > 0, -self.group.bandwidth, -self.tp, self.gpus,
                arch.num_layers % self.pp != 0, -self.headroom, self.group.product)

    def throughput_key(self) -> tuple:
        return (-round(self.per_gpu, 1), self.gpus, self.placement.comm_rank, -self.headroom, self.group.product)

    def latency_key(self) -> tuple:
        return (round(self.est.latency_ms, 1), self.gpus, self.placement.comm_rank, -self.headroom,
                self.group.product)


@dataclass(frozen=True, slots=True)
class _Rejection:
    gpus: int
    tp: int
    pp: int
    product: str
    why: str


class _Search:
    """One planning run: memory estimates are cached per (tp, pp) across products."""

    def __init__(self, arch: ModelArchitecture, engine: EngineSpec, objective: str, ep: int | None = None,
                 workload: roofline.Workload | None = None, attention_dp: bool | None = None) -> None:
        self.arch, self.engine, self.objective, self.explicit_ep = arch, engine, objective, ep
        self.explicit_adp = attention_dp
        self.workload = workload or roofline.default_workload(engine)
        self.total_fraction = total_memory_fraction(engine)
        self._mem: dict[tuple[int, int, bool], MemoryBreakdown] = {}
        self._fit: dict[tuple, Fit] = {}
        self.rejections: list[_Rejection] = []
        self.notes: list[str] = []

    def mem(self, tp: int, pp: int, adp: bool = False) -> MemoryBreakdown:
        m = self._mem.get((tp, pp, adp))
        if m is None:
            m = self._mem[(tp, pp, adp)] = estimate(self.arch, self.engine, tp, pp, adp)
        return m

    def fit(self, group: GPUGroup, tp: int, pp: int, adp: bool = False) -> Fit:
        key = (group.memory_bytes, group.info.reserve_fraction, tp, pp, adp)
        f = self._fit.get(key)
        if f is None:
            f = self._fit[key] = fit(self.mem(tp, pp, adp), group.memory_bytes, self.engine,
                                     group.info.reserve_fraction, self.total_fraction)
        return f

    def layouts(self, tp: int) -> tuple[bool, ...]:
        """Attention layouts to try at this TP: tensor parallel (False) and, for MoE models, data parallel (True)."""
        if not is_moe(self.arch) or tp == 1:
            return (False,)
        if self.explicit_adp is not None:
            return (self.explicit_adp,)
        # vLLM runs one engine core per data-parallel rank, each with its own scheduler stats, and the serving
        # model's stat logger publishes the newest one's counts rather than their sum: the autoscaler would read
        # 1/TP of the load. So vLLM gets attention DP only when the spec asks for it.
        if _value(self.engine.backend) == "vllm":
            return (False,)
        return (False, True)

    def by_objective(self, c: _Candidate) -> tuple:
        return c.throughput_key() if self.objective == "throughput" else c.latency_key()

    def pick_layout(self, cands: list[_Candidate]) -> _Candidate:
        """The better attention layout of one TP on one product by the objective; its note names the other."""
        ranked = sorted(cands, key=lambda c: (c.placement.comm_rank, c.pp) + self.by_objective(c))
        best = ranked[0]
        if len(ranked) > 1:
            best.layout_note = _layout_note(self, best, ranked[1])
        elif is_moe(self.arch) and best.tp > 1 and self.explicit_adp is None and best.pp == 1:
            other = not best.attention_dp
            f = self.fit(best.group, best.tp, 1, other)
            best.layout_note = (f"Layout: {_layout_name(best, self.arch)}; {_layout_short(other, best.tp)} does not fit: "
                                f"{_short_need(self.mem(best.tp, 1, other), f)}.")
        return best

    def ep_for(self, tp: int) -> int | None | bool:
        """EP for this TP: None for dense models, False when the explicit EP does not suit this TP."""
        options = valid_expert_parallel(self.arch, self.engine, tp)
        if not options:
            return None if not self.explicit_ep or self.explicit_ep == 1 else False
        if self.explicit_ep is not None:
            return self.explicit_ep if self.explicit_ep in options else False
        return max(options)

    def candidate(self, group: GPUGroup, tp: int, pp: int, placement: Placement, ep: int | None,
                  adp: bool = False) -> _Candidate:
        mem = self.mem(tp, pp, adp)
        f = self.fit(group, tp, pp, adp)
        if placement.spans_clique:
            link = roofline.tp_link(group.info, roofline.LINK_CLIQUE)
        elif placement.tp_over_pcie:
            link = roofline.tp_link(group.info, roofline.LINK_PCIE)
        else:
            link = roofline.tp_link(group.info, roofline.LINK_NVLINK)
        stage = None
        if pp > 1:
            stage = {COMM_PP_NVLINK: roofline.tp_link(group.info, roofline.LINK_CLIQUE if placement.spans_clique
                                                      else roofline.LINK_NVLINK),
                     COMM_PP_PCIE: roofline.tp_link(group.info, roofline.LINK_PCIE)}.get(
                placement.comm_rank, roofline.network_link())
        est = roofline.estimate(self.arch, self.engine, group.info, tp, pp, link, stage, f.kv_capacity, self.workload,
                                adp)
        return _Candidate(group, tp, pp, ep, mem, f, placement, est, adp)

    def adp_candidate(self, group: GPUGroup, tp: int) -> _Candidate | None:
        """Attention DP over tp GPUs with EP (one stage: pp 1), when it fits and can be placed."""
        ep = self.ep_for(tp)
        if ep is False or not self.fit(group, tp, 1, True).fits:
            return None
        placement = place(group, tp, 1)
        if placement is None:
            return None
        # vLLM's data parallel ranks of one replica start from one process here: inside one node only.
        if placement.spans_clique and _value(self.engine.backend) == "vllm":
            return None
        return self.candidate(group, tp, 1, placement, ep or None, True)

    def best_for_tp(self, group: GPUGroup, tp: int, max_pp: int) -> _Candidate | None:
        """Smallest pp (fewest GPUs) that fits memory and can be placed."""
        ep = self.ep_for(tp)
        if ep is False:
            return None
        slots = stage_slots(group, tp)
        if slots == 0:
            self.rejections.append(_Rejection(tp, tp, 1, group.product,
                                              f"no node or NVLink clique with {tp} GPUs (largest {group.largest_tp})"))
            return None
        top = min(max_pp, slots)
        if not self.fit(group, tp, top).fits:
            # Even the deepest pipeline the nodes allow does not fit: report PP1.
            f = self.fit(group, tp, 1)
            self.rejections.append(_Rejection(tp, tp, 1, group.product, _short_need(self.mem(tp, 1), f)))
            return None
        if not self.fit(group, tp, 1).fits:
            self.rejections.append(_Rejection(tp, tp, 1, group.product, _short_need(self.mem(tp, 1), self.fit(group, tp, 1))))
        # Memory per GPU never grows with pp: bisect for the shallowest pipeline that fits, then place from there.
        lo, hi = 1, top
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fit(group, tp, mid).fits:
                hi = mid
            else:
                lo = mid + 1
        first: tuple[int, Placement] | None = None
        for pp in range(lo, top + 1):
            if not self.fit(group, tp, pp).fits:
                continue
            placement = place(group, tp, pp)
            if placement is None:
                continue
            if first is None:
                first = (pp, placement)
            # An odd pipeline that strands GPUs of its node(s) gives way to a deeper even split on as many nodes.
            if placement.stranded == 0 or pp == 1:
                if placement.nodes_per_replica <= first[1].nodes_per_replica:
                    return self.candidate(group, tp, pp, placement, ep or None)
                break
        if first is not None:
            return self.candidate(group, tp, first[0], first[1], ep or None)
        return None

    def latency_pick(self, group_cands: list[_Candidate]) -> _Candidate:
        """Widen TP from the throughput plan while each step cuts a request's latency by LATENCY_MIN_GAIN."""
        ordered = sorted(group_cands, key=lambda c: c.tp)
        base = min(ordered, key=lambda c: c.throughput_key())
        current = base
        for nxt in ordered:
            if nxt.tp <= current.tp:
                continue
            if nxt.tp > LATENCY_TP_FACTOR * base.tp:
                self.notes.append(f"Latency: stops at TP{current.tp}, at most {LATENCY_TP_FACTOR} x the throughput plan's "
                                  f"TP{base.tp} (NVIDIA's latency profiles use about twice the throughput TP).")
                break
            before, after = current.est.latency_ms, nxt.est.latency_ms
            gain = 1 - after / before
            if gain < LATENCY_MIN_GAIN:
                self.notes.append(f"Latency: TP{nxt.tp} on {nxt.group.product} would cut a request's time only "
                                  f"{before / 1e3:.2f} -> {after / 1e3:.2f} s ({gain:.0%} < {LATENCY_MIN_GAIN:.0%}): "
                                  f"stays TP{current.tp}.")
                break
            self.notes.append(f"Latency: TP{current.tp} -> TP{nxt.tp} on {nxt.group.product} cuts a request's time "
                              f"{before / 1e3:.2f} -> {after / 1e3:.2f} s ({gain:.0%}).")
            current = nxt
        return current


def _short_need(mem: MemoryBreakdown, f: Fit) -> str:
    return (f"needs {fmt_gib(mem.non_kv)} + KV {fmt_gib(mem.kv_cache)} per GPU; "
            f"{fmt_gib(f.usable)} usable leaves KV room for {fmt_gib(f.kv_capacity)}")


def _choose(search: _Search, candidates: list[_Candidate]) -> tuple[_Candidate, list[_Candidate]]:
    pp1 = [c for c in candidates if c.pp == 1]
    if not pp1:
        ranked = sorted(candidates, key=lambda c: c.pipeline_key(search.arch))
        return ranked[0], ranked[1:]
    if search.objective == "throughput":
        ranked = sorted(pp1, key=lambda c: c.throughput_key())
        return ranked[0], ranked[1:]
    by_group: dict[int, list[_Candidate]] = {}
    for c in pp1:
        by_group.setdefault(id(c.group), []).append(c)
    notes_before = len(search.notes)
    picks = []
    for cands in by_group.values():
        mark = len(search.notes)
        pick = search.latency_pick(cands)
        picks.append((pick, search.notes[mark:]))
    picks.sort(key=lambda pn: pn[0].latency_key())
    best, notes = picks[0]
    del search.notes[notes_before:]
    search.notes.extend(notes)
    # The runner-up worth naming for latency is the throughput shape it widened from.
    others = sorted((c for c in pp1 if c is not best), key=lambda c: c.throughput_key())
    return best, others


def plan(
    arch: ModelArchitecture,
    engine: EngineSpec,
    parallelism: ParallelismSpec | None,
    nodes: Iterable[GPUNode],
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Any] | None = None,
    workload: roofline.Workload | None = None,
) -> Plan:
    """Plan one replica's TP x PP (x EP) shape on the given nodes (see module docstring).

    `workload` is the traffic the estimates are for (default: the spec's limits, roofline.default_workload).
    """
    parallelism = parallelism or ParallelismSpec()
    objective = _value(parallelism.objective)
    groups, seen, unknown = eligible_groups(nodes, node_selector, tolerations)
    search = _Search(arch, engine, objective, parallelism.expert_parallel, workload,
                     parallelism.attention_data_parallel)
    explicit = parallelism.tensor_parallel is not None
    base = dict(objective=objective, explicit=explicit, required_memory_bytes=unsharded_bytes(arch, engine),
                largest_domain_gpus=max((g.largest_domain for g in groups), default=0))
    if unknown:
        search.notes.append(_unknown_text(unknown))
    spec = engine.speculative
    if spec is not None and _value(spec.method) == "mtp" and not is_mla(arch):
        return _fail(SPECULATIVE_INVALID, "engine.speculative.method mtp uses the checkpoint's multi-token-prediction "
                     "layer, which DeepSeek-V3/R1-class (MLA) checkpoints carry; this model has none (no kvLoraRank): "
                     "use eagle3 with a draft head or draft_model.", base, 0, 0)
    if explicit:
        return _plan_explicit(search, parallelism, groups, seen, unknown, base)

    if not groups:
        return _no_nodes(seen, unknown, base, 0, 0)
    usable_groups = [g for g in groups if quantization_supported(engine.quantization, g.compute_capability)]
    if not usable_groups:
        return _unsupported_quantization(engine, groups, base, 0, 0)
    if parallelism.expert_parallel and parallelism.expert_parallel > 1 and not is_moe(arch):
        return _fail(EP_INVALID, f"expertParallel {parallelism.expert_parallel} is set but the model has no "
                     "experts (numExperts).", base, 0, 0)
    if parallelism.attention_data_parallel and not is_moe(arch):
        return _fail(ADP_INVALID, _ADP_DENSE_TEXT, base, 0, 0)
    max_pp = min(arch.num_layers, MAX_PARALLEL)
    candidates: list[_Candidate] = []
    for group in usable_groups:
        for tp in valid_tensor_parallel(arch, limit=group.largest_tp):
            layouts = search.layouts(tp)
            found = [search.best_for_tp(group, tp, max_pp)] if False in layouts else []
            if True in layouts:
                found.append(search.adp_candidate(group, tp))
            cands = [c for c in found if c is not None]
            if cands:
                candidates.append(search.pick_layout(cands))
    for group in groups:
        if group not in usable_groups:
            search.rejections.append(_Rejection(0, 0, 0, group.product, _quant_text(engine, group)))
    if not candidates:
        return _insufficient(search, usable_groups, base, 0, 0)
    best, others = _choose(search, candidates)
    return _fitting_plan(search, best, others, base)


def _plan_explicit(search: _Search, par: ParallelismSpec, groups: list[GPUGroup], seen: int, unknown: list[str],
                   base: dict) -> Plan:
    arch, engine = search.arch, search.engine
    tp, pp = par.tensor_parallel or 1, par.pipeline_parallel or 1
    label = f"Explicit TP{tp} x PP{pp}" + (f" x EP{par.expert_parallel}" if par.expert_parallel else "")
    violation = tp_rule_violation(arch, tp)
    if violation == TP_DOES_NOT_DIVIDE_HEADS:
        return _fail(violation, f"{label}: tensor parallel {tp} does not divide the "
                     f"{arch.num_attention_heads} attention heads.", base, tp, pp)
    if violation == TP_INCOMPATIBLE_KV_HEADS:
        return _fail(violation, f"{label}: tensor parallel {tp} neither divides nor is a multiple of the "
                     f"{arch.num_key_value_heads} KV heads.", base, tp, pp)
    if pp > arch.num_layers:
        return _fail(PP_EXCEEDS_LAYERS, f"{label}: {pp} pipeline stages for {arch.num_layers} layers.", base, tp, pp)
    ep = search.ep_for(tp)
    if ep is False:
        options = valid_expert_parallel(arch, engine, tp)
        allowed = ", ".join(str(o) for o in options) if options else "none (dense model)"
        return _fail(EP_INVALID, f"{label}: expert parallel {par.expert_parallel} must divide tensor parallel {tp} "
                     f"and the {arch.num_experts or 0} experts ({_value(engine.backend)} accepts: {allowed}).",
                     base, tp, pp)
    if par.attention_data_parallel:
        if not is_moe(arch):
            return _fail(ADP_INVALID, f"{label}: {_ADP_DENSE_TEXT}", base, tp, pp)
        if tp == 1 or pp > 1:
            return _fail(ADP_INVALID, f"{label}: attention data parallelism spreads one pipeline stage's requests over "
                         "its tensorParallel GPUs: it needs tensorParallel > 1 and pipelineParallel 1.", base, tp, pp)
    if not groups:
        return _no_nodes(seen, unknown, base, tp, pp)
    usable_groups = [g for g in groups if quantization_supported(engine.quantization, g.compute_capability)]
    if not usable_groups:
        return _unsupported_quantization(engine, groups, base, tp, pp)
    wide = [g for g in usable_groups if g.largest_tp >= tp]
    if not wide:
        largest = max(g.largest_tp for g in usable_groups)
        return _fail(TP_EXCEEDS_NVLINK_DOMAIN, f"{label}: tensor parallel {tp} is larger than every node and NVLink "
                     f"clique (largest: {largest} GPUs); TP stays inside one node (NVLink, or PCIe at a cost) "
                     "or one multi-node NVLink clique.", base, tp, pp)
    layouts = search.layouts(tp) if pp == 1 else (False,)
    mem = search.mem(tp, pp, layouts[-1])
    roomy = [(g, adp) for g in wide for adp in layouts if search.fit(g, tp, pp, adp).fits]
    if not roomy:
        best = max(wide, key=lambda g: g.memory_bytes)
        f = search.fit(best, tp, pp, layouts[-1])
        return _fail(INSUFFICIENT_GPU_MEMORY, f"{label}: {_short_need(mem, f)} on {best.product}.\n"
                     f"Memory per GPU: {mem.describe(f.usable)}.", base, tp, pp, memory=mem.total, breakdown=mem)
    per_group: dict[int, list[_Candidate]] = {}
    for g, adp in roomy:
        p = place(g, tp, pp)
        if p is None or (adp and p.spans_clique and _value(engine.backend) == "vllm"):
            continue
        per_group.setdefault(id(g), []).append(search.candidate(g, tp, pp, p, ep or None, adp))
    placed = [search.pick_layout(cands) for cands in per_group.values()]
    if not placed:
        slots = max(stage_slots(g, tp) for g, _ in roomy)
        return _fail(INSUFFICIENT_GPUS, f"{label}: needs {pp} stages of {tp} GPUs (each inside one node or NVLink "
                     f"clique); the eligible nodes offer {slots} such stage(s).", base, tp, pp,
                     memory=mem.total, breakdown=mem)
    placed.sort(key=lambda c: (c.placement.comm_rank,) + search.by_objective(c))
    return _fitting_plan(search, placed[0], placed[1:], base)


# ---- results ----


def _fail(reason: str, text: str, base: dict, tp: int, pp: int, memory: int = 0,
          breakdown: MemoryBreakdown | None = None) -> Plan:
    return Plan(fits=False, reason=reason, tensor_parallel=tp, pipeline_parallel=pp, explanation=text,
                memory_per_gpu_bytes=memory, breakdown=breakdown, **base)


def _unknown_text(names: list[str]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (f"Not used: {shown}: has GPUs of an unknown product (no {LABEL_PRODUCT}, no known "
            "cloud.google.com/gke-accelerator, karpenter.k8s.aws/instance-gpu-name or node.kubernetes.io/instance-type "
            "label): install GPU Feature Discovery or set nvidia.com/gpu.product and nvidia.com/gpu.memory labels.")


def _no_nodes(seen: int, unknown: list[str], base: dict, tp: int, pp: int) -> Plan:
    if seen == 0:
        return _fail(NO_GPU_NODES, "No nodes with allocatable nvidia.com/gpu.", base, tp, pp)
    if unknown:
        return _fail(UNKNOWN_GPU_PRODUCT, _unknown_text(unknown), base, tp, pp)
    return _fail(NO_SCHEDULABLE_GPU_NODES, f"None of the {seen} GPU nodes is eligible: cordoned, not matching "
                 "the nodeSelector, or tainted without a matching toleration.", base, tp, pp)


def _quant_text(engine: EngineSpec, group: GPUGroup) -> str:
    major, minor = group.compute_capability
    quant = _value(engine.quantization)
    need = MIN_COMPUTE_CAPABILITY.get(quant, FP8_MIN_COMPUTE_CAPABILITY)
    return (f"{quant} needs compute capability {need[0]}.{need[1]}+ ({_MIN_CC_WHY.get(quant, 'fp8 tensor cores')}), "
            f"{group.product} is {major}.{minor}")


def _unsupported_quantization(engine: EngineSpec, groups: list[GPUGroup], base: dict, tp: int, pp: int) -> Plan:
    lines = "; ".join(_quant_text(engine, g) for g in groups)
    return _fail(QUANTIZATION_UNSUPPORTED, f"No eligible GPU supports {_value(engine.quantization)}: {lines}.",
                 base, tp, pp)


def _insufficient(search: _Search, groups: list[GPUGroup], base: dict, tp: int, pp: int) -> Plan:
    """Nothing fits: explain with the widest placement and what it would need."""
    arch = search.arch
    group = max(groups, key=lambda g: (g.largest_tp * g.memory_bytes, g.product))
    widest = max(valid_tensor_parallel(arch, limit=max(group.largest_tp, 1)), default=1)
    mem = search.mem(widest, 1)
    f = search.fit(group, widest, 1)
    slots = stage_slots(group, widest)
    need_pp = next((p for p in range(1, min(arch.num_layers, MAX_PARALLEL) + 1)
                    if search.fit(group, widest, p).fits), None)
    lines = [
        f"No plan fits: the model needs {fmt_gib(base['required_memory_bytes'])} per replica unsharded.",
        f"Widest TP: {group.largest_tp} GPUs ({group.product}, {fmt_gib(f.usable)} usable per GPU = "
        f"{100 - round(100 * group.info.reserve_fraction)}% of {fmt_gib(group.memory_bytes)}).",
        f"At TP{widest} x PP1: {mem.describe(f.usable)}; the KV cache would get {fmt_gib(f.kv_capacity)}.",
    ]
    if need_pp is None:
        lines.append(f"Even {min(arch.num_layers, MAX_PARALLEL)} pipeline stages of TP{widest} would not fit.")
    else:
        lines.append(f"TP{widest} x PP{need_pp} would fit memory but needs {need_pp} stages of {widest} GPUs; "
                     f"the eligible nodes offer {slots}.")
    lines.append("Reduce maxBatchSize/maxSeqLen (or set kvCacheMinSequences), quantize (fp8, int4_awq; nvfp4 on Blackwell) or add GPUs.")
    lines.extend(n for n in search.notes if n.startswith("Not used"))
    return _fail(INSUFFICIENT_GPU_MEMORY, "\n".join(lines), base, tp, pp, memory=mem.total, breakdown=mem)


def _memory_line(search: _Search, best: _Candidate) -> str:
    g, f, m = best.group, best.fit, best.mem
    if search.total_fraction is not None:
        budget = f"gpu_memory_utilization {search.total_fraction:g} of {fmt_gib(g.memory_bytes)}"
    else:
        budget = (f"{100 - round(100 * g.info.reserve_fraction)}% of {fmt_gib(g.memory_bytes)}; the KV cache gets "
                  f"kvCacheFreeGpuMemFraction {search.engine.kv_cache_free_gpu_mem_fraction:g} of the rest")
    sized = ("worst case maxBatchSize x maxSeqLen" if not getattr(search.engine, "kv_cache_min_sequences", None)
             else f"kvCacheMinSequences {m.sequences} x maxSeqLen")
    return (f"Memory per GPU: {m.describe(f.usable)} ({int(100 * m.total / f.usable)}% of usable = {budget}); "
            f"KV sized for {sized}; the engine's KV cache ({fmt_gib(f.kv_capacity)}) holds {f.concurrency} "
            f"full-length sequences at once (maxBatchSize {search.engine.max_batch_size}).")


_ADP_DENSE_TEXT = ("attentionDataParallel is set but the model has no experts (numExperts): attention data parallelism "
                   "with expert parallelism is for mixture-of-experts models; for a dense model add replicas instead.")


def _layout_short(adp: bool, tp: int) -> str:
    return f"attention data parallel x{tp}" if adp else f"TP{tp} attention"


def _layout_name(c: _Candidate, arch: ModelArchitecture) -> str:
    ep = f" with EP{c.ep}" if c.ep else ""
    if c.attention_dp:
        return (f"attention data parallel x{c.tp}{ep} (each of the {c.tp} GPUs attends for its own requests and holds "
                f"their KV cache; attention weights replicated, routed experts spread)")
    return f"TP{c.tp} attention{ep} (every GPU holds a 1/{c.tp} share of each request's attention" + (
        "; MLA's latent KV is copied to every GPU)" if is_mla(arch) else ")")


def _layout_note(search: _Search, best: _Candidate, other: _Candidate) -> str:
    """Which attention layout, why (KV capacity, throughput, latency at the workload), and the runner-up."""
    w = best.est.workload
    def figures(c: _Candidate) -> str:
        return (f"its KV cache holds {c.fit.concurrency:,} full-length sequences, ~{c.per_gpu:,.0f} output tokens/s "
                f"per GPU and ~{c.est.latency_ms / 1e3:.2f} s a request at {c.est.concurrency:,} in flight")
    why = "throughput per GPU" if search.objective == "throughput" else "a request's time"
    return (f"Layout: {_layout_name(best, search.arch)}, chosen for {why} at {w.input_tokens}/{w.output_tokens} tokens"
            + (f" and {w.concurrency:,} requests" if w.concurrency is not None else "")
            + f": {figures(best)}. Runner-up: {_layout_short(other.attention_dp, other.tp)}: {figures(other)}.")


def _fitting_plan(search: _Search, best: _Candidate, others: list[_Candidate], base: dict) -> Plan:
    p = best.placement
    gpus = best.gpus
    shape = f"TP{best.tp} x PP{best.pp}" + (f" x EP{best.ep}" if best.ep else "") + (
        f" with attention data parallel x{best.tp}" if best.attention_dp else "")
    lines = [
        f"Plan: {shape} = {gpus} GPU(s) per replica on {p.nodes_per_replica} node(s) "
        f"of {best.group.product}, {_COMM_TEXT[p.comm_rank]}; objective {search.objective}"
        + (" (explicit)." if base["explicit"] else "."),
        "Estimate (performance model calibrated on TensorRT-LLM's published tables; an estimate, not a promise): "
        + best.est.describe(gpus) + ".",
        _memory_line(search, best),
        f"Domain: {p.domain}; topology from {p.source}.",
    ]
    if best.ep:
        assert search.arch.num_experts is not None  # an EP degree is only chosen for MoE architectures
        moe_tp = best.tp // best.ep
        lines.append(f"Experts: {search.arch.num_experts} routed experts over EP{best.ep} "
                     f"({search.arch.num_experts // best.ep} per EP rank), each expert split over TP{moe_tp} "
                     f"(moe_expert_parallel_size {best.ep} x moe_tensor_parallel_size {moe_tp} = TP{best.tp}).")
    if best.layout_note:
        lines.append(best.layout_note)
    spec = search.engine.speculative
    if spec is not None:
        a = spec.acceptance
        k = spec.draft_tokens
        per_step = (1 - a ** (k + 1)) / (1 - a)
        draft_bytes, _ = draft_shape(search.arch, search.engine)
        source = "engine.speculative.acceptanceRate" if spec.acceptance_rate is not None else (
            "the default for the method; set engine.speculative.acceptanceRate from your engine's metrics")
        lines.append(f"Speculative decoding: {_value(spec.method)}, {k} draft token(s) a step, each accepted with "
                     f"probability {a:g} ({source}): ~{per_step:.2f} output tokens a step for verifying {k + 1}; the "
                     f"drafter adds {fmt_gib(draft_bytes / best.tp)} of weights per GPU.")
    lines.extend(n for n in search.notes if n.startswith("Latency"))
    rejected = [r for r in search.rejections if r.gpus and r.gpus < gpus and r.product == best.group.product]
    if rejected:
        r = max(rejected, key=lambda r: (r.gpus, r.tp))
        lines.append(f"Rejected: TP{r.tp} x PP{r.pp} on {r.product} ({r.gpus} GPU(s)): {r.why}.")
    if others:
        o = others[0]
        lines.append(f"Next best: TP{o.tp} x PP{o.pp}" + (" with attention data parallel" if o.attention_dp else "")
                     + f" on {o.group.product} ({o.gpus} GPU(s), "
                     f"{_COMM_TEXT[o.placement.comm_rank]}; ~{o.est.time_per_output_token_ms:.1f} ms per token, "
                     f"~{o.per_gpu:,.0f} output tokens/s per GPU).")
    for r in (r for r in search.rejections if not r.gpus):
        lines.append(f"Not used: {r.product}: {r.why}.")
    lines.extend(n for n in search.notes if n.startswith("Not used"))
    if not best.group.listed:
        lines.append(f"Note: {best.group.product} is not in the product table; HBM bandwidth assumed "
                     f"{UNLISTED_HBM_GBPS} GB/s and {UNLISTED_TFLOPS_16BIT} TFLOPS for the estimate.")
    w, engine = best.est.workload, search.engine
    if w.input_tokens > engine.max_input_len or w.input_tokens + w.output_tokens > engine.max_seq_len:
        lines.append(f"Note: the estimate's requests ({w.input_tokens} input + {w.output_tokens} output tokens) exceed "
                     f"maxInputLen {engine.max_input_len} / maxSeqLen {engine.max_seq_len}: the engine would reject "
                     "them; raise the limits or estimate shorter requests.")
    if p.tp_over_pcie:
        lines.append(f"Note: tensor parallel over PCIe ({best.est.tp_link}): no NVLink between these GPUs, "
                     f"all-reduces cost ~{best.est.allreduce_ms:.2f} ms a step; preferred to pipeline stages over PCIe.")
    if p.comm_rank == COMM_PP_PCIE:
        lines.append("Warning: pipeline stages talk over PCIe (no NVLink between these GPUs).")
    return Plan(
        fits=True, reason=FITS, tensor_parallel=best.tp, pipeline_parallel=best.pp, gpus_per_replica=gpus,
        nodes_per_replica=p.nodes_per_replica, gpus_per_node=p.gpus_per_node,
        memory_per_gpu_bytes=best.mem.total, usable_memory_per_gpu_bytes=best.fit.usable,
        gpu_product=best.group.product, topology_source=p.source, domain=p.domain,
        explanation="\n".join(lines), breakdown=best.mem, nodes=p.names, spans_clique=p.spans_clique,
        expert_parallel=best.ep, estimate=best.est, node_selector=(best.group.selector,),
        tp_over_pcie=p.tp_over_pcie, attention_dp=best.attention_dp, **base,
    )


def plan_for_spec(spec: Any, nodes: Iterable[GPUNode], workload: roofline.Workload | None = None) -> Plan:
    """Convenience: plan an LLMBackendSpec (resolves presets, applies scheduling)."""
    from ..api.catalog import resolve_architecture

    scheduling = spec.scheduling
    tolerations = [t.dump() for t in scheduling.tolerations] if scheduling.tolerations else None
    return plan(resolve_architecture(spec.model), spec.engine, spec.parallelism, nodes,
                node_selector=scheduling.node_selector, tolerations=tolerations, workload=workload)
