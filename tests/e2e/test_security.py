"""RBAC as installed from manifests/, checked by the real API server: its authorizer (SubjectAccessReview) and its
RBAC escalation check (requests made as the operator's ServiceAccount through impersonation)."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT

import llmbackend.controller.run  # noqa: F401 - registers every permission the controller uses
from llmbackend.controller.kube import KINDS
from llmbackend.controller.leader import LEASE_NAME
from llmbackend.controller.permissions import CLUSTER, OWN, grants
from llmbackend.render.multinode import LAUNCHER_CLUSTER_ROLE

KINDS.setdefault("SubjectAccessReview", ("authorization.k8s.io/v1", "subjectaccessreviews"))
OPERATOR = "system:serviceaccount:llmbackend-system:llmbackend-operator"
AS_OPERATOR = ("--as", OPERATOR, "--as-group", "system:serviceaccounts")
OPERATOR_NAMESPACE = "llmbackend-system"
REPORTER = "system:serviceaccount:llmbackend-system:llmbackend-topology-reporter"


@pytest.fixture(scope="module")
def installed_rbac(cluster):
    for path in ("manifests/default/namespace.yaml", "manifests/default/serviceaccount.yaml", "manifests/default/rbac.yaml",
                 "manifests/topology-reporter/serviceaccount.yaml", "manifests/topology-reporter/rbac.yaml"):
        cluster.kubectl("apply", "-f", str(REPO_ROOT / path))
    return cluster


def allowed(cluster, user: str, verb: str, group: str, resource: str, namespace: str | None = "default",
            name: str | None = None) -> bool:
    resource, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource}
    if name:
        attributes["name"] = name
    if subresource:
        attributes["subresource"] = subresource
    if namespace and resource not in ("nodes", "namespaces", "customresourcedefinitions"):
        attributes["namespace"] = namespace
    review = cluster.kube.create({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                  "metadata": {}, "spec": {"user": OPERATOR if user == "operator" else REPORTER,
                                                           "groups": ["system:serviceaccounts"],
                                                           "resourceAttributes": attributes}})
    return review["status"].get("allowed", False)


def test_operator_can_do_everything_its_code_uses(installed_rbac):
    denied = []
    for grant, verbs in grants().items():
        namespace = {CLUSTER: None, OWN: OPERATOR_NAMESPACE}.get(grant.scope, "default")
        for verb in sorted(verbs):
            for name in grant.resource_names or (None,):
                if not allowed(installed_rbac, "operator", verb, grant.group, grant.resource, namespace, name):
                    denied.append((grant, verb))
    assert denied == []


@pytest.mark.parametrize("verb, group, resource", [
    ("get", "", "secrets"), ("list", "", "secrets"), ("watch", "", "secrets"),
    ("create", "", "pods"), ("delete", "", "pods"),
    ("patch", "llmbackend.dev", "llmbackends"), ("update", "llmbackend.dev", "llmbackends"),  # never rewrites the user's spec
    ("delete", "llmbackend.dev", "llmbackends"),
    ("patch", "", "nodes"), ("delete", "", "nodes"),
    ("create", "rbac.authorization.k8s.io", "clusterroles"), ("escalate", "rbac.authorization.k8s.io", "clusterroles"),
    ("bind", "rbac.authorization.k8s.io", "clusterroles"), ("escalate", "rbac.authorization.k8s.io", "roles"),
    ("bind", "rbac.authorization.k8s.io", "roles"), ("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
    ("impersonate", "", "serviceaccounts"), ("create", "", "serviceaccounts/token"),
    ("create", "", "pods/exec"), ("get", "", "pods/exec"), ("create", "", "pods/attach"), ("get", "", "pods/attach"),
    ("create", "rbac.authorization.k8s.io", "roles"), ("update", "coordination.k8s.io", "leases"),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions"),
])
def test_operator_cannot_read_secrets_or_escalate(installed_rbac, verb, group, resource):
    assert not allowed(installed_rbac, "operator", verb, group, resource)


@pytest.mark.parametrize("namespace", ["kube-system", "default", OPERATOR_NAMESPACE])
def test_operator_cannot_exec_anywhere(installed_rbac, namespace):
    """It holds no exec right at all (issue 24: it could exec into kube-system's pods), neither over SPDY (create)
    nor over WebSocket (get)."""
    for verb in ("create", "get"):
        assert not allowed(installed_rbac, "operator", verb, "", "pods/exec", namespace, "kube-apiserver-node")


def test_operator_cannot_touch_other_components_leases(installed_rbac):
    for namespace, name in (("kube-system", "kube-controller-manager"), ("kube-system", "kube-scheduler"),
                            (OPERATOR_NAMESPACE, "someone-elses-lease"), ("default", LEASE_NAME)):
        for verb in ("update", "patch", "delete"):
            assert not allowed(installed_rbac, "operator", verb, "coordination.k8s.io", "leases", namespace, name), (
                namespace, name, verb)
    assert allowed(installed_rbac, "operator", "update", "coordination.k8s.io", "leases", OPERATOR_NAMESPACE, LEASE_NAME)


def _apply_as_operator(cluster, *objects: dict):
    """POST as the operator (create, not apply: no GET first, so the escalation check itself answers)."""
    import yaml

    return cluster.kubectl(*AS_OPERATOR, "create", "-f", "-", input=yaml.safe_dump_all(list(objects)), check=False)


def _role_binding(namespace: str, name: str, role_kind: str, role: str) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}


def test_operator_cannot_grant_exec_or_anything_else_in_kube_system(installed_rbac):
    """The API server's escalation check, as the operator: no Role granting exec, no binding of cluster-admin or of an
    exec Role that exists there, no ClusterRoleBinding. (On today's main the first two were accepted.)"""
    exec_role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "exec-everything", "namespace": "kube-system"},
                 "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                           {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]}
    refused = _apply_as_operator(installed_rbac, exec_role)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    installed_rbac.kubectl("apply", "-f", "-", input=__import__("yaml").safe_dump(exec_role))  # as the admin
    try:
        for role_kind, role in (("Role", "exec-everything"), ("ClusterRole", "cluster-admin"), ("ClusterRole", "admin"),
                                ("ClusterRole", "edit")):
            refused = _apply_as_operator(installed_rbac, _role_binding("kube-system", f"steal-{role.lower()}", role_kind, role))
            # "is attempting to grant RBAC permissions not currently held": the escalation check, not a missing verb
            assert refused.returncode != 0 and "not currently held" in refused.stderr, (role, refused.stderr)
        crb = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "steal"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LAUNCHER_CLUSTER_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}
        refused = _apply_as_operator(installed_rbac, crb)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    finally:
        installed_rbac.kubectl("delete", "role", "-n", "kube-system", "exec-everything", check=False)


