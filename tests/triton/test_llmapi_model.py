"""The operator's LLM API Triton model on a REAL tritonserver, loading the EXACT files the operator renders into the
ConfigMap; the only stand-in is the engine (dev/standins/tensorrt_llm, CPU, TensorRT-LLM 1.2.1 LLM API).

Clients: Triton's HTTP generate endpoints, tritonclient.http (readiness, config, statistics) and tritonclient.grpc
(bidirectional streaming, cancellation). The load tests show why Triton's own queue counter is blind on this path
while the engine's exported queue/compute ratio is not."""

from __future__ import annotations

import math
import queue
import threading
import time

import numpy as np
import pytest
from llmapi_support import backend_spec, closed_loop, generate, metric, metrics, serve

from devcluster.tritonserver import available
from llmbackend.api import engine_metrics as em
from llmbackend.autoscaling.ratio import histogram_quantile

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

SLOTS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve(backend_spec(SLOTS), tmp_path_factory.mktemp("llmapi")) as (srv, name):
        yield srv, name


def test_loads_the_rendered_model_and_config(server) -> None:
    import tritonclient.http as httpclient

    srv, name = server
    client = httpclient.InferenceServerClient(srv.http_url)
    assert client.is_model_ready(name)
    config = client.get_model_config(name)
    assert config["backend"] == "python" and config["max_batch_size"] == 0
    assert config["model_transaction_policy"]["decoupled"] is True
    assert "dynamic_batching" not in config
    client.close()


def test_http_generate(server) -> None:
    srv, name = server
    code, body = generate(srv, name, {"text_input": "the quick brown fox", "max_tokens": 6,
                                      "return_num_input_tokens": True, "return_num_output_tokens": True})
    assert code == 200, body
    assert body["text_output"] == "the quick brown fox the quick"  # the stand-in echoes the prompt's words
    assert body["finish_reason"] == "length"
    assert body["num_input_tokens"] == 4 and body["num_output_tokens"] == 6


def test_http_generate_stream_and_stop_words(server) -> None:
    srv, name = server
    code, events = generate(srv, name, {"text_input": "one two three four five", "max_tokens": 5, "stream": True},
                            stream=True)
    assert code == 200, events
    assert len(events) >= 2, "one response per engine iteration"
    assert all(e["finish_reason"] == "" for e in events[:-1]) and events[-1]["finish_reason"] == "length"
    assert " ".join(e["text_output"].strip() for e in events if e["text_output"].strip()) == "one two three four five"
    code, body = generate(srv, name, {"text_input": "one two three four five", "max_tokens": 5,
                                      "stop_words": ["three"]})
    assert (code, body["text_output"], body["finish_reason"]) == (200, "one two", "stop")
    code, body = generate(srv, name, {"text_input": "a b", "max_tokens": 2, "exclude_input_in_output": False})
    assert body["text_output"].startswith("a b"), "the prompt is prepended when not excluded"


def _grpc_inputs(prompt: str, max_tokens: int, stream: bool):
    import tritonclient.grpc as grpcclient

    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    tokens = grpcclient.InferInput("max_tokens", [1], "INT32")
    tokens.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
    flag = grpcclient.InferInput("stream", [1], "BOOL")
    flag.set_data_from_numpy(np.array([stream], dtype=bool))
    return [text, tokens, flag]


def test_grpc_streaming_and_non_streaming(server) -> None:
    import tritonclient.grpc as grpcclient

    srv, name = server
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for stream in (True, False):
            client.async_stream_infer(name, _grpc_inputs("alpha beta gamma", 4, stream), request_id=str(stream),
                                      enable_empty_final_response=True)
            texts, reasons = [], []
            while True:
                result, error = results.get(timeout=60)
                assert error is None, error
                response = result.get_response()
                if response.outputs:
                    texts.append(result.as_numpy("text_output")[0].decode())
                    reasons.append(result.as_numpy("finish_reason")[0].decode())
                if response.parameters["triton_final_response"].bool_param:
                    break
            assert reasons[-1] == "length"
            assert " ".join(t.strip() for t in texts if t.strip()) == "alpha beta gamma alpha"
            assert (len(texts) > 1) is stream
    finally:
        client.stop_stream()
        client.close()


