"""Independent attack on the multi-node launcher path (issue 42, attack 42b), on the real API server.

Seat: a tenant who may only create/update/patch/delete LLMBackends in one namespace. For a multi-node
TensorRT-LLM backend `<b>` the operator runs the tenant's image (spec.engine.image) in each group's leader pod
`<b>-<group>` with the ServiceAccount `<b>-launcher-<tag>` token mounted, bound by a RoleBinding of that name to the
ClusterRole `llmbackend-launcher` (pods/exec get+create). So the tenant holds that token: whatever it can do, the
tenant can do. The claim under attack (docs/security.md "Other pods: exec from a multi-node leader",
docs/security-rbac.md "Admission policies for the launcher role"): the token reads nothing and execs only into
`<its leader pod>-<index>`, which can only be a worker of the tenant's own group.

Method: manifests/default/rbac.yaml and launcher-admission.yaml applied as an install does; the objects the
operator would make for a backend `<b>` (launcher.launcher_rbac's ServiceAccount and RoleBinding, and the leader
pod `<b>-<group>` that LeaderWorkerSet names) made as the admin; the tenant's token is the kubelet's kind, a
token bound to the leader pod (`kubectl create token --bound-object-kind Pod`), used from a kubeconfig that holds
only it. Exec runs end to end with the real `llmb-exec` in the namespace kwok-exec, where kwok (the nodes'
kubelet) runs an exec'd command as a local process, so an exec that passes RBAC and admission really runs. One probe
(test_a_tenant_backend_named_after_another_team_s_statefulset_does_not_reach_its_pods) simulates nothing but the
kubelet's token mount: the tenant, impersonated with LLMBackend rights only, applies the multi-node sample and the
real operator and LeaderWorkerSet controller make the leader.

Written from the docs and the code only (launcher/main.go, render/multinode.py, the two manifests), before
reading the project's own tests of this path. Probes that hold assert the claim; probes that break it assert the
safe behaviour and are strict expected failures whose reason starts with FINDING.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    BACKEND_EDITOR_RULES,
    ClusterHandle,
    apply_as_once_admitted,
    condition,
    exec_namespace,
    grant,
    wait_for,
)

from devcluster.build import ensure_llmb_exec
from devcluster.cluster import EXEC_NAMESPACE
from llmbackend.render.multinode import launcher_rbac
from llmbackend.render.names import BackendRef, launcher_account_name

REPO = Path(__file__).resolve().parents[2]
NODE = "dgx-h100-0"
POLICY_WORDS = "may exec only into the workers of its own leader pod"


def _pod(name: str, account: str = "default", containers: tuple[str, ...] = ("triton",),
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": EXEC_NAMESPACE, "labels": labels or {"attack": "42b"}},
            "spec": {"nodeName": NODE, "serviceAccountName": account, "automountServiceAccountToken": False,
                     "containers": [{"name": c, "image": "tenant/engine:1"} for c in containers]}}


def _running(cluster: ClusterHandle, name: str) -> dict[str, Any]:
    def phase() -> dict[str, Any] | None:
        pod = cluster.kube.get("Pod", EXEC_NAMESPACE, name)
        return pod if pod and pod.get("status", {}).get("phase") == "Running" else None
    return wait_for(phase, timeout=60, what=f"pod {name} running on kwok")


def _make_pod(cluster: ClusterHandle, manifest: dict[str, Any]) -> dict[str, Any]:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    return _running(cluster, manifest["metadata"]["name"])


def _delete_pod(cluster: ClusterHandle, name: str) -> None:
    cluster.kubectl("delete", "pod", "-n", EXEC_NAMESPACE, name, "--grace-period=0", "--force", "--wait=true",
                    "--timeout=60s", check=False)


@dataclass
class Tenant:
    """What the tenant holds: the token of its leader pod `<backend>-<group>`, and tools that use it alone."""

    cluster: ClusterHandle
    backend: str
    leader: str
    token_file: Path
    kubeconfig: Path
    llmb_exec: Path
    account: str  # the launcher account the token is of: <backend>-launcher-<tag> (render/names.py)

    @property
    def ca_file(self) -> str:
        return str(self.cluster.cluster.directory / "pki" / "ca.crt")

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.cluster.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)

    def exec(self, pod: str, *command: str, namespace: str = EXEC_NAMESPACE,
             container: str = "triton") -> subprocess.CompletedProcess:
        argv = [str(self.llmb_exec), "--server", self.cluster.cluster.server, "--token-file", str(self.token_file),
                "--ca-file", self.ca_file, "-n", namespace, "-c", container, pod, "--", *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=90)

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> int:
        """The HTTP status of one request with the token (no upgrade: authorization answers first)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        req = urllib.request.Request(self.cluster.cluster.server + path, data=body, method=method, headers={
            "Authorization": f"Bearer {self.token_file.read_text().strip()}", "Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, context=context, timeout=30) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code


def _mint(cluster: ClusterHandle, account: str, pod: dict[str, Any], directory: Path) -> Path:
    """A token of `account` bound to `pod`: what the kubelet mounts in the leader (its extra names the pod)."""
    token = cluster.kubectl("create", "token", account, "-n", EXEC_NAMESPACE, "--duration", "1h",
                            "--bound-object-kind", "Pod", "--bound-object-name", pod["metadata"]["name"],
                            "--bound-object-uid", pod["metadata"]["uid"]).stdout.strip()
    path = directory / f"token-{uuid.uuid4().hex[:6]}"
    path.write_text(token)
    return path


def _token_kubeconfig(cluster: ClusterHandle, token_file: Path, directory: Path) -> Path:
    """Only the token: the admin's client certificate would be authenticated first."""
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": "c", "cluster": {"server": cluster.cluster.server,
                                                     "certificate-authority": str(cluster.cluster.directory / "pki" / "ca.crt")}}],
              "users": [{"name": "leader", "user": {"tokenFile": str(token_file)}}],
              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "leader", "namespace": EXEC_NAMESPACE}}],
              "current-context": "c"}
    path = directory / f"kubeconfig-{uuid.uuid4().hex[:6]}"
    path.write_text(json.dumps(config))
    return path


