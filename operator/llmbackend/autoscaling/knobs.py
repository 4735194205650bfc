"""The scaling decision's tuned constants, in one object that the decision receives.

benchmarks/autoscale_bench.py tunes them: it builds a :class:`DecisionKnobs` with ``dataclasses.replace`` and passes
it to ``decide()`` (and to ``burst_warning()`` and ``ScalerState.resumed()``, which read some of them too). A module
constant set from outside would reach only the functions of the module it was set on; the decision is several
modules, so a knob is a field here and travels with the call. The operator runs with :data:`DEFAULT_KNOBS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecisionKnobs:
    """The decision's constants, at their shipped defaults.

    They were chosen on the tuning traces of benchmarks/autoscale_bench.py (HEADROOM_BETA with targetUtilization and
    the learned headroom on its main grid, the others by `--sweep`: one at a time around the defaults, one pass; 4
    seeds per tuning trace, the benchmark's tuning rule; docs/benchmarks-autoscaling.md has the figures). The field
    names are the ones the benchmark's grids, the docs and the figures use.
    """

    # The forecast's level: this quantile of the loads of the last cold start (0.9 over 0.75, which missed the tuning
    # day's goal, and 1, 5 % more GPU-hours). KEEP_QUANTILE: a replica goes only when this quantile of the same loads
    # fits the rest (a burst within the last cold start keeps the capacity that served it); the forecast's level bounds
    # the keep load from below, so below LEVEL_QUANTILE it changes nothing (0.75, 0.9 and 1 tied).
    LEVEL_QUANTILE: float = 0.9
    KEEP_QUANTILE: float = 0.75
    # Scale-down keeps the remaining replicas below this share of targetUtilization. Under 1 it is hysteresis: at 1
    # the load that orders a replica and the load that lets it go are the same, and at a constant rate the noise in
    # the forecast's level flaps a replica near every such boundary (up to 17.5 scale events in 90 min, mean of 2 seeds,
    # at rates of 0.5-24 req/s; 0.95: at most 1; test_constant_poisson_rate_scales_at_most_once_per_10_min). 0.95 over
    # 0.9: 2 % fewer GPU-hours on the tuning traces (1 cost 0.9 % less there: the tuning constants' rates sit between
    # boundaries). The loads it looks at are the forecast's level at least, over the whole last cold start.
    SCALE_DOWN_MARGIN: float = 0.95
    # The trend counts once the rise it explains over the span is this many times the median absolute residual (8 over
    # 4 on the main grid of 2026-12-05: 1.6 % fewer tuning GPU-hours; 4 had been picked over 2 and 8 by an earlier sweep).
    TREND_NOISE_RATIO: float = 8.0
    # The trend adds at most this share of the level over the horizon (1.25 over 1.5 and 2: a tie, the cheapest).
    TREND_MAX_GROWTH: float = 1.25
    # Square-root staffing: replicas = R + HEADROOM_BETA x sqrt(R), R = load / (targetUtilization x slots). The spare
    # capacity a reactive scaler needs for what arrives within one cold start is large, relative to the load, for a
    # small backend and small for a large one (Halfin-Whitt); a fixed utilization alone sizes it the same at every
    # scale. 1.5 over 1 (misses the tuning day's goal) and 2 (4 % more GPU-hours), chosen jointly with
    # targetUtilization, learnedHeadroomMax, SURPRISE_PRIOR_S and CALM_BETA on the main grid (seventh session, six tuning
    # traces): one at a time around the previous defaults, a sweep could not see that a higher utilization with more
    # square-root spare costs less at the same SLO.
    HEADROOM_BETA: float = 1.5
    # The square-root spare while the learned headroom is on and remembers no burst (calm traffic: a ramp the forecast
    # follows, Poisson noise); HEADROOM_BETA once a burst is remembered. On the main grid (seventh session): 1.5 over 1
    # and 0.5 at the pick's other knobs (both miss the tuning day's goal: 99.30 % and 99.04 % against 99.90 %). (With
    # five tuning traces, 1 was picked at a utilization of 0.6 and no prior.)
    CALM_BETA: float = 1.5
    # The square-root spare once this scaler has watched a whole SURPRISE_MEMORY_S (spec.autoscaling.learnedUtilization
    # 0.8): the learned headroom then stands for the bursts, and the larger spare stays only for a new scaler. Chosen with
    # learnedUtilization by `--sweep` (the pair, on the tuning traces at the main grid's pick): 0.5 at 0.8 met every goal
    # at 25.2 GPU-hours against 34.6 with it off; 0 missed the goals at every utilization, 1 cost 5-17 % more.
    LEARNED_BETA: float = 0.5
    # A replica still starting is not cancelled once this share of its cold start is spent: what is left of its cold
    # start costs less than ordering it again if the load comes back, and cancelling it throws the spent part away
    # (0.25 over 0.5 and never: 0 % of the pods deleted before Ready on the tuning traces against 8-9 %; 0.5 saved 0.6 %
    # of the GPU-hours, all on the tuning ramp, by cancelling a replica starting on it).
    KEEP_STARTING_SPENT: float = 0.25
    # Learned headroom (spec.autoscaling.learnedHeadroomMax > 1): the forecast is multiplied by the largest surprise (the
    # arrivals seen within a cold start / the forecast made at its start) of the last SURPRISE_MEMORY_S (1800 over 3600
    # and 7200: 1.4 % fewer GPU-hours at the same SLO).
    SURPRISE_MEMORY_S: float = 1800.0
    # A new scaler (a new backend, an operator restart after a gap: MEMORY_GAP_S) assumes learnedHeadroomMax for its
    # first SURPRISE_PRIOR_S. On the main grid (seventh session, six tuning traces) 900 over 0: without the prior no grid
    # point met the goal of the tuning trace with a burst every 4 minutes (at the pick's other knobs 98.43 % against
    # 99.89 %: overlapping bursts within the first minutes, before any was learned). With five tuning traces, 0 was
    # picked: a prior met the same goals for 4-9 % more GPU-hours.
    SURPRISE_PRIOR_S: float = 900.0
    # Surprises up to this ratio are noise and count as 1 (1.05, 1.1 and 1.2 tied).
    SURPRISE_NOISE: float = 1.1
    # ... and so do shortfalls under this share of one replica's load at the target: they change no replica count, and
    # a ramp's relative rise at a low load, remembered, would multiply the load once it is high (0.5 over 0: the tuning
    # ramp cost 29 % more GPU-hours, 6 % over all tuning traces; and 1, which missed the tuning day's goal).
    SURPRISE_MIN_REPLICAS: float = 0.5
    # The automatic burst floor (spec.autoscaling.burstFloor auto): once bursts over the cap queued, the peak load
    # of each PEAK_BUCKET_S of this long stands as a floor while such bursts are remembered (SURPRISE_MEMORY_S, the
    # learned headroom's own memory). It never engages on the tuning traces (their bursts are absorbed: no queue over the
    # target with a burst over 1.25 x the cap), so they cannot choose it; the test traces' spikes (7x) are what it is
    # for (docs/benchmarks-autoscaling.md).
    # Its default is SURPRISE_MEMORY_S's default (the class body's value above); a knobs object with another
    # SURPRISE_MEMORY_S keeps this one unless it is replaced too (as the module constants did in the sweeps).
    AUTO_BURST_FLOOR_S: float = SURPRISE_MEMORY_S
    # The learned headroom also keeps the base load (the median of the last cold start's loads) times the largest rise
    # over the base remembered (``learn_rise``), at most learnedHeadroomMax. Not tuned (its quantile and gates are the
    # surprises'). At the main grid's pick it is what meets the goal of the tuning trace with a burst every 4 minutes
    # (99.99 % against 99.55 % without it) and changes no other tuning trace. False: the surprises alone (what
    # autoscale_bench.py --ablation, --unseen and --held-out compare).
    LEARN_RISE: bool = True


DEFAULT_KNOBS = DecisionKnobs()  # what ships: the operator's every decision
