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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..api import cron
from ..api.v1alpha1 import LEARNED_HEADROOM_MAX_LIMIT, SCALER_MEMORY_MAX_BURSTS, AutoscalingSpec, schedule_cron
from .coldstart import epoch_seconds, rfc3339
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
ENGINE_SATURATED = "EngineSaturated"      # slots full / KV cache high for saturationSeconds: scaled up
FORECAST_LOAD = "ForecastLoad"            # scaled up for the load expected one cold start ahead
SCALED_FROM_ZERO = "ScaledFromZero"       # requests waiting while no replica exists
BURST_FLOOR = "BurstFloor"                # scaled up to the standing capacity the last bursts needed (burstMemorySeconds)
WAITING_TO_SCALE_TO_ZERO = "IdleBeforeScaleToZero"
PANIC = "Panic"                            # panic mode ordered or held the replicas (spec.autoscaling.panic)

REASONS = (
    SCALED_UP, SCALED_DOWN, WITHIN_TOLERANCE, AT_MAX_REPLICAS, AT_MIN_REPLICAS,
    STABILIZING_SCALE_DOWN, STABILIZING_SCALE_UP, METRICS_UNAVAILABLE, STALE_METRICS,
    INSUFFICIENT_CAPACITY, ENGINE_SATURATED, FORECAST_LOAD, SCALED_FROM_ZERO, WAITING_TO_SCALE_TO_ZERO, BURST_FLOOR,
    PANIC,
)

