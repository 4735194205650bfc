"""Drain-safe scale-down (pure): deletion costs from in-flight work, the drain bound and its rendering."""

from __future__ import annotations

import pytest

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.autoscaling.drain import (
    DELETION_COST_ANNOTATION,
    ROOM_FIRST_COST,
    Rooms,
    deletion_costs,
    removable,
    room_first,
)
from llmbackend.render import drain
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects


@pytest.mark.parametrize("in_flight, current, expected", [
    # least work -> lowest cost -> deleted first
    ({"a": 60.0, "b": 3.0, "c": 0.0}, {}, {"a": "60", "b": "3", "c": "0"}),
    # unchanged annotations are not rewritten (no write per sync period)
    ({"a": 60.0, "b": 3.4}, {"a": "60", "b": "3"}, {}),
    ({"a": 2.6}, {"a": "60"}, {"a": "3"}),
    # no reading (NaN) leaves the pod alone; negatives clamp to 0
    ({"a": float("nan"), "b": -1.0}, {}, {"b": "0"}),
])
def test_deletion_costs_follow_in_flight_work(in_flight, current, expected):
    assert deletion_costs(in_flight, current) == expected
    assert DELETION_COST_ANNOTATION == "controller.kubernetes.io/pod-deletion-cost"


def _bound(name: str, node: str | None, gpus: int) -> dict:
    """A Ready Running pod (the pods a deletion cost orders) of ``gpus`` GPUs on ``node``."""
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_room_first_names_the_pods_on_nodes_where_they_make_the_takers_room():
    pods = [_bound("n2-a", "n2", 2), _bound("n2-b", "n2", 2), _bound("n3-a", "n3", 2), _bound("pending", None, 2)]
    # a 4-GPU replica: n3 has 2 free (its pod alone makes the room), n2 none (both its pods would): n3's room first
    assert room_first(removable(pods)[1], {"n2": 0, "n3": 2}, 4).first == {"n3-a": 1}
    # two such replicas: n3's room, then n2's, each room whole before the next
    rooms = room_first(removable(pods)[1], {"n2": 0, "n3": 2}, 4, replicas=2)
    assert rooms == Rooms({"n3-a": 1, "n2-a": 2, "n2-b": 2}, {"n2": 0, "n3": 0}, 2)
    # a node with the room already takes the replica, none of the pods goes first
    assert room_first(removable(pods)[1], {"n2": 4, "n3": 1}, 4) == Rooms({}, {"n2": 0, "n3": 1}, 1)
    # a node not in the pool (not in ``free``) is no room
    assert room_first(removable(pods)[1], {"n3": 2}, 4, replicas=2) == Rooms({"n3-a": 1}, {"n3": 0}, 1)
    # no more pods than the cut: n2's room needs two where one is left
    assert room_first(removable(pods)[1], {"n2": 0, "n3": 2}, 4, replicas=2, limit=2).first == {"n3-a": 1}
    assert room_first(removable(pods)[1], {"n2": 0, "n3": 2}, 4, replicas=2, start=5).first == {"n3-a": 5, "n2-a": 6, "n2-b": 6}


def test_room_first_marks_only_the_pods_the_room_needs_the_least_busy_first():
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n2", 2)]
    # a 2-GPU replica on a full node: one pod makes the room, the least busy (then by name)
    assert room_first(removable(pods)[1], {"n2": 0}, 2, {"a": 4.0, "b": 1.0, "c": float("nan")}).first == {"c": 1}
    assert room_first(removable(pods)[1], {"n2": 0}, 2, {"a": 4.0, "b": 1.0, "c": 9.0}).first == {"b": 1}
    # a 4-GPU one: two of them
    assert room_first(removable(pods)[1], {"n2": 0}, 4, {"a": 4.0, "b": 1.0, "c": 9.0}).first == {"a": 1, "b": 1}


def test_room_first_rooms_come_fewest_pods_then_least_busy_and_are_never_split():
    """Two full nodes, a 4-GPU replica: the two least busy pods are on different nodes; the room is one node's."""
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n3", 2), _bound("d", "n3", 2)]
    rooms = room_first(removable(pods)[1], {"n2": 0, "n3": 0}, 4, {"a": 5.0, "b": 0.0, "c": 1.0, "d": 7.0})
    assert rooms.first == {"a": 1, "b": 1} and rooms.free == {"n2": 0, "n3": 0}


def test_room_first_leaves_out_pods_that_are_not_removable():
    """A Failed pod's GPUs are free already (counted in ``free``); a pod being deleted goes anyway."""
    failed = {**_bound("f", "n2", 2), "status": {"phase": "Failed"}}
    gone = _bound("g", "n2", 2)
    gone["metadata"]["deletionTimestamp"] = "2026-12-08T00:00:00Z"
    assert room_first(removable([failed, gone, _bound("a", "n2", 2)])[1], {"n2": 2}, 4).first == {"a": 1}
    assert room_first(removable([failed, gone])[1], {"n2": 2}, 4) == Rooms({}, {"n2": 2}, 0)


