"""The operator's ClusterRole rules, built from `permissions()`.

manifests/default/rbac.yaml must contain exactly these rules (tests/unit/test_rbac.py
compares them and prints the expected YAML on a mismatch, ready to paste).
"""

from __future__ import annotations

from typing import Any

import yaml

from .permissions import permissions

CLUSTER_ROLE_NAME = "llmbackend-operator"

# Conventional verb order (as `kubectl create clusterrole` writes them); unknown verbs go last.
_VERB_ORDER = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]


def _sort_verbs(verbs: frozenset[str] | set[str]) -> list[str]:
    return sorted(verbs, key=lambda v: (_VERB_ORDER.index(v) if v in _VERB_ORDER else len(_VERB_ORDER), v))


def cluster_role_rules(perms: dict[tuple[str, str], frozenset[str]] | None = None) -> list[dict[str, Any]]:
    """One rule per (apiGroup, resource), sorted by group then resource; verbs in conventional order."""
    perms = permissions() if perms is None else perms
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": _sort_verbs(verbs)}
        for (group, resource), verbs in sorted(perms.items())
        if verbs
    ]


def rules_to_permissions(rules: list[dict[str, Any]]) -> dict[tuple[str, str], frozenset[str]]:
    """Flatten ClusterRole rules (any grouping) into {(group, resource): verbs}."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                out.setdefault((group, resource), set()).update(rule.get("verbs") or [])
    return {key: frozenset(verbs) for key, verbs in out.items()}


def cluster_role_yaml(perms: dict[tuple[str, str], frozenset[str]] | None = None) -> str:
    """The ClusterRole document as YAML (what manifests/default/rbac.yaml starts with)."""
    doc = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE_NAME, "labels": {"app.kubernetes.io/name": "llmbackend-operator"}},
        "rules": cluster_role_rules(perms),
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
