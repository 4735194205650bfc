"""Every Kubernetes API permission the operator uses, in one place, with where it holds it.

The code that calls the API registers what it calls here (`require(...)`), and manifests/default/rbac.yaml must
grant exactly this set, each in its scope: tests/unit/test_rbac.py compares them. The scopes:

- WATCHED: namespaced resources in the namespaces the operator serves. ClusterRole `llmbackend-operator`, bound
  by a ClusterRoleBinding (all namespaces) or, in namespaced mode (`llmbackend run --namespace ...`), by one
  RoleBinding per served namespace.
- CLUSTER: cluster-scoped reads (nodes, CRDs, namespaces). ClusterRole `llmbackend-operator-cluster`.
- OWN: the operator's own namespace only (its leader Lease). Role `llmbackend-operator` there.

The operator holds no right it hands out: the multi-node launcher's exec rights are a fixed ClusterRole
(render/multinode.py) that the operator may only `bind` (resourceNames: that one ClusterRole).
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

WATCHED = "watched"
CLUSTER = "cluster"
OWN = "own"
SCOPES = (WATCHED, CLUSTER, OWN)


class Grant(NamedTuple):
    scope: str
    group: str
    resource: str
    resource_names: tuple[str, ...] = ()  # empty: every object of the resource


_GRANTS: dict[Grant, set[str]] = defaultdict(set)


def require(group: str, resource: str, *verbs: str, scope: str = WATCHED, resource_names: tuple[str, ...] = ()) -> None:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    _GRANTS[Grant(scope, group, resource, tuple(sorted(resource_names)))].update(verbs)


def grants() -> dict[Grant, frozenset[str]]:
    return {grant: frozenset(verbs) for grant, verbs in _GRANTS.items() if verbs}


def permissions(scope: str | None = None) -> dict[tuple[str, str], frozenset[str]]:
    """{(group, resource): verbs} of one scope (None: all scopes merged), whatever their resourceNames."""
    out: dict[tuple[str, str], set[str]] = {}
    for grant, verbs in grants().items():
        if scope is None or grant.scope == scope:
            out.setdefault((grant.group, grant.resource), set()).update(verbs)
    return {key: frozenset(verbs) for key, verbs in out.items()}


# The operator's own resource: watched by the operator (controller/cache.py), read per reconcile, status written by the operator.
require("llmbackend.dev", "llmbackends", "get", "list", "watch")
require("llmbackend.dev", "llmbackends/status", "get", "patch", "update")
# kopf discovers the served resources and namespaces it watches.
require("apiextensions.k8s.io", "customresourcedefinitions", "get", "list", "watch", scope=CLUSTER)
require("", "namespaces", "get", "list", "watch", scope=CLUSTER)
# GPU inventory: Node informer (read-only; the topology reporter has its own ServiceAccount).
require("", "nodes", "get", "list", "watch", scope=CLUSTER)
# Ready pods of each backend: scrape targets for autoscaling, scheduling failures for Degraded.
require("", "pods", "get", "list", "watch")
# Events on the LLMBackend (kopf posts them through the core/v1 and events.k8s.io APIs).
require("", "events", "create", "patch")
require("events.k8s.io", "events", "create", "patch")
