"""Issue 42, fourth attacker pass (independent), on the real API server: the launcher admission policies
(manifests/default/launcher-admission.yaml) against raw exec requests, the launcher account's other ways into a pod,
and what a pod creator who may not exec can write (the precondition of the group-name guard finding in
tests/unit/test_refs_attack4.py).

Exec requests are made raw (POST .../pods/<pod>/exec without an upgrade): the API server runs CONNECT admission before
it looks for the upgrade, so a refusal names the policy and a request the policy lets through ends in
"Upgrade request required" (400). That lets a probe set or leave out the `container` parameter at will.

Convention: a probe that breaks a claim asserts the safe behaviour and is a strict expected failure whose reason starts
with FINDING and its severity; a broken precondition raises PreconditionError, which the xfail marks do not take.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml
from conftest import wait_for
from test_launcher_admission import BINDING_POLICY, EXEC_POLICY, LLAMA, POLICIES, backend_launcher, binding, pod


class PreconditionError(Exception):
    """The scene of a probe could not be set (never the expected failure)."""


def precondition(ok: object, what: str) -> None:
    if not ok:
        raise PreconditionError(what)


def _bound_token(cluster, namespace: str, account: str, pod_name: str) -> str:
    uid = cluster.kube.get("Pod", namespace, pod_name)["metadata"]["uid"]
    return cluster.kubectl("create", "token", account, "-n", namespace, "--bound-object-kind", "Pod",
                           "--bound-object-name", pod_name, "--bound-object-uid", uid).stdout.strip()


def _raw(cluster, token: str, method: str, path: str, query: list[tuple[str, str]]) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(cluster.cluster.directory / "pki" / "ca.crt"))
    url = cluster.cluster.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=30) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


@pytest.fixture(scope="module")
def policies(cluster):
    """The shipped launcher policies and RBAC, once the admission plugin enforces them (as test_launcher_admission)."""
    for path in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        cluster.kubectl("apply", "-f", str(POLICIES.parent / path))
    cluster.kubectl("apply", "-f", str(POLICIES))
    probe = binding("kube-system", "probe-launcher", [{"kind": "ServiceAccount", "name": "probe-launcher",
                                                       "namespace": "kube-system"}])

    def enforced() -> bool:
        proc = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(probe), check=False)
        cluster.kubectl("delete", "rolebinding", "probe-launcher", "-n", "kube-system", "--wait=false", check=False)
        return proc.returncode != 0 and BINDING_POLICY in proc.stderr

    wait_for(enforced, timeout=30, what="the launcher admission policies to take effect")
    yield cluster
    cluster.kubectl("delete", "-f", str(POLICIES), "--wait=false", check=False)


@pytest.fixture
def leader(policies, namespace):
    """llama's launcher account bound as the operator binds it, leader llama-0 and worker llama-0-1; the leader's token."""
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend_launcher(namespace)))
    for name, account in (("llama-0", LLAMA), ("llama-0-1", None)):
        policies.kube.create(pod(namespace, name, account))
    return _bound_token(policies, namespace, LLAMA, "llama-0")


def _exec(cluster, namespace: str, token: str, target: str, container: list[str] | None,
          sub: str = "exec") -> tuple[int, str]:
    query = [("command", "true"), ("stdout", "true")] if sub == "exec" else [("stdout", "true")]
    query += [("container", c) for c in container or []]
    return _raw(cluster, token, "POST", f"/api/v1/namespaces/{namespace}/pods/{target}/{sub}", query)


def _admitted(status: int, body: str) -> bool:
    return EXEC_POLICY not in body and status != 403


def test_the_policy_lets_the_leader_into_its_worker_s_serving_container(policies, namespace, leader):
    """HOLDS (and the probes' baseline): container triton of llama-0-1 passes admission (then 400: no upgrade)."""
    status, body = _exec(policies, namespace, leader, "llama-0-1", ["triton"])
    assert _admitted(status, body), (status, body)


@pytest.mark.parametrize("container", [None, [""], ["TRITON"], ["triton "], ["istio-proxy"], ["istio-proxy", "triton"]],
                         ids=["omitted", "empty", "upper-case", "trailing-space", "sidecar", "sidecar-then-triton"])
def test_the_leader_reaches_no_other_container_of_its_worker(policies, namespace, leader, container):
    """HOLDS: with no container (the pod's default), an empty one, a spelling of triton, a sidecar, or a sidecar
    given first with triton repeated after it (the API server decodes the first value: what admission sees is what
    the kubelet is asked for), the exec is refused by the policy."""
    status, body = _exec(policies, namespace, leader, "llama-0-1", container)
    assert status == 403 and EXEC_POLICY in body, (status, body)


def test_triton_given_first_and_a_sidecar_after_it_is_decided_on_the_first(policies, namespace, leader):
    """HOLDS (as far as admission shows): container=triton&container=istio-proxy passes as triton; the exec URL the
    API server builds for the kubelet comes from the same decoded options (kubernetes pkg/registry/core/pod/
    strategy.go ExecLocation, streamLocation), not from the raw query."""
    status, body = _exec(policies, namespace, leader, "llama-0-1", ["triton", "istio-proxy"])
    assert _admitted(status, body), (status, body)


@pytest.mark.parametrize("verb,resource,sub", [("patch", "pods", "ephemeralcontainers"),
                                               ("update", "pods", "ephemeralcontainers"),
                                               ("create", "pods", "portforward"), ("create", "pods", "attach"),
                                               ("get", "pods", "log"), ("get", "pods", ""), ("create", "pods", ""),
                                               ("get", "nodes", "proxy")])
def test_the_launcher_account_has_no_other_way_into_a_pod(policies, namespace, verb, resource, sub):
    """HOLDS: the policy checks exec and attach only; the launcher role grants none of ephemeral containers (a
    container of the leader's choosing in any pod), port-forward, attach, logs, reads or node proxy."""
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend_launcher(namespace)))
    # `kubectl auth can-i VERB pods/x` asks about a pod named x: a subresource is --subresource.
    args = ["auth", "can-i", verb, resource, *([f"--subresource={sub}"] if sub else []), "-n", namespace,
            "--as", f"system:serviceaccount:{namespace}:{LLAMA}", "--as-group", "system:serviceaccounts"]
    answer = policies.kubectl(*args, check=False)
    assert answer.stdout.strip() == "no", (verb, resource, sub, answer.stdout, answer.stderr)


