"""The scaling decision (pure): HPA's algorithm on the queue-to-compute ratio,
with the per-backend behaviour of :class:`AutoscalingSpec`.

``decide()`` is called every ``syncPeriodSeconds`` with the latest
:class:`RatioReading`. Steps:

1. No usable reading (``ratio is None``): never scale on it. Keep the current
   count (reason ``MetricsUnavailable`` / ``StaleMetrics``), except that the
   bounds still apply: below ``minReplicas`` (e.g. 0 replicas, no pods, no data)
   go to ``minReplicas``; above ``maxReplicas`` go to ``maxReplicas``.
   Scale-from-zero on demand is impossible with this signal (no pods, no
   metrics): ``minReplicas: 0`` keeps an idle backend at 0.
2. Raw recommendation, as the HPA does with ``AverageValue`` and unready pods:
   ``usage = ratio / target``; ``ready = pods_used`` (pods that contributed,
   at most ``current``), ``unready = current - ready``. Inside the tolerance band
   (``|usage - 1| <= tolerance``) keep ``current``. Scaling up, unready pods count
   as usage 0 → ``ceil(ready × usage)``; scaling down they count as usage 1 →
   ``ceil(ready × usage + unready)``. This stops warming replicas (60–120 s for
   an LLM) from compounding scale-ups: a queue that is still draining is not
   multiplied by replicas that do not serve yet. If the adjusted usage is back
   inside the band or reverses direction, keep ``current``.
3. Stabilization (HPA-style, over recorded raw recommendations): scale up at
   most to the *minimum* recommendation of the last
   ``scaleUpStabilizationSeconds``, down at most to the *maximum* of the last
   ``scaleDownStabilizationSeconds``.
   3b. Scale-down cooldown: no scale-down until ``windowSeconds`` after the
   last change. The ratio is a hockey stick (≈0 until replicas saturate, then
   steep), so "below target" does not say how many replicas can go; measured in
   benchmarks/autoscale_sim.py, stepping down every sync period on stale windows
   drains to minReplicas and then overshoots back up.
   3c. Occupancy guard (when the engine's max batch size is known): Triton's
   counters also give the mean number of requests in compute (Σ compute time /
   elapsed, Little's law). A scale-down that would leave the remaining replicas
   above ``max_occupancy_after_scale_down`` (default 0.5) of ``max_batch_size``
   is cut short: at ratio ≈ 0 the ratio alone cannot tell 10 % from 95 % load.
   Applies only while there is traffic.
4. Step limits ``maxScaleUpStep`` / ``maxScaleDownStep`` per decision.
5. Bounds ``[minReplicas, maxReplicas]``.
6. Capacity: ``schedulable_max`` is the total number of whole replicas the
   cluster can hold now (running replicas + what free GPUs allow; a multi-node
   replica is one unit). A scale-up beyond it is capped (never below
   ``current`` and never below ``minReplicas``), reason ``InsufficientCapacity``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..api.v1alpha1 import AutoscalingSpec
from .ratio import REASON_NO_COMPLETIONS, REASON_STALE, RatioReading

SCALED_UP = "ScaledUp"
SCALED_DOWN = "ScaledDown"
WITHIN_TOLERANCE = "WithinTolerance"
AT_MAX_REPLICAS = "AtMaxReplicas"
AT_MIN_REPLICAS = "AtMinReplicas"
STABILIZING_SCALE_DOWN = "StabilizingScaleDown"
STABILIZING_SCALE_UP = "StabilizingScaleUp"
METRICS_UNAVAILABLE = "MetricsUnavailable"
STALE_METRICS = "StaleMetrics"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"

REASONS = (
    SCALED_UP, SCALED_DOWN, WITHIN_TOLERANCE, AT_MAX_REPLICAS, AT_MIN_REPLICAS,
    STABILIZING_SCALE_DOWN, STABILIZING_SCALE_UP, METRICS_UNAVAILABLE, STALE_METRICS,
    INSUFFICIENT_CAPACITY,
)

_MAX_HISTORY = 512
DEFAULT_MAX_OCCUPANCY = 0.5
# KV-cache use (fraction of blocks, max over pods) at which the engine counts as saturated.
ENGINE_KV_CACHE_BUSY = 0.9


@dataclass
class ScalerState:
    """Per-backend memory of the scaler. JSON-able via to_dict/from_dict.

    ``recommendations``: (time, raw recommended replicas) within the longest
    stabilization window. ``last_scale_time``: epoch seconds of the last change
    of desired replicas (status.autoscaling.lastScaleTime, see ``last_scale_time_rfc3339``).
    """

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    last_scale_time: float | None = None
    last_desired: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "lastScaleTime": self.last_scale_time,
            "lastDesired": self.last_desired,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "ScalerState":
        if not d:
            return cls()
        recs = [(float(t), int(r)) for t, r in d.get("recommendations") or []]
        lst = d.get("lastScaleTime")
        ld = d.get("lastDesired")
        return cls(recs, None if lst is None else float(lst), None if ld is None else int(ld))

    def last_scale_time_rfc3339(self) -> str | None:
        if self.last_scale_time is None:
            return None
        import datetime as _dt

        return _dt.datetime.fromtimestamp(self.last_scale_time, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Decision:
    desired_replicas: int
    reason: str
    message: str
    state: ScalerState
    raw_recommendation: int | None = None  # before stabilization/limits; None without a reading


def _fmt(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}"


def raw_recommendation(ratio: float, target: float, tolerance: float, current: int, ready: int | None) -> int:
    """Step 2 of the module docstring (no bounds, no stabilization)."""
    if current <= 0:
        # Nothing running but a ratio (pods terminating): one replica if it queues.
        return 1 if ratio > target * (1 + tolerance) else 0
    usage = ratio / target
    if abs(usage - 1.0) <= tolerance:
        return current
    ready_n = current if ready is None else max(0, min(ready, current))
    unready = current - ready_n
    if ready_n == 0:
        return current
    if usage > 1.0:
        new_usage = (ready_n * usage) / current
        if new_usage <= 1.0 + tolerance:
            return current
    else:
        new_usage = (ready_n * usage + unready) / current
        if new_usage >= 1.0 - tolerance:
            return current
    # ceil with a small epsilon so that 2.0000000001 does not become 3
    return max(0, math.ceil(new_usage * current - 1e-9))


def _engine_backlog(reading: RatioReading) -> str:
    """Why the engine looks saturated although Triton's queue does not ('' when it does not)."""
    if reading.trtllm_waiting:
        return f"TensorRT-LLM reports {reading.trtllm_waiting:g} request(s) waiting inside the executor"
    if reading.kv_cache_fraction is not None and reading.kv_cache_fraction >= ENGINE_KV_CACHE_BUSY:
        return f"TensorRT-LLM KV cache {reading.kv_cache_fraction:.0%} used"
    return ""


