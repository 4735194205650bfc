"""The LLM API model against the engine semantics TensorRT-LLM really has (dev/standins/tensorrt_llm follows 1.2.1):
on a REAL tritonserver loading the EXACT rendered files.

- Under sustained load the iteration-stats stream never ends (one record per iteration with work): the gauges must
  still move while the load lasts (waiting ~ the backlog, active == the engine's slots).
- `numQueuedRequests` is the engine's intake queue only: the waiting count has to come from the model's own books.
- A request cancelled while it waits for a slot gets no response from the engine: the model must answer it itself
  (CANCELLED), count it finished, and the server must then stop within seconds, not after its exit timeout.
- Before the first request the model must not poll the stats stream (TensorRT-LLM prints a warning per call).
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

import numpy as np
import pytest
from llmapi_support import backend_spec, generate, metric, metrics, rendered_repository

from devcluster.tritonserver import available, run_tritonserver
from llmbackend.api import engine_metrics as em

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

SLOTS = 4
ITERATION_S = 0.02
STANDINS = os.path.join(os.path.dirname(__file__), "..", "..", "dev", "standins")
NO_STATS_WARNING = "Iteration statistics are not available yet"


def _server(tmp_path, exit_timeout_s: int = 5):
    _, repo = rendered_repository(backend_spec(SLOTS), tmp_path / "repo")
    env = dict(os.environ, TRTLLM_STANDIN_ITERATION_S=str(ITERATION_S))
    return run_tritonserver(repo, extra_pythonpath=[STANDINS], env=env, startup_timeout_s=120,
                            extra_args=[f"--exit-timeout-secs={exit_timeout_s}"], log_path=tmp_path / "triton.log")


def _gauges(srv, name: str) -> dict[str, float]:
    samples = metrics(srv)
    return {t: metric(samples, em.REQUEST_GAUGE, name, request_type=t) for t in ("waiting", "active", "scheduled")}


def _long_requests(srv, name: str, n: int, max_tokens: int) -> list[threading.Thread]:
    def one(i: int) -> None:
        generate(srv, name, {"text_input": f"long request {i}", "max_tokens": max_tokens}, timeout=120)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def test_gauges_follow_sustained_load_and_idle_replicas_do_not_poll_stats(tmp_path) -> None:
    backlog = 2 * SLOTS
    with _server(tmp_path) as srv:
        name = next(p.name for p in (tmp_path / "repo").iterdir() if (p / "config.pbtxt").is_file())
        time.sleep(3)  # idle, before any request: the model must not poll the stats stream
        warnings_before_load = (tmp_path / "triton.log").read_text(errors="replace").count(NO_STATS_WARNING)
        # 12 clients, 4 slots, 150 tokens x 20 ms = 3 s per request: a backlog of 8 for ~6 s.
        threads = _long_requests(srv, name, SLOTS + backlog, max_tokens=150)
        time.sleep(1.0)
        samples = []
        for _ in range(8):
            samples.append(_gauges(srv, name))
            time.sleep(0.25)
        for t in threads:
            t.join(120)
        time.sleep(2.5)  # the stats stream ends after its timeout; the gauges go back to idle
        idle = _gauges(srv, name)
    print(f"\ngauges under load (waiting, active): {[(s['waiting'], s['active']) for s in samples]}; idle {idle}")
    assert warnings_before_load == 0, f"the idle model polled the stats stream {warnings_before_load} times"
    assert max(s["active"] for s in samples) == SLOTS
    assert sum(1 for s in samples if s["active"] == SLOTS) >= len(samples) // 2, "active == slots under load"
    assert max(s["waiting"] for s in samples) >= 0.75 * backlog, "waiting ~ the backlog (not the intake queue)"
    assert idle == {"waiting": 0.0, "active": 0.0, "scheduled": 0.0}


def _grpc_inputs(prompt: str, max_tokens: int):
    import tritonclient.grpc as grpcclient

    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    tokens = grpcclient.InferInput("max_tokens", [1], "INT32")
    tokens.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
    return [text, tokens]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by the launcher) counts as stopped
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_request_cancelled_while_waiting_for_a_slot_ends_and_the_server_stops_in_seconds(tmp_path) -> None:
    import tritonclient.grpc as grpcclient

    with _server(tmp_path, exit_timeout_s=30) as srv:
        name = next(p.name for p in (tmp_path / "repo").iterdir() if (p / "config.pbtxt").is_file())
        before = metrics(srv)
        busy = _long_requests(srv, name, SLOTS, max_tokens=200)  # 4 s: every slot taken
        time.sleep(0.5)
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(name, _grpc_inputs("waits for a slot", 4), request_id="waiting-one")
        time.sleep(0.5)  # it waits inside the engine now
        client.stop_stream(cancel_requests=True)
        client.close()
        deadline = time.monotonic() + 3  # well before a slot frees (the busy requests run ~4 s)
        finished = metric(before, em.ENGINE_REQUESTS_METRIC, name)
        while time.monotonic() < deadline:
            finished_now = metric(metrics(srv), em.ENGINE_REQUESTS_METRIC, name)
            if finished_now > finished:
                break
            time.sleep(0.1)
        cancelled_counted = finished_now - finished
        for t in busy:
            t.join(60)
        time.sleep(2.5)
        after = metrics(srv)
        idle = _gauges(srv, name)
        failures = metric(after, em.ENGINE_FAILURES_METRIC, name) - metric(before, em.ENGINE_FAILURES_METRIC, name)
        total = metric(after, em.ENGINE_REQUESTS_METRIC, name) - finished
        start = time.monotonic()
        os.kill(srv.pid, signal.SIGTERM)
        while _alive(srv.pid) and time.monotonic() - start < 40:
            time.sleep(0.1)
        stop_s = time.monotonic() - start
    print(f"\ncancelled waiting request counted after <=3 s: {cancelled_counted}; finished {total}; idle {idle}; "
          f"server stopped {stop_s:.1f} s after SIGTERM (exit timeout 30 s)")
    assert cancelled_counted == 1, "the model ends a request cancelled while waiting (the engine never answers it)"
    assert total == SLOTS + 1 and failures == 0
    assert idle["waiting"] == 0 and idle["active"] == 0, "nothing left in flight"
    assert stop_s < 15, f"tritonserver took {stop_s:.1f} s to stop: a request was still in flight"

