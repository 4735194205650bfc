"""The operator's RBAC grants exactly what the code registers in controller/permissions.py, each in its scope.

On a mismatch the failure message contains the expected file (llmbackend.controller.rbac.rbac_yaml()), ready to
paste into manifests/default/rbac.yaml.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from llmbackend.controller import permissions as permissions_module
from llmbackend.controller.permissions import CLUSTER, OWN, WATCHED
from llmbackend.controller.rbac import (
    CLUSTER_READ_ROLE_NAME,
    CLUSTER_ROLE_NAME,
    OWN_ROLE_NAME,
    namespace_binding,
    rbac_documents,
    rbac_yaml,
    rules,
    rules_to_grants,
)
from llmbackend.render.multinode import LAUNCHER_CLUSTER_ROLE, launcher_rbac

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "manifests" / "default" / "rbac.yaml"
NAMESPACED_BINDING = ROOT / "manifests" / "namespaced" / "rolebinding.yaml"
TOPOLOGY_RBAC = ROOT / "manifests" / "topology-reporter" / "rbac.yaml"
RBAC_GROUP = "rbac.authorization.k8s.io"


def _controller_loaded() -> bool:
    """Import the controller so its `require(...)` calls run; False when it isn't written yet."""
    try:
        importlib.import_module("llmbackend.controller.run")
    except ModuleNotFoundError as exc:
        if exc.name == "llmbackend.controller.run":
            return False
        raise
    return True


def expected_grants() -> dict[permissions_module.Grant, frozenset[str]]:
    """Everything registered once the controller (and what it imports) is loaded."""
    _controller_loaded()
    return permissions_module.grants()


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _role(path: Path, kind: str, name: str) -> dict:
    roles = [d for d in _docs(path) if d.get("kind") == kind and d["metadata"]["name"] == name]
    assert len(roles) == 1, f"{path.relative_to(ROOT)}: expected one {kind} {name}"
    return roles[0]


def _describe(grants: dict) -> str:
    return "\n".join(f"  {g.scope} {g.group or 'core'}/{g.resource}{list(g.resource_names) or ''}: {sorted(v)}"
                     for g, v in sorted(grants.items()))


def test_rbac_grants_exactly_the_registered_permissions_in_their_scopes():
    expected = expected_grants()
    granted = {**rules_to_grants(_role(RBAC, "ClusterRole", CLUSTER_ROLE_NAME)["rules"], WATCHED),
               **rules_to_grants(_role(RBAC, "ClusterRole", CLUSTER_READ_ROLE_NAME)["rules"], CLUSTER),
               **rules_to_grants(_role(RBAC, "Role", OWN_ROLE_NAME)["rules"], OWN)}
    missing = {k: v - granted.get(k, frozenset()) for k, v in expected.items() if v - granted.get(k, frozenset())}
    extra = {k: v - expected.get(k, frozenset()) for k, v in granted.items() if v - expected.get(k, frozenset())}
    if missing or extra:
        pytest.fail(
            f"{RBAC.relative_to(ROOT)} differs from llmbackend.controller.permissions\n"
            f"missing:\n{_describe(missing) or '  -'}\nextra:\n{_describe(extra) or '  -'}\n"
            f"expected file:\n{rbac_yaml(expected)}"
        )


def test_rbac_file_is_the_generated_one():
    """Same documents, same layout (a clean diff when regenerated)."""
    assert _docs(RBAC) == rbac_documents(expected_grants()), f"regenerate {RBAC.relative_to(ROOT)}:\n{rbac_yaml()}"