def _letters(n: int = 6) -> str:
    return "".join(chr(ord("a") + int(c, 16) % 26) for c in uuid.uuid4().hex[:n])


@pytest.fixture(scope="module")
def installed(cluster: ClusterHandle) -> Iterator[ClusterHandle]:
    """The exec namespace, the shipped RBAC (launcher ClusterRole) and both launcher admission policies."""
    if cluster.kube.get("Namespace", None, "llmbackend-system") is None:
        cluster.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llmbackend-system"}})
    exec_namespace(cluster)
    for manifest in ("rbac.yaml", "launcher-admission.yaml"):
        cluster.kubectl("apply", "-f", str(REPO / "manifests" / "default" / manifest))
    yield cluster


def _tenant(cluster: ClusterHandle, backend: str, group: int, directory: Path) -> Tenant:
    """As the operator would for backend `backend`: its launcher account and binding, and the leader pod of one group."""
    ref = BackendRef(name=backend, namespace=EXEC_NAMESPACE, uid=str(uuid.uuid4()))
    account = launcher_account_name(ref)
    for obj in launcher_rbac(ref):
        obj["metadata"].pop("ownerReferences", None)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    leader = _make_pod(cluster, _pod(f"{backend}-{group}", account=account,
                                     labels={"llmbackend.dev/backend": backend}))
    token = _mint(cluster, account, leader, directory)
    return Tenant(cluster, backend, leader["metadata"]["name"], token,
                  _token_kubeconfig(cluster, token, directory), ensure_llmb_exec(), account)


@pytest.fixture(scope="module")
def tenant(installed: ClusterHandle, tmp_path_factory) -> Iterator[Tenant]:
    """Backend `<b>` group 0: leader `<b>-0` holding the token, its worker `<b>-0-1`, and the admission policy
    already enforcing (an exec outside the group is refused by it)."""
    backend = f"atk{_letters()}"
    t = _tenant(installed, backend, 0, tmp_path_factory.mktemp("tenant"))
    _make_pod(installed, _pod(f"{backend}-0-1", labels={"llmbackend.dev/backend": backend}))
    # ValidatingAdmissionPolicies compile asynchronously: wait until the exec policy answers.
    wait_for(lambda: POLICY_WORDS in t.exec(f"{backend}-0", "true").stderr, timeout=60,
             what="the launcher exec policy to enforce")
    yield t
    installed.kubectl("delete", "pod,serviceaccount,rolebinding", "-n", EXEC_NAMESPACE, "-l",
                      f"llmbackend.dev/backend={backend}", "--wait=false", check=False)
    for name in (f"{backend}-0", f"{backend}-0-1"):
        _delete_pod(installed, name)


