"""Support for tests/e2e/test_autoscaling.py: make kwok pods serve for real.

kwok gives pods loopback IPs (127.0.1.0/24) but runs nothing in them. `PodTritons` plays the kubelet's part for a
backend's server pods: on each pod's IP it starts the real `tritonserver` on the model repository the operator put
in the backend's ConfigMap (the operator's LLM API model.py, model.yaml, config.pbtxt; what the pod mounts), with the
CPU stand-in engine `tensorrt_llm` (dev/standins); when a pod goes away it takes it out of the endpoints at once and
runs the pod's own rendered preStop (render/drain.py: wait until the engine has nothing in flight) before stopping
that Triton; the load (harness.EndpointLoad) goes through its endpoints. `PodForwards` binds a TCP forwarder on ``<podIP>:8002`` for each pod to any
target (one Triton can stand behind every pod: the queue/compute ratio is invariant to duplicated counters), for the
test that swaps the target for garbage. `Recorder` polls the Deployment and the backend's status.autoscaling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))

from harness import Forwarder  # noqa: E402

from devcluster.tritonserver import TritonServerError, run_tritonserver  # noqa: E402
from llmbackend.controller.kube import Kube, load_configuration  # noqa: E402
from llmbackend.render import triton as rt  # noqa: E402
from llmbackend.render.names import BackendRef, config_map_name
from llmbackend.render.servingpod import config_map_files  # noqa: E402

log = logging.getLogger("autoscale_support")
METRICS_PORT = rt.METRICS_PORT
STANDINS = Path(__file__).resolve().parents[2] / "dev" / "standins"


def server_selector(backend: str) -> str:
    return f"llmbackend.dev/backend={backend},app.kubernetes.io/component=server"


def write_model_repository(kube: Kube, namespace: str, backend: str, into: Path) -> str:
    """Lay out the backend's ConfigMap as the pod's model repository (what its volume items give). Returns the
    served model's name (the one directory holding a config.pbtxt)."""
    config_map = kube.get("ConfigMap", namespace, config_map_name(BackendRef(backend, namespace, "")))
    if config_map is None:
        raise LookupError(f"ConfigMap {namespace}/{config_map_name(BackendRef(backend, namespace, ''))} not found")
    files = config_map_files(config_map)
    for rel, content in files.items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        (into / rel).write_text(content)
    models = sorted(rel.split("/")[0] for rel in files if rel.endswith("/config.pbtxt") and rel.count("/") == 1)
    if len(models) != 1:
        raise LookupError(f"expected one model in the ConfigMap, found {models}")
    return models[0]


def serve_repository(repo: Path, host: str = "127.0.0.1", iteration_s: float = 0.05, log_path: Path | None = None,
                     **ports: int):
    """The real tritonserver on a model repository with the CPU stand-in engine (`iteration_s` per decode step)."""
    env = dict(os.environ, TRTLLM_STANDIN_ITERATION_S=str(iteration_s))
    return run_tritonserver(repo, host=host, extra_pythonpath=[STANDINS], env=env, startup_timeout_s=180,
                            log_path=log_path, **ports)


def _prestop_script(pod: dict[str, Any]) -> str | None:
    """The rendered preStop of the pod's Triton container (``python3 -c SCRIPT``), or None."""
    for c in pod["spec"].get("containers", []):
        command = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
        if command and command[:2] == ["python3", "-c"]:
            return command[2]
    return None


@dataclasses.dataclass
class Drain:
    pod: str
    in_flight_at_deregistration: int  # requests of EndpointLoad outstanding on the pod when it left the endpoints
    prestop_s: float
    prestop_rc: int | None


