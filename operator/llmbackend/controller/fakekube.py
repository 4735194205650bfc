"""An in-memory stand-in for the API server behind reconcile.KubeClient, for tests without a cluster.

Objects live in a dict keyed by (kind, namespace, name); label selectors of equality terms (what the operator
sends) are honoured; every request is counted by HTTP method like kube.Kube counts them. `fail` makes writes
of the given kinds (or all, with "*") fail with that ApiError, as a quota or an admission webhook would.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from .kube import CREATE_ONLY_RESOURCE_VERSION, KINDS, ApiError, Kube


def _matches(labels: dict[str, str], selector: str | None) -> bool:
    wanted = dict(term.split("=", 1) for term in (selector or "").split(",") if term)
    return wanted.items() <= labels.items()


def merge(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch applied to `old`."""
    out = dict(old)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class FakeKube:
    _path = Kube._path  # same URL shapes as the real client (it uses nothing of the instance)

    def __init__(self, apis: set[str] | frozenset[str] = frozenset(), fail: ApiError | None = None,
                 fail_kinds: tuple[str, ...] = ("*",)):
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()
        self.apis = set(apis)  # "apiVersion/plural" of the optional APIs served
        self.fail = fail
        self.fail_kinds = fail_kinds
        self.events: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []  # (kind, name)
        self.logs: dict[str, str] = {}  # pod name -> its last log line
        self._version = 0

    def _key(self, obj: dict[str, Any]) -> tuple[str, str | None, str]:
        meta = obj["metadata"]
        return obj["kind"], meta.get("namespace"), meta["name"]

    def _check(self, kind: str) -> None:
        if self.fail and ("*" in self.fail_kinds or kind in self.fail_kinds):
            raise ApiError(self.fail.status, self.fail.reason, self.fail.message)

    def _stored(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("uid", f"uid-{self._version}")
        obj["metadata"]["resourceVersion"] = str(self._version)
        self.objects[self._key(obj)] = obj
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.calls["GET"] += 1
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    get_live = get

    def versions(self, kind: str, namespace: str, label_selector: str) -> list[tuple[str, str, str]] | None:
        """As cache.CachedKube: (name, uid, resourceVersion) of what `list` returns, no request counted."""
        return [(o["metadata"]["name"], o["metadata"].get("uid", ""), o["metadata"].get("resourceVersion", ""))
                for (k, ns, _), o in sorted(self.objects.items(), key=lambda item: str(item[0]))
                if k == kind and ns == namespace and _matches(o["metadata"].get("labels") or {}, label_selector)]

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]:
        self.calls["GET"] += 1
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                if k == kind and (namespace is None or ns == namespace)
                and _matches(o["metadata"].get("labels") or {}, label_selector)]

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls["PATCH"] += 1
        self._check(obj["kind"])
        live = self.objects.get(self._key(obj))
        version = obj["metadata"].get("resourceVersion")
        uid = obj["metadata"].get("uid")
        if live is not None and uid and uid != live["metadata"]["uid"]:  # as the API server: a uid never changes
            raise ApiError(422, "Invalid", f"{obj['kind']} {obj['metadata']['name']}: metadata.uid: Invalid value: "
                                           f"{uid!r}: field is immutable")
        if uid and live is None:  # as the API server: a uid is a precondition that no object meets
            raise ApiError(409, "Conflict", f"uid mismatch: the provided object specified uid {uid}, and no existing "
                                            "object was found")
        if version is not None and live is not None and version != live["metadata"].get("resourceVersion"):  # precondition
            raise ApiError(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
        merged = copy.deepcopy(obj)
        if live is None:
            merged["metadata"].pop("uid", None)  # the API server assigns one
        if live is not None:
            merged["metadata"] = {**live["metadata"], **obj["metadata"]}
            if "status" in live:
                merged["status"] = live["status"]
        return self._stored(merged)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls["POST"] += 1
        if obj["kind"] == "Event":
            self._version += 1
            obj = {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata'].get('generateName', '')}{self._version}"}}
            self.events.append(obj)
            return obj
        self._check(obj["kind"])
        if self._key(obj) in self.objects:
            raise ApiError(409, "AlreadyExists", f"{obj['kind']} {obj['metadata']['name']} already exists")
        self.created.append(obj)
        return self._stored(obj)

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls["PATCH"] += 1
        if kind == "Event":
            event = next((e for e in self.events if e["metadata"]["name"] == name), None)
            if event is None:
                raise ApiError(404, "NotFound", f"Event {name} not found")
            event.update(merge(event, body))
            return copy.deepcopy(event)
        self._check(kind)
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f"{kind} {name} not found")
        return self._stored(merge(obj, body))

    def create_applied(self, obj: dict[str, Any]) -> dict[str, Any]:
        """As kube.Kube: an apply whose resourceVersion no object has (a resourceVersion is not compared on create)."""
        created = self.apply({**obj, "metadata": {**obj["metadata"], "resourceVersion": CREATE_ONLY_RESOURCE_VERSION}})
        self.created.append(obj)
        return created

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        self.calls["PATCH"] += 1
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f"{kind} {name} not found")
        if resource_version is not None and resource_version != obj["metadata"].get("resourceVersion"):
            raise ApiError(409, "Conflict", "the object has been modified")
        obj["status"] = merge(obj.get("status") or {}, status)
        return self._stored(obj)

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        self.calls["DELETE"] += 1
        self._check(kind)
        self.deleted.append((kind, name))
        return self.objects.pop((kind, namespace, name), None) is not None

    def has_api(self, api_version: str, plural: str, absent_ttl_s: float = 0.0) -> bool:
        return f"{api_version}/{plural}" in self.apis

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None, **_: Any) -> Any:
        """Only what the model-cache step asks: the last log line of a pod, a merge patch of an object."""
        self.calls[method] += 1
        if method == "GET" and path.endswith("/log"):  # the API server cuts the answer at limitBytes
            text = self.logs[path.split("/")[-2]]
            limit = (query or {}).get("limitBytes")
            return json.loads(text[:int(limit)] if limit is not None else text)
        if method == "PATCH" and body is not None:  # a merge patch of an object, e.g. a Job's spec.suspend
            namespace, plural, name = path.split("/")[-3:]
            for key, obj in self.objects.items():
                if key[1:] == (namespace, name) and KINDS.get(key[0], ("", ""))[1] == plural:
                    self._check(key[0])
                    return self._stored(merge(obj, body))
            raise ApiError(404, "NotFound", f"{path} not found")
        raise ApiError(404, "NotFound", f"{method} {path}: not served by the fake")
