"""The names a multi-node backend's LeaderWorkerSet gives the groups it adds, and whether someone else holds one
(issue 42). A group's leader pod holds the launcher token, which the exec admission policy lets into any pod named
<x>-<g>-<i>, and LWS takes a StatefulSet <x>-<g> it finds as that group's workers: so before a group is added, its
names must be free or ours. Pure: decide.py asks, reconcile.py reads the names (anyone's objects) first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api.v1alpha1 import AutoscalingMode, LLMBackendSpec, PlanStatus
from ..render.multinode import group_names

Names = list[tuple[str, str]]  # (kind, name)


@dataclass(frozen=True)
class TakenGroup:
    """The first group a LeaderWorkerSet would add whose name an object of someone else holds."""

    group: int  # the LeaderWorkerSet keeps this many groups
    message: str


def new_groups(spec: LLMBackendSpec, lws: str, plan_status: PlanStatus, live_workload: dict[str, Any] | None,
               replicas: int | None) -> list[tuple[int, Names]]:
    """(index, names) of the groups this pass would let the LeaderWorkerSet `lws` (ours, or not there yet) add: from
    the live one's count up to the replicas written (spec or the operator's autoscaler), or in modes hpa/keda up to
    maxReplicas (the HPA adds them; its bounds are capped alike: cap_groups). Empty when none is added."""
    live_groups = (live_workload or {}).get("spec", {}).get("replicas") or 0
    hpa_scaled = spec.autoscaling.enabled and spec.autoscaling.mode in (AutoscalingMode.HPA, AutoscalingMode.KEDA)
    target = spec.autoscaling.max_replicas if hpa_scaled else (replicas if replicas is not None else live_groups)
    return [(g, group_names(lws, g, plan_status.nodes_per_replica)) for g in range(live_groups, target)]


def look_ups(groups: list[tuple[int, Names]], lws: str, live_workload: dict[str, Any] | None) -> Names:
    """The names to read before groups are added (anyone's), with the leader StatefulSet <lws> when a LeaderWorkerSet
    is there: the root of the controllers' chain that makes a group's objects ours."""
    if not groups:
        return []
    root = [("StatefulSet", lws)] if live_workload is not None else []
    return root + [name for _, names in groups for name in names]


def taken_group(found: Mapping[tuple[str, str], dict[str, Any] | None], lws: str, groups: list[tuple[int, Names]],
                live_workload: dict[str, Any] | None) -> TakenGroup | None:
    """The first of `groups` one of whose names another object holds (the LeaderWorkerSet keeps the groups before
    it), None when all are free or ours. `found`: the objects read by name (None: absent)."""
    lws_uid = (live_workload or {}).get("metadata", {}).get("uid")
    for group, names in groups:
        holder = foreign_holder(found, lws, names, lws_uid)
        if holder is None:
            continue
        message = (f"{holder} holds a name LeaderWorkerSet {lws} would give its group {group} (leader pod "
                   f"{lws}-{group}, workers' StatefulSet {lws}-{group}, worker pods {lws}-{group}-<i>) "
                   f"and is not this LLMBackend's; that group's leader would hold the launcher's exec right into it, "
                   f"so the LeaderWorkerSet keeps {group} of the {groups[-1][0] + 1} groups asked for. Give this "
                   f"LLMBackend another name (delete and recreate it), or lower replicas (autoscaling.maxReplicas) to "
                   f"{group}; the operator changes nothing of that object and looks again within a minute")
        return TakenGroup(group, message)
    return None


def foreign_holder(found: Mapping[tuple[str, str], dict[str, Any] | None], lws: str, names: Names,
                   lws_uid: str | None) -> str | None:
    """"<kind> <name>" of the first object of one group's names that is not our LeaderWorkerSet's, by the uid chain of
    controller references LWS and StatefulSets make: LWS -> StatefulSet <lws> -> leader pod -> workers' StatefulSet
    -> worker pods (`names` in that order, render/multinode.group_names). Labels prove nothing: anyone sets them."""
    def uid(obj: dict[str, Any]) -> str | None:
        return obj["metadata"].get("uid")

    def controller(obj: dict[str, Any]) -> str | None:
        return next((o.get("uid") for o in obj["metadata"].get("ownerReferences") or [] if o.get("controller")), None)

    leaders = found.get(("StatefulSet", lws))
    ours = {uid(leaders)} if lws_uid and leaders is not None and controller(leaders) == lws_uid else set()
    ours.discard(None)
    for kind, name in names:
        obj = found.get((kind, name))
        if obj is None:
            continue
        if controller(obj) not in ours:
            return f"{kind} {name}"
        ours.add(uid(obj))
    return None


def cap_groups(desired: list[dict[str, Any]], lws: str, groups: int, replicas: int | None) -> int | None:
    """The rendered LeaderWorkerSet `lws` gets at most `groups` groups from whoever scales it: its replicas, the bounds
    of its HPA or ScaledObject (edited in `desired`). Returns the replicas to write."""
    bounds = {"LeaderWorkerSet": ("replicas",), "HorizontalPodAutoscaler": ("minReplicas", "maxReplicas"),
              "ScaledObject": ("minReplicaCount", "maxReplicaCount")}
    for obj in desired:
        spec = obj.get("spec") or {}
        scaled = obj["metadata"]["name"] if obj["kind"] == "LeaderWorkerSet" else (
            (spec.get("scaleTargetRef") or {}).get("name") if
            (spec.get("scaleTargetRef") or {}).get("kind") == "LeaderWorkerSet" else None)
        if obj["kind"] in bounds and scaled == lws:
            for key in bounds[obj["kind"]]:
                if key in spec:
                    spec[key] = min(spec[key], groups)
    return min(replicas, groups) if replicas is not None else None
