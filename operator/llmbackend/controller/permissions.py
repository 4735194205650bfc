"""Every Kubernetes API permission the operator uses, in one place.

The code that calls the API registers what it calls here (`require(...)`), and the ClusterRole in
manifests/default/rbac.yaml must grant exactly this set: tests/unit/test_rbac.py compares them.
"""

from __future__ import annotations

from collections import defaultdict

# (apiGroup, resource) -> verbs
_PERMISSIONS: dict[tuple[str, str], set[str]] = defaultdict(set)


def require(group: str, resource: str, *verbs: str) -> None:
    _PERMISSIONS[(group, resource)].update(verbs)


def permissions() -> dict[tuple[str, str], frozenset[str]]:
    return {key: frozenset(verbs) for key, verbs in _PERMISSIONS.items()}


# The operator's own resource: watched by kopf, read per reconcile, status written by the operator.
require("llmbackend.dev", "llmbackends", "get", "list", "watch")
require("llmbackend.dev", "llmbackends/status", "get", "patch", "update")
# kopf discovers the served resources and namespaces it watches.
require("apiextensions.k8s.io", "customresourcedefinitions", "get", "list", "watch")
require("", "namespaces", "get", "list", "watch")
# GPU inventory: Node informer (read-only; the topology reporter has its own ServiceAccount).
require("", "nodes", "get", "list", "watch")
# Ready pods of each backend: scrape targets for autoscaling, scheduling failures for Degraded.
require("", "pods", "get", "list", "watch")
# Events on the LLMBackend (kopf posts them through the core/v1 and events.k8s.io APIs).
require("", "events", "create", "patch")
require("events.k8s.io", "events", "create", "patch")
# Leader election between operator replicas.
require("coordination.k8s.io", "leases", "get", "create", "update")
