"""Unit tests for the queue/compute ratio (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbackend.autoscaling.ratio import (
    REASON_NO_COMPLETIONS,
    REASON_NO_SAMPLES,
    REASON_NO_TRAFFIC,
    REASON_OK,
    REASON_STALE,
    TritonCounters,
    from_statistics,
    parse_metrics_text,
    window_ratio,
)

TRITON_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="llm",version="1"} 10
nv_inference_request_success{model="llm",version="2"} 5
nv_inference_request_success{model="other",version="1"} 99
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="llm",version="1"} 3000
nv_inference_queue_duration_us{model="llm",version="2"} 1000
nv_inference_queue_duration_us{model="other",version="1"} 77
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="llm",version="1"} 2000
nv_inference_compute_infer_duration_us{model="llm",version="2"} 2000
nv_inference_compute_infer_duration_us{model="other",version="1"} 1
# HELP nv_inference_pending_request_count Instantaneous number of pending requests
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="llm",version="1"} 3
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 7
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 64
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 30
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 40
"""


def test_parse_sums_versions_and_filters_model():
    c = parse_metrics_text(TRITON_TEXT, "llm")
    assert c == TritonCounters(4000, 4000, 15, pending=3, trtllm_waiting=7, kv_cache_fraction=0.75, active=64)


def test_parse_all_models_and_missing_model_and_garbage():
    assert parse_metrics_text(TRITON_TEXT, None).queue_us == 4077
    assert parse_metrics_text(TRITON_TEXT, "nope") is None
    assert parse_metrics_text("<html>not metrics{{{</html>", "llm") is None
    assert parse_metrics_text("", "llm") is None


def test_from_statistics_ns_to_us():
    stats = {"model_stats": [
        {"name": "llm", "version": "1", "inference_stats": {
            "success": {"count": 4, "ns": 0}, "queue": {"count": 4, "ns": 2_000_000},
            "compute_infer": {"count": 4, "ns": 1_000_000}}},
        {"name": "llm", "version": "2", "inference_stats": {
            "success": {"count": 1}, "queue": {"ns": 1000}, "compute_infer": {"ns": 1000}}},
    ]}
    c = from_statistics(stats, "llm")
    assert c.queue_us == 2001 and c.compute_infer_us == 1001 and c.success_count == 5
    assert from_statistics(stats, "x") is None
    assert from_statistics({"model_stats": "garbage"}, "llm") is None


def C(q, c, s=0, pending=None):
    return TritonCounters(q, c, s, pending=pending)


def test_window_ratio_sums_deltas_over_pods():
    samples = {
        "a": [(0, C(0, 0)), (10, C(300, 100, 5))],
        "b": [(0, C(1000, 1000)), (10, C(1100, 1300, 5))],
    }
    r = window_ratio(samples, now=10, window_s=60)
    assert r.reason == REASON_OK and r.pods_used == 2
    assert r.ratio == pytest.approx(400 / 400)
    assert r.requests == 10


def test_window_ratio_only_uses_window():
    samples = {"a": [(0, C(0, 0)), (50, C(10_000, 100)), (100, C(10_100, 200)), (110, C(10_200, 300))]}
    r = window_ratio(samples, now=110, window_s=60)
    assert r.ratio == pytest.approx(200 / 200)


def test_counter_reset_counts_new_value():
    samples = {"a": [(0, C(5000, 5000, 50)), (10, C(5200, 5100, 51)), (20, C(100, 50, 1))]}
    r = window_ratio(samples, now=20, window_s=60)
    assert r.ratio == pytest.approx((200 + 100) / (100 + 50))


def test_no_traffic_is_zero_not_none():
    r = window_ratio({"a": [(0, C(5, 5)), (10, C(5, 5))]}, now=10, window_s=60)
    assert r.ratio == 0.0 and r.reason == REASON_NO_TRAFFIC


def test_pending_without_completion_is_unmeasurable():
    r = window_ratio({"a": [(0, C(5, 5, pending=4)), (10, C(5, 5, pending=4))]}, now=10, window_s=60)
    assert r.ratio is None and r.reason == REASON_NO_COMPLETIONS


def test_stale_and_no_samples():
    assert window_ratio({}, now=100, window_s=60).reason == REASON_NO_SAMPLES
    r = window_ratio({"a": [(0, C(0, 0)), (10, C(10, 10))]}, now=100, window_s=60)
    assert r.ratio is None and r.reason == REASON_STALE and r.pods_stale == 1
    r = window_ratio({"a": [(95, C(0, 0))]}, now=100, window_s=60)
    assert r.ratio is None and r.reason == REASON_NO_SAMPLES and r.pods_warming == 1


