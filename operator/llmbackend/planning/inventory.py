"""GPU inventory: what the planner needs to know about each Kubernetes Node.

A Node (the dict form of a v1 Node, as from `yaml.safe_load` or kopf's body)
becomes a small, frozen `GPUNode`: GPU count (allocatable `nvidia.com/gpu`),
product, memory and compute capability, NVLink domains, and the rest of the
node's allocatable (cpu, memory, ...) for the GPU pool's fit check (podfit.py).

The product comes from GPU Feature Discovery (`nvidia.com/gpu.product`) or,
when GFD is not installed (GKE's default driver install, EKS without the GPU
Operator), from the managed cloud's labels: GKE `cloud.google.com/gke-accelerator`,
Karpenter `karpenter.k8s.aws/instance-gpu-name`, and every cloud's
`node.kubernetes.io/instance-type` (p5.48xlarge, a3-highgpu-8g,
Standard_ND96isr_H100_v5, ...). Memory and compute capability missing from
labels are filled in from `PRODUCTS`, the one table of product facts (memory,
compute capability, HBM bandwidth, NVLink generation/bandwidth/shape, PCIe
generation). A node with GPUs whose product is unknown keeps product "" and is
named by the planner.

NVLink domains come from the annotation `llmbackend.dev/gpu-topology`
(`{"nvlinkDomains": [[0,1,...], ...]}`, written by the topology reporter).
Without it (or when it is not valid JSON) they are inferred from the product;
unknown products get singleton domains, so the planner never assumes NVLink
it cannot see.

`Inventory` is the operator's in-memory index. It stores only GPUNodes and
interns repeated strings, so 5,000 nodes take a few MB.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .quantity import scheduler_units

TOPOLOGY_ANNOTATION = "llmbackend.dev/gpu-topology"
GPU_RESOURCE = "nvidia.com/gpu"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_CC_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_CC_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
LABEL_KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
LABEL_KARPENTER_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
LABEL_KARPENTER_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"  # MiB per GPU
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"

# Serving pods tolerate the taint managed clouds put on GPU nodes (GKE:
# nvidia.com/gpu=present:NoSchedule; AKS has no admission plugin that adds the
# toleration), so the planner counts such nodes. render/workloads.py adds it.
GPU_TOLERATIONS: tuple[dict[str, str], ...] = ({"key": GPU_RESOURCE, "operator": "Exists"},)

# Labels that change without the node changing (GFD rewrites its timestamp on
# every run): keeping them would make every relabel look like a new node.
VOLATILE_LABELS = frozenset({"nvidia.com/gfd.timestamp"})
HARD_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

MIB = 1024 * 1024
# PCIe x16 bandwidth per direction, GB/s, by generation.
PCIE_GBPS = {3: 16, 4: 32, 5: 64, 6: 128}


@dataclass(frozen=True, slots=True)
class GPUProduct:
    """Facts about one GPU product (vendor data sheets; memory as NVML reports it)."""

    name: str  # canonical GFD product string
    memory_mib: int
    compute_capability: tuple[int, int]
    hbm_gbps: int  # memory bandwidth, GB/s
    nvlink_gen: int  # 0 = none
    nvlink_gbps: int  # per GPU, both directions summed as NVIDIA quotes it; 0 = none
    nvlink_shape: str  # "all" (NVSwitch over the node), "pairs" (bridged pairs), "none"
    pcie_gen: int
    reserve_fraction: float  # memory the driver, allocator fragmentation and estimate error may take
    # Dense (no sparsity) tensor-core peak TFLOPS per GPU by math precision, from the data sheets: 16-bit
    # (bf16, or fp16 where the part has no bf16), fp8, fp4; 0 = the part has no such tensor math.
    tflops_16bit: float = 0.0
    tflops_fp8: float = 0.0
    tflops_fp4: float = 0.0

    def tflops(self, precision: str) -> float:
        """Peak dense TFLOPS for a math precision ("16bit", "fp8", "fp4"): fp4 falls back to fp8, all to 16-bit."""
        value = {"16bit": self.tflops_16bit, "fp8": self.tflops_fp8, "fp4": self.tflops_fp4 or self.tflops_fp8}
        return value.get(precision) or self.tflops_16bit

    @property
    def pcie_gbps(self) -> int:
        return PCIE_GBPS[self.pcie_gen]

    def link_text(self, over_nvlink: bool) -> str:
        if over_nvlink and self.nvlink_gen:
            return f"NVLink{self.nvlink_gen} {self.nvlink_gbps} GB/s"
        return f"PCIe Gen{self.pcie_gen} x16 {self.pcie_gbps} GB/s"


def _p(name, mem, cc, hbm, nvgen, nvgbps, shape, pcie, reserve=0.05, tflops=(0.0, 0.0, 0.0)) -> GPUProduct:
    return GPUProduct(name, mem, cc, hbm, nvgen, nvgbps, shape, pcie, reserve, *tflops)


# The one table of product facts. Matching is by upper-case substring, first
# match wins, so specific names come first (GB200 before B200, H100-NVL before
# H100). Reserve: 5% on most cards, 4% on 140+ GB parts (the fixed runtime
# overhead is charged separately in memory.estimate), 7% on 16-24 GB cards.
# TFLOPS (dense, 16-bit / fp8 / fp4): the vendor data sheets' tensor-core figures halved where quoted with
# sparsity. The A10G has no NVIDIA data sheet: the A10's figure. B300/GB300 carry B200/GB200's figures (their
# fp4 is higher; this under-states it).
PRODUCTS: tuple[GPUProduct, ...] = (
    _p("NVIDIA-GB300", 284_208, (10, 3), 8000, 5, 1800, "all", 6, 0.04, (2500, 5000, 10000)),
    _p("NVIDIA-B300", 275_040, (10, 3), 8000, 5, 1800, "all", 6, 0.04, (2250, 4500, 9000)),
    _p("NVIDIA-GB200", 189_471, (10, 0), 8000, 5, 1800, "all", 6, 0.04, (2500, 5000, 10000)),
    _p("NVIDIA-B200", 183_359, (10, 0), 8000, 5, 1800, "all", 5, 0.04, (2250, 4500, 9000)),
    _p("NVIDIA-B100", 183_359, (10, 0), 8000, 5, 1800, "all", 5, 0.04, (1750, 3500, 7000)),
    _p("NVIDIA-H200-NVL", 143_771, (9, 0), 4800, 4, 900, "pairs", 5, 0.04, (835, 1671, 0)),
    _p("NVIDIA-H200", 143_771, (9, 0), 4800, 4, 900, "all", 5, 0.04, (989, 1979, 0)),
    _p("NVIDIA-H100-NVL", 95_830, (9, 0), 3900, 4, 600, "pairs", 5, 0.05, (835, 1671, 0)),
    # H100 PCIe: NVLink bridges are optional, so assume none (conservative).
    _p("NVIDIA-H100-PCIE", 81_559, (9, 0), 2000, 0, 0, "none", 5, 0.05, (756, 1513, 0)),
    _p("NVIDIA-H100", 81_559, (9, 0), 3350, 4, 900, "all", 5, 0.05, (989, 1979, 0)),  # SXM: NVIDIA-H100-80GB-HBM3
    _p("NVIDIA-H800", 81_559, (9, 0), 3350, 4, 400, "all", 5, 0.05, (989, 1979, 0)),
    _p("NVIDIA-A100-PCIE-40GB", 40_960, (8, 0), 1555, 3, 600, "pairs", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-A100-80GB-PCIE", 81_920, (8, 0), 1935, 3, 600, "pairs", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-A100-PCIE", 81_920, (8, 0), 1935, 3, 600, "pairs", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-A100-SXM4-40GB", 40_960, (8, 0), 1555, 3, 600, "all", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-A100-SXM4-80GB", 81_920, (8, 0), 2039, 3, 600, "all", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-A100", 81_920, (8, 0), 2039, 3, 600, "all", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-A800", 81_920, (8, 0), 2039, 3, 400, "all", 4, 0.05, (312, 0, 0)),
    _p("NVIDIA-L40S", 46_068, (8, 9), 864, 0, 0, "none", 4, 0.05, (362, 733, 0)),
    _p("NVIDIA-L40", 46_068, (8, 9), 864, 0, 0, "none", 4, 0.05, (181, 362, 0)),
    _p("NVIDIA-L4", 23_034, (8, 9), 300, 0, 0, "none", 4, 0.07, (121, 242, 0)),
    _p("NVIDIA-A10G", 23_028, (8, 6), 600, 0, 0, "none", 4, 0.07, (125, 0, 0)),
    _p("NVIDIA-A10", 23_028, (8, 6), 600, 0, 0, "none", 4, 0.07, (125, 0, 0)),
    _p("Tesla-T4", 15_360, (7, 5), 320, 0, 0, "none", 3, 0.07, (65, 0, 0)),
)
_KEYS = tuple((p.name.upper().replace("NVIDIA-", "").replace("TESLA-", ""), p) for p in PRODUCTS)
UNKNOWN_PRODUCT = _p("", 0, (0, 0), 0, 0, 0, "none", 4)


def product_info(product: str) -> GPUProduct:
    """Facts for a product string (GFD name or canonical); UNKNOWN_PRODUCT when none match."""
    upper = product.upper().replace("_", "-")
    if not upper:
        return UNKNOWN_PRODUCT
    for key, info in _KEYS:
        if key in upper:
            return info
    return UNKNOWN_PRODUCT


# Managed-cloud names -> canonical product. GKE accelerator label values
# (cloud.google.com/gke-accelerator) and Karpenter's instance-gpu-name.
CLOUD_ACCELERATORS: dict[str, str] = {
    "nvidia-gb200": "NVIDIA-GB200",
    "nvidia-b200": "NVIDIA-B200",
    "nvidia-h200-141gb": "NVIDIA-H200",
    "nvidia-h100-mega-80gb": "NVIDIA-H100-80GB-HBM3",
    "nvidia-h100-80gb": "NVIDIA-H100-80GB-HBM3",
    "nvidia-a100-80gb": "NVIDIA-A100-SXM4-80GB",
    "nvidia-tesla-a100": "NVIDIA-A100-SXM4-40GB",
    "nvidia-l4": "NVIDIA-L4",
    "nvidia-tesla-t4": "Tesla-T4",
    # Karpenter (lower-case short names)
    "gb200": "NVIDIA-GB200", "b200": "NVIDIA-B200", "h200": "NVIDIA-H200", "h100": "NVIDIA-H100-80GB-HBM3",
    "a100": "NVIDIA-A100-SXM4-40GB", "l40s": "NVIDIA-L40S", "l4": "NVIDIA-L4", "a10g": "NVIDIA-A10G",
    "t4": "Tesla-T4",
}

# node.kubernetes.io/instance-type -> (product, GPUs). Exact names first, then patterns.
INSTANCE_TYPES: dict[str, tuple[str, int]] = {
    # AWS
    "p5.48xlarge": ("NVIDIA-H100-80GB-HBM3", 8),
    "p5e.48xlarge": ("NVIDIA-H200", 8),
    "p5en.48xlarge": ("NVIDIA-H200", 8),
    "p6-b200.48xlarge": ("NVIDIA-B200", 8),
    "p4d.24xlarge": ("NVIDIA-A100-SXM4-40GB", 8),
    "p4de.24xlarge": ("NVIDIA-A100-SXM4-80GB", 8),
    # Google Cloud
    "a3-highgpu-8g": ("NVIDIA-H100-80GB-HBM3", 8),
    "a3-megagpu-8g": ("NVIDIA-H100-80GB-HBM3", 8),
    "a3-edgegpu-8g": ("NVIDIA-H100-80GB-HBM3", 8),
    "a3-ultragpu-8g": ("NVIDIA-H200", 8),
    "a4-highgpu-8g": ("NVIDIA-B200", 8),
    "a4x-highgpu-4g": ("NVIDIA-GB200", 4),
    "a2-megagpu-16g": ("NVIDIA-A100-SXM4-40GB", 16),
    # Azure
    "Standard_ND96isr_H100_v5": ("NVIDIA-H100-80GB-HBM3", 8),
    "Standard_ND96isr_H200_v5": ("NVIDIA-H200", 8),
    "Standard_ND96asr_v4": ("NVIDIA-A100-SXM4-40GB", 8),
    "Standard_ND96amsr_A100_v4": ("NVIDIA-A100-SXM4-80GB", 8),
    "Standard_NC24ads_A100_v4": ("NVIDIA-A100-80GB-PCIe", 1),
    "Standard_NC48ads_A100_v4": ("NVIDIA-A100-80GB-PCIe", 2),
    "Standard_NC96ads_A100_v4": ("NVIDIA-A100-80GB-PCIe", 4),
    "Standard_NC40ads_H100_v5": ("NVIDIA-H100-NVL", 1),
    "Standard_NC80adis_H100_v5": ("NVIDIA-H100-NVL", 2),
}
_AWS_FAMILIES = {"g5": "NVIDIA-A10G", "g6": "NVIDIA-L4", "g6e": "NVIDIA-L40S", "g4dn": "Tesla-T4"}
# AWS g-family sizes -> GPUs (1 below 12xlarge).
_AWS_G_SIZES = {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}
_GCP_COUNT = re.compile(r"^(a2-highgpu|a2-ultragpu|a3-highgpu)-(\d+)g$")


def instance_type_gpus(instance_type: str) -> tuple[str, int] | None:
    """(product, GPUs) of a managed-cloud instance type, None when unknown."""
    if instance_type in INSTANCE_TYPES:
        return INSTANCE_TYPES[instance_type]
    family, _, size = instance_type.partition(".")
    if family in _AWS_FAMILIES and size:
        return _AWS_FAMILIES[family], _AWS_G_SIZES.get(size, 1)
    m = _GCP_COUNT.match(instance_type)
    if m:
        product = {"a2-highgpu": "NVIDIA-A100-SXM4-40GB", "a2-ultragpu": "NVIDIA-A100-SXM4-80GB",
                   "a3-highgpu": "NVIDIA-H100-80GB-HBM3"}[m.group(1)]
        return product, int(m.group(2))
    if instance_type.startswith("g2-standard-"):
        return "NVIDIA-L4", 0  # count from allocatable
    return None


def product_from_labels(labels: Mapping[str, Any]) -> tuple[str, str, str]:
    """(product, label key, label value) naming the node's GPU product; ("", "", "") when none."""
    product = str(labels.get(LABEL_PRODUCT) or "")
    if product:
        return product, LABEL_PRODUCT, product
    for key in (LABEL_GKE_ACCELERATOR, LABEL_KARPENTER_GPU_NAME):
        value = str(labels.get(key) or "")
        if value and value.lower() in CLOUD_ACCELERATORS:
            canonical = CLOUD_ACCELERATORS[value.lower()]
            if key == LABEL_KARPENTER_GPU_NAME and canonical.startswith("NVIDIA-A100"):
                mem = _int(labels.get(LABEL_KARPENTER_GPU_MEMORY))
                canonical = "NVIDIA-A100-SXM4-80GB" if mem > 60_000 else canonical
            return canonical, key, value
    for key in (LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA):
        value = str(labels.get(key) or "")
        known = instance_type_gpus(value) if value else None
        if known:
            return known[0], key, value
    return "", "", ""


