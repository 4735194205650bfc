"""The scaling decision (pure): HPA's algorithm on the queue-to-compute ratio,
with the per-backend behaviour of :class:`AutoscalingSpec`.

``decide()`` is called every ``syncPeriodSeconds`` with the latest
:class:`RatioReading`. Steps:

1. No usable reading (``ratio is None``): never scale on it. Keep the current
   count (reason ``MetricsUnavailable`` / ``StaleMetrics``), except that the
   bounds still apply: below ``minReplicas`` (e.g. 0 replicas, no pods, no data)
   go to ``minReplicas``; above ``maxReplicas`` go to ``maxReplicas``.
   With no replica there are no metrics: 0 -> 1 comes from ``waiting_at_zero``
   (requests held in front of the backend, e.g. by the gateway), see docs/autoscaling.md.
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
   3b. Scale-down cooldown (readings without engine gauges): no scale-down until
   ``windowSeconds`` after the last change. The ratio is a hockey stick (≈0
   until replicas saturate, then steep), so "below target" does not say how many
   replicas can go; stepping down every sync period on stale windows drains to
   minReplicas and then overshoots back up. With the engine's view the load says
   how many replicas the traffic needs, and step 2b keeps them.
   3c. Occupancy guard (when the engine's max batch size is known): Triton's
   counters also give the mean number of requests in compute (Σ compute time /
   elapsed, Little's law). A scale-down that would leave the remaining replicas
   above ``max_occupancy_after_scale_down`` (default 0.5) of ``max_batch_size``
   is cut short: at ratio ≈ 0 the ratio alone cannot tell 10 % from 95 % load.
   Applies only while there is traffic.
4. Step limits ``maxScaleUpStep`` / ``maxScaleDownStep`` per decision.
5. Bounds ``[minReplicas, maxReplicas]``.
2b. The engine's view (when the reading carries the engine gauges: requests in
   flight = batch + engine queue, and the batch slots per replica). It replaces the ratio's recommendation
   (the ratio is reported): the ratio of a queue that built up in a burst is many times its target and would
   order maxReplicas. Supply is every replica, ready or still starting: a replica ordered a sync ago is
   capacity on the way (knative's autoscaler counts its pods the same way; an HPA that counts only ready
   pods orders again every sync while the first ones start).
   * load: arrival rate (finished + growth of in flight) x the compute time per request at the target batch
     (``BatchFit``: the time per token grows with the batch, so in flight measured at one replica count is not
     the load at another; an in-flight target oscillates). Without an arrival rate: in flight.
   * forecast (``forecast: true``): the load expected when a replica ordered now turns Ready, one cold start
     (+ half a window of measurement lag) ahead. Computed from the loads of the last cold start only with robust
     statistics, so that a burst shorter than a cold start is not extrapolated: the level is a high quantile
     (``LEVEL_QUANTILE``) of those loads, what the last cold start needed rather than its latest reading, the trend is the smallest Theil-Sen slope (median of pairwise slopes) of
     the span and of each of its thirds (a ramp rises in all three, a step or a burst leaves one flat), extrapolated over the horizon once the
     loads span half of it and the rise stands out of the noise around the line, never down and at most to ``TREND_MAX_GROWTH`` x the level. Replicas needed: square-root staffing, R = forecast / (targetUtilization x
     slots), ceil(R + beta x sqrt(R)), beta = ``HEADROOM_BETA``, or ``CALM_BETA`` while the learned headroom (below)
     is on and remembers no burst. Once this scaler has watched a whole ``SURPRISE_MEMORY_S`` (the learned headroom
     below has had the time to see the traffic's bursts and stands for them): R at ``learnedUtilization`` (when above
     targetUtilization), beta = ``LEARNED_BETA``. An operator restart resumes all of this (since when the backend is
     watched, the burst memory, the last cold start's loads and rates, the compute-time fit, the stabilization
     windows' recommendations, the burst memory's peaks) from
     status.autoscaling.memory (``ScalerState.memory``, ``recent`` and ``resumed``, within ``MEMORY_GAP_S``).
   * learned headroom: a forecast of the arrival rates (made as the one above, from the rates alone: the load in
     sequences also moves with the compute-time fit) is checked one horizon later against the rates that horizon saw
     (the same quantile); the largest ratio of the last ``SURPRISE_MEMORY_S`` (at most ``learnedHeadroomMax``;
     ratios up to ``SURPRISE_NOISE`` and shortfalls under ``SURPRISE_MIN_REPLICAS`` of a replica count as 1)
     multiplies the forecast. A burst shorter than a cold start cannot be
     served by a scale-up, only by capacity that stands: traffic that has such bursts keeps as much spare as its
     recent bursts needed, smooth traffic (a ramp the forecast follows, Poisson noise) keeps none beyond
     targetUtilization. A new scaler assumes the maximum for its first ``SURPRISE_PRIOR_S``. ``learnedHeadroomMax``
     1 turns it off. The rise over the base (``learn_rise``): bursts about once a cold start are in every forecast's
     level and surprise it little; once a calm cold start brings the forecast down to the base, the next burst finds
     too little standing. So the largest rise of the last horizon's rates over their median is remembered too
     (gated and capped as the surprises), and the median load times it stands (``LEARN_RISE``).
   * keep: replicas go (ready or starting alike) only when the forecast and ``KEEP_QUANTILE`` of the last cold
     start's loads (times the learned headroom) fit the remaining ones below ``SCALE_DOWN_MARGIN`` x
     targetUtilization. Looking back over a whole cold start is the hysteresis: noise in the load moves neither
     way, and a replica starting for a load that stays is not cancelled and ordered again. Nothing goes until the
     history spans a full ``windowSeconds`` (after an operator restart or a new backend the history is empty:
     hold). A replica still starting whose cold start is more
     than ``KEEP_STARTING_SPENT`` spent is not cancelled (``starting_ages``): the rest of its cold start costs
     less than ordering it again, and its spent part would be thrown away.
   * burst memory (``burstMemorySeconds``, off by default): the peak keep load of each ``PEAK_BUCKET_S`` of the
     last ``burstMemorySeconds`` stands as a floor, so that the next burst shorter than a cold start (which no
     scale-up can serve in time) finds its capacity Ready: a static fleet's answer, sized from the backend's own
     history and forgotten when the bursts stop.
   * saturation: slots full (active >= max, over the ready pods) or KV blocks above ``kvCacheThreshold`` for
     ``saturationSeconds``: one step sized from the demand, the replicas for the load now (as above) in all
     (the load counts the waiting arrivals; the raw in-flight count also holds the queue built up while
     saturated and overshoots several-fold) with the learned headroom, at least one more than the ready ones and,
     while none is starting, at least the busy slots; the replicas already starting count, so a sustained
     saturation does not add one per sync.
   These steps are sized from the backlog: ``maxScaleUpStep`` does not cut them (GPU capacity and
   ``maxReplicas`` do). With ``minReplicas: 0`` the last replica goes only after ``scaleToZeroAfterSeconds``
   idle. Schedule floors raise ``minReplicas`` between their cron start and end (``schedule_hold``).
6. Capacity: ``schedulable_max`` is the total number of whole replicas the
   cluster can hold now (running replicas + what free GPUs allow; a multi-node
   replica is one unit). A scale-up beyond it is capped (never below
   ``current`` and never below ``minReplicas``), reason ``InsufficientCapacity``.
7. Panic mode (``spec.autoscaling.panic``, off by default; ``apply_panic``): Knative's KPA on top of the steps above,
   on a reading over the short panic window (``panic_window_s``): over 200 % of the ready replicas it orders what
   that window's load needs at once and scales down not at all until a whole window passed under the threshold.

Where the parts are: this module is ``decide()``, the steps in order; the tuned constants it receives are
:mod:`.knobs` (``DecisionKnobs``); step 2b's measurements (the engine's view, saturation, the replicas a load needs)
:mod:`.engine`, its forecast and compute-time fit :mod:`.forecast`, the learned headroom, the burst memories and the
burst warning :mod:`.headroom`; the scaler's memory and what a restart resumes :mod:`.state`; schedule floors
:mod:`.schedule`; panic mode (step 7) :mod:`.panic`; the decision and its reasons :mod:`.outcome`.
"""

