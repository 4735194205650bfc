"""E2E fixtures: one real control plane per session (etcd, kube-apiserver, controller-manager,
scheduler, kwok) with simulated GPU nodes, the CRD installed, and the operator running as a real
process. Each test gets its own namespace.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import cluster as devcluster
from devcluster.build import bin_dir
from devcluster.cli import install_crd, load_nodes, start_operator, topology_nodes
from devcluster.crds import crd_file
from llmbackend.controller.kube import KINDS, ApiError, Kube, load_configuration

pytestmark = pytest.mark.e2e
KINDS.setdefault("ReplicaSet", ("apps/v1", "replicasets"))
KINDS.setdefault("PersistentVolume", ("v1", "persistentvolumes"))
# The nodes every e2e test sees: four DGX H100 (32 GPUs).
SESSION_TOPOLOGY = "dgx-h100-x4"


# Wall seconds of the files that run longest (make test, 6 workers on the 2-core machine, 2026-12-06; a few from a
# side-by-side run of tests/e2e), to start them first: pytest-xdist's loadfile hands out files in collection order
# (the Makefile turns its own order, most tests first, off), and a long file handed out last is the run's tail.
# A file not named here counts SECONDS_PER_TEST a test: after all of these, in xdist's own order (most tests first).
FILE_SECONDS = {
    "tests/e2e/test_chaos.py": 230, "tests/e2e/test_pool_attack_e2e.py": 220, "tests/e2e/test_status_truth.py": 200,
    "tests/e2e/test_autoscaling.py": 180, "tests/e2e/test_ownership.py": 160, "tests/e2e/test_faults.py": 150,
    "tests/e2e/test_backend_lifecycle.py": 140, "tests/e2e/test_pool_attack2_e2e.py": 140,
    "tests/e2e/test_tenant_admission.py": 130, "tests/activator/test_activator_headers.py": 125,
    "tests/e2e/test_argocd_health_e2e.py": 100, "tests/e2e/test_model_cache.py": 90,
    "tests/e2e/test_launcher_attack_e2e.py": 80, "tests/e2e/test_gateway_keda.py": 70,
    "tests/openai/test_openai_engine_failure.py": 70, "tests/e2e/test_refs_attack2_e2e.py": 60,
    "tests/e2e/test_scale_to_zero.py": 55, "tests/e2e/test_recovery.py": 55, "tests/e2e/test_pool_attack4_e2e.py": 50,
    "tests/e2e/test_ha.py": 50, "tests/e2e/test_helm_chart.py": 40, "tests/e2e/test_gpu_pool_e2e.py": 40,
    "tests/e2e/test_refs_attack3_e2e.py": 35, "tests/e2e/test_pod_template_e2e.py": 34,
    "tests/e2e/test_launcher_admission.py": 30, "tests/e2e/test_pod_field_parity_e2e.py": 27,
    "tests/e2e/test_refs_attack4_e2e.py": 18, "tests/e2e/test_names_e2e.py": 10, "tests/e2e/test_security.py": 5,
}
SECONDS_PER_TEST = 0.05


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
    # Longest files first (a stable sort: a file's tests keep their order); every worker sorts its identical
    # collection the same way, as xdist requires.
    files: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        files[path] = files.get(path, 0) + 1
    items.sort(key=lambda item: -FILE_SECONDS.get(path := item.nodeid.split("::")[0],
                                                  files[path] * SECONDS_PER_TEST))


class ClusterHandle:
    def __init__(self, cluster: devcluster.Cluster):
        self.cluster = cluster
        self.kube = Kube(load_configuration(str(cluster.kubeconfig)))
        self.kubectl_path = str(bin_dir() / "kubectl")

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        proc = subprocess.run([self.kubectl_path, *args], env=env, input=input, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> ClusterHandle:
    directory = tmp_path_factory.mktemp("cluster")
    c = devcluster.up(directory, devcluster.Ports.free(), tied_to_parent=True)
    try:
        handle = ClusterHandle(c)
        load_nodes(handle.kube, topology_nodes(SESSION_TOPOLOGY))
        install_crd(handle.kube)
        yield handle
    finally:
        devcluster.stop(c)


class OperatorProcess:
    """The operator as a real process; `name` names its log file (and, via env POD_NAME, its lease identity)."""

    def __init__(self, handle: ClusterHandle, extra_args: list[str] | None = None, name: str = "llmbackend-operator",
                 env: dict[str, str] | None = None):
        self.handle = handle
        self.extra_args = extra_args or []
        self.name = name
        # The admin's allow-list: the tests' Prometheus servers listen on 127.0.0.1 at ports chosen per test; the
        # KEDA tests name an in-cluster one that is never called here.
        self.env = {"LLMBACKEND_PROMETHEUS_URLS": "http://127.0.0.1:* http://prometheus.monitoring:9090", **(env or {})}
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.handle.cluster.log_file(self.name)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.proc = start_operator(self.handle.cluster, self.extra_args, name=self.name, env=self.env)

    def stop(self, kill: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            (self.proc.kill if kill else self.proc.terminate)()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return devcluster.log_tail(self.log_path, lines)


SESSION_OPERATOR = pytest.StashKey[OperatorProcess]()


@pytest.fixture(scope="session")
def operator(request, cluster) -> OperatorProcess:
    """The session's operator. It runs only in the modules that use it (_session_operator_where_used): elsewhere it
    would reconcile every backend an admission test creates, CPU that no test asks for."""
    # (LLMB_E2E_VERBOSE=1: the operator logs at debug level, the GPU pool's passes included)
    op = OperatorProcess(cluster, ["--verbose"] if os.environ.get("LLMB_E2E_VERBOSE") else None)
    op.start()
    request.session.stash[SESSION_OPERATOR] = op
    yield op
    op.stop()


def _uses_session_operator(item: pytest.Item) -> bool:
    return "operator" in item.fixturenames and "exclusive_cluster" not in item.fixturenames


@pytest.fixture(scope="module", autouse=True)
def _session_operator_where_used(request):
    """Start the session operator again for a module that uses it; stop it for one that does not (a module of
    exclusive_cluster stops it itself)."""
    op = request.session.stash.get(SESSION_OPERATOR, None)
    if op is not None:
        if any(_uses_session_operator(item) for item in request.session.items if item.path == request.path):
            if not op.running:
                op.start()
        else:
            op.stop()
    yield


@pytest.fixture(scope="module")
def exclusive_cluster(cluster, operator):
    """The cluster with the session operator stopped for this module (the next module that uses it starts it)."""
    operator.stop()
    yield cluster


@pytest.fixture
def own_operator(exclusive_cluster):
    """Factory of operator processes for one test; all are stopped at its end."""
    started: list[OperatorProcess] = []

    def make(*extra: str, **kwargs) -> OperatorProcess:
        kwargs.setdefault("name", f"operator-{uuid.uuid4().hex[:6]}")
        op = OperatorProcess(exclusive_cluster, list(extra), **kwargs)
        op.start()
        started.append(op)
        return op

    yield make
    for op in started:
        op.stop(kill=True)


@contextlib.contextmanager
def fresh_namespace(cluster: ClusterHandle, prefix: str = "t") -> Iterator[str]:
    """A new namespace, ready for pods, deleted (with its model cache volume) on exit."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # The model cache claim of uri sources needs a volume (no storage provisioner here): one pre-bound PV. (Through
    # the client, as the namespace: a kubectl process costs about 0.1 s of CPU, twice for each test that has one.)
    cluster.kube.create(model_cache_volume(name))
    # Pods are refused until the controller-manager has made the namespace's default ServiceAccount (slow right after
    # test_chaos restarts the API server: a CI run saw 403 "serviceaccount default not found").
    wait_for(lambda: cluster.kube.get("ServiceAccount", name, "default"), timeout=60, interval=0.2,
             what=f"namespace {name}'s default ServiceAccount")
    try:
        yield name
    finally:
        cluster.kube.delete("Namespace", None, name)
        cluster.kube.delete("PersistentVolume", None, f"{name}-model-cache")


