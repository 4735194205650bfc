"""Issue 42: a multi-node backend's new LeaderWorkerSet groups never take a name someone else holds.

LWS names group g's leader pod <x>-<g>, its workers' StatefulSet <x>-<g> and worker pods <x>-<g>-<i>; the leader
holds the launcher token that the exec admission policy lets into any pod named <leader>-<i>. decide reads those
names (any owner's: Decision.look_up) before the LeaderWorkerSet gets a group it does not have, and keeps the groups
before the first taken one (groupnames.taken_group). Pure decisions, table-driven.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_decide import NODES, backend, conditions

from devcluster.cli import topology_nodes
from llmbackend.api import conditions as cond
from llmbackend.controller.decide import Decision, Observed, ScaleDecision, decide
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.reconcile import Reconciler, SharedState
from llmbackend.render.multinode import group_child_names

MODEL = {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "models", "path": "llama"}}}
ENGINE = {"backend": "tensorrtllm", "quantization": "bf16"}
APIS = frozenset({"LeaderWorkerSet", "PrometheusRule", "ScaledObject"})
LWS_UID = "uid-lws"
GROUP_KINDS = ("Pod", "StatefulSet")


def spec(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "engine": ENGINE, **fields}


def theirs(kind: str, name: str, owner_uid: str | None = None) -> dict[str, Any]:
    """Another team's object (its own controller, if any; labels say nothing)."""
    meta: dict[str, Any] = {"name": name, "namespace": "serving", "uid": f"theirs-{name}",
                            "labels": {"llmbackend.dev/backend": "llama"}}
    if owner_uid:
        meta["ownerReferences"] = [{"uid": owner_uid, "controller": True, "kind": "StatefulSet", "name": "x"}]
    return {"kind": kind, "metadata": meta}


def owned(kind: str, name: str, owner_uid: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "serving", "uid": f"ours-{name}",
                                       "ownerReferences": [{"uid": owner_uid, "controller": True}]}}


def our_group(g: int) -> dict[tuple[str, str], dict[str, Any]]:
    """Group g as LWS and the StatefulSet controller make it: StatefulSet llama (controlled by our LWS) -> pod llama-g
    -> StatefulSet llama-g -> pod llama-g-1."""
    return {("Pod", f"llama-{g}"): owned("Pod", f"llama-{g}", "ours-llama"),
            ("StatefulSet", f"llama-{g}"): owned("StatefulSet", f"llama-{g}", f"ours-llama-{g}"),
            ("Pod", f"llama-{g}-1"): owned("Pod", f"llama-{g}-1", f"ours-llama-{g}")}


LEADER_SET = {("StatefulSet", "llama"): owned("StatefulSet", "llama", LWS_UID)}


def live_children(wanted: dict[str, Any], groups: int, **observed: Any) -> dict[tuple[str, str], Any]:
    """The children of `wanted`'s first pass as the API server holds them, the LeaderWorkerSet with `groups` groups."""
    first = decide_with(wanted, {}, **observed)
    live = {}
    for child in copy.deepcopy(first.apply):
        child["metadata"].update(uid=f"uid-{child['kind']}", resourceVersion="5", generation=1)
        if child["kind"] == "LeaderWorkerSet":
            child["metadata"]["uid"] = LWS_UID
            child["spec"]["replicas"] = groups
        live[(child["kind"], child["metadata"]["name"])] = child
    return live


def decide_with(wanted: dict[str, Any], existing: dict[tuple[str, str], Any], children: dict | None = None,
                **observed: Any) -> Decision:
    """decide, then again with what it asked for answered: `existing` (anyone's objects by name), else absent."""
    children = dict(children or {})
    decision = decide(Observed(backend(wanted), NODES, apis=APIS, children=children, **observed))
    for _ in range(2):  # the names, then the HPAs when the live replicas differ (as reconcile's look-up rounds)
        if decision.look_up_hpas:
            observed["hpas"] = []
        children.update({key: existing.get(key) for key in decision.look_up})
        decision = decide(Observed(backend(wanted), NODES, apis=APIS, children=children, **observed))
    assert decision.look_up == [] and not decision.look_up_hpas
    return decision


def lws_replicas(decision: Decision) -> int | None:
    return next((c["spec"]["replicas"] for c in decision.apply if c["kind"] == "LeaderWorkerSet"), None)


def group_names_asked(wanted: dict[str, Any], children: dict | None = None, **observed: Any) -> list[tuple[str, str]]:
    asked = decide(Observed(backend(wanted), NODES, apis=APIS, children=children or {}, **observed))
    return [key for key in asked.look_up if key[0] in GROUP_KINDS]


