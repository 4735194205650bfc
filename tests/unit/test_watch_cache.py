"""The watch caches and the caching client: reads answered from the caches, writes sent and remembered."""

from __future__ import annotations

from typing import Any

from llmbackend.controller.cache import MANAGED_SELECTOR, CachedKube, Store, WatchCaches, simple_selector
from llmbackend.render.names import BACKEND_LABEL, MANAGED_BY


def obj(kind: str, name: str, namespace: str = "ns", rv: str = "1", owner: str | None = "b", **labels: str) -> dict[str, Any]:
    all_labels = {"app.kubernetes.io/managed-by": MANAGED_BY, **labels}
    if owner:
        all_labels[BACKEND_LABEL] = owner
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv,
                                       "labels": all_labels, "managedFields": [{"big": "x" * 100}]}}


class FakeKube:
    """Counts what would reach the API server."""

    def __init__(self, live: dict[tuple[str, str, str], dict[str, Any]] | None = None):
        self.live = live or {}
        self.reads: list[tuple[str, ...]] = []
        self.writes: list[tuple[str, ...]] = []
        self.calls = {"GET": 0}

    def get(self, kind, namespace, name):
        self.reads.append(("get", kind, name))
        return self.live.get((kind, namespace, name))

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        self.reads.append(("list", kind))
        return []

    def apply(self, o):
        self.writes.append(("apply", o["kind"], o["metadata"]["name"]))
        return {**o, "metadata": {**o["metadata"], "resourceVersion": "9"}}

    def create(self, o):
        self.writes.append(("create", o["kind"], o["metadata"]["name"]))
        return {**o, "metadata": {**o["metadata"], "resourceVersion": "11"}}

    def patch_status(self, kind, namespace, name, status, resource_version=None):
        self.writes.append(("status", kind, name))
        return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "resourceVersion": "10"}, "status": status}

    def delete(self, kind, namespace, name, uid=None):
        self.writes.append(("delete", kind, name))
        return True

    def has_api(self, *_, **__):
        return True


def synced_client(fake: FakeKube) -> CachedKube:
    caches = WatchCaches(fake)  # type: ignore[arg-type]  # watchers are never started here
    for store in caches.stores.values():
        store.replace("", [])
    backends = Store()
    backends.replace("", [])
    return CachedKube(fake, caches, backends)  # type: ignore[arg-type]


def test_synced_reads_never_reach_the_api_server():
    fake = FakeKube()
    client = synced_client(fake)
    client.caches.stores["Service"].upsert(obj("Service", "b"))
    client.caches.stores["Pod"].upsert(obj("Pod", "b-1", app="x"))
    client.caches.stores["Pod"].upsert(obj("Pod", "c-1", owner="c"))
    client.backends.upsert(obj("LLMBackend", "b", owner=None))

    assert client.get("Service", "ns", "b")["metadata"]["name"] == "b"
    assert client.get("LLMBackend", "ns", "b") is not None
    pods = client.list("Pod", "ns", label_selector=f"{BACKEND_LABEL}=b")
    assert [p["metadata"]["name"] for p in pods] == ["b-1"]
    assert fake.reads == []
    assert client.cache_reads == 3
    assert "managedFields" not in client.get("Service", "ns", "b")["metadata"]


