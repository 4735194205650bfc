"""Support for tests/e2e/test_autoscaling.py: make kwok pods' metrics endpoints real.

kwok gives pods loopback IPs (127.0.1.0/24) but runs nothing in them. `PodForwards` watches a
backend's pods and binds a TCP forwarder on ``<podIP>:8002`` for each, to a real Triton's metrics
port (one Triton can stand behind every pod: the queue/compute ratio is invariant to duplicated
counters). `Recorder` polls the Deployment and the backend's status.autoscaling to keep a history.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))

from harness import Forwarder  # noqa: E402

from llmbackend.controller.kube import Kube, load_configuration  # noqa: E402

log = logging.getLogger("autoscale_support")
METRICS_PORT = 8002


def server_selector(backend: str) -> str:
    return f"llmbackend.dev/backend={backend},app.kubernetes.io/component=server"


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
