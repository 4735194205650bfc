"""A real, local Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and kwok simulating the GPU nodes and their pods.

Every component listens on 127.0.0.1 only. State (certificates, kubeconfig, logs, etcd data, PIDs)
lives in one directory; `down` stops the components by the PIDs recorded there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .build import KWOK_STAGES_FILE, ensure_binaries
from .ports import free_ports

HOST = "127.0.0.1"
# kwok hands out pod IPs from this loopback range, so a test can put a real Triton server behind a pod IP.
POD_CIDR = "127.0.1.0/24"
SERVICE_CIDR = "10.96.0.0/16"  # allocation range for ClusterIPs only; nothing routes there
# `kubectl exec` into a pod of this namespace runs the command as a process of this machine (kwok's ClusterExec,
# served by kwok as the simulated nodes' kubelet): a test of the exec path on the real API server (RBAC, admission,
# the WebSocket upgrade) has a real command behind it. Pods of other namespaces refuse exec.
EXEC_NAMESPACE = "kwok-exec"
KWOK_EXEC_FILE = "kwok-exec.yaml"
READY_TIMEOUT_S = 90


class ClusterError(RuntimeError):
    pass


def default_dir() -> Path:
    from .build import cache_root

    return cache_root() / "dev-cluster"


@dataclass
class Ports:
    etcd: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 26443
    controller_manager: int = 26257
    scheduler: int = 26259
    kwok: int = 26080

    @classmethod
    def free(cls) -> Ports:
        """Ports free now (for test clusters next to a running demo)."""
        return cls(*free_ports(6, HOST))


@dataclass
class Component:
    name: str
    argv: list[str]
    health_url: str
    ca_file: str | None = None  # verify TLS with this CA; None with https = unverified self-signed
    pid: int | None = None


@dataclass
class Cluster:
    directory: Path
    ports: Ports = field(default_factory=Ports)
    components: list[Component] = field(default_factory=list)
    # Test clusters die with the process that started them (even when it is killed); the dev cluster outlives `up`.
    tied_to_parent: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.ports.apiserver}"

    @property
    def pid_file(self) -> Path:
        return self.directory / "pids.json"

    def log_file(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"


# ---------- certificates ----------


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()[-500:]}")


def generate_pki(pki: Path) -> None:
    """CA, apiserver serving cert (SAN 127.0.0.1), admin client cert (system:masters), service-account key."""
    if (pki / "admin.crt").exists():
        return
    if subprocess.run(["which", "openssl"], capture_output=True).returncode != 0:
        raise ClusterError("openssl is needed to generate the dev cluster's certificates (apt-get install openssl)")
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "3650", "-subj", "/CN=llmbackend-dev-ca", cwd=pki)
    (pki / "san.cnf").write_text(
        "[ext]\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
             "-subj", "/CN=kube-apiserver", cwd=pki)
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "apiserver.crt", "-days", "3650", "-extfile", "san.cnf", "-extensions", "ext", cwd=pki)
    (pki / "client.cnf").write_text("[ext]\nextendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "admin.key", "-out", "admin.csr",
             "-subj", "/O=system:masters/CN=dev-admin", cwd=pki)
    _openssl("x509", "-req", "-in", "admin.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "admin.crt", "-days", "3650", "-extfile", "client.cnf", "-extensions", "ext", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(cluster: Cluster) -> None:
    pki = cluster.directory / "pki"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "llmb-dev", "cluster": {"server": cluster.server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "dev-admin", "user": {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "llmb-dev", "context": {"cluster": "llmb-dev", "user": "dev-admin"}}],
        "current-context": "llmb-dev",
    }
    cluster.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is valid YAML


# ---------- components ----------


def plan_components(cluster: Cluster, bins: Path) -> list[Component]:
    d, p, pki = cluster.directory, cluster.ports, cluster.directory / "pki"
    kubeconfig = str(cluster.kubeconfig)
    return [
        Component("etcd", [
            str(bins / "etcd"), "--name", "llmb-dev", "--data-dir", str(d / "etcd"),
            "--listen-client-urls", f"http://{HOST}:{p.etcd}", "--advertise-client-urls", f"http://{HOST}:{p.etcd}",
            "--listen-peer-urls", f"http://{HOST}:{p.etcd_peer}", "--initial-advertise-peer-urls", f"http://{HOST}:{p.etcd_peer}",
            "--initial-cluster", f"llmb-dev=http://{HOST}:{p.etcd_peer}", "--log-level", "warn",
            "--quota-backend-bytes", str(4 * 1024**3),
        ], f"http://{HOST}:{p.etcd}/health"),
        Component("kube-apiserver", [
            str(bins / "kube-apiserver"), "--etcd-servers", f"http://{HOST}:{p.etcd}",
            "--bind-address", HOST, "--advertise-address", HOST, "--secure-port", str(p.apiserver),
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--service-account-key-file", str(pki / "sa.pub"), "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc", "--api-audiences", "https://kubernetes.default.svc",
            "--authorization-mode", "Node,RBAC", "--service-cluster-ip-range", SERVICE_CIDR,
            # exec, logs and port-forward go to kwok's server, the simulated nodes' kubelet (at the node's InternalIP,
            # the port kwok writes into each node's daemonEndpoints), verified against the cluster's CA.
            "--kubelet-preferred-address-types", "InternalIP", "--kubelet-certificate-authority", str(pki / "ca.crt"),
            "--kubelet-client-certificate", str(pki / "admin.crt"), "--kubelet-client-key", str(pki / "admin.key"),
            "--cert-dir", str(d / "apiserver-certs"), "--profiling=false", "--v", "1",
        ], f"https://{HOST}:{p.apiserver}/readyz", ca_file=str(pki / "ca.crt")),
        Component("kube-controller-manager", [
            str(bins / "kube-controller-manager"), "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", HOST, "--secure-port", str(p.controller_manager), "--leader-elect=false",
            "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
            "--use-service-account-credentials=false", "--cert-dir", str(d / "kcm-certs"),
            "--concurrent-deployment-syncs", "10", "--concurrent-replicaset-syncs", "10",
            # kwok heartbeats can lag on a busy 2-core machine: do not mark simulated nodes NotReady too eagerly.
            "--node-monitor-grace-period", "2m",
            "--kube-api-qps", "200", "--kube-api-burst", "400",
        ], f"https://{HOST}:{p.controller_manager}/healthz"),
        Component("kube-scheduler", [
            str(bins / "kube-scheduler"), "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", HOST, "--secure-port", str(p.scheduler), "--leader-elect=false",
            "--cert-dir", str(d / "scheduler-certs"),
        ], f"https://{HOST}:{p.scheduler}/healthz"),
        Component("kwok", [
            str(bins / "kwok"), "--kubeconfig", kubeconfig, "--config", str(bins / KWOK_STAGES_FILE),
            "--config", str(d / KWOK_EXEC_FILE),
            "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            "--cidr", POD_CIDR, "--node-ip", HOST, "--server-address", f"{HOST}:{p.kwok}", "--node-port", str(p.kwok),
            # The kubelet's server is HTTPS: the API server's certificate (SAN 127.0.0.1, the cluster's CA) serves.
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            # Renew node Leases (the heartbeat-with-lease stage); without it the node lifecycle
            # controller marks every simulated node NotReady after the grace period.
            "--node-lease-duration-seconds", "40",
        ], f"https://{HOST}:{p.kwok}/healthz", ca_file=str(pki / "ca.crt")),
    ]


def write_kwok_exec(cluster: Cluster) -> None:
    """kwok's ClusterExec for EXEC_NAMESPACE: exec there runs the command here, in kwok's working directory."""
    cluster.directory.mkdir(parents=True, exist_ok=True)
    (cluster.directory / KWOK_EXEC_FILE).write_text(json.dumps({
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterExec", "metadata": {"name": "local-processes"},
        "spec": {"selector": {"matchNamespaces": [EXEC_NAMESPACE]}, "execs": [{"local": {}}]},
    }))


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def _healthy(component: Component) -> bool:
    ctx = None
    if component.health_url.startswith("https"):
        if component.ca_file:
            ctx = ssl.create_default_context(cafile=component.ca_file)
        else:
            ctx = ssl._create_unverified_context()  # self-signed component certs on loopback
    try:
        with urllib.request.urlopen(component.health_url, timeout=2, context=ctx) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(cluster: Cluster, component: Component) -> None:
    log = open(cluster.log_file(component.name), "ab")
    proc = subprocess.Popen(
        component.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # outlive `dev-cluster up`; stopped by PID in `down`
        preexec_fn=_die_with_parent if cluster.tied_to_parent else None,
    )
    component.pid = proc.pid
    _save_pids(cluster)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(
                f"{component.name} exited with code {proc.returncode} during start-up; "
                f"last lines of {cluster.log_file(component.name)}:\n{log_tail(cluster.log_file(component.name))}"
            )
        if _healthy(component):
            return
        time.sleep(0.25)
    raise ClusterError(
        f"{component.name} did not become ready within {READY_TIMEOUT_S}s ({component.health_url}); "
        f"last lines of its log:\n{log_tail(cluster.log_file(component.name))}"
    )


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _save_pids(cluster: Cluster) -> None:
    previous = json.loads(cluster.pid_file.read_text())["pids"] if cluster.pid_file.exists() else {}
    state = {"ports": asdict(cluster.ports), "pids": {**previous, **{c.name: c.pid for c in cluster.components if c.pid}}}
    cluster.pid_file.write_text(json.dumps(state))


def _default_or_free_ports(log) -> Ports:
    """The usual ports when they are all free, else free ones, said aloud: a dev cluster may start beside another
    (a benchmark's, a second checkout's demo); its kubeconfig names whichever it got."""
    usual = Ports()
    taken = [f"{name}={port}" for name, port in asdict(usual).items() if _port_taken(port)]
    if not taken:
        return usual
    chosen = Ports.free()
    log(f"port(s) {', '.join(taken)} in use on {HOST} (another dev cluster?); using free ones: "
        + ", ".join(f"{name}={port}" for name, port in asdict(chosen).items()))
    return chosen


def up(directory: Path | None = None, ports: Ports | None = None, log=print, tied_to_parent: bool = False) -> Cluster:
    """Start the control plane; return when every component is ready. Idempotent when already up."""
    directory = Path(directory or default_dir())
    existing = load(directory)
    if existing is not None and all(_healthy(c) for c in existing.components if c.health_url):
        log(f"dev cluster already running; KUBECONFIG={existing.kubeconfig}")
        return existing
    if existing is not None:
        down(directory, log=lambda *_: None)  # half-running: start over
    # The dev cluster is disposable: a stopped one leaves pods that kwok would never mark Ready again
    # (node leases expired meanwhile), so every start begins with an empty etcd.
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    if ports is None:
        ports = _default_or_free_ports(log)
    cluster = Cluster(directory, ports, tied_to_parent=tied_to_parent)
    taken = [f"{name}={port}" for name, port in asdict(cluster.ports).items() if _port_taken(port)]
    if taken:
        raise ClusterError(
            f"port(s) already in use on {HOST}: {', '.join(taken)}. Stop what uses them "
            f"(or another dev cluster: python -m devcluster down --dir ...), or pick other ports."
        )
    bins = ensure_binaries(log=log)
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    generate_pki(directory / "pki")
    write_kubeconfig(cluster)
    write_kwok_exec(cluster)
    cluster.components = plan_components(cluster, bins)
    try:
        for component in cluster.components:
            started = time.monotonic()
            _start(cluster, component)
            log(f"  {component.name:<24} ready in {time.monotonic() - started:5.1f}s (pid {component.pid})")
    except BaseException:
        stop(cluster)
        raise
    return cluster


def load(directory: Path) -> Cluster | None:
    """The cluster recorded in `directory`, or None."""
    directory = Path(directory)
    pid_file = directory / "pids.json"
    if not pid_file.exists():
        return None
    state = json.loads(pid_file.read_text())
    cluster = Cluster(directory, Ports(**state["ports"]))
    components = plan_components(cluster, Path("/nonexistent"))
    for c in components:
        c.pid = state["pids"].get(c.name)
    # Processes started next to the cluster (the demo's operator) are stopped with it, first.
    planned = {c.name for c in components}
    extras = [Component(name, [], "", pid=pid) for name, pid in state["pids"].items() if name not in planned]
    cluster.components = [c for c in components if c.pid] + extras
    return cluster


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (only when we started it in this process) counts as gone.
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        return True


def stop(cluster: Cluster, timeout_s: float = 15, forget: bool = True) -> None:
    """Stop the components in reverse start order: SIGTERM, then SIGKILL after a grace period."""
    for component in reversed(cluster.components):
        if not component.pid or not _alive(component.pid):
            continue
        try:
            os.kill(component.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout_s
        while _alive(component.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(component.pid):
            os.kill(component.pid, signal.SIGKILL)
    if forget and cluster.pid_file.exists():
        cluster.pid_file.unlink()


def down(directory: Path | None = None, log=print) -> bool:
    cluster = load(Path(directory or default_dir()))
    if cluster is None:
        log("no dev cluster recorded there")
        return False
    stop(cluster)
    shutil.rmtree(cluster.directory / "etcd", ignore_errors=True)
    log("dev cluster stopped (its state is discarded; `up` starts a fresh one)")
    return True


def restart_component(cluster: Cluster, name: str) -> None:
    """Stop and start one component (fault-injection tests: restart the apiserver or etcd)."""
    component = next(c for c in cluster.components if c.name == name)
    stop(Cluster(cluster.directory, cluster.ports, [component]), forget=False)
    _start(cluster, component)
