"""Could the kube-scheduler place a pod on some node of a GPU pool once that node's GPUs are free? (pure)

The GPU pool shared by priority (autoscaling/pool.py) takes replicas from other backends only for pods that could
run on the GPUs it frees. This module answers for a rendered pod spec against the pool's nodes, with the filters of
the kube-scheduler (k8s.io/kubernetes v1.36, the default profile's order) that depend on the pod and the node alone:

1. NodeUnschedulable (pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go, Filter): a cordoned
   node takes only pods tolerating node.kubernetes.io/unschedulable:NoSchedule.
2. TaintToleration (pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go, Filter): every NoSchedule
   and NoExecute taint must be tolerated, by the rule of k8s.io/api core/v1/toleration.go Toleration.ToleratesTaint.
3. NodeAffinity (pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, Filter, through
   k8s.io/component-helpers scheduling/corev1/nodeaffinity/nodeaffinity.go GetRequiredNodeAffinity and Match):
   spec.nodeSelector (every pair equal), then the required node affinity's terms, ORed.
4. NodeResourcesFit (pkg/scheduler/framework/plugins/noderesources/fit.go, computePodResourceRequest and
   fitsRequest): the pod's requests (k8s.io/component-helpers resource/helpers.go PodRequests) against the node's
   allocatable with nothing else on it: the GPUs are assumed freed, and so is the rest (see "Not modelled").

Not modelled (they depend on other pods, volumes or scheduler configuration the operator does not read): the requests
of the node's other pods (DaemonSets, other tenants' CPU-only pods), NodePorts, volume filters (VolumeRestrictions,
NodeVolumeLimits, VolumeBinding, VolumeZone), PodTopologySpread, InterPodAffinity, DynamicResources, the profile's
addedAffinity and NodeResourcesFit's ignoredResources, RuntimeClass overhead and LimitRange defaults (added at
admission, not in the template), and scheduler extenders or a second scheduler. Each of those can only make a pod
that passes here unplaceable, never the reverse, except ignoredResources and a webhook that adds tolerations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import quantity
from .inventory import GPU_RESOURCE, GPUNode, parse_int64, tolerates

# The resources NodeResourcesFit compares besides cpu, memory and ephemeral-storage: its scalar resources
# (pkg/scheduler/util/utils.go IsScalarResourceName: extended and kubernetes.io/-prefixed names, hugepages-*,
# attachable-volumes-*). A request of any other name (e.g. pods, storage) is not compared.
_NATIVE = ("cpu", "memory", "ephemeral-storage")
UNSCHEDULABLE_TAINT = ("node.kubernetes.io/unschedulable", "", "NoSchedule")
_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def _compared(resource: str) -> bool:
    return (resource in _NATIVE or "/" in resource or resource.startswith("hugepages-")
            or resource.startswith("attachable-volumes-"))


def _container_requests(container: Mapping[str, Any], only: str | None = None) -> dict[str, int]:
    """A container's requests as the pod will have them: a limit without a request becomes the request (the API
    server defaults pods so: pkg/apis/core/v1/defaults.go SetDefaults_Pod), in scheduler units; ``only``: of that
    resource alone."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    if only is not None:
        merged = {only: merged[only]} if only in merged else {}
    out = {}
    for name, value in merged.items():
        units = quantity.scheduler_units(str(name), value)
        if units is not None and units > 0:  # the API server refuses a negative request: it cancels nothing
            out[str(name)] = units
    return out


def unreadable(pod: Mapping[str, Any]) -> list[str]:
    """The pod's requests, limits and overhead that are not quantities podfit reads (quantity.parse: None), as
    `resource value`: the API server refuses some, others are past any node; either way the pod is not judged
    placeable."""
    containers = [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]
    sources = [(c.get("resources") or {}).get(part) or {} for c in containers for part in ("limits", "requests")]
    sources += [(pod.get("resources") or {}).get("requests") or {}, pod.get("overhead") or {}]
    return [f"{name} {str(value)[:32]}{'...' if len(str(value)) > 32 else ''}"
            for source in sources for name, value in source.items() if quantity.parse(value) is None]


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, units in more.items():
        total[name] = total.get(name, 0) + units


