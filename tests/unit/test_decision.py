"""Unit tests for decide() (pure): HPA-like scaling on the queue/compute ratio."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbackend.api.v1alpha1 import SCALER_MEMORY_MAX_TEXT, AutoscalingSpec
from llmbackend.autoscaling import decision as D
from llmbackend.autoscaling.coldstart import epoch_seconds
from llmbackend.autoscaling.decision import DEFAULT_KNOBS as KNOBS
from llmbackend.autoscaling.decision import Decision, ScalerState, decide
from llmbackend.autoscaling.ratio import RatioReading


def spec(**kw) -> AutoscalingSpec:
    # the learned headroom off unless a test is about it: the other behaviours are easier to read without it
    base = dict(enabled=True, min_replicas=1, max_replicas=10, scale_up_stabilization_seconds=0,
                scale_down_stabilization_seconds=0, max_scale_up_step=100, max_scale_down_step=100,
                learned_headroom_max=1.0)
    base.update(kw)
    return AutoscalingSpec(**base)


def warm() -> ScalerState:
    """A scaler that has been deciding for an hour (a fresh one holds scale-downs: its own test)."""
    return ScalerState(since=-3600.0)


def R(ratio, pods=None, reason="Ok"):
    return RatioReading(ratio, reason=reason, pods_used=pods)


def test_scale_up_like_hpa():
    d = decide(warm(), R(3.0, 2), spec(), 2, now=100)
    assert d.desired_replicas == 6 and d.reason == D.SCALED_UP
    assert d.state.last_scale_time == 100 and d.raw_recommendation == 6


def test_within_tolerance():
    d = decide(warm(), R(1.08, 3), spec(), 3, now=0)
    assert d.desired_replicas == 3 and d.reason == D.WITHIN_TOLERANCE
    assert d.state.last_scale_time is None


def test_warming_pods_do_not_compound_scale_up():
    # 4 replicas, only 1 serving yet (3 warming), ratio still 3: HPA counts unready at 0 -> ceil(1*3)=3 < 4 -> keep
    d = decide(warm(), R(3.0, 1), spec(), 4, now=0)
    assert d.desired_replicas == 4
    # a naive ceil(4*3) would ask for 12


def test_warming_pods_do_not_trigger_scale_down():
    # 4 replicas, 1 ready with ratio 0.2; unready count as target -> ceil(0.2 + 3) = 4 -> keep
    d = decide(warm(), R(0.2, 1), spec(), 4, now=0)
    assert d.desired_replicas == 4


def test_no_traffic_goes_to_min_and_stays():
    d = decide(warm(), R(0.0, 3, "NoTraffic"), spec(min_replicas=2), 3, now=0)
    assert d.desired_replicas == 2 and d.reason == D.AT_MIN_REPLICAS
    d = decide(d.state, R(0.0, 2, "NoTraffic"), spec(min_replicas=2), 2, now=15)
    assert d.desired_replicas == 2 and d.reason == D.AT_MIN_REPLICAS


def test_clamp_max_and_step_limits():
    d = decide(warm(), R(50.0, 2), spec(max_replicas=5), 2, now=0)
    assert d.desired_replicas == 5 and d.reason == D.AT_MAX_REPLICAS
    d = decide(warm(), R(50.0, 2), spec(max_scale_up_step=3), 2, now=0)
    assert d.desired_replicas == 5 and d.reason == D.SCALED_UP and "maxScaleUpStep" in d.message
    d = decide(warm(), R(0.1, 8), spec(max_scale_down_step=1), 8, now=0)
    assert d.desired_replicas == 7 and d.reason == D.SCALED_DOWN
    d = decide(warm(), R(5.0, 5), spec(max_replicas=5), 5, now=0)
    assert d.desired_replicas == 5 and d.reason == D.AT_MAX_REPLICAS


def test_scale_down_stabilization_uses_max_of_window():
    s = spec(scale_down_stabilization_seconds=300)
    st_ = warm()
    d = decide(st_, R(1.0, 4), s, 4, now=0)          # rec 4
    assert d.desired_replicas == 4
    d = decide(d.state, R(0.25, 4), s, 4, now=15)    # rec 1, but 4 within window
    assert d.desired_replicas == 4 and d.reason == D.STABILIZING_SCALE_DOWN
    d = decide(d.state, R(0.25, 4), s, 4, now=299)
    assert d.desired_replicas == 4
    d = decide(d.state, R(0.25, 4), s, 4, now=301)   # the rec of 4 at t=0 left the window
    assert d.desired_replicas == 1 and d.reason == D.SCALED_DOWN and d.state.last_scale_time == 301


@pytest.mark.parametrize("mode, window", [("operator", 60), ("hpa", 300), ("keda", 300)])
def test_scale_down_window_default_depends_on_the_mode(mode, window):
    extra = {"prometheus": {"url": "http://p:9090"}} if mode == "keda" else {}
    s = AutoscalingSpec(enabled=True, mode=mode, **extra)
    assert s.scale_down_stabilization_seconds is None and s.scale_down_window == window
    assert AutoscalingSpec(enabled=True, mode=mode, scale_down_stabilization_seconds=7, **extra).scale_down_window == 7


def test_operator_default_scales_down_one_minute_after_the_last_higher_recommendation():
    s = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=10, max_scale_down_step=100)
    d = decide(warm(), R(1.0, 4), s, 4, now=0)   # rec 4
    d = decide(d.state, R(0.25, 4), s, 4, now=59)       # rec 1, the 4 of t=0 still in the window
    assert d.desired_replicas == 4 and d.reason == D.STABILIZING_SCALE_DOWN and "60s" in d.message
    d = decide(d.state, R(0.25, 4), s, 4, now=61)
    assert d.desired_replicas == 1 and d.reason == D.SCALED_DOWN


def test_scale_up_stabilization_uses_min_of_window():
    s = spec(scale_up_stabilization_seconds=60)
    d = decide(warm(), R(1.0, 2), s, 2, now=0)   # rec 2
    d = decide(d.state, R(4.0, 2), s, 2, now=15)       # rec 8, min in window = 2
    assert d.desired_replicas == 2 and d.reason == D.STABILIZING_SCALE_UP
    d = decide(d.state, R(4.0, 2), s, 2, now=61)
    assert d.desired_replicas == 8


def test_missing_or_stale_metrics_never_scale():
    d = decide(warm(), R(None, 0, "NoSamples"), spec(), 3, now=0)
    assert d.desired_replicas == 3 and d.reason == D.METRICS_UNAVAILABLE
    d = decide(warm(), R(None, 0, "Stale"), spec(), 3, now=0)
    assert d.desired_replicas == 3 and d.reason == D.STALE_METRICS
    assert d.state.recommendations == []


def test_zero_replicas_without_data_goes_to_min():
    d = decide(warm(), R(None, 0, "NoSamples"), spec(min_replicas=2), 0, now=0)
    assert d.desired_replicas == 2
    d = decide(warm(), R(None, 0, "NoSamples"), spec(min_replicas=0), 0, now=0)
    assert d.desired_replicas == 0


def test_insufficient_capacity_caps_and_says_gpus():
    d = decide(warm(), R(4.0, 2), spec(), 2, now=0, schedulable_max=3, gpus_per_replica=4)
    assert d.desired_replicas == 3 and d.reason == D.INSUFFICIENT_CAPACITY
    assert "4 GPU" in d.message and "8" in d.message
    # capacity below current never forces a scale-down
    d = decide(warm(), R(4.0, 2), spec(), 2, now=0, schedulable_max=1, gpus_per_replica=8)
    assert d.desired_replicas == 2 and d.reason == D.INSUFFICIENT_CAPACITY


def test_a_reading_on_the_tolerance_bands_edge_is_inside_it():
    """Found by test_invariants: 0.5 / 0.75 is 0.666...6, one rounding step outside a tolerance of 1/3, so a
    reading exactly on the band's lower edge cancelled a replica."""
    assert D.raw_recommendation(0.5, 0.75, 1 / 3, 3, None) == 3
    assert D.raw_recommendation(1.0, 0.75, 1 / 3, 3, None) == 3  # the upper edge as well
    assert D.raw_recommendation(0.49, 0.75, 1 / 3, 3, None) < 3


def test_state_json_roundtrip():
    d = decide(warm(), R(3.0, 2), spec(scale_down_stabilization_seconds=300), 2, now=1_700_000_000)
    blob = json.loads(json.dumps(d.state.to_dict()))
    again = ScalerState.from_dict(blob)
    assert again == d.state
    assert again.last_scale_time_rfc3339() == "2023-11-14T22:13:20Z"
    assert ScalerState.from_dict(None) == ScalerState()


specs = st.builds(
    lambda lo, extra, target, tol, up, down, su, sd: AutoscalingSpec(
        enabled=True, min_replicas=lo, max_replicas=max(1, lo + extra), target_ratio=target, tolerance=tol,
        max_scale_up_step=up, max_scale_down_step=down,
        scale_up_stabilization_seconds=su, scale_down_stabilization_seconds=sd),
    st.integers(0, 5), st.integers(0, 10), st.floats(0.1, 5), st.floats(0, 0.5),
    st.integers(1, 8), st.integers(1, 8), st.sampled_from([0, 30, 60]), st.sampled_from([0, 60, 300]))
