"""Panic mode (spec.autoscaling.panic): Knative's KPA semantics (pkg/autoscaler/scaling/autoscaler.go,
autoscaler.Scale at knative-v1.23.0) on top of the stable decision: a short panic window, entered when the replicas
its load needs reach 200 % of the ready ones, extended while they do, no scale-down while it lasts, left once a whole
stable window has passed under the threshold."""

from __future__ import annotations

import pytest

from llmbackend.api.v1alpha1 import AutoscalingSpec
from llmbackend.autoscaling import decision as D
from llmbackend.autoscaling.decision import ScalerState, decide
from llmbackend.autoscaling.ratio import RatioReading

SLOTS = 64


def spec(**kw) -> AutoscalingSpec:
    # targetUtilization 0.5: one replica carries 32 sequences at the target, so the panic need is in_flight / 32
    base = dict(enabled=True, min_replicas=1, max_replicas=40, scale_up_stabilization_seconds=0,
                scale_down_stabilization_seconds=0, max_scale_down_step=100, learned_headroom_max=1.0,
                forecast=False, target_utilization=0.5, panic={"enabled": True})
    base.update(kw)
    return AutoscalingSpec(**base)


def engine(in_flight: float, ready: int, reason: str = "Ok") -> RatioReading:
    """A reading of ``ready`` pods with ``in_flight`` requests (no arrival rate: in flight is the load)."""
    active = min(in_flight, SLOTS * ready)
    return RatioReading(0.0, reason=reason, pods_used=ready, signal="engine", active=active, slots=SLOTS * ready,
                        trtllm_waiting=in_flight - active, requests=10.0)


def warm() -> ScalerState:
    return ScalerState(since=-3600.0)


def test_panic_window_is_a_tenth_of_the_stable_window_and_at_least_one_and_a_half_sync_periods():
    assert D.panic_window_s(spec(window_seconds=600)) == 60.0
    assert D.panic_window_s(spec(window_seconds=60)) == 22.5  # 6 s would hold one 15 s scrape of a pod
    assert D.panic_window_s(spec(window_seconds=600, panic={"enabled": True, "windowPercentage": 5})) == 30.0


def test_off_by_default_and_when_disabled_the_decision_is_the_stable_one():
    for s in (spec(panic=None), spec(panic={"enabled": False})):
        assert s.panic is None or not s.panic.enabled
        calm = decide(warm(), engine(40, 4), s, 4, now=0)
        d = decide(warm(), engine(40, 4), s, 4, now=0, panic_reading=engine(640, 4))
        assert d.desired_replicas == calm.desired_replicas and d.reason != D.PANIC and d.panic is None
        assert d.state.panic_since is None
    assert AutoscalingSpec(enabled=True).panic is None


def test_enters_at_200_percent_of_the_ready_replicas_not_below():
    s = spec()
    # 4 ready; 224 in flight over the panic window need 7 replicas: 175 % -> the stable decision stands
    d = decide(warm(), engine(40, 4), s, 4, now=0, panic_reading=engine(224, 4))
    assert d.desired_replicas == 4 and d.panic is None and d.state.panic_since is None
    # 256 need 8: 200 % -> panic, straight to 8 (the KPA orders the panic window's need at once)
    d = decide(warm(), engine(40, 4), s, 4, now=0, panic_reading=engine(256, 4))
    assert d.desired_replicas == 8 and d.reason == D.PANIC
    assert d.state.panic_since == 0 and d.state.panic_max == 8
    assert d.panic is not None and "needs 8 replica(s), 2.0x the 4 ready (threshold 200 %)" in d.panic
    # the threshold is the spec's: at 300 % the same load does not panic
    d = decide(warm(), engine(40, 4), spec(panic={"enabled": True, "thresholdPercentage": 300}), 4, now=0,
               panic_reading=engine(256, 4))
    assert d.desired_replicas == 4 and d.panic is None


