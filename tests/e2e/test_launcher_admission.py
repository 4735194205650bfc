"""manifests/default/launcher-admission.yaml on the real API server. The launcher ClusterRole (exec into pods) is bound
by the operator; RBAC alone would let it bind that role in kube-system or to any account, and let a leader's token
exec into every pod of its namespace. Bindings are made as the operator's ServiceAccount (impersonation, after the
shipped RBAC); exec is made with a real bound token, as a multi-node leader pod holds it. kwok runs no containers, so
an exec the policy lets through still fails later: the tests tell the two apart by the policy's name in the error.
In the dev cluster's EXEC_NAMESPACE kwok runs the exec'd command as a process of this machine: there the leaders'
exec client, llmb-exec (launcher/main.go), runs end to end with the leader's token (which may read no pod).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time

import pytest
import yaml
from conftest import REPO_ROOT, exec_namespace, wait_for

from devcluster.build import ensure_llmb_exec
from devcluster.cluster import EXEC_NAMESPACE
from llmbackend.render.multinode import LAUNCHER_CLUSTER_ROLE, launcher_rbac
from llmbackend.render.names import BackendRef, launcher_account_name

POLICIES = REPO_ROOT / "manifests/default/launcher-admission.yaml"
AS_OPERATOR = ("--as", "system:serviceaccount:llmbackend-system:llmbackend-operator", "--as-group", "system:serviceaccounts")
BINDING_POLICY = "llmbackend-launcher-binding"
EXEC_POLICY = "llmbackend-launcher-exec"
UID = "uid"  # the launcher objects here have no owner; the account's tag is the hash of this uid
LLAMA = launcher_account_name(BackendRef("llama", "", UID))  # llama-launcher-<tag>, the account and its binding
GRP = launcher_account_name(BackendRef("grp", "", UID))


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
    objects = launcher_rbac(BackendRef(name, namespace, UID))
    for obj in objects:
        obj["metadata"].pop("ownerReferences")  # no such owner in this test
    return objects


def test_operator_binds_the_launcher_role_for_a_backend_in_a_tenant_namespace(policies, namespace):
    applied = apply_as_operator(policies, *backend_launcher(namespace))
    assert applied.returncode == 0, applied.stderr
    created = policies.kube.get("RoleBinding", namespace, LLAMA)
    assert created["subjects"] == [{"kind": "ServiceAccount", "name": LLAMA, "namespace": namespace}]


@pytest.mark.parametrize("system_namespace", ["kube-system", "kube-public"])
def test_operator_may_not_bind_the_launcher_role_in_system_namespaces(policies, system_namespace):
    account, role_binding = backend_launcher(system_namespace)
    refused = apply_as_operator(policies, role_binding)
    assert refused.returncode != 0
    assert BINDING_POLICY in refused.stderr and f"may not be bound in {system_namespace}" in refused.stderr
    assert policies.kube.get("RoleBinding", system_namespace, LLAMA) is None


@pytest.mark.parametrize("case", ["default-account", "user", "group", "other-namespace", "two-subjects",
                                  "account-named-like-the-backend", "binding-not-named-launcher",
                                  "the-form-before-the-tag", "a-tag-of-other-characters", "a-shorter-tag"])
def test_operator_may_not_bind_the_launcher_role_to_another_subject(policies, namespace, case):
    """Issue 42 (attack3): <backend>-launcher, the form before the uid tag, is one an admin may have bound to a CI
    account; the launcher role is bound to <backend>-launcher-<10 hex digits> only."""
    own = {"kind": "ServiceAccount", "name": LLAMA, "namespace": namespace}
    name, subjects = {
        "default-account": (LLAMA, [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]),
        "user": (LLAMA, [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]),
        "group": (LLAMA, [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                           "name": "system:authenticated"}]),
        "other-namespace": (LLAMA, [{**own, "namespace": "kube-system"}]),
        "two-subjects": (LLAMA, [own, {"kind": "ServiceAccount", "name": "default", "namespace": namespace}]),
        "account-named-like-the-backend": (LLAMA, [{**own, "name": "llama"}]),
        "binding-not-named-launcher": ("db", [{**own, "name": "db"}]),
        "the-form-before-the-tag": ("ci-launcher", [{**own, "name": "ci-launcher"}]),
        "a-tag-of-other-characters": ("ci-launcher-runner1234", [{**own, "name": "ci-launcher-runner1234"}]),
        "a-shorter-tag": ("ci-launcher-abc12", [{**own, "name": "ci-launcher-abc12"}]),
    }[case]
    refused = apply_as_operator(policies, binding(namespace, name, subjects))
    assert refused.returncode != 0
    assert BINDING_POLICY in refused.stderr and "may bind only the ServiceAccount of its own name" in refused.stderr


def test_an_existing_launcher_binding_cannot_be_widened(policies, namespace):
    assert apply_as_operator(policies, *backend_launcher(namespace)).returncode == 0
    widened = policies.kubectl("patch", *AS_OPERATOR, "rolebinding", LLAMA, "-n", namespace, "--type=json",
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
    for name, account in (("llama-0", LLAMA), ("llama-0-1", None), ("db-0", None), ("llama-1-1", None),
                          ("llama-0-0", None)):
        policies.kube.create(pod(namespace, name, account))
    leader_uid = policies.kube.get("Pod", namespace, "llama-0")["metadata"]["uid"]
    token = policies.kubectl("create", "token", LLAMA, "-n", namespace, "--bound-object-kind", "Pod",
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
    """exec as the leader does it (llmb-exec: the launcher role reads no pod, so `kubectl exec`, which GETs the pod
    first, is refused by RBAC before admission); attach with kubectl."""
    if verb == "exec":
        config = json.loads(kubeconfig.read_text())
        token = kubeconfig.with_suffix(".token")
        token.write_text(config["users"][0]["user"]["token"])
        args = [str(ensure_llmb_exec()), "--server", cluster.cluster.server, "--token-file", str(token),
                "--ca-file", config["clusters"][0]["cluster"]["certificate-authority"], "-n", namespace, "-c", "triton",
                target, "--", "true"]
    else:
        args = [cluster.kubectl_path, "--kubeconfig", str(kubeconfig), "-n", namespace, verb, target]
    return subprocess.run(args, env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
                          capture_output=True, text=True, timeout=60)


def test_leader_token_may_exec_into_its_own_worker(policies, namespace, leader_token):
    whoami = subprocess.run([policies.kubectl_path, "--kubeconfig", str(leader_token), "auth", "whoami", "-o", "json"],
                            capture_output=True, text=True, timeout=60, check=True)
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:{LLAMA}"
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
    """Issue 42: the token's pod must be <backend>-<group> for the account <backend>-launcher-<tag>. A pod of another
    backend (or any pod) running as llama's launcher account reaches not even the workers named after it."""
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend_launcher(namespace)))
    policies.kube.create(pod(namespace, leader, LLAMA))
    policies.kube.create(pod(namespace, f"{leader}-1"))
    uid = policies.kube.get("Pod", namespace, leader)["metadata"]["uid"]
    token = policies.kubectl("create", "token", LLAMA, "-n", namespace, "--bound-object-kind", "Pod",
                             "--bound-object-name", leader, "--bound-object-uid", uid).stdout.strip()
    refused = exec_with(policies, token_kubeconfig(policies, tmp_path, token, "other"), namespace, f"{leader}-1")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr
    assert f"{leader} is no leader (<backend>-<group>) of the backend whose launcher account this is" in refused.stderr


