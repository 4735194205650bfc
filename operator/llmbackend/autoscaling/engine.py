"""The engine's view (step 2b of decision.py's docstring): what the engine gauges of the ready pods say about the
load, the supply (ready and starting replicas) and saturation, and the replicas a load needs (square-root staffing)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..api.v1alpha1 import AutoscalingSpec
from .forecast import FIT_TAU_S, MAX_LOADS, BatchFit, quantile, robust_forecast
from .headroom import burst_headroom, largest_surprise, learn_rise, learn_surprise, queued_recently, tall_bursts
from .knobs import DEFAULT_KNOBS, DecisionKnobs
from .ratio import REASON_STALE, RatioReading
from .state import ScalerState, remember_peak

# KV-cache use (fraction of blocks, max over pods) at which the engine counts as saturated.
ENGINE_KV_CACHE_BUSY = 0.9


@dataclass(frozen=True)
class EngineView:
    """What the engine gauges say about the ready pods (decision.py's docstring, step 2b)."""

    in_flight: float
    slots_per_replica: float
    forecast: float          # load expected one cold start ahead
    cold_start_s: float
    saturated: str           # why the engines count as saturated now ('' when they do not)
    load: float = 0.0        # the load now: offered load (or in flight when it cannot be measured)
    ready: int = 0           # replicas serving (that gave a reading)
    starting: int = 0        # replicas ordered and not serving yet: capacity on the way
    keep_load: float = 0.0   # the load the replicas kept must carry (KEEP_QUANTILE of the last cold start)
    history_s: float = 0.0   # how far back the loads go
    floor_load: float = 0.0  # the peak load of the last burstMemorySeconds kept standing (0: off)
    headroom: float = 1.0    # learned headroom: the factor on the forecast (burst_headroom)
    calm: bool = False       # the learned headroom is on and remembers no burst: the square-root spare is CALM_BETA
    learned: float = 0.0     # this scaler has watched a whole memory: the factor on targetUtilization (spare
    #                          LEARNED_BETA, whether calm or not); 0: not yet
    base_load: float = 0.0   # the median load of the last cold start
    rise: float = 1.0        # the largest rise over the base remembered (learn_rise), at most learnedHeadroomMax
    floor_s: float = 0.0     # how far back the burst floor's peaks go (burstMemorySeconds or AUTO_BURST_FLOOR_S; 0: off)
    start_s: float = 0.0     # one replica's cold start (the horizon ``cold_start_s`` without the window's lag)
    knobs: DecisionKnobs = field(default=DEFAULT_KNOBS, repr=False)  # the decision's: the square-root spares

    @property
    def rise_load(self) -> float:
        """The load the bursts rose to over the base: the learned headroom keeps at least it standing."""
        return self.base_load * self.rise

    def utilization_in_use(self, utilization: float) -> float:
        """``utilization`` (targetUtilization, or a share of it) as this decision applies it: raised once learned."""
        return utilization * (self.learned or 1.0)

    def replicas_for(self, load: float, utilization: float) -> int:
        r = min(load / max(self.utilization_in_use(utilization) * self.slots_per_replica, 1e-9), 1e9)
        k = self.knobs
        beta = k.LEARNED_BETA if self.learned else k.CALM_BETA if self.calm else k.HEADROOM_BETA
        return math.ceil(r + beta * math.sqrt(max(r, 0.0)) - 1e-9)


def saturation(reading: RatioReading, spec: AutoscalingSpec) -> str:
    """Why the ready pods' engines are saturated now ('' when they are not)."""
    if reading.active is not None and reading.slots and reading.active >= reading.slots:
        return f"all {reading.slots:g} batch slots busy"
    if reading.in_flight is not None and reading.slots and reading.in_flight > reading.slots:
        # more requests inside the engines than batch slots: a queue in front of full batches (the active gauge
        # dips below the maximum between iterations, as sequences finish, while the queue stays)
        return f"{reading.in_flight:g} requests in flight for {reading.slots:g} batch slots"
    if reading.kv_cache_fraction is not None and reading.kv_cache_fraction >= spec.kv_cache_threshold:
        return f"KV cache {reading.kv_cache_fraction:.0%} used (threshold {spec.kv_cache_threshold:.0%})"
    return ""


def engine_backlog(reading: RatioReading) -> str:
    """Why the engine looks saturated although Triton's queue does not ('' when it does not)."""
    if reading.trtllm_waiting:
        return f"TensorRT-LLM reports {reading.trtllm_waiting:g} request(s) waiting inside the executor"
    if reading.kv_cache_fraction is not None and reading.kv_cache_fraction >= ENGINE_KV_CACHE_BUSY:
        return f"TensorRT-LLM KV cache {reading.kv_cache_fraction:.0%} used"
    return ""


def observe_engine(state: ScalerState, new_state: ScalerState, reading: RatioReading, spec: AutoscalingSpec, cur: int,
                   now: float, max_batch_size: int | None, cold_start_s: float | None,
                   knobs: DecisionKnobs) -> EngineView | None:
    """Step 2b's measurements: the engine's view of ``reading`` (None unless it is fresh and carries the engine
    gauges), the load, its forecast and the burst memories, written into ``new_state`` (the next decision's state,
    whose ``since`` and ``started`` are set) with the fit and since when the engines are saturated or idle.
    ``max_batch_size``: the slots per replica when the engine does not export them; ``cold_start_s``: as ``decide()``."""
    # the pods' own gauges: fewer than one slot a pod (5e-324, say: the tenant's image writes them) is no reading
    slots_total = reading.slots if reading.slots and reading.slots >= max(reading.pods_used or 0, 1) else (
        max_batch_size * reading.pods_used if max_batch_size and reading.pods_used else None)
    if reading.reason == REASON_STALE or reading.in_flight is None or not reading.pods_used or not slots_total:
        return None
    since = new_state.since if new_state.since is not None else now  # set by decide(): its first decision
    started = new_state.started if new_state.started is not None else now
    b_target = spec.target_utilization * slots_total / reading.pods_used
    fit = state.fit
    per_request = reading.compute_s_per_request
    if per_request is not None and reading.mean_inflight_per_pod is not None:
        fit = (fit or BatchFit((0.0,) * 5, now)).add(reading.mean_inflight_per_pod, per_request, now, FIT_TAU_S)
    new_state.fit = fit
    t_target = fit.at(b_target) if fit is not None else None
    if reading.arrival_rate is not None and t_target is not None:
        x = reading.arrival_rate * t_target   # the sequences the arrivals keep busy at the target batch
    else:
        x = reading.offered_load if reading.offered_load is not None else reading.in_flight
    # the load is measured over the window, half a window late on average: look that much further
    cold_s = cold_start_s if cold_start_s is not None else float(spec.cold_start_seconds or 0)
    horizon = cold_s + spec.window_seconds / 2
    loads = [(t, v) for t, v in state.loads if now - t <= max(horizon, 2 * spec.window_seconds) and t < now]
    loads.append((now, x))
    new_state.loads = loads[-MAX_LOADS:]
    horizon_loads = [v for t, v in new_state.loads if now - t <= horizon]
    if spec.forecast:
        forecast = robust_forecast(new_state.loads, now, horizon, knobs.LEVEL_QUANTILE, knobs)
        keep_load = max(forecast, quantile(horizon_loads, knobs.KEEP_QUANTILE))
    else:
        forecast = keep_load = x
    floor_load = 0.0
    automatic = spec.burst_floor == "auto" and spec.learned_headroom_max > 1 and not spec.burst_memory_seconds
    floor_s = spec.burst_memory_seconds or (knobs.AUTO_BURST_FLOOR_S if automatic else 0)
    if floor_s:
        new_state.peaks = remember_peak(state.peaks, now, keep_load, floor_s)
    else:
        new_state.peaks = []
    # learned headroom, in arrival-rate units (sequences per request/s: the fit's time at the target batch);
    # a forecast from less than a horizon of rates (a new scaler, engines still filling) is not checked later:
    # its shortfall says nothing about bursts
    headroom = 1.0
    if spec.learned_headroom_max > 1:
        per_rate = t_target if reading.arrival_rate is not None and t_target else 1.0
        replica_rate = spec.target_utilization * slots_total / reading.pods_used / per_rate
        new_state.forecasts, new_state.rates, new_state.surprises = learn_surprise(
            state, now, horizon, x / per_rate, now - started >= horizon, replica_rate, knobs, spec.forecast)
        headroom = burst_headroom(new_state.surprises, now - since, spec.learned_headroom_max, knobs)
        new_state.rises = learn_rise(state.rises, new_state.rates, now, horizon, replica_rate, knobs)
        rise = min(largest_surprise(new_state.rises), spec.learned_headroom_max) if knobs.LEARN_RISE else 1.0
    else:
        new_state.forecasts, new_state.rates, new_state.surprises, new_state.rises = [], [], [], []
        rise = 1.0
    base_load = quantile(horizon_loads, 0.5)
    if reading.ratio is not None and reading.ratio > spec.target_ratio:
        new_state.queued_at = now
    # the automatic burst floor stands from when bursts over the cap queued while such bursts are remembered
    if not automatic or not tall_bursts(new_state, spec.learned_headroom_max):
        new_state.floor_since = None
    elif new_state.floor_since is None and queued_recently(new_state, now, knobs):
        new_state.floor_since = now
    if spec.burst_memory_seconds or new_state.floor_since is not None:
        floor_load = max(x for _, x in new_state.peaks)
    sat = saturation(reading, spec)
    ready_n = min(cur, reading.pods_used)
    calm = spec.learned_headroom_max > 1 and headroom <= 1.0 and rise <= 1.0
    # learned: this scaler has watched a whole memory, so the learned headroom stands for the bursts it saw (a new
    # one has not had the time to see them: targetUtilization and the larger spare stand for them)
    learned = 0.0
    if spec.learned_headroom_max > 1 and spec.learned_utilization and now - since >= knobs.SURPRISE_MEMORY_S:
        learned = max(1.0, spec.learned_utilization / spec.target_utilization)
    view = EngineView(reading.in_flight, slots_total / reading.pods_used, forecast, horizon, sat, x,
                      ready_n, max(0, cur - ready_n), keep_load, now - new_state.loads[0][0], floor_load,
                      headroom, calm, learned, base_load, rise, float(floor_s), cold_s, knobs)
    if sat:
        new_state.saturated_since = state.saturated_since if state.saturated_since is not None else now
    else:
        new_state.saturated_since = None
    idle = reading.in_flight == 0 and reading.ratio == 0.0 and reading.requests == 0
    new_state.idle_since = (state.idle_since if state.idle_since is not None else now) if idle else None
    return view