def test_a_binding_of_the_form_before_the_tag_cannot_be_made_even_by_an_admin(policies, namespace):
    """HOLDS: a RoleBinding of the launcher role named <x>-launcher (the old form) to the account of its name is
    refused by the binding policy for anyone, the operator and a namespace admin alike."""
    old = backend_launcher(namespace)
    for obj in old:
        obj["metadata"]["name"] = "llama-launcher"
    binding = next(o for o in old if o["kind"] == "RoleBinding")
    binding["subjects"][0]["name"] = "llama-launcher"
    refused = policies.kubectl("create", "-f", "-", input=yaml.safe_dump(binding), check=False)
    assert refused.returncode != 0 and BINDING_POLICY in refused.stderr, refused.stderr


def test_a_forged_controller_reference_to_the_leaders_statefulset_does_not_last(policies, namespace):
    """Calibrates the unit finding (tests/unit/test_refs_attack4.py, forged controller reference). Someone who may
    create pods but not exec writes pod llama-1 running as llama's launcher account, with the leader StatefulSet's
    selector labels and a controller reference to its uid (read off llama-0): the API server takes it. Then the
    StatefulSet controller (kube-controller-manager runs here) counts it as its own pod of ordinal 1 while it has
    1 replica, so it is condemned and deleted (or, with other labels, released and orphaned, which the guard calls
    foreign): the forgery lasts only until the controller's next sync. HOLDS in that sense; the finding stands as a
    race (the impostor made again and again, there when a pass scales up)."""
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend_launcher(namespace)))
    user = "pod-author"
    docs = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": user, "namespace": namespace},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": user, "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}]
    policies.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    can_exec = policies.kubectl("auth", "can-i", "create", "pods", "--subresource=exec", "-n", namespace, "--as", user,
                                check=False)
    precondition(can_exec.stdout.strip() == "no", f"the pod author may not exec: {can_exec.stdout!r}")
    labels = {"leaderworkerset.sigs.k8s.io/name": "llama", "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    leaders = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "llama", "namespace": namespace},
               "spec": {"replicas": 1, "serviceName": "llama", "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels}, "spec": {
                            "containers": [{"name": "triton", "image": "busybox"}]}}}}
    policies.kube.create(leaders)
    sts_uid = policies.kube.get("StatefulSet", namespace, "llama")["metadata"]["uid"]
    forged = pod(namespace, "llama-1", LLAMA)
    forged["metadata"]["labels"] = dict(labels)
    forged["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "llama",
                                              "uid": sts_uid, "controller": True}]
    made = policies.kubectl("create", "--as", user, "-f", "-", input=yaml.safe_dump(forged), check=False)
    assert made.returncode == 0, f"the API server refused the forged reference: {made.stderr}"

    def gone_or_not_ours() -> bool:
        live = policies.kube.get("Pod", namespace, "llama-1")
        return live is None or bool(live["metadata"].get("deletionTimestamp")) or not any(
            r.get("uid") == sts_uid and r.get("controller") for r in live["metadata"].get("ownerReferences") or [])

    wait_for(gone_or_not_ours, timeout=30, what="the StatefulSet controller to condemn or release the forged pod")
