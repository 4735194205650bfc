"""manifests/default/launcher-admission.yaml on the real API server. The launcher ClusterRole (exec into pods) is bound
by the operator; RBAC alone would let it bind that role in kube-system or to any account, and let a leader's token
exec into every pod of its namespace. Bindings are made as the operator's ServiceAccount (impersonation, after the
shipped RBAC); exec is made with a real bound token, as a multi-node leader pod holds it. kwok runs no containers, so
an exec the policy lets through still fails later: the tests tell the two apart by the policy's name in the error.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import yaml
from conftest import REPO_ROOT

from llmbackend.render.multinode import LAUNCHER_CLUSTER_ROLE, launcher_rbac
from llmbackend.render.names import BackendRef

POLICIES = REPO_ROOT / "manifests/default/launcher-admission.yaml"
AS_OPERATOR = ("--as", "system:serviceaccount:llmbackend-system:llmbackend-operator", "--as-group", "system:serviceaccounts")
BINDING_POLICY = "llmbackend-launcher-binding"
EXEC_POLICY = "llmbackend-launcher-exec"


def binding(namespace: str, name: str, subjects: list[dict]) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LAUNCHER_CLUSTER_ROLE},
            "subjects": subjects}


def apply_as_operator(cluster, *objects: dict) -> subprocess.CompletedProcess:
    return cluster.kubectl("apply", *AS_OPERATOR, "-f", "-", input=yaml.safe_dump_all(objects), check=False)


@pytest.fixture(scope="module")
def policies(cluster):
    for path in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        cluster.kubectl("apply", "-f", str(REPO_ROOT / "manifests/default" / path))
    cluster.kubectl("apply", "-f", str(POLICIES))
    # The admission plugin learns of new policies asynchronously: wait until it refuses a binding in kube-system.
    probe = binding("kube-system", "probe-launcher", [{"kind": "ServiceAccount", "name": "probe-launcher",
                                                       "namespace": "kube-system"}])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        proc = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(probe), check=False)
        if proc.returncode != 0 and BINDING_POLICY in proc.stderr:
            break
        cluster.kubectl("delete", "rolebinding", "probe-launcher", "-n", "kube-system", "--wait=false", check=False)
        time.sleep(0.5)
    else:
        raise AssertionError("the launcher admission policies never took effect")
    yield cluster
    cluster.kubectl("delete", "-f", str(POLICIES), "--wait=false", check=False)


def backend_launcher(namespace: str, name: str = "llama") -> list[dict]:
    objects = launcher_rbac(BackendRef(name, namespace, "uid"))
    for obj in objects:
        obj["metadata"].pop("ownerReferences")  # no such owner in this test
    return objects


def test_operator_binds_the_launcher_role_for_a_backend_in_a_tenant_namespace(policies, namespace):
    applied = apply_as_operator(policies, *backend_launcher(namespace))
    assert applied.returncode == 0, applied.stderr
    created = policies.kube.get("RoleBinding", namespace, "llama-launcher")
    assert created["subjects"] == [{"kind": "ServiceAccount", "name": "llama-launcher", "namespace": namespace}]


@pytest.mark.parametrize("system_namespace", ["kube-system", "kube-public"])
def test_operator_may_not_bind_the_launcher_role_in_system_namespaces(policies, system_namespace):
    account, role_binding = backend_launcher(system_namespace)
    refused = apply_as_operator(policies, role_binding)
    assert refused.returncode != 0
    assert BINDING_POLICY in refused.stderr and f"may not be bound in {system_namespace}" in refused.stderr
    assert policies.kube.get("RoleBinding", system_namespace, "llama-launcher") is None


@pytest.mark.parametrize("case", ["default-account", "user", "group", "other-namespace", "two-subjects",
                                  "account-named-like-the-backend", "binding-not-named-launcher"])
def test_operator_may_not_bind_the_launcher_role_to_another_subject(policies, namespace, case):
    own = {"kind": "ServiceAccount", "name": "llama-launcher", "namespace": namespace}
    name, subjects = {
        "default-account": ("llama-launcher", [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]),
        "user": ("llama-launcher", [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]),
        "group": ("llama-launcher", [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                      "name": "system:authenticated"}]),
        "other-namespace": ("llama-launcher", [{**own, "namespace": "kube-system"}]),
        "two-subjects": ("llama-launcher", [own, {"kind": "ServiceAccount", "name": "default", "namespace": namespace}]),
        "account-named-like-the-backend": ("llama-launcher", [{**own, "name": "llama"}]),
        "binding-not-named-launcher": ("db", [{**own, "name": "db"}]),
    }[case]
    refused = apply_as_operator(policies, binding(namespace, name, subjects))
    assert refused.returncode != 0
    assert BINDING_POLICY in refused.stderr and "may bind only the ServiceAccount of its own name" in refused.stderr


def test_an_existing_launcher_binding_cannot_be_widened(policies, namespace):
    assert apply_as_operator(policies, *backend_launcher(namespace)).returncode == 0
    widened = policies.kubectl("patch", *AS_OPERATOR, "rolebinding", "llama-launcher", "-n", namespace, "--type=json",
                               "-p", json.dumps([{"op": "add", "path": "/subjects/-", "value": {
                                   "kind": "ServiceAccount", "name": "default", "namespace": namespace}}]), check=False)
    assert widened.returncode != 0 and BINDING_POLICY in widened.stderr


# ---- exec with a leader's bound token ----

def pod(namespace: str, name: str, service_account: str | None = None) -> dict:
    spec = {"containers": [{"name": "main", "image": "busybox"}], "automountServiceAccountToken": False}
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.fixture
def leader_token(policies, namespace, tmp_path):
    """A launcher account bound as the operator binds it, a leader `llama-0`, its worker `llama-0-1`, an unrelated
    `db-0`; returns a kubeconfig that carries only the token bound to the leader pod (no admin certificate)."""
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend_launcher(namespace)))
    for name, account in (("llama-0", "llama-launcher"), ("llama-0-1", None), ("db-0", None), ("llama-1-1", None),
                          ("llama-0-0", None)):
        policies.kube.create(pod(namespace, name, account))
    leader_uid = policies.kube.get("Pod", namespace, "llama-0")["metadata"]["uid"]
    token = policies.kubectl("create", "token", "llama-launcher", "-n", namespace, "--bound-object-kind", "Pod",
                             "--bound-object-name", "llama-0", "--bound-object-uid", leader_uid).stdout.strip()
    return token_kubeconfig(policies, tmp_path, token)


def token_kubeconfig(cluster, directory, token: str, name: str = "leader"):
    path = directory / f"{name}.kubeconfig"
    ca = str(cluster.cluster.directory / "pki" / "ca.crt")
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "token",
        "clusters": [{"name": "c", "cluster": {"server": cluster.cluster.server, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def exec_with(cluster, kubeconfig, namespace: str, target: str, verb: str = "exec") -> subprocess.CompletedProcess:
    args = [cluster.kubectl_path, "--kubeconfig", str(kubeconfig), "-n", namespace, verb, target]
    args += ["--", "true"] if verb == "exec" else []
    return subprocess.run(args, env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
                          capture_output=True, text=True, timeout=60)


def test_leader_token_may_exec_into_its_own_worker(policies, namespace, leader_token):
    whoami = subprocess.run([policies.kubectl_path, "--kubeconfig", str(leader_token), "auth", "whoami", "-o", "json"],
                            capture_output=True, text=True, timeout=60, check=True)
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:llama-launcher"
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["llama-0"]
    result = exec_with(policies, leader_token, namespace, "llama-0-1")
    # kwok runs no container: the exec fails after admission (no node or kubelet to connect to), never by the policy.
    assert result.returncode != 0, "kwok runs no container"
    assert EXEC_POLICY not in result.stderr and "forbidden" not in result.stderr.lower(), result.stderr


# llama-0-0: issue 42, the group-0 leader of a backend named llama-0 (a worker's index starts at 1).
@pytest.mark.parametrize("target", ["db-0", "llama-1-1", "llama-0", "llama-0-0"])
def test_leader_token_may_not_exec_into_other_pods(policies, namespace, leader_token, target):
    refused = exec_with(policies, leader_token, namespace, target)
    assert refused.returncode != 0
    assert EXEC_POLICY in refused.stderr, refused.stderr
    assert f"may exec only into the workers of its own leader pod llama-0 (llama-0-<index>, index from 1), not into " \
        f"{target}" in refused.stderr


@pytest.mark.parametrize("leader", ["other-0", "llama-x-0", "llama"])
def test_a_launcher_token_of_a_pod_that_is_no_leader_of_its_backend_may_exec_nowhere(policies, namespace, tmp_path,
                                                                                    leader):
    """Issue 42: the token's pod must be <backend>-<group> for the account <backend>-launcher. A pod of another
    backend (or any pod) running as llama-launcher reaches not even the workers named after it."""
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend_launcher(namespace)))
    policies.kube.create(pod(namespace, leader, "llama-launcher"))
    policies.kube.create(pod(namespace, f"{leader}-1"))
    uid = policies.kube.get("Pod", namespace, leader)["metadata"]["uid"]
    token = policies.kubectl("create", "token", "llama-launcher", "-n", namespace, "--bound-object-kind", "Pod",
                             "--bound-object-name", leader, "--bound-object-uid", uid).stdout.strip()
    refused = exec_with(policies, token_kubeconfig(policies, tmp_path, token, "other"), namespace, f"{leader}-1")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr
    assert f"{leader} is no leader (<backend>-<group>) of the backend whose launcher account this is" in refused.stderr


def test_leader_token_may_not_attach_to_other_pods(policies, namespace, leader_token):
    """The launcher role grants no attach; should an admin grant it, the policy still keeps attach to the workers."""
    policies.kubectl("create", "role", "attach", "--verb=get,create", "--resource=pods/attach", "-n", namespace)
    policies.kubectl("create", "rolebinding", "attach", "--role=attach",
                     f"--serviceaccount={namespace}:llama-launcher", "-n", namespace)
    refused = exec_with(policies, leader_token, namespace, "db-0", verb="attach")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr


def test_launcher_token_bound_to_no_pod_may_exec_nowhere(policies, namespace, leader_token, tmp_path):
    token = policies.kubectl("create", "token", "llama-launcher", "-n", namespace).stdout.strip()
    refused = exec_with(policies, token_kubeconfig(policies, tmp_path, token, "unbound"), namespace, "llama-0-1")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr
    assert "its token names no pod" in refused.stderr


def test_other_accounts_are_not_limited(policies, namespace, tmp_path):
    """Only *-launcher accounts are: an account an admin allowed to exec keeps what RBAC gives it."""
    policies.kubectl("create", "serviceaccount", "debugger", "-n", namespace)
    policies.kubectl("create", "rolebinding", "debug-exec", "--clusterrole", "edit",
                     f"--serviceaccount={namespace}:debugger", "-n", namespace)
    policies.kube.create(pod(namespace, "db-0"))
    token = policies.kubectl("create", "token", "debugger", "-n", namespace).stdout.strip()
    result = exec_with(policies, token_kubeconfig(policies, tmp_path, token, "debugger"), namespace, "db-0")
    assert result.returncode != 0, "kwok runs no container"
    assert EXEC_POLICY not in result.stderr and "forbidden" not in result.stderr.lower(), result.stderr
