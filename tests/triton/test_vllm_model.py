"""The operator's vLLM model in a real tritonserver: the EXACT files rendered for a vLLM backend, with the CPU
stand-in `vllm` (dev/standins/vllm, vLLM 0.31.0 API, in-flight batching over SLOTS) on the model's path.

The checkpoint is a pre-quantized FP8 one (config.json declares quantization_config, as ModelOpt checkpoints do)
and the spec says fp8: the stand-in, like vLLM, refuses to start when a `quantization` argument contradicts the
checkpoint, so every test here also shows that such a checkpoint loads.

Checked: generate, streaming, stop words, cancellation (the engine slot is freed), bad input (answered with an error,
the model keeps serving), the exported metric names (== llmbackend.api.engine_metrics), and the engine
queue-to-compute ratio under 3x and 0.5x the slots (well above 1 vs well below 1). Run under
`flock /tmp/llmb-heavy.lock`.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from devcluster.tritonserver import available, run_tritonserver
from llmbackend.api import engine_metrics as M
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.render import triton

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "dev" / "standins"
MODEL = "llama-fp8"
SLOTS = 2
STEP_S = 0.01        # stand-in seconds per engine step (one token per running request)
TOKENS = 10          # per load request: ~TOKENS x STEP_S of engine compute
PROMPT = "alpha beta gamma"


def _spec() -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({
        "model": {
            "name": MODEL,
            "architecture": {
                "numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 8,
                "headDim": 128, "vocabSize": 128256, "parameterCount": 8_030_000_000,
                "checkpointQuantization": "modelopt",
            },
            "source": {"pvc": {"claimName": "models", "path": "/llama"}},
        },
        "engine": {"backend": "vllm", "quantization": "fp8", "maxBatchSize": SLOTS, "maxSeqLen": 256,
                   "maxInputLen": 128},
    })


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-model")
    checkpoint = root / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "quantization_config": {"quant_method": "modelopt",
                                                                       "quant_algo": "FP8"}}))
    spec = _spec()
    files = triton.render_model_repository(spec, MODEL, 1, 1)
    repo = root / "repo"
    for rel, content in files.items():
        if rel.endswith("/1/model.json"):  # the pod mounts the claim at /models; here the checkpoint lives elsewhere
            content = json.dumps({**json.loads(content), "model": str(checkpoint)})
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)
    for directory in triton.version_dirs("vllm", MODEL):
        (repo / directory).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, VLLM_STANDIN_STEP_S=str(STEP_S))
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=env,
                          extra_args=["--disable-auto-complete-config"]) as srv:
        yield srv, files


def _post(url: str, body: dict, timeout: float = 30.0) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback only
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _generate(srv, **body) -> tuple[int, dict]:
    return _post(f"http://{srv.http_url}/v2/models/{MODEL}/generate", {"text_input": PROMPT, **body})


def _stream(srv, **body) -> list[dict]:
    req = urllib.request.Request(f"http://{srv.http_url}/v2/models/{MODEL}/generate_stream",
                                 json.dumps({"text_input": PROMPT, **body}).encode(),
                                 {"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback only
        for line in r:
            if line.startswith(b"data:"):
                events.append(json.loads(line[5:]))
    return events


def _metrics(srv) -> dict[tuple[str, tuple], float]:
    """(name, sorted labels) -> value, for this model's series."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(srv.metrics_url, timeout=5) as r:  # noqa: S310 - loopback only
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            # The parser appends _total to counter samples; Triton's names have none: keep the exposed name.
            name = family.name if family.type == "counter" else s.name
            if s.labels.get("model") == MODEL:
                out[(name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model", "version",
                                                                                         "model_name"))))] = s.value
    return out


def _value(metrics, name: str, **labels) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


