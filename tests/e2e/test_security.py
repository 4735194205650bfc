"""RBAC as installed from manifests/, checked by the real API server's authorizer (SubjectAccessReview)."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT

import llmbackend.controller.run  # noqa: F401 - registers every permission the controller uses
from llmbackend.controller.kube import KINDS
from llmbackend.controller.permissions import permissions

KINDS.setdefault("SubjectAccessReview", ("authorization.k8s.io/v1", "subjectaccessreviews"))
OPERATOR = "system:serviceaccount:llmbackend-system:llmbackend-operator"
REPORTER = "system:serviceaccount:llmbackend-system:llmbackend-topology-reporter"


@pytest.fixture(scope="module")
def installed_rbac(cluster):
    for path in ("manifests/default/namespace.yaml", "manifests/default/serviceaccount.yaml", "manifests/default/rbac.yaml",
                 "manifests/topology-reporter/serviceaccount.yaml", "manifests/topology-reporter/rbac.yaml"):
        cluster.kubectl("apply", "-f", str(REPO_ROOT / path))
    return cluster


def allowed(cluster, user: str, verb: str, group: str, resource: str, namespace: str | None = "default") -> bool:
    resource, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource}
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
    denied = [(group, resource, verb) for (group, resource), verbs in permissions().items() for verb in sorted(verbs)
              if not allowed(installed_rbac, "operator", verb, group, resource)]
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
    ("create", "apiextensions.k8s.io", "customresourcedefinitions"),
])
def test_operator_cannot_read_secrets_or_escalate(installed_rbac, verb, group, resource):
    assert not allowed(installed_rbac, "operator", verb, group, resource)


def test_operator_may_grant_the_launcher_role_and_nothing_more(installed_rbac, namespace):
    """Multi-node leaders get a Role (pods get, pods/exec create on their workers) from the operator. The API server's
    escalation check lets the operator create it because it holds those permissions itself (it has neither `escalate`
    nor `bind`), and refuses a Role granting anything it does not hold."""
    import yaml

    from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
    from llmbackend.render.multinode import launcher_rbac
    from llmbackend.render.workloads import BackendRef

    spec = LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-405b"}})
    plan = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2, memory_per_gpu_bytes=1)
    objects = launcher_rbac(BackendRef("big", namespace, "uid"), spec, plan, 2)
    for obj in objects:
        obj["metadata"].pop("ownerReferences")  # no such owner in this test
    as_operator = ("--as", OPERATOR, "--as-group", "system:serviceaccounts")
    installed_rbac.kubectl(*as_operator, "apply", "-f", "-", input=yaml.safe_dump_all(objects))
    assert installed_rbac.kube.get("RoleBinding", namespace, "big")["roleRef"]["name"] == "big"
    greedy = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "greedy", "namespace": namespace},
              "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
    refused = installed_rbac.kubectl(*as_operator, "apply", "-f", "-", input=yaml.safe_dump(greedy), check=False)
    assert refused.returncode != 0 and "not currently held" in refused.stderr, refused.stderr


def test_topology_reporter_only_reads_and_annotates_nodes(installed_rbac):
    assert allowed(installed_rbac, "reporter", "get", "", "nodes")
    assert allowed(installed_rbac, "reporter", "patch", "", "nodes")
    for verb, resource in (("list", "nodes"), ("delete", "nodes"), ("get", "secrets"), ("list", "pods"), ("create", "pods")):
        assert not allowed(installed_rbac, "reporter", verb, "", resource), (verb, resource)
