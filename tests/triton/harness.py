"""Real-process harness for the autoscaling tests (no mocks): a real Prometheus, a bounded load generator of
generate requests and a TCP forwarder.

Everything binds to 127.0.0.0/8.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from devcluster.ports import free_port  # also imported from here by the e2e and OpenAI tests


def _check_loopback(host: str) -> None:
    if not host.startswith("127."):
        raise ValueError(f"{host}: the harness binds to 127.0.0.0/8 only")


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} while waiting for {url}")
        try:
            code, _ = http_get(url, 1.0)
            if code == 200:
                return
            last = code
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout_s}s (last: {last})")


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL) if hasattr(os, "killpg") else proc.kill()
        proc.wait(5)


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


@dataclasses.dataclass(frozen=True)
class PrometheusEndpoint:
    url: str
    config_path: str


@contextlib.contextmanager
def run_prometheus(
    scrape_targets: dict[str, Sequence[str]] | Sequence[str],
    rule_files: Sequence[str | os.PathLike] = (),
    *, host: str = "127.0.0.1", job: str = "triton", startup_timeout_s: float = 30.0,
    query_log: str | os.PathLike | None = None,
) -> Iterator[PrometheusEndpoint]:
    """Run the Debian ``prometheus`` binary: scrape/evaluation every 1 s, tmp storage.

    ``scrape_targets``: ``["127.0.0.1:8002", ...]`` or ``{pod_name: ["addr:port"]}``;
    with a dict each target gets labels ``namespace="default"``, ``pod=<pod_name>``
    (what a PodMonitor's relabelling gives in a cluster). ``query_log``: a file where
    Prometheus writes every query it runs, one JSON line each (its own query log).
    Skips the test when the binary is absent.
    """
    import pytest
    import yaml

    _check_loopback(host)
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("prometheus binary not found: apt-get install -y prometheus (Debian package) to run this test")
    tmp = tempfile.mkdtemp(prefix="prom-")
    port = free_port(host)
    if isinstance(scrape_targets, dict):
        static = [{"targets": list(t), "labels": {"namespace": "default", "pod": pod}} for pod, t in scrape_targets.items()]
    else:
        static = [{"targets": list(scrape_targets)}]
    rules = []
    for i, rf in enumerate(rule_files):
        dst = os.path.join(tmp, f"rules-{i}.yml")
        shutil.copy(rf, dst)
        rules.append(dst)
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s",
                   **({"query_log_file": str(query_log)} if query_log else {})},
        "rule_files": rules,
        "scrape_configs": [{"job_name": job, "static_configs": static}],
    }
    cfg_path = os.path.join(tmp, "prometheus.yml")
    Path(cfg_path).write_text(yaml.safe_dump(cfg))
    log = open(os.path.join(tmp, "prometheus.log"), "wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg_path}", f"--storage.tsdb.path={tmp}/data",
         f"--web.listen-address={host}:{port}", "--storage.tsdb.retention.time=1h",
         "--web.enable-lifecycle", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://{host}:{port}"
    try:
        try:
            wait_http(f"{url}/-/ready", startup_timeout_s, proc)
        except Exception as exc:
            log.flush()
            tail = Path(log.name).read_text(errors="replace")[-3000:]
            raise RuntimeError("prometheus did not start:\n" + tail) from exc
        yield PrometheusEndpoint(url, cfg_path)
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@dataclasses.dataclass
class LoadCounts:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    by_pod: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    errors: list[str] = dataclasses.field(default_factory=list)


class EndpointLoad:
    """Closed-loop generate requests (Triton's generate endpoint, JSON) from ``clients`` threads through
    ``endpoints()`` ({name: "host:port"}, read before each request), as a gateway spreads
    them: each request goes to the endpoint with the fewest outstanding requests (ties: round robin). Only the
    first ``active`` clients send, each waiting ``think_s`` after a reply (both settable: a load step up or down);
    the others idle. Every request is counted:
    ok = HTTP 200 with generated text, anything else (status, refused connection, cut stream) failed.
    Bounded: at most ``max_requests`` and ``max_s`` seconds."""

    def __init__(self, endpoints: Callable[[], dict[str, str]], model: str, clients: int, max_tokens: int,
                 max_requests: int = 100_000, max_s: float = 600) -> None:
        self.endpoints, self.model = endpoints, model
        self.clients, self.max_tokens = clients, max_tokens
        self.max_requests, self.max_s = max_requests, max_s
        self.active = clients
        self.think_s = 0.0
        self.counts = LoadCounts()
        self._outstanding: collections.Counter = collections.Counter()  # address -> requests in flight
        self._turn = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def outstanding(self, address: str) -> int:
        with self._lock:
            return self._outstanding[address]

    def in_flight(self) -> int:
        with self._lock:
            return sum(self._outstanding.values())

    def __enter__(self) -> EndpointLoad:
        self._end = time.monotonic() + self.max_s
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop sending; wait for every request in flight to finish (each has a 120 s client timeout)."""
        self._stop.set()
        for t in self._threads:
            t.join(150)

    def _pick(self) -> tuple[str, str] | None:
        eps = self.endpoints()
        if not eps:
            return None
        with self._lock:
            items = sorted(eps.items())
            self._turn += 1
            rotated = items[self._turn % len(items):] + items[:self._turn % len(items)]
            pod, address = min(rotated, key=lambda kv: self._outstanding[kv[1]])
            self._outstanding[address] += 1
            return pod, address

    def _client(self, i: int) -> None:
        n = 0
        while not self._stop.is_set() and time.monotonic() < self._end:
            if i >= self.active or self.counts.sent >= self.max_requests:
                time.sleep(0.05)
                continue
            picked = self._pick()
            if picked is None:
                time.sleep(0.05)
                continue
            pod, address = picked
            _check_loopback(address.rsplit(":", 1)[0])
            n += 1
            error = None
            try:
                body = json.dumps({"text_input": f"client {i} request {n} asks a question of a few words",
                                   "max_tokens": self.max_tokens}).encode()
                req = urllib.request.Request(f"http://{address}/v2/models/{self.model}/generate", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback only
                    reply = json.loads(r.read().decode())
                if not reply.get("text_output"):
                    error = f"{pod}: no text_output in {reply}"
            except urllib.error.HTTPError as exc:
                error = f"{pod}: HTTP {exc.code}: {exc.read()[:200]!r}"
            except Exception as exc:  # noqa: BLE001 - every failure is counted
                error = f"{pod}: {type(exc).__name__}: {exc}"
            with self._lock:
                self._outstanding[address] -= 1
                self.counts.sent += 1
                self.counts.by_pod[pod] += 1
                if error is None:
                    self.counts.ok += 1
                else:
                    self.counts.failed += 1
                    self.counts.errors.append(error[:300])
            if self.think_s:
                self._stop.wait(self.think_s)


class Forwarder:
    """A tiny threaded TCP forwarder ``listen_host:listen_port -> target_host:target_port``."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
        _check_loopback(listen_host)
        _check_loopback(target_host)
        self.target = (target_host, target_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((listen_host, listen_port))
        self.sock.listen(64)
        self.address = self.sock.getsockname()
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            try:
                u = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._conns.update((c, u))
            threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            a.settimeout(None)
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for s in (a, b):
                    if s in self._conns:
                        self._conns.discard(s)
                        s.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        with self._lock:
            for s in list(self._conns):
                with contextlib.suppress(OSError):
                    s.close()
            self._conns.clear()


@contextlib.contextmanager
def forward(listen_host: str, listen_port: int, target_host: str, target_port: int) -> Iterator[tuple[str, int]]:
    """Make ``target`` appear at ``listen_host:listen_port`` (port 0 = pick one). Yields the bound address."""
    f = Forwarder(listen_host, listen_port, target_host, target_port)
    try:
        yield f.address
    finally:
        f.close()