class PodTritons:
    """A real Triton per server pod of ``backend``, bound to the pod's IP on Triton's ports (see the module doc).

    ``endpoints()``: {pod: "ip:8000"} of the pods whose Triton is ready and which are not being deleted (what a
    Service's endpoints hold). ``on_change({pod: "ip:8002"})`` is called from the watcher thread when that set changes.
    ``drains`` records every removal; ``errors`` Tritons that failed to start.
    """

    def __init__(self, kubeconfig: str, namespace: str, backend: str, iteration_s: float,
                 on_change: Callable[[dict[str, str]], None] | None = None, interval: float = 0.3,
                 outstanding: Callable[[str], int] | None = None) -> None:
        self.kube = Kube(load_configuration(kubeconfig))
        self.namespace, self.backend = namespace, backend
        self.iteration_s = iteration_s
        self.on_change = on_change
        self.outstanding = outstanding or (lambda address: 0)  # requests in flight to an HTTP address
        self.interval = interval
        self.dir = Path(tempfile.mkdtemp(prefix=f"pod-tritons-{backend}-"))
        self.repo = self.dir / "model-repository"
        self.model: str | None = None
        self.drains: list[Drain] = []
        self.errors: dict[str, str] = {}
        self.started: set[str] = set()
        self._ready: dict[str, str] = {}  # pod -> ip
        self._notified: dict[str, str] | None = None
        self._servers: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-tritons", daemon=True)

    def endpoints(self) -> dict[str, str]:
        with self._lock:
            return {pod: f"{ip}:{rt.HTTP_PORT}" for pod, ip in self._ready.items()}

    def metrics_targets(self) -> dict[str, str]:
        with self._lock:
            return {pod: f"{ip}:{METRICS_PORT}" for pod, ip in self._ready.items()}

    def log_tail(self, pod: str) -> str:
        try:
            return "\n".join((self.dir / f"{pod}.log").read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return ""

    def __enter__(self) -> PodTritons:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            self._ready.clear()
        for stop, _ in self._servers.values():
            stop.set()
        for _, thread in self._servers.values():
            thread.join(60)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as exc:  # noqa: BLE001 - keep serving through API hiccups
                log.warning("pod tritons sync failed: %s", exc)
            self._stop.wait(self.interval)

    def _sync(self) -> None:
        pods = self.kube.list("Pod", self.namespace, label_selector=server_selector(self.backend))
        live = {p["metadata"]["name"]: p for p in pods
                if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")}
        for name in set(self._servers) - set(live):
            self._leave(name)
        for name in set(live) - set(self._servers):
            if self.model is None:
                self.model = write_model_repository(self.kube, self.namespace, self.backend, self.repo)
            pod = live[name]
            stop = threading.Event()
            thread = threading.Thread(target=self._serve, args=(name, pod["status"]["podIP"], _prestop_script(pod), stop),
                                      name=f"triton-{name}", daemon=True)
            self._servers[name] = (stop, thread)
            thread.start()
        targets = self.metrics_targets()
        if targets != self._notified:
            if self.on_change is not None:
                self.on_change(targets)  # raises -> retried next poll
            self._notified = targets

    def _leave(self, name: str) -> None:
        """The pod is deleted: out of the endpoints now; its server thread drains and stops its Triton."""
        with self._lock:
            self._ready.pop(name, None)
        stop, _ = self._servers.get(name, (None, None))
        if stop is not None and not stop.is_set():
            stop.set()

    def _serve(self, name: str, ip: str, prestop: str | None, stop: threading.Event) -> None:
        try:
            with serve_repository(self.repo, ip, self.iteration_s, self.dir / f"{name}.log",
                                  http_port=rt.HTTP_PORT, grpc_port=rt.GRPC_PORT, metrics_port=rt.METRICS_PORT):
                self.started.add(name)
                with self._lock:
                    if not stop.is_set():
                        self._ready[name] = ip  # the readiness probe (/v2/health/ready) passes
                stop.wait()
                self._prestop(name, ip, prestop)
            # leaving the block sends SIGTERM: Triton exits once nothing is left (its exit timeout bounds it)
        except TritonServerError as exc:
            self.errors[name] = str(exc)

    def _prestop(self, name: str, ip: str, script: str | None) -> None:
        """Run the pod's rendered preStop; "localhost" inside the pod is the pod's IP here. (Not when the test ends.)"""
        if self._stop.is_set():
            return
        in_flight = self.outstanding(f"{ip}:{rt.HTTP_PORT}")
        t0 = time.monotonic()
        rc = None
        if script is not None:
            try:
                rc = subprocess.run([sys.executable, "-c", script.replace("127.0.0.1", ip)],
                                    timeout=300, capture_output=True, check=False).returncode
            except subprocess.TimeoutExpired:
                rc = -1
        self.drains.append(Drain(name, in_flight, time.monotonic() - t0, rc))


class PodForwards:
    """For every pod of ``backend`` with a podIP: ``podIP:8002 -> target`` (changeable at any time).

    ``on_change({pod_name: "ip:8002"})`` is called (from the watcher thread) whenever the set of
    forwarded pods changes. ``bind_errors`` records IPs whose port could not be bound (another
    process, e.g. a second dev cluster on this host, holds it); they are retried every poll.
    """

    def __init__(self, kubeconfig: str, namespace: str, backend: str, target: tuple[str, int],
                 on_change: Callable[[dict[str, str]], None] | None = None, interval: float = 0.3) -> None:
        self.kube = Kube(load_configuration(kubeconfig))
        self.namespace, self.backend = namespace, backend
        self._target = target
        self.on_change = on_change
        self.interval = interval
        self.forwarders: dict[str, Forwarder] = {}  # ip -> forwarder
        self.pods: dict[str, str] = {}  # pod name -> "ip:port"
        self.bind_errors: dict[str, str] = {}
        self.seen_ips: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-forwards", daemon=True)

    @property
    def target(self) -> tuple[str, int]:
        return self._target

    @target.setter
    def target(self, value: tuple[str, int]) -> None:
        self._target = value
        for f in list(self.forwarders.values()):
            f.target = value  # used for each new connection
            with f._lock:  # and drop kept-alive connections to the old target (the scraper reconnects)
                for conn in list(f._conns):
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> PodForwards:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)
        for f in self.forwarders.values():
            f.close()
        self.forwarders.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as exc:  # noqa: BLE001 - keep forwarding through API hiccups
                log.warning("pod forward sync failed: %s", exc)
            self._stop.wait(self.interval)

    def _sync(self) -> None:
        pods = self.kube.list("Pod", self.namespace, label_selector=server_selector(self.backend))
        live = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods if (p.get("status") or {}).get("podIP")}
        ips = set(live.values())
        for ip in set(self.forwarders) - ips:
            self.forwarders.pop(ip).close()
        for ip in ips - set(self.forwarders):
            try:
                self.forwarders[ip] = Forwarder(ip, METRICS_PORT, *self._target)
                self.bind_errors.pop(ip, None)
                self.seen_ips.add(ip)
            except OSError as exc:
                self.bind_errors[ip] = str(exc)
        forwarded = {name: f"{ip}:{METRICS_PORT}" for name, ip in live.items() if ip in self.forwarders}
        if forwarded != self.pods:
            if self.on_change is not None:
                self.on_change(dict(forwarded))  # raises -> retried next poll
            self.pods = forwarded