def _product_entry(product: str) -> tuple[str, int]:
    info = product_info(product)
    if info.nvlink_shape == "none":
        return "none", info.pcie_gbps
    return info.nvlink_shape, info.nvlink_gbps


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
    # The label that names the product on this node (GFD's, or a cloud's): serving pods select on it.
    product_label: tuple[str, str] = ("", "")
    # status.allocatable in the kube-scheduler's units (cpu in millicores, the rest whole numbers; quantity.py),
    # sorted pairs; () when the node reported none (then the pool's fit check does not judge its resources)
    allocatable: tuple[tuple[str, int], ...] = ()
    # the volatile labels ``labels`` drops, as the node has them now: not compared (a new timestamp is no new node),
    # read only where a pod's node affinity names one (autoscaling/holding.py unclaimed_waiting)
    volatile_labels: tuple[tuple[str, str], ...] = field(default=(), compare=False)

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


def gpu_quantity(value: Any) -> int:
    """A count of GPUs (nvidia.com/gpu) as the kube-scheduler reads the quantity (planning/quantity.py): any canonical
    form ("8", "1k", "8.0", "2500m" rounded up); missing, negative or not a quantity: 0."""
    return max(0, scheduler_units(GPU_RESOURCE, value) or 0) if value is not None else 0


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

    gpu_count = gpu_quantity(allocatable.get(GPU_RESOURCE))
    product, label_key, label_value = product_from_labels(labels)
    if gpu_count <= 0 and not product and LABEL_COUNT not in labels:
        return None
    info = product_info(product)

    # Domain indices follow the node's GPUs as labelled; allocatable may be lower.
    labelled = (_int(labels.get(LABEL_COUNT)) or _int(labels.get(LABEL_KARPENTER_GPU_COUNT))
                or gpu_count)
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
    # Without GFD (managed clouds) memory and compute capability come from the product table.
    memory_mib = _int(labels.get(LABEL_MEMORY)) or _int(labels.get(LABEL_KARPENTER_GPU_MEMORY)) or info.memory_mib
    cc = (_int(labels.get(LABEL_CC_MAJOR)), _int(labels.get(LABEL_CC_MINOR)))
    if cc == (0, 0):
        cc = info.compute_capability
    clique = labels.get(LABEL_CLIQUE)

    return GPUNode(
        name=sys.intern(str(meta.get("name", ""))),
        gpu_count=gpu_count,
        product=_share(product),
        memory_bytes=memory_mib * MIB,
        family=_share(str(labels.get(LABEL_FAMILY, ""))),
        compute_capability=_share(cc),
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
        product_label=_share((sys.intern(label_key), sys.intern(label_value))),
        allocatable=_share(_allocatable(allocatable)),
        volatile_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items() if k in VOLATILE_LABELS)),
    )