readings = st.one_of(
    st.builds(lambda r, p: RatioReading(r, pods_used=p), st.floats(0, 100), st.one_of(st.none(), st.integers(0, 20))),
    st.sampled_from([RatioReading(None, "NoSamples"), RatioReading(None, "Stale")]),
)


@settings(max_examples=300, deadline=None)
@given(specs, st.lists(st.tuples(readings, st.integers(1, 60)), min_size=1, max_size=12), st.integers(0, 20),
       st.one_of(st.none(), st.integers(0, 30)))
def test_invariants(s, steps, start, cap):
    state, cur, now = warm(), start, 0.0
    for reading, dt in steps:
        now += dt
        d: Decision = decide(state, reading, s, cur, now, schedulable_max=cap, gpus_per_replica=2)
        assert d.reason in D.REASONS
        n = d.desired_replicas
        if reading.ratio is None:
            # never scales on missing data except to get back inside the bounds
            assert n == cur or (cur < s.min_replicas and n == s.min_replicas) or (cur > s.max_replicas and n == s.max_replicas)
        else:
            if s.min_replicas <= cur <= s.max_replicas:
                assert s.min_replicas <= n <= s.max_replicas
                assert cur - s.max_scale_down_step <= n <= cur + s.max_scale_up_step
            if cap is not None and n > cur:
                assert n <= max(cap, s.min_replicas)
            if reading.ratio <= s.target_ratio * (1 + s.tolerance) and n > cur:
                assert cur < s.min_replicas  # scale up without pressure only to reach the floor
            if reading.ratio >= s.target_ratio * (1 - s.tolerance) and n < cur:
                assert cur > s.max_replicas
        if n != cur:
            assert d.state.last_scale_time == now
        json.dumps(d.state.to_dict())
        state, cur = d.state, n
    assert not math.isnan(cur)


def test_scale_down_waits_a_full_window_after_last_scale():
    s = spec(window_seconds=60, max_scale_down_step=1)
    d = decide(warm(), R(0.0, 5), s, 5, now=0)
    assert d.desired_replicas == 4 and d.reason == D.SCALED_DOWN
    d = decide(d.state, R(0.0, 4), s, 4, now=15)
    assert d.desired_replicas == 4 and d.reason == D.STABILIZING_SCALE_DOWN and "window" in d.message
    d = decide(d.state, R(0.0, 4), s, 4, now=61)
    assert d.desired_replicas == 3


def test_occupancy_guard_keeps_replicas_that_carry_traffic():
    # ratio 0 (no queueing) but 3 pods each with 20 of 32 slots busy: removing one would
    # put 60 requests on 2 replicas (94 %), above the 50 % guard -> keep 3
    r = RatioReading(0.0, pods_used=3, mean_inflight_per_pod=20.0)
    d = decide(warm(), r, spec(), 3, now=0, max_batch_size=32)
    assert d.desired_replicas == 3 and d.reason == D.STABILIZING_SCALE_DOWN
    # lightly loaded: 4 in flight per pod -> 12 total fits 1 replica at 37 %
    r = RatioReading(0.0, pods_used=3, mean_inflight_per_pod=4.0)
    d = decide(warm(), r, spec(max_scale_down_step=5), 3, now=0, max_batch_size=32)
    assert d.desired_replicas == 1
    # without the batch size the guard is off (ratio alone)
    d = decide(warm(), RatioReading(0.0, pods_used=3, mean_inflight_per_pod=20.0), spec(), 3, now=0)
    assert d.desired_replicas == 1


def test_engine_backlog_blocks_scale_down_that_the_ratio_alone_would_allow():
    # Decoupled TRT-LLM: Triton's queue is empty (ratio 0) but the executor holds waiting requests.
    quiet = RatioReading(0.0, reason="Ok", pods_used=3)
    assert decide(warm(), quiet, spec(), 3, now=0).desired_replicas == 1
    waiting = RatioReading(0.0, reason="Ok", pods_used=3, trtllm_waiting=4.0)
    d = decide(warm(), waiting, spec(), 3, now=0)
    assert d.desired_replicas == 3 and d.reason == D.STABILIZING_SCALE_DOWN
    assert "waiting inside the executor" in d.message
    full_kv = RatioReading(0.0, reason="Ok", pods_used=3, trtllm_waiting=0.0, kv_cache_fraction=0.97)
    d = decide(warm(), full_kv, spec(), 3, now=0)
    assert d.desired_replicas == 3 and "KV cache 97% used" in d.message
    # The guard never blocks honouring a lowered maxReplicas.
    assert decide(warm(), waiting, spec(max_replicas=2), 3, now=0).desired_replicas == 2


# ---- the engine's view: saturation, forecast one cold start ahead, scale to zero ----

def engine_reading(ratio, pods, in_flight, slots_per_pod=64, reason="Ok", requests=10.0, kv=None):
    active = min(in_flight, slots_per_pod * pods)
    return RatioReading(ratio, reason=reason, pods_used=pods, signal="engine", active=active,
                        slots=slots_per_pod * pods, trtllm_waiting=in_flight - active, requests=requests,
                        kv_cache_fraction=kv)


def test_ratio_near_zero_but_slots_full_scales_up_after_the_saturation_window():
    decide = partial(D.decide, knobs=replace(KNOBS, HEADROOM_BETA=0.0))  # the saturation trigger alone (headroom: its own test)
    s = spec(saturation_seconds=10, forecast=False, target_utilization=0.8)
    r = engine_reading(0.01, 2, in_flight=140)  # 128 slots full, 12 waiting; ratio still ~0
    first = decide(warm(), r, s, 2, now=0)
    # capacity alone already asks for ceil(140 / (0.8 * 64)) = 3
    assert first.desired_replicas == 3
    # full slots, demand that fits the target: the ratio lags, saturation alone scales up once sustained
    r = engine_reading(0.01, 2, in_flight=128)
    s = spec(saturation_seconds=10, forecast=False, target_utilization=1.0)
    d0 = decide(warm(), r, s, 2, now=0)
    assert d0.desired_replicas == 2 and d0.state.saturated_since == 0
    d1 = decide(d0.state, r, s, 2, now=15)
    assert d1.desired_replicas == 3 and d1.reason == D.ENGINE_SATURATED
    assert "batch slots busy" in d1.message


def test_saturation_step_is_sized_from_the_backlog_and_bounded_by_capacity():
    decide = partial(D.decide, knobs=replace(KNOBS, HEADROOM_BETA=0.0))
    s = spec(saturation_seconds=0, forecast=False, target_utilization=0.5, max_scale_up_step=1, max_replicas=50)
    r = engine_reading(0.0, 2, in_flight=640)  # 10 replicas of slots at 100 %, 20 at 50 %
    d = decide(warm(), r, s, 2, now=0)
    assert d.desired_replicas == 20  # maxScaleUpStep 1 does not cut a backlog-sized step
    d = decide(warm(), r, s, 2, now=0, schedulable_max=6, gpus_per_replica=8)
    assert d.desired_replicas == 6 and d.reason == D.INSUFFICIENT_CAPACITY and "8 GPU(s)" in d.message
    # KV cache above threshold counts as saturated too
    r = engine_reading(0.0, 2, in_flight=20, kv=0.99)
    d = decide(warm(), r, spec(saturation_seconds=0, forecast=False), 2, now=0)
    assert d.desired_replicas == 3 and d.reason == D.ENGINE_SATURATED and "KV cache 99%" in d.message


def test_stale_metrics_hold_and_say_why():
    stale = RatioReading(None, reason="Stale", message="no sample from 3 pod(s) within the last 60s", pods_used=0,
                         signal="engine", active=200.0, slots=192.0)
    d = decide(ScalerState(saturated_since=0.0), stale, spec(saturation_seconds=0), 3, now=100)
    assert d.desired_replicas == 3 and d.reason == D.STALE_METRICS
    assert "no sample from 3 pod(s)" in d.message


def test_no_completions_with_full_slots_still_scales_on_saturation():
    decide = partial(D.decide, knobs=replace(KNOBS, HEADROOM_BETA=0.0))
    # long generations: nothing finished in the window, the ratio cannot be computed, the engine is full
    r = engine_reading(None, 2, in_flight=150, reason="NoCompletions", requests=0.0)
    d = decide(warm(), r, spec(saturation_seconds=0, forecast=False, target_utilization=1.0), 2, now=0)
    assert d.desired_replicas == 3 and d.reason == D.ENGINE_SATURATED


def _ramp(cold_start_s):
    """Requests in flight rising 1 per 10 s from 60; returns the time of the first scale-up from 4 replicas."""
    s = spec(window_seconds=60, target_utilization=0.8, forecast=True, saturation_seconds=30)
    state, cur = warm(), 4
    for t in range(0, 1200, 15):
        d = decide(state, engine_reading(0.0, cur, in_flight=60 + t / 10), s, cur, now=float(t), cold_start_s=cold_start_s)
        state = d.state
        if d.desired_replicas > cur:
            return t
    return None