def test_rendered_repository_is_what_triton_loaded(server):
    srv, files = server
    with urllib.request.urlopen(f"http://{srv.http_url}/v2/models/{MODEL}/config", timeout=5) as r:  # noqa: S310
        config = json.load(r)
    assert config["backend"] == "python" and config["max_batch_size"] == 0
    assert config["model_transaction_policy"]["decoupled"] is True
    assert "dynamic_batching" not in config and "sequence_batching" not in config
    assert {"text_input", "max_tokens", "stop_words", "seed"} <= {i["name"] for i in config["input"]}
    args = json.loads(files[f"{MODEL}/1/model.json"])
    assert "quantization" not in args  # pre-quantized FP8 checkpoint: vLLM reads the method from it


def test_generate(server):
    srv, _ = server
    code, out = _generate(srv, max_tokens=4, return_num_input_tokens=True, return_num_output_tokens=True)
    assert code == 200, out
    assert out["text_output"] == " alpha beta gamma alpha"  # the stand-in echoes the prompt's words
    assert out["finish_reason"] == "length"
    assert out["num_input_tokens"] == 3 and out["num_output_tokens"] == 4
    code, out = _generate(srv, max_tokens=4, exclude_input_in_output=False)
    assert code == 200 and out["text_output"] == PROMPT + " alpha beta gamma alpha"
    code, out = _generate(srv, max_tokens=20, stop_words=["gamma"])
    assert code == 200 and out["text_output"] == " alpha beta " and out["finish_reason"] == "stop", out
    # max_tokens beyond max_model_len (256): the engine stops at the model length, as vLLM's scheduler does
    code, out = _generate(srv, max_tokens=9000, return_num_output_tokens=True)
    assert code == 200 and out["finish_reason"] == "length" and out["num_output_tokens"] == 256 - 3


def test_streaming(server):
    srv, _ = server
    events = _stream(srv, max_tokens=6, stream=True)
    assert len(events) >= 2, events
    assert all(e["finish_reason"] == "" for e in events[:-1])
    assert events[-1]["finish_reason"] == "length"
    streamed = "".join(e["text_output"] for e in events)
    code, whole = _generate(srv, max_tokens=6)
    assert code == 200 and streamed == whole["text_output"]


def test_bad_input_is_an_error_and_the_model_keeps_serving(server):
    srv, _ = server
    bad = [({"max_tokens": 0}, "max_tokens must be at least 1"), ({"temperature": -1.0}, "temperature"),
           ({"top_p": 2.0}, "top_p"), ({"text_input": "   "}, "text_input"),
           # longer than max_model_len: rejected by the engine itself
           ({"text_input": "w " * 300}, "maximum model length")]
    for body, expected in bad:
        before = _value(_metrics(srv), M.ENGINE_REJECTED_METRIC)
        failures = _value(_metrics(srv), M.ENGINE_FAILURES_METRIC)
        code, out = _generate(srv, **body)
        assert code == 400 and expected in out.get("error", ""), (body, code, out)
        assert out["error"].startswith("bad request"), "the request's fault, not the engine's"
        # Metric updates go through the model's IPC thread, queued beside the response: wait for it a moment.
        assert _wait_for(lambda before=before: _value(_metrics(srv), M.ENGINE_REJECTED_METRIC) == before + 1, 5), \
            "counted as a rejected request"
        assert _value(_metrics(srv), M.ENGINE_FAILURES_METRIC) == failures, "not as an engine failure"
        code, out = _generate(srv, max_tokens=2)
        assert code == 200 and out["finish_reason"] == "length"


def _wait_for(predicate, timeout_s: float = 20.0, every_s: float = 0.05):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return predicate()


