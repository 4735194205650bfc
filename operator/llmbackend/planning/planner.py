"""Topology-aware TP/PP planning: the shape of one replica, from the GPUs at hand.

`plan()` is pure: it takes the model architecture, engine limits, the user's
parallelism request and the GPU nodes, and returns a `Plan` (fits or not, with
a reason and a human explanation). No Kubernetes calls.

Rules (a candidate is tensor parallel `tp` x pipeline parallel `pp` on one GPU
product):
- tp divides the attention heads; tp divides the KV heads, or (tp > KV heads)
  is a multiple of them (KV heads are then replicated); pp <= layers.
- A pipeline stage is tp GPUs inside one NVLink domain of one node, or, for
  nodes sharing an `nvidia.com/gpu.clique` (multi-node NVLink, GB200 NVL), tp
  GPUs over whole trays of one clique (tp a multiple of the tray's GPUs).
- A replica is pp stages. A domain of D GPUs offers D // tp stage slots and a
  node offers the sum over its domains (capped by allocatable GPUs). Replicas
  are uniform: k stages on each of pp / k nodes, k as large as possible
  (fewest nodes); stages on one node talk over NVLink when they share a
  domain, else over PCIe (the last resort on PCIe-only servers such as L40S:
  flagged in the explanation); stages on different nodes talk over the network.
- Replicas are homogeneous: one GPU product (and memory size) per replica.
- fp8 needs compute capability >= 8.9 (not A100); int8/int4 weight-only run
  anywhere.
- Only nodes that are not cordoned, match the nodeSelector and tolerate all
  NoSchedule/NoExecute taints count; capacity is allocatable `nvidia.com/gpu`.
- Memory: `memory.estimate()` of the most loaded GPU must be <= usable memory
  (90% of the labelled memory), with the full KV budget of maxBatchSize x
  maxSeqLen tokens.

Cost model (lower wins, compared in this order):
1. No pipeline when one NVLink domain can hold the model: plans with pp = 1
   (TP inside one domain, or over one multi-node NVLink clique) win over any
   plan with pp > 1, even one with fewer GPUs (published practice: TP8 for
   Llama-405B fp8 on a DGX H100, not TP1 x PP7).
2. Among pp = 1 plans, fewest GPUs per replica: nothing that fits one GPU is
   sharded. Among pp > 1 plans (the model fits no single domain), least
   communication first (see 3), then the widest TP a stage's domain allows
   (each stage fills one NVLink domain: TP8 x PP2 on two DGX H100, not
   TP1 x PP14), then fewest GPUs.
3. Communication: inside one node's NVLink domain (0) < TP over a multi-node
   NVLink clique (1) < PP stages within one NVLink domain or clique (2) < PP
   stages over PCIe within one node (3) < PP across nodes (4); then higher
   NVLink bandwidth of the product.
4. Balanced pipeline stages (pp divides the layers) before uneven ones; uneven
   stages are allowed, and the memory estimate charges the largest stage.
5. Objective: latency prefers larger tp (fewer stages); throughput prefers
   smaller tp (more, smaller replicas per node).
6. More memory headroom (fraction of usable memory left), then product name.

Explicit tp/pp are checked with the same rules; when invalid the plan does not
fit and `reason` names the first rule broken.

Published data points this reproduces with the default engine (maxBatchSize 64,
maxSeqLen 4096, so a KV budget of 262,144 tokens): Llama-3.1-8B bf16 -> TP1 on
H100; Llama-3.1-70B bf16 -> TP4 on DGX H100 (TP2 needs ~110 GiB per GPU);
Llama-3.1-70B fp8 -> TP2 on H100, TP1 on H200; Llama-3.1-405B fp8 -> TP8 on
DGX H100; Llama-3.1-405B bf16 -> TP8 x PP2 on two DGX H100.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..api.v1alpha1 import EngineSpec, ModelArchitecture, ParallelismSpec
from .inventory import GPUNode, describe_gpus, domain_kind, node_matches, nvlink_bandwidth_gbps
from .memory import MemoryBreakdown, estimate, fmt_gib, unsharded_bytes, usable_bytes, _value

FITS = "Fits"
NO_GPU_NODES = "NoGPUNodes"
NO_SCHEDULABLE_GPU_NODES = "NoSchedulableGPUNodes"
INSUFFICIENT_GPU_MEMORY = "InsufficientGPUMemory"
INSUFFICIENT_GPUS = "InsufficientGPUs"
QUANTIZATION_UNSUPPORTED = "QuantizationUnsupported"
TP_DOES_NOT_DIVIDE_HEADS = "TensorParallelDoesNotDivideHeads"
TP_INCOMPATIBLE_KV_HEADS = "TensorParallelIncompatibleWithKVHeads"
TP_EXCEEDS_NVLINK_DOMAIN = "TensorParallelExceedsNVLinkDomain"
PP_EXCEEDS_LAYERS = "PipelineParallelExceedsLayers"

FP8_MIN_COMPUTE_CAPABILITY = (8, 9)
MAX_PARALLEL = 64  # ParallelismSpec bounds tp and pp to 64 each

_COMM_TEXT = {
    0: "inside one NVLink domain",
    1: "tensor parallel over a multi-node NVLink clique",
    2: "pipeline stages inside one NVLink domain",
    3: "pipeline stages over PCIe inside one node (no NVLink between them; slower)",
    4: "pipeline stages across nodes over the network",
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

    @property
    def stages_per_node(self) -> int:
        """Pipeline stages each node of a replica hosts (0 when TP spans nodes)."""
        if not self.fits or self.spans_clique:
            return 0
        return self.gpus_per_node // self.tensor_parallel

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
        if self.breakdown is not None:
            doc["memoryBreakdown"] = self.breakdown.to_json()
        if not self.fits:
            doc["largestDomainGpus"] = self.largest_domain_gpus
            doc["requiredMemoryBytes"] = self.required_memory_bytes
        return doc

    def to_status(self) -> dict[str, Any]:
        """Wire form of `status.plan` (PlanStatus) for a plan that fits."""
        from ..api.v1alpha1 import PlanStatus

        return PlanStatus(
            tensor_parallel=self.tensor_parallel, pipeline_parallel=self.pipeline_parallel,
            gpus_per_replica=self.gpus_per_replica, nodes_per_replica=self.nodes_per_replica,
            memory_per_gpu_bytes=self.memory_per_gpu_bytes, gpu_product=self.gpu_product,
            spans_nvlink_clique=(self.nodes_per_replica > 1 and self.spans_clique) or None,
            topology_source=self.topology_source, explanation=self.explanation[:8192],
        ).dump()


# ---- grouping nodes ----


@dataclass(slots=True)
class _Shape:
    """Nodes of one product with identical GPU layout (5,000 nodes -> a few shapes)."""

    gpu_count: int
    domains: tuple[tuple[int, ...], ...]
    names: list[str] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)

    def slots(self, tp: int) -> tuple[int, int]:
        """(stage slots on the node, most slots inside one domain) for stages of tp GPUs."""
        per_domain = [len(d) // tp for d in self.domains]
        return min(sum(per_domain), self.gpu_count // tp), min(max(per_domain, default=0), self.gpu_count // tp)

    def domain_for(self, tp: int) -> tuple[int, ...]:
        return next((d for d in self.domains if len(d) >= tp), ())


@dataclass(slots=True)
class _Group:
    """Eligible nodes of one GPU product and memory size."""

    product: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    shapes: dict[tuple, _Shape] = field(default_factory=dict)
    # clique id -> gpus per tray -> node names (trays of one clique, for TP over trays)
    cliques: dict[str, dict[int, list[str]]] = field(default_factory=dict)
    clique_sources: set[str] = field(default_factory=set)

    @property
    def bandwidth(self) -> int:
        return nvlink_bandwidth_gbps(self.product)

    @property
    def largest_local_domain(self) -> int:
        return max((min(max(len(d) for d in s.domains), s.gpu_count) for s in self.shapes.values() if s.domains), default=0)

    @property
    def largest_domain(self) -> int:
        clique = max((g * len(n) for trays in self.cliques.values() for g, n in trays.items()), default=0)
        return max(self.largest_local_domain, clique)

    @property
    def total_gpus(self) -> int:
        return sum(s.gpu_count * len(s.names) for s in self.shapes.values())


def _eligible_groups(nodes: Iterable[GPUNode], node_selector, tolerations) -> tuple[list[_Group], int]:
    """Group eligible nodes by product; also return how many GPU nodes were seen."""
    tolerations = list(tolerations or [])
    groups: dict[tuple, _Group] = {}
    seen = 0
    for node in nodes:
        if node.gpu_count <= 0:
            continue
        seen += 1
        if not node_matches(node, node_selector, tolerations):
            continue
        key = (node.product, node.memory_bytes)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(node.product, node.memory_bytes, node.compute_capability)
        shape_key = (node.gpu_count, node.nvlink_domains)
        shape = group.shapes.get(shape_key)
        if shape is None:
            shape = group.shapes[shape_key] = _Shape(node.gpu_count, node.nvlink_domains)
        shape.names.append(node.name)
        shape.sources.add(node.topology_source)
        if node.clique:
            group.cliques.setdefault(node.clique, {}).setdefault(node.gpu_count, []).append(node.name)
            group.clique_sources.add(node.topology_source)
    return sorted(groups.values(), key=lambda g: (g.product, g.memory_bytes)), seen


# ---- placement ----


@dataclass(frozen=True, slots=True)
class _Placement:
    nodes_per_replica: int
    gpus_per_node: int
    comm_rank: int
    names: tuple[str, ...]
    domain: str
    source: str
    spans_clique: bool = False


def _divisors_desc(n: int) -> list[int]:
    return [k for k in range(n, 0, -1) if n % k == 0]


def _source(sources: set[str]) -> str:
    return "inferred" if "inferred" in sources else "annotation"


def _place_local(group: _Group, tp: int, pp: int) -> _Placement | None:
    """pp stages of tp GPUs, each inside one node-local NVLink domain."""
    rows = []  # (slots, slots in best domain, shape)
    for shape in group.shapes.values():
        slots, in_domain = shape.slots(tp)
        if slots > 0:
            rows.append((slots, in_domain, shape))
    if not rows:
        return None
    # Prefer shapes where all of a node's stages share one domain, then roomier nodes.
    rows.sort(key=lambda r: (-r[1], -r[0], r[2].gpu_count))
    for k in _divisors_desc(pp):
        need = pp // k
        chosen: list[tuple[int, int, _Shape]] = []
        count = 0
        for row in rows:
            if row[0] >= k:
                chosen.append(row)
                count += len(row[2].names)
                if count >= need:
                    break
        if count < need:
            continue
        names: list[str] = []
        for _, _, shape in chosen:
            names.extend(shape.names[: need - len(names)])
        shape = chosen[0][2]
        dom = shape.domain_for(tp)
        kind = domain_kind(len(dom), group.product)
        if pp == 1:
            rank = 0
            desc = f"{names[0]} GPUs {describe_gpus(dom)} ({kind})"
        elif need == 1:
            rank = 2 if chosen[0][1] >= pp else 3
            if rank == 2:
                desc = f"{names[0]} GPUs {describe_gpus(dom)} ({kind}), {pp} stages of {tp} GPUs"
            else:
                desc = (f"{names[0]}: {pp} stages of {tp} GPUs in separate domains "
                        f"({kind} inside a stage, PCIe between stages)")
        else:
            rank = 4
            desc = (f"{', '.join(names)}: {k} stage(s) of {tp} GPUs per node, each in a domain like "
                    f"GPUs {describe_gpus(dom)} ({kind}); stages across nodes over the network")
        sources: set[str] = set().union(*(r[2].sources for r in chosen))
        return _Placement(need, k * tp, rank, tuple(names), desc, _source(sources))
    return None


def _place_clique(group: _Group, tp: int, pp: int) -> _Placement | None:
    """pp stages of tp GPUs, each over whole trays of one multi-node NVLink clique."""
    options = []  # (stage slots, clique, tray gpus, names)
    for clique, trays in group.cliques.items():
        for gpus, names in trays.items():
            if tp > gpus and tp % gpus == 0:
                per_stage = tp // gpus
                slots = len(names) // per_stage
                if slots:
                    options.append((slots, clique, gpus, sorted(names)))
    if not options:
        return None
    options.sort(key=lambda o: (-o[0], o[1]))
    slots, clique, gpus, names = options[0]
    per_stage = tp // gpus
    if slots >= pp:
        used = names[: pp * per_stage]
        rank = 1 if pp == 1 else 2
        desc = f"clique {clique}: {', '.join(used)} (multi-node NVLink, {tp} GPUs per stage)"
        return _Placement(pp * per_stage, gpus, rank, tuple(used), desc, _source(group.clique_sources), True)
    # Stages in different cliques: PP over the network.
    same_gpus = [o for o in options if o[2] == gpus]
    if sum(o[0] for o in same_gpus) < pp:
        return None
    used: list[str] = []
    left = pp
    for s, _, _, n in same_gpus:
        take = min(s, left)
        used.extend(n[: take * per_stage])
        left -= take
        if not left:
            break
    desc = f"{', '.join(used)}: stages over NVLink cliques, across cliques over the network"
    return _Placement(pp * per_stage, gpus, 4, tuple(used), desc, _source(group.clique_sources), True)


def _place(group: _Group, tp: int, pp: int) -> _Placement | None:
    local = _place_local(group, tp, pp)
    clique = _place_clique(group, tp, pp) if tp > group.largest_local_domain else None
    options = [p for p in (local, clique) if p is not None]
    return min(options, key=lambda p: (p.comm_rank, p.nodes_per_replica)) if options else None


def _stage_slots(group: _Group, tp: int) -> int:
    """All stage slots of tp GPUs in the group (upper bound on pp)."""
    total = sum(shape.slots(tp)[0] * len(shape.names) for shape in group.shapes.values())
    if tp > group.largest_local_domain:
        total += sum(len(n) // (tp // g) for trays in group.cliques.values() for g, n in trays.items()
                     if tp > g and tp % g == 0)
    return total


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
    if _value(quantization) == "fp8":
        return compute_capability >= FP8_MIN_COMPUTE_CAPABILITY
    return True


# ---- search ----


@dataclass(frozen=True, slots=True)
class _Candidate:
    key: tuple
    group: _Group
    tp: int
    pp: int
    mem: MemoryBreakdown
    usable: int
    placement: _Placement


@dataclass(frozen=True, slots=True)
class _Rejection:
    gpus: int
    tp: int
    pp: int
    product: str
    why: str


class _Search:
    """One planning run: memory estimates are cached per (tp, pp) across products."""

    def __init__(self, arch: ModelArchitecture, engine: EngineSpec, objective: str) -> None:
        self.arch, self.engine, self.objective = arch, engine, objective
        self._mem: dict[tuple[int, int], MemoryBreakdown] = {}
        self.rejections: list[_Rejection] = []

    def mem(self, tp: int, pp: int) -> MemoryBreakdown:
        m = self._mem.get((tp, pp))
        if m is None:
            m = self._mem[(tp, pp)] = estimate(self.arch, self.engine, tp, pp)
        return m

    def candidate(self, group: _Group, tp: int, pp: int, placement: _Placement) -> _Candidate:
        mem = self.mem(tp, pp)
        usable = usable_bytes(group.memory_bytes)
        gpus = tp * pp
        links = -group.bandwidth if (tp > 1 or pp > 1) else 0
        rest = (
            self.arch.num_layers % pp != 0,
            -tp if self.objective == "latency" else tp,
            -(usable - mem.total) / usable,
            group.product,
        )
        if pp == 1:
            key = (0, gpus, placement.comm_rank, links) + rest
        else:
            key = (1, placement.comm_rank, links, -tp, gpus) + rest
        return _Candidate(key, group, tp, pp, mem, usable, placement)

    def best_for_tp(self, group: _Group, tp: int, max_pp: int) -> _Candidate | None:
        """Smallest pp (fewest GPUs) that fits memory and can be placed."""
        usable = usable_bytes(group.memory_bytes)
        slots = _stage_slots(group, tp)
        if slots == 0:
            self.rejections.append(_Rejection(tp, tp, 1, group.product,
                                              f"no NVLink domain of {tp} GPUs (largest {group.largest_domain})"))
            return None
        top = min(max_pp, slots)
        if self.mem(tp, top).total > usable:
            # Even the deepest pipeline the nodes allow does not fit: report PP1.
            need = self.mem(tp, 1).total
            self.rejections.append(_Rejection(tp, tp, 1, group.product,
                                              f"needs {fmt_gib(need)} per GPU > {fmt_gib(usable)} usable"))
            return None
        for pp in range(1, top + 1):
            m = self.mem(tp, pp)
            if m.total > usable:
                if pp == 1:
                    self.rejections.append(_Rejection(tp, tp, 1, group.product,
                                                      f"needs {fmt_gib(m.total)} per GPU > {fmt_gib(usable)} usable"))
                continue
            placement = _place(group, tp, pp)
            if placement is not None:
                return self.candidate(group, tp, pp, placement)
        return None


def plan(
    arch: ModelArchitecture,
    engine: EngineSpec,
    parallelism: ParallelismSpec | None,
    nodes: Iterable[GPUNode],
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Any] | None = None,
) -> Plan:
    """Plan one replica's TP x PP shape on the given nodes (see module docstring)."""
    parallelism = parallelism or ParallelismSpec()
    objective = _value(parallelism.objective)
    groups, seen = _eligible_groups(nodes, node_selector, tolerations)
    search = _Search(arch, engine, objective)
    explicit = parallelism.tensor_parallel is not None
    base = dict(objective=objective, explicit=explicit, required_memory_bytes=unsharded_bytes(arch, engine),
                largest_domain_gpus=max((g.largest_domain for g in groups), default=0))
    if explicit:
        return _plan_explicit(search, parallelism, groups, seen, base)

    if not groups:
        return _no_nodes(seen, base, 0, 0)
    usable_groups = [g for g in groups if quantization_supported(engine.quantization, g.compute_capability)]
    if not usable_groups:
        return _unsupported_quantization(engine, groups, base, 0, 0)
    max_pp = min(arch.num_layers, MAX_PARALLEL)
    candidates: list[_Candidate] = []
    for group in usable_groups:
        for tp in valid_tensor_parallel(arch, limit=group.largest_domain):
            cand = search.best_for_tp(group, tp, max_pp)
            if cand is not None:
                candidates.append(cand)
    for group in groups:
        if group not in usable_groups:
            search.rejections.append(_Rejection(0, 0, 0, group.product, _quant_text(engine, group)))
    if not candidates:
        return _insufficient(search, usable_groups, base, 0, 0)
    candidates.sort(key=lambda c: c.key)
    return _fitting_plan(search, candidates[0], candidates[1:], base)