_MAX_HISTORY = 512
DEFAULT_MAX_OCCUPANCY = 0.5
# KV-cache use (fraction of blocks, max over pods) at which the engine counts as saturated.
ENGINE_KV_CACHE_BUSY = 0.9
USAGE_EPSILON = 1e-9  # float rounding of ratio / target: a reading on the tolerance band's edge is inside it


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
    saturated_since: float | None = None   # start of the current run of saturated readings
    idle_since: float | None = None        # start of the current run of idle readings
    loads: list[tuple[float, float]] = field(default_factory=list)  # (time, load) of fresh engine readings
    fit: BatchFit | None = None           # compute time per request vs batch size
    since: float | None = None            # first decision of this scaler (no scale-down from a short history)
    peaks: list[tuple[float, float]] = field(default_factory=list)  # (bucket start, peak keep load): burst memory
    forecasts: list[tuple[float, float]] = field(default_factory=list)  # (time, forecast) not one horizon old yet
    rates: list[tuple[float, float]] = field(default_factory=list)  # (time, arrival rate) of the last horizon
    surprises: list[tuple[float, float]] = field(default_factory=list)  # (bucket start, largest seen / forecast)
    # where this scaler's arrival rates begin (its first decision, or the oldest rate resumed): a forecast is checked
    # for surprises only once it is made from a horizon of rates, which a resumed ``since`` does not promise
    started: float | None = None
    # the last decision whose reading had requests waiting over the target ratio: a burst over learnedHeadroomMax
    # that queued is what ``burst_warning`` reports (one the standing spare absorbed is not)
    queued_at: float | None = None
    # since when the automatic burst floor stands (bursts over the cap queued; it stays while such bursts are
    # remembered: the floor it keeps is what stops the queue that set it)
    floor_since: float | None = None
    rises: list[tuple[float, float]] = field(default_factory=list)  # (bucket start, largest rise over the base)
    # panic mode (spec.autoscaling.panic; ``apply_panic``): since when, the last decision over the threshold, and the
    # most replicas ordered in it (no scale-down below them while it lasts). Not resumed after an operator restart.
    panic_since: float | None = None
    panic_last: float | None = None
    panic_max: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "lastScaleTime": self.last_scale_time,
            "lastDesired": self.last_desired,
            "saturatedSince": self.saturated_since,
            "idleSince": self.idle_since,
            "loads": [[t, x] for t, x in self.loads],
            "fit": None if self.fit is None else list(self.fit.sums) + [self.fit.time],
            "since": self.since,
            "peaks": [[t, x] for t, x in self.peaks],
            "forecasts": [[t, x] for t, x in self.forecasts],
            "rates": [[t, x] for t, x in self.rates],
            "surprises": [[t, x] for t, x in self.surprises],
            "started": self.started,
            "queuedAt": self.queued_at,
            "floorSince": self.floor_since,
            "rises": [[t, x] for t, x in self.rises],
            "panicSince": self.panic_since,
            "panicLast": self.panic_last,
            "panicMax": self.panic_max,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ScalerState:
        if not d:
            return cls()
        recs = [(float(t), int(r)) for t, r in d.get("recommendations") or []]
        lst = d.get("lastScaleTime")
        ld = d.get("lastDesired")
        loads = [(float(t), float(x)) for t, x in d.get("loads") or []]
        fit = d.get("fit")
        since = d.get("since")
        peaks = [(float(t), float(x)) for t, x in d.get("peaks") or []]
        forecasts = [(float(t), float(x)) for t, x in d.get("forecasts") or []]
        surprises = [(float(t), float(x)) for t, x in d.get("surprises") or []]
        rates = [(float(t), float(x)) for t, x in d.get("rates") or []]
        started = d.get("started")
        queued_at, floor_since = d.get("queuedAt"), d.get("floorSince")
        rises = [(float(t), float(x)) for t, x in d.get("rises") or []]
        return cls(recs, None if lst is None else float(lst), None if ld is None else int(ld),
                   d.get("saturatedSince"), d.get("idleSince"), loads,
                   None if not fit else BatchFit(_five(fit[:5]), float(fit[5])), None if since is None else float(since),
                   peaks, forecasts, rates, surprises, None if started is None else float(started),
                   None if queued_at is None else float(queued_at), None if floor_since is None else float(floor_since),
                   rises, d.get("panicSince"), d.get("panicLast"), int(d.get("panicMax") or 0))

    def last_scale_time_rfc3339(self) -> str | None:
        return None if self.last_scale_time is None else rfc3339(self.last_scale_time)

    def memory(self, now: float) -> dict[str, Any] | None:
        """What an operator that restarts resumes (status.autoscaling.memory; ScalerMemory in the API), with
        ``recent()``: since when the backend is watched and the burst memory (the largest surprise per bucket).
        ``lastSeen`` is the start of the bucket of ``now``, so that it changes the status once a bucket, not at every
        decision. None before the first decision."""
        if self.since is None:
            return None
        memory: dict[str, Any] = {
            "watchingSince": rfc3339(self.since),
            "lastSeen": rfc3339(math.floor(now / PEAK_BUCKET_S) * PEAK_BUCKET_S),
            "bursts": [{"start": rfc3339(t), "headroom": round(x, 2)}
                       for t, x in self.surprises[-SCALER_MEMORY_MAX_BURSTS:]]}
        if self.queued_at is not None:  # moves only while requests queue (when the ratio in status moves too)
            memory["queuedAt"] = rfc3339(self.queued_at)
        if self.floor_since is not None:
            memory["burstFloorSince"] = rfc3339(self.floor_since)
        return memory

    def recent(self) -> dict[str, Any]:
        """The last cold start's loads and arrival rates, the forecasts not checked yet, the compute-time fit, the
        recommendations of the stabilization windows, the burst memory's peaks (burstMemorySeconds) and the rises over
        the base load (``learn_rise``), for
        status.autoscaling.memory beside ``memory()``. They change at every decision, so they are written whenever
        the status is, not a reason to write it. A resumed scaler forecasts from them at once (from the few readings
        of its own it would see none of a burst that ended a minute before the restart) and goes on checking its
        forecasts for surprises."""
        recent: dict[str, Any] = {"loads": _pairs_text(self.loads), "rates": _pairs_text(self.rates),
                                  "forecasts": _pairs_text(self.forecasts),
                                  "recommendations": _pairs_text([(t, float(r)) for t, r in self.recommendations]),
                                  "peaks": _pairs_text(self.peaks), "rises": _pairs_text(self.rises)}
        if self.fit is not None and all(map(math.isfinite, (*self.fit.sums, self.fit.time))):  # JSON has no NaN
            recent["fit"] = [float(f"{v:.6g}") for v in self.fit.sums] + [float(round(self.fit.time))]
        return recent

    @classmethod
    def resumed(cls, memory: Any, now: float) -> ScalerState:
        """A new scaler's state from ``memory`` (what ``memory()`` and ``recent()`` wrote before a restart). A memory
        last seen more than MEMORY_GAP_S ago missed the bursts of the gap, and anything unreadable is no memory: a new
        scaler then.
        The status is writable by whoever may write LLMBackend status: headrooms are kept within [1,
        SURPRISE_REPORT_MAX] (the decision caps them at learnedHeadroomMax) and entries from the future are dropped, so
        a forged memory sizes no differently than traffic could."""
        if not isinstance(memory, dict):
            return cls()
        since, seen = epoch_seconds(memory.get("watchingSince")), epoch_seconds(memory.get("lastSeen"))
        if since is None or seen is None or since >= seen + PEAK_BUCKET_S or abs(now - seen) > MEMORY_GAP_S:
            return cls()
        bursts: dict[float, float] = {}  # bucket start -> its largest headroom
        listed = memory.get("bursts")
        for burst in (listed if isinstance(listed, list) else [])[-SCALER_MEMORY_MAX_BURSTS:]:
            start = epoch_seconds(burst.get("start")) if isinstance(burst, dict) else None
            headroom = burst.get("headroom") if isinstance(burst, dict) else None
            if start is None or start > now or not _finite_number(headroom):
                continue
            bursts[start] = max(bursts.get(start, 1.0), min(max(float(headroom), 1.0), SURPRISE_REPORT_MAX))
        rates = _read_pairs(memory.get("rates"), now)
        recommendations = [(t, round(r)) for t, r in _read_pairs(memory.get("recommendations"), now)]
        queued_at, floor_since = epoch_seconds(memory.get("queuedAt")), epoch_seconds(memory.get("burstFloorSince"))
        return cls(recommendations, since=since, surprises=_forget_peaks(sorted(bursts.items()), now, SURPRISE_MEMORY_S),
                   loads=_read_pairs(memory.get("loads"), now), fit=_read_fit(memory.get("fit"), now),
                   rates=rates, forecasts=_read_pairs(memory.get("forecasts"), now),
                   peaks=_read_pairs(memory.get("peaks"), now),
                   rises=_forget_peaks([(t, min(max(x, 1.0), SURPRISE_REPORT_MAX))
                                        for t, x in _read_pairs(memory.get("rises"), now)], now, SURPRISE_MEMORY_S),
                   # the forecasts checked for surprises need a horizon of rates: the rates resumed count
                   started=rates[0][0] if rates else None,
                   queued_at=queued_at if queued_at is not None and queued_at <= now else None,
                   floor_since=floor_since if floor_since is not None and floor_since <= now else None)


