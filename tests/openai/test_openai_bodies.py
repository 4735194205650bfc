"""Request bodies at the OpenAI frontend, the program as the serving pod runs it: the ConfigMap's two files alone,
its own process, the rendered container's arguments. Hostile framing is refused before anything is read, and the
memory held stays inside the rendered limit with the body budget full (docs/security.md, "Request bodies"). No
Triton is needed: what is measured happens before a request reaches it (here it is refused: 503)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "triton")]
from harness import _stop, free_port, wait_http  # noqa: E402
from hostile_http import STREAM_BYTES, hostile_cases, memory_kib, quantity_bytes, send_raw  # noqa: E402
from llmapi_support import REF, backend_spec  # noqa: E402
from servers import local_args  # noqa: E402

from llmbackend.api.v1alpha1 import PlanStatus  # noqa: E402
from llmbackend.render import openai as rendered  # noqa: E402
from llmbackend.render.workloads import RolloutStrategy, desired_objects  # noqa: E402

CAP = rendered.MAX_BODY_BYTES
MODEL = "llama-3.1-8b"
HOST = "127.0.0.1"


@contextlib.contextmanager
def frontend_process(workdir: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    objects = desired_objects(REF, backend_spec(4), plan, 1, RolloutStrategy("Recreate"))
    data = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == rendered.CONTAINER_NAME)
    volume = next(v for v in pod["volumes"] if v["name"] == rendered.VOLUME_NAME)
    for item in volume["configMap"]["items"]:  # what the pod mounts at FRONTEND_DIR, and only that
        (workdir / item["path"]).write_text(data[item["key"]])
    assert container["resources"]["limits"]["memory"] == rendered.MEMORY_LIMIT
    port = free_port()
    nothing = free_port()  # no Triton listens here
    args = local_args(container["args"], f"{HOST}:{nothing}", f"http://{HOST}:{nothing}/metrics", str(workdir), port)
    log = tempfile.NamedTemporaryFile(prefix="openai-frontend-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, str(workdir / rendered.FRONTEND_KEY), *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PYTHONPATH": ""})
    try:
        wait_http(f"http://{HOST}:{port}/v1/models", 30, proc)
        yield proc, port
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="module")
def frontend(tmp_path_factory):
    with frontend_process(tmp_path_factory.mktemp("frontend")) as running:
        yield running


@pytest.mark.parametrize("case", sorted(hostile_cases(CAP)))
def test_hostile_framing_is_refused_before_the_body_is_read(frontend, case):
    proc, port = frontend
    headers, body, status = hostile_cases(CAP)[case]
    answer = send_raw(HOST, port, "/v1/completions", headers, body)
    assert answer.status == status, answer.head
    assert answer.seconds < 2, f"{answer.seconds:.1f}s"
    assert answer.closed, "what follows a refused framing must not be read as the next request"
    assert proc.poll() is None


@pytest.mark.parametrize("framing", [("Content-Length: -1", b""), ("Transfer-Encoding: chunked", b"-1\r\n")])
def test_a_96_mib_stream_behind_a_negative_length_is_not_read(frontend, framing):
    """Before: rfile.read(-1) read until the client stopped (+194 MiB for a 96 MiB stream)."""
    proc, port = frontend
    before = memory_kib(proc.pid)["VmRSS"]
    answer = send_raw(HOST, port, "/v1/completions", framing[0], framing[1], stream_after=STREAM_BYTES)
    after = memory_kib(proc.pid)["VmRSS"]
    assert answer.status == 400 and answer.seconds < 2, answer
    assert after - before < 8 << 10, f"RSS grew {(after - before) >> 10} MiB"


def _nested_json(size: int, depth: int = 50) -> bytes:
    """A valid request whose extra field is the most memory per byte JSON gives CPython: nested empty lists."""
    unit = b"[" * depth + b"]" * depth
    # under a field the frontend ignores whatever it holds (an unknown one would be refused, still after parsing)
    head, tail = b'{"model": "' + MODEL.encode() + b'", "prompt": "hi", "metadata": [', b"]}"
    count = (size - len(head) - len(tail)) // (len(unit) + 1)
    return head + b",".join([unit] * count) + tail


def test_memory_stays_inside_the_rendered_limit_with_the_body_budget_full(tmp_path):
    """BODY_BUDGET_BYTES of the worst bodies at once (bodies at the cap, parsed at their largest), and one more
    waiting: it waits for room (BODY_WAIT_S), then gets 503 with Retry-After; the peak memory stays under the
    rendered container limit."""
    limit = quantity_bytes(rendered.MEMORY_LIMIT)
    at_cap = rendered.BODY_BUDGET_BYTES // CAP
    body = _nested_json(CAP)
    assert len(body) <= CAP
    with frontend_process(tmp_path) as (proc, port):
        baseline = memory_kib(proc.pid)["VmRSS"] << 10
        socks = []
        for _ in range(at_cap):  # every body but its last byte: the budget is reserved, nothing parsed yet
            sock = socket.create_connection((HOST, port), timeout=60)
            sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                         + body[:-1])
            socks.append(sock)
        time.sleep(1)
        started = time.monotonic()
        late = send_raw(HOST, port, "/v1/completions", f"Content-Length: {len(body)}", body, timeout_s=60)
        waited = time.monotonic() - started
        assert late.status == 503 and b"retry-after: 1" in late.head.lower(), late.head
        assert waited >= 5, f"refused after {waited:.1f}s: it should wait for room first"
        answers: list[bytes] = []

        def finish(sock: socket.socket) -> None:
            sock.sendall(body[-1:])
            answers.append(sock.recv(65536))

        threads = [threading.Thread(target=finish, args=(s,)) for s in socks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        peak = memory_kib(proc.pid)["VmHWM"] << 10
        for sock in socks:
            sock.close()
    print(f"openai frontend: baseline {baseline >> 20} MiB, peak {peak >> 20} MiB with {at_cap} bodies of "
          f"{len(body) >> 20} MiB parsed; rendered limit {limit >> 20} MiB")
    # they were read and parsed: Triton is not there, so 503 (not 400 for the body, not 413)
    assert len(answers) == at_cap and all(a.startswith(b"HTTP/1.1 503") for a in answers), answers
    assert peak <= limit, f"peak {peak >> 20} MiB over the rendered limit {limit >> 20} MiB"