def _plan_explicit(search: _Search, par: ParallelismSpec, groups: list[_Group], seen: int, base: dict) -> Plan:
    arch, engine = search.arch, search.engine
    tp, pp = par.tensor_parallel or 1, par.pipeline_parallel or 1
    label = f"Explicit TP{tp} x PP{pp}"
    violation = tp_rule_violation(arch, tp)
    if violation == TP_DOES_NOT_DIVIDE_HEADS:
        return _fail(violation, f"{label}: tensor parallel {tp} does not divide the "
                     f"{arch.num_attention_heads} attention heads.", base, tp, pp)
    if violation == TP_INCOMPATIBLE_KV_HEADS:
        return _fail(violation, f"{label}: tensor parallel {tp} neither divides nor is a multiple of the "
                     f"{arch.num_key_value_heads} KV heads.", base, tp, pp)
    if pp > arch.num_layers:
        return _fail(PP_EXCEEDS_LAYERS, f"{label}: {pp} pipeline stages for {arch.num_layers} layers.", base, tp, pp)
    if not groups:
        return _no_nodes(seen, base, tp, pp)
    usable_groups = [g for g in groups if quantization_supported(engine.quantization, g.compute_capability)]
    if not usable_groups:
        return _unsupported_quantization(engine, groups, base, tp, pp)
    wide = [g for g in usable_groups if g.largest_domain >= tp]
    if not wide:
        largest = max(g.largest_domain for g in usable_groups)
        return _fail(TP_EXCEEDS_NVLINK_DOMAIN, f"{label}: tensor parallel {tp} is larger than every NVLink domain "
                     f"(largest: {largest} GPUs); TP must stay inside one NVLink domain.", base, tp, pp)
    mem = search.mem(tp, pp)
    roomy = [g for g in wide if mem.total <= usable_bytes(g.memory_bytes)]
    if not roomy:
        best = max(wide, key=lambda g: g.memory_bytes)
        usable = usable_bytes(best.memory_bytes)
        return _fail(INSUFFICIENT_GPU_MEMORY, f"{label}: needs {fmt_gib(mem.total)} per GPU, "
                     f"{best.product} has {fmt_gib(usable)} usable.\nMemory per GPU: {mem.describe(usable)}.",
                     base, tp, pp, memory=mem.total, breakdown=mem)
    placed = [search.candidate(g, tp, pp, p) for g in roomy if (p := _place(g, tp, pp)) is not None]
    if not placed:
        slots = max(_stage_slots(g, tp) for g in roomy)
        return _fail(INSUFFICIENT_GPUS, f"{label}: needs {pp} stages of {tp} GPUs (each inside one NVLink "
                     f"domain); the eligible nodes offer {slots} such stage(s).", base, tp, pp,
                     memory=mem.total, breakdown=mem)
    placed.sort(key=lambda c: c.key)
    return _fitting_plan(search, placed[0], placed[1:], base)


