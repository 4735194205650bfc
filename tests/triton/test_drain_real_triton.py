"""Drain-safe scale-down on a REAL tritonserver: the rendered preStop and Triton exit timeout of a serving pod let a
request in flight finish (issue: "no request is cut by a scale-down in the tests").

The pod's Triton container is taken from the Deployment the operator renders (same code path as the controller):
its preStop (render/drain.py: wait until the engine reports nothing in flight) and its `--exit-timeout-secs`. Triton
runs the rendered serving model (the LLM API model and the vLLM model, each with its CPU stand-in engine), bound to a loopback IP on the pod's own ports, so the
rendered preStop reaches it as it would in the pod (127.0.0.1 -> that IP)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from llmapi_support import REF, STANDINS, backend_spec, generate, metric, metrics, rendered_repository

from devcluster.tritonserver import available, run_tritonserver
from llmbackend.api import engine_metrics as em
from llmbackend.api.v1alpha1 import PlanStatus
from llmbackend.render import triton
from llmbackend.render.workloads import RolloutStrategy, desired_objects

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

POD_IP = "127.0.43.1"  # a loopback address of its own: the pod's fixed ports (8000-8002) are free there
ITERATION_S = 0.05     # stand-in engines: one token per sequence every 50 ms
# engine -> (spec engine fields, the env knob of its stand-in's step time)
ENGINES = {"tensorrt-llm": ({}, "TRTLLM_STANDIN_ITERATION_S"), "vllm": ({"backend": "vllm"}, "VLLM_STANDIN_STEP_S")}
LONG_TOKENS = 160      # ~8 s: longer than the 5 s exit timeout the test launcher uses by default


def _serving_container(spec: Any) -> dict[str, Any]:
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    deployment = next(o for o in desired_objects(REF, spec, plan, 1, RolloutStrategy("Recreate"))
                      if o["kind"] == "Deployment")
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c.get("lifecycle"))


def _ports_free() -> bool:
    for port in (triton.HTTP_PORT, triton.GRPC_PORT, triton.METRICS_PORT):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Triton binds: a previous run's TIME_WAIT is fine
            try:
                s.bind((POD_IP, port))
            except OSError:
                return False
    return True


@pytest.fixture(params=sorted(ENGINES))
def pod(request, tmp_path):
    """(server, model name, preStop script, exit timeout) of one serving pod as rendered, for each engine."""
    if not _ports_free():
        pytest.skip(f"{POD_IP}: Triton's ports are taken")
    engine_fields, step_env = ENGINES[request.param]
    spec = backend_spec(4, maxSeqLen=2048, **engine_fields)
    container = _serving_container(spec)
    script = container["lifecycle"]["preStop"]["exec"]["command"][2]
    [exit_arg] = [a for a in container["args"] if a.startswith("--exit-timeout-secs=")]
    name, repo = rendered_repository(spec, tmp_path / "repo")
    env = dict(os.environ, **{step_env: str(ITERATION_S)})
    with run_tritonserver(repo, host=POD_IP, http_port=triton.HTTP_PORT, grpc_port=triton.GRPC_PORT,
                          metrics_port=triton.METRICS_PORT, extra_pythonpath=[STANDINS], env=env,
                          extra_args=[exit_arg], startup_timeout_s=120) as server:
        yield server, name, script, int(exit_arg.split("=", 1)[1])


def _start_long_request(server, name) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        result["code"], result["body"] = generate(server, name, {
            "text_input": "a long answer please", "max_tokens": LONG_TOKENS, "return_num_output_tokens": True},
            timeout=120)
        result["done_at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while metric(metrics(server), em.REQUEST_GAUGE, name, request_type="active") < 1:
        assert time.monotonic() < deadline, "the request never reached the engine"
        time.sleep(0.1)
    return thread, result


def test_the_rendered_prestop_waits_for_the_request_in_flight(pod) -> None:
    server, name, script, drain_s = pod
    assert drain_s >= 60, "the bound covers a long request (maxSeqLen x 60 ms + 30 s, at least 60 s)"
    thread, result = _start_long_request(server, name)
    started = time.monotonic()
    hook = subprocess.run([sys.executable, "-c", script.replace("127.0.0.1", POD_IP)], timeout=drain_s + 30)
    returned = time.monotonic()
    thread.join(60)
    assert hook.returncode == 0
    assert result["code"] == 200 and result["body"]["num_output_tokens"] == LONG_TOKENS, result
    assert returned >= result["done_at"] - 0.5, "the preStop returned while the request was still running"
    assert returned - started >= 3, "the preStop waited for the engine (the request takes ~8 s)"
    assert returned - result["done_at"] < 5, "and returned soon after the engine was empty"


def test_sigterm_lets_the_request_in_flight_finish_within_the_rendered_exit_timeout(pod) -> None:
    server, name, _, drain_s = pod
    thread, result = _start_long_request(server, name)
    sent = time.monotonic()
    os.kill(server.pid, signal.SIGTERM)  # what the kubelet sends once the preStop returned (or timed out)
    thread.join(drain_s + 30)
    assert result.get("code") == 200, f"the request was cut: {result}"
    assert result["body"]["num_output_tokens"] == LONG_TOKENS
    assert result["done_at"] - sent > 5, "it ran past the 5 s the test launcher would allow: the rendered timeout holds"
    deadline = time.monotonic() + 30
    while _alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(server.pid), "Triton exits once nothing is in flight"


def _alive(pid: int) -> bool:
    """Running (an exited child not yet reaped by the launcher is a zombie: state Z)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