def _allocatable(allocatable: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """status.allocatable as the kube-scheduler counts it; a value that is not a quantity is left out (not judged)."""
    units = ((sys.intern(str(name)), scheduler_units(str(name), value)) for name, value in allocatable.items())
    return tuple(sorted((name, n) for name, n in units if n is not None))


def gpu_fingerprint(node: GPUNode) -> tuple:
    """Hashable summary of everything planning depends on (not the name).

    The operator compares fingerprints to ignore heartbeats, status churn and
    volatile labels: only a change here should trigger re-planning.
    """
    return (
        node.gpu_count, node.product, node.memory_bytes, node.compute_capability,
        node.clique, node.nvlink_domains, node.topology_source, node.schedulable,
        node.cordoned, node.taints, node.labels, node.product_label, node.allocatable,
    )


def _toleration_dict(t: Any) -> Mapping[str, Any]:
    if isinstance(t, Mapping):
        return t
    if hasattr(t, "dump"):  # pydantic Toleration
        return t.dump()
    return vars(t)


def tolerates(toleration: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    """k8s.io/api core/v1/toleration.go Toleration.ToleratesTaint."""
    t_effect = toleration.get("effect") or ""
    if t_effect and t_effect != effect:
        return False
    t_key = toleration.get("key") or ""
    if t_key and t_key != key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == value
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        mine, theirs = parse_int64(toleration.get("value")), parse_int64(value)
        if mine is None or theirs is None:
            return False
        return theirs < mine if operator == "Lt" else theirs > mine
    return False


def parse_int64(value: Any) -> int | None:
    """strconv.ParseInt(value, 10, 64): decimal digits with an optional sign, nothing else."""
    text = str(value) if value is not None else ""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isascii() or not digits.isdigit():
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


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
    return all(any(tolerates(tol, *taint) for tol in tols) for taint in hard)


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