# ---- results ----


def _fail(reason: str, text: str, base: dict, tp: int, pp: int, memory: int = 0,
          breakdown: MemoryBreakdown | None = None) -> Plan:
    return Plan(fits=False, reason=reason, tensor_parallel=tp, pipeline_parallel=pp, explanation=text,
                memory_per_gpu_bytes=memory, breakdown=breakdown, **base)


def _no_nodes(seen: int, base: dict, tp: int, pp: int) -> Plan:
    if seen == 0:
        return _fail(NO_GPU_NODES, "No nodes with allocatable nvidia.com/gpu.", base, tp, pp)
    return _fail(NO_SCHEDULABLE_GPU_NODES, f"None of the {seen} GPU nodes is eligible: cordoned, not matching "
                 "the nodeSelector, or tainted without a matching toleration.", base, tp, pp)


def _quant_text(engine: EngineSpec, group: _Group) -> str:
    major, minor = group.compute_capability
    return (f"{_value(engine.quantization)} needs compute capability "
            f"{FP8_MIN_COMPUTE_CAPABILITY[0]}.{FP8_MIN_COMPUTE_CAPABILITY[1]}+, {group.product} is {major}.{minor}")


def _unsupported_quantization(engine: EngineSpec, groups: list[_Group], base: dict, tp: int, pp: int) -> Plan:
    lines = "; ".join(_quant_text(engine, g) for g in groups)
    return _fail(QUANTIZATION_UNSUPPORTED, f"No eligible GPU supports {_value(engine.quantization)}: {lines}.",
                 base, tp, pp)