def _pairs_text(pairs: list[tuple[float, float]]) -> str:
    """The last MAX_LOADS (time, value) pairs as "time:value ..." (whole seconds, 4 significant digits): within the
    API's SCALER_MEMORY_MAX_TEXT. (Stabilization windows over MAX_LOADS sync periods resume their newest part.)"""
    return " ".join(f"{t:.0f}:{x:.4g}" for t, x in pairs[-MAX_LOADS:] if math.isfinite(t) and math.isfinite(x))


def _read_pairs(text: Any, now: float) -> list[tuple[float, float]]:
    """``_pairs_text``'s pairs back: the readable ones no later than ``now`` with a value of 0 or more, at most
    MAX_LOADS."""
    pairs = []
    for pair in (text.split() if isinstance(text, str) else [])[-MAX_LOADS:]:
        t, _, x = pair.partition(":")
        try:
            t_s, value = float(t), float(x)
        except ValueError:
            continue
        if math.isfinite(t_s) and math.isfinite(value) and 0 <= value and t_s <= now:
            pairs.append((t_s, value))
    return sorted(pairs)


def _read_fit(values: Any, now: float) -> BatchFit | None:
    """``recent()``'s fit (five sums and the time of the last reading): None unless six finite numbers, none
    negative (batches and compute times are not), a weight above 0 and a time no later than ``now``."""
    if not isinstance(values, list) or len(values) != 6:
        return None
    if not all(_finite_number(v) and v >= 0 for v in values):
        return None
    if values[0] <= 0 or values[5] > now:
        return None
    return BatchFit(_five(values[:5]), float(values[5]))


