"""A backend that is gone is forgotten (issue 44): deleted while a watch was down, it stays in the operator's store
(a re-list sends no DELETED); acting on that entry recreated its children with the dead owner's uid, the garbage
collector deleted them, and so on, with a retry every minute for ever. Here: the re-list reports it as deleted, and a
pass that finds it gone on the API server writes nothing and asks for no retry."""

from __future__ import annotations

import copy
from typing import Any

from devcluster.cli import topology_nodes
from llmbackend.controller.cache import MANAGED_SELECTOR, Store, Watcher
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.reconcile import Reconciler, SharedState

MODEL = {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}}
KEY = ("serving", "llama")


def _backend() -> dict[str, Any]:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
            "spec": {"model": MODEL, "replicas": 1}, "status": {}}


class StaleStoreKube(FakeKube):
    """The reconciler's reads of the backend come from a store that still holds `stale`; get_live asks the server."""

    def __init__(self, stale: dict[str, Any]):
        super().__init__()
        self.stale = stale

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if kind == "LLMBackend":
            return copy.deepcopy(self.stale)
        return super().get(kind, namespace, name)

    def get_live(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return super().get(kind, namespace, name)


def _state() -> SharedState:
    state = SharedState()
    for node in topology_nodes("dgx-h100-x4"):
        state.inventory.upsert(node)
    return state


def test_a_pass_for_a_backend_gone_from_the_api_server_creates_nothing_and_is_not_retried():
    kube = StaleStoreKube(_backend())  # deleted: the fake API server has no LLMBackend at all
    outcome = Reconciler(kube, _state()).reconcile(KEY)
    assert outcome.gone and outcome.requeue_after is None
    assert kube.created == [] and kube.objects == {} and kube.calls["POST"] == 0
    # Its one write request was the status write conditional on the store's resourceVersion, answered 404.
    assert kube.calls["PATCH"] == 1


def test_a_backend_replaced_under_its_name_gets_no_children_for_the_old_uid():
    kube = StaleStoreKube(_backend())
    # Created anew by the API server: another uid and a newer resourceVersion (etcd's revision only grows).
    kube._stored({**_backend(), "metadata": {**_backend()["metadata"], "uid": "u-2"}})
    outcome = Reconciler(kube, _state()).reconcile(KEY)
    assert outcome.gone and kube.created == []
    assert kube.objects[("LLMBackend", "serving", "llama")]["metadata"]["uid"] == "u-2"
    assert kube.objects[("LLMBackend", "serving", "llama")]["status"] == {}, "the old one's status not written"


def test_a_live_backend_is_confirmed_once_per_pass_that_creates():
    kube = StaleStoreKube(_backend())
    kube.objects[("LLMBackend", "serving", "llama")] = _backend()
    outcome = Reconciler(kube, _state()).reconcile(KEY)
    assert not outcome.gone
    assert {o["kind"] for o in kube.created} >= {"Deployment", "Service", "ConfigMap"}


def test_a_status_write_answered_404_ends_the_pass_without_a_retry():
    kube = StaleStoreKube(_backend())
    kube.objects[("LLMBackend", "serving", "llama")] = _backend()
    reconciler = Reconciler(kube, _state())
    reconciler.reconcile(KEY)  # children created, status written
    del kube.objects[("LLMBackend", "serving", "llama")]  # deleted; the store still has it, with an older status
    writes = kube.calls["POST"]
    outcome = reconciler.reconcile(KEY)
    assert outcome.gone and outcome.requeue_after is None
    assert kube.calls["POST"] == writes, "nothing created (no event either) for a backend that is gone"


# ---- the watch's re-list ----


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"kind": "LLMBackend", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class RelistKube:
    """A first LIST with a and b, a watch that expires (410), a second LIST with only a."""

    def __init__(self) -> None:
        self.lists = [[_obj("a", "1"), _obj("b", "2")], [_obj("a", "1")]]
        self.streams = [[{"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}]]
        self.watcher: Watcher | None = None

    def _path(self, kind, namespace):
        return "/apis/llmbackend.dev/v1alpha1/llmbackends"

    def request(self, method, path, query=None):
        return {"metadata": {"resourceVersion": "100"}, "items": self.lists.pop(0)}

    def stream(self, path, timeout):
        if not self.streams:
            assert self.watcher is not None
            self.watcher.stop()
            return iter(())
        return iter(self.streams.pop(0))


def test_a_relist_reports_what_was_deleted_while_the_watch_was_down():
    kube = RelistKube()
    store = Store()
    events: list[tuple[str, str]] = []
    kube.watcher = Watcher(kube, "LLMBackend", store, MANAGED_SELECTOR,  # type: ignore[arg-type]
                           on_event=lambda kind, type_, o: events.append((type_, o["metadata"]["name"])))
    kube.watcher.run()
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "b"), ("ADDED", "a")]
    assert store.get("ns", "b") is None and store.get("ns", "a") is not None


def test_a_relist_of_one_namespace_reports_nothing_of_the_others():
    store = Store(["x", "y"])
    store.replace("x", [{**_obj("a", "1"), "metadata": {**_obj("a", "1")["metadata"], "namespace": "x"}}])
    store.replace("y", [{**_obj("b", "1"), "metadata": {**_obj("b", "1")["metadata"], "namespace": "y"}}])
    assert store.replace("x", []) != [] and store.get("y", "b") is not None
    assert store.replace("y", [])[0]["metadata"]["name"] == "b"


# ---- the watch's retries ----


class FailingKube:
    """LISTs that fail: `errors` in order, then the watcher is stopped."""

    def __init__(self, errors: list[Exception]):
        self.errors = errors

    def _path(self, kind, namespace):
        return "/api/v1/pods"

    def request(self, method, path, query=None):
        raise self.errors.pop(0)


class RecordingStop:
    def __init__(self, kube: FailingKube):
        self.kube, self.waits = kube, []

    def is_set(self) -> bool:
        return not self.kube.errors

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return False


def _waits(errors: list[Exception]) -> list[float]:
    kube = FailingKube(errors)
    watcher = Watcher(kube, "Pod", Store(), MANAGED_SELECTOR)  # type: ignore[arg-type]
    watcher.stopped = RecordingStop(kube)  # type: ignore[assignment]
    watcher.run()
    return watcher.stopped.waits  # type: ignore[attr-defined]


def test_a_watch_retries_every_second_while_the_api_server_does_not_answer_and_backs_off_while_it_fails():
    import urllib3

    from llmbackend.controller.kube import ApiError

    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", "Connection refused")  # type: ignore[arg-type]
    assert _waits([refused] * 8) == [1.0] * 8  # not 1, 2, 4 ... 30: back within a second of the API server
    failing = ApiError(500, "InternalError", "etcd")
    assert _waits([failing] * 5) == [1.0, 2.0, 4.0, 8.0, 16.0]
    # An API server just started answers 503 for a moment: the count starts there, not with the refused connections.
    assert _waits([refused] * 8 + [failing] * 2) == [1.0] * 8 + [1.0, 2.0]


def test_a_404_on_the_watch_of_an_optional_api_is_looked_at_again_at_the_watchers_pace():
    """Its CRD deleted: discovery may still list it for a moment, and the doubling backoff (1, 2, 4, 8 s ...) kept
    the watcher from seeing it gone within 15 s in CI. A 404 is looked at again at the watcher's own pace."""
    from llmbackend.controller.kube import ApiError

    class GoneCrd(FailingKube):
        def has_api(self, *_, **__):
            return True  # discovery still lists it

    kube = GoneCrd([ApiError(404, "NotFound", "the server could not find the requested resource")] * 6)
    watcher = Watcher(kube, "LLMBackend", Store(), None,  # type: ignore[arg-type]
                      optional_api=("llmbackend.dev/v1alpha1", "llmbackends"), recheck_s=3.0)
    watcher.stopped = RecordingStop(kube)  # type: ignore[assignment]
    watcher.run()
    assert watcher.stopped.waits == [1.0, 2.0, 3.0, 3.0, 3.0, 3.0]  # type: ignore[attr-defined]


# ---- the work queue ----


def _run_worker(outcomes: list, stored: dict[str, Any] | None) -> tuple[Any, list[tuple[str, str]]]:
    import asyncio

    from kubernetes import client as k8s_client

    from llmbackend.controller.kube import Kube
    from llmbackend.controller.reconcile import Outcome
    from llmbackend.controller.run import Operator, WorkQueue

    configuration = k8s_client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # never contacted
    operator = Operator(Kube(configuration), workers=1)
    passes: list[tuple[str, str]] = []

    def reconcile(key):
        passes.append(key)
        return outcomes.pop(0) if outcomes else Outcome()

    operator.reconciler.reconcile = reconcile  # type: ignore[method-assign]
    operator.backends.replace("", [stored] if stored else [])
    operator.known.add(KEY)

    async def run() -> None:
        operator.queue = WorkQueue()
        operator.queue.add(KEY)
        worker = asyncio.create_task(operator._worker(0))
        await asyncio.sleep(0.3)
        worker.cancel()

    asyncio.run(run())
    return operator, passes


def test_a_gone_backend_is_forgotten_and_not_retried():
    from llmbackend.controller.reconcile import Outcome

    operator, passes = _run_worker([Outcome(gone=True)], None)
    assert passes == [KEY] and KEY not in operator.known


def test_a_backend_replaced_under_its_name_is_served_after_the_old_one_is_found_gone():
    from llmbackend.controller.reconcile import Outcome

    new = {**_backend(), "metadata": {**_backend()["metadata"], "uid": "u-2", "resourceVersion": "9"}}
    operator, passes = _run_worker([Outcome(gone=True)], new)
    assert passes == [KEY, KEY] and KEY in operator.known
