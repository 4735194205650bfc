"""A settled backend is not decided again (issue 47: a no-op resync costs the reads only), and any change of what a
pass reads is: the backend, a child, a pod, the nodes, the autoscaler's decision. A decision that waits on a deadline is
never settled (time is not an input the cache can see)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from devcluster.cli import topology_nodes
from llmbackend.controller import reconcile as reconcile_module
from llmbackend.controller.cache import Store, json_copy
from llmbackend.controller.decide import ScaleDecision
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.reconcile import Reconciler, SharedState, pass_inputs
from llmbackend.render.names import BACKEND_LABEL

KEY = ("serving", "llama")
SPEC = {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}}}


class Backend:
    """One backend on the in-memory API server, served: its Deployment rolled out with a Ready pod. Every change goes
    through the fake's store, so it gets a new resourceVersion, as on an API server."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any] | None = None) -> None:
        self.kube = FakeKube()
        self.state = SharedState()
        for node in topology_nodes("dgx-h100-x4"):
            self.state.inventory.upsert(node)
        self.state.node_names = lambda: frozenset(node.name for node in self.state.inventory)
        self.kube._stored({"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                           "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1},
                           "spec": spec or SPEC})
        self.reconciler = Reconciler(self.kube, self.state)
        self.decided = 0
        real = reconcile_module.decide

        def counting(observed):
            self.decided += 1
            return real(observed)
        monkeypatch.setattr(reconcile_module, "decide", counting)
        self.reconciler.reconcile(KEY)  # creates the children
        self.roll_out(ready=True)

    def get(self, kind: str, name: str = "llama") -> dict[str, Any]:
        return copy.deepcopy(self.kube.objects[(kind, "serving", name)])

    def store(self, obj: dict[str, Any]) -> None:
        self.kube._stored(obj)

    def roll_out(self, ready: bool) -> None:
        deployment = self.get("Deployment")
        replicas = deployment["spec"]["replicas"]
        deployment["metadata"]["generation"] = 1
        deployment["status"] = {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                                "readyReplicas": replicas if ready else 0, "availableReplicas": replicas if ready else 0}
        self.store(deployment)
        template = deployment["spec"]["template"]
        self.store({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "llama-0", "namespace": "serving", "labels": dict(template["metadata"]["labels"]),
                                 "annotations": dict(template["metadata"]["annotations"])},
                    "spec": {**template["spec"], "nodeName": "dgx-h100-0"},
                    "status": {"phase": "Running", "podIP": "10.0.0.1",
                               "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})

    def settle(self) -> None:
        for _ in range(3):
            self.reconciler.reconcile(KEY)

    def resync(self) -> tuple[int, int]:
        """(decide calls, writes) of one more pass."""
        decided = self.decided
        writes = self.reconciler.reconcile(KEY).writes
        return self.decided - decided, writes

    def condition(self, type_: str) -> str:
        conditions = self.get("LLMBackend", "llama")["status"]["conditions"]
        return next(c["status"] for c in conditions if c["type"] == type_)


def test_a_settled_backend_is_not_decided_again(monkeypatch):
    backend = Backend(monkeypatch)
    backend.settle()
    assert backend.condition("Available") == "True"
    assert backend.resync() == (0, 0)
    assert backend.resync() == (0, 0)


def _child_changed(b: Backend) -> Callable[[], bool]:
    deployment = b.get("Deployment")
    deployment["spec"]["replicas"] = 3  # someone scaled it by hand: the operator writes its replicas back
    b.store(deployment)
    return lambda: b.get("Deployment")["spec"]["replicas"] == 1


def _child_deleted(b: Backend) -> Callable[[], bool]:
    del b.kube.objects[("Service", "serving", "llama")]
    return lambda: ("Service", "serving", "llama") in b.kube.objects


def _spec_changed(b: Backend) -> Callable[[], bool]:
    obj = b.get("LLMBackend")
    obj["spec"]["replicas"] = 2
    obj["metadata"]["generation"] = 2
    b.store(obj)
    return lambda: b.get("Deployment")["spec"]["replicas"] == 2


def _pod_not_ready(b: Backend) -> Callable[[], bool]:
    pod = b.get("Pod", "llama-0")
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    b.store(pod)
    deployment = b.get("Deployment")
    deployment["status"]["readyReplicas"] = 0
    b.store(deployment)
    return lambda: b.condition("Available") == "False"


def _domain(b: Backend) -> str:
    explanation = b.get("LLMBackend")["status"]["plan"]["explanation"]
    return next(line for line in explanation.splitlines() if line.startswith("Domain: ")).split()[1].rstrip(":,;")


def _node_deleted(b: Backend) -> Callable[[], bool]:
    named = _domain(b)
    assert b.state.inventory.remove(named)
    # The plan is kept for the running replica, explained on the nodes there are now.
    return lambda: _domain(b) != named


def _node_lost(b: Backend) -> Callable[[], bool]:
    b.state.lost_nodes.add("dgx-h100-0")  # the pod's node was deleted (the Node watch said so)
    return lambda: b.condition("Available") == "False"


def _scaled_by_the_autoscaler(b: Backend) -> Callable[[], bool]:
    obj = b.get("LLMBackend")
    obj["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 4}
    obj["metadata"]["generation"] = 2
    b.store(obj)
    b.settle()
    b.roll_out(ready=True)
    b.settle()
    assert b.resync() == (0, 0), "settled with autoscaling"
    b.state.decisions[KEY] = ScaleDecision(3, "ScaleUp", "busy", "1.50", None)
    return lambda: b.get("Deployment")["spec"]["replicas"] == 3


@pytest.mark.parametrize("change", [_child_changed, _child_deleted, _spec_changed, _pod_not_ready, _node_deleted,
                                    _node_lost, _scaled_by_the_autoscaler])
def test_a_change_of_anything_a_pass_reads_is_decided_and_acted_on(monkeypatch, change):
    backend = Backend(monkeypatch)
    backend.settle()
    assert backend.resync() == (0, 0)
    acted_on = change(backend)
    decided, _ = backend.resync()
    assert decided >= 1, "the changed input was decided on"
    assert acted_on()


def test_a_decision_waiting_for_its_rollout_is_decided_every_pass(monkeypatch):
    backend = Backend(monkeypatch)
    backend.roll_out(ready=False)  # the pod is not Ready: Progressing, looked at again within 30 s
    backend.settle()
    assert backend.condition("Progressing") == "True"
    assert backend.resync() == (1, 0)
    assert backend.resync() == (1, 0), "a deadline in flight: time may change the decision"


def test_objects_without_a_resource_version_are_always_decided():
    kube = FakeKube()
    backend = {"kind": "LLMBackend", "metadata": {"name": "llama", "namespace": "serving", "uid": "u", "resourceVersion": "3"}}
    service = kube._stored({"kind": "Service", "metadata": {"name": "llama", "namespace": "serving",
                                                             "labels": {BACKEND_LABEL: "llama"}}})
    before = pass_inputs(kube, backend, ["Service"])
    assert before is not None and pass_inputs(kube, backend, ["Service"]) == before
    kube._stored(service)  # written again: a new resourceVersion
    assert pass_inputs(kube, backend, ["Service"]) != before
    kube.objects[("Pod", "serving", "p")] = {"kind": "Pod", "metadata": {"name": "p", "namespace": "serving",
                                                                         "labels": {BACKEND_LABEL: "llama"}}}
    assert pass_inputs(kube, backend, ["Service"]) is None


def test_a_read_from_a_store_is_a_copy_the_reader_may_change():
    obj = {"kind": "Pod", "metadata": {"name": "p", "namespace": "s", "resourceVersion": "1", "labels": {"a": "b"}},
           "spec": {"containers": [{"name": "c", "args": ["x", 1, 2.5, True, None]}]}}
    assert json_copy(obj) == copy.deepcopy(obj)
    store = Store()
    store.replace("", [copy.deepcopy(obj)])
    for read in (store.get("s", "p"), store.list("s", "a=b")[0]):
        assert read is not None
        read["spec"]["containers"][0]["args"].append("changed")
        read["metadata"]["labels"]["a"] = "changed"
    assert store.get("s", "p") == obj


def test_a_store_says_the_versions_of_what_it_lists_without_copying():
    store = Store()
    pods = [{"kind": "Pod", "metadata": {"name": name, "namespace": "s", "uid": f"u-{name}", "resourceVersion": str(i),
                                         "labels": {BACKEND_LABEL: backend, "app.kubernetes.io/component": component}}}
            for i, (name, backend, component) in enumerate([("a", "llama", "server"), ("b", "llama", "activator"),
                                                           ("c", "other", "server")])]
    store.replace("", pods)
    for selector in (f"{BACKEND_LABEL}=llama", f"{BACKEND_LABEL}=llama,app.kubernetes.io/component=server"):
        listed = store.list("s", selector)
        assert store.versions("s", selector) == [(o["metadata"]["name"], o["metadata"]["uid"],
                                                 o["metadata"]["resourceVersion"]) for o in listed]
    assert store.versions("s", "app.kubernetes.io/component=server") is None, "not indexed: the caller lists"