def _insufficient(search: _Search, groups: list[_Group], base: dict, tp: int, pp: int) -> Plan:
    """Nothing fits: explain with the widest domain and what it would need."""
    arch = search.arch
    group = max(groups, key=lambda g: (g.largest_domain * g.memory_bytes, g.product))
    widest = max(valid_tensor_parallel(arch, limit=max(group.largest_domain, 1)), default=1)
    usable = usable_bytes(group.memory_bytes)
    mem = search.mem(widest, 1)
    slots = _stage_slots(group, widest)
    need_pp = next((p for p in range(1, min(arch.num_layers, MAX_PARALLEL) + 1)
                    if search.mem(widest, p).total <= usable), None)
    lines = [
        f"No plan fits: the model needs {fmt_gib(base['required_memory_bytes'])} per replica unsharded.",
        f"Largest NVLink domain: {base['largest_domain_gpus']} GPUs ({group.product}, "
        f"{fmt_gib(usable)} usable per GPU).",
        f"At TP{widest} x PP1: {mem.describe(usable)}.",
    ]
    if need_pp is None:
        lines.append(f"Even {min(arch.num_layers, MAX_PARALLEL)} pipeline stages of TP{widest} would not fit.")
    else:
        lines.append(f"TP{widest} x PP{need_pp} would fit memory but needs {need_pp} stages of {widest} GPUs; "
                     f"the eligible nodes offer {slots}.")
    lines.append("Reduce maxBatchSize/maxSeqLen, quantize (fp8, int4_awq) or add GPUs.")
    return _fail(INSUFFICIENT_GPU_MEMORY, "\n".join(lines), base, tp, pp, memory=mem.total, breakdown=mem)