def test_compute_clamped_to_one_microsecond():
    r = window_ratio({"a": [(0, C(0, 0)), (10, C(500, 0))]}, now=10, window_s=60)
    assert r.ratio == 500.0


counters = st.tuples(st.floats(0, 1e9), st.floats(0, 1e9), st.floats(0, 1e6))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), min_size=1, max_size=6), st.integers(2, 5))
def test_duplicating_pods_is_invariant(increments, copies):
    q = c = 0.0
    seq = [(0.0, C(0, 0))]
    for i, (dq, dc) in enumerate(increments, 1):
        q += dq
        c += dc
        seq.append((float(i), C(q, c, i)))
    one = window_ratio({"p": seq}, now=len(increments), window_s=1e6)
    many = window_ratio({f"p{i}": seq for i in range(copies)}, now=len(increments), window_s=1e6)
    assert (one.ratio is None) == (many.ratio is None)
    if one.ratio is not None:
        assert many.ratio == pytest.approx(one.ratio, rel=1e-9, abs=1e-9)
        assert one.ratio >= 0


def test_mean_inflight_is_littles_law():
    # 10 s of 3 s compute per second = 3 requests in compute on average, per pod
    samples = {"a": [(0, C(0, 0)), (10, C(0, 30e6, 10))], "b": [(0, C(0, 0)), (10, C(0, 10e6, 5))]}
    r = window_ratio(samples, now=10, window_s=60)
    assert r.mean_inflight_per_pod == pytest.approx((3 + 1) / 2)


ENGINE_TEXT = """\
# TYPE llmbackend_engine_queue_duration_us counter
llmbackend_engine_queue_duration_us{model="llm",version="1"} 9000
# TYPE llmbackend_engine_compute_duration_us counter
llmbackend_engine_compute_duration_us{model="llm",version="1"} 3000
# TYPE llmbackend_engine_requests_finished counter
llmbackend_engine_requests_finished{model="llm",version="1"} 4
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="llm",version="1"} 1
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="llm",version="1"} 500
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="llm",request_type="waiting",version="1"} 5
nv_trt_llm_request_metrics{model="llm",request_type="scheduled",version="1"} 64
nv_trt_llm_request_metrics{model="llm",request_type="active",version="1"} 64
nv_trt_llm_request_metrics{model="llm",request_type="max",version="1"} 64
nv_trt_llm_request_metrics{model="other",request_type="active",version="1"} 3
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="llm",version="1"} 0.5
"""


def test_engine_signal_reads_the_engine_counters_and_gauges_of_its_model():
    e = parse_metrics_text(ENGINE_TEXT, "llm", "engine")
    assert (e.queue_us, e.compute_infer_us, e.success_count) == (9000, 3000, 4)
    assert (e.active, e.slots, e.trtllm_waiting, e.kv_cache_fraction) == (64, 64, 5, 0.5)
    assert e.pending == 69  # batch + engine queue
    # Triton's own counters of the same model: the blind ratio (queue ~0)
    t = parse_metrics_text(ENGINE_TEXT, "llm", "triton")
    assert (t.queue_us, t.compute_infer_us) == (1, 500)
    # a model without engine counters is no reading for the engine signal (not a silent 0)
    assert parse_metrics_text(TRITON_TEXT, "llm", "engine") is None


def test_engine_window_sums_gauges_over_ready_pods_and_counts_full_ones():
    def E(q, c, s, active, slots, waiting=0.0):
        return TritonCounters(q, c, s, pending=active + waiting, trtllm_waiting=waiting, active=active, slots=slots)
    samples = {
        "a": [(0, E(0, 0, 0, 64, 64)), (10, E(30e6, 10e6, 3, 64, 64, 7))],
        "b": [(0, E(0, 0, 0, 10, 64)), (10, E(0, 10e6, 2, 12, 64))],
    }
    r = window_ratio(samples, now=10, window_s=30, signal="engine")
    assert r.signal == "engine" and r.ratio == pytest.approx(1.5)
    assert (r.active, r.slots, r.trtllm_waiting, r.slots_full_pods) == (76, 128, 7, 1)
    assert r.in_flight == 83