def test_cold_start_4_min_scales_earlier_than_1_min():
    t240, t60 = _ramp(240.0), _ramp(60.0)
    assert t240 is not None and t60 is not None
    assert t240 < t60
    # and neither waits for the load itself: both scale before the requests in flight need a fifth replica
    view = D.EngineView(0, 64, 0, 0, "")
    load_needs_5 = next(t for t in range(0, 1200, 15) if view.replicas_for(60 + t / 10, 0.8) > 4)
    assert t60 < load_needs_5


def test_forecast_never_scales_down_on_a_falling_trend():
    s = spec(window_seconds=60, target_utilization=0.8)
    state = warm()
    for t in range(0, 300, 15):  # falling load
        d = decide(state, engine_reading(0.0, 4, in_flight=max(0, 200 - t)), s, 4, now=float(t), cold_start_s=240)
        state = d.state
        assert d.engine.forecast >= d.engine.in_flight


def test_scale_to_zero_only_after_the_idle_period():
    s = spec(min_replicas=0, scale_to_zero_after_seconds=600)
    idle = engine_reading(0.0, 1, in_flight=0, reason="NoTraffic", requests=0.0)
    state = warm()
    for t in range(0, 600, 15):
        d = decide(state, idle, s, 1, now=float(t))
        state = d.state
        assert d.desired_replicas == 1
    assert d.reason == D.WAITING_TO_SCALE_TO_ZERO
    d = decide(state, idle, s, 1, now=615)
    assert d.desired_replicas == 0
    # 0 -> 1 when requests wait in front of a backend without replicas; nothing waiting keeps 0
    none = RatioReading(None, reason="NoSamples", pods_used=0)
    assert decide(warm(), none, s, 0, now=0).desired_replicas == 0
    d = decide(warm(), none, s, 0, now=0, waiting_at_zero=3)
    assert d.desired_replicas == 1 and d.reason == D.SCALED_FROM_ZERO


def test_schedule_floor_raises_min_replicas_inside_its_range():
    s = spec(min_replicas=1, schedule=[{"start": "08:00", "end": "18:00", "minReplicas": 4}])
    at_9 = 9 * 3600.0
    assert D.schedule_floor(s, at_9) == 4 and D.schedule_floor(s, 20 * 3600.0) == 0
    d = decide(warm(), R(0.0, 2), s, 2, now=at_9)
    assert d.desired_replicas == 4


def test_robust_forecast_follows_a_ramp_and_ignores_a_burst():
    # a ramp of 0.1 per second: the trend is extrapolated over the horizon
    ramp = [(float(t), t / 10.0) for t in range(0, 300, 15)]
    assert D.theil_sen_slope(ramp) == pytest.approx(0.1)
    assert D.robust_forecast(ramp, 285.0, 240.0, 0.5, KNOBS) == pytest.approx(min(28.5 + 24.0, KNOBS.TREND_MAX_GROWTH * 28.5))
    assert D.robust_forecast(ramp, 285.0, 120.0, 0.5, KNOBS) == pytest.approx(min(28.5 + 12.0, KNOBS.TREND_MAX_GROWTH * 28.5))
    # a flat load of 40 with a 2 min burst to 80 inside the last 4 min: no trend, the level is the median
    burst = [(float(t), 80.0 if 120 <= t < 240 else 40.0) for t in range(0, 300, 15)]
    assert D.theil_sen_slope(burst) == 0.0
    assert D.robust_forecast(burst, 285.0, 240.0, 0.5, KNOBS) == 40.0
    # the same burst on a ramp: the ramp's trend, not the burst's
    on_ramp = [(t, x + t / 10.0) for t, x in burst]
    assert D.robust_forecast(on_ramp, 285.0, 240.0, 0.5, KNOBS) < 40.0 + 28.5 + 24.0 + 1
    # a step that has lasted more than half the horizon is the level
    step = [(float(t), 80.0 if t >= 120 else 40.0) for t in range(0, 300, 15)]
    assert D.robust_forecast(step, 285.0, 240.0, 0.5, KNOBS) == 80.0


def test_batch_fit_predicts_compute_time_at_the_target_batch():
    # compute time per request = 5 s + 0.1 s per sequence in the batch, seen at batches 10..40
    fit = D.BatchFit((0.0,) * 5, 0.0)
    for i, b in enumerate([10, 20, 30, 40, 15, 35]):
        fit = fit.add(b, 5 + 0.1 * b, float(i * 15), D.FIT_TAU_S)
    assert fit.at(60) == pytest.approx(11.0, rel=1e-6)
    # one operating point only: no slope to trust, the mean
    flat = D.BatchFit((0.0,) * 5, 0.0).add(20, 7.0, 0.0, D.FIT_TAU_S).add(20.5, 7.1, 15.0, D.FIT_TAU_S)
    assert flat.at(60) == pytest.approx(7.05, rel=1e-3)


def test_load_at_the_target_batch_does_not_oscillate_with_the_replica_count():
    # Same traffic (10 req/s) seen at 4 replicas (small batch, fast tokens) and 2 replicas (big batch):
    # in flight differs, the replicas wanted do not.
    s = spec(target_utilization=0.5, forecast=False, scale_down_stabilization_seconds=0)
    state = warm()
    wants = []
    for i, (cur, b) in enumerate([(4, 15), (2, 40), (4, 15), (2, 40), (4, 15), (2, 40)]):
        t_req = 5 + 0.1 * b
        r = RatioReading(0.0, pods_used=cur, signal="engine", active=float(b * cur), slots=64.0 * cur,
                         trtllm_waiting=0.0, requests=600.0, compute_us=600 * t_req * 1e6,
                         mean_inflight_per_pod=float(b), arrival_rate=10.0)
        d = decide(state, r, s, cur, now=float(i * 60))
        state = d.state
        wants.append(d.engine.load)
    # after both operating points were seen: the load at the target batch (32) is 10 x (5 + 3.2) = 82
    assert wants[-1] == pytest.approx(82.0, rel=0.01) and wants[-2] == pytest.approx(82.0, rel=0.01)


def test_engine_state_json_roundtrip_and_kept_through_a_stale_reading():
    r = RatioReading(0.0, pods_used=2, signal="engine", active=60.0, slots=128.0, trtllm_waiting=0.0, requests=100.0,
                     compute_us=100 * 6e6, mean_inflight_per_pod=30.0, arrival_rate=10.0)
    d = decide(warm(), r, spec(), 2, now=1000.0, cold_start_s=200)
    assert d.state.loads and d.state.fit is not None
    again = ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict())))
    assert again == d.state
    held = decide(again, RatioReading(None, reason="Stale", pods_used=0), spec(), 2, now=1015.0)
    assert held.state.fit == d.state.fit and held.state.loads == d.state.loads


@pytest.mark.parametrize("load,expected", [(0.0, 0), (32.0, 2), (320.0, 12), (3200.0, 105)])
def test_headroom_is_relatively_larger_for_small_backends(load, expected):
    # R = load / (0.5 x 64); replicas = ceil(R + 0.5 sqrt(R)): 1 -> 2 (+100 %), 10 -> 12 (+20 %), 100 -> 105
    view = D.EngineView(in_flight=load, slots_per_replica=64, forecast=load, cold_start_s=0, saturated="", load=load)
    r = load / 32
    assert view.replicas_for(load, 0.5) == math.ceil(r + KNOBS.HEADROOM_BETA * math.sqrt(r) - 1e-9)
    if KNOBS.HEADROOM_BETA == 0.5:
        assert view.replicas_for(load, 0.5) == expected


def _engine(in_flight, ready, **kw):
    """An engine reading from ``ready`` pods of 64 slots with ``in_flight`` requests (no arrival rate: in flight is
    the load)."""
    return engine_reading(0.0, ready, in_flight=in_flight, **kw)


def test_replicas_still_starting_count_as_supply():
    # 4 ready at 60 % of their slots, the load wants 8 at 50 %: order 4 more once...
    s = spec(forecast=False, target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=60)
    load = 8 * 32 - 1  # 8 replicas at exactly 50 % (no headroom term: checked below with the real formula)
    want = D.EngineView(0, 64, load, 0, "", load).replicas_for(load, 0.5)
    state, cur = warm(), 4
    d = decide(state, _engine(load, 4), s, cur, now=0)
    assert d.desired_replicas == want and d.reason == D.FORECAST_LOAD
    assert d.engine.ready == 4 and d.engine.starting == 0
    # ...and not again while they start: the same load, 4 ready + (want - 4) starting, is covered
    state, cur = d.state, d.desired_replicas
    for t in range(15, 240, 15):
        d = decide(state, _engine(load, 4), s, cur, now=float(t))
        state = d.state
        assert d.desired_replicas == cur, d.message
        assert d.engine.starting == cur - 4
    assert f"supply 4 ready + {cur - 4} starting" in d.message