def test_absent_child_is_looked_up_live_because_a_foreign_object_may_hold_its_name():
    foreign = {"kind": "Service", "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "3", "labels": {}}}
    fake = FakeKube({("Service", "ns", "b"): foreign})
    client = synced_client(fake)
    assert client.get("Service", "ns", "b") == foreign
    assert fake.reads == [("get", "Service", "b")]
    # A foreign (unlabelled) object is not cached: the next read asks again.
    client.get("Service", "ns", "b")
    assert len(fake.reads) == 2


def test_unsynced_cache_falls_back_to_the_api_server():
    fake = FakeKube()
    caches = WatchCaches(fake)  # type: ignore[arg-type]
    client = CachedKube(fake, caches, Store())  # type: ignore[arg-type]
    client.get("Deployment", "ns", "b")
    client.list("Pod", "ns", label_selector=f"{BACKEND_LABEL}=b")
    assert fake.reads == [("get", "Deployment", "b"), ("list", "Pod")]


def test_writes_are_remembered_so_the_next_pass_sees_them():
    fake = FakeKube()
    client = synced_client(fake)
    client.apply(obj("ConfigMap", "b-config"))
    assert client.get("ConfigMap", "ns", "b-config")["metadata"]["resourceVersion"] == "9"
    client.backends.upsert(obj("LLMBackend", "b", rv="5", owner=None))
    client.patch_status("LLMBackend", "ns", "b", {"replicas": 2})
    assert client.get("LLMBackend", "ns", "b")["status"] == {"replicas": 2}
    client.delete("ConfigMap", "ns", "b-config")
    assert client.caches.stores["ConfigMap"].get("ns", "b-config") is None
    client.create(obj("Job", "llmb-fetch-1", owner=None))  # the model cache's shared download Job
    assert client.get("Job", "ns", "llmb-fetch-1")["metadata"]["resourceVersion"] == "11"
    client.create({"kind": "Event", "metadata": {"name": "e", "namespace": "ns", "resourceVersion": "12"}})
    assert fake.reads == []


def test_an_older_event_never_replaces_a_newer_object():
    store = Store()
    store.replace("", [])
    store.upsert(obj("Pod", "p", rv="20"))
    store.upsert(obj("Pod", "p", rv="7"))
    assert store.get("ns", "p")["metadata"]["resourceVersion"] == "20"


def test_per_namespace_relist_keeps_other_namespaces_and_sync_needs_every_namespace():
    store = Store(["a", "b"])
    store.replace("a", [obj("Pod", "p", namespace="a")])
    assert not store.synced
    store.replace("b", [obj("Pod", "q", namespace="b")])
    assert store.synced
    store.replace("a", [])
    assert store.get("b", "q") is not None and store.get("a", "p") is None


def test_selectors():
    assert simple_selector("a=b,c=d") and simple_selector(None)
    assert not simple_selector("a!=b") and not simple_selector("a in (b)")
    assert MANAGED_SELECTOR == f"app.kubernetes.io/managed-by={MANAGED_BY}"


class ScriptedWatchKube:
    """A LIST and a sequence of watch streams; the watcher is stopped when the script runs out."""

    def __init__(self, streams: list[list[dict[str, Any]]]):
        self.streams = streams
        self.lists = 0
        self.watched_from: list[str] = []
        self.watcher = None

    def _path(self, kind, namespace):
        return f"/api/v1/{kind.lower()}s"

    def request(self, method, path, query=None):
        self.lists += 1
        return {"metadata": {"resourceVersion": str(100 * self.lists)}, "items": []}

    def stream(self, path, timeout):
        self.watched_from.append(dict(p.split("=") for p in path.split("?")[1].split("&"))["resourceVersion"])
        if not self.streams:
            self.watcher.stop()
            return iter(())
        return iter(self.streams.pop(0))


def run_watcher(streams: list[list[dict[str, Any]]]) -> ScriptedWatchKube:
    from llmbackend.controller.cache import Watcher

    fake = ScriptedWatchKube(streams)
    store = Store()
    fake.watcher = Watcher(fake, "Pod", store, MANAGED_SELECTOR)  # type: ignore[arg-type]
    fake.watcher.run()  # in this thread; returns once stopped
    return fake


def test_a_watch_ended_by_the_server_resumes_from_the_last_version_without_a_list():
    fake = run_watcher([
        [{"type": "ADDED", "object": obj("Pod", "p", rv="105")}],                       # server timeout
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "180"}}}],     # idle: a bookmark
        [],                                                                               # idle, nothing at all
    ])
    assert fake.lists == 1
    assert fake.watched_from == ["100", "105", "180", "180"]


def test_an_expired_version_is_listed_again():
    fake = run_watcher([[{"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}]])
    assert fake.lists == 2
    assert fake.watched_from == ["100", "200"]
