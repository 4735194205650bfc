"""The load forecast (step 2b of decision.py's docstring): robust statistics over the loads of the last cold start,
and the fit of the compute time per request against the batch that turns arrivals into a load at the target batch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .knobs import DecisionKnobs

# Loads kept: at most this many samples (a 15 s sync over a 10 min cold start is 40); every other (time, value)
# series of ScalerState too.
MAX_LOADS = 120
FIT_TAU_S = 1800.0  # the fit forgets over half an hour (model or traffic mix changes)


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


def robust_forecast(loads: list[tuple[float, float]], now: float, horizon_s: float, level_q: float,
                    knobs: DecisionKnobs) -> float:
    """The load expected ``horizon_s`` ahead from the loads of the last ``horizon_s`` (decision.py's docstring, 2b)."""
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
    if slope * (now - recent[0][0]) < knobs.TREND_NOISE_RATIO * spread:
        return level
    return max(level, min(at_now + slope * horizon_s, knobs.TREND_MAX_GROWTH * max(level, at_now)))



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