def test_leader_token_may_not_attach_to_other_pods(policies, namespace, leader_token):
    """The launcher role grants no attach; should an admin grant it, the policy still keeps attach to the workers."""
    # kubectl attach reads the pod first: the admin grants that too
    policies.kubectl("create", "role", "attach", "--verb=get,create", "--resource=pods/attach,pods", "-n", namespace)
    policies.kubectl("create", "rolebinding", "attach", "--role=attach",
                     f"--serviceaccount={namespace}:{LLAMA}", "-n", namespace)
    refused = exec_with(policies, leader_token, namespace, "db-0", verb="attach")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr


def test_launcher_token_bound_to_no_pod_may_exec_nowhere(policies, namespace, leader_token, tmp_path):
    token = policies.kubectl("create", "token", LLAMA, "-n", namespace).stdout.strip()
    refused = exec_with(policies, token_kubeconfig(policies, tmp_path, token, "unbound"), namespace, "llama-0-1")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr
    assert "its token names no pod" in refused.stderr


def test_other_accounts_are_not_limited(policies, namespace, tmp_path):
    """Only launcher accounts are: an account an admin allowed to exec keeps what RBAC gives it."""
    policies.kubectl("create", "serviceaccount", "debugger", "-n", namespace)
    policies.kubectl("create", "rolebinding", "debug-exec", "--clusterrole", "edit",
                     f"--serviceaccount={namespace}:debugger", "-n", namespace)
    policies.kube.create(pod(namespace, "db-0"))
    token = policies.kubectl("create", "token", "debugger", "-n", namespace).stdout.strip()
    result = exec_with(policies, token_kubeconfig(policies, tmp_path, token, "debugger"), namespace, "db-0")
    assert result.returncode != 0, "kwok runs no container"
    assert EXEC_POLICY not in result.stderr and "forbidden" not in result.stderr.lower(), result.stderr


