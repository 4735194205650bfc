"""Where a replica's GPUs can be: eligible nodes grouped by GPU product and layout, and the placement of pp
pipeline stages of tp GPUs on a group (inside a node's NVLink domain, over PCIe inside a node, over a multi-node
NVLink clique, or across nodes). Pure, like planner.py, which searches the parallelism over these placements."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .inventory import (
    GPU_TOLERATIONS,
    LABEL_PRODUCT,
    UNKNOWN_PRODUCT,
    GPUNode,
    GPUProduct,
    describe_gpus,
    domain_kind,
    node_matches,
    product_info,
)

UNLISTED_HBM_GBPS = 1000  # product not in the table but memory labelled: middling figures, said so
UNLISTED_TFLOPS_16BIT = 150

# Communication ranks (lower is better).
COMM_NVLINK, COMM_CLIQUE, COMM_TP_PCIE, COMM_PP_NVLINK, COMM_PP_PCIE, COMM_PP_NETWORK = range(6)


# ---- grouping nodes ----


@dataclass(slots=True)
class NodeShape:
    """Nodes of one product with identical GPU layout (5,000 nodes -> a few shapes)."""

    gpu_count: int
    domains: tuple[tuple[int, ...], ...]
    names: list[str] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)

    @property
    def widest_domain(self) -> int:
        return min(max((len(d) for d in self.domains), default=0), self.gpu_count)

    def slots(self, tp: int) -> tuple[int, int]:
        """(stage slots on the node, most slots inside one domain) for stages of tp GPUs.

        Stages inside NVLink domains when a domain is wide enough, else TP over
        PCIe across the node's GPUs (most slots inside one domain is then 0).
        """
        if tp > self.widest_domain:
            return self.gpu_count // tp, 0
        per_domain = [len(d) // tp for d in self.domains]
        return min(sum(per_domain), self.gpu_count // tp), min(max(per_domain, default=0), self.gpu_count // tp)

    def domain_for(self, tp: int) -> tuple[int, ...]:
        return next((d for d in self.domains if len(d) >= tp), tuple(range(min(tp, self.gpu_count))))


@dataclass(slots=True)
class GPUGroup:
    """Eligible nodes of one GPU product, memory size and product label."""

    product: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    info: GPUProduct
    selector: tuple[str, str]
    listed: bool = True  # the product is in inventory.PRODUCTS
    shapes: dict[tuple, NodeShape] = field(default_factory=dict)
    # clique id -> gpus per tray -> node names (trays of one clique, for TP over trays)
    cliques: dict[str, dict[int, list[str]]] = field(default_factory=dict)
    clique_sources: set[str] = field(default_factory=set)

    @property
    def bandwidth(self) -> int:
        return self.info.nvlink_gbps or self.info.pcie_gbps

    @property
    def largest_local_domain(self) -> int:
        return max((s.widest_domain for s in self.shapes.values() if s.domains), default=0)

    @property
    def largest_domain(self) -> int:
        clique = max((g * len(n) for trays in self.cliques.values() for g, n in trays.items()), default=0)
        return max(self.largest_local_domain, clique)

    @property
    def largest_node(self) -> int:
        return max((s.gpu_count for s in self.shapes.values()), default=0)

    @property
    def largest_tp(self) -> int:
        """Widest TP any placement allows: a whole node (NVLink or PCIe) or a clique."""
        return max(self.largest_domain, self.largest_node)

    @property
    def total_gpus(self) -> int:
        return sum(s.gpu_count * len(s.names) for s in self.shapes.values())


def _group_info(node: GPUNode) -> tuple[GPUProduct, bool]:
    info = product_info(node.product)
    if info is not UNKNOWN_PRODUCT:
        return info, True
    # Labelled product missing from the table: plan on its labels, with a middling bandwidth (said so).
    return GPUProduct(node.product, node.memory_bytes // (1024 * 1024), node.compute_capability, UNLISTED_HBM_GBPS,
                      0, 0, "none", 4, 0.05, UNLISTED_TFLOPS_16BIT), False


# Grouping 5,000 nodes is most of a plan's time, and the operator plans many backends against the same
# snapshot: the last few groupings are kept, keyed by the nodes' identities (GPUNodes are immutable; the
# inventory replaces a node's object when it changes) and the scheduling constraints. Entries hold the node
# list, so the identities cannot be reused while cached.
_GROUP_CACHE: OrderedDict[tuple, tuple[tuple[GPUNode, ...], tuple[list[GPUGroup], int, list[str]]]] = OrderedDict()
_GROUP_CACHE_SIZE = 4
_GROUP_CACHE_LOCK = threading.Lock()
_POOL_CACHE: OrderedDict[tuple, tuple[list[GPUGroup], tuple[str, int]]] = OrderedDict()  # product_pool, per group list


def clear_cache() -> None:
    with _GROUP_CACHE_LOCK:
        _GROUP_CACHE.clear()
        _POOL_CACHE.clear()


def eligible_groups(nodes: Iterable[GPUNode], node_selector, tolerations) -> tuple[list[GPUGroup], int, list[str]]:
    """Group eligible nodes by product; also how many GPU nodes were seen and the eligible ones of unknown product."""
    listed = tuple(nodes)  # a snapshot: the cache keeps these objects (and so their ids) alive
    tolerations = list(tolerations or [])
    key = (tuple(map(id, listed)), json.dumps([node_selector or {}, tolerations], sort_keys=True, default=str))
    with _GROUP_CACHE_LOCK:
        hit = _GROUP_CACHE.get(key)
        if hit is not None:
            _GROUP_CACHE.move_to_end(key)
            return hit[1]
    result = _group_nodes(listed, node_selector, tolerations + list(GPU_TOLERATIONS))
    with _GROUP_CACHE_LOCK:
        _GROUP_CACHE[key] = (listed, result)
        while len(_GROUP_CACHE) > _GROUP_CACHE_SIZE:
            _GROUP_CACHE.popitem(last=False)
    return result


def _group_nodes(nodes: Sequence[GPUNode], node_selector, tolerations) -> tuple[list[GPUGroup], int, list[str]]:
    seen = 0
    unknown: list[str] = []
    # The hot loop of a plan (5,000 nodes): cheap checks first (node_matches only when something can exclude),
    # then one bucket per identical layout; domains are interned by the inventory, so identity is a cheap key.
    buckets: dict[tuple, list[str]] = {}
    firsts: dict[tuple, GPUNode] = {}
    for node in nodes:
        if node.gpu_count <= 0:
            continue
        seen += 1
        if node.cordoned or ((node_selector or node.taints) and not node_matches(node, node_selector, tolerations)):
            continue
        if node.memory_bytes <= 0 or not node.product:
            unknown.append(node.name)
            continue
        key = (node.product, node.memory_bytes, node.product_label, node.gpu_count, id(node.nvlink_domains),
               node.topology_source, node.clique)
        names = buckets.get(key)
        if names is None:
            names = buckets[key] = []
            firsts[key] = node
        names.append(node.name)
    groups: dict[tuple, GPUGroup] = {}
    for key, names in buckets.items():
        node = firsts[key]
        gkey = key[:3]
        group = groups.get(gkey)
        if group is None:
            info, listed = _group_info(node)
            selector = node.product_label if node.product_label[0] else (LABEL_PRODUCT, node.product)
            group = groups[gkey] = GPUGroup(node.product, node.memory_bytes, node.compute_capability, info, selector, listed)
        shape = group.shapes.get(key[3:5])
        if shape is None:
            shape = group.shapes[key[3:5]] = NodeShape(node.gpu_count, node.nvlink_domains)
        shape.names.extend(names)
        shape.sources.add(node.topology_source)
        if node.clique:
            group.cliques.setdefault(node.clique, {}).setdefault(node.gpu_count, []).extend(names)
            group.clique_sources.add(node.topology_source)
    return sorted(groups.values(), key=lambda g: (g.product, g.memory_bytes, g.selector)), seen, unknown


# ---- placement ----


@dataclass(frozen=True, slots=True)
class Placement:
    nodes_per_replica: int
    gpus_per_node: int
    comm_rank: int
    names: tuple[str, ...]
    domain: str
    source: str
    spans_clique: bool = False
    stranded: int = 0  # GPUs of a used node that no replica of this shape can use
    tp_over_pcie: bool = False


def _divisors_desc(n: int) -> list[int]:
    return [k for k in range(n, 0, -1) if n % k == 0]


def _source(sources: set[str]) -> str:
    return "inferred" if "inferred" in sources else "annotation"


def _place_local(group: GPUGroup, tp: int, pp: int) -> Placement | None:
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
        chosen: list[tuple[int, int, NodeShape]] = []
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
        pcie_tp = tp > 1 and chosen[0][1] == 0
        kind = "PCIe, no NVLink between them" if pcie_tp else domain_kind(len(dom), group.product)
        if pp == 1:
            rank = COMM_TP_PCIE if pcie_tp else COMM_NVLINK
            desc = f"{names[0]} GPUs {describe_gpus(dom)} ({kind})"
        elif need == 1:
            rank = COMM_PP_NVLINK if chosen[0][1] >= pp else COMM_PP_PCIE
            if rank == COMM_PP_NVLINK:
                desc = f"{names[0]} GPUs {describe_gpus(dom)} ({kind}), {pp} stages of {tp} GPUs"
            else:
                desc = (f"{names[0]}: {pp} stages of {tp} GPUs in separate domains "
                        f"({kind} inside a stage, PCIe between stages)")
        else:
            rank = COMM_PP_NETWORK
            desc = (f"{', '.join(names)}: {k} stage(s) of {tp} GPUs per node, each in a domain like "
                    f"GPUs {describe_gpus(dom)} ({kind}); stages across nodes over the network")
        stranded = min(r[2].gpu_count % (k * tp) for r in chosen)
        sources: set[str] = set().union(*(r[2].sources for r in chosen))
        return Placement(need, k * tp, rank, tuple(names), desc, _source(sources), stranded=stranded,
                          tp_over_pcie=pcie_tp)
    return None


def _place_clique(group: GPUGroup, tp: int, pp: int) -> Placement | None:
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
        rank = COMM_CLIQUE if pp == 1 else COMM_PP_NVLINK
        desc = f"clique {clique}: {', '.join(used)} (multi-node NVLink, {tp} GPUs per stage)"
        return Placement(pp * per_stage, gpus, rank, tuple(used), desc, _source(group.clique_sources), True)
    # Stages in different cliques: PP over the network.
    same_gpus = [o for o in options if o[2] == gpus]
    if sum(o[0] for o in same_gpus) < pp:
        return None
    used = []
    left = pp
    for s, _, _, n in same_gpus:
        take = min(s, left)
        used.extend(n[: take * per_stage])
        left -= take
        if not left:
            break
    desc = f"{', '.join(used)}: stages over NVLink cliques, across cliques over the network"
    return Placement(pp * per_stage, gpus, COMM_PP_NETWORK, tuple(used), desc, _source(group.clique_sources), True)


def place(group: GPUGroup, tp: int, pp: int) -> Placement | None:
    local = _place_local(group, tp, pp)
    clique = _place_clique(group, tp, pp) if tp > group.largest_local_domain else None
    options = [p for p in (local, clique) if p is not None]
    return min(options, key=lambda p: (p.comm_rank, p.nodes_per_replica)) if options else None


def stage_slots(group: GPUGroup, tp: int) -> int:
    """All stage slots of tp GPUs in the group (upper bound on pp)."""
    total = sum(shape.slots(tp)[0] * len(shape.names) for shape in group.shapes.values())
    if tp > group.largest_local_domain:
        total += sum(len(n) // (tp // g) for trays in group.cliques.values() for g, n in trays.items()
                     if tp > g and tp % g == 0)
    return total


def product_pool_nodes(nodes: Sequence[GPUNode], node_selector, tolerations, product: str) -> list[GPUNode]:
    """The nodes of ``product_pool``'s pool (for planning/podfit.py: could a pod of the backend land on one?)."""
    groups, _, _ = eligible_groups(nodes, node_selector, tolerations)
    names = {n for g in groups if g.product == product for s in g.shapes.values() for n in s.names}
    return [node for node in nodes if node.name in names]


def product_pool(nodes: Iterable[GPUNode], node_selector, tolerations, product: str) -> tuple[str, int]:
    """(key, GPUs) of the eligible nodes of one GPU product: the key is the product and a digest of the node names
    (thousands of them), so backends whose pods may land on the same nodes get the same key."""
    groups, _, _ = eligible_groups(nodes, node_selector, tolerations)
    key = (id(groups), product)  # the groups are cached: a no-op pass finds the same list (0.6 ms at 5,000 nodes)
    with _GROUP_CACHE_LOCK:
        hit = _POOL_CACHE.get(key)
    if hit is not None and hit[0] is groups:
        return hit[1]
    shapes = [s for g in groups if g.product == product for s in g.shapes.values()]
    names = sorted(n for s in shapes for n in s.names)
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    pool = (f"{product}/{digest}", sum(s.gpu_count * len(s.names) for s in shapes))
    with _GROUP_CACHE_LOCK:
        _POOL_CACHE[key] = (groups, pool)  # holds the list: its id is not reused while the entry stands
        while len(_POOL_CACHE) > _GROUP_CACHE_SIZE:
            _POOL_CACHE.popitem(last=False)
    return pool