# ---------- the baseline the refusals are measured against ----------


def test_baseline_the_leader_token_execs_into_its_own_worker(tenant: Tenant):
    """Tries: the intended path, so that every refusal below is a refusal and not a broken setup. The leader's token
    runs `echo` in its own worker `<b>-0-1` through the real API server and kwok."""
    marker = f"own-{uuid.uuid4().hex[:8]}"
    result = tenant.exec(f"{tenant.backend}-0-1", "echo", marker)
    assert result.returncode == 0, result.stderr
    assert marker in result.stdout


# ---------- reading ----------


READ_ATTEMPTS = [
    ("get", "pods"),
    ("get", "pods", "-A"),
    ("get", "pod", "{leader}", "-o", "yaml"),
    ("get", "pod", "{worker}"),
    ("get", "--raw", "/api/v1/namespaces/{ns}/pods/{leader}/status"),
    ("get", "--raw", "/api/v1/namespaces/{ns}/pods/{worker}/log"),
    ("get", "--raw", "/api/v1/namespaces/{ns}/pods?watch=1&timeoutSeconds=1"),
    ("get", "events"),
    ("get", "endpoints"),
    ("get", "endpointslices.discovery.k8s.io"),
    ("get", "services"),
    ("get", "configmaps"),
    ("get", "secrets"),
    ("get", "serviceaccounts"),
    ("get", "rolebindings"),
    ("get", "leases.coordination.k8s.io"),
    ("get", "--raw", "/api/v1/namespaces/{ns}/serviceaccounts/{account}"),
    ("create", "token", "default"),
    ("create", "token", "{account}"),
]


@pytest.mark.parametrize("attempt", READ_ATTEMPTS, ids=lambda a: " ".join(a))
def test_the_leader_token_reads_nothing(tenant: Tenant, attempt: tuple[str, ...]):
    """Tries: every read a tenant would want from the token (pods and their status and logs, a watch, events,
    endpoints, config, secrets, its own account, minting another token); each must be Forbidden."""
    args = [a.format(leader=tenant.leader, worker=f"{tenant.backend}-0-1", ns=EXEC_NAMESPACE,
                     backend=tenant.backend, account=tenant.account) for a in attempt]
    result = tenant.kubectl(*args)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (args, result.stdout, result.stderr)


def test_the_token_s_own_rules_are_exec_only(tenant: Tenant):
    """Tries: SelfSubjectRulesReview (`auth can-i --list`, which every account may ask) for any right beyond
    pods/exec and the self-reviews every authenticated user has; and a SubjectAccessReview/TokenReview, which would
    let it probe others' rights or validate stolen tokens."""
    listing = tenant.kubectl("auth", "can-i", "--list", "-n", EXEC_NAMESPACE)
    assert listing.returncode == 0, listing.stderr
    rows = [line.split() for line in listing.stdout.splitlines()[1:] if line.strip()]
    granted = {row[0] for row in rows}
    allowed = {"pods/exec", "selfsubjectreviews.authentication.k8s.io", "selfsubjectaccessreviews.authorization.k8s.io",
               "selfsubjectrulesreviews.authorization.k8s.io"}
    # Non-resource URLs (discovery, /version, /healthz) are listed with an empty resource column.
    extra = {g for g in granted if not g.startswith("[") and g not in allowed}
    assert not extra, listing.stdout
    for path, kind in (("/apis/authorization.k8s.io/v1/subjectaccessreviews", "SubjectAccessReview"),
                       ("/apis/authentication.k8s.io/v1/tokenreviews", "TokenReview")):
        body = json.dumps({"apiVersion": path.split("/")[2] + "/v1", "kind": kind, "spec": {
            "resourceAttributes": {"verb": "get", "resource": "secrets"}, "user": "x"} if kind == "SubjectAccessReview"
            else {"token": "x"}}).encode()
        assert tenant.request("POST", path, body) == 403, kind