def test_cancellation_frees_the_engine_slot(server):
    import tritonclient.grpc as grpcclient

    srv, _ = server
    failures = _value(_metrics(srv), M.ENGINE_FAILURES_METRIC)
    responses: list = []
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=np.object_))
    limit = grpcclient.InferInput("max_tokens", [1], "INT32")
    limit.set_data_from_numpy(np.array([100_000], dtype=np.int32))  # far longer than the test
    stream = grpcclient.InferInput("stream", [1], "BOOL")
    stream.set_data_from_numpy(np.array([True]))
    client.start_stream(callback=lambda result, error: responses.append((result, error)))
    try:
        client.async_stream_infer(MODEL, [text, limit, stream], request_id="long")
        assert _wait_for(lambda: len(responses) >= 2), "no streamed tokens"
        running = _value(_metrics(srv), M.VLLM_RUNNING_GAUGE)
        assert running == 1
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    # The model aborts the engine request: its slot frees and nothing runs any more.
    assert _wait_for(lambda: _value(_metrics(srv), M.VLLM_RUNNING_GAUGE) == 0
                     and _value(_metrics(srv), M.REQUEST_GAUGE, request_type="scheduled") == 0)
    assert _value(_metrics(srv), M.ENGINE_FAILURES_METRIC) == failures  # a cancellation is not a failure
    code, out = _generate(srv, max_tokens=2)
    assert code == 200, out


def test_cancelling_a_request_that_waits_for_a_slot_answers_it_and_leaves_nothing_waiting(server):
    """Both slots busy, a third request waits in vLLM's queue; Triton cancels it (the client closes its stream): the
    model aborts it in the engine and answers it itself (CANCELLED), the waiting gauge returns to 0 while the busy
    requests still run, and nothing counts as failed."""
    import queue

    import tritonclient.grpc as grpcclient

    srv, _ = server
    failures = _value(_metrics(srv), M.ENGINE_FAILURES_METRIC)
    busy = [threading.Thread(target=_generate, args=(srv,), kwargs={"max_tokens": 200}, daemon=True)
            for _ in range(SLOTS)]
    for t in busy:
        t.start()
    assert _wait_for(lambda: _value(_metrics(srv), M.VLLM_RUNNING_GAUGE) == SLOTS), "slots not taken"
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=np.object_))
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer(MODEL, [text], request_id="waits")
    try:
        assert _wait_for(lambda: _value(_metrics(srv), M.VLLM_WAITING_GAUGE) == 1), "the request is not waiting"
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    assert _wait_for(lambda: _value(_metrics(srv), M.VLLM_WAITING_GAUGE) == 0, timeout_s=1.5), \
        "the cancelled request still waits"
    assert _value(_metrics(srv), M.VLLM_RUNNING_GAUGE) == SLOTS, "checked while the busy requests still run"
    for t in busy:
        t.join(30)
    assert _value(_metrics(srv), M.ENGINE_FAILURES_METRIC) == failures


def test_exported_names_are_the_engine_metrics_constants(server):
    srv, _ = server
    assert _generate(srv, max_tokens=2)[0] == 200
    names = {name for name, _ in _metrics(srv)}
    expected = {M.ENGINE_QUEUE_METRIC, M.ENGINE_COMPUTE_METRIC, M.ENGINE_REQUESTS_METRIC, M.ENGINE_FAILURES_METRIC,
                M.ENGINE_REJECTED_METRIC,
                M.REQUEST_GAUGE, M.KV_GAUGE, M.VLLM_WAITING_GAUGE, M.VLLM_RUNNING_GAUGE, M.VLLM_KV_USAGE_GAUGE}
    assert expected <= names, expected - names
    m = _metrics(srv)
    assert {labels for name, labels in m if name == M.REQUEST_GAUGE} == {
        (("request_type", t),) for t in M.REQUEST_TYPES}
    assert {labels for name, labels in m if name == M.KV_GAUGE} == {
        (("kv_cache_block_type", t),) for t in M.KV_TYPES}
    assert _value(m, M.REQUEST_GAUGE, request_type="max") == SLOTS
    # Every finished request is in the request-time histogram, with the same timing as the queue + compute counters.
    hist = M.ENGINE_REQUEST_SECONDS_METRIC
    assert sorted(float(dict(labels)["le"]) for name, labels in m if name == hist + "_bucket") == [
        *M.ENGINE_REQUEST_SECONDS_BUCKETS, math.inf]
    assert _value(m, hist + "_count") == _value(m, M.ENGINE_REQUESTS_METRIC) > 0
    engine_s = (_value(m, M.ENGINE_QUEUE_METRIC) + _value(m, M.ENGINE_COMPUTE_METRIC)) / 1e6
    assert _value(m, hist + "_sum") == pytest.approx(engine_s, rel=1e-6, abs=1e-6)


