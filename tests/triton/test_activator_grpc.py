"""Scale from zero over gRPC, with real parts: Triton's own gRPC client connects through the activator program (its
own process, the rendered gRPC hold) while no replica exists; a real tritonserver with the operator's rendered LLM API
model then starts behind it, and the held call and a streamed generation succeed through the activator."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
from harness import _stop, free_port, http_get, wait_http
from llmapi_support import backend_spec, serve

from devcluster.tritonserver import available
from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC
from llmbackend.serving import activator as activator_module

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

ACTIVATOR_IP = "127.0.44.1"
REPLICA_IP = "127.0.44.2"  # the serving Service's stand-in: the same port numbers on another address


def _held(metrics_url: str) -> float:
    _, body = http_get(f"{metrics_url}/metrics")
    line = next(x for x in body.decode().splitlines() if x.startswith(ACTIVATOR_HELD_METRIC + " "))
    return float(line.split()[1])


def test_a_grpc_client_waits_at_the_activator_until_triton_serves(tmp_path) -> None:
    import tritonclient.grpc as grpcclient

    http_port, grpc_port, metrics_port = (free_port(ACTIVATOR_IP) for _ in range(3))
    log = tempfile.NamedTemporaryFile(prefix="activator-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, activator_module.__file__, f"--host={ACTIVATOR_IP}", f"--port={http_port}",
         f"--tcp-port={grpc_port}", f"--upstream={REPLICA_IP}", f"--metrics-port={metrics_port}",
         f"--held-metric={ACTIVATOR_HELD_METRIC}", "--hold-timeout=120"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PYTHONPATH": ""})
    metrics_url = f"http://{ACTIVATOR_IP}:{metrics_port}"
    try:
        wait_http(f"{metrics_url}/readyz", 20, proc)
        client = grpcclient.InferenceServerClient(f"{ACTIVATOR_IP}:{grpc_port}")
        answer: dict = {}
        call = threading.Thread(target=lambda: answer.update(ready=client.is_server_ready(client_timeout=120)),
                                daemon=True)
        call.start()
        deadline = time.monotonic() + 20
        while _held(metrics_url) < 1:
            assert time.monotonic() < deadline, "the gRPC connection was never held"
            time.sleep(0.1)
        assert call.is_alive(), "no replica yet: the call waits"
        spec = backend_spec(4)
        with serve(spec, tmp_path, host=REPLICA_IP, grpc_port=grpc_port) as (_, name):
            call.join(120)
            assert answer.get("ready") is True, answer
            assert client.is_model_ready(name)
            text = _stream_generation(client, name, "alpha beta gamma", 4)
            assert text == "alpha beta gamma alpha"
        client.close()
        assert _held(metrics_url) == 0
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)


def _stream_generation(client, name: str, prompt: str, max_tokens: int) -> str:
    import tritonclient.grpc as grpcclient

    inputs = []
    for key, shape_value, dtype in (("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
                                    ("max_tokens", np.array([max_tokens], dtype=np.int32), "INT32"),
                                    ("stream", np.array([True], dtype=bool), "BOOL")):
        item = grpcclient.InferInput(key, [1], dtype)
        item.set_data_from_numpy(shape_value)
        inputs.append(item)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(name, inputs, request_id="via-activator", enable_empty_final_response=True)
        texts = []
        while True:
            result, error = results.get(timeout=60)
            assert error is None, error
            response = result.get_response()
            if response.outputs:
                texts.append(result.as_numpy("text_output")[0].decode())
            if response.parameters["triton_final_response"].bool_param:
                return " ".join(t.strip() for t in texts if t.strip())
    finally:
        client.stop_stream()