def _fitting_plan(search: _Search, best: _Candidate, others: list[_Candidate], base: dict) -> Plan:
    p = best.placement
    gpus = best.tp * best.pp
    lines = [
        f"Plan: TP{best.tp} x PP{best.pp} = {gpus} GPU(s) per replica on {p.nodes_per_replica} node(s) "
        f"of {best.group.product}, {_COMM_TEXT[p.comm_rank]}; objective {search.objective}"
        + (" (explicit)." if base["explicit"] else "."),
        f"Memory per GPU: {best.mem.describe(best.usable)} "
        f"({int(100 * best.mem.total / best.usable)}% of usable = 90% of {fmt_gib(best.group.memory_bytes)}).",
        f"Domain: {p.domain}; topology from {p.source}.",
    ]
    rejected = [r for r in search.rejections if r.gpus and r.gpus < gpus]
    if rejected:
        r = max(rejected, key=lambda r: (r.gpus, r.tp))
        lines.append(f"Rejected: TP{r.tp} x PP{r.pp} on {r.product} ({r.gpus} GPU(s)): {r.why}.")
    elif others:
        o = others[0]
        lines.append(f"Next best: TP{o.tp} x PP{o.pp} on {o.group.product} ({o.tp * o.pp} GPU(s), "
                     f"{_COMM_TEXT[o.placement.comm_rank]}).")
    quant = [r for r in search.rejections if not r.gpus]
    for r in quant:
        lines.append(f"Not used: {r.product}: {r.why}.")
    if p.comm_rank == 3:
        lines.append("Warning: pipeline stages talk over PCIe (no NVLink between these GPUs).")
    return Plan(
        fits=True, reason=FITS, tensor_parallel=best.tp, pipeline_parallel=best.pp, gpus_per_replica=gpus,
        nodes_per_replica=p.nodes_per_replica, gpus_per_node=p.gpus_per_node,
        memory_per_gpu_bytes=best.mem.total, usable_memory_per_gpu_bytes=best.usable,
        gpu_product=best.group.product, topology_source=p.source, domain=p.domain,
        explanation="\n".join(lines), breakdown=best.mem, nodes=p.names, spans_clique=p.spans_clique, **base,
    )