def test_arrival_rate_counts_finished_and_the_growth_of_in_flight():
    def E(s, pending):
        return TritonCounters(0, s * 1e6, s, pending=pending, trtllm_waiting=0.0, active=pending, slots=64.0)
    # 30 finished and in flight grew 10 -> 40 over 30 s: 60 arrivals = 2 req/s (not 1, the finished rate)
    r = window_ratio({"a": [(0, E(0, 10)), (30, E(30, 40))]}, now=30, window_s=60, signal="engine")
    assert r.arrival_rate == pytest.approx(2.0)
    assert r.offered_load == pytest.approx(2.0 * 1.0)  # 1 s compute per request


def test_a_replica_that_turned_ready_within_the_window_does_not_count_the_arrivals_twice():
    def E(s, pending):
        return TritonCounters(0, s * 1e6, s, pending=pending, trtllm_waiting=0.0, active=pending, slots=64.0)
    # 10 req/s throughout. "old" took them all for the first 45 s of the window (450), then "new" turned Ready and
    # took them all for the last 15 s (150): 600 arrivals in 60 s. Per-pod rates summed said 450/60 + 150/15 = 17.5.
    samples = {"old": [(-15, E(0, 0)), (0, E(150, 0)), (15, E(300, 0)), (30, E(450, 0)), (45, E(600, 0)),
                       (60, E(600, 0))],
               "new": [(45, E(0, 0)), (60, E(150, 0))]}
    r = window_ratio(samples, now=60, window_s=60, signal="engine")
    assert r.pods_used == 2
    assert r.arrival_rate == pytest.approx(10.0)
    # a pod sampled before the window whose scrapes failed at its start keeps its own span: 5 req/s each
    samples = {"a": [(-15, E(0, 0)), (0, E(75, 0)), (15, E(150, 0)), (30, E(225, 0)), (45, E(300, 0)),
                     (60, E(375, 0))],
               "b": [(-15, E(0, 0)), (45, E(300, 0)), (60, E(375, 0))]}
    assert window_ratio(samples, now=60, window_s=60, signal="engine").arrival_rate == pytest.approx(10.0)


def test_requests_cancelled_before_scheduling_do_not_dilute_the_compute_time_per_request():
    # 30 s window: 20 requests computed for 2 s each (40 s of compute), and 30 more finished as cancelled while
    # they waited (the TensorRT-LLM model counts them as finished, without engine timing; the request-time
    # histogram counts only the 20)
    def E(finished, timed, compute_s, pending):
        return TritonCounters(0, compute_s * 1e6, finished, pending=pending, trtllm_waiting=pending, active=0.0,
                              slots=64.0, request_buckets=((1.0, 0.0), (float("inf"), timed)))
    r = window_ratio({"a": [(0, E(0, 0, 0, 0)), (30, E(50, 20, 40, 0))]}, now=30, window_s=60, signal="engine")
    assert r.requests == 50 and r.request_hist_count == 20
    assert r.compute_s_per_request == pytest.approx(2.0)   # not 40 / 50 = 0.8
    assert r.arrival_rate == pytest.approx(50 / 30)        # the cancelled ones arrived too
    assert r.offered_load == pytest.approx(50 / 30 * 2.0)
    # without the histogram (an older serving image) the finished count is the divisor, as before
    old = window_ratio({"a": [(0, TritonCounters(0, 0, 0, pending=0.0, trtllm_waiting=0.0, active=0.0, slots=64.0)),
                             (30, TritonCounters(0, 40e6, 50, pending=0.0, trtllm_waiting=0.0, active=0.0,
                                                 slots=64.0))]}, now=30, window_s=60, signal="engine")
    assert old.compute_s_per_request == pytest.approx(0.8)


def test_activation_query_result_parses_to_the_requests_waiting():
    from llmbackend.autoscaling.sources import parse_scalar
    vec = {"resultType": "vector", "result": [{"metric": {}, "value": [1, "3"]}, {"metric": {}, "value": [1, "2"]}]}
    assert parse_scalar(vec) == 5
    assert parse_scalar({"resultType": "scalar", "result": [1, "4"]}) == 4
    assert parse_scalar({"resultType": "vector", "result": []}) is None
    assert parse_scalar({"resultType": "vector", "result": [{"value": [1, "NaN"]}]}) is None
    assert parse_scalar({"resultType": "vector", "result": [{"nope": 1}]}) is None