def _max(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, units in other.items():
        total[name] = max(total.get(name, 0), units)


def pod_requests(pod: Mapping[str, Any], only: str | None = None) -> dict[str, int]:
    """What the scheduler reserves for the pod (a pod spec; k8s.io/component-helpers v0.36 resource/helpers.go
    PodRequests and aggregateContainerResourcesByFn): the containers' sum plus sidecars (restartable init
    containers), or more when an init container with the sidecars started before it needs more; pod-level requests
    replace cpu, memory and hugepages; overhead is added. ``only``: of that resource alone (cheaper)."""
    total: dict[str, int] = {}
    for container in pod.get("containers") or []:
        _add(total, _container_requests(container, only))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in pod.get("initContainers") or []:
        requests = _container_requests(container, only)
        if container.get("restartPolicy") == "Always":  # a sidecar: runs beside the containers
            _add(total, requests)
            _add(sidecars, requests)
            during = dict(sidecars)
        else:
            during = dict(requests)
            _add(during, sidecars)
        _max(init_peak, during)
    _max(total, init_peak)
    pod_level = (pod.get("resources") or {}).get("requests") or {}
    for name, value in pod_level.items():
        if (name in ("cpu", "memory") or str(name).startswith("hugepages-")) and only in (None, name):
            total[str(name)] = max(quantity.scheduler_units(str(name), value) or 0, 0)
    for name, value in (pod.get("overhead") or {}).items():
        if only in (None, name):
            _add(total, {str(name): max(quantity.scheduler_units(str(name), value) or 0, 0)})
    return {name: units for name, units in total.items() if units > 0 and _compared(name)}


def pod_gpus(pod: Mapping[str, Any], resource: str = GPU_RESOURCE) -> int:
    """The GPUs a pod (a Pod object) requests, as the kube-scheduler reserves them on its node and a ResourceQuota
    counts them (k8s.io/kubernetes v1.36 pkg/quota/v1/evaluator/core/pods.go PodUsageFunc charges
    requests.<resource> from the same PodRequests): ``pod_requests`` of its spec (init containers and sidecars
    included, a limit standing in for a missing request, quantities in any canonical form, millis rounded up). The one count of a pod's GPUs: the GPUs
    pods hold on a node (``gpus_held_by_node``) and a backend's own quota use (autoscaling/pool.py)."""
    return pod_requests(pod.get("spec") or {}, only=resource).get(resource, 0)


def gpus_held_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The GPUs the pods bound to each node hold (``pod_gpus``), every pod's until it ends: one deleted and still
    stopping holds its GPUs until the kubelet frees them. The GPUs free on a node (controller/decide.py gpus_free)
    and those no pod holds in a GPU pool (autoscaling/holding.py gpus_in_use) are the rest."""
    held: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            held[node] = held.get(node, 0) + pod_gpus(pod)
    return held


def _requirement(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool | None:
    """One matchExpressions entry against the node's labels (k8s.io/apimachinery pkg/labels/selector.go
    NewRequirement and Requirement.Matches); None: not a valid requirement (its term then matches nothing)."""
    key, operator, values = expr.get("key") or "", expr.get("operator"), list(expr.get("values") or [])
    present = key in labels
    if operator in ("In", "NotIn"):
        if not values:
            return None
        inside = present and labels[key] in values
        return inside if operator == "In" else not inside
    if operator in ("Exists", "DoesNotExist"):
        if values:
            return None
        return present if operator == "Exists" else not present
    if operator in ("Gt", "Lt"):
        bound = parse_int64(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        mine = parse_int64(labels.get(key)) if present else None
        if mine is None:
            return False
        return mine > bound if operator == "Gt" else mine < bound
    return None


def _field(expr: Mapping[str, Any], name: str) -> bool | None:
    """One matchFields entry (nodeaffinity.go nodeSelectorRequirementsAsFieldSelector): In or NotIn of exactly one
    value, against the node's only field, metadata.name."""
    values = list(expr.get("values") or [])
    if expr.get("operator") not in ("In", "NotIn") or len(values) != 1:
        return None
    value = name if expr.get("key") == "metadata.name" else ""
    return (value == values[0]) if expr.get("operator") == "In" else (value != values[0])


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """A nodeSelectorTerm: its expressions and fields ANDed; an empty or invalid term matches nothing."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    results = [_requirement(e, labels) for e in expressions] + [_field(f, name) for f in fields]
    return all(r is True for r in results)


def affinity_matches(pod: Mapping[str, Any], node: GPUNode) -> bool:
    """NodeAffinity's Filter: spec.nodeSelector, then requiredDuringSchedulingIgnoredDuringExecution."""
    labels = node.label_map
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(_term_matches(t, labels, node.name) for t in required.get("nodeSelectorTerms") or [])