def replicas_capacity(
    plan_: Plan,
    nodes: Iterable[GPUNode],
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Any] | None = None,
) -> int:
    """How many whole replicas of this plan's shape the nodes could hold (ignoring other workloads)."""
    if not plan_.fits:
        return 0
    groups, _ = _eligible_groups(nodes, node_selector, tolerations)
    tp, pp = plan_.tensor_parallel, plan_.pipeline_parallel
    total = 0
    for group in groups:
        if group.product != plan_.gpu_product:
            continue
        if plan_.spans_clique:
            total += _stage_slots(group, tp) // pp
            continue
        k = plan_.stages_per_node
        # Each replica takes k stages on each of pp/k distinct nodes.
        chunks = [s.slots(tp)[0] // k for s in group.shapes.values() for _ in s.names]
        per_replica = pp // k
        lo, hi = 0, sum(chunks) // per_replica
        while lo < hi:  # largest R with sum(min(c, R)) >= R * per_replica
            mid = (lo + hi + 1) // 2
            if sum(min(c, mid) for c in chunks) >= mid * per_replica:
                lo = mid
            else:
                hi = mid - 1
        total += lo
    return total


def plan_for_spec(spec: Any, nodes: Iterable[GPUNode]) -> Plan:
    """Convenience: plan an LLMBackendSpec (resolves presets, applies scheduling)."""
    from ..api.catalog import resolve_architecture

    scheduling = spec.scheduling
    tolerations = [t.dump() for t in scheduling.tolerations] if scheduling.tolerations else None
    return plan(resolve_architecture(spec.model), spec.engine, spec.parallelism, nodes,
                node_selector=scheduling.node_selector, tolerations=tolerations)