def test_removable_puts_first_the_pods_the_replicaset_removes_before_any_cost():
    """Unassigned, Pending or Unknown, not Ready: the ReplicaSet removes them first whatever their costs."""
    pulling = {**_bound("pulling", "n2", 2), "status": {"phase": "Pending"}}
    cold = _bound("cold", "n3", 2)
    cold["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    ahead, ranked = removable([pulling, cold, _bound("unbound", None, 2), _bound("a", "n2", 2), _bound("z", "n2", 0)])
    assert ahead == [("pulling", "n2", 2), ("cold", "n3", 2), ("unbound", None, 2)] and ranked == [("a", "n2", 2)]


def test_room_first_spends_none_of_what_the_backend_gives_on_a_room_there_already():
    """Two 2-GPU replicas lacking, one given by this backend: n4's free room takes one, a room is made for the other."""
    pods = removable([_bound("a", "n2", 2), _bound("b", "n3", 2)])[1]
    rooms = room_first(pods, {"n2": 0, "n3": 0, "n4": 2}, 2, {"a": 5.0}, replicas=2, taking=1)
    assert rooms == Rooms({"b": 1}, {"n2": 0, "n3": 0, "n4": 0}, 2)
    assert room_first(pods, {"n2": 0, "n3": 0, "n4": 0}, 2, replicas=2, taking=1).placed == 1


def test_pods_that_make_room_go_first_then_the_least_busy_and_a_spent_mark_goes_back_to_0():
    costs = deletion_costs({"a": 5.0, "b": 0.0, "c": 1.0}, {}, {"a": 1, "c": 2})
    assert int(costs["a"]) < int(costs["c"]) < int(costs["b"]) == 0  # the room ranked first, busy or not
    assert int(costs["a"]) == ROOM_FIRST_COST + 2**16 + 5 and int(costs["a"]) >= -(2**31)
    # no reading: put first all the same; once no cut needs it, a negative cost (ours) goes back to 0
    assert deletion_costs({}, {}, {"warming": 1}) == {"warming": str(ROOM_FIRST_COST + 2**16)}
    assert deletion_costs({}, {"warming": str(ROOM_FIRST_COST), "other": "7"}) == {"warming": "0"}


@pytest.mark.parametrize("max_seq_len, override, expected", [
    (4096, None, 4096 * drain.DRAIN_SECONDS_PER_TOKEN + drain.DRAIN_QUEUE_MARGIN_S),  # 276 s
    (256, None, drain.MIN_DRAIN_S),          # short requests still get the floor
    (131072, None, drain.MAX_DRAIN_S),       # capped
    (4096, 90, 90),
])
def test_drain_bound(max_seq_len, override, expected):
    assert drain.drain_seconds(max_seq_len, override) == int(round(expected + 0.49))


def _pod(plan_tp=4, pp=1, nodes=1, max_seq_len=8192):
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-70b", "source": {"pvc": {"claimName": "models", "path": "/m"}}},
        "engine": {"maxSeqLen": max_seq_len}})
    plan = PlanStatus(tensor_parallel=plan_tp, pipeline_parallel=pp, gpus_per_replica=plan_tp * pp, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=60 << 30, gpu_product="NVIDIA-H100-80GB-HBM3", topology_source="annotation")
    objs = {o["kind"]: o for o in desired_objects(BackendRef("b", "ns", "u"), spec, plan, 2, RolloutStrategy("RollingUpdate", 1, 0))}
    return objs, drain.drain_seconds(max_seq_len)


def test_rendered_pod_drains_before_it_stops():
    objs, bound = _pod(plan_tp=4)
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "python3"
    # every tritonserver (each MPI rank) gets the exit timeout; the grace covers deregistration + drain
    ranks = [i for i, a in enumerate(c["args"]) if a == "tritonserver"]
    assert ranks and all(c["args"][i + 1] == f"--exit-timeout-secs={bound}" for i in ranks)
    assert pod["terminationGracePeriodSeconds"] >= bound + drain.DEREGISTER_DELAY_S
    assert bound > 60, "longer than the old fixed 60 s grace for 8k-token requests"


@pytest.mark.parametrize("engine", [{"maxSeqLen": 4096}, {"maxSeqLen": 512, "backend": "vllm"}])
@pytest.mark.parametrize("serving", [{}, {"drainSeconds": 90}])
def test_the_models_finalize_wait_the_exit_timeout_and_the_grace_agree(engine, serving):
    """One bound: the models' finalize wait (config.pbtxt drain_seconds), Triton's --exit-timeout-secs and the
    preStop's wait; the pod's grace covers deregistration, that wait and a margin."""
    from llmbackend.render.servingpod import config_map_files

    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/m"}}},
        "engine": engine, "serving": serving})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=60 << 30)
    objs = {o["kind"]: o for o in desired_objects(BackendRef("b", "ns", "u"), spec, plan, 1, RolloutStrategy("Recreate"))}
    bound = drain.backend_drain_seconds(spec)
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    [config] = [text for path, text in config_map_files(objs["ConfigMap"]).items() if path.endswith("config.pbtxt")]
    assert f'key: "drain_seconds"\n  value {{\n    string_value: "{bound}"' in config
    assert f"--exit-timeout-secs={bound}" in pod["containers"][0]["args"]
    assert f"end=time.time()+{bound}" in pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][2]
    assert pod["terminationGracePeriodSeconds"] == drain.termination_grace_seconds(bound) > bound
    assert bound == (90 if serving else drain.drain_seconds(engine["maxSeqLen"]))


def test_multi_node_leader_drains_workers_do_not_serve():
    objs, bound = _pod(plan_tp=8, pp=2, nodes=2)
    tmpl = objs["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    assert "lifecycle" in tmpl["leaderTemplate"]["spec"]["containers"][0]
    assert "lifecycle" not in tmpl["workerTemplate"]["spec"]["containers"][0]


def test_prestop_polls_the_engine_gauge_of_engine_metrics():
    cmd = drain.prestop_command(8002, 120)
    assert "nv_trt_llm_request_metrics{" in cmd[2] and "end=time.time()+120" in cmd[2]
    compile(cmd[2], "prestop", "exec")