def test_no_cancel_and_reorder_under_noise():
    # A steady 15.6 req/s of 9 s requests (140 sequences busy: 4.4 replicas at 50 %, 8 with the square-root
    # headroom), counted over a 60 s window (Poisson noise), 2 ready and the rest starting, turning Ready over the
    # first minutes: nothing is cancelled and ordered again.
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=60, forecast=True)
    need = D.EngineView(0, 64, 0, 0, "").replicas_for(140, 0.5)
    for seed in range(5):
        rng = __import__("numpy").random.default_rng(seed)
        state, cur = warm(), need
        changes = []
        for t in range(0, 1800, 15):
            ready = min(cur, 2 + t // 240)
            load = rng.poisson(140.0 / 9 * 60) * 9 / 60
            d = decide(state, _engine(load, ready), s, cur, now=float(t), cold_start_s=240)
            state = d.state
            if d.desired_replicas != cur:
                changes.append((t, d.message))
            cur = d.desired_replicas
        assert changes == [] and cur == need


def test_saturation_with_replicas_starting_sizes_one_step():
    decide = partial(D.decide, knobs=replace(KNOBS, HEADROOM_BETA=0.0))  # the saturation step alone
    # 2 ready with full slots and a backlog: 192 in flight / (0.5 x 64) = 6 replicas in all
    s = spec(forecast=False, target_utilization=0.5, max_replicas=40, saturation_seconds=0)
    full = _engine(192, 2)
    d = decide(warm(), full, s, 2, now=0)
    assert d.desired_replicas == 6 and d.reason == D.ENGINE_SATURATED
    # saturation goes on while the 4 start: no more replicas (not +1 per sync)
    state = d.state
    for t in range(15, 300, 15):
        d = decide(state, full, s, 6, now=float(t))
        state = d.state
        assert d.desired_replicas == 6, d.message
    # a backlog that grows further orders the difference, once
    d = decide(state, _engine(320, 2), s, 6, now=300)
    assert d.desired_replicas == 10


def test_a_backlog_draining_into_replicas_that_turned_ready_orders_nothing_more():
    decide = partial(D.decide, knobs=replace(KNOBS, HEADROOM_BETA=0.0))  # the saturation step alone
    # 4 ready replicas, every slot busy with a backlog (600 in flight); the arrivals (4 req/s x 6 s each) keep 24
    # sequences busy, which 1 replica carries at 50 %
    s = spec(forecast=False, target_utilization=0.5, max_replicas=40, saturation_seconds=0)

    def backlog(ready):
        return RatioReading(3.0, reason="Ok", pods_used=ready, signal="engine", active=64.0 * ready,
                            slots=64.0 * ready, trtllm_waiting=600 - 64.0 * ready, requests=60.0,
                            compute_us=60 * 6e6, mean_inflight_per_pod=64.0, arrival_rate=4.0)
    # nothing starting: the busy slots are the demand's lower bound (256 / 32 = 8 replicas)
    assert decide(warm(), backlog(4), s, 4, now=0).desired_replicas == 8
    # 2 more starting: the busy slots hold the backlog, which every replica turning Ready fills; the arrivals
    # need no more than the 6 there are (sized from the busy slots it ordered 8)
    d = decide(warm(), backlog(4), s, 6, now=0)
    assert d.desired_replicas == 6, d.message


def test_empty_history_holds():
    # A scaler that just started (operator restart): a low first reading does not scale down
    s = spec(target_utilization=0.5, scale_down_stabilization_seconds=0, window_seconds=60)
    low = _engine(10, 4)
    d = decide(ScalerState(), low, s, 4, now=1000)
    assert d.desired_replicas == 4
    d = decide(d.state, low, s, 4, now=1030)
    assert d.desired_replicas == 4
    # once a full window was seen, it may
    d = decide(d.state, low, s, 4, now=1060)
    assert d.desired_replicas < 4
    # the ratio path (no engine gauges) holds too
    assert decide(ScalerState(), R(0.0, 3), s, 3, now=0).desired_replicas == 3


@pytest.mark.parametrize("utilization", [None, 0.5])
@pytest.mark.parametrize("rate", [x / 2 for x in range(1, 49)])
def test_constant_poisson_rate_scales_at_most_once_per_10_min(utilization, rate):
    # ``rate`` req/s (0.5 to 24), 9 s per request; Poisson counts over the 60 s window. Every rate: some sit on
    # the boundary between two replica counts, where the noise alone would flap a replica without hysteresis.
    s = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=40, **(
        {} if utilization is None else {"target_utilization": utilization}))  # None: the defaults
    rng = __import__("numpy").random.default_rng(3)
    state, cur, events = warm(), 1, []
    for k in range(400):  # 100 min at 15 s
        arrivals = rng.poisson(rate * 60)
        r = RatioReading(0.0, pods_used=cur, signal="engine", active=float(min(arrivals * 9 / 60, 64 * cur)),
                         slots=64.0 * cur, trtllm_waiting=0.0, requests=float(arrivals), compute_us=arrivals * 9e6,
                         mean_inflight_per_pod=arrivals * 9 / 60 / cur, arrival_rate=arrivals / 60)
        d = decide(state, r, s, cur, now=k * 15.0, cold_start_s=240)
        state = d.state
        if d.desired_replicas != cur:
            events.append(k * 15.0)
        cur = d.desired_replicas
    after_warmup = [t for t in events if t >= 600]
    assert len(after_warmup) <= (400 * 15 - 600) / 600, events


def test_a_short_cold_start_still_scales_down():
    # cold start 5 s, window 10 s (as on kwok pods): the history must still reach a full window
    s = spec(target_utilization=0.5, window_seconds=10, sync_period_seconds=2, scale_down_stabilization_seconds=0)
    state, cur = warm(), 3
    for t in range(0, 40, 2):
        d = decide(state, _engine(0.2, 3), s, cur, now=float(t), cold_start_s=5)
        state, cur = d.state, d.desired_replicas
    assert cur == 1


def test_starting_replicas_go_only_once_the_load_expected_at_ready_time_does_not_need_them():
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=60, max_scale_down_step=1)
    # 4 ready, the rest starting for a surge (330 sequences) that then falls to 60 (2 replicas' worth at 50 %)
    view = D.EngineView(0, 64, 0, 0, "")
    surge, low = view.replicas_for(330, 0.5), view.replicas_for(60, 0.5 * KNOBS.SCALE_DOWN_MARGIN)
    assert surge > low >= 2
    state, cur, t = warm(), surge, 0.0
    for _ in range(4):
        state = decide(state, _engine(330, 4), s, cur, now=t, cold_start_s=240).state
        t += 15
    held = []
    while t < 240:  # the surge is still within the last cold start: its 90th percentile keeps the replicas
        d = decide(state, _engine(60, 4), s, cur, now=t, cold_start_s=240)
        state, t = d.state, t + 15
        held.append(d.desired_replicas)
    assert held and min(held) == surge
    # once the whole cold start (+ half a window) saw only the low load, they go, one per decision
    while t < 700:
        d = decide(state, _engine(60, 4), s, cur, now=t, cold_start_s=240)
        assert d.desired_replicas >= cur - 1
        state, cur, t = d.state, d.desired_replicas, t + 15
    assert cur <= low
    # requests waiting in the engines hold the starting replicas whatever the load reads
    waiting = _engine(300, 4)  # 256 slots, 44 waiting
    d = decide(ScalerState(since=-3600.0, loads=[(t - 300 + i * 15, 10.0) for i in range(20)]), waiting, s, surge,
               now=t, cold_start_s=240)
    assert d.desired_replicas >= surge


def test_a_starting_replica_mostly_spent_is_not_cancelled():
    # 4 ready, 4 starting ordered for a surge that is over; the low load needs 3 replicas
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0)
    state = ScalerState(since=-3600.0, loads=[(-600.0 + i * 15, 60.0) for i in range(40)])
    low = _engine(60, 4)
    # young ones (a quarter of the cold start spent) are cancelled
    d = decide(state, low, s, 8, now=0, cold_start_s=240, starting_ages=[60, 60, 50, 40])
    assert d.desired_replicas < 8
    # two of them past KEEP_STARTING_SPENT of their cold start: those two stay (the two young ones go; not-Ready
    # pods go first, so the ready ones stay with them)
    ages = [KNOBS.KEEP_STARTING_SPENT * 240 + 10, KNOBS.KEEP_STARTING_SPENT * 240 + 5, 30, 20]
    d = decide(state, low, s, 8, now=0, cold_start_s=240, starting_ages=ages)
    assert d.desired_replicas == 6, d.message
    # without starting replicas the same history scales down as before (nothing to keep)
    d = decide(state, _engine(60, 8), s, 8, now=0, cold_start_s=240, starting_ages=[])
    assert d.desired_replicas < 8
    # more ages than starting replicas (a pod terminating) never keep more than the starting ones
    d = decide(state, low, s, 5, now=0, cold_start_s=240, starting_ages=[200.0] * 4)
    assert d.desired_replicas == 5