def failures(pod: Mapping[str, Any], requests: Mapping[str, int], node: GPUNode) -> list[str]:
    """Why the scheduler would not place the pod on this node with nothing else on it ([]: it would), in the
    words of the first filter that refuses it, as the scheduler stops at the first."""
    tolerations = [t for t in pod.get("tolerations") or [] if isinstance(t, Mapping)]
    if node.cordoned and not any(tolerates(t, *UNSCHEDULABLE_TAINT) for t in tolerations):
        return ["node(s) were unschedulable"]
    for key, value, effect in node.taints:
        if effect in _HARD_EFFECTS and not any(tolerates(t, key, value, effect) for t in tolerations):
            return [f"node(s) had untolerated taint {{{key}: {value}}}" if value
                    else f"node(s) had untolerated taint {{{key}}}"]
    if not affinity_matches(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    allocatable = node_allocatable(node)
    out = ["Too many pods"] if allocatable.get("pods", 1) < 1 else []
    return out + [f"Insufficient {name}" for name, units in sorted(requests.items(), key=_resource_order)
                  if units > allocatable.get(name, 0 if _scalar(name) else units)]


def node_allocatable(node: GPUNode) -> dict[str, int]:
    """The node's allocatable as NodeResourcesFit reads it. A scalar resource the node does not report is 0 there;
    cpu, memory, ephemeral-storage and pods that it does not report are not judged (every kubelet reports them: only
    a node object written by hand lacks them). GPUs are the inventory's count, whatever else the node reports."""
    allocatable = dict(node.allocatable)
    allocatable[GPU_RESOURCE] = node.gpu_count
    return allocatable


def _scalar(resource: str) -> bool:
    return resource not in _NATIVE


def _resource_order(item: tuple[str, int]) -> tuple[int, str]:
    name = item[0]
    return (_NATIVE.index(name) if name in _NATIVE else len(_NATIVE), name)


def unplaceable(pods: Iterable[tuple[str, Mapping[str, Any]]], nodes: Sequence[GPUNode]) -> str | None:
    """Why no node of ``nodes`` can hold one of these pods (role, pod spec); None when each fits some node (or
    there are no nodes to judge). Said as the scheduler says it, with the largest allocatable beside each request
    that no node meets, so that the tenant knows what to change."""
    if not nodes:
        return None
    for role, pod in pods:
        if unread := unreadable(pod):
            return (f"a {role} pod requests what is not a quantity the operator reads (at most "
                    f"{quantity.MAX_DIGITS} digits): {', '.join(unread)}")
        requests = pod_requests(pod)
        if any(not failures(pod, requests, node) for node in nodes):
            continue
        counts: Counter[str] = Counter()
        short: dict[str, int] = {}  # resource no node has enough of -> the most a node (past the other filters) has
        for node in nodes:
            reasons = failures(pod, requests, node)
            counts.update(reasons)
            for reason in reasons:
                if reason.startswith("Insufficient "):
                    name = reason.removeprefix("Insufficient ")
                    short[name] = max(short.get(name, 0), node_allocatable(node).get(name, 0))
        said = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        why = f"no node of the pool can hold a {role} pod: 0/{len(nodes)} nodes are available: {said}"
        if short:
            why += "; " + "; ".join(
                f"it requests {name} {quantity.text(name, requests[name])}, the most a node of the pool has is "
                f"{quantity.text(name, most)}" for name, most in sorted(short.items(), key=_resource_order))
        return why
    return None


__all__ = ["affinity_matches", "failures", "node_allocatable", "pod_requests", "tolerates", "unplaceable", "unreadable"]