def test_no_scale_down_while_in_panic_and_it_ends_a_stable_window_after_the_last_reading_over_the_threshold():
    s = spec(window_seconds=60)
    state, cur, log = warm(), 4, []
    for t in range(0, 301, 15):
        panic_load = 256 if t in (0, 30) else 10  # over the threshold at 0 and 30 s only
        d = decide(state, engine(10, 4), s, cur, now=float(t), panic_reading=engine(panic_load, 4))
        state, cur = d.state, d.desired_replicas
        log.append((t, cur, d.panic is not None))
    in_panic = [t for t, _, p in log if p]
    assert in_panic == list(range(0, 91, 15))  # 30 s extended it; over at 30 -> ends once 60 s passed under (105 s)
    assert all(n >= 8 for t, n, _ in log if t <= 90)  # no scale-down while it lasts, though the stable load is low
    assert log[-1][1] < 8 and state.panic_since is None and state.panic_max == 0  # the stable decision afterwards


def test_panic_keeps_the_larger_of_the_stable_and_the_panic_decision_and_the_most_it_ordered():
    s = spec()
    # the stable window's load needs more than the panic window's: the stable count stands (KPA: pick the larger)
    stable = decide(warm(), engine(600, 4), s, 4, now=0)
    d = decide(warm(), engine(600, 4), s, 4, now=0, panic_reading=engine(256, 4))
    assert stable.desired_replicas > 8 and d.desired_replicas == stable.desired_replicas
    # once in panic at 12, a smaller need does not lower it
    d = decide(warm(), engine(40, 4), s, 4, now=0, panic_reading=engine(384, 4))
    assert d.desired_replicas == 12
    d = decide(d.state, engine(40, 4), s, 12, now=15, panic_reading=engine(300, 4))
    assert d.desired_replicas == 12 and d.state.panic_max == 12


def test_panic_is_bounded_by_max_replicas_and_the_free_gpus():
    d = decide(warm(), engine(40, 4), spec(max_replicas=6), 4, now=0, panic_reading=engine(640, 4))
    assert d.desired_replicas == 6
    d = decide(warm(), engine(40, 4), spec(), 4, now=0, panic_reading=engine(640, 4), schedulable_max=7)
    assert d.desired_replicas == 7 and d.reason == D.INSUFFICIENT_CAPACITY and "free GPUs allow 7" in d.message


@pytest.mark.parametrize("panic_reading", [None, engine(640, 4, reason="Stale"),
                                           RatioReading(None, reason="NoSamples", pods_used=0)])
def test_no_panic_without_a_fresh_panic_reading(panic_reading):
    d = decide(warm(), engine(40, 4), spec(), 4, now=0, panic_reading=panic_reading)
    assert d.desired_replicas == 4 and d.panic is None


def test_the_panic_need_uses_the_arrival_rate_and_the_compute_time_at_the_target_batch():
    s = spec(forecast=True)
    reading = RatioReading(0.0, pods_used=4, signal="engine", active=40, slots=256, trtllm_waiting=0, requests=100,
                           compute_us=100 * 8e6, arrival_rate=2.0, mean_inflight_per_pod=10)
    first = decide(warm(), reading, s, 4, now=0)
    t_target = first.state.fit.at(32)
    # 16 req/s over the panic window, 8 s each: 128 sequences, 4 replicas of 32: 100 % -> no panic
    burst = RatioReading(0.0, pods_used=4, signal="engine", active=64, slots=256, trtllm_waiting=0, requests=10,
                         arrival_rate=16.0 * 8 / t_target)
    d = decide(warm(), reading, s, 4, now=0, panic_reading=burst)
    assert D.panic_need(d, burst, s)[0] == 4 and d.panic is None
    burst = RatioReading(0.0, pods_used=4, signal="engine", active=64, slots=256, trtllm_waiting=0, requests=10,
                         arrival_rate=32.0 * 8 / t_target)
    assert decide(warm(), reading, s, 4, now=0, panic_reading=burst).desired_replicas >= 8