def exec_namespace(cluster: ClusterHandle) -> str:
    """devcluster's EXEC_NAMESPACE (exec there runs the command on this machine), made once per cluster and never
    deleted: several modules use it, and one made again while the last is still terminating would be refused."""
    from devcluster.cluster import EXEC_NAMESPACE

    if cluster.kube.get("Namespace", None, EXEC_NAMESPACE) is None:
        try:
            cluster.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EXEC_NAMESPACE}})
        except ApiError as exc:
            if exc.status != 409:  # made meanwhile by another module of this worker: fine
                raise
    wait_for(lambda: cluster.kube.get("ServiceAccount", EXEC_NAMESPACE, "default"), timeout=60, interval=0.2,
             what=f"namespace {EXEC_NAMESPACE}'s default ServiceAccount")
    return EXEC_NAMESPACE


@pytest.fixture
def namespace(cluster) -> Iterator[str]:
    with fresh_namespace(cluster) as name:
        yield name


def model_cache_volume(namespace: str, claim: str = "llmbackend-model-cache") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-model-cache"},
            "spec": {"capacity": {"storage": "10Ti"}, "accessModes": ["ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{namespace}-model-cache"},
                     "claimRef": {"namespace": namespace, "name": claim}}}


def wait_for(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.25, what: str = "condition",
             show: Callable[[], Any] | None = None) -> Any:
    """Poll until predicate() is truthy; fail with `what` after `timeout` seconds (and what ``show`` reads then: a
    predicate that compares says only False)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    seen = f"; then: {show()!r}" if show is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){seen}")


def available(cluster: ClusterHandle, namespace: str, name: str) -> dict[str, Any] | None:
    """The backend, once Available=True for its current generation."""
    obj = cluster.kube.get("LLMBackend", namespace, name)
    cond = condition(obj, "Available")
    if cond and cond["status"] == "True" and cond.get("observedGeneration") == obj["metadata"]["generation"]:
        return obj
    return None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions", []):
        if cond["type"] == type_:
            return cond
    return None


def backend_manifest(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    # Objective throughput: one GPU per 8B replica, so the operator tests can pack many backends on the four
    # DGX nodes (the latency default now takes TP2 for this model, as NVIDIA's latency profile does).
    base = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/llama-3.1-8b"}},
            "parallelism": {"objective": "throughput"}}
    base.update(spec)
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": name, "namespace": namespace}, "spec": base}


def deployment_replicas(cluster: ClusterHandle, namespace: str, name: str) -> int | None:
    """spec.replicas of the Deployment (None while there is none)."""
    return ((cluster.kube.get("Deployment", namespace, name) or {}).get("spec") or {}).get("replicas")


def autoscaling_status(cluster: ClusterHandle, namespace: str, name: str) -> dict[str, Any]:
    """status.autoscaling of the backend ({} while it has none)."""
    return ((cluster.kube.get("LLMBackend", namespace, name) or {}).get("status") or {}).get("autoscaling") or {}


@pytest.fixture(scope="module")
def lws(cluster: ClusterHandle, tmp_path_factory) -> Iterator[Any]:
    """The real LeaderWorkerSet controller (built by `make tools`), for the module."""
    from devcluster.lws import LwsController

    controller = LwsController(cluster.cluster.kubeconfig, tmp_path_factory.mktemp("lws"), cluster.kubectl_path)
    controller.start()
    yield controller
    controller.stop()


def apply_manifest(cluster: ClusterHandle, manifest: dict[str, Any]) -> subprocess.CompletedProcess:
    return cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


REPO_ROOT = Path(__file__).resolve().parents[2]

# ---- tenants: tests that act as a user through `kubectl --as`, behind the shipped admission policy ----

TENANT_POLICY = REPO_ROOT / "manifests/default/admission-policy.yaml"
# what a tenant bound only to LLMBackends may do in its namespace
BACKEND_EDITOR_RULES: list[dict[str, Any]] = [{"apiGroups": ["llmbackend.dev"], "resources": ["llmbackends"],
                                               "verbs": ["get", "list", "watch", "create", "update", "patch",
                                                         "delete"]}]


@pytest.fixture(scope="module")
def policy(cluster: ClusterHandle) -> Iterator[ClusterHandle]:
    """The shipped reference policy (manifests/default/admission-policy.yaml), for the module."""
    cluster.kubectl("apply", "-f", str(TENANT_POLICY))
    yield cluster
    cluster.kubectl("delete", "-f", str(TENANT_POLICY), "--wait=false", check=False)


@pytest.fixture
def tenant(request, policy, namespace) -> str:
    """`namespace`, where the test module's TENANT may create, edit, read and delete LLMBackends and nothing else."""
    grant(policy, request.module.TENANT, namespace, "llmbackend-editor", BACKEND_EDITOR_RULES)
    return namespace