@pytest.mark.parametrize("path,kind,name", [
    (RBAC, "ClusterRole", CLUSTER_ROLE_NAME),
    (RBAC, "ClusterRole", CLUSTER_READ_ROLE_NAME),
    (RBAC, "Role", OWN_ROLE_NAME),
    (RBAC, "ClusterRole", LAUNCHER_CLUSTER_ROLE),
    (TOPOLOGY_RBAC, "ClusterRole", "llmbackend-topology-reporter"),
])
def test_no_wildcards_no_secrets(path, kind, name):
    for rule in _role(path, kind, name)["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"wildcard in {field}: {rule}"
        assert "secrets" not in rule.get("resources", []), rule
        assert not rule.get("nonResourceURLs"), rule
        assert not {"escalate", "impersonate"} & set(rule.get("verbs", [])), rule


def test_the_operator_holds_no_right_it_hands_out():
    """No exec, no Roles; `bind` only on the launcher ClusterRole, by name. Leases only in its own namespace, by name
    for get/update."""
    granted = expected_grants()
    watched = permissions_module.permissions(WATCHED)
    assert ("", "pods/exec") not in permissions_module.permissions()
    assert (RBAC_GROUP, "roles") not in permissions_module.permissions()
    assert (RBAC_GROUP, "clusterrolebindings") not in permissions_module.permissions()
    binds = {g: v for g, v in granted.items() if "bind" in v or "escalate" in v}
    assert binds == {permissions_module.Grant(WATCHED, RBAC_GROUP, "clusterroles", (LAUNCHER_CLUSTER_ROLE,)): frozenset({"bind"})}
    assert ("coordination.k8s.io", "leases") not in watched
    leases = {g: v for g, v in granted.items() if g.resource == "leases"}
    assert all(g.scope == OWN for g in leases)
    assert all(g.resource_names for g, v in leases.items() if v & {"get", "update", "patch"})


def test_the_operator_holds_every_right_of_the_launcher_role_it_does_not_bind():
    """What the launcher binding grants is exactly the fixed ClusterRole; the operator renders no Role."""
    launcher = _role(RBAC, "ClusterRole", LAUNCHER_CLUSTER_ROLE)
    assert rules_to_grants(launcher["rules"], WATCHED) == {
        # llmb-exec opens a WebSocket (a GET, authorized as `create` too since 1.35); no `pods get` (issue 42).
        permissions_module.Grant(WATCHED, "", "pods/exec"): frozenset({"get", "create"}),
    }
    from llmbackend.render.names import BackendRef

    objects = launcher_rbac(BackendRef("big", "serving", "uid"))
    assert [o["kind"] for o in objects] == ["ServiceAccount", "RoleBinding"]
    assert objects[1]["roleRef"] == {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": LAUNCHER_CLUSTER_ROLE}


def test_bound_to_the_operator_service_account():
    subject = [{"kind": "ServiceAccount", "name": "llmbackend-operator", "namespace": "llmbackend-system"}]
    bindings = {(d["kind"], d["metadata"]["name"]): d for d in _docs(RBAC) if d["kind"].endswith("Binding")}
    assert set(bindings) == {("ClusterRoleBinding", CLUSTER_ROLE_NAME), ("ClusterRoleBinding", CLUSTER_READ_ROLE_NAME),
                             ("RoleBinding", OWN_ROLE_NAME)}
    for (kind, name), b in bindings.items():
        assert b["roleRef"] == {"apiGroup": RBAC_GROUP, "kind": kind.replace("Binding", ""), "name": name}
        assert b["subjects"] == subject
    deployment = yaml.safe_load((ROOT / "manifests" / "default" / "deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "llmbackend-operator"


def test_namespaced_mode_binding_is_the_generated_one():
    assert _docs(NAMESPACED_BINDING) == [namespace_binding("team-a")]


def test_topology_reporter_may_only_get_and_patch_nodes():
    role = _role(TOPOLOGY_RBAC, "ClusterRole", "llmbackend-topology-reporter")
    assert rules_to_grants(role["rules"], CLUSTER) == {permissions_module.Grant(CLUSTER, "", "nodes"): frozenset({"get", "patch"})}
    (binding,) = [d for d in _docs(TOPOLOGY_RBAC) if d.get("kind") == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llmbackend-topology-reporter", "namespace": "llmbackend-system"}
    ]


def test_generator_round_trips():
    granted = expected_grants()
    for scope in (WATCHED, CLUSTER, OWN):
        assert rules_to_grants(rules(scope, granted), scope) == {g: v for g, v in granted.items() if g.scope == scope}