from __future__ import annotations

import math

from ..api.v1alpha1 import AutoscalingSpec
from .engine import ENGINE_KV_CACHE_BUSY, EngineView, engine_backlog, observe_engine, saturation
from .forecast import FIT_TAU_S, MAX_LOADS, BatchFit, quantile, robust_forecast, theil_sen_slope
from .headroom import (
    BURST_OVER_CAP,
    advised_headroom,
    burst_headroom,
    burst_warning,
    bursts_over_cap,
    largest_surprise,
    learn_rise,
    learn_surprise,
)
from .knobs import DEFAULT_KNOBS, DecisionKnobs
from .outcome import (
    AT_MAX_REPLICAS,
    AT_MIN_REPLICAS,
    BURST_FLOOR,
    ENGINE_SATURATED,
    FORECAST_LOAD,
    INSUFFICIENT_CAPACITY,
    METRICS_UNAVAILABLE,
    PANIC,
    REASONS,
    SCALED_DOWN,
    SCALED_FROM_ZERO,
    SCALED_UP,
    STABILIZING_SCALE_DOWN,
    STABILIZING_SCALE_UP,
    STALE_METRICS,
    WAITING_TO_SCALE_TO_ZERO,
    WITHIN_TOLERANCE,
    Decision,
)
from .panic import PANIC_MIN_SYNCS, apply_panic, panic_need, panic_window_s
from .ratio import REASON_NO_COMPLETIONS, REASON_STALE, RatioReading
from .schedule import ScheduleHold, schedule_floor, schedule_hold
from .state import MEMORY_GAP_S, PEAK_BUCKET_S, SURPRISE_REPORT_MAX, ScalerState