@pytest.fixture
def victim(cluster) -> Iterator[str]:
    """Another team's namespace: the tenant may do nothing there."""
    with fresh_namespace(cluster, "prod") as name:
        yield name


def user_rbac(user: str, namespace: str, name: str, rules: list[dict[str, Any]] | None = None,
              cluster_role: str | None = None) -> list[dict[str, Any]]:
    """A Role of ``rules`` (or the ClusterRole ``cluster_role``) bound to ``user`` in ``namespace``, both ``name``."""
    docs: list[dict[str, Any]] = []
    if rules is not None:
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                     "metadata": {"name": name, "namespace": namespace}, "rules": rules})
    docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": name, "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole" if cluster_role else "Role",
                             "name": cluster_role or name},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    return docs


def grant(cluster: ClusterHandle, user: str, namespace: str, name: str, rules: list[dict[str, Any]] | None = None,
          cluster_role: str | None = None) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(user_rbac(user, namespace, name, rules, cluster_role)))


def apply_as(cluster: ClusterHandle, user: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess:
    return cluster.kubectl("apply", "--as", user, "-f", "-", input=yaml.safe_dump(manifest), check=False)


def apply_as_once_admitted(cluster: ClusterHandle, user: str, manifest: dict[str, Any],
                           tries: int = 20) -> subprocess.CompletedProcess:
    """Apply as ``user`` once the policy's admission plugin has caught up (it learns of policies asynchronously)."""
    proc = None
    for _ in range(tries):
        proc = apply_as(cluster, user, manifest)
        if proc.returncode == 0:
            return proc
        time.sleep(0.5)
    raise AssertionError(f"{user} could not apply {manifest['metadata']['name']}: {proc.stderr if proc else ''}")


def wait_crd_established(cluster: ClusterHandle, name: str, timeout: float = 30) -> None:
    """A CRD Established, then a second for discovery to catch up. Polled, not `kubectl wait`: that fails at once
    ("conditions accessor error") on a CRD the API server has not yet given any status condition."""
    wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in
                         ((cluster.kube.get("CustomResourceDefinition", None, name) or {}).get("status") or {})
                         .get("conditions") or []), timeout=timeout, what=f"CRD {name} Established")
    time.sleep(1)


def installed_crds(cluster: ClusterHandle, kinds: Iterable[str]) -> Iterator[ClusterHandle]:
    """Body of a module fixture: third-party CRDs (devcluster.crds, from their Go modules) installed and Established
    for the module, deleted after it."""
    names = []
    for kind in kinds:
        crd = yaml.safe_load(crd_file(kind).read_text())
        cluster.kube.apply(crd)  # server-side: these CRDs exceed client-side apply's annotation limit
        names.append(crd["metadata"]["name"])
    for name in names:
        wait_crd_established(cluster, name)
    yield cluster
    for name in names:
        cluster.kubectl("delete", "crd", name, "--wait=true", check=False)
