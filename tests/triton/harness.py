"""Real-process harness for the autoscaling tests (no mocks): a fake LLM on a real
Triton (pytriton), a real Prometheus, a bounded load generator and a TCP forwarder.

Everything binds to 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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


@dataclasses.dataclass(frozen=True)
class TritonEndpoints:
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    model: str

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def metrics_address(self) -> str:
        return f"{self.host}:{self.metrics_port}"


@contextlib.contextmanager
def run_fake_llm_triton(
    *, host: str = "127.0.0.1", capacity: int = 2, token_delay_s: float = 0.01, model: str = "llm",
    startup_timeout_s: float = 90.0, log_path: str | os.PathLike | None = None,
) -> Iterator[TritonEndpoints]:
    """Start tests/triton/fake_llm.py in its own process group with a fresh workspace."""
    _check_loopback(host)
    ep = TritonEndpoints(host, free_port(host), free_port(host), free_port(host), model)
    tmp = tempfile.mkdtemp(prefix="fake-llm-")
    ws = os.path.join(tmp, "workspace")  # must not exist yet
    log = open(log_path or os.path.join(tmp, "triton.log"), "wb")
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fake_llm.py"), "--address", host,
         "--http-port", str(ep.http_port), "--grpc-port", str(ep.grpc_port), "--metrics-port", str(ep.metrics_port),
         "--workspace", ws, "--capacity", str(capacity), "--token-delay", str(token_delay_s), "--model", model],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        try:
            wait_http(f"http://{ep.http_url}/v2/models/{model}/ready", startup_timeout_s, proc)
            wait_http(ep.metrics_url, 20, proc)
        except Exception as exc:
            log.flush()
            tail = Path(log.name).read_bytes()[-3000:].decode(errors="replace")
            raise RuntimeError(f"fake LLM Triton did not start:\n{tail}") from exc
        yield ep
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


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
) -> Iterator[PrometheusEndpoint]:
    """Run the Debian ``prometheus`` binary: scrape/evaluation every 1 s, tmp storage.

    ``scrape_targets``: ``["127.0.0.1:8002", ...]`` or ``{pod_name: ["addr:port"]}``;
    with a dict each target gets labels ``namespace="default"``, ``pod=<pod_name>``
    (what a PodMonitor's relabelling gives in a cluster). Skips the test when the
    binary is absent.
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
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
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
            raise RuntimeError("prometheus did not start:\n" + Path(log.name).read_text(errors="replace")[-3000:]) from exc
        yield PrometheusEndpoint(url, cfg_path)
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@dataclasses.dataclass
class LoadResult:
    sent: int = 0
    ok: int = 0
    errors: int = 0
    latencies_s: list = dataclasses.field(default_factory=list)
    last_error: str | None = None


def load(url: str, model: str, concurrency: int, duration_s: float, tokens: int = 10,
         stop: threading.Event | None = None) -> LoadResult:
    """Closed-loop load: ``concurrency`` threads, each sends one request at a time
    (tritonclient http) for ``duration_s`` (or until ``stop`` is set). Blocking."""
    import tritonclient.http as httpclient

    host = url.split("://")[-1].split(":")[0]
    _check_loopback(host)
    res = LoadResult()
    lock = threading.Lock()
    end = time.time() + duration_s
    stop = stop or threading.Event()

    def worker() -> None:
        client = httpclient.InferenceServerClient(url.split("://")[-1], connection_timeout=30, network_timeout=60)
        inp = httpclient.InferInput("tokens", [1, 1], "INT32")  # [batch, 1]
        inp.set_data_from_numpy(np.array([[tokens]], dtype=np.int32))
        try:
            while time.time() < end and not stop.is_set():
                t0 = time.time()
                try:
                    client.infer(model, [inp])
                    ok = True
                except Exception as e:  # noqa: BLE001
                    ok = False
                    res.last_error = str(e)[:300]
                    time.sleep(0.05)
                with lock:
                    res.sent += 1
                    if ok:
                        res.ok += 1
                        res.latencies_s.append(time.time() - t0)
                    else:
                        res.errors += 1
        finally:
            client.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + 120)
    return res


@contextlib.contextmanager
def background_load(url: str, model: str, concurrency: int, duration_s: float = 3600, tokens: int = 10) -> Iterator[LoadResult]:
    """``load`` in a thread; stops when the block exits."""
    stop = threading.Event()
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("r", load(url, model, concurrency, duration_s, tokens, stop)), daemon=True)
    th.start()
    holder = LoadResult()
    try:
        yield holder
    finally:
        stop.set()
        th.join(60)
        r = box.get("r")
        if r is not None:
            holder.__dict__.update(r.__dict__)


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