def test_burst_memory_keeps_standing_capacity_for_the_next_short_burst():
    # 2 req/s of 9 s requests (18 sequences) with a 2-minute burst to 180 sequences; slots 64 at utilization 0.5
    def run(memory_s, until):
        s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0,
                 burst_memory_seconds=memory_s)
        state, cur, seen = warm(), 2, []
        for t in range(0, until, 15):
            in_flight = 180 if 600 <= t < 720 else 18
            ready = min(cur, 2 + max(0, t - 600) // 240 * 4)
            d = decide(state, _engine(in_flight, ready), s, cur, now=float(t), cold_start_s=240)
            state, cur = d.state, d.desired_replicas
            seen.append((t, cur, d.reason))
        return cur, seen, state

    off, _, _ = run(0, 3000)
    floor = D.EngineView(0, 64, 0, 0, "").replicas_for(180 * 0.9 + 18 * 0.1, 0.5)
    on, seen, state = run(3600, 3000)
    assert off <= 2          # without memory: back to what the base load needs
    assert on >= floor - 1   # with it: what the burst needed stands (the burst's 90th percentile of loads)
    assert on > off
    assert any(r == D.BURST_FLOOR for _, _, r in seen) or max(c for _, c, _ in seen) >= on
    # the memory is bounded: buckets older than burstMemorySeconds are dropped, and then the floor goes
    later, _, _ = run(1200, 3000)
    assert later <= 2
    # the memory survives the status round trip
    assert ScalerState.from_dict(json.loads(json.dumps(state.to_dict()))).peaks == state.peaks


def test_burst_memory_off_keeps_no_peaks():
    s = spec(target_utilization=0.5)
    d = decide(warm(), _engine(100, 2), s, 2, now=0, cold_start_s=240)
    assert d.state.peaks == [] and d.engine.floor_load == 0.0


HMAX = 1.5  # learnedHeadroomMax in the tests of the learned headroom


def _learned(bursty: bool, until_s: int, burst_until_s: int | None = None, state=None, learned: float = 0.0,
             burst_ratio: float = 0.0, knobs=KNOBS):
    """60 sequences busy (in flight), with a 2-minute burst to 120 every 15 min when ``bursty`` (until
    ``burst_until_s``; the queue/compute ratio ``burst_ratio`` then, else 0); 4 replicas of 64 slots, utilization 0.5
    (``learned``: learnedUtilization, off by default), cold start 4 min, the decision's ``knobs``. Returns the last
    decision."""
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=HMAX,
             learned_utilization=learned)
    state = state or ScalerState(since=0.0)
    d = None
    for t in range(0, until_s, 15):
        burst = bursty and (burst_until_s is None or t < burst_until_s) and t % 900 < 120
        reading = engine_reading(burst_ratio if burst else 0.0, 4, in_flight=120.0 if burst else 60.0)
        d = decide(state, reading, s, 4, now=float(t), cold_start_s=240, knobs=knobs)
        state = d.state
    assert d is not None
    return d


def test_learned_headroom_starts_at_its_maximum_and_learns_smooth_traffic_needs_none():
    prior = replace(KNOBS, SURPRISE_PRIOR_S=900.0)
    first = _learned(False, 15, knobs=prior)
    assert first.engine.headroom == HMAX  # a new scaler assumes the largest bursts for SURPRISE_PRIOR_S
    smooth = _learned(False, int(max(prior.SURPRISE_MEMORY_S, prior.SURPRISE_PRIOR_S)) + 600, knobs=prior)
    assert smooth.engine.headroom == 1.0
    assert "headroom" not in smooth.message
    # the forecast alone sizes the fleet: fewer replicas than while the prior held
    assert smooth.raw_recommendation < first.raw_recommendation


def test_learned_headroom_keeps_what_the_recent_bursts_needed_and_forgets_them():
    bursty = _learned(True, int(max(KNOBS.SURPRISE_MEMORY_S, KNOBS.SURPRISE_PRIOR_S)) + 600)
    # bursts to 2x the base within a cold start: the forecast made before each burst was short by about 2x
    assert 1.5 <= bursty.engine.headroom <= HMAX
    assert f"headroom x{bursty.engine.headroom:.2f}" in bursty.message
    smooth = _learned(False, int(max(KNOBS.SURPRISE_MEMORY_S, KNOBS.SURPRISE_PRIOR_S)) + 600)
    assert bursty.raw_recommendation > smooth.raw_recommendation  # standing capacity between the bursts
    # an hour after the last burst it is forgotten
    calm = _learned(True, 2 * int(KNOBS.SURPRISE_MEMORY_S) + 1200, burst_until_s=int(max(KNOBS.SURPRISE_MEMORY_S, KNOBS.SURPRISE_PRIOR_S)) + 600)
    assert calm.engine.headroom == 1.0
    # it survives the state's JSON round trip
    again = ScalerState.from_dict(json.loads(json.dumps(bursty.state.to_dict())))
    assert again.surprises == bursty.state.surprises and again.forecasts == bursty.state.forecasts


def test_a_burst_over_learned_headroom_max_that_queued_is_remembered_whole_and_warned():
    # the same 2x bursts with learnedHeadroomMax 1.5, requests queueing over the target ratio during them: the
    # decision multiplies the forecast by 1.5 at most, the memory keeps the whole rise, and the admin is told
    span = int(max(KNOBS.SURPRISE_MEMORY_S, KNOBS.SURPRISE_PRIOR_S)) + 600
    auto, off = spec(learned_headroom_max=HMAX), spec(learned_headroom_max=HMAX, burst_floor="off")
    bursty = _learned(True, span, burst_ratio=3.0)
    largest = max(x for _, x in bursty.state.surprises)
    assert largest >= HMAX * D.BURST_OVER_CAP and D.bursts_over_cap(bursty.state, HMAX, span, KNOBS)
    assert bursty.engine.headroom == HMAX
    # burstFloor auto (the default): the burst floor stands for them, and the warning says since when and how to
    # turn it off
    assert bursty.state.floor_since is not None
    warning = D.burst_warning(bursty.state, auto, span)
    assert warning is not None and f"x{largest:.1f}" in warning and "over the x1.5 learnedHeadroomMax" in warning
    assert "burst floor" in warning and "burstFloor off" in warning
    # burstFloor off (no floor then): what to set
    unfloored = replace(bursty.state, floor_since=None)
    advice = D.burst_warning(unfloored, off, span)
    assert advice is not None and f"learnedHeadroomMax to {D.advised_headroom(largest):g} " in advice
    assert largest <= D.advised_headroom(largest) < largest + 0.1
    tall = D.burst_warning(replace(unfloored, surprises=[(0.0, 6.8)]),
                           spec(learned_headroom_max=2.0, burst_floor="off"), span)
    assert tall is not None and "x6.8" in tall and "over learnedHeadroomMax's limit" in tall
    # a burst floor of the admin's own already stands for them
    assert D.burst_warning(unfloored, spec(learned_headroom_max=HMAX, burst_memory_seconds=600), span) is None
    # the same bursts absorbed by the standing spare (no queue over the target): no floor, no reason to pay for more
    absorbed = _learned(True, span)
    assert absorbed.state.surprises == bursty.state.surprises and absorbed.state.queued_at is None
    assert absorbed.state.floor_since is None and D.burst_warning(absorbed.state, off, span) is None
    # a cap that covers the bursts, smooth traffic, a learned headroom turned off, a forgotten burst: no warning
    assert D.burst_warning(unfloored, spec(learned_headroom_max=min(4.0, largest), burst_floor="off"), span) is None
    assert D.burst_warning(_learned(False, span).state, off, span) is None
    assert D.burst_warning(unfloored, spec(learned_headroom_max=1.0, burst_floor="off"), span) is None
    later = 2 * int(KNOBS.SURPRISE_MEMORY_S) + 1200
    forgotten = _learned(True, later, burst_until_s=span, burst_ratio=3.0).state
    assert forgotten.floor_since is None and D.burst_warning(forgotten, off, later) is None
    # the floor and its warning survive an operator restart with the memory
    resumed = ScalerState.resumed({**bursty.state.memory(span), **bursty.state.recent()}, float(span))
    assert resumed.floor_since == bursty.state.floor_since and resumed.queued_at == bursty.state.queued_at
    assert D.burst_warning(resumed, auto, span) == warning


def _spiky(s, until_s: int, spikes_until_s: int, queue: bool = True):
    """20 sequences busy, a 3-minute spike to 140 every 15 min until ``spikes_until_s`` (queueing over the target
    when ``queue`` and the ready replicas have fewer than 140 slots); 64-slot replicas that are Ready at once (the
    decisions' replicas feed back). Returns (time, decision) pairs."""
    state, cur, out = ScalerState(since=0.0), 1, []
    for t in range(0, until_s, 15):
        spike = t < spikes_until_s and t % 900 < 180
        ratio = 3.0 if spike and queue and cur * 64 < 140 else 0.0
        d = decide(state, engine_reading(ratio, cur, in_flight=140.0 if spike else 20.0), s, cur, now=float(t),
                   cold_start_s=240)
        state, cur = d.state, d.desired_replicas
        out.append((t, d))
    return out


def test_bursts_over_the_cap_that_queued_keep_a_burst_floor_while_they_are_remembered():
    # 7x spikes with learnedHeadroomMax 2: a spike queues, and from then on the replicas its peak needed stand
    # between the spikes, so the next ones find them Ready and do not queue; the floor stays while such spikes are
    # remembered (not only while they queue), and goes once none is
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=2.0)
    runs = _spiky(s, 8400, 4500)
    queued = [t for t, d in runs if d.state.queued_at == t]
    assert queued and max(queued) < 1800, queued  # only the spikes before the floor stood queued
    between = [(t, d) for t, d in runs if 1500 <= t < 4500 and t % 900 >= 600]  # before each later spike
    assert between and all(d.engine.floor_load > 0 and d.desired_replicas * 64 >= 140 for _, d in between)
    assert any(t - max(queued) > KNOBS.SURPRISE_MEMORY_S for t, _ in between)
    last = runs[-1][1]
    assert last.engine.floor_load == 0 and last.state.floor_since is None and last.desired_replicas * 64 < 140
    # without a queue (the spare absorbed them), with burstFloor off or the learned headroom off: no floor
    for other, queue in ((s, False), (s.model_copy(update={"burst_floor": "off"}), True),
                         (s.model_copy(update={"learned_headroom_max": 1.0}), True)):
        assert all(d.engine.floor_load == 0 for t, d in _spiky(other, 3600, 3600, queue) if d.engine), other


