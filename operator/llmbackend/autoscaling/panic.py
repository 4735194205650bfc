"""Panic mode (spec.autoscaling.panic, off by default; step 7 of decision.py's docstring): Knative's KPA on top of the
stable decision, on a reading over the short panic window."""

from __future__ import annotations

import math

from ..api.v1alpha1 import AutoscalingSpec
from .coldstart import rfc3339
from .outcome import INSUFFICIENT_CAPACITY, PANIC, Decision
from .ratio import REASON_STALE, RatioReading
from .state import ScalerState

# The panic window is at least this many sync periods: the pods are scraped once a sync period, and a window needs
# two scrapes of a pod (Knative scrapes every second, so its 6 s panic window has several).
PANIC_MIN_SYNCS = 1.5


def panic_window_s(spec: AutoscalingSpec) -> float:
    """The panic window: spec.autoscaling.panic.windowPercentage of windowSeconds (Knative's
    panic-window-percentage of its stable window), at least PANIC_MIN_SYNCS sync periods."""
    pct = spec.panic.window_percentage if spec.panic is not None else 10.0
    return max(spec.window_seconds * pct / 100.0, PANIC_MIN_SYNCS * spec.sync_period_seconds)


def panic_need(d: Decision, panic_reading: RatioReading | None, spec: AutoscalingSpec) -> tuple[int, float] | None:
    """(replicas, load) the panic window's load needs at targetUtilization, without the square-root spare or the
    learned headroom (the KPA's ceil(observed panic value / target)); None without the engine's view or a fresh
    panic reading. The load is the panic window's arrival rate times the compute time per request at the target batch
    (the stable decision's fit), or the requests in flight when the rate is not known."""
    view = d.engine
    if (view is None or panic_reading is None or not panic_reading.pods_used or panic_reading.reason == REASON_STALE
            or view.slots_per_replica <= 0):
        return None
    per_replica = spec.target_utilization * view.slots_per_replica
    t_target = d.state.fit.at(per_replica) if d.state.fit is not None else None
    if panic_reading.arrival_rate is not None and t_target:
        load = panic_reading.arrival_rate * t_target
    elif panic_reading.in_flight is not None:
        load = panic_reading.in_flight
    else:
        return None
    return math.ceil(load / per_replica - 1e-9), load


def apply_panic(d: Decision, state: ScalerState, panic_reading: RatioReading | None, spec: AutoscalingSpec,
                current_replicas: int, now: float, schedulable_max: int | None = None) -> Decision:
    """Knative's panic mode on top of the stable decision ``d`` (pkg/autoscaler/scaling/autoscaler.go,
    autoscaler.Scale at knative-v1.23.0): over the threshold when the replicas the panic window's load needs
    (``panic_need``) are thresholdPercentage of the ready replicas or more (the KPA divides by its ready pods, at least
    one); panic begins there and each decision over the threshold extends it; it ends once a decision under the
    threshold comes a whole windowSeconds (the KPA's stable window) after the last one over it. While it lasts the
    replicas are the most of the stable decision, the panic need and what panic has already ordered, never fewer
    than the current ones (the KPA's maxPanicPods: "we do not scale down while in panic mode"), within maxReplicas
    and the free GPUs. Off (spec.autoscaling.panic absent or not enabled): ``d`` unchanged, the panic state cleared."""
    st = d.state
    panic = spec.panic
    if panic is None or not panic.enabled:
        st.panic_since, st.panic_last, st.panic_max = None, None, 0
        return d
    cur = max(0, int(current_replicas))
    need = panic_need(d, panic_reading, spec)
    ready = max(1, d.engine.ready if d.engine is not None else 0)
    threshold = panic.threshold_percentage / 100.0
    over = need is not None and need[0] / ready >= threshold
    since, last, top = state.panic_since, state.panic_last, state.panic_max
    if over:
        since = since if since is not None else now
        last = now
    elif since is not None and (last is None or now - last > spec.window_seconds):
        since, last, top = None, None, 0
    st.panic_since, st.panic_last = since, last
    if since is None:
        st.panic_max = 0
        return d
    top = max(top, cur, d.desired_replicas, need[0] if need is not None else 0)
    st.panic_max = top
    desired = min(top, spec.max_replicas)
    capped = ""
    if schedulable_max is not None and desired > cur and desired > schedulable_max:
        desired = max(cur, schedulable_max)
        capped = f"; free GPUs allow {desired}"
    window = panic_window_s(spec)
    if over and need is not None:
        why = (f"the last {window:.0f}s's load {need[1]:.1f} needs {need[0]} replica(s), {need[0] / ready:.1f}x the "
               f"{ready} ready (threshold {panic.threshold_percentage:g} %)")
    else:
        why = f"under the threshold since {rfc3339(last or now)}; ends at {rfc3339((last or now) + spec.window_seconds)}"
    status = f"since {rfc3339(since)}: {why}; no scale-down while it lasts (holding at least {top})"
    if desired == d.desired_replicas:
        return Decision(d.desired_replicas, d.reason, d.message, st, d.raw_recommendation, d.engine, status)
    st.last_scale_time = now if desired != cur else state.last_scale_time
    st.last_desired = desired
    message = f"panic mode {status}: {cur} -> {desired} replicas (the stable decision: {d.desired_replicas}){capped}"
    reason = INSUFFICIENT_CAPACITY if capped else PANIC
    return Decision(desired, reason, message, st, d.raw_recommendation, d.engine, status)
