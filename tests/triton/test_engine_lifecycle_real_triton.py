"""Chaos on a REAL tritonserver, for each serving model: the engine dies mid-stream, the server is sent SIGTERM with
requests in flight. The models are the exact files the operator renders (same code path as the controller), run
with the CPU stand-in engines, whose kill switch (an env-named file appearing) kills the engine as upstream's dies:
vLLM's in-flight streams raise EngineDeadError, TensorRT-LLM's get nothing more (dev/standins).

What a pod needs from its model when the engine dies: every request in flight ends with an error (none hangs), the
server stops answering its probes within a bound (Kubernetes takes the pod out of the endpoints and, with the
process gone, restarts the container), the reason is in the log, and a fresh process serves again."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from llmapi_support import STANDINS, backend_spec, rendered_repository

from devcluster.tritonserver import TritonServer, available, run_tritonserver
from llmbackend.render import triton

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

STEP_S = 0.05          # both stand-ins: one token per running request every 50 ms
LONG_TOKENS = 400      # ~20 s of decode: still streaming when the engine is killed
STREAMS = 3
# The bounds this test proves (docs/engines.md "Failure model"): from the engine's death to...
ERRORS_WITHIN_S = 3.0  # ... every request in flight answered with an error (health poll 0.5 s + IPC)
PROBES_FAIL_WITHIN_S = 3.0  # ... /v2/health/ready and /v2/health/live no longer answering 200
EXITED_WITHIN_S = 20.0  # ... the tritonserver process gone (Kubernetes restarts the container)
ENGINES = {
    # engine -> (spec engine fields, env knobs of its stand-in)
    "tensorrt-llm": ({}, "TRTLLM_STANDIN_ITERATION_S", "TRTLLM_STANDIN_KILL_FILE"),
    "vllm": ({"backend": "vllm"}, "VLLM_STANDIN_STEP_S", "VLLM_STANDIN_KILL_FILE"),
}


def _repository(engine: str, into: Path) -> tuple[str, Path]:
    spec = backend_spec(4, maxSeqLen=2048, **ENGINES[engine][0])
    name, repo = rendered_repository(spec, into)
    for directory in triton.version_dirs(spec.engine.backend, name, spec.engine.format):
        (repo / directory).mkdir(parents=True, exist_ok=True)
    return name, repo


def _env(engine: str, kill_file: Path | None) -> dict[str, str]:
    _, step, kill = ENGINES[engine]
    env = dict(os.environ, **{step: str(STEP_S)})
    if kill_file is not None:
        env[kill] = str(kill_file)
    return env


def _status(url: str) -> int | str:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310 - loopback only
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except Exception as e:  # noqa: BLE001 - refused, reset: the probe fails
        return type(e).__name__


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Stream:
    """One streaming generate request on its own thread: its events, how it ended and when."""

    def __init__(self, server: TritonServer, model: str, max_tokens: int) -> None:
        self.events: list[dict[str, Any]] = []
        self.error: str | None = None
        self.ended_at: float | None = None
        self.url = f"http://{server.http_url}/v2/models/{model}/generate_stream"
        self.body = json.dumps({"text_input": "tell me a long story please", "max_tokens": max_tokens,
                                "stream": True}).encode()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        req = urllib.request.Request(self.url, self.body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback only
                for line in r:
                    if line.startswith(b"data:"):
                        self.events.append(json.loads(line[5:]))
        except urllib.error.HTTPError as e:
            self.events.append(json.loads(e.read()[5:] or b"{}"))
        except Exception as e:  # noqa: BLE001 - a cut connection is an end too
            self.error = f"{type(e).__name__}: {e}"
        self.ended_at = time.monotonic()

    @property
    def finished_normally(self) -> bool:
        return bool(self.events) and "error" not in self.events[-1] and bool(self.events[-1].get("finish_reason"))

    @property
    def answered_with_error(self) -> bool:
        return bool(self.events) and "error" in self.events[-1]

    def tokens(self) -> int:
        return sum(1 for e in self.events if e.get("text_output"))


def _wait_streaming(streams: list[Stream], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(s.tokens() >= 2 for s in streams):
        assert time.monotonic() < deadline, "the streams never started"
        assert not any(s.ended_at for s in streams), [s.events[-1:] for s in streams]
        time.sleep(0.05)


def _first_failing(urls: list[str], since: float, limit_s: float) -> float | None:
    """Seconds after `since` when every url stopped answering 200, or None within limit_s."""
    while time.monotonic() - since < limit_s:
        if all(_status(u) != 200 for u in urls):
            return time.monotonic() - since
        time.sleep(0.05)
    return None


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_engine_killed_mid_stream_fails_probes_ends_requests_and_a_fresh_process_serves(engine, tmp_path) -> None:
    name, repo = _repository(engine, tmp_path / "repo")
    kill_file = tmp_path / "kill"
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=_env(engine, kill_file),
                          extra_args=["--exit-timeout-secs=60"], startup_timeout_s=120) as server:
        probes = [f"http://{server.http_url}/v2/health/ready", f"http://{server.http_url}/v2/health/live"]
        assert [_status(u) for u in probes] == [200, 200]
        streams = [Stream(server, name, LONG_TOKENS) for _ in range(STREAMS)]
        _wait_streaming(streams)

        kill_file.touch()  # the engine dies
        killed = time.monotonic()
        probes_failed_after = _first_failing(probes, killed, PROBES_FAIL_WITHIN_S + 5)
        for s in streams:
            s.thread.join(ERRORS_WITHIN_S + 10)
        exit_deadline = killed + EXITED_WITHIN_S + 10
        while _alive(server.pid) and time.monotonic() < exit_deadline:
            time.sleep(0.1)
        exited_after = time.monotonic() - killed
        log = server.log_path.read_text(errors="replace")

        print(f"{engine}: probes failed after {probes_failed_after} s, requests ended after "
              f"{[round(s.ended_at - killed, 2) if s.ended_at else None for s in streams]} s, "
              f"process gone after {exited_after:.1f} s")
        assert all(s.ended_at is not None for s in streams), "a request in flight hangs after the engine died"
        assert probes_failed_after is not None and probes_failed_after < PROBES_FAIL_WITHIN_S, \
            f"readiness/liveness still 200 {PROBES_FAIL_WITHIN_S} s after the engine died"
        assert not any(s.finished_normally for s in streams), [s.events[-1] for s in streams]
        assert all(s.answered_with_error for s in streams), [(s.events[-1:], s.error) for s in streams]
        assert all("engine failed" in s.events[-1]["error"] for s in streams), [s.events[-1] for s in streams]
        assert max(s.ended_at for s in streams if s.ended_at) - killed < ERRORS_WITHIN_S
        assert exited_after < EXITED_WITHIN_S, "tritonserver did not exit: Kubernetes would not restart it"
        assert "EngineFailed" in log, server.log_tail()

    # Kubernetes restarts the container: a fresh process (no kill switch) serves again.
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=_env(engine, None), startup_timeout_s=120) as fresh:
        stream = Stream(fresh, name, 4)
        stream.thread.join(60)
        assert stream.finished_normally, (stream.events, stream.error)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_engine_dying_while_idle_fails_the_probes(engine, tmp_path) -> None:
    """No request notices the death: the health poll does."""
    name, repo = _repository(engine, tmp_path / "repo")
    kill_file = tmp_path / "kill"
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=_env(engine, kill_file),
                          startup_timeout_s=120) as server:
        warm = Stream(server, name, 2)  # TensorRT-LLM's stats stream exists from the first request on
        warm.thread.join(30)
        assert warm.finished_normally, warm.events
        kill_file.touch()
        killed = time.monotonic()
        probes = [f"http://{server.http_url}/v2/health/ready", f"http://{server.http_url}/v2/health/live"]
        failed_after = _first_failing(probes, killed, PROBES_FAIL_WITHIN_S + 5)
        assert failed_after is not None and failed_after < PROBES_FAIL_WITHIN_S, "the idle pod stays Ready"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sigterm_with_requests_in_flight_ends_each_within_the_exit_timeout(engine, tmp_path) -> None:
    """Short requests finish normally; one longer than the exit timeout is cut when Triton gives up. None hangs."""
    name, repo = _repository(engine, tmp_path / "repo")
    exit_timeout_s = 4
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=_env(engine, None),
                          extra_args=[f"--exit-timeout-secs={exit_timeout_s}"], startup_timeout_s=120) as server:
        short = [Stream(server, name, 30) for _ in range(2)]   # ~1.5 s
        long = Stream(server, name, LONG_TOKENS)                # ~20 s
        _wait_streaming([*short, long])
        os.kill(server.pid, signal.SIGTERM)
        sent = time.monotonic()
        for s in (*short, long):
            s.thread.join(exit_timeout_s + 15)
        assert all(s.finished_normally for s in short), [s.events[-1:] for s in short]
        assert long.ended_at is not None, "a request in flight hangs after the server stopped"
        assert not long.finished_normally
        assert long.ended_at - sent < exit_timeout_s + 10
        deadline = time.monotonic() + 15
        while _alive(server.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server.pid)


def _unload(server: TritonServer, model: str) -> None:
    req = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/{model}/unload", b"{}",
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback only
        assert r.status == 200


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_unload_lets_requests_in_flight_finish_before_the_engine_stops(engine, tmp_path) -> None:
    """finalize waits for the model's requests in flight (up to the rendered drain bound) before it stops the engine,
    as upstream's vllm_backend waits for its ongoing request count."""
    name, repo = _repository(engine, tmp_path / "repo")
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=_env(engine, None),
                          extra_args=["--model-control-mode=explicit", "--load-model=*"],
                          startup_timeout_s=120) as server:
        streams = [Stream(server, name, 60) for _ in range(2)]  # ~3 s each
        _wait_streaming(streams)
        _unload(server, name)
        for s in streams:
            s.thread.join(30)
        assert all(s.finished_normally for s in streams), [(s.events[-1:], s.error) for s in streams]
        assert all(s.tokens() >= 30 for s in streams)
