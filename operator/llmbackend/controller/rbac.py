"""manifests/default/rbac.yaml, built from the registered permissions (controller/permissions.py).

One document per scope: ClusterRole `llmbackend-operator` (namespaced resources of the served namespaces),
ClusterRole `llmbackend-operator-cluster` (cluster-scoped reads), Role `llmbackend-operator` in the operator's
namespace (its Lease), the launcher's fixed ClusterRole (render/multinode.py) and the bindings. The file must be
exactly `rbac_yaml()` (tests/unit/test_rbac.py prints it on a mismatch, ready to paste).
"""

from __future__ import annotations

from typing import Any

import yaml

from ..render.multinode import launcher_cluster_role
from .permissions import CLUSTER, OWN, WATCHED, Grant, grants

CLUSTER_ROLE_NAME = "llmbackend-operator"  # WATCHED rules; bound cluster-wide, or per namespace in namespaced mode
CLUSTER_READ_ROLE_NAME = "llmbackend-operator-cluster"
OWN_ROLE_NAME = "llmbackend-operator"
OPERATOR_NAMESPACE = "llmbackend-system"
SERVICE_ACCOUNT = "llmbackend-operator"
_RBAC = "rbac.authorization.k8s.io"
_LABELS = {"app.kubernetes.io/name": "llmbackend-operator"}

# Conventional verb order (as `kubectl create clusterrole` writes them); unknown verbs go last.
_VERB_ORDER = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]


def _sort_verbs(verbs: frozenset[str] | set[str]) -> list[str]:
    return sorted(verbs, key=lambda v: (_VERB_ORDER.index(v) if v in _VERB_ORDER else len(_VERB_ORDER), v))


def rules(scope: str, granted: dict[Grant, frozenset[str]] | None = None) -> list[dict[str, Any]]:
    """One rule per (apiGroup, resource, resourceNames) of a scope, sorted; verbs in conventional order."""
    granted = grants() if granted is None else granted
    out = []
    for grant, verbs in sorted(granted.items()):
        if grant.scope != scope or not verbs:
            continue
        rule: dict[str, Any] = {"apiGroups": [grant.group], "resources": [grant.resource]}
        if grant.resource_names:
            rule["resourceNames"] = list(grant.resource_names)
        rule["verbs"] = _sort_verbs(verbs)
        out.append(rule)
    return out


def rules_to_grants(rule_list: list[dict[str, Any]], scope: str) -> dict[Grant, frozenset[str]]:
    """Flatten RBAC rules (any grouping) into {Grant: verbs}."""
    out: dict[Grant, set[str]] = {}
    for rule in rule_list:
        names = tuple(sorted(rule.get("resourceNames") or []))
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                out.setdefault(Grant(scope, group, resource, names), set()).update(rule.get("verbs") or [])
    return {key: frozenset(verbs) for key, verbs in out.items()}


def _subject() -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": OPERATOR_NAMESPACE}]


def _cluster_role(name: str, rule_list: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": name, "labels": dict(_LABELS)},
            "rules": rule_list}


def _cluster_binding(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name, "labels": dict(_LABELS)},
            "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": name}, "subjects": _subject()}


def namespace_binding(namespace: str) -> dict[str, Any]:
    """Namespaced mode: the operator's rights in one served namespace (instead of the ClusterRoleBinding)."""
    return {"apiVersion": f"{_RBAC}/v1", "kind": "RoleBinding",
            "metadata": {"name": CLUSTER_ROLE_NAME, "namespace": namespace, "labels": dict(_LABELS)},
            "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": CLUSTER_ROLE_NAME}, "subjects": _subject()}


def rbac_documents(granted: dict[Grant, frozenset[str]] | None = None) -> list[dict[str, Any]]:
    own_meta = {"name": OWN_ROLE_NAME, "namespace": OPERATOR_NAMESPACE, "labels": dict(_LABELS)}
    return [
        _cluster_role(CLUSTER_ROLE_NAME, rules(WATCHED, granted)),
        _cluster_binding(CLUSTER_ROLE_NAME),
        _cluster_role(CLUSTER_READ_ROLE_NAME, rules(CLUSTER, granted)),
        _cluster_binding(CLUSTER_READ_ROLE_NAME),
        {"apiVersion": f"{_RBAC}/v1", "kind": "Role", "metadata": own_meta, "rules": rules(OWN, granted)},
        {"apiVersion": f"{_RBAC}/v1", "kind": "RoleBinding", "metadata": dict(own_meta),
         "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": OWN_ROLE_NAME}, "subjects": _subject()},
        launcher_cluster_role(),
    ]


HEADER = """\
# GENERATED from operator/llmbackend/controller/permissions.py (`require(...)` next to each API call) by
# `python -m llmbackend.controller.rbac`; tests/unit/test_rbac.py fails, printing this file, when they differ.
# No wildcards, no Secrets, no exec, no Roles: the operator holds no right it hands out. The multi-node
# launcher's exec rights are the fixed ClusterRole llmbackend-launcher, which the operator may only bind
# (`bind`, resourceNames: llmbackend-launcher) with a RoleBinding in a backend's namespace.
# Namespaced mode (`llmbackend run --namespace A --namespace B`): drop the ClusterRoleBinding
# llmbackend-operator and bind the ClusterRole llmbackend-operator with a RoleBinding in each served namespace
# (manifests/namespaced does it for one). docs/security-rbac.md has the threat model.
"""


def rbac_yaml(granted: dict[Grant, frozenset[str]] | None = None) -> str:
    return HEADER + yaml.safe_dump_all(rbac_documents(granted), sort_keys=False, default_flow_style=False)


def main() -> None:
    """`python -m llmbackend.controller.rbac > manifests/default/rbac.yaml` (after importing every module that
    registers permissions)."""
    import importlib

    importlib.import_module("llmbackend.controller.run")
    print(rbac_yaml(), end="")


if __name__ == "__main__":
    main()
