"""The activator program as a pod runs it: the file alone, its own process, bound to loopback. The upstream (the
Service of the serving pods) is a plain HTTP server on another loopback address and the same port number, started
and stopped by the test to play "no replica" and "a replica is Ready"."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
from harness import _stop, http_get, wait_http  # noqa: E402

from devcluster.ports import free_ports  # noqa: E402
from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC  # noqa: E402
from llmbackend.render import activator as rendered  # noqa: E402
from llmbackend.serving import activator as activator_module  # noqa: E402

PROGRAM = activator_module.__file__
LISTEN = "127.0.0.1"
UPSTREAM = "127.0.0.2"  # the serving Service's stand-in: same port numbers, another address


@contextlib.contextmanager
def run_activator(port: int, metrics_port: int, *extra: str) -> Iterator[str]:
    log = tempfile.NamedTemporaryFile(prefix="activator-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, PROGRAM, f"--host={LISTEN}", f"--port={port}", f"--upstream={UPSTREAM}",
                             f"--metrics-port={metrics_port}", f"--held-metric={ACTIVATOR_HELD_METRIC}",
                             f"--max-body-bytes={rendered.MAX_BODY_BYTES}",
                             f"--body-budget-bytes={rendered.BODY_BUDGET_BYTES}",
                             f"--max-header-bytes={rendered.MAX_HEADER_BYTES}",
                             f"--header-timeout={rendered.HEADER_TIMEOUT_S}",
                             f"--max-connections={rendered.MAX_CONNECTIONS}",
                             f"--max-metrics-connections={rendered.METRICS_CONNECTIONS}", *extra],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": ""})  # no operator package: the file alone
    try:
        wait_http(f"http://{LISTEN}:{metrics_port}/readyz", 20, proc)
        yield f"http://{LISTEN}:{metrics_port}"
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)


def metric(metrics_url: str, name: str) -> float:
    _, body = http_get(f"{metrics_url}/metrics")
    match = re.search(rf"^{re.escape(name)} (\S+)$", body.decode(), re.M)
    assert match, body
    return float(match.group(1))


def wait_for(check, what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Upstream(BaseHTTPRequestHandler):
    """Echoes the request, or streams server-sent events; the second event waits for the test's go."""

    protocol_version = "HTTP/1.1"
    go = threading.Event()

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in (b"data: one\n\n", None, b"data: [DONE]\n\n"):
                if event is None:
                    assert self.go.wait(30)
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        data = json.dumps({"path": self.path, "body": body.decode(), "x-test": self.headers.get("X-Test")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Replica(ThreadingHTTPServer):
    # A serving replica's listener has a real accept backlog (Triton's HTTP server, uvicorn: hundreds or more);
    # Python's default of 5 drops connections when a thousand held requests are forwarded at once, and on a loaded
    # machine their connects back off for seconds each (the caps test's forwarding then ran past its 120 s)
    request_queue_size = 1024


@contextlib.contextmanager
def upstream(port: int) -> Iterator[None]:
    server = _Replica((UPSTREAM, port), Upstream)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def post(port: int, path: str, body: bytes, timeout: float = 60) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(LISTEN, port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "X-Test": "kept"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
def ports() -> tuple[int, int]:
    return tuple(free_ports(2, LISTEN))


def test_held_request_is_forwarded_once_a_replica_accepts(ports):
    port, metrics_port = ports
    with run_activator(port, metrics_port) as metrics_url:
        assert json.loads(http_get(f"{metrics_url}/upstream")[1]) == {str(port): False}
        result: dict = {}
        client = threading.Thread(target=lambda: result.update(r=post(port, "/v1/completions?x=1", b'{"prompt": "hi"}')))
        client.start()
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == 1, "the request to be held")
        assert client.is_alive()
        with upstream(port):
            client.join(30)
            assert not client.is_alive()
            assert json.loads(http_get(f"{metrics_url}/upstream")[1]) == {str(port): True}
            status, body = result["r"]
            assert status == 200
            assert json.loads(body) == {"path": "/v1/completions?x=1", "body": '{"prompt": "hi"}', "x-test": "kept"}
            assert metric(metrics_url, ACTIVATOR_HELD_METRIC) == 0
            assert metric(metrics_url, f"{ACTIVATOR_HELD_METRIC}_forwarded_total") == 1
            # With a replica up, requests pass straight through and are never counted as held.
            assert post(port, "/v1/models", b"")[0] == 200
            assert metric(metrics_url, f"{ACTIVATOR_HELD_METRIC}_forwarded_total") == 1


def test_streamed_response_is_relayed_as_it_arrives(ports):
    port, metrics_port = ports
    Upstream.go.clear()
    with run_activator(port, metrics_port), upstream(port):
        conn = http.client.HTTPConnection(LISTEN, port, timeout=30)
        conn.request("POST", "/v1/stream", body=b"{}", headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        # The first event arrives while the upstream still holds the second: nothing is buffered.
        assert resp.read1(65536) == b"data: one\n\n"
        Upstream.go.set()
        assert resp.read() == b"data: [DONE]\n\n"
        conn.close()


def test_hold_timeout_answers_503_and_counts_it(ports):
    port, metrics_port = ports
    with run_activator(port, metrics_port, "--hold-timeout=1") as metrics_url:
        status, body = post(port, "/v1/chat/completions", b"{}")
        assert status == 503
        error = json.loads(body)["error"]
        assert "no serving replica became ready within 1s" in error["message"] and error["code"] == "no_replica"
        assert metric(metrics_url, f"{ACTIVATOR_HELD_METRIC}_timed_out_total") == 1
        assert metric(metrics_url, ACTIVATOR_HELD_METRIC) == 0


def test_full_queue_rejects_at_once_and_a_departed_client_is_no_longer_held(ports):
    port, metrics_port = ports
    with run_activator(port, metrics_port, "--max-held=1") as metrics_url:
        first = socket.create_connection((LISTEN, port))
        first.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == 1, "the first request to be held")
        status, body = post(port, "/v1/completions", b"{}")
        assert status == 503 and "already waiting" in json.loads(body)["error"]["message"]
        assert metric(metrics_url, f"{ACTIVATOR_HELD_METRIC}_rejected_total") == 1
        first.close()
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == 0, "the departed client to be dropped")


def test_many_held_requests_are_all_forwarded(ports):
    port, metrics_port = ports
    clients = 40
    with run_activator(port, metrics_port) as metrics_url:
        results: list = []

        def client(i: int) -> None:
            try:
                results.append(post(port, f"/v1/completions?i={i}", b"{}"))
            except OSError as exc:
                results.append((None, repr(exc)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == clients, "every request to be held")
        with upstream(port):
            for t in threads:
                t.join(60)
        assert [r for r in results if r[0] != 200] == []
        assert sorted(json.loads(body)["path"] for status, body in results if status == 200) == sorted(
            f"/v1/completions?i={i}" for i in range(clients))
        assert metric(metrics_url, f"{ACTIVATOR_HELD_METRIC}_forwarded_total") == clients
        assert metric(metrics_url, ACTIVATOR_HELD_METRIC) == 0


def test_a_replica_that_closes_before_answering_leaves_the_request_held(ports):
    port, metrics_port = ports
    with run_activator(port, metrics_port) as metrics_url:
        closer = socket.create_server((UPSTREAM, port))  # accepts connections, answers none
        stop = threading.Event()

        def close_all() -> None:
            closer.settimeout(0.1)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    conn, _ = closer.accept()
                    conn.recv(65536)
                    conn.close()

        thread = threading.Thread(target=close_all, daemon=True)
        thread.start()
        result: dict = {}
        client = threading.Thread(target=lambda: result.update(r=post(port, "/v1/completions", b'{"n": 1}')))
        client.start()
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == 1, "the request to be held")
        assert json.loads(http_get(f"{metrics_url}/upstream")[1]) == {str(port): True}, "it accepts connections"
        stop.set()
        thread.join(5)
        closer.close()
        with upstream(port):
            client.join(30)
            assert result["r"][0] == 200 and json.loads(result["r"][1])["body"] == '{"n": 1}'
        assert metric(metrics_url, ACTIVATOR_HELD_METRIC) == 0


def test_requests_go_to_the_upstream_only_whatever_they_name(ports):
    """The request line's target, the Host header and an absolute URI never choose where the activator connects: a
    listener at the address they name sees no connection (docs/security.md, "Request bodies at the serving
    endpoints")."""
    port, metrics_port = ports
    decoy = socket.create_server(("127.0.0.3", port))
    decoy.settimeout(0.1)
    targets = [f"http://127.0.0.3:{port}/v1/completions", f"//127.0.0.3:{port}/v1/completions",
               "/v1/../../completions"]
    with run_activator(port, metrics_port), upstream(port):
        for target in targets:
            sock = socket.create_connection((LISTEN, port), timeout=10)
            sock.sendall(f"POST {target} HTTP/1.1\r\nHost: 127.0.0.3:{port}\r\nContent-Length: 2\r\n\r\n{{}}".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200"), target  # the upstream's echo answered
            sock.close()
        sock = socket.create_connection((LISTEN, port), timeout=10)
        sock.sendall(f"CONNECT 127.0.0.3:{port} HTTP/1.1\r\nHost: 127.0.0.3:{port}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 501")
        sock.close()
    with pytest.raises(TimeoutError):
        decoy.accept()
    decoy.close()