def test_an_account_of_the_form_before_the_tag_is_still_held_to_its_own_workers(policies, namespace, tmp_path):
    """Launcher bindings made before the uid tag name `<backend>-launcher`; until the operator prunes them (binding
    first, docs/upgrade.md) such an account keeps exec, so the exec policy still holds it to its own leader's
    workers. (Such a binding can no longer be made: here an admin's Role gives the same right.)"""
    policies.kubectl("create", "serviceaccount", "old-launcher", "-n", namespace)
    policies.kubectl("create", "role", "old-exec", "--verb=get,create", "--resource=pods/exec", "-n", namespace)
    policies.kubectl("create", "rolebinding", "old-exec", "--role=old-exec", f"--serviceaccount={namespace}:old-launcher",
                     "-n", namespace)
    for name, account in (("old-0", "old-launcher"), ("old-0-1", None), ("db-0", None)):
        policies.kube.create(pod(namespace, name, account))
    uid = policies.kube.get("Pod", namespace, "old-0")["metadata"]["uid"]
    token = policies.kubectl("create", "token", "old-launcher", "-n", namespace, "--bound-object-kind", "Pod",
                             "--bound-object-name", "old-0", "--bound-object-uid", uid).stdout.strip()
    kubeconfig = token_kubeconfig(policies, tmp_path, token, "old")
    refused = exec_with(policies, kubeconfig, namespace, "db-0")
    assert refused.returncode != 0 and EXEC_POLICY in refused.stderr, refused.stderr
    allowed = exec_with(policies, kubeconfig, namespace, "old-0-1")
    assert allowed.returncode != 0, "kwok runs no container"
    assert EXEC_POLICY not in allowed.stderr and "forbidden" not in allowed.stderr.lower(), allowed.stderr


# ---- llmb-exec, the leaders' exec client, end to end (kwok runs the command on this machine) ----

@pytest.fixture(scope="module")
def exec_group(policies):
    """In EXEC_NAMESPACE: the launcher account and binding of backend `grp`, its group-0 leader `grp-0` (running as
    grp-launcher-<tag>), its worker `grp-0-1` and an unrelated pod `db`, all Running on a simulated node. Yields the
    llmb-exec binary and a token bound to the leader pod, as the leader container holds it."""
    with contextlib.ExitStack() as stack:
        exec_namespace(policies)  # shared with other modules: this one removes only what it made
        launcher = backend_launcher(EXEC_NAMESPACE, "grp")
        policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(launcher))
        for obj in launcher:
            stack.callback(policies.kube.delete, obj["kind"], EXEC_NAMESPACE, obj["metadata"]["name"])
        node = policies.kube.list("Node")[0]["metadata"]["name"]
        for name, account in (("grp-0", GRP), ("grp-0-1", None), ("db", None)):
            manifest = pod(EXEC_NAMESPACE, name, account)
            manifest["spec"]["containers"][0]["name"] = "triton"
            manifest["spec"]["nodeName"] = node
            manifest["spec"]["tolerations"] = [{"operator": "Exists"}]
            policies.kube.create(manifest)
            stack.callback(policies.kubectl, "delete", "pod", "-n", EXEC_NAMESPACE, name, "--grace-period=0",
                           "--force", "--wait=false", check=False)
        wait_for(lambda: all((policies.kube.get("Pod", EXEC_NAMESPACE, n) or {}).get("status", {}).get("phase")
                             == "Running" for n in ("grp-0", "grp-0-1", "db")), timeout=60, what="the pods to run")
        uid = policies.kube.get("Pod", EXEC_NAMESPACE, "grp-0")["metadata"]["uid"]
        token = policies.kubectl("create", "token", GRP, "-n", EXEC_NAMESPACE, "--bound-object-kind", "Pod",
                                 "--bound-object-name", "grp-0", "--bound-object-uid", uid).stdout.strip()
        yield ensure_llmb_exec(), token


