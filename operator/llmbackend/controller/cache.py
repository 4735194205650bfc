"""Watch caches: the LLMBackends, the Nodes, and the operator's children and serving pods, filtered by label in the
API server.

Each watched kind is listed once and then watched (`?labelSelector=...&watch=1`), so the API server sends
only the operator's objects: 20,000 unrelated pods cost nothing here. The reconciler reads through
`CachedKube`, which answers `get`/`list` from these caches once they are synced and sends only writes
(and the rare read of something the caches cannot know, such as a foreign object with a child's name) to
the API server. Results of our own writes are stored at once, so the next pass sees them before the
watch event arrives.

A watch runs in a daemon thread (blocking urllib3 stream); events are handed to a callback that must be
thread-safe (the operator forwards them to its event loop). A re-list reports what it no longer finds as DELETED.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlencode

from ..render.names import BACKEND_LABEL, MANAGED_BY, MANAGED_KINDS, OPTIONAL_KINDS
from . import permissions
from .digest import summarize_data
from .kube import KINDS, ApiError, Kube

log = logging.getLogger("llmbackend.cache")

MANAGED_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"
# Kinds watched with MANAGED_SELECTOR: every child kind, the model cache's claim and download Job, and the pods.
WATCHED_KINDS: tuple[str, ...] = (*MANAGED_KINDS, "PersistentVolumeClaim", "Job", "Pod")
# Nodes are watched unfiltered (any node may hold GPUs); their state lives in the planner's inventory; their store
# tells a re-list which nodes went while the watch was down.
WATCH_TIMEOUT_S = 300
OPTIONAL_API_RECHECK_S = 30.0
# The operator's own CRD, while not served, is looked for this often: backends applied with it are served at once.
OWN_API_RECHECK_S = 3.0
# A watch that failed is tried again after 1, 2, 4 ... s up to this, while the API server answers with errors; while
# it does not answer at all (restarting), every UNREACHABLE_RETRY_S: a refused connection costs the server nothing,
# and the watch is back as soon as it answers.
WATCH_BACKOFF_MAX_S = 30.0
UNREACHABLE_RETRY_S = 1.0
API_SERVED = "API_SERVED"  # the event type a watcher reports when its optional API became served

OWN_API = KINDS["LLMBackend"]
for _kind in WATCHED_KINDS:
    permissions.require(KINDS[_kind][0].rpartition("/")[0], KINDS[_kind][1], "list", "watch")

Key = tuple[str, str]
EventCallback = Callable[[str, str, dict[str, Any]], None]  # (kind, event type, object)


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop what the reconciler never reads (managedFields is most of an object's size)."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def json_copy(value: Any) -> Any:
    """A deep copy of decoded JSON (dicts, lists and scalars, no shared parts), about 3 times faster than copy.deepcopy,
    which a pass spent most of its time in: each read from a store is a copy the reader may change (issue 47)."""
    if type(value) is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [json_copy(item) for item in value]
    return value


def _newer(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    if current is None:
        return True
    try:
        return int(candidate["metadata"]["resourceVersion"]) >= int(current["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return True  # resourceVersions are opaque in general; etcd's are integers


def _matches(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def _wanted(selector: str | None) -> dict[str, str]:
    """The equality terms of a simple selector, key -> value."""
    return {k.strip(): v.strip() for k, _, v in (t.partition("=") for t in (selector or "").split(",") if "=" in t)}


def simple_selector(selector: str | None) -> bool:
    """Whether a selector is a conjunction of equalities (the only kind the cache evaluates)."""
    return not selector or all("=" in t and "!" not in t and " in " not in t for t in selector.split(","))


class Store:
    """Objects of one kind, by (namespace, name), filled by one watcher per namespace ("" = all)."""

    def __init__(self, namespaces: Iterable[str] = ("",), keep: bool = True, summarize: bool = False) -> None:
        self.keep = keep
        self.summarize = summarize  # keep ConfigMap data as a digest (decide.summarize_data)
        self.objects: dict[Key, dict[str, Any]] = {}
        # (namespace, backend label value) -> keys: a pass lists each kind by its backend's label, and a scan of every
        # object made a no-op pass grow with the number of backends (10 ms at 500, issue 47)
        self._by_backend: dict[tuple[str, str], set[Key]] = {}
        self._unsynced = set(namespaces)
        self.lock = threading.Lock()

    @property
    def synced(self) -> bool:
        return not self._unsynced

    def replace(self, namespace: str, items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """A fresh list of one namespace (or of all, with ""). Returns the objects it drops: deleted while no watch
        ran, so no DELETED event will ever say so."""
        fresh = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): self._slim(o) for o in items if self.keep}
        with self.lock:
            kept = {k: v for k, v in self.objects.items() if namespace and k[0] != namespace}
            gone = [v for k, v in self.objects.items() if k not in kept and k not in fresh]
            self.objects = {**kept, **fresh}
            self._by_backend = {}
            for key, obj in self.objects.items():
                self._index(key, obj)
            self._unsynced.discard(namespace)
        return gone

    def _index(self, key: Key, obj: dict[str, Any]) -> None:
        backend = (obj["metadata"].get("labels") or {}).get(BACKEND_LABEL)
        if backend is not None:
            self._by_backend.setdefault((key[0], backend), set()).add(key)

    def _unindex(self, key: Key) -> None:
        old = self.objects.get(key)
        backend = (old["metadata"].get("labels") or {}).get(BACKEND_LABEL) if old is not None else None
        if backend is not None:
            keys = self._by_backend.get((key[0], backend))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_backend[(key[0], backend)]

    def _slim(self, obj: dict[str, Any]) -> dict[str, Any]:
        return summarize_data(_slim(obj)) if self.summarize else _slim(obj)

    def upsert(self, obj: dict[str, Any]) -> None:
        if not self.keep:
            return
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        with self.lock:
            if _newer(obj, self.objects.get(key)):
                self._unindex(key)
                self.objects[key] = self._slim(obj)
                self._index(key, self.objects[key])

    def remove(self, obj: dict[str, Any]) -> None:
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        with self.lock:
            self._unindex(key)
            self.objects.pop(key, None)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((namespace, name))
            return json_copy(obj) if obj is not None else None

    def versions(self, namespace: str, selector: str) -> list[tuple[str, str, str]] | None:
        """(name, uid, resourceVersion) of what `list` returns, without copying; None for a selector that names no
        backend (not indexed)."""
        backend = _wanted(selector).get(BACKEND_LABEL)
        if backend is None:
            return None
        with self.lock:
            candidates = [(k, self.objects[k]) for k in sorted(self._by_backend.get((namespace, backend), ()))]
            return [(name, o["metadata"].get("uid", ""), o["metadata"].get("resourceVersion", ""))
                    for (_, name), o in candidates if _matches(o["metadata"].get("labels") or {}, selector)]

    def list(self, namespace: str | None, selector: str | None) -> list[dict[str, Any]]:
        backend = _wanted(selector).get(BACKEND_LABEL)
        with self.lock:
            if namespace is not None and backend is not None:
                candidates = [(k, self.objects[k]) for k in sorted(self._by_backend.get((namespace, backend), ()))]
            else:
                candidates = list(self.objects.items())
            return [json_copy(o) for (ns, _), o in candidates
                    if (namespace is None or ns == namespace) and _matches(o["metadata"].get("labels") or {}, selector)]

    def names(self) -> frozenset[str]:
        """The names held (a cluster-scoped kind's, e.g. the Nodes), or an empty set before the first list."""
        with self.lock:
            return frozenset(name for _, name in self.objects) if self.synced else frozenset()

    def __len__(self) -> int:
        return len(self.objects)


class Watcher(threading.Thread):
    """List + watch one kind in one namespace ("" = all) with a label selector, forever.

    When the server ends a watch (every WATCH_TIMEOUT_S), the next one resumes from the last resourceVersion
    seen (bookmarks keep it fresh), so an idle operator sends no LIST. It re-lists only when that version
    has expired (410) or the watch failed (with backoff).
    """

    def __init__(self, kube: Kube, kind: str, store: Store, selector: str | None, namespace: str = "",
                 on_event: EventCallback | None = None, optional_api: tuple[str, str] | None = None,
                 recheck_s: float = OPTIONAL_API_RECHECK_S):
        super().__init__(name=f"watch-{kind}-{namespace or 'all'}", daemon=True)
        self.kube, self.kind, self.store, self.selector, self.namespace = kube, kind, store, selector, namespace
        self.on_event = on_event
        self.optional_api = optional_api
        self.recheck_s = recheck_s
        self.stopped = threading.Event()
        self.errors = 0
        self.api_errors = 0
        self.served: bool | None = None  # optional APIs: whether the last look found it served

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        version: str | None = None  # where the next watch starts; None: list first
        while not self.stopped.is_set():
            try:
                if self.optional_api:
                    # Absence is asked again at this watcher's own pace (the operator's own CRD: every few seconds),
                    # not at the client's cache's (API_ABSENCE_TTL_S), which once held a re-applied CRD back 30 s.
                    served = self.kube.has_api(*self.optional_api, absent_ttl_s=self.recheck_s)
                    if served and self.served is False and self.on_event:
                        self.on_event(self.kind, API_SERVED, {})  # installed (again): every backend may want one
                    self.served = served
                if self.served is False:
                    self._forget(self.store.replace(self.namespace, []))  # not served: nothing of this kind exists
                    version = None
                    self.stopped.wait(self.recheck_s)
                    continue
                if version is None:
                    version = self._list()
                version = self._watch(version)
                self.errors = self.api_errors = 0
            except Exception as exc:  # noqa: BLE001 - a watch never dies; it backs off and re-lists
                version = None
                self.errors += 1
                if isinstance(exc, ApiError) and exc.status == 404 and self.optional_api:
                    # Its CRD deleted, maybe: look again at this watcher's pace, not the doubling backoff's. Discovery
                    # can still list a CRD just deleted; the client asks it again once its answer is API_RECHECK_MIN_S
                    # old (a brief 404 from an API server still starting does not count), and the doubling backoff had
                    # kept /readyz silent past 15 s in CI.
                    delay = min(self.recheck_s, 0.5 * 2 ** min(self.errors, 6))
                elif isinstance(exc, ApiError):  # the backoff counts the answers that were errors, in a row
                    self.api_errors += 1
                    delay = min(WATCH_BACKOFF_MAX_S, 0.5 * 2 ** min(self.api_errors, 6))
                else:  # no answer (connection refused or cut): look again soon, it costs the server nothing
                    self.api_errors = 0
                    delay = UNREACHABLE_RETRY_S
                # Once, and then now and then: an API server down for minutes would otherwise fill the log.
                log.log(logging.WARNING if self.errors % 30 == 1 else logging.DEBUG,
                        "watch %s: %s (re-listing in %.1fs; failure %d in a row)", self.kind, exc, delay, self.errors)
                self.stopped.wait(delay)

    def _forget(self, gone: list[dict[str, Any]]) -> None:
        """Objects a fresh list no longer has were deleted while no watch ran: say so as a watch would have."""
        if gone:
            log.info("watch %s: %d deleted while the watch was down: %s", self.kind, len(gone),
                     ", ".join(f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in gone[:10]))
        if self.on_event:
            for obj in gone:
                self.on_event(self.kind, "DELETED", obj)

    def _query(self, **extra: Any) -> dict[str, Any]:
        query: dict[str, Any] = dict(extra)
        if self.selector:
            query["labelSelector"] = self.selector
        return query

    def _list(self) -> str:
        result = self.kube.request("GET", self.kube._path(self.kind, self.namespace or None), query=self._query())
        items = result.get("items", [])
        for item in items:  # list items carry no kind or apiVersion
            item.setdefault("kind", self.kind)
            item.setdefault("apiVersion", KINDS[self.kind][0])
        gone = self.store.replace(self.namespace, items)
        self._forget(gone)
        if self.on_event:
            for item in items:
                self.on_event(self.kind, "ADDED", item)
        return result["metadata"]["resourceVersion"]

    def _watch(self, version: str) -> str | None:
        """Follow one watch from `version`; returns the version to resume from, or None to re-list."""
        query = self._query(watch="1", resourceVersion=version, allowWatchBookmarks="true",
                            timeoutSeconds=str(WATCH_TIMEOUT_S))
        path = self.kube._path(self.kind, self.namespace or None) + "?" + urlencode(query)
        for event in self.kube.stream(path, timeout=WATCH_TIMEOUT_S + 30):
            if self.stopped.is_set():
                return None
            kind, obj = event.get("type", ""), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    return None  # expired resourceVersion: re-list
                raise ApiError(obj.get("code", 500), obj.get("reason", ""), obj.get("message", ""))
            version = obj.get("metadata", {}).get("resourceVersion") or version
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                self.store.remove(obj)
            else:
                self.store.upsert(obj)
            if self.on_event:
                self.on_event(self.kind, kind, obj)
        return version


class WatchCaches:
    """The stores and watchers of every watched kind, and of the LLMBackends themselves.

    The LLMBackend watch is one of these too (not kopf's): its re-list reports the backends deleted while it was
    down (kopf's says nothing of them), and its CRD going away is waited out like an optional API's.
    """

    def __init__(self, kube: Kube, namespaces: list[str] | None = None, on_event: EventCallback | None = None):
        self.kube = kube
        spaces = list(namespaces or [""])
        self.stores: dict[str, Store] = {kind: Store(spaces, summarize=kind == "ConfigMap") for kind in WATCHED_KINDS}
        self.nodes = Store()  # kept: a re-list then reports the nodes deleted while the watch was down
        self.backends = Store(spaces)
        self.backend_watchers = [Watcher(kube, "LLMBackend", self.backends, None, namespace, on_event,
                                         optional_api=(OWN_API[0], OWN_API[1]), recheck_s=OWN_API_RECHECK_S)
                                 for namespace in spaces]
        self.watchers = [
            Watcher(kube, kind, self.stores[kind], MANAGED_SELECTOR, namespace, on_event,
                    optional_api=MANAGED_KINDS[kind] if kind in OPTIONAL_KINDS else None)  # CRD maybe not served
            for kind in WATCHED_KINDS for namespace in spaces
        ] + [Watcher(kube, "Node", self.nodes, None, "", on_event), *self.backend_watchers]

    def crd_missing(self) -> bool:
        """The LLMBackend CRD was found not served (deleted, or not installed yet)."""
        return any(watcher.served is False for watcher in self.backend_watchers)

    def start(self) -> None:
        for watcher in self.watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()

    @property
    def synced(self) -> bool:
        return self.nodes.synced and self.backends.synced and all(store.synced for store in self.stores.values())

    def unsynced(self) -> list[str]:
        return [kind for kind, store in {**self.stores, "Node": self.nodes, "LLMBackend": self.backends}.items()
                if not store.synced]

    def wait_synced(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.synced:
                return True
            time.sleep(0.05)
        return self.synced


class CachedKube:
    """The reconciler's client: reads from the watch caches, writes to the API server (and into the caches).

    Everything else (calls, has_api, events) is the wrapped `Kube`'s.
    """

    def __init__(self, kube: Kube, caches: WatchCaches, backends: Store | None = None):
        self.kube = kube
        self.caches = caches
        self.backends = backends  # LLMBackends, fed by the operator's own watch of them
        self.cache_reads = 0     # reads answered without a request (for benchmarks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    def _store(self, kind: str) -> Store | None:
        store = self.backends if kind == "LLMBackend" else self.caches.stores.get(kind)
        return store if store is not None and store.synced else None

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        store = self._store(kind)
        if store is not None:
            cached = store.get(namespace or "", name)
            if cached is not None:
                self.cache_reads += 1
                return cached
        # Not ours (no label), not created yet, or deleted: only the API server knows.
        live = self.kube.get(kind, namespace, name)
        if live is not None and store is not None and kind != "LLMBackend" and \
                (live["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY:
            store.upsert(live)
        return live

    def get_live(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """From the API server, not the caches (which may lag): before a write that must not adopt."""
        live = self.kube.get(kind, namespace, name)
        store = self._store(kind)
        if store is not None:
            if live is None:  # gone: a store entry left by a missed DELETED must not be acted on again
                store.remove({"metadata": {"namespace": namespace or "", "name": name}})
            elif kind == "LLMBackend" or \
                    (live["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY:
                store.upsert(live)
        return live

    def versions(self, kind: str, namespace: str, label_selector: str) -> list[tuple[str, str, str]] | None:
        """(name, uid, resourceVersion) of what `list` would return, from the caches and without copying them; None when
        they cannot say (not synced, or a selector they do not index)."""
        store = self._store(kind)
        if store is None or not simple_selector(label_selector):
            return None
        return store.versions(namespace, label_selector)

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]:
        store = self._store(kind)
        # The caches hold exactly the objects with the operator's managed-by label: a selector that implies it
        # (or names a backend, whose objects all carry it) is answered from them.
        if store is not None and not field_selector and simple_selector(label_selector) and label_selector \
                and (BACKEND_LABEL in label_selector or MANAGED_SELECTOR in label_selector):
            self.cache_reads += 1
            return store.list(namespace, label_selector)
        return self.kube.list(kind, namespace, label_selector=label_selector, field_selector=field_selector)

    def _remember(self, obj: dict[str, Any]) -> dict[str, Any]:
        store = self.backends if obj.get("kind") == "LLMBackend" else self.caches.stores.get(obj.get("kind", ""))
        if store is not None and obj.get("metadata", {}).get("resourceVersion"):
            store.upsert(json_copy(obj))
        return obj

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._remember(self.kube.apply(obj))

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._remember(self.kube.create(obj))

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._remember(self.kube.patch(kind, namespace, name, body))

    def create_applied(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._remember(self.kube.create_applied(obj))  # the model cache's claim and Job (Events are not cached)

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        try:
            return self._remember(self.kube.patch_status(kind, namespace, name, status,
                                                         resource_version=resource_version))
        except ApiError as exc:
            store = self._store(kind)
            if exc.status == 404 and store is not None:  # no such object (any more)
                store.remove({"metadata": {"namespace": namespace, "name": name}})
            raise

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        deleted = self.kube.delete(kind, namespace, name, uid=uid)
        store = self.caches.stores.get(kind)
        if store is not None:
            store.remove({"metadata": {"namespace": namespace, "name": name}})
        return deleted