# decide() is this module's; the rest is the parts it is made of, importable from here as before the split.
__all__ = [
    "AT_MAX_REPLICAS", "AT_MIN_REPLICAS", "BURST_FLOOR", "BURST_OVER_CAP", "DEFAULT_KNOBS", "DEFAULT_MAX_OCCUPANCY",
    "ENGINE_KV_CACHE_BUSY", "ENGINE_SATURATED", "FIT_TAU_S", "FORECAST_LOAD", "INSUFFICIENT_CAPACITY", "MAX_LOADS",
    "MEMORY_GAP_S", "METRICS_UNAVAILABLE", "PANIC", "PANIC_MIN_SYNCS", "PEAK_BUCKET_S", "REASONS", "SCALED_DOWN",
    "SCALED_FROM_ZERO", "SCALED_UP", "STABILIZING_SCALE_DOWN", "STABILIZING_SCALE_UP", "STALE_METRICS",
    "SURPRISE_REPORT_MAX", "USAGE_EPSILON", "WAITING_TO_SCALE_TO_ZERO", "WITHIN_TOLERANCE", "BatchFit", "Decision",
    "DecisionKnobs", "EngineView", "ScalerState", "ScheduleHold", "advised_headroom", "apply_panic", "burst_headroom",
    "burst_warning", "bursts_over_cap", "decide", "largest_surprise", "learn_rise", "learn_surprise", "panic_need",
    "panic_window_s", "quantile", "raw_recommendation", "robust_forecast", "saturation", "schedule_floor",
    "schedule_hold", "theil_sen_slope",
]

_MAX_HISTORY = 512
DEFAULT_MAX_OCCUPANCY = 0.5
USAGE_EPSILON = 1e-9  # float rounding of ratio / target: a reading on the tolerance band's edge is inside it


def _fmt(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}"