# ---------- other subresources of its own worker ----------


@pytest.mark.parametrize("method,subresource,content_type", [
    ("POST", "attach?stdout=true&container=triton", "application/json"),
    ("GET", "attach?stdout=true&container=triton", "application/json"),
    ("POST", "portforward?ports=8000", "application/json"),
    ("GET", "portforward?ports=8000", "application/json"),
    ("GET", "proxy/", "application/json"),
    ("GET", "proxy/metrics", "application/json"),
    ("PATCH", "ephemeralcontainers", "application/strategic-merge-patch+json"),
    ("PATCH", "status", "application/strategic-merge-patch+json"),
    ("GET", "log?container=triton", "application/json"),
    ("POST", "eviction", "application/json"),
    ("PATCH", "", "application/strategic-merge-patch+json"),
    ("DELETE", "", "application/json"),
])
def test_no_other_subresource_of_its_own_worker(tenant: Tenant, method: str, subresource: str, content_type: str):
    """Tries: the subresources next to exec on the one pod the token may exec into (attach, port-forward, the pod
    proxy, ephemeral containers, status, logs, eviction, patch, delete); RBAC must refuse each (403) before any
    handler runs."""
    path = f"/api/v1/namespaces/{EXEC_NAMESPACE}/pods/{tenant.backend}-0-1" + (f"/{subresource}" if subresource else "")
    body = b"{}" if method in ("POST", "PATCH") else None
    assert tenant.request(method, path, body, content_type) == 403, (method, path)


# ---------- exec outside its group ----------


@pytest.fixture(scope="module")
def bystanders(tenant: Tenant) -> Iterator[dict[str, str]]:
    """Pods that exist, so that a refusal is the policy's and not 'not found': the namespace's own `db-0`, the
    group's leader itself, a worker of the same backend's group 1, a pod named like its group-0 worker with index 0
    or a zero-padded index, and a worker of a backend whose name extends the tenant's."""
    b = tenant.backend
    names = {"another workload": "db-0", "the leader itself": f"{b}-0", "another group": f"{b}-1-1",
             "index 0": f"{b}-0-0", "zero-padded index": f"{b}-0-01", "index with letters": f"{b}-0-1a",
             "a longer backend name": f"{b}x-0-1"}
    made = [n for n in names.values() if n != f"{b}-0"]
    for name in made:
        _make_pod(tenant.cluster, _pod(name, labels={"attack": "42b-bystander"}))
    yield names
    for name in made:
        _delete_pod(tenant.cluster, name)


@pytest.mark.parametrize("which", ["another workload", "the leader itself", "another group", "index 0",
                                   "zero-padded index", "index with letters", "a longer backend name"])
def test_exec_is_refused_outside_its_group(tenant: Tenant, bystanders: dict[str, str], which: str):
    """Tries: exec with the leader's token into each running pod that is not `<leader>-<index>` (index from 1)."""
    marker = f"escaped-{uuid.uuid4().hex[:8]}"
    result = tenant.exec(bystanders[which], "echo", marker)
    assert result.returncode == 255 and marker not in result.stdout, (result.stdout, result.stderr)
    assert POLICY_WORDS in result.stderr, result.stderr


def test_exec_into_another_namespace_is_refused(tenant: Tenant, installed: ClusterHandle):
    """Tries: `-n` another namespace, with a pod there named exactly like its own worker (`<b>-0-1`): the binding is
    per namespace, so RBAC must refuse it."""
    other = f"atk-other-{_letters(4)}"
    installed.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        result = tenant.exec(f"{tenant.backend}-0-1", "echo", "x", namespace=other)
        assert result.returncode == 255 and "forbidden" in result.stderr.lower(), result.stderr
    finally:
        installed.kube.delete("Namespace", None, other)


def test_refusals_outside_the_group_do_not_tell_which_pods_exist(tenant: Tenant, bystanders: dict[str, str]):
    """Tries: exec as an existence oracle, the one read left: is the answer for an existing pod outside the group
    (`db-0`) different from a name no pod has? The policy answers before the pod is looked up, so both must read
    the same apart from the name."""
    there = tenant.exec("db-0", "true").stderr.replace("db-0", "NAME")
    absent = tenant.exec("nopod-0", "true").stderr.replace("nopod-0", "NAME")
    assert there == absent