def test_grpc_cancellation_aborts_the_engine_request(server) -> None:
    import tritonclient.grpc as grpcclient

    srv, name = server
    before = metrics(srv)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    # 8000 tokens at 20 ms per iteration would hold a slot for 160 s
    client.async_stream_infer(name, _grpc_inputs("a long answer", 8000, True))
    result, error = results.get(timeout=60)
    assert error is None, error
    client.stop_stream(cancel_requests=True)
    client.close()
    # The model sees Triton's cancellation, aborts the engine request and counts it finished; the slot frees.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = metrics(srv)
        if (metric(now, em.ENGINE_REQUESTS_METRIC, name) > metric(before, em.ENGINE_REQUESTS_METRIC, name)
                and metric(now, em.REQUEST_GAUGE, name, request_type="active") == 0):
            break
        time.sleep(0.5)
    else:
        pytest.fail("the cancelled request still occupies the engine")
    assert metric(now, em.ENGINE_FAILURES_METRIC, name) == metric(before, em.ENGINE_FAILURES_METRIC, name)
    code, body = generate(srv, name, {"text_input": "still serving", "max_tokens": 2})
    assert (code, body.get("finish_reason")) == (200, "length")


@pytest.mark.parametrize("body, expected", [
    ({"max_tokens": 3}, "text_input"),
    ({"text_input": "   ", "max_tokens": 3}, "text_input"),
    ({"text_input": "hi", "max_tokens": 0}, "max_tokens must be at least 1"),
    ({"text_input": "hi", "max_tokens": 3, "top_p": 1.5}, "top_p"),
    # the engine's own check (maxSeqLen 8192): a prompt that fills it (a longer max_tokens is clamped, as upstream)
    ({"text_input": "word " * 8192, "max_tokens": 3}, "max_seq_len"),
])
def test_bad_input_is_a_clear_error_and_the_model_keeps_serving(server, body, expected) -> None:
    srv, name = server
    before = metric(metrics(srv), em.ENGINE_REJECTED_METRIC, name)
    failures = metric(metrics(srv), em.ENGINE_FAILURES_METRIC, name)
    code, error = generate(srv, name, body)
    assert code == 400, error
    assert expected in error["error"] and error["error"].startswith("bad request"), error
    # Metric updates go through the model's IPC thread, queued beside the response: wait for it a moment.
    deadline = time.monotonic() + 5
    while metric(metrics(srv), em.ENGINE_REJECTED_METRIC, name) != before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(metrics(srv), em.ENGINE_REJECTED_METRIC, name) == before + 1, "counted as a rejected request"
    assert metric(metrics(srv), em.ENGINE_FAILURES_METRIC, name) == failures, "not as an engine failure"
    code, ok = generate(srv, name, {"text_input": "good request", "max_tokens": 2})
    assert (code, ok["text_output"]) == (200, "good request")


def test_exported_names_are_the_operator_constants(server) -> None:
    srv, name = server
    generate(srv, name, {"text_input": "warm up", "max_tokens": 2})
    time.sleep(1.5)  # one refresh of the iteration-stats gauges (not an assertion on time)
    samples = metrics(srv)
    for counter in (em.ENGINE_QUEUE_METRIC, em.ENGINE_COMPUTE_METRIC, em.ENGINE_REQUESTS_METRIC,
                    em.ENGINE_FAILURES_METRIC, em.ENGINE_REJECTED_METRIC):
        metric(samples, counter, name)
    for kind in em.REQUEST_TYPES:
        metric(samples, em.REQUEST_GAUGE, name, request_type=kind)
    for kind in em.KV_TYPES:
        metric(samples, em.KV_GAUGE, name, kv_cache_block_type=kind)
    metric(samples, em.ENGINE_REQUEST_SECONDS_METRIC + "_count", name)
    assert metric(samples, em.REQUEST_GAUGE, name, request_type="max") == SLOTS
    assert metric(samples, em.KV_GAUGE, name, kv_cache_block_type="max") > 0


def _buckets(samples: dict, model: str) -> dict[float, float]:
    """The request-time histogram's cumulative buckets of one model: le -> count (summed over versions)."""
    out: dict[float, float] = {}
    for (n, labels), value in samples.items():
        d = dict(labels)
        if n == em.ENGINE_REQUEST_SECONDS_METRIC + "_bucket" and d.get("model") == model:
            out[float(d["le"])] = out.get(float(d["le"]), 0.0) + value
    return out