def _finite_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number that is finite (true and false are not numbers here, though Python counts them as ints)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics); 0 for none."""
    if not values:
        return 0.0
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def theil_sen_slope(points: list[tuple[float, float]]) -> float:
    """Median of the pairwise slopes of ``points`` (time, value): a step or a burst changes the slope of fewer than
    half the pairs (those that straddle it), so the median stays at the underlying trend; a ramp changes all."""
    slopes = [(x2 - x1) / (t2 - t1) for i, (t1, x1) in enumerate(points) for t2, x2 in points[i + 1:] if t2 > t1]
    return quantile(slopes, 0.5)


def robust_forecast(loads: list[tuple[float, float]], now: float, horizon_s: float, level_q: float) -> float:
    """The load expected ``horizon_s`` ahead from the loads of the last ``horizon_s`` (see module docstring, 2b)."""
    recent = [(t, x) for t, x in loads if now - t <= horizon_s]
    if not recent:
        return 0.0
    level = quantile([x for _, x in recent], level_q)
    if now - recent[0][0] < horizon_s / 2:
        return level  # a trend over less than half the horizon is mostly noise
    # A ramp rises in each third of the span; a step or a burst (one jump up, one down) leaves a third flat.
    span = now - recent[0][0]
    thirds = [[p for p in recent if recent[0][0] + i * span / 3 <= p[0] <= recent[0][0] + (i + 1) * span / 3]
              for i in range(3)]
    if min(map(len, thirds)) < 3:
        return level
    slope = min(min(map(theil_sen_slope, thirds)), theil_sen_slope(recent))
    if slope <= 0:
        return level  # a falling trend is not extrapolated: scale-down waits for the load itself
    # the trend's line at now (median intercept); extrapolated only when the rise over the span stands out of
    # the noise around the line (TREND_NOISE_RATIO x the median absolute residual), at most to twice the level
    at_now = quantile([x + slope * (now - t) for t, x in recent], 0.5)
    spread = quantile([abs(x - at_now + slope * (now - t)) for t, x in recent], 0.5)
    if slope * (now - recent[0][0]) < TREND_NOISE_RATIO * spread:
        return level
    return max(level, min(at_now + slope * horizon_s, TREND_MAX_GROWTH * max(level, at_now)))


def _forget_peaks(peaks: list[tuple[float, float]], now: float, memory_s: float) -> list[tuple[float, float]]:
    """``peaks`` (bucket start, peak) without the buckets that ended more than ``memory_s`` before ``now``."""
    return [(t, x) for t, x in peaks if now - (t + PEAK_BUCKET_S) < memory_s and t <= now]


def _remember_peak(peaks: list[tuple[float, float]], now: float, load: float, memory_s: float) -> list[tuple[float, float]]:
    """``peaks`` (bucket start, peak load) with ``load`` at ``now``, without buckets older than ``memory_s``."""
    bucket = math.floor(now / PEAK_BUCKET_S) * PEAK_BUCKET_S
    kept = _forget_peaks(peaks, now, memory_s)
    if kept and kept[-1][0] == bucket:
        kept[-1] = (bucket, max(kept[-1][1], load))
    else:
        kept.append((bucket, load))
    return kept


def learn_surprise(state: ScalerState, now: float, horizon_s: float, rate: float, checkable: bool,
                   replica_rate: float, forecast: bool = True) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[tuple[float, float]]]:
    """(forecasts, rates, surprises) after ``now``'s reading. Forecasts and rates are in arrival-rate units, and the
    forecast checked later is made here from the rates alone: the load in sequences is the rate times the fit's
    compute time at the target batch, and that fit moves (a scale-down changes the batch per pod), which is not
    traffic. (A forecast of loads divided by today's compute time mixed the two: on a smooth ramp, a fit that doubled
    after a scale-down halved the forecast and was remembered as a burst of 2.5 for an hour.) Each forecast one horizon old is
    compared with the rates its horizon saw, measured as the forecast's level is (their LEVEL_QUANTILE: Poisson noise
    alone then gives about 1, a burst over a tenth of the horizon or more counts); the ratio (1 up to SURPRISE_NOISE,
    at most SURPRISE_REPORT_MAX; the decision caps it at learnedHeadroomMax, ``burst_warning`` reports what the
    cap left out) is kept as the peak of its PEAK_BUCKET_S bucket for SURPRISE_MEMORY_S (module docstring,
    2b: learned headroom). A shortfall under SURPRISE_MIN_REPLICAS of a replica (``replica_rate``: what one replica
    carries at the target) counts as 1: at a low load a ramp's or noise's relative rise is large and changes no
    replica count, and remembered it would multiply the load once it is high. ``checkable`` False: the
    forecast made now is not checked later (made from less than a horizon of rates); ``forecast`` False
    (spec.autoscaling.forecast off): the rate now stands for the rate ahead, as the load does for the replicas."""
    rates = [(t, r) for t, r in state.rates if now - t <= horizon_s and t < now] + [(now, rate)]
    forecast_rate = 0.0
    if checkable:
        forecast_rate = robust_forecast(rates, now, horizon_s, LEVEL_QUANTILE) if forecast else rate
    pending, ratios = [], []
    for t, f in state.forecasts:
        if now - t < horizon_s:
            pending.append((t, f))
            continue
        realized = [r for tr, r in rates if t < tr <= t + horizon_s]
        if realized and f > 0:
            ratios.append(_burst_ratio(quantile(realized, LEVEL_QUANTILE), f, replica_rate))
    if ratios:
        surprises = _remember_peak(state.surprises, now, max(ratios), SURPRISE_MEMORY_S)
    else:
        surprises = _forget_peaks(state.surprises, now, SURPRISE_MEMORY_S)
    if forecast_rate > 0:
        pending.append((now, forecast_rate))
    return pending[-MAX_LOADS:], rates[-MAX_LOADS:], surprises


def learn_rise(rises: list[tuple[float, float]], rates: list[tuple[float, float]], now: float, horizon_s: float,
               replica_rate: float) -> list[tuple[float, float]]:
    """``rises`` after ``now``'s reading: how far the arrival rates of the last horizon (``rates``, in requests/s) rise
    over their base, LEVEL_QUANTILE over median (a burst shorter than half the horizon leaves the median at the rate
    beside it), kept as the peak of its PEAK_BUCKET_S bucket for SURPRISE_MEMORY_S. Rises are gated as surprises are
    (SURPRISE_NOISE, SURPRISE_MIN_REPLICAS of ``replica_rate``) and need half a horizon of rates. Unlike a surprise it
    is measured against the load beside the burst, not a forecast: when bursts come about once a cold start, the
    forecast's level already holds the last one, the surprise reads small, and once a calm cold start brings the
    forecast down to the base the headroom learned on the high forecast leaves too little standing (module docstring,
    2b: learned headroom)."""
    if not rates or now - rates[0][0] < horizon_s / 2:
        return _forget_peaks(rises, now, SURPRISE_MEMORY_S)
    values = [r for _, r in rates]
    base = quantile(values, 0.5)
    rise = _burst_ratio(quantile(values, LEVEL_QUANTILE), base, replica_rate) if base > 0 else 1.0
    return _remember_peak(rises, now, rise, SURPRISE_MEMORY_S)


def _burst_ratio(seen: float, reference: float, replica_rate: float) -> float:
    """``seen`` over ``reference`` (> 0) as the burst memories keep it: 1 up to SURPRISE_NOISE or for a difference
    under SURPRISE_MIN_REPLICAS of ``replica_rate``, at most SURPRISE_REPORT_MAX."""
    big = seen / reference > SURPRISE_NOISE and seen - reference >= SURPRISE_MIN_REPLICAS * replica_rate
    return min(seen / reference, SURPRISE_REPORT_MAX) if big else 1.0


def burst_headroom(surprises: list[tuple[float, float]], history_s: float, cap: float) -> float:
    """The factor on the forecast: the largest surprise remembered, at most ``cap`` (learnedHeadroomMax); ``cap``
    while the scaler has seen less than SURPRISE_PRIOR_S of its own load (a new backend assumes the largest bursts);
    never below 1."""
    learned = min(largest_surprise(surprises), cap)
    prior = cap if history_s < SURPRISE_PRIOR_S else 1.0
    return max(1.0, learned, prior)


def burst_warning(state: ScalerState, spec: AutoscalingSpec, now: float) -> str | None:
    """What to tell the admin when bursts over learnedHeadroomMax queued (``bursts_over_cap``): the learned headroom
    is capped below what they brought, so the first of them waited for new replicas. While the automatic burst floor
    stands for them (burstFloor auto), why the fleet stays large and how to turn it off; with burstFloor off and no
    burstMemorySeconds, what to set. None otherwise. The operator never raises learnedHeadroomMax itself."""
    cap = spec.learned_headroom_max
    largest = largest_surprise(state.surprises)
    seen = (f"bursts within the last {SURPRISE_MEMORY_S / 60:.0f} min rose to x{largest:.1f} of the forecast one cold "
            f"start ahead, over the x{cap:g} learnedHeadroomMax keeps standing, and requests queued over the target "
            f"ratio. ")
    if state.floor_since is not None:
        return seen + (f"Since {rfc3339(state.floor_since)} the replicas their peak needed stay standing (burst floor) "
                       f"until no such burst is remembered ({SURPRISE_MEMORY_S / 60:.0f} min after the last); "
                       f"spec.autoscaling.burstFloor off turns this off, maxReplicas bounds it")
    if spec.burst_floor != "off" or spec.burst_memory_seconds or not bursts_over_cap(state, cap, now):
        return None
    if largest <= LEARNED_HEADROOM_MAX_LIMIT:
        return seen + (f"They wait for new replicas (a cold start). To serve them from standing replicas, raise "
                       f"spec.autoscaling.learnedHeadroomMax to {advised_headroom(largest):g} or set burstFloor auto")
    return seen + (f"They wait for new replicas (a cold start), and rose over learnedHeadroomMax's limit "
                   f"({LEARNED_HEADROOM_MAX_LIMIT:g}). To serve them from standing replicas, set "
                   f"spec.autoscaling.burstFloor auto, burstMemorySeconds, minReplicas or a schedule floor")


def largest_surprise(surprises: list[tuple[float, float]]) -> float:
    """The largest ratio a burst memory holds (1: none): of the surprises (a rise over its forecast) or of the
    rises over the base (``learn_rise``)."""
    return max((x for _, x in surprises), default=1.0)


def _tall_bursts(state: ScalerState, cap: float) -> bool:
    """A burst of the last SURPRISE_MEMORY_S rose BURST_OVER_CAP times learnedHeadroomMax (``cap``) or more over its
    forecast (False with the learned headroom off)."""
    return cap > 1 and largest_surprise(state.surprises) >= cap * BURST_OVER_CAP


def _queued_recently(state: ScalerState, now: float) -> bool:
    """Requests queued over the target ratio within the last SURPRISE_MEMORY_S."""
    return state.queued_at is not None and now - state.queued_at <= SURPRISE_MEMORY_S


def bursts_over_cap(state: ScalerState, cap: float, now: float) -> bool:
    """Tall bursts (``_tall_bursts``) that queued (``_queued_recently``): the capped headroom left them short."""
    return _tall_bursts(state, cap) and _queued_recently(state, now)


def advised_headroom(largest: float) -> float:
    """The learnedHeadroomMax ``burst_warning`` advises for a burst of ``largest``: rounded up to a tenth."""
    return min(math.ceil(largest * 10 - 1e-9) / 10, LEARNED_HEADROOM_MAX_LIMIT)


def _five(values: list[Any]) -> tuple[float, float, float, float, float]:
    a, b, c, d, e = (float(v) for v in values)  # a stored fit: exactly five sums
    return a, b, c, d, e


@dataclass(frozen=True)
class BatchFit:
    """Least squares, with exponential forgetting, of the compute time per request against the mean batch.

    An engine's time per output token grows with its batch, so "requests in flight" measured at one replica
    count is not the load at another: removing replicas raises the batch, the compute time and the in-flight
    count (the feedback makes an in-flight target oscillate). The fit predicts the compute time at the target
    batch; the replicas needed are arrival rate x that time / target batch (Little's law at the target)."""

    sums: tuple[float, float, float, float, float]  # weight, Σb, ΣT, Σb², ΣbT
    time: float

    def add(self, b: float, t_s: float, now: float, tau_s: float) -> BatchFit:
        k = math.exp(-max(0.0, now - self.time) / tau_s)
        w, sb, st, sbb, sbt = (x * k for x in self.sums)
        return BatchFit((w + 1, sb + b, st + t_s, sbb + b * b, sbt + b * t_s), now)

    def at(self, b_target: float) -> float | None:
        """Compute time per request at ``b_target``; the mean when the batches seen vary too little for a slope."""
        w, sb, st, sbb, sbt = self.sums
        if w <= 0:
            return None
        mb, mt = sb / w, st / w
        var = sbb / w - mb * mb
        if var <= max(4.0, (0.15 * mb) ** 2):
            return mt
        slope = max(0.0, (sbt / w - mb * mt) / var)
        return max(mt * 0.25, mt + slope * (b_target - mb))


FIT_TAU_S = 1800.0  # the fit forgets over half an hour (model or traffic mix changes)

# The constants below were chosen on the tuning traces of benchmarks/autoscale_bench.py (HEADROOM_BETA with
# targetUtilization and the learned headroom on its main grid, the others by `--sweep`: one at a time around the
# defaults, one pass; 4 seeds per tuning trace, the benchmark's tuning rule; docs/benchmarks-autoscaling.md has the
# figures).
# The forecast's level: this quantile of the loads of the last cold start (0.9 over 0.75, which missed the tuning
# day's goal, and 1, 5 % more GPU-hours). KEEP_QUANTILE: a replica goes only when this quantile of the same loads
# fits the rest (a burst within the last cold start keeps the capacity that served it); the forecast's level bounds
# the keep load from below, so below LEVEL_QUANTILE it changes nothing (0.75, 0.9 and 1 tied).
LEVEL_QUANTILE = 0.9
KEEP_QUANTILE = 0.75
# Scale-down keeps the remaining replicas below this share of targetUtilization. Under 1 it is hysteresis: at 1
# the load that orders a replica and the load that lets it go are the same, and at a constant rate the noise in
# the forecast's level flaps a replica near every such boundary (up to 17.5 scale events in 90 min, mean of 2 seeds,
# at rates of 0.5-24 req/s; 0.95: at most 1; test_constant_poisson_rate_scales_at_most_once_per_10_min). 0.95 over
# 0.9: 2 % fewer GPU-hours on the tuning traces (1 cost 0.9 % less there: the tuning constants' rates sit between
# boundaries). The loads it looks at are the forecast's level at least, over the whole last cold start.
SCALE_DOWN_MARGIN = 0.95
# The trend counts once the rise it explains over the span is this many times the median absolute residual (8 over
# 4 on the main grid of 2026-12-05: 1.6 % fewer tuning GPU-hours; 4 had been picked over 2 and 8 by an earlier sweep).
TREND_NOISE_RATIO = 8.0
# The trend adds at most this share of the level over the horizon (1.25 over 1.5 and 2: a tie, the cheapest).
TREND_MAX_GROWTH = 1.25
# Loads kept: at most this many samples (a 15 s sync over a 10 min cold start is 40).
MAX_LOADS = 120
# Square-root staffing: replicas = R + HEADROOM_BETA x sqrt(R), R = load / (targetUtilization x slots). The spare
# capacity a reactive scaler needs for what arrives within one cold start is large, relative to the load, for a
# small backend and small for a large one (Halfin-Whitt); a fixed utilization alone sizes it the same at every
# scale. 1.5 over 1 (misses the tuning day's goal) and 2 (4 % more GPU-hours), chosen jointly with
# targetUtilization, learnedHeadroomMax, SURPRISE_PRIOR_S and CALM_BETA on the main grid (seventh session, six tuning
# traces): one at a time around the previous defaults, a sweep could not see that a higher utilization with more
# square-root spare costs less at the same SLO.
HEADROOM_BETA = 1.5
# The square-root spare while the learned headroom is on and remembers no burst (calm traffic: a ramp the forecast
# follows, Poisson noise); HEADROOM_BETA once a burst is remembered. On the main grid (seventh session): 1.5 over 1
# and 0.5 at the pick's other knobs (both miss the tuning day's goal: 99.30 % and 99.04 % against 99.90 %). (With
# five tuning traces, 1 was picked at a utilization of 0.6 and no prior.)
CALM_BETA = 1.5
# The square-root spare once this scaler has watched a whole SURPRISE_MEMORY_S (spec.autoscaling.learnedUtilization
# 0.8): the learned headroom then stands for the bursts, and the larger spare stays only for a new scaler. Chosen with
# learnedUtilization by `--sweep` (the pair, on the tuning traces at the main grid's pick): 0.5 at 0.8 met every goal
# at 25.2 GPU-hours against 34.6 with it off; 0 missed the goals at every utilization, 1 cost 5-17 % more.
LEARNED_BETA = 0.5
# A replica still starting is not cancelled once this share of its cold start is spent: what is left of its cold
# start costs less than ordering it again if the load comes back, and cancelling it throws the spent part away
# (0.25 over 0.5 and never: 0 % of the pods deleted before Ready on the tuning traces against 8-9 %; 0.5 saved 0.6 %
# of the GPU-hours, all on the tuning ramp, by cancelling a replica starting on it).
KEEP_STARTING_SPENT = 0.25
# Burst memory (spec.autoscaling.burstMemorySeconds): the peak keep load per bucket of this many seconds.
PEAK_BUCKET_S = 300.0
# Learned headroom (spec.autoscaling.learnedHeadroomMax > 1): the forecast is multiplied by the largest surprise (the
# arrivals seen within a cold start / the forecast made at its start) of the last SURPRISE_MEMORY_S (1800 over 3600
# and 7200: 1.4 % fewer GPU-hours at the same SLO).
SURPRISE_MEMORY_S = 1800.0
# A new scaler (a new backend, an operator restart after a gap: MEMORY_GAP_S) assumes learnedHeadroomMax for its
# first SURPRISE_PRIOR_S. On the main grid (seventh session, six tuning traces) 900 over 0: without the prior no grid
# point met the goal of the tuning trace with a burst every 4 minutes (at the pick's other knobs 98.43 % against
# 99.89 %: overlapping bursts within the first minutes, before any was learned). With five tuning traces, 0 was
# picked: a prior met the same goals for 4-9 % more GPU-hours.
SURPRISE_PRIOR_S = 900.0
# Surprises up to this ratio are noise and count as 1 (1.05, 1.1 and 1.2 tied).
SURPRISE_NOISE = 1.1
# ... and so do shortfalls under this share of one replica's load at the target: they change no replica count, and
# a ramp's relative rise at a low load, remembered, would multiply the load once it is high (0.5 over 0: the tuning
# ramp cost 29 % more GPU-hours, 6 % over all tuning traces; and 1, which missed the tuning day's goal).
SURPRISE_MIN_REPLICAS = 0.5
# Surprises are remembered up to this ratio (a rise from near idle is a large one); the decision caps them at
# learnedHeadroomMax, and ``burst_warning`` tells the admin when that cap left a burst out.
SURPRISE_REPORT_MAX = 100.0
# Bursts are over the cap (``bursts_over_cap``) once the largest remembered surprise is this many times
# learnedHeadroomMax: the standing capacity then falls a quarter or more short of what they brought (less than that,
# the square-root spare covers part of it).
BURST_OVER_CAP = 1.25
# The automatic burst floor (spec.autoscaling.burstFloor auto): once bursts over the cap queued, the peak load
# of each PEAK_BUCKET_S of this long stands as a floor while such bursts are remembered (SURPRISE_MEMORY_S, the
# learned headroom's own memory). It never engages on the tuning traces (their bursts are absorbed: no queue over the
# target with a burst over 1.25 x the cap), so they cannot choose it; the test traces' spikes (7x) are what it is
# for (docs/benchmarks-autoscaling.md).
AUTO_BURST_FLOOR_S = SURPRISE_MEMORY_S
# The learned headroom also keeps the base load (the median of the last cold start's loads) times the largest rise
# over the base remembered (``learn_rise``), at most learnedHeadroomMax. Not tuned (its quantile and gates are the
# surprises'). At the main grid's pick it is what meets the goal of the tuning trace with a burst every 4 minutes
# (99.99 % against 99.55 % without it) and changes no other tuning trace. False: the surprises alone (what
# autoscale_bench.py --ablation, --unseen and --held-out compare).
LEARN_RISE = True
# An operator restart (an upgrade, a leader failover: seconds to a minute or two) resumes what the scaler learned
# (status.autoscaling.memory, ScalerState.resumed) when it was last seen within this long; an older memory missed the
# bursts of the gap, and the scaler starts as a new one. lastSeen is written once a bucket, so a gap of 5-10 min.
MEMORY_GAP_S = 2 * PEAK_BUCKET_S


@dataclass(frozen=True)
class EngineView:
    """What the engine gauges say about the ready pods (see module docstring, step 2b)."""

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

    @property
    def rise_load(self) -> float:
        """The load the bursts rose to over the base: the learned headroom keeps at least it standing."""
        return self.base_load * self.rise

    def utilization_in_use(self, utilization: float) -> float:
        """``utilization`` (targetUtilization, or a share of it) as this decision applies it: raised once learned."""
        return utilization * (self.learned or 1.0)

    def replicas_for(self, load: float, utilization: float) -> int:
        r = load / (self.utilization_in_use(utilization) * self.slots_per_replica)
        beta = LEARNED_BETA if self.learned else CALM_BETA if self.calm else HEADROOM_BETA
        return math.ceil(r + beta * math.sqrt(max(r, 0.0)) - 1e-9)


@dataclass(frozen=True)
class Decision:
    desired_replicas: int
    reason: str
    message: str
    state: ScalerState
    raw_recommendation: int | None = None  # before stabilization/limits; None without a reading
    engine: EngineView | None = None
    panic: str | None = None  # status.autoscaling.panic: set while panic mode holds, why and until when


@dataclass(frozen=True)
class ScheduleHold:
    """The schedule entry that sets the floor now (``schedule_hold``)."""

    floor: int      # its desiredReplicas, at most maxReplicas
    index: int      # its place in spec.autoscaling.schedule
    since: float    # epoch seconds of the start it holds since

    def status(self, spec: AutoscalingSpec) -> str:
        """status.autoscaling.scheduleFloor: which entry, since when, the floor."""
        entry = (spec.schedule or [])[self.index]
        clipped = f" (desiredReplicas {entry.floor}, at most maxReplicas)" if entry.floor > self.floor else ""
        return (f"schedule[{self.index}] ({entry.start} to {entry.end}, {entry.time_zone}) holds minReplicas at "
                f"{self.floor}{clipped} since {rfc3339(self.since)}")


def schedule_hold(spec: AutoscalingSpec, now: float) -> ScheduleHold | None:
    """The schedule entry whose floor holds at ``now``: of the entries between a start and the end that follows it
    (api/cron.py, KEDA's cron scaler's start/end/timezone/desiredReplicas), the largest floor (the first such entry
    on a tie), clipped to maxReplicas; None when no entry holds or the largest floor is 0."""
    best: ScheduleHold | None = None
    for i, entry in enumerate(spec.schedule or []):
        tz = cron.zone(entry.time_zone)
        since = cron.active_since(cron.parse(schedule_cron(entry.start)), cron.parse(schedule_cron(entry.end)), tz, now)
        floor = min(entry.floor, spec.max_replicas)
        if since is not None and floor > 0 and (best is None or floor > best.floor):
            best = ScheduleHold(floor, i, since)
    return best


def schedule_floor(spec: AutoscalingSpec, now: float) -> int:
    """The floor the schedule sets at ``now`` (``schedule_hold``), 0 without any."""
    hold = schedule_hold(spec, now)
    return 0 if hold is None else hold.floor


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


def _engine_backlog(reading: RatioReading) -> str:
    """Why the engine looks saturated although Triton's queue does not ('' when it does not)."""
    if reading.trtllm_waiting:
        return f"TensorRT-LLM reports {reading.trtllm_waiting:g} request(s) waiting inside the executor"
    if reading.kv_cache_fraction is not None and reading.kv_cache_fraction >= ENGINE_KV_CACHE_BUSY:
        return f"TensorRT-LLM KV cache {reading.kv_cache_fraction:.0%} used"
    return ""


def _decide_stable(
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
) -> Decision:
    """``decide()`` without panic mode (the module docstring's steps).

    ``max_batch_size`` (the engine's in-flight batch limit) is the slots per replica
    when the engine does not export them, and enables the occupancy guard of step
    3c for readings without engine gauges. ``cold_start_s``: the forecast horizon
    (see :mod:`.coldstart`). ``waiting_at_zero``: requests waiting in front of a
    backend that has no replica (0 -> 1). ``starting_ages``: seconds since creation of each replica not Ready yet
    (one spent beyond ``KEEP_STARTING_SPENT`` of its cold start is not cancelled); None: unknown."""
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
        return Decision(desired, reason, message, new_state, raw, view)

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
    slots_total = reading.slots if reading.slots else (
        max_batch_size * reading.pods_used if max_batch_size and reading.pods_used else None)
    if not stale and reading.in_flight is not None and reading.pods_used and slots_total:
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
            forecast = robust_forecast(new_state.loads, now, horizon, LEVEL_QUANTILE)
            keep_load = max(forecast, quantile(horizon_loads, KEEP_QUANTILE))
        else:
            forecast = keep_load = x
        floor_load = 0.0
        automatic = spec.burst_floor == "auto" and spec.learned_headroom_max > 1 and not spec.burst_memory_seconds
        floor_s = spec.burst_memory_seconds or (AUTO_BURST_FLOOR_S if automatic else 0)
        if floor_s:
            new_state.peaks = _remember_peak(state.peaks, now, keep_load, floor_s)
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
                state, now, horizon, x / per_rate, now - started >= horizon, replica_rate, spec.forecast)
            headroom = burst_headroom(new_state.surprises, now - since, spec.learned_headroom_max)
            new_state.rises = learn_rise(state.rises, new_state.rates, now, horizon, replica_rate)
            rise = min(largest_surprise(new_state.rises), spec.learned_headroom_max) if LEARN_RISE else 1.0
        else:
            new_state.forecasts, new_state.rates, new_state.surprises, new_state.rises = [], [], [], []
            rise = 1.0
        base_load = quantile(horizon_loads, 0.5)
        if reading.ratio is not None and reading.ratio > spec.target_ratio:
            new_state.queued_at = now
        # the automatic burst floor stands from when bursts over the cap queued while such bursts are remembered
        if not automatic or not _tall_bursts(new_state, spec.learned_headroom_max):
            new_state.floor_since = None
        elif new_state.floor_since is None and _queued_recently(new_state, now):
            new_state.floor_since = now
        if spec.burst_memory_seconds or new_state.floor_since is not None:
            floor_load = max(x for _, x in new_state.peaks)
        sat = saturation(reading, spec)
        ready_n = min(cur, reading.pods_used)
        calm = spec.learned_headroom_max > 1 and headroom <= 1.0 and rise <= 1.0
        # learned: this scaler has watched a whole memory, so the learned headroom stands for the bursts it saw (a new
        # one has not had the time to see them: targetUtilization and the larger spare stand for them)
        learned = 0.0
        if spec.learned_headroom_max > 1 and spec.learned_utilization and now - since >= SURPRISE_MEMORY_S:
            learned = max(1.0, spec.learned_utilization / spec.target_utilization)
        view = EngineView(reading.in_flight, slots_total / reading.pods_used, forecast, horizon, sat, x,
                          ready_n, max(0, cur - ready_n), keep_load, now - new_state.loads[0][0], floor_load,
                          headroom, calm, learned, base_load, rise)
        if sat:
            new_state.saturated_since = state.saturated_since if state.saturated_since is not None else now
        else:
            new_state.saturated_since = None
        idle = reading.in_flight == 0 and reading.ratio == 0.0 and reading.requests == 0
        new_state.idle_since = (state.idle_since if state.idle_since is not None else now) if idle else None

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
                     f" (learned over {SURPRISE_MEMORY_S:.0f}s)")
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
                                       spec.target_utilization * SCALE_DOWN_MARGIN)
            # replicas go not-Ready first (the ReplicaSet's order): a starting replica mostly spent keeps the
            # ready ones too
            spent = min(view.starting, sum(1 for a in starting_ages or () if a >= KEEP_STARTING_SPENT * cold_s))
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
            base += f"; standing floor for the peak load {view.floor_load:.1f} of the last {floor_s:.0f}s"
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
) -> Decision:
    """One autoscaling decision. Pure: returns a new state, never mutates ``state``.

    ``max_batch_size`` (the engine's in-flight batch limit) is the slots per replica
    when the engine does not export them, and enables the occupancy guard of step
    3c for readings without engine gauges. ``cold_start_s``: the forecast horizon
    (see :mod:`.coldstart`). ``waiting_at_zero``: requests waiting in front of a
    backend that has no replica (0 -> 1). ``starting_ages``: seconds since creation of each replica not Ready yet
    (one spent beyond ``KEEP_STARTING_SPENT`` of its cold start is not cancelled); None: unknown.
    ``panic_reading``: the reading over ``panic_window_s`` (spec.autoscaling.panic, ``apply_panic``)."""
    d = _decide_stable(state, reading, spec, current_replicas, now, schedulable_max, gpus_per_replica, max_batch_size,
                       max_occupancy_after_scale_down, cold_start_s, waiting_at_zero, starting_ages)
    return apply_panic(d, state, panic_reading, spec, current_replicas, now, schedulable_max)