@pytest.fixture
def worker_with_sidecar(tenant: Tenant) -> Iterator[str]:
    """Precondition: a namespace-wide mutating webhook (Istio's injection label on the namespace, Linkerd) adds a
    sidecar to every pod, so the tenant's worker `<b>-0-2` has `triton` and `istio-proxy`. The sidecar holds what
    the serving container does not mount (Istio: the projected istio-token and the workload's certificate)."""
    name = f"{tenant.backend}-0-2"
    _make_pod(tenant.cluster, _pod(name, containers=("triton", "istio-proxy"),
                                   labels={"llmbackend.dev/backend": tenant.backend}))
    yield name
    _delete_pod(tenant.cluster, name)


# Fixed (was a strict xfail): FINDING (low): the exec policy checked the pod's name only, not the container: the
# token reached any container of its workers (a sidecar a webhook injected). It allows the serving container only.
def test_exec_reaches_only_the_serving_container_of_its_worker(tenant: Tenant, worker_with_sidecar: str):
    """Tries: exec with `-c istio-proxy` into its own worker. Safe: refused; the launcher uses `triton` only."""
    assert tenant.exec(worker_with_sidecar, "true").returncode == 0, "the serving container is reachable"
    marker = f"sidecar-{uuid.uuid4().hex[:8]}"
    result = tenant.exec(worker_with_sidecar, "echo", marker, container="istio-proxy")
    assert marker not in result.stdout and result.returncode == 255, (result.stdout, result.stderr)


# ---------- a pod of someone else, named like one of its workers (end to end: the operator and the real LWS) ----------


SAMPLE = REPO / "manifests" / "samples" / "llama-3.1-405b-multinode.yaml"
TENANT_USER = "tenant-42b"


@dataclass
class Victim:
    """Another team's StatefulSet `<v>-<group>` (2 pods, its own account, no llmbackend label) and the tenant's
    LLMBackend `<v>` (the multi-node sample), applied by the tenant bound only to LLMBackends."""

    name: str
    group: int

    @property
    def statefulset(self) -> str:
        return f"{self.name}-{self.group}"


@pytest.fixture
def backend_named_after_a_statefulset(installed: ClusterHandle, operator, lws, request) -> Iterator[Victim]:
    """Precondition: the admin runs another team's StatefulSet `<v>-<group>` in the namespace (pods
    `<v>-<group>-0`, `<v>-<group>-1`). The tenant, who cannot read or exec into them, applies the multi-node sample
    named `<v>` (the CRD accepts it: it does not end in -<digits>) with `group + 1` replicas, so that
    LeaderWorkerSet would name its last group's leader `<v>-<group>` and give it the `<v>-launcher` token.
    `request.param`: the group (0: LWS would take the StatefulSet as that group's workers; 2: its pods are named
    like group 2's workers)."""

    cluster = installed
    victim = Victim(f"ledger{_letters(4)}", request.param)
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": victim.statefulset, "namespace": EXEC_NAMESPACE},
           "spec": {"replicas": 2, "serviceName": victim.statefulset,
                    "selector": {"matchLabels": {"team": victim.name}},
                    "template": {"metadata": {"labels": {"team": victim.name}},
                                 "spec": {"nodeName": NODE, "automountServiceAccountToken": False,
                                          "containers": [{"name": "triton", "image": "payroll/db:1"}]}}}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(sts))
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"] = {"name": victim.name, "namespace": EXEC_NAMESPACE}
    manifest["spec"]["replicas"] = victim.group + 1
    # A claim of its own: the other case's claim may still be terminating (a pod held it), and a claim of the same
    # name cannot be bound to another volume.
    claim = f"models-{victim.name}"
    manifest["spec"]["model"]["source"]["pvc"]["claimName"] = claim
    pv = f"atk42b-{victim.name}"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
         "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany"], "hostPath": {"path": "/nonexistent"},
                  "claimRef": {"namespace": EXEC_NAMESPACE, "name": claim}, "persistentVolumeReclaimPolicy": "Retain"}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": EXEC_NAMESPACE},
         "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Ti"}}, "storageClassName": "",
                  "volumeName": pv}}]))
    grant(cluster, TENANT_USER, EXEC_NAMESPACE, "atk42b-backend-editor", BACKEND_EDITOR_RULES)
    try:
        _running(cluster, f"{victim.statefulset}-1")
        assert cluster.kubectl("auth", "can-i", "create", "pods/exec", "-n", EXEC_NAMESPACE, "--as", TENANT_USER,
                               check=False).stdout.strip() == "no"
        apply_as_once_admitted(cluster, TENANT_USER, manifest)
        yield victim
    finally:
        cluster.kubectl("delete", "llmbackend", "-n", EXEC_NAMESPACE, victim.name, "--wait=false", check=False)
        cluster.kubectl("delete", "statefulset", "-n", EXEC_NAMESPACE, victim.statefulset, "--wait=false", check=False)
        cluster.kubectl("delete", "pvc", "-n", EXEC_NAMESPACE, claim, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)
        cluster.kubectl("delete", "rolebinding,role", "-n", EXEC_NAMESPACE, "atk42b-backend-editor", "--wait=false",
                        check=False)


