"""The learned headroom and the burst memories (step 2b of decision.py's docstring): how far the arrivals rose over
the forecast made one cold start before (surprises) and over the load beside them (rises), remembered per bucket; the
factor they put on the forecast; and the warning for bursts over learnedHeadroomMax."""

from __future__ import annotations

import math

from ..api.v1alpha1 import LEARNED_HEADROOM_MAX_LIMIT, AutoscalingSpec
from .coldstart import rfc3339
from .forecast import MAX_LOADS, quantile, robust_forecast
from .knobs import DEFAULT_KNOBS, DecisionKnobs
from .state import SURPRISE_REPORT_MAX, ScalerState, forget_peaks, remember_peak

# Bursts are over the cap (``bursts_over_cap``) once the largest remembered surprise is this many times
# learnedHeadroomMax: the standing capacity then falls a quarter or more short of what they brought (less than that,
# the square-root spare covers part of it).
BURST_OVER_CAP = 1.25


def learn_surprise(state: ScalerState, now: float, horizon_s: float, rate: float, checkable: bool,
                   replica_rate: float, knobs: DecisionKnobs, forecast: bool = True,
                   ) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[tuple[float, float]]]:
    """(forecasts, rates, surprises) after ``now``'s reading. Forecasts and rates are in arrival-rate units, and the
    forecast checked later is made here from the rates alone: the load in sequences is the rate times the fit's
    compute time at the target batch, and that fit moves (a scale-down changes the batch per pod), which is not
    traffic. (A forecast of loads divided by today's compute time mixed the two: on a smooth ramp, a fit that doubled
    after a scale-down halved the forecast and was remembered as a burst of 2.5 for an hour.) Each forecast one horizon old is
    compared with the rates its horizon saw, measured as the forecast's level is (their LEVEL_QUANTILE: Poisson noise
    alone then gives about 1, a burst over a tenth of the horizon or more counts); the ratio (1 up to SURPRISE_NOISE,
    at most SURPRISE_REPORT_MAX; the decision caps it at learnedHeadroomMax, ``burst_warning`` reports what the
    cap left out) is kept as the peak of its PEAK_BUCKET_S bucket for SURPRISE_MEMORY_S (decision.py's
    docstring, 2b: learned headroom). A shortfall under SURPRISE_MIN_REPLICAS of a replica (``replica_rate``: what one replica
    carries at the target) counts as 1: at a low load a ramp's or noise's relative rise is large and changes no
    replica count, and remembered it would multiply the load once it is high. ``checkable`` False: the
    forecast made now is not checked later (made from less than a horizon of rates); ``forecast`` False
    (spec.autoscaling.forecast off): the rate now stands for the rate ahead, as the load does for the replicas."""
    rates = [(t, r) for t, r in state.rates if now - t <= horizon_s and t < now] + [(now, rate)]
    forecast_rate = 0.0
    if checkable:
        forecast_rate = robust_forecast(rates, now, horizon_s, knobs.LEVEL_QUANTILE, knobs) if forecast else rate
    pending, ratios = [], []
    for t, f in state.forecasts:
        if now - t < horizon_s:
            pending.append((t, f))
            continue
        realized = [r for tr, r in rates if t < tr <= t + horizon_s]
        if realized and f > 0:
            ratios.append(_burst_ratio(quantile(realized, knobs.LEVEL_QUANTILE), f, replica_rate, knobs))
    if ratios:
        surprises = remember_peak(state.surprises, now, max(ratios), knobs.SURPRISE_MEMORY_S)
    else:
        surprises = forget_peaks(state.surprises, now, knobs.SURPRISE_MEMORY_S)
    if forecast_rate > 0:
        pending.append((now, forecast_rate))
    return pending[-MAX_LOADS:], rates[-MAX_LOADS:], surprises


def learn_rise(rises: list[tuple[float, float]], rates: list[tuple[float, float]], now: float, horizon_s: float,
               replica_rate: float, knobs: DecisionKnobs) -> list[tuple[float, float]]:
    """``rises`` after ``now``'s reading: how far the arrival rates of the last horizon (``rates``, in requests/s) rise
    over their base, LEVEL_QUANTILE over median (a burst shorter than half the horizon leaves the median at the rate
    beside it), kept as the peak of its PEAK_BUCKET_S bucket for SURPRISE_MEMORY_S. Rises are gated as surprises are
    (SURPRISE_NOISE, SURPRISE_MIN_REPLICAS of ``replica_rate``) and need half a horizon of rates. Unlike a surprise it
    is measured against the load beside the burst, not a forecast: when bursts come about once a cold start, the
    forecast's level already holds the last one, the surprise reads small, and once a calm cold start brings the
    forecast down to the base the headroom learned on the high forecast leaves too little standing (decision.py's
    docstring, 2b: learned headroom)."""
    if not rates or now - rates[0][0] < horizon_s / 2:
        return forget_peaks(rises, now, knobs.SURPRISE_MEMORY_S)
    values = [r for _, r in rates]
    base = quantile(values, 0.5)
    rise = _burst_ratio(quantile(values, knobs.LEVEL_QUANTILE), base, replica_rate, knobs) if base > 0 else 1.0
    return remember_peak(rises, now, rise, knobs.SURPRISE_MEMORY_S)


