"""The scaler's memory: ``ScalerState``, what one decision hands the next, and what of it an operator that restarts
resumes from status.autoscaling.memory (``memory()``, ``recent()``, ``resumed()``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..api.v1alpha1 import SCALER_MEMORY_MAX_BURSTS
from .coldstart import epoch_seconds, rfc3339
from .forecast import MAX_LOADS, BatchFit
from .knobs import DEFAULT_KNOBS, DecisionKnobs

# Burst memory (spec.autoscaling.burstMemorySeconds): the peak keep load per bucket of this many seconds.
PEAK_BUCKET_S = 300.0
# Surprises are remembered up to this ratio (a rise from near idle is a large one); the decision caps them at
# learnedHeadroomMax, and ``burst_warning`` tells the admin when that cap left a burst out.
SURPRISE_REPORT_MAX = 100.0
# An operator restart (an upgrade, a leader failover: seconds to a minute or two) resumes what the scaler learned
# (status.autoscaling.memory, ScalerState.resumed) when it was last seen within this long; an older memory missed the
# bursts of the gap, and the scaler starts as a new one. lastSeen is written once a bucket, so a gap of 5-10 min.
MEMORY_GAP_S = 2 * PEAK_BUCKET_S


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
    def resumed(cls, memory: Any, now: float, knobs: DecisionKnobs = DEFAULT_KNOBS) -> ScalerState:
        """A new scaler's state from ``memory`` (what ``memory()`` and ``recent()`` wrote before a restart). A memory
        last seen more than MEMORY_GAP_S ago missed the bursts of the gap, and anything unreadable is no memory: a new
        scaler then.
        The status is writable by whoever may write LLMBackend status: headrooms are kept within [1,
        SURPRISE_REPORT_MAX] (the decision caps them at learnedHeadroomMax) and entries from the future are dropped, so
        a forged memory sizes no differently than traffic could. Bursts older than ``knobs.SURPRISE_MEMORY_S`` are
        forgotten (the decision's knobs: the benchmark's are not the operator's)."""
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
        memory_s = knobs.SURPRISE_MEMORY_S
        return cls(recommendations, since=since, surprises=forget_peaks(sorted(bursts.items()), now, memory_s),
                   loads=_read_pairs(memory.get("loads"), now), fit=_read_fit(memory.get("fit"), now),
                   rates=rates, forecasts=_read_pairs(memory.get("forecasts"), now),
                   peaks=_read_pairs(memory.get("peaks"), now),
                   rises=forget_peaks([(t, min(max(x, 1.0), SURPRISE_REPORT_MAX))
                                       for t, x in _read_pairs(memory.get("rises"), now)], now, memory_s),
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



def _five(values: list[Any]) -> tuple[float, float, float, float, float]:
    a, b, c, d, e = (float(v) for v in values)  # a stored fit: exactly five sums
    return a, b, c, d, e


def forget_peaks(peaks: list[tuple[float, float]], now: float, memory_s: float) -> list[tuple[float, float]]:
    """``peaks`` (bucket start, peak) without the buckets that ended more than ``memory_s`` before ``now``."""
    return [(t, x) for t, x in peaks if now - (t + PEAK_BUCKET_S) < memory_s and t <= now]


def remember_peak(peaks: list[tuple[float, float]], now: float, load: float, memory_s: float) -> list[tuple[float, float]]:
    """``peaks`` (bucket start, peak load) with ``load`` at ``now``, without buckets older than ``memory_s``."""
    bucket = math.floor(now / PEAK_BUCKET_S) * PEAK_BUCKET_S
    kept = forget_peaks(peaks, now, memory_s)
    if kept and kept[-1][0] == bucket:
        kept[-1] = (bucket, max(kept[-1][1], load))
    else:
        kept.append((bucket, load))
    return kept