def _group_name_taken(cluster: ClusterHandle, victim: Victim) -> dict[str, Any]:
    """The backend once it says Degraded=GroupNameTaken, naming the other team's StatefulSet."""

    def said() -> dict[str, Any] | None:
        obj = cluster.kube.get("LLMBackend", EXEC_NAMESPACE, victim.name)
        degraded = condition(obj, "Degraded") or {}
        return obj if degraded.get("reason") == "GroupNameTaken" else None
    obj = wait_for(said, timeout=120, what=f"{victim.name} Degraded=GroupNameTaken")
    message = (condition(obj, "Degraded") or {}).get("message", "")
    assert f"StatefulSet {victim.statefulset}" in message and "another name" in message, message
    assert EXEC_NAMESPACE not in message, "no namespace named (it is the backend's own)"
    return obj


def _theirs_untouched(cluster: ClusterHandle, victim: Victim) -> None:
    theirs = json.loads(cluster.kubectl("get", "statefulset", "-n", EXEC_NAMESPACE, victim.statefulset,
                                        "-o", "json").stdout)
    assert not theirs["metadata"].get("ownerReferences") and theirs["spec"]["replicas"] == 2


# Fixed (was a strict xfail): FINDING (medium): the exec policy trusts names, and only LLMBackend names are kept
# apart. A pod of anyone else named <x>-<digits>-<digits from 1> was reached by the tenant who creates an LLMBackend
# <x> with more replicas than the middle number: its leader <x>-<group> execs into it. The operator now reads the
# names of every group it adds (groupnames.taken_group) and keeps the LeaderWorkerSet below the first taken one.
@pytest.mark.parametrize("backend_named_after_a_statefulset", [2], indirect=True)
def test_a_pod_of_another_owner_named_like_a_worker_is_not_reached(installed: ClusterHandle,
                                                                   backend_named_after_a_statefulset: Victim,
                                                                   tmp_path_factory):
    """Tries: another team's StatefulSet `<v>-2` runs pods `<v>-2-0` and `<v>-2-1`; the tenant's backend `<v>` asks
    for 3 groups, so LWS would name group 2's leader `<v>-2`, whose token the exec policy lets into `<v>-2-1`.
    Safe: the LeaderWorkerSet keeps 2 groups, the backend says Degraded=GroupNameTaken naming that StatefulSet,
    no leader `<v>-2` is ever made, and the token of a leader that is made (`<v>-1`) is refused into `<v>-2-1`."""
    cluster, victim = installed, backend_named_after_a_statefulset
    _group_name_taken(cluster, victim)
    # the status is written before the children it creates
    lws = wait_for(lambda: cluster.kube.get("LeaderWorkerSet", EXEC_NAMESPACE, victim.name), timeout=60,
                   what=f"LeaderWorkerSet {victim.name}")
    assert lws["spec"]["replicas"] == 2, lws["spec"]

    # made, scheduled or not (the token is bound to the pod object)
    pod = wait_for(lambda: cluster.kube.get("Pod", EXEC_NAMESPACE, f"{victim.name}-1"), timeout=180,
                   what=f"the operator's and LWS's leader {victim.name}-1")
    uid = cluster.kube.get("LLMBackend", EXEC_NAMESPACE, victim.name)["metadata"]["uid"]
    account = launcher_account_name(BackendRef(victim.name, EXEC_NAMESPACE, uid))
    assert pod["spec"]["serviceAccountName"] == account
    assert cluster.kube.get("Pod", EXEC_NAMESPACE, f"{victim.name}-2") is None, "no leader of group 2"
    _theirs_untouched(cluster, victim)
    directory = tmp_path_factory.mktemp("victim")
    token = _mint(cluster, account, pod, directory)
    tenant = Tenant(cluster, victim.name, pod["metadata"]["name"], token, _token_kubeconfig(cluster, token, directory),
                    ensure_llmb_exec(), account)
    wait_for(lambda: POLICY_WORDS in tenant.exec(f"{victim.name}-2-1", "true").stderr, timeout=60,
             what="the launcher exec policy to enforce")
    marker = f"payroll-{uuid.uuid4().hex[:8]}"
    result = tenant.exec(f"{victim.statefulset}-1", "echo", marker)
    assert marker not in result.stdout and result.returncode == 255, (result.stdout, result.stderr)


