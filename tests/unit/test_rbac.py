"""The operator's ClusterRole grants exactly what the code registers in controller/permissions.py.

On a mismatch the failure message contains the expected ClusterRole (from
llmbackend.controller.rbac.cluster_role_yaml()), ready to paste into manifests/default/rbac.yaml.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from llmbackend.controller import permissions as permissions_module
from llmbackend.controller.rbac import CLUSTER_ROLE_NAME, cluster_role_rules, cluster_role_yaml, rules_to_permissions

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "manifests" / "default" / "rbac.yaml"
TOPOLOGY_RBAC = ROOT / "manifests" / "topology-reporter" / "rbac.yaml"


def _controller_loaded() -> bool:
    """Import the controller so its `require(...)` calls run; False when it isn't written yet."""
    try:
        importlib.import_module("llmbackend.controller.run")
    except ModuleNotFoundError as exc:
        if exc.name == "llmbackend.controller.run":
            return False
        raise
    return True


def expected_permissions() -> dict[tuple[str, str], frozenset[str]]:
    """Everything registered once the controller (and what it imports) is loaded."""
    _controller_loaded()
    return permissions_module.permissions()


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _cluster_role(path: Path, name: str) -> dict:
    roles = [d for d in _docs(path) if d.get("kind") == "ClusterRole" and d["metadata"]["name"] == name]
    assert len(roles) == 1, f"{path.relative_to(ROOT)}: expected one ClusterRole {name}"
    return roles[0]


def _describe(perms: dict[tuple[str, str], frozenset[str]]) -> str:
    return "\n".join(f"  {g or 'core'}/{r}: {sorted(v)}" for (g, r), v in sorted(perms.items()))


def test_cluster_role_matches_registered_permissions_exactly():
    expected = expected_permissions()
    granted = rules_to_permissions(_cluster_role(RBAC, CLUSTER_ROLE_NAME)["rules"])
    missing = {k: v - granted.get(k, frozenset()) for k, v in expected.items() if v - granted.get(k, frozenset())}
    extra = {k: v - expected.get(k, frozenset()) for k, v in granted.items() if v - expected.get(k, frozenset())}
    if missing or extra:
        pytest.fail(
            f"{RBAC.relative_to(ROOT)} differs from llmbackend.controller.permissions\n"
            f"missing:\n{_describe(missing) or '  -'}\nextra:\n{_describe(extra) or '  -'}\n"
            f"expected ClusterRole (paste into {RBAC.relative_to(ROOT)}):\n---\n{cluster_role_yaml(expected)}"
        )


def test_cluster_role_is_the_generated_one():
    """Same rules, same layout: one rule per (group, resource), sorted (a clean diff when regenerated)."""
    rules = _cluster_role(RBAC, CLUSTER_ROLE_NAME)["rules"]
    assert rules == cluster_role_rules(expected_permissions()), (
        f"regenerate the rules:\n---\n{cluster_role_yaml(expected_permissions())}"
    )


@pytest.mark.parametrize("path,name", [
    (RBAC, CLUSTER_ROLE_NAME),
    (TOPOLOGY_RBAC, "llmbackend-topology-reporter"),
])
def test_no_wildcards_no_secrets(path, name):
    for rule in _cluster_role(path, name)["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"wildcard in {field}: {rule}"
        assert "secrets" not in rule.get("resources", []), rule
        assert not rule.get("nonResourceURLs"), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule.get("verbs", [])), rule


def test_bound_to_the_operator_service_account():
    bindings = [d for d in _docs(RBAC) if d.get("kind") == "ClusterRoleBinding"]
    assert len(bindings) == 1
    b = bindings[0]
    assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE_NAME}
    assert b["subjects"] == [{"kind": "ServiceAccount", "name": "llmbackend-operator", "namespace": "llmbackend-system"}]
    deployment = yaml.safe_load((ROOT / "manifests" / "default" / "deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "llmbackend-operator"


def test_topology_reporter_may_only_get_and_patch_nodes():
    role = _cluster_role(TOPOLOGY_RBAC, "llmbackend-topology-reporter")
    assert rules_to_permissions(role["rules"]) == {("", "nodes"): frozenset({"get", "patch"})}
    (binding,) = [d for d in _docs(TOPOLOGY_RBAC) if d.get("kind") == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llmbackend-topology-reporter", "namespace": "llmbackend-system"}
    ]


def test_generator_round_trips():
    perms = expected_permissions()
    assert rules_to_permissions(cluster_role_rules(perms)) == perms
    doc = yaml.safe_load(cluster_role_yaml(perms))
    assert doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == CLUSTER_ROLE_NAME
