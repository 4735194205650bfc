"""What one reconcile pass reads (`Observed`) and decides (`Decision`), and what it shares with the autoscaler loop
(`ScaleDecision`, `AutoscaleTarget`): plain data, no I/O. decide.py fills a Decision from an Observed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..api.v1alpha1 import AutoscalingSpec, LLMBackendStatus
from ..planning.inventory import GPUNode
from ..render.names import BackendRef
from .conditions import Conditions
from .modelcache import ModelCacheResult


@dataclass
class ScaleDecision:
    """What the autoscaler last decided for a backend (written by the autoscaler loop)."""

    desired_replicas: int
    reason: str
    message: str
    current_ratio: str | None
    last_scale_time: str | None
    extra: dict[str, Any] = field(default_factory=dict)  # more status.autoscaling fields (signal, in flight, cold start)
    request_p99_s: float | None = None  # observed p99 request time in the engines, seconds (None: not measured)
    # more of status.autoscaling.memory (ScalerState.recent): written with the rest, never a reason to write
    recent: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class AutoscaleTarget:
    """What the autoscaler loop needs to know about a backend (decided here, kept in the shared state)."""

    namespace: str
    name: str
    spec: AutoscalingSpec
    scrape_model: str
    selector: str
    current_replicas: int
    capacity_replicas: int | None
    gpus_per_replica: int
    max_batch_size: int
    # Scale to zero with the activator: its pods' selector; at 0 replicas the requests it holds decide 0 -> 1.
    activator_selector: str | None = None
    # status.autoscaling.memory as the CR holds it: what a new scaler resumes (ScalerState.resumed checks it)
    memory: dict[str, Any] | None = None
    # The GPU pool it shares with backends on the same nodes (planning/capacity.gpu_pool; "" none) and its claim on it
    # (autoscaling/pool.py): spec.autoscaling.priority, else the PriorityClass's value (the loop reads it).
    pool: str = ""
    pool_gpus: int = 0
    priority: int | None = None
    priority_class: str | None = None
    # why no node of that pool could hold one of its rendered pods, even with the pool's GPUs free
    # (planning/podfit.py); None: they fit. Then its demand counts against no other backend (autoscaling/pool.py).
    unplaceable: str | None = None
    # the names of that pool's nodes (None: not known; empty: a pool of no nodes): a pod bound elsewhere holds none
    # of its GPUs
    pool_nodes: frozenset[str] | None = None
    # the rendered pod spec of its replicas (a Deployment's; None: a LeaderWorkerSet's, or not rendered): one of its
    # Pending pods stands for a waiting replica only where it could run wherever this one could
    replica_pod_spec: dict[str, Any] | None = None
    # its replicas are LeaderWorkerSet groups (the plan's, never read from pods: anyone who may create pods in the
    # namespace can label one as a group's)
    multi_node: bool = False


@dataclass(frozen=True)
class Observed:
    """Everything one pass reads. `children` maps (kind, name) to the live object, or None when the API server
    said there is none; a name missing from it was not looked at (decide asks for it: Decision.look_up)."""

    obj: dict[str, Any]
    nodes: list[GPUNode] = field(default_factory=list)
    apis: frozenset[str] = frozenset()  # names of OPTIONAL_APIS served here
    children: Mapping[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)  # every pod with the backend's label
    scale_decision: ScaleDecision | None = None
    model_cache: ModelCacheResult | None = None
    adapters: list[dict[str, Any]] | None = None  # status.adapters of this pass (controller/adapters.py)
    hpas: list[dict[str, Any]] | None = None  # the namespace's HPAs; None: not looked at
    prometheus_urls: tuple[str, ...] | None = None  # the admin's allow-list (egress.py); None: not restricted
    now: datetime = field(default_factory=lambda: datetime.now(UTC))  # for deadlines of waits in flight
    free_gpus: Mapping[str, int] | None = None  # node -> GPUs no pod holds; None: not looked at
    node_names: frozenset[str] | None = None  # every Node of the cluster (GPUs or not); None: not known

    @property
    def ref(self) -> BackendRef:
        meta = self.obj["metadata"]
        return BackendRef(meta["name"], meta["namespace"], meta["uid"])


@dataclass
class Decision:
    status: LLMBackendStatus
    conditions: Conditions
    # Children to write: without metadata.resourceVersion created (an existing one is someone else's), with it (and
    # the uid) applied to that object and version only (the one decide saw controlled by this backend): never adopted.
    apply: list[dict[str, Any]] = field(default_factory=list)
    prune: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, name, uid) of owned children not desired
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message) besides condition changes
    requeue_after: float | None = None
    autoscale_target: AutoscaleTarget | None = None  # None: the operator's autoscaler does not scale this backend
    waiting_for_capacity: bool = False  # re-run this backend when nodes change
    model_failure: tuple[str, str] | None = None  # (reason, message): the model's download or inspection needs a person
    # Reads the caches cannot answer that this decision needs: children by (kind, name) and the HPAs.
    look_up: list[tuple[str, str]] = field(default_factory=list)
    look_up_hpas: bool = False
    look_up_free_gpus: bool = False  # serving pods wait for GPUs: would a runner-up fit the free ones?
    placement_note: str = ""  # the plan cannot be placed now but a runner-up could (said with the pending pods)

    def requeue_within(self, seconds: float) -> None:
        """Look again within `seconds` (the earliest of what the steps ask for)."""
        seconds = max(1.0, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)