def decide(
    state: ScalerState,
    reading: RatioReading,
    spec: AutoscalingSpec,
    current_replicas: int,
    now: float,
    schedulable_max: int | None = None,
    gpus_per_replica: int | None = None,
    max_batch_size: int | None = None,
    max_occupancy_after_scale_down: float = DEFAULT_MAX_OCCUPANCY,
) -> Decision:
    """One autoscaling decision. Pure: returns a new state, never mutates ``state``.

    ``max_batch_size`` (the engine's in-flight batch limit) enables the occupancy
    guard of step 3c when the reading carries ``mean_inflight_per_pod``."""
    lo, hi = spec.min_replicas, spec.max_replicas
    cur = max(0, int(current_replicas))
    keep = max(spec.scale_up_stabilization_seconds, spec.scale_down_stabilization_seconds)
    recs = [(t, r) for t, r in state.recommendations if now - t <= keep and t <= now]
    new_state = ScalerState(recs, state.last_scale_time, state.last_desired)

    def finish(desired: int, reason: str, message: str, raw: int | None) -> Decision:
        if desired != cur:
            new_state.last_scale_time = now
        new_state.last_desired = desired
        return Decision(desired, reason, message, new_state, raw)

    def cap_capacity(desired: int, reason: str, message: str, raw: int | None) -> Decision:
        if schedulable_max is not None and desired > cur and desired > schedulable_max:
            capped = max(cur, schedulable_max, 0)
            capped = max(capped, min(lo, desired))  # minReplicas is the user's floor: pods wait Pending
            need = f"{gpus_per_replica} GPU(s)" if gpus_per_replica else "more free GPUs"
            msg = (f"wanted {desired} replicas, free GPUs allow {schedulable_max}; "
                   f"one more replica needs {need}. {message}").strip()
            return finish(capped, INSUFFICIENT_CAPACITY, msg, raw)
        return finish(desired, reason, message, raw)

    # 1. no usable reading
    if reading.ratio is None:
        why = STALE_METRICS if reading.reason in (REASON_STALE,) else METRICS_UNAVAILABLE
        detail = f"{reading.reason}: {reading.message}".strip(": ")
        if cur < lo:
            return cap_capacity(lo, why, f"raised to minReplicas {lo} without metrics ({detail})", None)
        if cur > hi:
            return finish(hi, why, f"lowered to maxReplicas {hi} without metrics ({detail})", None)
        if reading.reason == REASON_NO_COMPLETIONS:
            why = METRICS_UNAVAILABLE
        return finish(cur, why, f"keeping {cur} replicas: {detail}", None)

    ratio = float(reading.ratio)
    raw = raw_recommendation(ratio, spec.target_ratio, spec.tolerance, cur, reading.pods_used)
    recs.append((now, raw))
    if len(recs) > _MAX_HISTORY:
        del recs[: len(recs) - _MAX_HISTORY]
    base = f"ratio {_fmt(ratio)} (target {spec.target_ratio:g}, {reading.pods_used if reading.pods_used is not None else '?'} pod(s))"

    # 3. stabilization
    up_w, down_w = spec.scale_up_stabilization_seconds, spec.scale_down_stabilization_seconds
    up_rec = min(r for t, r in recs if now - t <= up_w)
    down_rec = max(r for t, r in recs if now - t <= down_w)
    desired = cur
    if desired < up_rec:
        desired = up_rec
    if desired > down_rec:
        desired = down_rec
    stab_reason = None
    if raw < cur and desired > raw:
        stab_reason = STABILIZING_SCALE_DOWN
    elif raw > cur and desired < raw:
        stab_reason = STABILIZING_SCALE_UP

    # 4. step limits
    limited = ""
    if desired > cur + spec.max_scale_up_step:
        desired = cur + spec.max_scale_up_step
        limited = f"; limited by maxScaleUpStep {spec.max_scale_up_step}"
    elif desired < cur - spec.max_scale_down_step:
        desired = cur - spec.max_scale_down_step
        limited = f"; limited by maxScaleDownStep {spec.max_scale_down_step}"

    # 3c. occupancy guard
    if (desired < cur <= hi and max_batch_size and reading.mean_inflight_per_pod is not None
            and reading.mean_inflight_per_pod > 0):
        ready_n = min(cur, reading.pods_used or cur)
        total = reading.mean_inflight_per_pod * ready_n
        floor_n = math.ceil(total / (max_occupancy_after_scale_down * max_batch_size) - 1e-9)
        if floor_n > desired:
            new_desired = min(cur, floor_n)
            if new_desired >= cur:
                return finish(cur, STABILIZING_SCALE_DOWN,
                              f"{base} wants {desired}; {total:.1f} requests in flight would fill "
                              f"{cur - 1} replicas beyond {max_occupancy_after_scale_down:.0%} of maxBatchSize {max_batch_size}", raw)
            desired = new_desired
    # 3d. engine backlog guard. With a decoupled tensorrt_llm model, requests leave Triton's queue
    # at once and wait inside the executor, so a low ratio can hide a saturated engine: never
    # remove a replica while TRT-LLM itself reports waiting requests or a nearly full KV cache.
    if desired < cur:
        backlog = _engine_backlog(reading)
        if backlog:
            held = min(cur, hi)  # a lowered maxReplicas is still honoured
            return finish(held, STABILIZING_SCALE_DOWN if held == cur else AT_MAX_REPLICAS,
                          f"{base} wants {desired}; holding {held}: {backlog}", raw)
    # 5. bounds
    if desired > hi:
        return cap_capacity(hi, AT_MAX_REPLICAS, f"{base} wants {raw}; capped at maxReplicas {hi}", raw)
    if desired < lo:
        return cap_capacity(lo, AT_MIN_REPLICAS, f"{base} wants {raw}; floored at minReplicas {lo}", raw)

    if desired > cur:
        reason = SCALED_UP
        msg = f"{base}: {cur} -> {desired} replicas{limited}"
        if stab_reason == STABILIZING_SCALE_UP and not limited:
            msg += f" (stabilized, raw {raw})"
        return cap_capacity(desired, reason, msg, raw)
    if desired < cur and state.last_scale_time is not None and now - state.last_scale_time < spec.window_seconds:
        # The window still holds samples from before the last change: a queue ratio below
        # target says nothing about how many replicas can go, so remove replicas only once
        # the reading fully reflects the current count (see module docstring, step 3b).
        return finish(cur, STABILIZING_SCALE_DOWN,
                      f"{base} wants {desired}; last scale {now - state.last_scale_time:.0f}s ago, "
                      f"waiting one full {spec.window_seconds}s metrics window", raw)
    if desired < cur:
        return finish(desired, SCALED_DOWN, f"{base}: {cur} -> {desired} replicas{limited}", raw)
    # no change
    if stab_reason == STABILIZING_SCALE_DOWN:
        return finish(cur, STABILIZING_SCALE_DOWN,
                      f"{base} wants {raw}; holding {cur} for the {down_w}s scale-down stabilization window", raw)
    if stab_reason == STABILIZING_SCALE_UP:
        return finish(cur, STABILIZING_SCALE_UP,
                      f"{base} wants {raw}; holding {cur} for the {up_w}s scale-up stabilization window", raw)
    if raw > cur and cur >= hi:
        return finish(cur, AT_MAX_REPLICAS, f"{base} wants {raw}; at maxReplicas {hi}", raw)
    if raw < cur and cur <= lo:
        return finish(cur, AT_MIN_REPLICAS, f"{base} wants {raw}; at minReplicas {lo}", raw)
    return finish(cur, WITHIN_TOLERANCE, f"{base}: keeping {cur} replicas (tolerance {spec.tolerance:g})", raw)