def _about_once_a_cold_start(s, until_s: int, quiet_from_s: int, knobs=KNOBS):
    """60 sequences busy with a 90 s burst to 120 every 270 s (about once a cold start: the forecast's level always
    holds the last burst) until ``quiet_from_s``, then 60 only; the decisions' replicas feed back. Returns (time,
    decision) pairs."""
    state, cur, out = ScalerState(since=0.0), 4, []
    for t in range(0, until_s, 15):
        burst = t < quiet_from_s and t % 270 < 90
        d = decide(state, engine_reading(0.0, cur, in_flight=120.0 if burst else 60.0), s, cur, now=float(t),
                   cold_start_s=240, knobs=knobs)
        state, cur = d.state, d.desired_replicas
        out.append((t, d))
    return out


def test_bursts_about_once_a_cold_start_keep_their_rise_over_the_base_standing_through_a_calm_spell():
    # each forecast is made while the last burst is within its cold start, so no burst surprises it (headroom 1).
    # What they rose over the load beside them (2x) is remembered on its own: when a calm cold start brings the
    # forecast down to the base, the replicas the next burst needs stay standing. (Found on the benchmark's
    # steady-bursty trace: 8 -> 3 replicas after 6 calm minutes, then a 2x burst on 3.)
    no_prior = replace(KNOBS, SURPRISE_PRIOR_S=0.0)  # a new scaler's prior: its own test
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=2.0)
    runs = _about_once_a_cold_start(s, 3000, 2400, no_prior)
    calm = [d for t, d in runs if t >= 2400 + 300]  # a whole cold start after the last burst
    assert calm and all(d.engine.forecast == pytest.approx(60.0) for d in calm)
    assert all(d.engine.headroom == 1.0 for _, d in runs if d.engine), "the surprises saw no burst"
    assert all(d.engine.rise == 2.0 and d.engine.rise_load == pytest.approx(120.0) for d in calm)
    bursts = next(d for t, d in runs if t == 2370)
    assert all(d.desired_replicas >= bursts.desired_replicas for d in calm)
    assert "bursts x2.00 over the base load 60.0" in calm[-1].message
    # measured against the forecast alone the calm spell lets them go
    alone = [d for t, d in _about_once_a_cold_start(s, 3000, 2400, replace(no_prior, LEARN_RISE=False))
             if t >= 2400 + 300]
    assert all(d.desired_replicas < bursts.desired_replicas for d in alone)
    # capped at learnedHeadroomMax, off with it, and forgotten SURPRISE_MEMORY_S after the last burst
    capped = _about_once_a_cold_start(s.model_copy(update={"learned_headroom_max": 1.5}), 600, 600, no_prior)[-1][1]
    assert capped.engine.rise == 1.5 and max(x for _, x in capped.state.rises) == 2.0
    off = _about_once_a_cold_start(s.model_copy(update={"learned_headroom_max": 1.0}), 600, 600, no_prior)[-1][1]
    assert off.engine.rise == 1.0 and off.state.rises == []
    later = _about_once_a_cold_start(s, 2400 + int(KNOBS.SURPRISE_MEMORY_S) + 600, 2400, no_prior)[-1][1]
    assert later.engine.rise == 1.0 and later.desired_replicas < bursts.desired_replicas
    # an operator restart resumes the rises (status.autoscaling.memory); forged ones are kept within [1, 100]
    last = calm[-1].state
    memory = {**last.memory(2985.0), **last.recent()}
    assert ScalerState.resumed(memory, 2985.0).rises == last.rises
    forged = ScalerState.resumed({**memory, "rises": "2700:1e9 2760:0.2 9999:3"}, 2985.0).rises
    assert forged == [(2700.0, D.SURPRISE_REPORT_MAX), (2760.0, 1.0)]
    assert ScalerState.from_dict(json.loads(json.dumps(last.to_dict()))).rises == last.rises


def test_learned_headroom_ignores_poisson_noise():
    # a constant rate with Poisson counts: the ratios between one horizon and the next stay within SURPRISE_NOISE
    rng = __import__("numpy").random.default_rng(5)
    s = spec(target_utilization=0.5, max_replicas=20, learned_headroom_max=HMAX)
    state = ScalerState(since=0.0)
    for t in range(0, int(KNOBS.SURPRISE_MEMORY_S) * 2, 15):
        d = decide(state, _engine(rng.poisson(6.0 * 60) * 9 / 60, 3), s, 3, now=float(t), cold_start_s=240)
        state = d.state
    assert d.engine.headroom == 1.0, state.surprises
    assert d.engine.rise == 1.0, state.rises


def test_learned_headroom_is_on_by_default_and_1_turns_it_off():
    # the spec's default learns the bursts (the same bursty load as above) ...
    default = AutoscalingSpec(enabled=True, max_replicas=20)
    assert default.learned_headroom_max > 1
    state = ScalerState(since=0.0)
    for t in range(0, 3600, 15):
        d = decide(state, _engine(120.0 if t % 900 < 120 else 60.0, 4), default, 4, now=float(t), cold_start_s=240)
        state = d.state
    assert d.engine.headroom > 1.0
    # ... and learnedHeadroomMax 1 learns nothing and keeps nothing for it
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=1.0)
    state = ScalerState()
    for t in range(0, 3600, 15):
        d = decide(state, _engine(120.0 if t % 900 < 120 else 60.0, 4), s, 4, now=float(t), cold_start_s=240)
        state = d.state
        assert d.engine.headroom == 1.0 and "headroom" not in d.message
        assert d.state.forecasts == d.state.rates == d.state.surprises == []  # nothing kept for it


def test_learned_headroom_ignores_rises_that_change_no_replica_count():
    # in flight doubling from 6 to 12 every 10 min and back (+100 %), on 64-slot replicas at utilization 0.5: each
    # rise is 6 sequences, under half a replica (16), so nothing is learned; the same relative rise from 60 is
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=HMAX)

    def run(base):
        state = ScalerState(since=0.0)
        for t in range(0, 2 * int(KNOBS.SURPRISE_MEMORY_S), 15):
            d = decide(state, _engine(base * (2 if t % 1200 >= 600 else 1), 2), s, 2, now=float(t), cold_start_s=240)
            state = d.state
        return d.engine.headroom, d.engine.rise

    assert run(6.0) == (1.0, 1.0)
    assert min(run(60.0)) >= 1.5


def test_learned_headroom_learns_no_burst_from_a_compute_time_fit_that_moves():
    # 20 requests/s throughout; the time a request computes grows with the batch (2 + 0.05 x batch seconds). At 4
    # replicas the fit has one operating point (its time at the target batch is that point's, 2.7 s); after a
    # scale-down to 2 it sees the slope, and its time at the target batch is 3.6 s. The load in sequences rises with
    # it; the traffic did not, so nothing is learned. (Found on the benchmark's tuning ramp: a forecast of loads
    # divided by the new time was remembered as a burst of 2.5 for an hour; here it was 1.35.)
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=HMAX)
    state, rate, seen = ScalerState(since=0.0), 20.0, []
    for t in range(0, 3600, 15):
        pods = 4 if t < 1200 else 2
        batch = rate * 2 / (pods - rate * 0.05)  # in flight per pod: rate x time / pods, time = 2 + 0.05 batch
        t_req = 2 + 0.05 * batch
        r = RatioReading(0.0, pods_used=pods, signal="engine", active=batch * pods, slots=64.0 * pods,
                         trtllm_waiting=0.0, requests=rate * 15, compute_us=rate * 15 * t_req * 1e6,
                         mean_inflight_per_pod=batch, arrival_rate=rate)
        d = decide(state, r, s, pods, now=float(t), cold_start_s=240)
        state = d.state
        seen.append(d.engine.load)
    assert max(seen) > 1.3 * min(seen[5:]), "the load in sequences moved with the fit"
    assert d.engine.headroom == 1.0, state.surprises
    assert all(x == 1.0 for _, x in state.surprises + state.rises)