def test_operator_may_bind_the_launcher_role_and_nothing_more(installed_rbac, namespace):
    """Multi-node leaders get a RoleBinding of the fixed launcher ClusterRole: accepted because the operator may `bind`
    that one role by name; a Role of its own, even one with the same rights, is refused."""
    from llmbackend.render.multinode import launcher_rbac
    from llmbackend.render.names import BackendRef, launcher_account_name

    objects = launcher_rbac(BackendRef("big", namespace, "uid"))
    name = launcher_account_name(BackendRef("big", namespace, "uid"))
    for obj in objects:
        obj["metadata"].pop("ownerReferences")  # no such owner in this test
    applied = _apply_as_operator(installed_rbac, *objects)
    assert applied.returncode == 0, applied.stderr
    assert installed_rbac.kube.get("RoleBinding", namespace, name)["roleRef"]["name"] == LAUNCHER_CLUSTER_ROLE
    own_role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "launcher", "namespace": namespace},
                "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]}
    refused = _apply_as_operator(installed_rbac, own_role)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    refused = _apply_as_operator(installed_rbac, _role_binding(namespace, "edit", "ClusterRole", "edit"))
    assert refused.returncode != 0 and "not currently held" in refused.stderr, refused.stderr
    # The launcher's ServiceAccount may exec, in its namespace only.
    launcher = f"system:serviceaccount:{namespace}:{name}"
    for verb in ("get", "create"):
        assert _review(installed_rbac, launcher, verb, "pods/exec", namespace)
        assert not _review(installed_rbac, launcher, verb, "pods/exec", "kube-system")


def _review(cluster, user: str, verb: str, resource: str, namespace: str) -> bool:
    resource, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": "", "resource": resource, "namespace": namespace}
    if subresource:
        attributes["subresource"] = subresource
    review = cluster.kube.create({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
                                  "spec": {"user": user, "groups": ["system:serviceaccounts"], "resourceAttributes": attributes}})
    return review["status"].get("allowed", False)


def test_topology_reporter_only_reads_and_annotates_nodes(installed_rbac):
    assert allowed(installed_rbac, "reporter", "get", "", "nodes")
    assert allowed(installed_rbac, "reporter", "patch", "", "nodes")
    for verb, resource in (("list", "nodes"), ("delete", "nodes"), ("get", "secrets"), ("list", "pods"), ("create", "pods")):
        assert not allowed(installed_rbac, "reporter", verb, "", resource), (verb, resource)
