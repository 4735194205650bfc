"""Node loss is seen at once (issue 44): a deleted node's pods stay, Ready, until the pod garbage collector takes them
(52 s measured), and their Deployment counted them ready meanwhile; status said Available=True. Now the Node's
DELETED re-queues the backends with pods there, and their pass counts those pods as not ready."""

from __future__ import annotations

import asyncio
from typing import Any

from test_backoff import _operator

from devcluster.cli import topology_nodes
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.reconcile import Reconciler, SharedState, without_lost_nodes
from llmbackend.render.names import BACKEND_LABEL, serving_pod_ready

NODE = "dgx-h100-0"


def _pod(name: str, node: str, backend: str = "llama") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "serving",
                                        "labels": {BACKEND_LABEL: backend, "app.kubernetes.io/managed-by": "llmbackend-operator"}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_pods_on_a_deleted_node_are_not_ready_and_not_counted_by_their_deployment():
    pods = [_pod("a", NODE), _pod("b", "dgx-h100-1")]
    deployment = {"kind": "Deployment", "metadata": {"name": "llama"}, "status": {"readyReplicas": 2, "availableReplicas": 2}}
    children = {("Deployment", "llama"): deployment}
    seen, seen_children = without_lost_nodes(pods, children, {NODE}, "llama")
    assert [serving_pod_ready(p) for p in seen] == [False, True]
    assert seen_children[("Deployment", "llama")]["status"] == {"readyReplicas": 1, "availableReplicas": 1}
    assert deployment["status"]["readyReplicas"] == 2 and serving_pod_ready(pods[0]), "the caches' copies are untouched"
    assert without_lost_nodes(pods, children, {"elsewhere"}, "llama") == (pods, children)


def test_a_backend_whose_only_pod_is_on_a_deleted_node_is_not_available():
    kube = FakeKube()
    state = SharedState()
    for node in topology_nodes("dgx-h100-x4"):
        state.inventory.upsert(node)
    backend = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
               "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
               "spec": {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "m", "path": "/l"}}},
                        "parallelism": {"objective": "throughput"}}, "status": {}}
    kube.objects[("LLMBackend", "serving", "llama")] = backend
    reconciler = Reconciler(kube, state)
    reconciler.reconcile(("serving", "llama"))
    deployment = kube.objects[("Deployment", "serving", "llama")]
    deployment["status"] = {"observedGeneration": deployment["metadata"].get("generation", 1), "replicas": 1,
                            "readyReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1}
    pod = _pod("llama-0", NODE)
    pod["metadata"]["labels"] = {**deployment["spec"]["template"]["metadata"]["labels"], **pod["metadata"]["labels"]}
    kube.objects[("Pod", "serving", "llama-0")] = pod

    def available() -> str:
        reconciler.reconcile(("serving", "llama"))
        conditions = kube.objects[("LLMBackend", "serving", "llama")]["status"]["conditions"]
        return next(c["status"] for c in conditions if c["type"] == "Available")

    assert available() == "True"
    state.lost_nodes.add(NODE)
    assert available() == "False"
    assert kube.objects[("LLMBackend", "serving", "llama")]["status"]["readyReplicas"] == 0


def test_a_node_deletion_requeues_the_backends_with_pods_there_and_the_known_ones():
    operator = _operator()
    queued: list[tuple[str, str]] = []
    operator.enqueue = queued.append  # type: ignore[method-assign]
    operator.caches.stores["Pod"].replace("", [_pod("a", NODE, "one"), _pod("b", "dgx-h100-1", "two")])
    operator.known = {("serving", "three")}

    async def delete() -> None:
        operator.on_node_event("DELETED", {"metadata": {"name": NODE}})

    asyncio.run(delete())
    assert sorted(queued) == [("serving", "one"), ("serving", "three")]
    assert operator.backends_on_node(NODE) == {("serving", "one")}
    assert operator.state.lost_nodes == {NODE}
    operator.on_node_event("ADDED", topology_nodes("dgx-h100-x4")[0])  # back under the same name
    assert operator.state.lost_nodes == set()


def _planned(state: SharedState, kube: FakeKube) -> dict[str, Any]:
    Reconciler(kube, state).reconcile(("serving", "llama"))
    return kube.objects[("LLMBackend", "serving", "llama")]["status"]


def test_a_kept_plan_whose_explanation_names_a_deleted_node_is_explained_on_the_nodes_there_are():
    """The kept plan (node churn must not reshuffle replicas) named the deleted node's domain for ever."""
    nodes = topology_nodes("dgx-h100-x4")
    names = {n["metadata"]["name"] for n in nodes}
    state = SharedState(node_names=lambda: frozenset(names))
    for node in nodes:
        state.inventory.upsert(node)
    kube = FakeKube()
    kube.objects[("LLMBackend", "serving", "llama")] = {
        "apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
        "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
        "spec": {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "m", "path": "/l"}}}}, "status": {}}
    before = _planned(state, kube)["plan"]
    named = next(x for x in before["explanation"].splitlines() if x.startswith("Domain: ")).split()[1]
    assert named in names

    # It only lost its GPU labels for a moment (GFD relabelling): still a node, the plan is left as it is.
    state.inventory.remove(named)
    assert _planned(state, kube)["plan"] == before

    deployment = kube.objects[("Deployment", "serving", "llama")]["metadata"]["resourceVersion"]
    names.discard(named)  # deleted
    after = _planned(state, kube)
    assert named not in after["plan"]["explanation"]
    assert {k: v for k, v in after["plan"].items() if k != "explanation"} == \
        {k: v for k, v in before.items() if k != "explanation"}, "the same plan"
    assert kube.objects[("Deployment", "serving", "llama")]["metadata"]["resourceVersion"] == deployment, \
        "running replicas are not touched"

    # No node fits the plan now: it is kept for the running replicas, and Planned says its explanation is stale.
    kept = after["plan"]
    kept_named = next(x for x in kept["explanation"].splitlines() if x.startswith("Domain: ")).split()[1]
    names.clear()
    names.add("some-cpu-node")
    for node in nodes:
        state.inventory.remove(node["metadata"]["name"])
    status = _planned(state, kube)
    assert status["plan"] == kept
    planned = next(c for c in status["conditions"] if c["type"] == "Planned")
    assert planned["status"] == "True" and f"names {kept_named}, which is no longer a node here" in planned["message"]
