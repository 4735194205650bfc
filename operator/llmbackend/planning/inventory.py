"""GPU inventory: what the planner needs to know about each Kubernetes Node.

A Node (the dict form of a v1 Node, as from `yaml.safe_load` or kopf's body)
becomes a small, frozen `GPUNode`: GPU count (allocatable `nvidia.com/gpu`),
product and memory from GPU Feature Discovery labels, and NVLink domains.

NVLink domains come from the annotation `llmbackend.dev/gpu-topology`
(`{"nvlinkDomains": [[0,1,...], ...]}`, written by the topology reporter).
Without it (or when it is not valid JSON) they are inferred from the product
(`PRODUCT_TOPOLOGY`); unknown products get singleton domains, so the planner
never assumes NVLink it cannot see.

`Inventory` is the operator's in-memory index. It stores only GPUNodes and
interns repeated strings, so 5,000 nodes take a few MB.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

TOPOLOGY_ANNOTATION = "llmbackend.dev/gpu-topology"
GPU_RESOURCE = "nvidia.com/gpu"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_CC_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_CC_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_CLIQUE = "nvidia.com/gpu.clique"

# Labels that change without the node changing (GFD rewrites its timestamp on
# every run): keeping them would make every relabel look like a new node.
VOLATILE_LABELS = frozenset({"nvidia.com/gfd.timestamp"})
HARD_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

PCIE_GBPS = 64  # PCIe Gen5 x16, per direction
MIB = 1024 * 1024

# Product substring (upper case) -> (NVLink shape, NVLink GB/s per GPU).
# Shapes: "all" = one NVSwitch domain over all GPUs of the node,
# "pairs" = NVLink-bridged pairs, "none" = PCIe only (singleton domains).
# Checked in order: the first match wins, so specific names come first.
PRODUCT_TOPOLOGY: tuple[tuple[str, str, int], ...] = (
    ("GB200", "all", 1800),
    ("B200", "all", 1800),
    ("B100", "all", 1800),
    ("H200-NVL", "pairs", 900),
    ("H200", "all", 900),
    ("H100-NVL", "pairs", 600),
    # H100 PCIe: NVLink bridges are optional, so assume none (conservative).
    ("H100-PCIE", "none", PCIE_GBPS),
    ("H100", "all", 900),  # SXM: NVIDIA-H100-80GB-HBM3, H100-SXM5-*
    ("H800", "all", 400),
    ("A100-PCIE", "pairs", 600),
    ("A100", "all", 600),  # SXM4: NVIDIA-A100-SXM4-40GB/80GB
    ("A800", "all", 400),
    ("L40S", "none", PCIE_GBPS),
    ("L40", "none", PCIE_GBPS),
    ("L4", "none", PCIE_GBPS),
    ("A10G", "none", PCIE_GBPS),
    ("A10", "none", PCIE_GBPS),
    ("T4", "none", PCIE_GBPS),
)


def _product_entry(product: str) -> tuple[str, int]:
    upper = product.upper()
    for needle, shape, gbps in PRODUCT_TOPOLOGY:
        if needle in upper:
            return shape, gbps
    return "none", PCIE_GBPS  # unknown: no NVLink assumed


def nvlink_bandwidth_gbps(product: str) -> int:
    """NVLink bandwidth per GPU for a product (PCIe figure when it has none)."""
    return _product_entry(product)[1]


def infer_domains(product: str, gpu_count: int) -> tuple[tuple[int, ...], ...]:
    """NVLink domains implied by the product name alone."""
    shape, _ = _product_entry(product)
    if gpu_count <= 0:
        return ()
    if shape == "all":
        return (tuple(range(gpu_count)),)
    if shape == "pairs":
        return tuple(tuple(range(i, min(i + 2, gpu_count))) for i in range(0, gpu_count, 2))
    return tuple((i,) for i in range(gpu_count))


def domain_kind(domain_size: int, product: str) -> str:
    """Human name of the interconnect inside one domain."""
    if domain_size <= 1:
        return "PCIe"
    shape, _ = _product_entry(product)
    return "NVSwitch" if shape == "all" and domain_size > 2 else "NVLink"


# Interning: thousands of nodes share products, domain shapes and taints
# (a bounded set of values, so the cache does not grow with node churn).
_INTERNED: dict[Any, Any] = {}


def _share(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value)
    return _INTERNED.setdefault(value, value)


@dataclass(frozen=True, slots=True)
class GPUNode:
    name: str
    gpu_count: int
    product: str
    memory_bytes: int
    family: str
    compute_capability: tuple[int, int]
    clique: str | None
    nvlink_domains: tuple[tuple[int, ...], ...]
    topology_source: str  # "annotation" | "inferred"
    schedulable: bool  # False when cordoned or carrying a NoSchedule/NoExecute taint
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    labels: tuple[tuple[str, str], ...]  # sorted pairs, volatile labels dropped
    cordoned: bool = False  # spec.unschedulable: no toleration helps
    topology_note: str = ""  # why the annotation was not used, if it was present

    @property
    def largest_domain(self) -> int:
        return min(max((len(d) for d in self.nvlink_domains), default=0), self.gpu_count)

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _quantity_int(value: Any) -> int:
    """Extended resources are whole numbers, but tolerate '8' / 8 / '8.0'."""
    if value is None:
        return 0
    try:
        return int(float(str(value)))
    except ValueError:
        return 0


def _parse_domains(raw: str, gpu_count: int) -> tuple[tuple[tuple[int, ...], ...] | None, str]:
    """Domains from the annotation, or (None, why) when unusable."""
    try:
        doc = json.loads(raw)
        domains = doc["nvlinkDomains"]
        parsed = tuple(tuple(sorted({int(i) for i in d})) for d in domains)
    except (ValueError, TypeError, KeyError) as exc:
        return None, f"invalid {TOPOLOGY_ANNOTATION} annotation ({exc.__class__.__name__}); topology inferred"
    if any(not d for d in parsed) or any(i < 0 for d in parsed for i in d):
        return None, f"invalid {TOPOLOGY_ANNOTATION} annotation (empty domain or negative index); topology inferred"
    seen = [i for d in parsed for i in d]
    if len(seen) != len(set(seen)):
        return None, f"invalid {TOPOLOGY_ANNOTATION} annotation (GPU in two domains); topology inferred"
    return tuple(sorted(parsed)), ""


def parse_node(node: Mapping[str, Any]) -> GPUNode | None:
    """A GPUNode from a v1 Node dict; None when the node has no NVIDIA GPUs."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    allocatable = status.get("allocatable") or {}

    gpu_count = _quantity_int(allocatable.get(GPU_RESOURCE))
    product = str(labels.get(LABEL_PRODUCT, ""))
    if gpu_count <= 0 and not product and LABEL_COUNT not in labels:
        return None

    # Domain indices follow the node's GPUs as labelled; allocatable may be lower.
    labelled = _int(labels.get(LABEL_COUNT), gpu_count) or gpu_count
    note = ""
    domains = None
    raw = annotations.get(TOPOLOGY_ANNOTATION)
    if raw is not None:
        domains, note = _parse_domains(str(raw), labelled)
    source = "annotation"
    if domains is None:
        domains, source = infer_domains(product, labelled), "inferred"

    taints = tuple(
        (str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in (spec.get("taints") or [])
    )
    cordoned = bool(spec.get("unschedulable", False))
    schedulable = not cordoned and not any(effect in HARD_TAINT_EFFECTS for _, _, effect in taints)
    memory_mib = _int(labels.get(LABEL_MEMORY), 0)
    clique = labels.get(LABEL_CLIQUE)

    return GPUNode(
        name=sys.intern(str(meta.get("name", ""))),
        gpu_count=gpu_count,
        product=_share(product),
        memory_bytes=memory_mib * MIB,
        family=_share(str(labels.get(LABEL_FAMILY, ""))),
        compute_capability=_share((_int(labels.get(LABEL_CC_MAJOR)), _int(labels.get(LABEL_CC_MINOR)))),
        clique=_share(str(clique)) if clique else None,
        nvlink_domains=_share(domains),
        topology_source=source,
        schedulable=schedulable,
        taints=_share(tuple(_share(t) for t in taints)),
        # Strings interned, tuples not: hostname labels make every tuple unique.
        labels=tuple(sorted(
            (sys.intern(str(k)), sys.intern(str(v))) for k, v in labels.items() if k not in VOLATILE_LABELS
        )),
        cordoned=cordoned,
        topology_note=note,
    )


def gpu_fingerprint(node: GPUNode) -> tuple:
    """Hashable summary of everything planning depends on (not the name).

    The operator compares fingerprints to ignore heartbeats, status churn and
    volatile labels: only a change here should trigger re-planning.
    """
    return (
        node.gpu_count, node.product, node.memory_bytes, node.compute_capability,
        node.clique, node.nvlink_domains, node.topology_source, node.schedulable,
        node.cordoned, node.taints, node.labels,
    )


def _toleration_dict(t: Any) -> Mapping[str, Any]:
    if isinstance(t, Mapping):
        return t
    if hasattr(t, "dump"):  # pydantic Toleration
        return t.dump()
    return vars(t)


def _tolerates(toleration: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    """Kubernetes' toleration-matches-taint rule."""
    t_effect = toleration.get("effect")
    if t_effect and t_effect != effect:
        return False
    operator = toleration.get("operator") or "Equal"
    t_key = toleration.get("key") or ""
    if operator == "Exists":
        return not t_key or t_key == key
    return t_key == key and (toleration.get("value") or "") == value


def node_matches(
    node: GPUNode,
    node_selector: Mapping[str, str] | None,
    tolerations: Iterable[Any] | None,
) -> bool:
    """Could a pod with this nodeSelector and these tolerations land here?

    Cordoned nodes never match; every NoSchedule/NoExecute taint must be
    tolerated (PreferNoSchedule is only a preference).
    """
    if node.cordoned:
        return False
    if node_selector:
        labels = node.label_map
        if any(labels.get(k) != v for k, v in node_selector.items()):
            return False
    hard = [t for t in node.taints if t[2] in HARD_TAINT_EFFECTS]
    if not hard:
        return True
    tols = [_toleration_dict(t) for t in (tolerations or [])]
    return all(any(_tolerates(tol, *taint) for tol in tols) for taint in hard)


class Inventory:
    """Mutable index name -> GPUNode (the operator's view of the cluster's GPUs)."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: Iterable[Mapping[str, Any]] = ()) -> None:
        self._nodes: dict[str, GPUNode] = {}
        for node in nodes:
            self.upsert(node)

    def upsert(self, node: Mapping[str, Any]) -> bool:
        """Add or update a node; True when its planning-relevant summary changed."""
        parsed = parse_node(node)
        name = str((node.get("metadata") or {}).get("name", ""))
        if parsed is None:
            return self.remove(name)
        old = self._nodes.get(name)
        self._nodes[name] = parsed
        return old is None or gpu_fingerprint(old) != gpu_fingerprint(parsed)

    def remove(self, name: str) -> bool:
        return self._nodes.pop(name, None) is not None

    def get(self, name: str) -> GPUNode | None:
        return self._nodes.get(name)

    def nodes(self) -> list[GPUNode]:
        return list(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[GPUNode]:
        return iter(list(self._nodes.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._nodes


def describe_gpus(indices: Iterable[int]) -> str:
    """'0-7' for contiguous indices, '0,2,5' otherwise."""
    idx = sorted(indices)
    if not idx:
        return ""
    if idx == list(range(idx[0], idx[-1] + 1)) and len(idx) > 1:
        return f"{idx[0]}-{idx[-1]}"
    return ",".join(str(i) for i in idx)
