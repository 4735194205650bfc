"""Never adopt, also under races (issue 24: an InferencePool created 0.05-0.8 s after its backend was adopted in 20 of
30 trials by a forced server-side apply). On the in-memory API server: a foreign object that appears between the
pass's read and its write is left exactly as it is, and the backend says ResourceExists."""

from __future__ import annotations

import copy
from typing import Any

from devcluster.cli import topology_nodes
from llmbackend.api import conditions as cond
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.reconcile import Reconciler, SharedState
from llmbackend.render.names import BackendRef, launcher_account_name, serving_account_name

MODEL = {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}}


# The accounts of backend llama (uid u-1, as _backend has it).
SERVING = serving_account_name(BackendRef("llama", "serving", "u-1"))
LAUNCHER = launcher_account_name(BackendRef("llama", "serving", "u-1"))


def _backend() -> dict[str, Any]:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
            "spec": {"model": MODEL, "replicas": 1}, "status": {}}


def _foreign(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "serving", "labels": {"team": "x"}},
            "data": {"theirs": "1"}}


class RacingKube(FakeKube):
    """Someone creates (or replaces) `target` just before the operator's write of it reaches the API server."""

    def __init__(self, target: tuple[str, str]):
        super().__init__()
        self.target = target
        self.raced = False

    def _race(self, obj: dict[str, Any]) -> None:
        if (obj["kind"], obj["metadata"].get("name")) == self.target and not self.raced:
            self.raced = True
            self.objects.pop(self._key(obj), None)
            self._stored(_foreign(*self.target))

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._race(obj)
        return super().create(obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._race(obj)
        return super().apply(obj)


def _reconcile(kube: FakeKube) -> dict[str, Any]:
    state = SharedState()
    for node in topology_nodes("dgx-h100-x4"):
        state.inventory.upsert(node)
    kube.objects[("LLMBackend", "serving", "llama")] = _backend()
    Reconciler(kube, state).reconcile(("serving", "llama"))
    return kube.objects[("LLMBackend", "serving", "llama")]


def _degraded(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")


def test_a_child_created_by_someone_else_during_the_first_pass_is_left_alone():
    kube = RacingKube(("ConfigMap", "llama-model-repo"))
    obj = _reconcile(kube)
    live = kube.objects[("ConfigMap", "serving", "llama-model-repo")]
    assert kube.raced
    assert live["data"] == {"theirs": "1"} and "ownerReferences" not in live["metadata"], "not adopted, not changed"
    assert _degraded(obj)["reason"] == cond.RESOURCE_EXISTS
    assert "ConfigMap serving/llama-model-repo" in _degraded(obj)["message"]


def test_an_owned_child_replaced_by_someone_else_before_the_update_is_left_alone():
    kube = FakeKube()
    _reconcile(kube)  # everything created, ours
    deployment = kube.objects[("Deployment", "serving", "llama")]
    deployment["spec"]["template"]["metadata"]["annotations"] = {"drift": "1"}  # makes the next pass write it
    racing = RacingKube(("Deployment", "llama"))
    racing.objects = copy.deepcopy(kube.objects)
    racing._version = kube._version
    obj = _reconcile(racing)
    live = racing.objects[("Deployment", "serving", "llama")]
    assert racing.raced
    assert live["data"] == {"theirs": "1"} and "ownerReferences" not in live["metadata"], "not adopted, not changed"
    assert _degraded(obj)["reason"] == cond.RESOURCE_EXISTS


def test_an_owned_child_changed_meanwhile_is_read_again_and_written():
    """A conflict on our own object (its status moved on since the caches saw it) is not a failure."""
    kube = FakeKube()
    _reconcile(kube)
    cached = copy.deepcopy(kube.objects)

    class StaleReads(FakeKube):
        def list(self, kind, namespace=None, label_selector=None, field_selector=None):
            self.calls["GET"] += 1
            return [copy.deepcopy(o) for (k, ns, _), o in cached.items() if k == kind and ns == namespace
                    and (o["metadata"].get("labels") or {}).get("llmbackend.dev/backend") == "llama"]

    stale = StaleReads()
    stale.objects = copy.deepcopy(kube.objects)
    stale._version = kube._version
    dep = stale.objects[("Deployment", "serving", "llama")]
    dep["metadata"]["resourceVersion"] = "999"  # moved on: the cached version is stale
    cached[("Deployment", "serving", "llama")]["spec"]["replicas"] = 5  # the pass sees drift and writes
    obj = _reconcile(stale)
    assert _degraded(obj)["reason"] != cond.RESOURCE_EXISTS
    written = stale.objects[("Deployment", "serving", "llama")]
    assert written["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert written["metadata"]["resourceVersion"] != "999", "written after reading it again"




def test_an_existing_service_account_with_the_launcher_s_name_is_not_taken_over():
    """Issue 42's held probe: a multi-node backend `llama` binds the exec role to `llama-launcher-<tag>`; someone else's
    ServiceAccount of that name (there before, or created during the pass) gets no binding, and no group starts."""
    from test_reconcile_conditions import ALL_APIS
    multi_node = {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}}
    theirs = {"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": LAUNCHER, "namespace": "serving", "labels": {"team": "x"}}}
    for kube in (FakeKube(apis=ALL_APIS), RacingKube(("ServiceAccount", LAUNCHER))):
        kube.apis = set(ALL_APIS)
        if not isinstance(kube, RacingKube):
            kube._stored(copy.deepcopy(theirs))
        state = SharedState()
        for node in topology_nodes("dgx-h100-x4"):
            state.inventory.upsert(node)
        backend = _backend()
        backend["spec"]["model"] = multi_node
        kube.objects[("LLMBackend", "serving", "llama")] = backend
        Reconciler(kube, state).reconcile(("serving", "llama"))
        obj = kube.objects[("LLMBackend", "serving", "llama")]
        assert obj["status"]["plan"]["nodesPerReplica"] == 2
        assert not isinstance(kube, RacingKube) or kube.raced
        live = kube.objects[("ServiceAccount", "serving", LAUNCHER)]
        assert "ownerReferences" not in live["metadata"], "not adopted"
        assert _degraded(obj)["reason"] == cond.RESOURCE_EXISTS
        assert f"ServiceAccount serving/{LAUNCHER}" in _degraded(obj)["message"]
        assert not [key for key in kube.objects if key[0] in ("RoleBinding", "LeaderWorkerSet")], "no exec binding"


def test_an_existing_service_account_with_the_serving_account_s_name_is_not_taken_over():
    """The serving pods run as `<name>-serving-<tag>` when the podTemplate names no account (attack2-3): someone else's
    account of that name (perhaps tied to a cloud identity), there before or created during the pass, is not
    adopted, and no pod runs as it."""
    theirs = {"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": SERVING, "namespace": "serving", "labels": {"team": "x"}}}
    for kube in (FakeKube(), RacingKube(("ServiceAccount", SERVING))):
        if not isinstance(kube, RacingKube):
            kube._stored(copy.deepcopy(theirs))
        obj = _reconcile(kube)
        assert not isinstance(kube, RacingKube) or kube.raced
        live = kube.objects[("ServiceAccount", "serving", SERVING)]
        assert "ownerReferences" not in live["metadata"], "not adopted"
        assert _degraded(obj)["reason"] == cond.RESOURCE_EXISTS
        assert f"ServiceAccount serving/{SERVING}" in _degraded(obj)["message"]
        assert ("Deployment", "serving", "llama") not in kube.objects, "no pod runs as someone else's account"


def test_a_new_backend_s_first_pass_creates_its_serving_account_before_its_pods():
    kube = FakeKube()
    _reconcile(kube)
    account = kube.objects[("ServiceAccount", "serving", SERVING)]
    assert account["automountServiceAccountToken"] is False
    assert account["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod = kube.objects[("Deployment", "serving", "llama")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVING and pod["automountServiceAccountToken"] is False