def _load(srv, clients: int, duration_s: float) -> tuple[float, float, float, int, int]:
    """Closed loop: `clients` threads send TOKENS-token requests for `duration_s`.
    Returns (queue us, compute us, finished, errors, max waiting seen) as deltas of the exported counters."""
    before = _metrics(srv)
    end = time.monotonic() + duration_s
    errors = [0]
    seen_waiting = [0, 0]  # vLLM's gauge, the engine-queue gauge
    stop = threading.Event()

    def client() -> None:
        while time.monotonic() < end:
            code, _ = _generate(srv, max_tokens=TOKENS)
            if code != 200:
                errors[0] += 1

    def sampler() -> None:
        # The model sets the two waiting gauges one after the other (a Triton call each), so one page can fall
        # between them: each gauge's maximum is kept, and they are compared on the quiescent page below.
        while not stop.is_set():
            m = _metrics(srv)
            seen_waiting[0] = max(seen_waiting[0], int(_value(m, M.VLLM_WAITING_GAUGE)))
            seen_waiting[1] = max(seen_waiting[1], int(_value(m, M.REQUEST_GAUGE, request_type="waiting")))
            stop.wait(0.1)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    watcher = threading.Thread(target=sampler)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + 60)
    stop.set()
    watcher.join(10)
    assert not watcher.is_alive()

    def drained():
        m = _metrics(srv)
        return m if _value(m, M.VLLM_WAITING_GAUGE) == 0 else None

    after = _wait_for(drained, 10)
    assert after is not None, "the engine queue did not drain"
    assert _value(after, M.REQUEST_GAUGE, request_type="waiting") == 0
    assert (seen_waiting[0] > 0) == (seen_waiting[1] > 0), f"one waiting gauge saw a queue, the other not: {seen_waiting}"

    def delta(name: str) -> float:
        return _value(after, name) - _value(before, name)

    return (delta(M.ENGINE_QUEUE_METRIC), delta(M.ENGINE_COMPUTE_METRIC), delta(M.ENGINE_REQUESTS_METRIC),
            errors[0], min(seen_waiting), delta(M.TRITON_QUEUE_METRIC))


@pytest.mark.parametrize("clients, expect_high", [(3 * SLOTS, True), (max(1, SLOTS // 2), False)],
                         ids=["3x-slots", "0.5x-slots"])
def test_engine_queue_to_compute_ratio(server, clients, expect_high):
    srv, _ = server
    queue_us, compute_us, finished, errors, waiting, triton_queue_us = _load(srv, clients, duration_s=4.0)
    ratio = queue_us / max(compute_us, 1.0)
    print(f"\n{clients} clients on {SLOTS} slots: {finished:.0f} finished, engine queue/compute = {ratio:.2f}, "
          f"max waiting seen {waiting}; Triton queue {triton_queue_us:.0f} us vs engine queue {queue_us:.0f} us")
    assert errors == 0 and finished > 0
    if expect_high:  # 3x the slots: each request waits about two service times
        assert ratio > 1.3 and waiting > 0
        # Triton hands each request to the engine at once: its own queue counter misses the wait.
        assert triton_queue_us < 0.05 * queue_us
    else:            # fewer clients than slots: nothing waits for a slot
        assert ratio < 0.3 and waiting == 0