# ---------- the token's lifetime ----------


def test_the_token_dies_with_its_leader_pod(installed: ClusterHandle, tmp_path_factory):
    """Tries: keep the leader's token after the group is recreated (the pod deleted and made again under the same
    name, a new uid, as LWS's RecreateGroupOnPodRestart does, or after the backend is deleted and recreated) and
    use it against the new group's worker. The bound token names the old pod's uid, so the API server must reject it."""
    backend = f"atk{_letters()}"
    tenant = _tenant(installed, backend, 0, tmp_path_factory.mktemp("old"))
    worker = f"{backend}-0-1"
    _make_pod(installed, _pod(worker))
    try:
        wait_for(lambda: tenant.exec(worker, "true").returncode == 0, timeout=60, what="the token to exec at first")
        _delete_pod(installed, tenant.leader)
        wait_for(lambda: installed.kube.get("Pod", EXEC_NAMESPACE, tenant.leader) is None, timeout=60,
                 what="the old leader gone")
        _make_pod(installed, _pod(tenant.leader, account=tenant.account))
        deadline = time.monotonic() + 30
        result = tenant.exec(worker, "echo", "stale")
        while result.returncode == 0 and time.monotonic() < deadline:  # the authenticator caches a token for 10 s
            time.sleep(2)
            result = tenant.exec(worker, "echo", "stale")
        assert result.returncode == 255 and "stale" not in result.stdout, (result.stdout, result.stderr)
        assert "unauthorized" in result.stderr.lower(), result.stderr
    finally:
        installed.kubectl("delete", "serviceaccount,rolebinding", "-n", EXEC_NAMESPACE, tenant.account,
                          "--wait=false", check=False)
        for name in (tenant.leader, worker):
            _delete_pod(installed, name)


# Fixed (was a strict xfail): FINDING (medium): end to end, a tenant with LLMBackend rights alone named its backend
# after another team's StatefulSet <v>-0; the operator and LeaderWorkerSet created the leader <v>-0 with the
# <v>-launcher token (LWS found the StatefulSet <v>-0 and left it), and that token exec'd into the other team's pod
# <v>-0-1. The operator now finds group 0's name taken and creates no LeaderWorkerSet at all.
@pytest.mark.parametrize("backend_named_after_a_statefulset", [0], indirect=True)
def test_a_tenant_backend_named_after_another_team_s_statefulset_does_not_reach_its_pods(
        installed: ClusterHandle, backend_named_after_a_statefulset: Victim):
    """Tries: the finding with nothing simulated: the admin runs another team's StatefulSet `<v>-0` (2 pods, its own
    account, no llmbackend label); the tenant, bound only to LLMBackends, applies the multi-node sample named `<v>`;
    the real LWS controller would make the leader pod `<v>-0`, with the `<v>-launcher` token, next to workers that
    are the other team's pods. Safe: Degraded=GroupNameTaken naming that StatefulSet, no LeaderWorkerSet and no pod
    `<v>-0` for as long as it is there, and the other team's StatefulSet unchanged."""
    cluster, victim = installed, backend_named_after_a_statefulset
    obj = _group_name_taken(cluster, victim)
    assert (condition(obj, "Available") or {}).get("status") == "False"
    time.sleep(5)  # LWS and the StatefulSet controller would have made the leader by now
    assert cluster.kube.get("LeaderWorkerSet", EXEC_NAMESPACE, victim.name) is None
    assert cluster.kube.get("Pod", EXEC_NAMESPACE, f"{victim.name}-0") is None
    _theirs_untouched(cluster, victim)