class Recorder:
    """Polls the Deployment's spec.replicas, ready pods and the backend's status.autoscaling."""

    def __init__(self, kubeconfig: str, namespace: str, backend: str, interval: float = 0.5) -> None:
        self.kube = Kube(load_configuration(kubeconfig))
        self.namespace, self.backend = namespace, backend
        self.interval = interval
        self.samples: list[dict[str, Any]] = []  # {"t", "replicas", "ready", "autoscaling"}
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                dep = self.kube.get("Deployment", self.namespace, self.backend)
                obj = self.kube.get("LLMBackend", self.namespace, self.backend)
                self.samples.append({
                    "t": time.monotonic() - self.t0,
                    "replicas": (dep or {}).get("spec", {}).get("replicas"),
                    "ready": (dep or {}).get("status", {}).get("readyReplicas") or 0,
                    "autoscaling": dict(((obj or {}).get("status") or {}).get("autoscaling") or {}),
                })
            except Exception as exc:  # noqa: BLE001
                log.warning("recorder poll failed: %s", exc)
            self._stop.wait(self.interval)

    def latest(self) -> dict[str, Any]:
        return self.samples[-1] if self.samples else {"replicas": None, "ready": 0, "autoscaling": {}}

    def replica_sequence(self) -> list[int]:
        """spec.replicas values in order, consecutive duplicates removed."""
        seq: list[int] = []
        for s in self.samples:
            r = s["replicas"]
            if r is not None and (not seq or seq[-1] != r):
                seq.append(r)
        return seq

    def ratios(self) -> list[float]:
        out = []
        for s in self.samples:
            r = s["autoscaling"].get("currentRatio")
            if r is not None:
                with contextlib.suppress(ValueError):
                    out.append(float(r))
        return out

    def first_time(self, predicate: Callable[[dict[str, Any]], bool], after: float = 0.0) -> float | None:
        for s in self.samples:
            if s["t"] >= after and predicate(s):
                return s["t"]
        return None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def timeline(self) -> str:
        lines, last = [], None
        for s in self.samples:
            a = s["autoscaling"]
            key = (s["replicas"], s["ready"], a.get("currentRatio"), a.get("reason"))
            if key != last:
                lines.append(f"{s['t']:6.1f}s replicas={s['replicas']} ready={s['ready']} "
                             f"ratio={a.get('currentRatio')} reason={a.get('reason')}: {a.get('message', '')[:120]}")
                last = key
        return "\n".join(lines)


class _JunkHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"<html>not prometheus {{{ nv_inference_queue_duration_us{model=\x00 garbage\n\xff\xfe"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def junk_metrics_server(host: str = "127.0.0.1"):
    """An HTTP server answering 200 with garbage on every path. Yields (host, port)."""
    server = http.server.ThreadingHTTPServer((host, 0), _JunkHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[:2]
    finally:
        server.shutdown()
        server.server_close()


def prometheus_retarget(config_path: str, url: str, namespace: str, pods: dict[str, str]) -> None:
    """Rewrite the harness' Prometheus config so it scrapes ``pods`` ({name: addr}) with labels
    namespace/pod (what a PodMonitor gives), then hot-reload it (--web.enable-lifecycle)."""
    cfg = yaml.safe_load(Path(config_path).read_text())
    cfg["scrape_configs"][0]["static_configs"] = [
        {"targets": [addr], "labels": {"namespace": namespace, "pod": pod}} for pod, addr in sorted(pods.items())
    ]
    Path(config_path).write_text(yaml.safe_dump(cfg))
    req = urllib.request.Request(f"{url}/-/reload", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback only
        r.read()