def test_the_sample_plan_spans_two_nodes_and_a_new_backend_reads_every_name_its_groups_take():
    """One leader, one worker per group (TP8 x PP2 on DGX H100): 3 names per group, nothing of ours to chain yet."""
    assert group_names_asked(spec(replicas=2)) == [
        ("Pod", "llama-0"), ("StatefulSet", "llama-0"), ("Pod", "llama-0-1"),
        ("Pod", "llama-1"), ("StatefulSet", "llama-1"), ("Pod", "llama-1-1")]


# (name, spec, groups the live LeaderWorkerSet has (None: none yet), objects under the names, groups kept or None
# when none is created, the object the message names)
CASES = [
    ("free names: every group", spec(replicas=3), None, {}, 3, None),
    ("taken StatefulSet", spec(replicas=3), None,
     {("StatefulSet", "llama-2"): theirs("StatefulSet", "llama-2")}, 2, "StatefulSet llama-2"),
    ("taken worker pod", spec(replicas=3), None,
     {("Pod", "llama-1-1"): theirs("Pod", "llama-1-1", owner_uid="their-statefulset")}, 1, "Pod llama-1-1"),
    ("taken leader pod", spec(replicas=3), None, {("Pod", "llama-0"): theirs("Pod", "llama-0")}, None, "Pod llama-0"),
    ("taken worker StatefulSet of group 0: LWS would take it as the workers", spec(replicas=1), None,
     {("StatefulSet", "llama-0"): theirs("StatefulSet", "llama-0")}, None, "StatefulSet llama-0"),
    ("ours by the uid chain (a scale-down's group still going)", spec(replicas=3), 1,
     {**LEADER_SET, **our_group(1), **our_group(2)}, 3, None),
    ("the chain broken: a worker under our leader's name, not of our StatefulSet", spec(replicas=3), 1,
     {**LEADER_SET, **our_group(1), ("Pod", "llama-2-1"): owned("Pod", "llama-2-1", "ours-llama-1")}, 2,
     "Pod llama-2-1"),
    ("a leader StatefulSet not of our LWS proves nothing", spec(replicas=3), 1,
     {("StatefulSet", "llama"): owned("StatefulSet", "llama", "another-lws"), **our_group(1)}, 1, "Pod llama-1"),
    ("scale down then up: a foreign object made meanwhile under a freed group's name", spec(replicas=3), 1,
     {**LEADER_SET, ("Pod", "llama-2"): theirs("Pod", "llama-2")}, 2, "Pod llama-2"),
]