def _burst_ratio(seen: float, reference: float, replica_rate: float, knobs: DecisionKnobs) -> float:
    """``seen`` over ``reference`` (> 0) as the burst memories keep it: 1 up to SURPRISE_NOISE or for a difference
    under SURPRISE_MIN_REPLICAS of ``replica_rate``, at most SURPRISE_REPORT_MAX."""
    big = seen / reference > knobs.SURPRISE_NOISE and seen - reference >= knobs.SURPRISE_MIN_REPLICAS * replica_rate
    return min(seen / reference, SURPRISE_REPORT_MAX) if big else 1.0


def burst_headroom(surprises: list[tuple[float, float]], history_s: float, cap: float, knobs: DecisionKnobs) -> float:
    """The factor on the forecast: the largest surprise remembered, at most ``cap`` (learnedHeadroomMax); ``cap``
    while the scaler has seen less than SURPRISE_PRIOR_S of its own load (a new backend assumes the largest bursts);
    never below 1."""
    learned = min(largest_surprise(surprises), cap)
    prior = cap if history_s < knobs.SURPRISE_PRIOR_S else 1.0
    return max(1.0, learned, prior)


def burst_warning(state: ScalerState, spec: AutoscalingSpec, now: float,
                  knobs: DecisionKnobs = DEFAULT_KNOBS) -> str | None:
    """What to tell the admin when bursts over learnedHeadroomMax queued (``bursts_over_cap``): the learned headroom
    is capped below what they brought, so the first of them waited for new replicas. While the automatic burst floor
    stands for them (burstFloor auto), why the fleet stays large and how to turn it off; with burstFloor off and no
    burstMemorySeconds, what to set. None otherwise. The operator never raises learnedHeadroomMax itself. ``knobs``: the
    decisions' (how long bursts are remembered)."""
    cap = spec.learned_headroom_max
    largest = largest_surprise(state.surprises)
    memory_min = knobs.SURPRISE_MEMORY_S / 60
    seen = (f"bursts within the last {memory_min:.0f} min rose to x{largest:.1f} of the forecast one cold "
            f"start ahead, over the x{cap:g} learnedHeadroomMax keeps standing, and requests queued over the target "
            f"ratio. ")
    if state.floor_since is not None:
        return seen + (f"Since {rfc3339(state.floor_since)} the replicas their peak needed stay standing (burst floor) "
                       f"until no such burst is remembered ({memory_min:.0f} min after the last); "
                       f"spec.autoscaling.burstFloor off turns this off, maxReplicas bounds it")
    if spec.burst_floor != "off" or spec.burst_memory_seconds or not bursts_over_cap(state, cap, now, knobs):
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


def tall_bursts(state: ScalerState, cap: float) -> bool:
    """A burst of the last SURPRISE_MEMORY_S rose BURST_OVER_CAP times learnedHeadroomMax (``cap``) or more over its
    forecast (False with the learned headroom off)."""
    return cap > 1 and largest_surprise(state.surprises) >= cap * BURST_OVER_CAP


def queued_recently(state: ScalerState, now: float, knobs: DecisionKnobs) -> bool:
    """Requests queued over the target ratio within the last SURPRISE_MEMORY_S."""
    return state.queued_at is not None and now - state.queued_at <= knobs.SURPRISE_MEMORY_S


def bursts_over_cap(state: ScalerState, cap: float, now: float, knobs: DecisionKnobs) -> bool:
    """Tall bursts (``tall_bursts``) that queued (``queued_recently``): the capped headroom left them short."""
    return tall_bursts(state, cap) and queued_recently(state, now, knobs)


def advised_headroom(largest: float) -> float:
    """The learnedHeadroomMax ``burst_warning`` advises for a burst of ``largest``: rounded up to a tenth."""
    return min(math.ceil(largest * 10 - 1e-9) / 10, LEARNED_HEADROOM_MAX_LIMIT)