def test_request_time_histogram_counts_every_finished_request(server) -> None:
    """Short and long requests, more clients than slots: the histogram's _count grows by the finished requests,
    its buckets are cumulative with the bounds of engine_metrics.py, each request's engine time is at most what the
    client measured, and _sum is the queue + compute counters' sum."""
    srv, name = server
    hist = em.ENGINE_REQUEST_SECONDS_METRIC
    times: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        for j in range(3):
            tokens = 40 if (i + j) % 2 else 2  # 40 iterations of 20 ms: above the first bucket (0.5 s) for sure
            start = time.monotonic()
            code, body = generate(srv, name, {"text_input": f"client {i} asks {j}", "max_tokens": tokens})
            took = time.monotonic() - start
            with lock:
                (times.append(took) if code == 200 else errors.append(str(body)))

    before = metrics(srv)
    threads = [threading.Thread(target=client, args=(i,)) for i in range(2 * SLOTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    after = metrics(srv)
    assert not errors, errors[:3]
    n = len(times)

    def delta(metric_name: str) -> float:
        return metric(after, metric_name, name) - metric(before, metric_name, name)

    assert delta(hist + "_count") == n == delta(em.ENGINE_REQUESTS_METRIC)
    old, new = _buckets(before, name), _buckets(after, name)
    assert sorted(new) == [*em.ENGINE_REQUEST_SECONDS_BUCKETS, math.inf]
    counts = [new[le] for le in sorted(new)]
    assert counts == sorted(counts), "cumulative buckets"
    assert new[math.inf] == metric(after, hist + "_count", name)
    grown = {le: new[le] - old.get(le, 0.0) for le in new}
    for le, count in grown.items():
        # the engine's time of a request is part of what its client waited
        assert count >= sum(1 for t in times if t <= le), (le, grown, sorted(times))
    assert grown[em.ENGINE_REQUEST_SECONDS_BUCKETS[0]] < n, "the long requests lie above the first bucket"
    seconds = delta(hist + "_sum")
    assert seconds <= sum(times)
    # the same requests and timing as the queue + compute counters (whole microseconds each)
    engine_s = (delta(em.ENGINE_QUEUE_METRIC) + delta(em.ENGINE_COMPUTE_METRIC)) / 1e6
    assert abs(seconds - engine_s) <= n * 1e-6 + 1e-9 * seconds
    p99 = histogram_quantile(0.99, sorted(grown.items()))
    print(f"\n{n} requests: engine p99 {p99:.3f}s (histogram), client max {max(times):.3f}s, "
          f"engine mean {seconds / n:.3f}s, client mean {sum(times) / n:.3f}s")


def _ratios(srv, name: str, concurrency: int) -> tuple[float, float, float]:
    """Closed-loop load; returns (engine queue/compute ratio, Triton queue us, engine queue us) over the run."""
    before = metrics(srv)
    errors = closed_loop(srv, name, concurrency, per_client=6, max_tokens=8)
    assert not errors, errors[:3]
    after = metrics(srv)

    def delta(metric_name: str) -> float:
        return metric(after, metric_name, name) - metric(before, metric_name, name)

    engine_queue, engine_compute = delta(em.ENGINE_QUEUE_METRIC), delta(em.ENGINE_COMPUTE_METRIC)
    return engine_queue / max(engine_compute, 1.0), delta(em.TRITON_QUEUE_METRIC), engine_queue


def test_engine_ratio_sees_the_queue_that_triton_does_not(server) -> None:
    srv, name = server
    high, triton_queue_us, engine_queue_us = _ratios(srv, name, concurrency=3 * SLOTS)
    low, _, _ = _ratios(srv, name, concurrency=SLOTS // 2)
    print(f"\nengine queue/compute ratio: {high:.2f} at 3x slots, {low:.2f} at 0.5x slots; "
          f"Triton queue {triton_queue_us:.0f} us vs engine queue {engine_queue_us:.0f} us at 3x")
    assert high > 1.5, "at 3x the engine's slots requests wait inside the engine"
    assert low < 0.5, "below the engine's slots nothing waits"
    # Triton hands each request to the engine at once: its queue time is a sliver of the engine's.
    assert triton_queue_us < 0.05 * engine_queue_us