@pytest.mark.parametrize("wanted, live_groups, existing, kept, holder", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_new_groups_stop_before_the_first_name_someone_else_holds(wanted, live_groups, existing, kept, holder):
    children = live_children(wanted, live_groups) if live_groups is not None else {}
    decision = decide_with(wanted, existing, children)
    degraded = decision.conditions.get("Degraded")
    if holder is None:
        assert lws_replicas(decision) == kept
        assert degraded["reason"] != cond.GROUP_NAME_TAKEN
        return
    assert (degraded["status"], degraded["reason"]) == ("True", cond.GROUP_NAME_TAKEN)
    message = degraded["message"]
    assert message.startswith(f"{holder} holds a name") and "another name" in message and "lower replicas" in message
    assert "serving/" not in message, "names no namespace"
    assert decision.requeue_after is not None and decision.requeue_after <= 60, "nothing wakes the backend: look again"
    if kept is None:  # group 0 taken: nothing of the workload is created, nothing served
        assert lws_replicas(decision) is None and decision.apply == []
        assert conditions(decision)["Available"] == ("False", cond.GROUP_NAME_TAKEN)
    else:
        assert lws_replicas(decision) == kept
        assert f"keeps {kept} of the 3 groups" in message


def test_names_are_read_only_while_groups_are_added():
    """A steady LeaderWorkerSet, or one scaled down, reads no name: the cost is paid only when groups are added, and
    only for the added ones (plus the leader StatefulSet, the root of the chain)."""
    live = live_children(spec(replicas=3), 3)
    assert group_names_asked(spec(replicas=3), live) == []
    assert group_names_asked(spec(replicas=2), live) == []
    assert group_names_asked(spec(replicas=4), live) == [
        ("StatefulSet", "llama"), ("Pod", "llama-3"), ("StatefulSet", "llama-3"), ("Pod", "llama-3-1")]
    # the groups it has are not checked again, whoever made an object under their names since
    decision = decide_with(spec(replicas=3), {("Pod", "llama-2-1"): theirs("Pod", "llama-2-1")}, live)
    assert decision.conditions.get("Degraded")["reason"] != cond.GROUP_NAME_TAKEN


def test_someone_else_s_leader_worker_set_is_not_checked_it_is_resource_exists():
    live = live_children(spec(replicas=1), 1)
    live[("LeaderWorkerSet", "llama")]["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True}]
    assert group_names_asked(spec(replicas=3), live) == []
    decision = decide_with(spec(replicas=3), {}, live)
    assert conditions(decision)["Degraded"] == ("True", cond.RESOURCE_EXISTS)


def test_the_operator_autoscaler_s_wish_is_capped_the_same_way():
    wanted = spec(autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 6})
    scale = ScaleDecision(desired_replicas=4, reason="AboveTarget", message="queue grows", current_ratio="2.0",
                          last_scale_time=None)
    live = live_children(wanted, 1, scale_decision=scale)
    decision = decide_with(wanted, {**LEADER_SET, ("StatefulSet", "llama-2"): theirs("StatefulSet", "llama-2")}, live,
                           scale_decision=scale)
    assert lws_replicas(decision) == 2
    assert decision.conditions.get("Degraded")["reason"] == cond.GROUP_NAME_TAKEN
    target = decision.autoscale_target
    assert target is not None and target.current_replicas == 2 and target.capacity_replicas is not None
    assert target.capacity_replicas <= 2, "the autoscaler does not wish past the taken group"


@pytest.mark.parametrize("mode, bounds", [("hpa", ("HorizontalPodAutoscaler", "minReplicas", "maxReplicas")),
                                          ("keda", ("ScaledObject", "minReplicaCount", "maxReplicaCount"))])
def test_an_hpa_or_scaled_object_never_scales_past_the_taken_group(mode, bounds):
    """In modes hpa and keda the HPA adds groups, up to maxReplicas: those names are read, and its bounds capped."""
    auto = {"enabled": True, "mode": mode, "minReplicas": 3, "maxReplicas": 5,
            "prometheus": {"url": "http://prometheus.monitoring:9090"}}
    wanted = spec(autoscaling=auto)
    asked = group_names_asked(wanted)
    assert ("Pod", "llama-4-1") in asked and ("Pod", "llama-5") not in asked
    decision = decide_with(wanted, {("Pod", "llama-2-1"): theirs("Pod", "llama-2-1")})
    kind, low, high = bounds
    scaler = next(c for c in decision.apply if c["kind"] == kind)
    assert (scaler["spec"][low], scaler["spec"][high]) == (2, 2)
    assert lws_replicas(decision) == 1  # created with one group; the HPA adds the second
    assert decision.conditions.get("Degraded")["reason"] == cond.GROUP_NAME_TAKEN


def test_a_single_node_backend_reads_no_group_name():
    wanted = {"model": {"preset": "llama-3.1-8b", "source": MODEL["source"]}, "replicas": 3}
    assert group_names_asked(wanted) == []


# ---- the reconciler: what it reads, on the in-memory API server ----


class CountingKube(FakeKube):
    """Counts the GETs of StatefulSets and Pods by name (the group names; nothing else reads them by name)."""

    def __init__(self) -> None:
        super().__init__(apis={"leaderworkerset.x-k8s.io/v1/leaderworkersets"})
        self.name_reads: list[tuple[str, str]] = []

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if kind in GROUP_KINDS:
            self.name_reads.append((kind, name))
        return super().get(kind, namespace, name)


def reconcile(kube: CountingKube, replicas: int) -> dict[str, Any]:
    state = SharedState()
    for node in topology_nodes("dgx-h100-x4"):
        state.inventory.upsert(node)
    obj = kube.objects.get(("LLMBackend", "serving", "llama")) or backend(spec())
    obj["spec"] = spec(replicas=replicas)
    kube.objects[("LLMBackend", "serving", "llama")] = obj
    kube.name_reads.clear()
    Reconciler(kube, state).reconcile(("serving", "llama"))
    return kube.objects[("LLMBackend", "serving", "llama")]


def test_the_reconciler_reads_each_added_group_s_names_once_and_keeps_a_taken_one_out():
    """A new backend with 2 groups: 3 GETs per group (leader pod, workers' StatefulSet, one worker), none in a steady
    pass; another team's StatefulSet llama-2 keeps a scale to 3 at 2 groups (4 GETs: StatefulSet llama too), and
    the status says so; the status is written, nothing raised."""
    kube = CountingKube()
    reconcile(kube, 2)
    assert sorted(kube.name_reads) == sorted(group_child_names("llama", 2, 2)[2:])
    assert kube.objects[("LeaderWorkerSet", "serving", "llama")]["spec"]["replicas"] == 2
    reconcile(kube, 2)
    assert kube.name_reads == []
    kube._stored(theirs("StatefulSet", "llama-2"))
    obj = reconcile(kube, 3)
    assert sorted(kube.name_reads) == [("Pod", "llama-2"), ("Pod", "llama-2-1"), ("StatefulSet", "llama"),
                                       ("StatefulSet", "llama-2")]
    assert kube.objects[("LeaderWorkerSet", "serving", "llama")]["spec"]["replicas"] == 2
    degraded = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", cond.GROUP_NAME_TAKEN)
    assert kube.objects[("StatefulSet", "serving", "llama-2")]["metadata"]["uid"] == "theirs-llama-2"