def test_calm_traffic_keeps_the_calm_square_root_spare():
    # with the learned headroom on, traffic that has shown no burst within SURPRISE_MEMORY_S keeps CALM_BETA x sqrt(R)
    # spare; once a burst is remembered, HEADROOM_BETA; with the learned headroom off, always HEADROOM_BETA
    knobs = replace(KNOBS, HEADROOM_BETA=1.5, CALM_BETA=0.5)
    view = D.EngineView(0, 64, 0, 0, "", knobs=knobs)
    assert view.replicas_for(320, 0.5) == math.ceil(10 + 1.5 * math.sqrt(10))
    calm_view = D.EngineView(0, 64, 0, 0, "", calm=True, knobs=knobs)
    assert calm_view.replicas_for(320, 0.5) == math.ceil(10 + 0.5 * math.sqrt(10))
    span = int(max(KNOBS.SURPRISE_MEMORY_S, KNOBS.SURPRISE_PRIOR_S)) + 600
    smooth = _learned(False, span, knobs=knobs)
    assert smooth.engine.calm and smooth.engine.headroom == 1.0
    bursty = _learned(True, span, knobs=knobs)
    assert not bursty.engine.calm and bursty.engine.headroom > 1.0
    assert bursty.raw_recommendation > smooth.raw_recommendation
    off = decide(warm(), _engine(60.0, 4), spec(target_utilization=0.5, learned_headroom_max=1.0), 4, now=0.0,
                 cold_start_s=240, knobs=knobs)
    assert not off.engine.calm


def test_a_scaler_that_has_learned_its_bursts_sizes_at_the_learned_utilization():
    # once the scaler has watched a whole SURPRISE_MEMORY_S, the learned headroom stands for the bursts: replicas at
    # learnedUtilization with LEARNED_BETA x sqrt(R) spare, times the headroom; a younger one (a new backend, an
    # operator restart) keeps targetUtilization and the larger spare for the bursts it has not seen yet
    knobs = replace(KNOBS, LEARNED_BETA=0.5, CALM_BETA=1.0)
    memory = int(KNOBS.SURPRISE_MEMORY_S)
    young = _learned(False, memory - 300, learned=0.8, knobs=knobs)
    assert not young.engine.learned
    assert young.engine.replicas_for(320, 0.5) == math.ceil(10 + 1.0 * math.sqrt(10))
    smooth = _learned(False, memory + 600, learned=0.8, knobs=knobs)
    assert smooth.engine.learned == pytest.approx(0.8 / 0.5)
    assert smooth.engine.replicas_for(320, 0.5) == math.ceil(320 / (0.8 * 64) + 0.5 * math.sqrt(320 / (0.8 * 64)))
    assert smooth.raw_recommendation < young.raw_recommendation  # 60 in flight: 2 replicas instead of 4
    assert "utilization 0.8 (learned" in smooth.message and "learned over" not in young.message
    # bursty traffic: the same utilization, and the learned headroom keeps the spare its bursts needed
    bursty = _learned(True, memory + 600, learned=0.8, knobs=knobs)
    assert bursty.engine.learned and bursty.engine.headroom > 1.0
    assert bursty.raw_recommendation > smooth.raw_recommendation
    # a targetUtilization above learnedUtilization is not lowered; the spare is still LEARNED_BETA's
    high = _learned(False, memory + 600, learned=0.4, knobs=knobs)
    assert high.engine.learned == 1.0
    assert high.engine.replicas_for(320, 0.5) == math.ceil(10 + 0.5 * math.sqrt(10))
    # off
    assert not _learned(False, memory + 600, knobs=knobs).engine.learned


def _resumed_decision(memory, now: float, state=None):
    """The first decision of a scaler after an operator restart: resumed from ``memory`` (status.autoscaling.memory),
    at ``now``, on _learned's traffic without a burst."""
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=0, learned_headroom_max=HMAX,
             learned_utilization=0.8)
    state = state if state is not None else ScalerState.resumed(memory, now)
    return decide(state, _engine(60.0, 4), s, 4, now=now, cold_start_s=240)


def test_an_operator_restart_resumes_what_the_scaler_learned():
    # a scaler that watched bursty traffic for longer than its memory, as a restarted operator finds it in status
    before = _learned(True, int(KNOBS.SURPRISE_MEMORY_S) + 600, learned=0.8)
    last = max(t for t, _ in before.state.loads)
    memory = json.loads(json.dumps({**before.state.memory(last), **before.state.recent()}))  # through the API server
    assert memory["watchingSince"] == "1970-01-01T00:00:00Z" and memory["bursts"] and memory["loads"]
    assert len(memory["bursts"]) <= KNOBS.SURPRISE_MEMORY_S / D.PEAK_BUCKET_S + 1
    # the next decision: resumed, it decides as the scaler that kept running (learned utilization, the bursts'
    # headroom, the forecast from the last cold start's loads)
    resumed = _resumed_decision(memory, last + 15)
    going_on = _resumed_decision(None, last + 15, state=before.state)
    assert resumed.engine.learned and "learned over" in resumed.message
    assert resumed.engine.headroom == pytest.approx(going_on.engine.headroom, abs=0.01) and resumed.engine.headroom > 1
    assert resumed.engine.forecast == pytest.approx(going_on.engine.forecast, rel=1e-3)
    assert resumed.engine.keep_load == pytest.approx(going_on.engine.keep_load, rel=1e-3)
    assert resumed.desired_replicas == going_on.desired_replicas
    assert resumed.state.since == 0.0 and len(resumed.state.forecasts) == len(going_on.state.forecasts)
    # a new scaler at the same moment has seen nothing: targetUtilization, no headroom learned (the prior for
    # SURPRISE_PRIOR_S instead), no history to forecast from
    fresh = _resumed_decision(None, last + 15, state=ScalerState())
    assert not fresh.engine.learned and fresh.engine.history_s == 0
    assert fresh.engine.headroom == (HMAX if KNOBS.SURPRISE_PRIOR_S > 0 else 1.0)
    # the memory written after the restart keeps the original start
    assert resumed.state.memory(last + 15)["watchingSince"] == memory["watchingSince"]


def test_a_resumed_scaler_checks_no_forecast_made_before_it_saw_a_horizon_of_rates():
    # the forecasts checked for surprises need a horizon of rates; a memory without the rates (a status written by a
    # version that kept none) resumes `since` but checks no forecast for a horizon
    before = _learned(False, int(KNOBS.SURPRISE_MEMORY_S) + 600, learned=0.8)
    last = max(t for t, _ in before.state.loads)
    resumed = _resumed_decision(before.state.memory(last), last + 60)
    assert resumed.engine.learned and resumed.state.forecasts == []
    # ... while with the rates it goes on as the scaler that kept running
    with_rates = _resumed_decision({**before.state.memory(last), **before.state.recent()}, last + 15)
    assert with_rates.state.forecasts == _resumed_decision(None, last + 15, state=before.state).state.forecasts != []


@pytest.mark.parametrize("gap_s", [D.MEMORY_GAP_S + D.PEAK_BUCKET_S, -(D.MEMORY_GAP_S + D.PEAK_BUCKET_S)])
def test_a_memory_not_seen_within_the_gap_is_not_resumed(gap_s):
    # the operator was down longer than MEMORY_GAP_S (or the clock says the memory is from the future): it missed the
    # bursts of the gap, so the scaler starts as a new one
    before = _learned(True, int(KNOBS.SURPRISE_MEMORY_S) + 600, learned=0.8)
    last = max(t for t, _ in before.state.loads)
    memory = before.state.memory(last)
    now = epoch_seconds(memory["lastSeen"]) + gap_s
    assert ScalerState.resumed(memory, now) == ScalerState()
    assert ScalerState.resumed(memory, last + 60).since == 0.0  # within the gap it is resumed
    # a scaler younger than its last bucket: watched since after that bucket's start
    young = {"watchingSince": "1970-01-01T01:04:59Z", "lastSeen": "1970-01-01T01:00:00Z", "bursts": []}
    assert ScalerState.resumed(young, 3900.0).since == 3899.0


@pytest.mark.parametrize("memory", [
    None, "a string", [], {}, {"watchingSince": "yesterday", "lastSeen": "1970-01-01T01:00:00Z"},
    {"watchingSince": "1970-01-01T01:05:00Z", "lastSeen": "1970-01-01T01:00:00Z"},  # watched since after last seen
    {"watchingSince": 0, "lastSeen": 3600},
])
def test_an_unreadable_memory_is_a_new_scaler(memory):
    assert ScalerState.resumed(memory, 3700.0) == ScalerState()


def test_a_forged_memory_sizes_no_differently_than_traffic_could():
    # status is writable by whoever may write LLMBackend status: a headroom above what traffic could show
    # (SURPRISE_REPORT_MAX) is cut to it and the decision uses at most learnedHeadroomMax of it, one below 1 raised to 1, entries that are not numbers or times, or lie in the future, are dropped, and no more
    # than the API's maximum of entries is read
    now = 3600.0
    bursts = [{"start": "1970-01-01T00:55:00Z", "headroom": 1e9}, {"start": "1970-01-01T00:50:00Z", "headroom": 0.1},
              {"start": "1970-01-01T00:45:00Z", "headroom": float("nan")}, {"start": "1970-01-01T00:40:00Z", "headroom": True},
              {"start": "1970-01-01T00:35:00Z", "headroom": "9"}, {"start": "2099-01-01T00:00:00Z", "headroom": 1.4},
              {"start": "soon", "headroom": 1.4}, "not a burst", {"headroom": 1.4}]
    memory = {"watchingSince": "1970-01-01T00:00:00Z", "lastSeen": "1970-01-01T01:00:00Z",
              "bursts": [{"start": "1970-01-01T00:30:00Z", "headroom": 1.2}] * 1000 + bursts}
    state = ScalerState.resumed(memory, now)
    # one entry per bucket, its largest
    assert state.surprises == [(1800.0, 1.2), (3000.0, 1.0), (3300.0, D.SURPRISE_REPORT_MAX)]
    assert D.burst_headroom(state.surprises, now - state.since, HMAX, KNOBS) == HMAX


