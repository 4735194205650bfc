"""Request bodies at the activator, the program as its pod runs it (the file alone, its own process, the rendered
body arguments): hostile framing is refused before anything is read, and the memory held stays inside the rendered
limit with the body budget full (docs/security.md, "Request bodies")."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
from harness import _stop, wait_http  # noqa: E402
from hostile_http import STREAM_BYTES, hostile_cases, memory_kib, quantity_bytes, send_raw  # noqa: E402
from test_activator_process import LISTEN, UPSTREAM, metric, upstream, wait_for  # noqa: E402

from devcluster.ports import free_ports  # noqa: E402
from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC  # noqa: E402
from llmbackend.api.v1alpha1 import LLMBackendSpec  # noqa: E402
from llmbackend.render import activator as rendered  # noqa: E402
from llmbackend.serving import activator as activator_module  # noqa: E402

CAP = rendered.MAX_BODY_BYTES
SPEC = LLMBackendSpec.model_validate({
    "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
    "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}})


@contextlib.contextmanager
def activator_process() -> Iterator[tuple[subprocess.Popen, int, str]]:
    """The activator with the rendered arguments (addresses made local): (process, port, metrics URL)."""
    port, metrics_port = free_ports(2, LISTEN)
    args = [a for a in rendered.args(SPEC, "llama", "ns") if not a.startswith(("--port=", "--upstream=", "--metrics-port="))]
    assert f"--max-body-bytes={CAP}" in args and f"--body-budget-bytes={rendered.BODY_BUDGET_BYTES}" in args
    log = tempfile.NamedTemporaryFile(prefix="activator-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, activator_module.__file__, f"--host={LISTEN}", f"--port={port}",
                             f"--upstream={UPSTREAM}", f"--metrics-port={metrics_port}", *args],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": ""})  # no operator package: the file and its helper
    try:
        wait_http(f"http://{LISTEN}:{metrics_port}/readyz", 20, proc)
        yield proc, port, f"http://{LISTEN}:{metrics_port}"
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="module")
def activator():
    with activator_process() as running:
        yield running


@pytest.mark.parametrize("case", sorted(hostile_cases(CAP)))
def test_hostile_framing_is_refused_before_the_body_is_read(activator, case):
    proc, port, _ = activator
    headers, body, status = hostile_cases(CAP)[case]
    with upstream(port):  # a replica is up: nothing is held, so a refusal is the framing's
        answer = send_raw(LISTEN, port, "/v1/completions", headers, body)
    assert answer.status == status, answer.head
    assert answer.seconds < 2, f"{answer.seconds:.1f}s"
    assert answer.closed, "what follows a refused framing must not be read as the next request"
    assert proc.poll() is None


@pytest.mark.parametrize("framing", [("Content-Length: -1", b""), ("Transfer-Encoding: chunked", b"-1\r\n")])
def test_a_96_mib_stream_behind_a_negative_length_is_not_read(activator, framing):
    """Before: rfile.read(-1) / a chunk of -1 read until the client stopped (+194 MiB for 96 MiB)."""
    proc, port, _ = activator
    before = memory_kib(proc.pid)["VmRSS"]
    answer = send_raw(LISTEN, port, "/v1/completions", framing[0], framing[1], stream_after=STREAM_BYTES)
    after = memory_kib(proc.pid)["VmRSS"]
    assert answer.status == 400 and answer.seconds < 2, answer
    assert after - before < 8 << 10, f"RSS grew {(after - before) >> 10} MiB"


def _hold(port: int, size: int, chunked: bool) -> socket.socket:
    """A request with a `size`-byte body, sent whole; no replica: the activator holds it (with its body)."""
    sock = socket.create_connection((LISTEN, port))
    head = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{head}\r\n\r\n".encode())
    body = b"x" * size
    sock.sendall(f"{size:x}\r\n".encode() + body + b"\r\n0\r\n\r\n" if chunked else body)
    return sock


def test_memory_stays_inside_the_rendered_limit_with_the_body_budget_full():
    """Before: 20 bodies of 16 MiB held at once took 342 MiB against the pod's 256 MiB. Now the budget admits
    BODY_BUDGET_BYTES of bodies (8 at the cap, half of them chunked), the next gets 503 with Retry-After at once,
    and the peak memory of the process stays under the rendered limit, also as bodies leave and others come."""
    limit = quantity_bytes(rendered.RESOURCES["limits"]["memory"])
    at_cap = rendered.BODY_BUDGET_BYTES // CAP
    body_bytes = f"{ACTIVATOR_HELD_METRIC}_body_bytes"
    with activator_process() as (proc, port, metrics_url):
        baseline = memory_kib(proc.pid)["VmRSS"] << 10
        held = [_hold(port, CAP, chunked=i % 2 == 1) for i in range(at_cap)]
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == at_cap, "the bodies at the cap held", 60)
        assert metric(metrics_url, body_bytes) == rendered.BODY_BUDGET_BYTES
        # the budget is full: one more body is refused at once, not read
        answer = send_raw(LISTEN, port, "/v1/completions", f"Content-Length: {CAP}", b"", stream_after=CAP)
        assert answer.status == 503 and answer.seconds < 2, answer
        assert b"retry-after: 5" in answer.head.lower(), answer.head
        assert metric(metrics_url, f"{ACTIVATOR_HELD_METRIC}_body_refused_total") == 1
        for sock in held[: at_cap // 2]:
            sock.close()  # half of them leave: their budget comes back
        wait_for(lambda: metric(metrics_url, body_bytes) == rendered.BODY_BUDGET_BYTES - at_cap // 2 * CAP,
                 "the departed clients' budget given back")
        held[: at_cap // 2] = [_hold(port, CAP, chunked=True) for _ in range(at_cap // 2)]
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == at_cap, "the budget full again", 60)
        with upstream(port):  # a replica comes: every held body is forwarded and its budget given back
            wait_for(lambda: metric(metrics_url, body_bytes) == 0, "the held bodies forwarded", 60)
        peak = memory_kib(proc.pid)["VmHWM"] << 10
        for sock in held:
            sock.close()
    print(f"activator: baseline {baseline >> 20} MiB, peak {peak >> 20} MiB with {at_cap} bodies of {CAP >> 20} MiB "
          f"held; rendered limit {limit >> 20} MiB")
    assert peak <= limit, f"peak {peak >> 20} MiB over the rendered limit {limit >> 20} MiB"


def test_the_budget_holds_many_small_bodies_beside_each_other():
    """The budget counts bytes: a thousand small requests are held at once (the --max-held bound), as before."""
    clients = 300
    with activator_process() as (proc, port, metrics_url):
        held = []
        threads = [threading.Thread(target=lambda: held.append(_hold(port, 200, chunked=False))) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        wait_for(lambda: metric(metrics_url, ACTIVATOR_HELD_METRIC) == clients, "every small request held", 60)
        rss = memory_kib(proc.pid)["VmHWM"] << 10
        for sock in held:
            sock.close()
    assert rss <= rendered.BASELINE_MEMORY_BYTES, f"{clients} held requests took {rss >> 20} MiB"