def raw_recommendation(ratio: float, target: float, tolerance: float, current: int, ready: int | None) -> int:
    """Step 2 of the module docstring (no bounds, no stabilization)."""
    if current <= 0:
        # Nothing running but a ratio (pods terminating): one replica if it queues.
        return 1 if ratio > target * (1 + tolerance) else 0
    usage = ratio / target
    if abs(usage - 1.0) <= tolerance + USAGE_EPSILON:  # the band's edges are inside it, whatever the rounding
        return current
    ready_n = current if ready is None else max(0, min(ready, current))
    unready = current - ready_n
    if ready_n == 0:
        return current
    if usage > 1.0:
        new_usage = (ready_n * usage) / current
        if new_usage <= 1.0 + tolerance + USAGE_EPSILON:
            return current
    else:
        new_usage = (ready_n * usage + unready) / current
        if new_usage >= 1.0 - tolerance - USAGE_EPSILON:
            return current
    # ceil with a small epsilon so that 2.0000000001 does not become 3
    return max(0, math.ceil(new_usage * current - USAGE_EPSILON))


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
    cold_start_s: float | None = None,
    waiting_at_zero: float | None = None,
    starting_ages: list[float] | None = None,
    panic_reading: RatioReading | None = None,
    knobs: DecisionKnobs = DEFAULT_KNOBS,
) -> Decision:
    """One autoscaling decision (the module docstring's steps). Pure: returns a new state, never mutates ``state``.

    ``max_batch_size`` (the engine's in-flight batch limit) is the slots per replica
    when the engine does not export them, and enables the occupancy guard of step
    3c for readings without engine gauges. ``cold_start_s``: the forecast horizon
    (see :mod:`.coldstart`). ``waiting_at_zero``: requests waiting in front of a
    backend that has no replica (0 -> 1). ``starting_ages``: seconds since creation of each replica not Ready yet
    (one spent beyond ``KEEP_STARTING_SPENT`` of its cold start is not cancelled); None: unknown.
    ``panic_reading``: the reading over ``panic_window_s`` (spec.autoscaling.panic: every outcome of the steps
    passes through ``apply_panic``). ``knobs``: the tuned constants (:mod:`.knobs`; the benchmark varies them)."""
    hi = spec.max_replicas
    lo = min(hi, max(spec.min_replicas, schedule_floor(spec, now)))
    cur = max(0, int(current_replicas))
    keep = max(spec.scale_up_stabilization_seconds, spec.scale_down_window)
    recs = [(t, r) for t, r in state.recommendations if now - t <= keep and t <= now]
    since = state.since if state.since is not None else now  # this scaler's first decision (or a resumed one's)
    started = state.started if state.started is not None else now  # this process's first decision
    new_state = ScalerState(recs, state.last_scale_time, state.last_desired, state.saturated_since,
                            state.idle_since, state.loads, state.fit, since,
                            state.peaks, state.forecasts, state.rates, state.surprises, started, state.queued_at,
                            state.floor_since, state.rises)
    view: EngineView | None = None

    def finish(desired: int, reason: str, message: str, raw: int | None) -> Decision:
        if desired != cur:
            new_state.last_scale_time = now
        new_state.last_desired = desired
        stable = Decision(desired, reason, message, new_state, raw, view)
        return apply_panic(stable, state, panic_reading, spec, current_replicas, now, schedulable_max)

    def cap_capacity(desired: int, reason: str, message: str, raw: int | None) -> Decision:
        if schedulable_max is not None and desired > cur and desired > schedulable_max:
            capped = max(cur, schedulable_max, 0)
            capped = max(capped, min(lo, desired))  # minReplicas is the user's floor: pods wait Pending
            need = f"{gpus_per_replica} GPU(s)" if gpus_per_replica else "more free GPUs"
            msg = (f"wanted {desired} replicas, free GPUs allow {schedulable_max}; "
                   f"one more replica needs {need}. {message}").strip()
            return finish(capped, INSUFFICIENT_CAPACITY, msg, raw)
        return finish(desired, reason, message, raw)

    # 0. scale from zero: no replica, no metrics; requests held in front of the backend decide
    if cur == 0 and waiting_at_zero and waiting_at_zero > 0 and hi >= 1:
        new_state.idle_since = None
        return cap_capacity(max(1, lo), SCALED_FROM_ZERO,
                            f"{waiting_at_zero:g} request(s) waiting with no replica: 0 -> {max(1, lo)}", None)

    # 2b. the engine's view (fresh readings with engine gauges only)
    stale = reading.reason == REASON_STALE
    view = observe_engine(state, new_state, reading, spec, cur, now, max_batch_size, cold_start_s, knobs)

    # 1. no usable reading
    if reading.ratio is None and not (view is not None and reading.reason == REASON_NO_COMPLETIONS):
        why = STALE_METRICS if stale else METRICS_UNAVAILABLE
        detail = f"{reading.reason}: {reading.message}".strip(": ")
        if cur < lo:
            return cap_capacity(lo, why, f"raised to minReplicas {lo} without metrics ({detail})", None)
        if cur > hi:
            return finish(hi, why, f"lowered to maxReplicas {hi} without metrics ({detail})", None)
        if reading.reason == REASON_NO_COMPLETIONS:
            why = METRICS_UNAVAILABLE
        return finish(cur, why, f"keeping {cur} replicas: {detail}", None)

    # 2. the ratio's recommendation (requests that finished: lags by up to a generation)
    ratio = None if reading.ratio is None else float(reading.ratio)
    raw = cur if ratio is None else raw_recommendation(ratio, spec.target_ratio, spec.tolerance, cur, reading.pods_used)
    base = f"ratio {_fmt(ratio)} (target {spec.target_ratio:g}, {reading.pods_used if reading.pods_used is not None else '?'} pod(s))"
    engine_reason = ""
    engine_need = 0
    if view is not None:
        base += (f", {view.in_flight:g} in flight on {view.slots_per_replica:g} slots/replica; supply {view.ready} ready"
                 f" + {view.starting} starting; load {view.load:.1f}, {view.forecast:.1f} expected in {view.cold_start_s:.0f}s")
        if view.headroom > 1.0:
            base += f", headroom x{view.headroom:.2f}"
        if view.rise > 1.0:
            base += f", bursts x{view.rise:.2f} over the base load {view.base_load:.1f}"
        if view.learned:
            base += (f", utilization {view.utilization_in_use(spec.target_utilization):g}"
                     f" (learned over {knobs.SURPRISE_MEMORY_S:.0f}s)")
        need_forecast = view.replicas_for(max(view.forecast * view.headroom, view.rise_load), spec.target_utilization)
        need_sat = 0
        sustained = (view.saturated and new_state.saturated_since is not None
                     and now - new_state.saturated_since >= spec.saturation_seconds)
        if sustained:
            # One step, in all (the replicas starting are part of it), sized from the demand the engines cannot
            # take: the load counts every arrival, the waiting ones too. Not from the raw in-flight count: it also
            # holds the queue built up while saturated, which the new replicas never see (measured in
            # autoscale_bench.py: sized from in flight, a spike ordered 5x what it needed). At least one more
            # than the ready replicas (a KV cache full of long sequences with few in flight).
            # While replicas start, the busy slots are no measure of demand: the backlog fills every slot of a
            # replica that turns Ready, and sized from them each one ordered 2-3 more (autoscale_bench.py's flash
            # crowd went 13 -> 21 while its backlog drained).
            busy = 0.0 if view.starting else min(view.in_flight, view.ready * view.slots_per_replica)
            demand = max(view.load, busy)
            need_sat = max(view.ready + 1, view.replicas_for(demand * view.headroom, spec.target_utilization))
        need_floor = view.replicas_for(view.floor_load, spec.target_utilization) if view.floor_load > 0 else 0
        engine_need = max(need_forecast, need_sat, need_floor)
        if engine_need < cur:
            keep_n = view.replicas_for(max(view.keep_load * view.headroom, view.rise_load),
                                       spec.target_utilization * knobs.SCALE_DOWN_MARGIN)
            # replicas go not-Ready first (the ReplicaSet's order): a starting replica mostly spent keeps the
            # ready ones too
            spent = min(view.starting, sum(1 for a in starting_ages or () if a >= knobs.KEEP_STARTING_SPENT * view.start_s))
            if spent:
                keep_n = max(keep_n, view.ready + spent)
            engine_need = min(cur, max(engine_need, keep_n))
            if view.history_s < spec.window_seconds:
                engine_need = cur  # the history is too short to say what the load needs: hold
        if need_sat > cur and need_sat >= need_forecast:
            engine_reason = ENGINE_SATURATED
            since = new_state.saturated_since if new_state.saturated_since is not None else now
            base += f"; saturated for {now - since:.0f}s ({view.saturated})"
        elif need_forecast > cur and need_forecast >= need_floor:
            engine_reason = FORECAST_LOAD
        elif need_floor > cur:
            engine_reason = BURST_FLOOR
            base += f"; standing floor for the peak load {view.floor_load:.1f} of the last {view.floor_s:.0f}s"
        raw = engine_need
        if raw == 0 and cur > 0 and lo == 0:
            idle_for = 0.0 if new_state.idle_since is None else now - new_state.idle_since
            if idle_for < spec.scale_to_zero_after_seconds:
                raw = 1
                if cur == 1:
                    recs.append((now, raw))
                    return finish(1, WAITING_TO_SCALE_TO_ZERO,
                                  f"{base}: idle {idle_for:.0f}s of {spec.scale_to_zero_after_seconds}s before scaling to zero", raw)
    recs.append((now, raw))
    if len(recs) > _MAX_HISTORY:
        del recs[: len(recs) - _MAX_HISTORY]

    # 3. stabilization
    up_w, down_w = spec.scale_up_stabilization_seconds, spec.scale_down_window
    up_rec = min(r for t, r in recs if now - t <= up_w)
    down_rec = max(r for t, r in recs if now - t <= down_w)
    desired = cur
    if desired < up_rec:
        desired = up_rec
    if desired > down_rec:
        desired = down_rec
    # no scale-down on a history shorter than a window (a new scaler: the operator restarted, a new backend)
    if desired < cur and now - since < spec.window_seconds:
        desired = cur
    stab_reason = None
    if raw < cur and desired > raw:
        stab_reason = STABILIZING_SCALE_DOWN
    elif raw > cur and desired < raw:
        stab_reason = STABILIZING_SCALE_UP

    # 4. step limits
    limited = ""
    up_step = max(spec.max_scale_up_step, engine_need - cur)  # a backlog-sized step is not cut
    if desired > cur + up_step:
        desired = cur + up_step
        limited = f"; limited by maxScaleUpStep {spec.max_scale_up_step}"
    elif desired < cur - spec.max_scale_down_step:
        desired = cur - spec.max_scale_down_step
        limited = f"; limited by maxScaleDownStep {spec.max_scale_down_step}"

    # 3c. occupancy guard (readings without engine gauges; with them, step 2b already holds in-flight work)
    if (view is None and desired < cur <= hi and max_batch_size and reading.mean_inflight_per_pod is not None
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
    # remove a replica while TRT-LLM itself reports waiting requests or a nearly full KV cache. Nor cancel one
    # that is starting: while requests wait, the load measured from finished requests is the engines' throughput,
    # not the demand, and the replicas ordered for the queue are needed when they turn Ready.
    if desired < cur:
        backlog = engine_backlog(reading)
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
        reason = engine_reason or SCALED_UP
        msg = f"{base}: {cur} -> {desired} replicas{limited}"
        if stab_reason == STABILIZING_SCALE_UP and not limited:
            msg += f" (stabilized, raw {raw})"
        return cap_capacity(desired, reason, msg, raw)
    if (desired < cur and view is None and state.last_scale_time is not None
            and now - state.last_scale_time < spec.window_seconds):
        # The window still holds samples from before the last change: a queue ratio below
        # target says nothing about how many replicas can go, so remove replicas only once
        # the reading fully reflects the current count (see module docstring, step 3b).
        return finish(cur, STABILIZING_SCALE_DOWN,
                      f"{base} wants {desired}; last scale {now - state.last_scale_time:.0f}s ago, "
                      f"waiting one full {spec.window_seconds}s metrics window", raw)
    if desired < cur:
        return finish(desired, SCALED_DOWN, f"{base}: {cur} -> {desired} replicas{limited}", raw)
    # no change
    if raw < cur and cur <= lo:  # whatever the stabilization window holds, minReplicas is the floor
        return finish(cur, AT_MIN_REPLICAS, f"{base} wants {raw}; at minReplicas {lo}", raw)
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
