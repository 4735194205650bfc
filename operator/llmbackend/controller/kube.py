"""A small, explicit Kubernetes REST client: get, list, server-side apply, status patch, delete.

Built on the `kubernetes` package's configuration loading and REST transport (kubeconfig, in-cluster
token refresh, TLS), without API discovery, so every call is one known HTTP request. Each method
records which (group, resource, verb) it uses; the ClusterRole is checked against that record.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client import rest

from ..autoscaling import metrics
from ..render.names import MANAGED_KINDS
from . import permissions

FIELD_MANAGER = "llmbackend-operator"
# A resourceVersion no object has (etcd revisions are int64 counters, far below it). An apply carrying it is a create
# that never takes an object over: kube-apiserver's generic store (k8s.io/apiserver/pkg/registry/generic/registry/
# store.go, Store.Update, v1.36) compares a given resourceVersion with the existing object's (409 Conflict when one
# is there) and skips the comparison on its create path (apply creates a missing object). tests/e2e/
# test_never_adopt_e2e.py checks both answers on the real API server.
CREATE_ONLY_RESOURCE_VERSION = str(2**63 - 1)
API_ABSENCE_TTL_S = 30.0  # an absent optional API is looked for again after this long
API_RECHECK_MIN_S = 5.0  # a served one is looked for again after a request finds it gone, at most this often

# kind -> (apiVersion, plural) for every kind the controller reads or writes.
KINDS: dict[str, tuple[str, str]] = {
    **MANAGED_KINDS,
    "LLMBackend": ("llmbackend.dev/v1alpha1", "llmbackends"),
    "Pod": ("v1", "pods"),
    "StatefulSet": ("apps/v1", "statefulsets"),  # only read: a LeaderWorkerSet's group names (decide.py)
    "Job": ("batch/v1", "jobs"),
    "PersistentVolumeClaim": ("v1", "persistentvolumeclaims"),
    "Node": ("v1", "nodes"),
    "Event": ("v1", "events"),
    "Namespace": ("v1", "namespaces"),
    "Lease": ("coordination.k8s.io/v1", "leases"),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions"),
    "PriorityClass": ("scheduling.k8s.io/v1", "priorityclasses"),
    "ResourceQuota": ("v1", "resourcequotas"),
}
CLUSTER_SCOPED = {"Node", "Namespace", "CustomResourceDefinition", "PriorityClass"}

for _kind in MANAGED_KINDS:
    _group = MANAGED_KINDS[_kind][0].rpartition("/")[0]
    permissions.require(_group, MANAGED_KINDS[_kind][1], "get", "create", "patch", "delete")


def _api_of(path: str) -> str | None:
    """The "group/version/plural" of an /apis path (the key of `Kube.has_api`'s cache), else None."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] != ["apis"] or len(parts) < 4:
        return None
    rest = parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    return f"{parts[1]}/{parts[2]}/{rest[0]}" if rest else None


def _kind_of(path: str) -> str:
    """The plural resource of an API path (`/apis/apps/v1/namespaces/x/deployments/y` -> deployments)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        parts = parts[parts.index("namespaces") + 2:]
    else:
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    return (parts[0] if parts else "discovery") + ("/" + parts[2] if len(parts) > 2 else "")


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def _auth_headers(configuration: k8s_client.Configuration) -> dict[str, str]:
    """The credentials headers (a bearer token) the configuration carries."""
    settings: Mapping[str, Any] = configuration.auth_settings()  # a TypedDict: its values() are `object`
    return {auth["key"]: auth["value"] for auth in settings.values()}


def load_configuration(kubeconfig: str | None = None) -> k8s_client.Configuration:
    configuration = k8s_client.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
            return configuration
        except k8s_config.ConfigException:
            pass
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return configuration


class Kube:
    def __init__(self, configuration: k8s_client.Configuration, pool_size: int = 16):
        configuration.connection_pool_maxsize = pool_size
        self.configuration = configuration
        self._rest = rest.RESTClientObject(configuration)
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()  # verb -> count, for benchmarks ("API requests per CR")
        self._api_cache: dict[str, tuple[bool, float]] = {}  # key -> (served, when discovery said so)
        self._api_locks: dict[str, threading.Lock] = {}  # one discovery per API at a time, whatever the workers
        # (kind, namespace, name) -> (uid, the object sent) of creates whose fields are not marked as applied yet

    # ---- plumbing ----

    def _path(self, kind: str, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        api_version, plural = KINDS[kind]
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        path = base
        if namespace and kind not in CLUSTER_SCOPED:
            path += f"/namespaces/{quote(namespace)}"
        path += f"/{plural}"
        if name:
            path += f"/{quote(name)}"
        if subresource:
            path += f"/{subresource}"
        return path

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float = 30) -> Any:
        metrics.API_REQUESTS.labels(method=method, kind=_kind_of(path)).inc()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        headers.update(_auth_headers(self.configuration))
        url = self.configuration.host + path + (f"?{urlencode(query)}" if query else "")
        with self._lock:
            self.calls[method] += 1
        response = self._rest.request(method, url, headers=headers, body=body, _request_timeout=timeout)
        data = response.read()
        if response.status >= 400:
            try:
                status = json.loads(data)
            except ValueError:
                if response.status == 404:  # "404 page not found": no route at all for this resource
                    self._api_gone(path)
                raise ApiError(response.status, "", data[:500].decode(errors="replace")) from None
            if response.status == 404 and not (status.get("details") or {}).get("name"):
                self._api_gone(path)  # the resource itself is not served (a CRD deleted), not one object
            raise ApiError(response.status, status.get("reason", ""), status.get("message", data[:500]))
        return json.loads(data) if data else None

    def stream(self, path: str, timeout: float) -> Iterator[dict[str, Any]]:
        """The events of a watch request (`path` carries `watch=1`), decoded one JSON line at a time."""
        import urllib3

        metrics.API_REQUESTS.labels(method="WATCH", kind=_kind_of(path)).inc()
        headers = {"Accept": "application/json"}
        headers.update(_auth_headers(self.configuration))
        with self._lock:
            self.calls["WATCH"] += 1
        response = self._rest.pool_manager.request(
            "GET", self.configuration.host + path, headers=headers, preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout))
        try:
            if response.status >= 400:
                data = response.read()
                raise ApiError(response.status, "", data[:500].decode(errors="replace"))
            buffer = b""
            for chunk in response.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    # ---- verbs ----

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", self._path(kind, namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    get_live = get  # every read here goes to the API server

    def versions(self, kind: str, namespace: str, label_selector: str) -> list[tuple[str, str, str]] | None:
        """Only caches say what a list holds without reading it (cache.CachedKube.versions): None."""
        return None

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]:
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        items = self.request("GET", self._path(kind, namespace), query=query)["items"]
        for item in items:  # a list's items carry no kind or apiVersion; objects read by get do
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", KINDS[kind][0])
        return items

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply with the operator's single field manager; conflicts are forced (we own these fields)."""
        meta = obj["metadata"]
        path = self._path(obj["kind"], meta.get("namespace"), meta["name"])
        return self.request("PATCH", path, query={"fieldManager": FIELD_MANAGER, "force": "true"},
                            body=obj, content_type="application/apply-patch+yaml")

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        """JSON merge patch of .status (resourceVersion makes it conditional when given)."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self.request("PATCH", self._path(kind, namespace, name, "status"), body=body,
                            content_type="application/merge-patch+json")

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the object (an Event's count, say)."""
        return self.request("PATCH", self._path(kind, namespace, name), body=body,
                            content_type="application/merge-patch+json")

    def annotate(self, kind: str, namespace: str, name: str, annotations: dict[str, str | None]) -> dict[str, Any]:
        """JSON merge patch of metadata.annotations (None removes one)."""
        return self.request("PATCH", self._path(kind, namespace, name), body={"metadata": {"annotations": annotations}},
                            content_type="application/merge-patch+json")

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", self._path(kind, namespace, name), body=body)
            return True
        except ApiError as exc:
            if exc.status in (404, 409):
                return False
            raise

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.request("POST", self._path(obj["kind"], meta.get("namespace")), body=obj)

    def create_applied(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create by server-side apply, in one request: refused (409) when anything holds the name, where a plain
        apply would take that object over; the created object's fields are the operator's applied fields from the
        start (managedFields operation Apply), so a later apply removes what it no longer sets. A lost answer leaves
        nothing to finish: the next pass finds the child (409, then its own) already applied."""
        meta = obj["metadata"]
        return self.apply({**obj, "metadata": {**meta, "resourceVersion": CREATE_ONLY_RESOURCE_VERSION}})

    def has_api(self, api_version: str, plural: str, absent_ttl_s: float = API_ABSENCE_TTL_S) -> bool:
        """Whether the API server serves this resource (e.g. the LeaderWorkerSet CRD is installed). Served: trusted
        until a request finds it gone; absent: looked for again after `absent_ttl_s`. One discovery request per
        API at a time: other workers wait for its answer instead of asking too."""
        key = f"{api_version}/{plural}"
        cached = self._fresh_api(key, absent_ttl_s)
        if cached is not None:
            return cached
        with self._lock:
            lock = self._api_locks.setdefault(key, threading.Lock())
        with lock:
            cached = self._fresh_api(key, absent_ttl_s)  # another worker may have just asked
            if cached is not None:
                return cached
            try:
                resources = self.request("GET", f"/apis/{api_version}")
                found = any(r.get("name") == plural for r in resources.get("resources", []))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                found = False
            self._api_cache[key] = (found, time.monotonic())
            return found

    def _fresh_api(self, key: str, absent_ttl_s: float) -> bool | None:
        cached = self._api_cache.get(key)
        if cached is not None and (cached[0] or time.monotonic() - cached[1] < absent_ttl_s):
            return cached[0]
        return None

    def _api_gone(self, path: str) -> None:
        """A request was answered 404 for the resource type: discovery asks again (at most every API_RECHECK_MIN_S)."""
        key = _api_of(path)
        cached = self._api_cache.get(key) if key else None
        if key and cached is not None and cached[0] and time.monotonic() - cached[1] >= API_RECHECK_MIN_S:
            self._api_cache.pop(key, None)
