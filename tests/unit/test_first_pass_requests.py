"""What a new backend's first pass asks of the API server, issue 47 item 1: at most 6 requests for a single-GPU backend
(its 4 children, one status write, the Planned Event), with the deleted-backend guard kept: the status write, made
before the first create and conditional on the store's resourceVersion, is what confirms that the backend is still
there (a GET of it before was the seventh request). The reconciler reads through the caching client here, as in the
operator, over the in-memory API server; every request that reaches it is recorded."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devcluster.cli import topology_nodes
from llmbackend.controller.cache import CachedKube, Store, WatchCaches
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.kube import ApiError
from llmbackend.controller.reconcile import Reconciler, SharedState

MODEL = {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}}
KEY = ("serving", "llama")
FIRST_PASS_BUDGET = 6  # issue 47 item 1
CHILDREN = ["ConfigMap", "Deployment", "Service", "ServiceAccount"]


def _backend() -> dict[str, Any]:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
            "spec": {"model": MODEL, "replicas": 1}, "status": {}}


class RecordingKube(FakeKube):
    """The in-memory API server, recording each request as (verb, kind)."""

    def __init__(self, status_error: ApiError | None = None):
        super().__init__()
        self.requests: list[tuple[str, str]] = []
        self.status_error = status_error

    def get(self, kind, namespace, name):
        self.requests.append(("GET", kind))
        return super().get(kind, namespace, name)

    get_live = get

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        self.requests.append(("LIST", kind))
        return super().list(kind, namespace, label_selector, field_selector)

    def apply(self, obj):  # also the create of a child (FakeKube.create_applied: an apply that must create)
        self.requests.append(("APPLY", obj["kind"]))
        return super().apply(obj)

    def create(self, obj):
        self.requests.append(("POST", obj["kind"]))
        return super().create(obj)

    def patch(self, kind, namespace, name, body):
        self.requests.append(("PATCH", kind))
        return super().patch(kind, namespace, name, body)

    def patch_status(self, kind, namespace, name, status, resource_version=None):
        self.requests.append(("PATCH", f"{kind}/status"))
        if self.status_error is not None:
            self.calls["PATCH"] += 1
            raise self.status_error
        return super().patch_status(kind, namespace, name, status, resource_version)

    def delete(self, kind, namespace, name, uid=None):
        self.requests.append(("DELETE", kind))
        return super().delete(kind, namespace, name, uid)

    def request(self, method, path, query=None, body=None, **extra):
        self.requests.append((method, path))
        return super().request(method, path, query, body, **extra)


def _first_pass(kube: RecordingKube, stored: dict[str, Any] | None = None) -> Reconciler:
    """One pass of the backend the store holds (`stored`, else the API server's), the caches synced and empty."""
    state = SharedState()
    for node in topology_nodes("dgx-h100-x4"):
        state.inventory.upsert(node)
    caches = WatchCaches(kube)  # type: ignore[arg-type]  # watchers never started: the stores are filled here
    for store in caches.stores.values():
        store.replace("", [])
    backends = Store()
    backends.replace("", [copy.deepcopy(stored or kube.objects[("LLMBackend", "serving", "llama")])])
    reconciler = Reconciler(CachedKube(kube, caches, backends), state)  # type: ignore[arg-type]
    reconciler.reconcile(KEY)
    return reconciler


def _live() -> RecordingKube:
    kube = RecordingKube()
    kube.objects[("LLMBackend", "serving", "llama")] = _backend()
    return kube


def test_a_new_backend_s_first_pass_is_at_most_six_requests():
    kube = _live()
    _first_pass(kube)
    assert len(kube.requests) <= FIRST_PASS_BUDGET, kube.requests
    assert sorted(kube.requests) == sorted([("PATCH", "LLMBackend/status"), ("POST", "Event")]
                                           + [("APPLY", kind) for kind in CHILDREN])
    assert sorted(o["kind"] for o in kube.created) == CHILDREN


def test_the_status_write_comes_before_the_first_create_and_no_get_of_the_backend():
    kube = _live()
    _first_pass(kube)
    assert kube.requests[0] == ("PATCH", "LLMBackend/status"), kube.requests
    assert ("GET", "LLMBackend") not in kube.requests
    status = kube.objects[("LLMBackend", "serving", "llama")]["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Planned"] == "True"
    assert [e["reason"] for e in kube.events] == ["Fits"], "the plan's Event is kept"


def test_a_backend_gone_from_the_api_server_gets_nothing_from_its_first_pass():
    kube = RecordingKube()  # the store still has it; the API server has no LLMBackend
    _first_pass(kube, stored=_backend())
    assert kube.requests == [("PATCH", "LLMBackend/status")], "answered 404: no create, no Event"
    assert kube.objects == {}


def test_a_backend_replaced_under_its_name_gets_no_children_for_the_old_one():
    kube = RecordingKube()
    kube._stored({**_backend(), "metadata": {**_backend()["metadata"], "uid": "u-2"}})  # a newer resourceVersion
    _first_pass(kube, stored=_backend())
    # 409 on the status write, then the GET says which: another uid, so nothing is written for the old one.
    assert kube.requests == [("PATCH", "LLMBackend/status"), ("GET", "LLMBackend")]
    assert kube.created == [] and kube.events == []


def test_a_backend_changed_since_the_store_saw_it_is_confirmed_by_a_get_and_served():
    kube = RecordingKube()
    kube._stored({**_backend(), "metadata": {**_backend()["metadata"], "labels": {"team": "a"}}})  # same uid, newer
    _first_pass(kube, stored=_backend())
    assert kube.requests[:2] == [("PATCH", "LLMBackend/status"), ("GET", "LLMBackend")], kube.requests
    assert sorted(o["kind"] for o in kube.created) == CHILDREN
    assert kube.requests.count(("PATCH", "LLMBackend/status")) == 1, "not written again with the stale version"


@pytest.mark.parametrize("status", [403, 422, 500])
def test_a_status_write_refused_does_not_hold_the_children_back(status: int):
    """As before the status went first: the children are created, the pass then fails on its status write."""
    kube = RecordingKube(status_error=ApiError(status, "Refused", "refused"))
    kube.objects[("LLMBackend", "serving", "llama")] = _backend()
    with pytest.raises(ApiError):
        _first_pass(kube)
    assert sorted(o["kind"] for o in kube.created) == CHILDREN
    assert ("GET", "LLMBackend") in kube.requests, "confirmed by a GET instead"