def test_forged_recent_loads_and_fit_are_read_as_far_as_they_are_numbers():
    memory = {"watchingSince": "1970-01-01T00:00:00Z", "lastSeen": "1970-01-01T01:00:00Z",
              "loads": "3500:10 x:y 3510:-1 3520:nan 3530:inf 9e999:1 3540 3550:12 99999:5 3560:1e3",
              "fit": [1, 2, 3, 4, 5, 3590]}
    state = ScalerState.resumed(memory, 3600.0)
    assert state.loads == [(3500.0, 10.0), (3550.0, 12.0), (3560.0, 1000.0)]
    assert state.fit == D.BatchFit((1.0, 2.0, 3.0, 4.0, 5.0), 3590.0)
    for fit in ([1, 2, 3, 4, 5], [1, 2, 3, 4, -5, 3590], [0, 2, 3, 4, 5, 3590], [1, 2, float("nan"), 4, 5, 3590],
                [1, 2, 3, 4, 5, 9999], [True, 2, 3, 4, 5, 3590], "1 2 3 4 5 3590"):
        assert ScalerState.resumed({**memory, "fit": fit}, 3600.0).fit is None, fit
    # no more pairs than a scaler keeps
    many = " ".join(f"{t}:1" for t in range(3000))
    assert len(ScalerState.resumed({**memory, "loads": many}, 3600.0).loads) == D.MAX_LOADS


def test_a_resumed_scaler_keeps_its_scale_down_stabilization():
    # 13 replicas' worth of load until 345 s, then a trickle, with a 10-minute scale-down window: resumed at 420 s,
    # the scaler lets the replicas go when the one that kept running does, a window after the last high
    # recommendation; a new one knows of none and lets them go once it has seen a metrics window
    s = spec(target_utilization=0.5, max_replicas=20, scale_down_stabilization_seconds=600)
    state = ScalerState()
    for t in range(0, 300, 15):
        state = decide(state, _engine(8 * 32, 8), s, 8, now=float(t), cold_start_s=30).state
    for t in range(300, 420, 15):
        state = decide(state, _engine(16, 8), s, 8, now=float(t), cold_start_s=30).state
    memory = json.loads(json.dumps({**state.memory(420.0), **state.recent()}))
    states = {"going on": state, "resumed": ScalerState.resumed(memory, 420.0),
              "new": ScalerState(loads=state.loads)}
    first_down = {}
    for name, scaler in states.items():
        for t in range(420, 1200, 15):
            d = decide(scaler, _engine(16, 8), s, 8, now=float(t), cold_start_s=30)
            scaler = d.state
            if d.desired_replicas < 8:
                first_down[name] = t
                break
    assert first_down["going on"] == first_down["resumed"] > first_down["new"], first_down
    assert first_down["resumed"] >= 345 + 600 and first_down["new"] < 345 + 600
    # a window longer than the scaler keeps in status resumes its newest part
    many = ScalerState(recommendations=[(float(t), 8) for t in range(0, 15 * 500, 15)], since=0.0)
    text = many.recent()["recommendations"]
    assert len(text) <= SCALER_MEMORY_MAX_TEXT and len(text.split()) == D.MAX_LOADS


def test_a_resumed_scaler_keeps_its_burst_memory_floor():
    # burstMemorySeconds: the peak load of a burst stands as a floor for an hour, through a restart too
    s = spec(target_utilization=0.5, max_replicas=20, burst_memory_seconds=3600)
    state = ScalerState()
    for t in range(0, 1200, 15):
        state = decide(state, _engine(8 * 32 if t < 300 else 16, 8), s, 8, now=float(t), cold_start_s=240).state
    memory = json.loads(json.dumps({**state.memory(1200.0), **state.recent()}))
    going_on = decide(state, _engine(16, 8), s, 8, now=1200.0, cold_start_s=240)
    resumed = decide(ScalerState.resumed(memory, 1200.0), _engine(16, 8), s, 8, now=1200.0,
                     cold_start_s=240)
    assert resumed.engine.floor_load == pytest.approx(going_on.engine.floor_load, rel=1e-3)
    assert resumed.engine.floor_load > 200 and resumed.desired_replicas == going_on.desired_replicas


def test_the_memory_written_to_status_is_json_without_nan():
    # the API server takes no NaN or infinity in a status: values that are not finite are left out of the memory
    nan, inf = float("nan"), float("inf")
    state = ScalerState(since=0.0, loads=[(0.0, 1.0), (15.0, nan), (30.0, inf)], rates=[(15.0, nan)],
                        fit=D.BatchFit((1.0, 2.0, nan, 4.0, 5.0), 30.0))
    memory = {**state.memory(30.0), **state.recent()}
    json.dumps(memory, allow_nan=False)
    assert memory["loads"] == "0:1" and memory["rates"] == "" and "fit" not in memory


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                     lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
                     max_leaves=30)
_times = st.sampled_from(["1970-01-01T00:00:00Z", "1970-01-01T00:55:00Z", "1970-01-01T01:00:00Z", "2099-01-01T00:00:00Z"])
_numbers = st.floats() | st.integers(-10, 10**12)
_pairs = st.lists(st.tuples(_numbers, _numbers), max_size=8).map(lambda ps: " ".join(f"{t}:{x}" for t, x in ps))
_memories = st.fixed_dictionaries({"watchingSince": _times, "lastSeen": _times}, optional={
    "bursts": st.lists(st.fixed_dictionaries({}, optional={"start": _times | _json, "headroom": _numbers | _json}),
                       max_size=20) | _json,
    **{k: _pairs | _json for k in ("loads", "rates", "forecasts", "recommendations", "peaks", "rises")},
    "fit": st.lists(st.floats(0, 4000) | _numbers | st.booleans(), min_size=5, max_size=7) | _json,
    "queuedAt": _times | _json, "burstFloorSince": _times | _json})


@settings(max_examples=300, deadline=None)
@given(memory=_json | _memories)
def test_any_memory_in_status_resumes_a_scaler_that_decides(memory):
    # whatever the status holds, resuming never raises, keeps every value within what traffic could produce, and the
    # scaler decides on
    state = ScalerState.resumed(memory, 3600.0)
    assert all(1.0 <= x <= D.SURPRISE_REPORT_MAX and t <= 3600.0 for t, x in state.surprises + state.rises)
    assert 1.0 <= D.burst_headroom(state.surprises, 3600.0 - (state.since or 0.0), HMAX, KNOBS) <= HMAX
    assert all(math.isfinite(x) and x >= 0 and t <= 3600.0 for t, x in state.loads + state.rates + state.forecasts)
    assert all(t is None or t <= 3600.0 for t in (state.queued_at, state.floor_since))
    d = decide(state, _engine(60.0, 4), spec(learned_headroom_max=HMAX), 4, now=3600.0, cold_start_s=240)
    assert 1 <= d.desired_replicas <= 10 and 1.0 <= d.engine.rise <= HMAX
    json.dumps({**d.state.memory(3600.0), **d.state.recent()}, allow_nan=False)


def test_the_knobs_a_decision_is_given_are_the_ones_it_decides_with():
    # benchmarks/autoscale_bench.py tunes the decision by passing DecisionKnobs: each part of it (the engine's view,
    # the learned headroom, a resumed memory, the burst warning) reads the knobs it is given, not the shipped ones
    s = spec(forecast=False, target_utilization=0.5, max_replicas=40)
    shipped = decide(warm(), _engine(320.0, 4), s, 4, now=0.0)
    ample = decide(warm(), _engine(320.0, 4), s, 4, now=0.0, knobs=replace(KNOBS, HEADROOM_BETA=4.0))
    assert shipped.engine.knobs == KNOBS
    assert ample.desired_replicas > shipped.desired_replicas
    # a new scaler assumes learnedHeadroomMax for SURPRISE_PRIOR_S
    assert _learned(False, 600).engine.headroom == HMAX
    assert _learned(False, 600, knobs=replace(KNOBS, SURPRISE_PRIOR_S=300.0)).engine.headroom == 1.0
    # bursts are remembered, resumed and warned about for SURPRISE_MEMORY_S
    span = int(max(KNOBS.SURPRISE_MEMORY_S, KNOBS.SURPRISE_PRIOR_S)) + 600
    bursty = _learned(True, span, burst_ratio=3.0)
    short = replace(KNOBS, SURPRISE_MEMORY_S=600.0)
    off = spec(learned_headroom_max=HMAX, burst_floor="off")
    unfloored = replace(bursty.state, floor_since=None)
    assert D.burst_warning(unfloored, off, span + 900.0) and D.burst_warning(unfloored, off, span + 900.0, short) is None
    memory = {**bursty.state.memory(span), **bursty.state.recent()}
    kept = ScalerState.resumed(memory, float(span)).surprises
    assert len(ScalerState.resumed(memory, float(span), short).surprises) < len(kept)