# ---------- what the namespace gives its accounts as a group (last: it widens the token for a while) ----------


@pytest.fixture
def service_accounts_may_view(tenant: Tenant) -> Iterator[None]:
    """Precondition: an admin lets every pod of the namespace read it (the ClusterRole `view` bound to the group
    `system:serviceaccounts:<namespace>`, a common way to give in-cluster tools read access). The tenant itself is
    bound only to LLMBackends; its serving pods mount no token, so it could never use that binding before."""
    name = "atk42b-serviceaccounts-view"
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": EXEC_NAMESPACE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": f"system:serviceaccounts:{EXEC_NAMESPACE}"}]}
    tenant.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    yield
    tenant.cluster.kubectl("delete", "rolebinding", "-n", EXEC_NAMESPACE, name, "--wait=false", check=False)


@pytest.mark.xfail(strict=True, reason=(
    "FINDING (low; needs an admin's group binding): the launcher token is the only token a tenant bound to "
    "LLMBackends ever holds, and as a ServiceAccount it is in the groups system:serviceaccounts and "
    "system:serviceaccounts:<namespace>; whatever an admin granted those groups (here `view`), the tenant now has, "
    "through its leader. Documented, not fixed: docs/security.md, \"Not covered\" (group bindings); no account "
    "token can leave those groups"))
def test_group_bindings_of_the_namespace_s_accounts_do_not_reach_the_tenant(tenant: Tenant, service_accounts_may_view):
    """Tries: `get pods` and `get configmaps` with the leader's token once the namespace's accounts as a group
    may view it. Safe: still Forbidden (the tenant cannot read them itself)."""
    for resource in ("pods", "configmaps"):
        result = tenant.kubectl("get", resource)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (resource, result.stdout)


@pytest.fixture
def dangling_binding(installed: ClusterHandle, tmp_path_factory) -> Iterator[Tenant]:
    """Precondition: a RoleBinding of the namespace names a ServiceAccount `<x>-launcher` that does not exist (left
    behind when a tool's account was deleted, e.g. an MPI operator's `<job>-launcher`, or made ahead of it), here
    granting `view`. The tenant then creates a multi-node TensorRT-LLM LLMBackend `<x>`: the operator creates the
    account `<x>-launcher` (none is there, so never-adopt does not stop it) and mounts its token in the leader."""
    backend = f"atk{_letters()}"
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": f"atk42b-old-{backend}", "namespace": EXEC_NAMESPACE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "ServiceAccount", "name": f"{backend}-launcher", "namespace": EXEC_NAMESPACE}]}
    installed.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    tenant = _tenant(installed, backend, 0, tmp_path_factory.mktemp("dangling"))
    yield tenant
    installed.kubectl("delete", "rolebinding", "-n", EXEC_NAMESPACE, f"atk42b-old-{backend}", "--wait=false",
                      check=False)
    installed.kubectl("delete", "serviceaccount,rolebinding", "-n", EXEC_NAMESPACE, tenant.account,
                      "--wait=false", check=False)
    _delete_pod(installed, tenant.leader)


# Fixed (was a strict xfail): FINDING (low): the tenant chose the name of the ServiceAccount whose token the operator
# mounts in its image (<backend>-launcher), so a binding left naming <x>-launcher became the tenant's when it created
# backend <x>. The account is <x>-launcher-<tag of the backend's uid> now (render/names.py, issue 42 attack3).
def test_a_binding_left_for_a_missing_launcher_account_does_not_reach_the_tenant(dangling_binding: Tenant):
    """Tries: `get pods` and `get configmaps` with the leader's token when an old RoleBinding names the account the
    operator just created for the tenant's backend. Safe: Forbidden."""
    for resource in ("pods", "configmaps"):
        result = dangling_binding.kubectl("get", resource)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (resource, result.stdout)