def llmb_exec(cluster, exec_group, tmp_path, target: str, *command: str, container: str = "triton"):
    binary, token = exec_group
    (tmp_path / "token").write_text(token)
    argv = [str(binary), "--server", cluster.cluster.server, "--token-file", str(tmp_path / "token"),
            "--ca-file", str(cluster.cluster.directory / "pki" / "ca.crt"), "-n", EXEC_NAMESPACE, "-c", container,
            target, "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, env={"PATH": os.environ["PATH"]})


def test_llmb_exec_runs_a_command_in_its_own_worker_with_its_output_and_exit_code(policies, exec_group, tmp_path):
    result = llmb_exec(policies, exec_group, tmp_path, "grp-0-1", "/bin/sh", "-c",
                       "echo to-stdout; echo to-stderr >&2; head -c 300000 /dev/zero | tr '\\0' x; exit 7")
    assert result.stdout.startswith("to-stdout\n") and result.stdout.count("x") == 300000, result.stdout[:200]
    assert result.stderr.startswith("to-stderr\n"), result.stderr
    # A kubelet reports a failed command as a Status NonZeroExitCode, which llmb-exec turns into the command's code
    # (launcher/main_test.go); kwok v0.8.0 reports it as an internal error (its exec returns os/exec's error as is,
    # pkg/kwok/server/debugging_exec.go), so here the code is 255 and the reason names the command's status.
    assert result.returncode == 255 and "exit status 7" in result.stderr, result.stderr
    ok = llmb_exec(policies, exec_group, tmp_path, "grp-0-1", "true")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")


def test_the_leader_token_reads_no_pod_yet_its_exec_client_works(policies, exec_group, tmp_path):
    """Issue 42: `kubectl exec` GETs the pod first, so the launcher role granted `pods get` on the whole namespace to a
    token in the tenant's image. The role no longer does; llmb-exec needs no read."""
    binary, token = exec_group
    kubeconfig = token_kubeconfig(policies, tmp_path, token, "grp")
    for verb in (("get", "pod", "db"), ("get", "pod", "grp-0-1"), ("get", "pods"), ("exec", "grp-0-1", "--", "true")):
        read = subprocess.run([policies.kubectl_path, "--kubeconfig", str(kubeconfig), "-n", EXEC_NAMESPACE, *verb],
                              capture_output=True, text=True, timeout=60)
        assert read.returncode != 0 and "forbidden" in read.stderr.lower(), (verb, read.stderr)
        assert 'cannot get resource "pods"' in read.stderr or 'cannot list resource "pods"' in read.stderr, read.stderr
    assert llmb_exec(policies, exec_group, tmp_path, "grp-0-1", "true").returncode == 0


@pytest.mark.parametrize("target", ["db", "grp-0", "grp-1-1"])
def test_llmb_exec_is_refused_outside_its_group_with_the_policy_reason(policies, exec_group, tmp_path, target):
    refused = llmb_exec(policies, exec_group, tmp_path, target, "true")
    assert refused.returncode == 255, refused
    assert refused.stderr.startswith(f"llmb-exec: {EXEC_NAMESPACE}/{target}: ") and EXEC_POLICY in refused.stderr
    assert "may exec only into the workers of its own leader pod grp-0" in refused.stderr


def test_llmb_exec_says_why_a_worker_cannot_run_the_command(policies, exec_group, tmp_path):
    """What the leader's wait loop prints for a worker not there yet or another container: the API server's reason."""
    absent = llmb_exec(policies, exec_group, tmp_path, "grp-0-2", "true")
    assert absent.returncode == 255 and 'pods "grp-0-2" not found' in absent.stderr, absent.stderr
    other = llmb_exec(policies, exec_group, tmp_path, "grp-0-1", "true", container="sidecar")
    assert other.returncode == 255 and "serving container triton of its workers, not container sidecar" in other.stderr


def test_the_rendered_kubexec_script_starts_a_command_in_the_worker_as_mpirun_calls_it(policies, exec_group, tmp_path):
    """kubexec.sh (MPI's rsh agent) as the leader runs it: HOST is the worker's DNS name, the command one string."""
    from llmbackend.render.multinode import script_text

    script = tmp_path / "kubexec.sh"
    script.write_text(script_text("kubexec.sh"))
    binary, token = exec_group
    (tmp_path / "token").write_text(token)
    wrapper = tmp_path / "llmb-exec"  # in the pod: in-cluster address and token; here: flags
    wrapper.write_text(f"#!/bin/sh\nexec {binary} --server {policies.cluster.server} --token-file {tmp_path}/token "
                       f"--ca-file {policies.cluster.directory}/pki/ca.crt \"$@\"\n")
    wrapper.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "LLMB_EXEC": str(wrapper), "POD_NAMESPACE": EXEC_NAMESPACE,
           "LAUNCH_CONTAINER": "triton"}
    result = subprocess.run(["/bin/sh", str(script), f"grp-0-1.grp.{EXEC_NAMESPACE}", "echo", "orted", "started;",
                             "exit", "3"], capture_output=True, text=True, timeout=90, env=env)
    assert result.stdout == "orted started\n" and result.returncode != 0, result
    assert "exit status 3" in result.stderr, result.stderr  # kwok's way of saying 3 (see above)
