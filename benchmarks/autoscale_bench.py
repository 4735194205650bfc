#!/usr/bin/env python3
"""Autoscaling benchmark: the operator's decision code against the autoscalers users would pick instead.

One run prints one table. Everything below is a stated model, not a GPU measurement.

Serving model (per replica = 1 GPU; GPU-hours = replica-hours from pod creation to the end of its drain):
* An engine with SLOTS = 64 sequences batched in flight and a FIFO engine queue in front of them
  (requests wait there when all slots are busy: TensorRT-LLM / vLLM semantics).
* Prefill at PREFILL_TOK_S tokens/s, prioritised over decode (chunked prefill shares each step: time spent on
  prompts is taken from decoding). Decode: one token per running sequence per iteration, an iteration takes
  TPOT_BASE + TPOT_PER_SEQ x batch seconds, so the time per output token grows with the batch.
* Prompts log-normal (median 600, clipped 32..4000 tokens), outputs log-normal (median 200, clipped 16..1500).
* Per request: TTFT = first token - arrival, TPOT = (last token - first token) / (output - 1). The SLO is met when
  TTFT <= 2 s and TPOT <= 50 ms; the score is the share of requests that meet it (requests not finished by the
  end count as missed).
* Gateway: least outstanding requests over Ready, non-draining replicas (per-pod engine queues, no shared queue).
* Cold start: a new replica is Ready U(180, 300) s after creation (image, weights, engine warm-up). A removed
  replica stops admitting, finishes what it holds (the operator's rendered preStop/exit timeout allow it) and
  counts GPU time until then. Which replica goes: the not-ready ones first, then, for the operator, the one
  with the least in-flight work (pod-deletion-cost); for the others the most recently Ready (ReplicaSet order).
* Time advances in DT = 0.5 s steps; arrivals are Poisson at the trace's rate, at continuous times.

Metrics each policy sees (what it would see in a cluster):
* operator: scrapes every replica's engine counters/gauges (llmbackend/api/engine_metrics.py) every 15 s
  (syncPeriodSeconds) and calls llmbackend's own window_ratio() and decide() unmodified, with AutoscalingSpec
  defaults, the cold start learned from its pods (coldstart.estimate), the ages of its starting pods and no
  capacity limit. Knob (tuning grid only): (targetUtilization, learnedHeadroomMax, SURPRISE_PRIOR_S,
  HEADROOM_BETA, CALM_BETA, TREND_NOISE_RATIO); the decision's other constants (DecisionKnobs, autoscaling/knobs.py,
  passed to decide()) come from --sweep; the row "operator (defaults)" is what ships.
* keda-inflight: HPA (default behavior: up max(100 %, 4 pods)/15 s, down 100 %/15 s) on an External
  AverageValue metric = in-flight requests (engine batch + queue) summed over pods, from 15 s scrapes.
  Knob: (in flight per replica, scale-down stabilization window s).
* knative-kpa: Knative's KPA on concurrency per replica (60 s stable / 6 s panic window, panic at 200 %,
  2 s tick, scale-down at most halves). Knob: target concurrency.
* static: a fixed fleet, Ready from the start. Knob: its size.
* oracle: knows the future arrivals: keeps ready, one cold start early, the replicas that Little's law says
  the next 5 min need at its utilization. Knob: utilization.
* hpa-ratio (mode: hpa; --only): the Kubernetes HPA on the engine ratio as `mode: hpa` renders it.

Method (so that it cannot flatter us):
* Traces are seeded generators. Tuning traces (tune-day, tune-steps, tune-spikes, tune-ramp, tune-constant) and
  test traces (business-day, flash-crowd-10x, slow-ramp, spikes, constant) are different shapes and rates; both
  kinds carry random short bursts of +40-100 % for 1-3 min (except the ramps and the constant loads), a ramp and a
  constant load with Poisson noise only; spikes come at random times.
* Every knob of every policy, the operator's constants included, is chosen on the tuning traces only (4 seeds
  each: with 2, one tuning day without a pile-up of bursts decided the operator's pick): the cheapest grid value (GPU-hours summed over the tuning traces) that reaches the goal on every tuning
  trace, else the one with the best worst-trace margin; values within 1 % of the cheapest tie and the fewest pods
  deleted before Ready wins. The peers' goal is 99 % (how their users would tune them); the operator's is the best
  tuned peer's SLO on that trace less 0.1 point (issue 25's bar), with at most 10 % of its pods deleted before
  Ready (when some value does).
  --sweep varies the operator's constants one at a time around the defaults with the same rule. The test traces
  are then run once with those knobs, 5 seeds each.
* maxReplicas 64 (above what any policy reaches, so the table shows overshoot); arrivals start 5 min before
  the scored period; the policies decide from one window later, so no first reading of an empty system.
* Per policy and test trace: SLO (mean and [min-max] over seeds), GPU-hours, that over the oracle's, GPU-hours
  spent on pods deleted before they turned Ready, pods deleted before Ready / created, scale events (and those
  after the first 10 min), peak replicas, p99 TTFT (">60": more than 1 % of requests never got a first token).

    python benchmarks/autoscale_bench.py [--seeds 5] [--tune-seeds 4] [--jobs 2] [--quick] [--tune-only] [--sweep]
    python benchmarks/autoscale_bench.py --restart-at 3600   # an operator restart: new scaler vs memory resumed
    python benchmarks/autoscale_bench.py --flash-bound       # what the flash crowd's bar asks of a first order
    python benchmarks/autoscale_bench.py --warnings 600      # the burst floor's warning; an admin who follows it
    python benchmarks/autoscale_bench.py --unseen            # traces written after the burst floor's design
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "operator"))

from llmbackend.api.v1alpha1 import LEARNED_HEADROOM_MAX_LIMIT, AutoscalingSpec  # noqa: E402
from llmbackend.autoscaling import coldstart  # noqa: E402
from llmbackend.autoscaling.decision import (  # noqa: E402
    DEFAULT_KNOBS,
    DecisionKnobs,
    ScalerState,
    advised_headroom,
    burst_warning,
    decide,
    largest_surprise,
    panic_window_s,
)
from llmbackend.autoscaling.ratio import SIGNAL_ENGINE, TritonCounters, window_ratio  # noqa: E402
from llmbackend.render.hpa import render_hpa  # noqa: E402

# ---- the serving model ----
SLOTS = 64
DT = 0.5
PREFILL_TOK_S = 40_000.0
TPOT_BASE = 0.015
TPOT_PER_SEQ = 0.0004
COLD_START = (180.0, 300.0)
TTFT_SLO = 2.0
TPOT_SLO = 0.050
SCRAPE = 15.0
MAX_REPLICAS = 64  # no policy needs as many: a cap never hides an overshoot (the table shows the peak replicas)
WARM_S = 300.0  # arrivals start this long before t = 0 (not scored, no GPU time before 0), with the fleet the
# initial rate needs; the policies decide from FIRST_DECISION_S on, once one window of traffic is in flight
# (a first reading of an empty system would scale every in-flight policy to 1)
FIRST_DECISION_S = -WARM_S + 60.0
TAIL_S = 300.0  # the run continues this long after the last arrival
CLIENT_TIMEOUT_S = 60.0  # a request still in an engine queue after this long is cancelled by its client (missed)
SLO_GOAL = 0.99
TIE_GPU_H = 0.01  # grid values this close to the cheapest (share of its GPU-hours) tie: see tuned_knob
# The operator's SLO goal on each tuning trace: the best tuned load-following peer's, less this (issue 25's bar,
# applied to the tuning traces); the peers' own goal is SLO_GOAL, the cheapest knob their users would pick.
PEERS = ("keda-inflight", "knative-kpa")
PEER_MARGIN = 0.001
CHURN_GOAL = 0.10  # the operator's pods deleted before Ready / created (issue 25's target), on the tuning traces


# ---- traces: request rate (req/s) as a function of time, built from a seed ----
# Every trace is a generator: the shape's random parts (burst times, heights, spike times) come from the seed, so
# each seed is another day of the same kind. Tuning and test traces are different generators (other shapes,
# other rates) and their random parts come from different streams; nothing of ours or of a peer is chosen on a
# test trace.
def _smooth(t, a, b):
    x = np.clip((t - a) / max(b - a, 1e-9), 0, 1)
    return x * x * (3 - 2 * x)


def _flat(rate):
    """A constant ``rate`` (req/s) as a function of t."""
    return lambda t: np.full_like(np.asarray(t, dtype=float), rate)


def _random_bursts(rng, duration, every_s, base):
    """Short bursts: one every ``every_s`` on average (Poisson), +40-100 % of ``base`` (the rate without bursts)
    for 1-3 min. Returns a function of t adding them."""
    n = rng.poisson(duration / every_s)
    starts = rng.uniform(0, duration, n)
    lengths = rng.uniform(60, 180, n)
    heights = rng.uniform(0.4, 1.0, n)

    def add(t):
        t = np.asarray(t, dtype=float)
        b = base(t)
        extra = sum(h * ((t >= s0) & (t < s0 + d)) for s0, d, h in zip(starts, lengths, heights))
        return b * (1.0 + extra)
    return add


def _random_spikes(rng, duration, n, lo, hi, length):
    """Non-periodic spikes: ``n`` of them at random times (at least one length apart), each ``length`` s (+-30 %)
    at ``hi`` req/s, ``lo`` between."""
    starts = np.sort(rng.uniform(300, duration - length * 1.3, n))
    for i in range(1, n):
        starts[i] = max(starts[i], starts[i - 1] + 2 * length)
    lengths = length * rng.uniform(0.7, 1.3, n)

    def rate(t):
        t = np.asarray(t, dtype=float)
        on = sum((t >= s0) & (t < s0 + d) for s0, d in zip(starts, lengths))
        return np.where(on > 0, hi, lo)
    return rate


def business_day(rng, duration):
    """A working day compressed to 2 h: morning ramp, lunch dip, afternoon peak, evening decline; random bursts."""
    def base(t):
        t = np.asarray(t) * 1.5
        v = 1.5 + 13 * _smooth(t, 600, 3000) - 4 * (_smooth(t, 4200, 4800) - _smooth(t, 5400, 6000)) \
            + 3 * _smooth(t, 6000, 7200) - 13.5 * _smooth(t, 8400, 10500)
        return np.maximum(v, 1.0)
    return _random_bursts(rng, duration, 600, base)


def flash_crowd(rng, duration):
    """10x within a minute for 20 min (at a random time), then back (1 h); random short bursts before and after."""
    start = rng.uniform(600, 1200)
    return _random_bursts(rng, duration, 900, lambda t: 2 + 18 * (_smooth(t, start, start + 60)
                                                                   - _smooth(t, start + 1200, start + 1260)))


def slow_ramp(rng, duration):
    """1.5 -> 20 req/s over 75 min, held 15 min (no bursts: the ramp alone)."""
    return lambda t: 1.5 + 18.5 * np.clip(np.asarray(t) / 4500, 0, 1)


def spikes(rng, duration):
    """Non-periodic spikes: 5 of 3-6 min at 14 req/s over 1.5 h, 2 req/s between."""
    return _random_spikes(rng, duration, 5, 2.0, 14.0, 270)


def constant(rng, duration):
    """A constant 6 req/s (Poisson noise only): what must not move a scaler."""
    return _flat(6.0)


def tune_day(rng, duration):
    """Tuning only: another day shape (1.5 h); random bursts."""
    def base(t):
        t = np.asarray(t) * 4 / 3
        return np.maximum(2 + 10 * _smooth(t, 300, 2400) - 10 * _smooth(t, 5400, 7000), 1.0)
    return _random_bursts(rng, duration, 500, base)


def tune_steps(rng, duration):
    """Tuning only: two rises of 2.5x and 3x within 5 and 10 min, and back (1 h); random bursts; spikes."""
    steps = lambda t: 3 + 4.5 * (_smooth(t, 600, 900) - _smooth(t, 1500, 1700)) \
        + 6 * (_smooth(t, 2100, 2700) - _smooth(t, 3000, 3300))  # noqa: E731
    return _random_bursts(rng, duration, 600, steps)


def tune_spikes(rng, duration):
    """Tuning only: 3 spikes of ~4 min at 10 req/s over 1 h, 3 req/s between."""
    return _random_spikes(rng, duration, 3, 3.0, 10.0, 240)


def tune_ramp(rng, duration):
    """Tuning only: 2 -> 14 req/s over 45 min, held 15 min (no bursts)."""
    return lambda t: 2 + 12 * np.clip(np.asarray(t) / 2700, 0, 1)


def tune_constant(rng, duration):
    """Tuning only: a constant 10 req/s (Poisson noise only)."""
    return _flat(10.0)


def tune_bursty(rng, duration):
    """Tuning only (seventh session): 10 req/s with a random short burst every 4 min on average (1 h), so that bursts
    overlap at times."""
    return _random_bursts(rng, duration, 240, _flat(10.0))


TEST_TRACES = [("business-day", 7200, business_day), ("flash-crowd-10x", 3600, flash_crowd),
               ("slow-ramp", 5400, slow_ramp), ("spikes", 5400, spikes), ("constant", 3600, constant)]
TUNE_TRACES = [("tune-day", 5400, tune_day), ("tune-steps", 3600, tune_steps), ("tune-spikes", 3600, tune_spikes),
               ("tune-ramp", 3600, tune_ramp), ("tune-constant", 2700, tune_constant), ("tune-bursty", 3600, tune_bursty)]


def spikes_5x(rng, duration):
    """--unseen only: 5 spikes of ~3 min at 10 req/s over 1.5 h, 2 req/s between."""
    return _random_spikes(rng, duration, 5, 2.0, 10.0, 180)


def spikes_10x_short(rng, duration):
    """--unseen only: 8 spikes of ~2 min at 20 req/s over 1.5 h, 2 req/s between."""
    return _random_spikes(rng, duration, 8, 2.0, 20.0, 120)


def two_crowds(rng, duration):
    """--unseen only: two 6x crowds of 10 min, 30-40 min apart (1.5 h); random short bursts."""
    first = rng.uniform(600, 900)
    second = first + rng.uniform(1800, 2400)
    return _random_bursts(rng, duration, 900, lambda t: 2 + sum(
        10 * (_smooth(t, s, s + 60) - _smooth(t, s + 600, s + 660)) for s in (first, second)))


def steady_bursty(rng, duration):
    """--unseen only: 8 req/s with a random short burst every 5 min on average (1 h)."""
    return _random_bursts(rng, duration, 300, _flat(8.0))


def bursty_low(rng, duration):
    """--unseen only: 3 req/s with a random short burst every 4 min on average (1 h): bursts on 1-2 replicas."""
    return _random_bursts(rng, duration, 240, _flat(3.0))


def bursty_ramp(rng, duration):
    """--unseen only: 3 -> 16 req/s over 1 h, held 30 min, a random short burst every 5 min on average."""
    return _random_bursts(rng, duration, 300, lambda t: 3 + 13 * np.clip(np.asarray(t, dtype=float) / 3600, 0, 1))


def bursty_wave(rng, duration):
    """--unseen only: 6 +- 4 req/s in 40-minute waves, a random short burst every 6 min on average (1.5 h)."""
    return _random_bursts(rng, duration, 360, lambda t: 6 + 4 * np.sin(2 * np.pi * np.asarray(t, dtype=float) / 2400))


def bursty_steps(rng, duration):
    """--unseen only (held out in the seventh session): 4 req/s, 10 from 20 min, 6 from 50 min (1.5 h), a random
    short burst every 5 min on average."""
    return _random_bursts(rng, duration, 300, lambda t: 4 + 6 * _smooth(t, 1200, 1320) - 4 * _smooth(t, 3000, 3120))


def bursty_high(rng, duration):
    """--unseen only (held out in the seventh session): 14 req/s with a random short burst every 7 min on average
    (1 h)."""
    return _random_bursts(rng, duration, 420, _flat(14.0))


# Traces written after the burst floor was designed (sixth session), to see it on traffic nobody tuned on or looked
# at before: never used to choose anything (--unseen). The rise over the base (decision.learn_rise, seventh session)
# was found by looking at steady-bursty, so for it that trace is no longer unseen; the next three were written after
# its design and before it was run on them; the last two were held out in the seventh session and run once there.
UNSEEN_TRACES = [("spikes-5x", 5400, spikes_5x), ("spikes-10x-short", 5400, spikes_10x_short),
                 ("two-crowds", 5400, two_crowds), ("steady-bursty", 3600, steady_bursty),
                 ("bursty-low", 3600, bursty_low), ("bursty-ramp", 5400, bursty_ramp),
                 ("bursty-wave", 5400, bursty_wave), ("bursty-steps", 5400, bursty_steps),
                 ("bursty-high", 3600, bursty_high)]


def morning_bursts(rng, duration):
    """--held-out only: 1 -> 10 req/s between 5 and 35 min, held to 1 h, a random short burst every 7 min on
    average (bursts on a young ramp, from a small fleet)."""
    return _random_bursts(rng, duration, 420, lambda t: 1 + 9 * _smooth(t, 300, 2100))


def crowded_bursts(rng, duration):
    """--held-out only: 6 req/s with a random short burst every 3 min on average (1 h): bursts overlap more often
    than on tune-bursty."""
    return _random_bursts(rng, duration, 180, _flat(6.0))


# Written (eighth session) before its grid's pick was known and before they were run: run only by --held-out, once
# a change is settled.
HELD_OUT_TRACES = [("morning-bursts", 3600, morning_bursts), ("crowded-bursts", 3600, crowded_bursts)]


# Issue 48's "Why": an independent simulator found the flash crowd dominated and 17-38 % of the pods deleted before
# Ready on its ramps, where this one finds neither. Variants of the test traces on the assumptions that may hide that
# (cold-start spread, crowd length and decay, ramp slope), written before any of them was run (--variants).
def flash_crowd_short(rng, duration):
    """10x within a minute for 5 min (at a random time), then back; random short bursts."""
    start = rng.uniform(600, 1200)
    return _random_bursts(rng, duration, 900, lambda t: 2 + 18 * (_smooth(t, start, start + 60)
                                                                   - _smooth(t, start + 300, start + 360)))


def flash_crowd_decay(rng, duration):
    """10x within a minute, then decaying back to the base with a 10 min half-life; random short bursts."""
    start = rng.uniform(600, 1200)

    def base(t):
        t = np.asarray(t, dtype=float)
        decay = np.where(t > start + 60, 0.5 ** ((t - start - 60) / 600), 1.0)
        return 2 + 18 * _smooth(t, start, start + 60) * decay
    return _random_bursts(rng, duration, 900, base)


def steep_ramp(rng, duration):
    """1.5 -> 20 req/s over 20 min, held 25 min, back over 15 min: the slow ramp 3.75x steeper, and down."""
    return lambda t: 1.5 + 18.5 * (np.clip(np.asarray(t) / 1200, 0, 1) - np.clip((np.asarray(t) - 2700) / 900, 0, 1))


def ramp_saw(rng, duration):
    """Up 2 -> 14 req/s over 15 min, down to 6 over 10 min, up to 16 over 15 min, held: ramps that turn."""
    return lambda t: np.interp(np.asarray(t, dtype=float), [0, 900, 1500, 2400, 3600], [2, 14, 6, 16, 16])


VARIANT_TRACES = [("flash-crowd-5min", 3600, flash_crowd_short), ("flash-crowd-decay", 3600, flash_crowd_decay),
                  ("flash-crowd-wide-cold-start", 3600, flash_crowd), ("steep-ramp", 3600, steep_ramp),
                  ("ramp-saw", 3600, ramp_saw), ("slow-ramp-wide-cold-start", 5400, slow_ramp)]
# Cold starts of these traces (the others: COLD_START): a wider spread, as pulling images and weights on busy nodes
# gives; the operator learns it from its pods as before.
COLD_START_OF = {"flash-crowd-wide-cold-start": (60.0, 600.0), "slow-ramp-wide-cold-start": (60.0, 600.0)}


# --shared-pool: two backends on one fixed pool of GPUs (autoscaling/pool.py). Tuned twice on its own results, so
# that the pool is short at the high-priority backend's peak (said, not hidden): the first version (14 req/s on 10
# GPUs, a batch of 8 req/s) and the second (20 req/s on 12 GPUs) left the high-priority backend the GPUs it needed
# without the feature (the same SLO with and without); now the batch job, at 12 req/s, holds most of the pool.
def pool_interactive(rng, duration):
    """The high-priority backend: a chat service's hour, 2 req/s, up to 20 req/s for 20 min, back; random bursts."""
    return _random_bursts(rng, duration, 900, lambda t: 2 + 18 * (_smooth(t, 600, 1200) - _smooth(t, 2400, 3000)))


def pool_batch(rng, duration):
    """The low-priority backend: an offline batch job at a steady 12 req/s, as much as it gets."""
    return _flat(12.0)


POOL_TRACES = [("pool-interactive", 3600, pool_interactive), ("pool-batch", 3600, pool_batch)]
ALL_TRACES = {n: (d, f) for n, d, f in
              TEST_TRACES + TUNE_TRACES + UNSEEN_TRACES + HELD_OUT_TRACES + VARIANT_TRACES + POOL_TRACES}


def rate_of(trace: str, seed: int):
    duration, build = ALL_TRACES[trace]
    return build(np.random.default_rng([seed, 7, sum(map(ord, trace))]), duration)


def arrivals(trace: str, seed: int):
    duration, _ = ALL_TRACES[trace]
    rate = rate_of(trace, seed)
    rng = np.random.default_rng([seed, sum(map(ord, trace))])
    edges = np.arange(-WARM_S, duration, DT)
    counts = rng.poisson(np.asarray(rate(np.maximum(edges + DT / 2, 0.0)), dtype=float) * DT)
    t = np.repeat(edges, counts) + rng.uniform(0, DT, counts.sum())
    n = len(t)
    prompt = np.clip(rng.lognormal(math.log(600), 0.8, n), 32, 4000)
    out = np.clip(np.round(rng.lognormal(math.log(200), 0.7, n)), 16, 1500)
    return t, prompt, out, rng


# ---- policies ----
class Policy:
    period = SCRAPE

    def __init__(self, knob):
        self.knob = knob

    def desired(self, sim: Sim, now: float) -> int:
        raise NotImplementedError


class Operator(Policy):
    """llmbackend's decide() on llmbackend's window_ratio() of the engine counters (AutoscalingSpec defaults)."""

    def __init__(self, knob=None):
        super().__init__(knob)
        kw: dict = dict(enabled=True, min_replicas=1, max_replicas=MAX_REPLICAS)
        # knob: values of OPERATOR_KNOBS (spec fields and DecisionKnobs fields) in that order, or
        # ((name, value), ...) for a sweep (--sweep); None: the shipped defaults
        knobs: dict = {}
        pairs = () if knob is None else (knob if knob and isinstance(knob[0], tuple) else zip(OPERATOR_KNOBS, knob))
        for name, value in pairs:
            if name in OPERATOR_DEFAULTS:
                knobs[name] = value
            elif name == "panic":  # panic mode on at this thresholdPercentage (--judge)
                kw["panic"] = {"enabled": True, "thresholdPercentage": value}
            elif name == "floor":  # a schedule floor (start s, end s, replicas) of the simulated day (--judge)
                start_s, end_s, floor_n = value
                kw["schedule"] = [{"start": _cron_at(start_s), "end": _cron_at(end_s), "desiredReplicas": floor_n}]
            else:
                kw[name] = value  # a spec field: AutoscalingSpec forbids any other name
        self.spec = AutoscalingSpec(**kw)
        # the decision's constants travel with each call (decide, burst_warning, ScalerState.resumed)
        self.knobs = dataclasses.replace(DEFAULT_KNOBS, **knobs)
        self.period = float(self.spec.sync_period_seconds)
        self.state = ScalerState()
        self.samples: dict[int, list] = {}
        self.cold_starts: list[float] = []
        self.warning: str | None = None  # status.autoscaling.burstWarning after the last decision
        self.results = {"warned": 0.0, "warned_at": math.nan}  # (scored period) added to the run's figures
        self.panicking = 0  # decisions in panic mode (scored period)

    def desired(self, sim, now):
        for p in sim.ready_pods(now):
            self.samples.setdefault(p, []).append((now, sim.counters(p)))
            if len(self.samples[p]) > 12:
                del self.samples[p][0]
        live = set(sim.live_pods())
        for p in list(self.samples):
            if p not in live:
                del self.samples[p]
        reading = window_ratio(self.samples, now, self.spec.window_seconds, SIGNAL_ENGINE)
        panic_reading = None
        if self.spec.panic is not None and self.spec.panic.enabled:  # the same scrapes over the panic window
            panic_reading = window_ratio(self.samples, now, panic_window_s(self.spec), SIGNAL_ENGINE)
        cold, _ = coldstart.estimate(sim.observed_cold_starts(), self.spec.cold_start_seconds)
        d = decide(self.state, reading, self.spec, sim.replicas(), now, max_batch_size=SLOTS, cold_start_s=cold,
                   starting_ages=sim.starting_ages(now), panic_reading=panic_reading, knobs=self.knobs)
        self.panicking += d.panic is not None and now >= 0
        self.state = d.state
        self.warning = burst_warning(d.state, self.spec, now, self.knobs)
        if self.warning and now >= 0 and not self.results["warned"]:
            self.results = {"warned": 1.0, "warned_at": now}
        return d.desired_replicas


FLOOR_OFF = (("burst_floor", "off"),)  # the automatic burst floor off (the knob of --warnings' rows)
RISE_OFF = (("LEARN_RISE", False),)  # the learned headroom from the surprises alone (no rise over the base)


class AdminFollowsWarning(Operator):
    """The shipped operator with the burst floor off (burstFloor off), and an admin who does what its
    BurstsOverHeadroom warning says ``knob`` seconds after it appears (--warnings): learnedHeadroomMax to the advised
    value, or burstMemorySeconds SURPRISE_MEMORY_S for bursts over learnedHeadroomMax's limit. The spec then stays so
    (an admin does not lower it when the bursts stop)."""

    def __init__(self, knob):
        super().__init__(FLOOR_OFF)
        self.reaction_s, self.seen_at = knob, None

    def desired(self, sim, now):
        want = super().desired(sim, now)
        self.seen_at = (self.seen_at if self.seen_at is not None else now) if self.warning else None
        if self.seen_at is not None and now >= self.seen_at + self.reaction_s:
            largest = largest_surprise(self.state.surprises)
            change = ({"learned_headroom_max": advised_headroom(largest)} if largest <= LEARNED_HEADROOM_MAX_LIMIT
                      else {"burst_memory_seconds": int(self.knobs.SURPRISE_MEMORY_S)})
            self.spec = self.spec.model_copy(update=change)
            self.seen_at = None
        return want


class RestartedOperator(Operator):
    """The operator (shipped defaults) whose process restarts at ``knob[0]`` seconds (--restart-at): the new process
    has scraped nothing yet and starts a new scaler (``knob[1]`` 0: what happened before status.autoscaling.memory)
    or resumes the memory the status holds (1: ScalerState.memory and recent as of the last decision)."""

    def __init__(self, knob):
        super().__init__(None)
        self.restart_s, self.resume = knob

    def desired(self, sim, now):
        if self.restart_s is not None and now >= self.restart_s:
            self.restart_s = None
            memory = {**(self.state.memory(now) or {}), **self.state.recent()}
            self.state = ScalerState.resumed(memory, now, self.knobs) if self.resume else ScalerState()
            self.samples = {}
        return super().desired(sim, now)


class OrderAtOnset(Operator):
    """--flash-bound: the shipped operator, and besides it ``knob[1]`` replicas ordered ``knob[0]`` seconds after the
    flash crowd's onset and kept until all of them are Ready (the longest cold start). The onset is known, as no
    scaler knows it: the first second the rate passes ONSET_FACTOR x the trace's lowest rate, more than one random
    burst brings. What a scaler that first acts that late can reach at best, for each size of its first order."""

    def __init__(self, knob):
        super().__init__(None)
        self.delay_s, self.order = knob
        self.onset: float | None = None

    def desired(self, sim, now):
        want = super().desired(sim, now)
        if self.onset is None:
            self.onset = crowd_onset(sim.trace, sim.seed)
        start = self.onset + self.delay_s
        return max(want, self.order) if start <= now < start + COLD_START[1] else want


# The knobs the tuning picked for the other policies (the main run's output; the same in the seventh and eighth
# sessions' runs): --ablation, --unseen, --held-out and --flash-bound compare with them without tuning again.
TUNED = {"keda-inflight": (12, 300), "knative-kpa": 6, "static": 8, "oracle": 0.8}
FLASH_BOUND_DELAYS_S = (0.0, 15.0, 30.0)  # --flash-bound: when the first order is placed after the onset
FLASH_BOUND_ORDERS = (13, 20, 26, 32, 40, 48)  # ... and its sizes (the shipped operator's own peak is about 15)
ONSET_FACTOR = 2.5  # a random burst adds at most 100 % (_random_bursts): 2.5x the lowest rate is the crowd


def crowd_onset(trace: str, seed: int) -> float:
    """The first second the trace's rate passes ONSET_FACTOR x its lowest rate (its base: bursts only add)."""
    t = np.arange(0.0, ALL_TRACES[trace][0])
    rate = np.asarray(rate_of(trace, seed)(t), dtype=float)
    return float(t[np.argmax(rate > ONSET_FACTOR * rate.min())])


# The decision's constants a sweep may set (every field of DecisionKnobs) and their shipped values; every run starts
# from these and replaces what its knob names (Operator builds its DecisionKnobs with dataclasses.replace).
OPERATOR_DEFAULTS = {f.name: getattr(DEFAULT_KNOBS, f.name) for f in dataclasses.fields(DecisionKnobs)}
# The operator's knobs on the main tuning grid (POLICIES): spec fields (snake_case) or OPERATOR_DEFAULTS names.
OPERATOR_KNOBS = ("target_utilization", "learned_headroom_max", "SURPRISE_PRIOR_S", "HEADROOM_BETA", "CALM_BETA",
                  "TREND_NOISE_RATIO")
# --sweep: one constant at a time around the defaults (coordinate-wise), on the tuning traces only.
SWEEP = {"target_utilization": (0.6, 0.7, 0.8, 0.9), "learned_headroom_max": (1.0, 1.5, 2.0, 3.0),
         "SURPRISE_PRIOR_S": (0.0, 900.0, 1800.0), "LEVEL_QUANTILE": (0.75, 0.9, 1.0),
         "KEEP_QUANTILE": (0.75, 0.9, 1.0), "SCALE_DOWN_MARGIN": (0.9, 0.95, 1.0),
         "TREND_NOISE_RATIO": (2.0, 4.0, 8.0, 16.0),
         "TREND_MAX_GROWTH": (1.25, 1.5, 2.0), "HEADROOM_BETA": (1.0, 1.5, 2.0), "KEEP_STARTING_SPENT": (0.25, 0.5, 10.0),
         "burst_memory_seconds": (0, 1800, 3600), "SURPRISE_MEMORY_S": (1800.0, 3600.0, 7200.0),
         "SURPRISE_NOISE": (1.05, 1.1, 1.2), "SURPRISE_MIN_REPLICAS": (0.0, 0.5, 1.0),
         # the utilization and spare once the headroom is learned, together (they trade off, as the main grid's
         # pair does); 0: off
         "learned_utilization,LEARNED_BETA": tuple((u, b) for u in (0.0, 0.7, 0.8, 0.9) for b in (0.0, 0.5, 1.0)
                                                 if u or b == 0.5)}


def _sweep_value(name: str, value) -> tuple:
    """(name, value) pairs of one SWEEP entry's value: a comma-separated name sets its values together."""
    return tuple(zip(name.split(","), value)) if "," in name else ((name, value),)


def _hpa_step(current, desired, behavior, history, now):
    """The HPA's stabilization + policies (one Pods/Percent policy set, selectPolicy Max)."""
    history.append((now, desired))
    up, down = behavior["scaleUp"], behavior["scaleDown"]
    while history and now - history[0][0] > max(up["stabilizationWindowSeconds"], down["stabilizationWindowSeconds"]):
        history.pop(0)
    if desired > current:
        desired = min(r for t, r in history if now - t <= up["stabilizationWindowSeconds"])
        desired = max(desired, current)
        limit = max(current + (p["value"] if p["type"] == "Pods" else math.ceil(current * p["value"] / 100))
                    for p in up["policies"])
        return min(desired, limit)
    if desired < current:
        desired = max(r for t, r in history if now - t <= down["stabilizationWindowSeconds"])
        desired = min(desired, current)
        limit = min(current - (p["value"] if p["type"] == "Pods" else math.floor(current * p["value"] / 100))
                    for p in down["policies"])
        return max(desired, limit)
    return current


DEFAULT_HPA_BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Percent", "value": 100}, {"type": "Pods", "value": 4}]},
    "scaleDown": {"stabilizationWindowSeconds": 300, "policies": [{"type": "Percent", "value": 100}]},
}


class HpaRatio(Policy):
    """The HPA that `mode: hpa` renders, on the recorded per-pod engine ratio."""

    LAG = 15.0

    def __init__(self, knob):
        super().__init__(knob)
        spec = AutoscalingSpec(enabled=True, mode="hpa", min_replicas=1, max_replicas=MAX_REPLICAS, target_ratio=knob)
        hpa = render_hpa("b", "ns", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b"}, spec)["spec"]
        self.behavior = hpa["behavior"]
        self.target = knob
        self.window = spec.window_seconds
        self.samples: dict[int, list] = {}
        self.history: list = []

    def desired(self, sim, now):
        for p in sim.ready_pods(now):
            self.samples.setdefault(p, []).append((now, sim.counters(p)))
            if len(self.samples[p]) > 10:
                del self.samples[p][0]
        t_eval = now - self.LAG
        ratios = []
        for p in sim.live_pods():
            pts = [(t, c) for t, c in self.samples.get(p, []) if t_eval - self.window <= t <= t_eval]
            if len(pts) >= 2:
                dq = pts[-1][1].queue_us - pts[0][1].queue_us
                dc = pts[-1][1].compute_infer_us - pts[0][1].compute_infer_us
                ratios.append(dq / max(dc, 1.0 * (pts[-1][0] - pts[0][0])))
        cur = sim.replicas()
        if not ratios:
            return cur
        missing = cur - len(ratios)
        usage = sum(ratios) / len(ratios) / self.target
        if abs(usage - 1) <= 0.1:
            return _hpa_step(cur, cur, self.behavior, self.history, now)
        if usage > 1:   # missing pods count as 0
            new_usage = sum(ratios) / self.target / cur
        else:           # missing pods count as at target
            new_usage = (sum(ratios) / self.target + missing) / cur
        if abs(new_usage - 1) <= 0.1 or (usage > 1) != (new_usage > 1):
            rec = cur
        else:
            rec = math.ceil(new_usage * cur - 1e-9)
        rec = max(1, min(MAX_REPLICAS, rec))
        return _hpa_step(cur, rec, self.behavior, self.history, now)


class KedaInflight(Policy):
    """HPA on an External AverageValue metric: in-flight requests over all pods. Knob: (in flight per replica,
    scale-down stabilization window s); the rest is the HPA's default behavior."""

    def __init__(self, knob):
        super().__init__(knob)
        self.target, window = knob
        self.behavior = {"scaleUp": DEFAULT_HPA_BEHAVIOR["scaleUp"],
                         "scaleDown": {**DEFAULT_HPA_BEHAVIOR["scaleDown"], "stabilizationWindowSeconds": window}}
        self.history: list = []

    def desired(self, sim, now):
        total = sim.total_in_flight()
        cur = sim.replicas()
        usage = total / (self.target * max(cur, 1))
        rec = cur if abs(usage - 1) <= 0.1 else math.ceil(total / self.target - 1e-9)
        rec = max(1, min(MAX_REPLICAS, rec))
        return _hpa_step(cur, rec, self.behavior, self.history, now)


class Static(Policy):
    """A fixed fleet, Ready from the start. Knob: its size."""

    def desired(self, sim, now):
        return int(self.knob)


class KnativeKpa(Policy):
    """Knative KPA: concurrency averaged over 60 s (stable) and 6 s (panic), 2 s tick."""

    period = 2.0

    def __init__(self, knob):
        super().__init__(knob)
        self.obs: list[tuple[float, float]] = []
        self.panic_until = -1.0

    def desired(self, sim, now):
        self.obs.append((now, sim.total_in_flight()))
        while self.obs and now - self.obs[0][0] > 60:
            self.obs.pop(0)
        stable = sum(v for _, v in self.obs) / len(self.obs)
        recent = [v for t, v in self.obs if now - t <= 6]
        panic = sum(recent) / len(recent)
        ready = max(1, len(sim.ready_pods(now)))
        cur = sim.replicas()
        d_stable = math.ceil(stable / self.knob - 1e-9)
        d_panic = math.ceil(panic / self.knob - 1e-9)
        if d_panic / ready >= 2.0:
            self.panic_until = now + 60
        if now < self.panic_until:
            want = max(d_panic, cur)
        else:
            want = max(d_stable, math.ceil(ready / 2))  # max scale-down rate 2
        return max(1, min(MAX_REPLICAS, want))


class Oracle(Policy):
    """Foresight: the replicas the next cold start + 5 min need (Little's law on the realized arrivals)."""

    def __init__(self, knob):
        super().__init__(knob)
        self.need = None

    def desired(self, sim, now):
        if self.need is None:
            # in flight at time tau ~ requests that arrived within one mean latency before tau
            lat = float(np.mean(sim.out)) * (TPOT_BASE + TPOT_PER_SEQ * SLOTS * self.knob) + 0.1
            edges = np.arange(-WARM_S, sim.end + 600, SCRAPE)
            arr = np.histogram(sim.t_arr, bins=np.append(edges, edges[-1] + SCRAPE))[0] / SCRAPE
            inflight = arr * lat
            # peak of each 60 s: bursts inside a scrape period are covered
            k = int(60 / SCRAPE)
            inflight = np.array([inflight[i:i + k].max() for i in range(len(inflight))])
            self.need = np.ceil(inflight / (self.knob * SLOTS) - 1e-9)
        i0 = int((now + WARM_S) // SCRAPE)
        ahead = int((COLD_START[1] + 300) / SCRAPE)
        return max(1, min(MAX_REPLICAS, int(self.need[i0:i0 + ahead].max())))


# Grids: every knob of every policy, ours included, is chosen on the tuning traces only (see tuned_knob).
# hpa-ratio (mode: hpa) is left out of the default run for time (--only hpa-ratio runs it).
POLICIES = {
    # targetUtilization and the square-root headroom together (they trade off: a one-at-a-time sweep around the
    # defaults cannot see a pair that is cheaper); the prior and the calm spare only matter with the learned
    # headroom on; the trend's noise bar beside them (the 2026-12-04 sweep moved it, after the grid). Left the grid on
    # 2026-12-05, none of their points having met the goals in the grid before: targetUtilization 0.4,
    # learnedHeadroomMax 1.5, CALM_BETA 0.5 (and, on 2026-12-04, HEADROOM_BETA 0.5 and targetUtilization 0.3)
    "operator": (Operator, [(u, b, p, beta, calm, trend) for trend in (4.0, 8.0) for u in (0.5, 0.6, 0.7, 0.8, 0.9)
                            for beta in (1.0, 1.5, 2.0)
                            for b, p in ((1.0, 0.0), (2.0, 0.0), (2.0, 900.0), (3.0, 0.0), (3.0, 900.0))
                            for calm in (sorted({1.0, beta}) if b > 1 else (beta,))]),
    "keda-inflight": (KedaInflight, [(t, w) for t in (2, 3, 4, 6, 8, 12, 16, 24, 30) for w in (60, 300)]),
    "knative-kpa": (KnativeKpa, [2, 3, 4, 6, 8, 12, 20, 30]),
    "static": (Static, [4, 5, 6, 7, 8, 9, 10, 12]),
    "oracle": (Oracle, [0.6, 0.7, 0.8]),
    "hpa-ratio (mode: hpa)": (HpaRatio, [0.01, 0.05, 0.2, 1.0]),
    "operator-restarted": (RestartedOperator, []),  # --restart-at only: no knob to tune
    "operator-admin": (AdminFollowsWarning, []),  # --warnings only: the admin's reaction time, not tuned
    "operator-onset": (OrderAtOnset, []),  # --flash-bound only: a first order placed knowing the onset, not tuned
}
DEFAULT_POLICIES = ["operator", "keda-inflight", "knative-kpa", "static", "oracle"]
QUICK_GRIDS = {"operator": [(0.5, 1.0, 0.0, 1.5, 1.5, 8.0), (0.7, 2.0, 900.0, 1.5, 1.5, 8.0)],
               "keda-inflight": [(4, 300), (10, 60), (20, 300)], "knative-kpa": [4, 10], "static": [4, 8],
               "oracle": [0.7]}


# ---- the simulation ----
class Sim:
    def __init__(self, trace: str, seed: int, initial: int | None = None):
        self.trace, self.seed = trace, seed
        self.end = ALL_TRACES[trace][0]
        self.t_arr, self.prompt, self.out, rng = arrivals(trace, seed)
        n = len(self.t_arr)
        self.rng = rng
        self.pod = np.full(n, -1, dtype=np.int64)
        self.admit = np.full(n, np.nan)
        self.first = np.full(n, np.nan)
        self.done = np.full(n, np.nan)
        self.prefill_left = self.prompt.copy()
        self.decoded = np.zeros(n)
        self.phase = np.zeros(n, dtype=np.int8)  # 0 not arrived/unrouted, 1 engine queue, 2 prefill, 3 decode, 4 done
        self.live = np.zeros(0, dtype=np.int64)
        self.next_arrival = 0
        self.gateway: list[int] = []
        # pods
        self.created: list[float] = []
        self.ready_at: list[float] = []
        self.draining: list[bool] = []
        self.gone: list[float] = []
        self.q_us: list[float] = []
        self.c_us: list[float] = []
        self.fin: list[float] = []
        self.timed: list[float] = []  # finished with engine timing (the request-time histogram's count)
        self.outstanding: list[int] = []
        self.active = np.zeros(0)
        self.waiting = np.zeros(0)
        # start with what the initial rate needs at 60 % of the slots (the same for every policy)
        if initial is None:
            initial = math.ceil(float(rate_of(trace, seed)(0.0)) * 9.0 / (0.6 * SLOTS))
        for _ in range(initial):
            self._add_pod(-WARM_S, ready_at=-WARM_S)
        self.initial = initial

    # pods
    def _add_pod(self, now, ready_at=None):
        self.created.append(now)
        self.ready_at.append(ready_at if ready_at is not None else
                             now + self.rng.uniform(*COLD_START_OF.get(self.trace, COLD_START)))
        self.draining.append(False)
        self.gone.append(math.nan)
        for lst in (self.q_us, self.c_us, self.fin, self.timed):
            lst.append(0.0)
        self.outstanding.append(0)
        self.active = np.append(self.active, 0)
        self.waiting = np.append(self.waiting, 0)

    def live_pods(self):
        return [p for p in range(len(self.created)) if not self.draining[p] and math.isnan(self.gone[p])]

    def ready_pods(self, now):
        return [p for p in self.live_pods() if self.ready_at[p] <= now]

    def replicas(self):
        return len(self.live_pods())

    def starting_ages(self, now):
        return [now - self.created[p] for p in self.live_pods() if self.ready_at[p] > now]

    def observed_cold_starts(self):
        return [self.ready_at[p] - self.created[p] for p in range(self.initial, len(self.created))
                if self.ready_at[p] <= self.now]

    def counters(self, p):
        a, w = float(self.active[p]), float(self.waiting[p])
        # the histogram's count alone (one +Inf bucket): the requests with engine timing, as the serving model
        # observes them
        return TritonCounters(self.q_us[p], self.c_us[p], self.fin[p], pending=a + w, trtllm_waiting=w,
                              kv_cache_fraction=None, active=a, slots=float(SLOTS),
                              request_buckets=((math.inf, self.timed[p]),))

    def total_in_flight(self):
        return float(sum(self.outstanding[p] for p in self.live_pods())) + len(self.gateway)

    def scale_to(self, want, now, by_in_flight: bool):
        live = self.live_pods()
        if want > len(live):
            for _ in range(want - len(live)):
                self._add_pod(now)
        elif want < len(live):
            warming = sorted((p for p in live if self.ready_at[p] > now), key=lambda p: -self.created[p])
            ready = [p for p in live if self.ready_at[p] <= now]
            if by_in_flight:
                ready.sort(key=lambda p: self.outstanding[p])
            else:
                ready.sort(key=lambda p: -self.ready_at[p])
            for p in (warming + ready)[: len(live) - want]:
                self.draining[p] = True
                if self.outstanding[p] == 0:
                    self.gone[p] = now

    # one step
    def step(self, t0):
        t1 = t0 + DT
        self.now = t0
        # 1. arrivals -> least outstanding Ready replica (the gateway holds them when none is routable)
        routable = [p for p in self.live_pods() if self.ready_at[p] <= t0]
        hi = int(np.searchsorted(self.t_arr, t1))
        new = list(range(self.next_arrival, hi))
        self.next_arrival = hi
        if self.gateway:
            new = self.gateway + new
            self.gateway = []
        if routable and new:
            out = self.outstanding
            for i in new:
                p = min(routable, key=out.__getitem__)
                out[p] += 1
                self.pod[i] = p
            idx = np.asarray(new, dtype=np.int64)
            self.phase[idx] = 1
            self.live = np.concatenate([self.live, idx])
        elif new:
            self.gateway = new
        live = self.live
        if len(live) == 0:
            return
        npods = len(self.created)
        ph = self.phase[live]
        pods = self.pod[live]
        # 2. clients give up on requests queued too long; admission into free slots, FIFO per engine
        gave_up = live[(ph == 1) & (self.t_arr[live] < t0 - CLIENT_TIMEOUT_S)]
        if len(gave_up):
            self.phase[gave_up] = 4
            for p, n in zip(*np.unique(self.pod[gave_up], return_counts=True)):
                self.outstanding[p] -= int(n)
                # as the TensorRT-LLM serving model counts a request Triton cancels: finished, without engine
                # timing (render/models/trtllm_llmapi.py, _check_cancelled), so the arrivals include it
                self.fin[p] += int(n)
                if self.draining[p] and self.outstanding[p] == 0:
                    self.gone[p] = t0
            keep = self.phase[live] != 4
            live, ph, pods = live[keep], ph[keep], pods[keep]
        running = (ph == 2) | (ph == 3)
        busy = np.bincount(pods[running], minlength=npods)
        wq = live[ph == 1]
        if len(wq):
            wp = self.pod[wq]
            order = np.argsort(wp, kind="stable")
            wq, wp = wq[order], wp[order]
            rank = np.arange(len(wq)) - np.searchsorted(wp, wp, "left")
            ok = rank < (SLOTS - busy)[wp]
            adm = wq[ok]
            self.phase[adm] = 2
            self.admit[adm] = np.maximum(self.t_arr[adm], t0)
            ph = self.phase[live]
        # 3. prefill (prompts first, FIFO per engine)
        pf = live[ph == 2]
        prefill_used = np.zeros(npods)
        budget = PREFILL_TOK_S * DT
        if len(pf):
            pp = self.pod[pf]
            order = np.argsort(pp, kind="stable")
            pf, pp = pf[order], pp[order]
            start = np.searchsorted(pp, pp, "left")
            vals = self.prefill_left[pf].copy()
            cs = np.cumsum(vals)
            cum = cs - np.concatenate([[0.0], cs])[start]
            done = cum <= budget
            fd = pf[done]
            self.first[fd] = np.maximum(t0 + cum[done] / PREFILL_TOK_S, self.admit[fd] + vals[done] / PREFILL_TOK_S)
            self.prefill_left[fd] = 0
            self.decoded[fd] = 1.0
            self.phase[fd] = 3
            part = ~done & (cum - vals < budget)  # the prompt this step's budget ends in
            self.prefill_left[pf[part]] = cum[part] - budget
            prefill_used = np.minimum(np.bincount(pp, weights=vals, minlength=npods), budget) / PREFILL_TOK_S
        # 4. decode (sequences that had their first token before this step)
        dec = live[(ph == 3)]
        if len(dec):
            dp = self.pod[dec]
            b = np.bincount(dp, minlength=npods)
            it = TPOT_BASE + TPOT_PER_SEQ * b
            avail = DT - prefill_used
            iters = (avail / it)[dp]
            before = self.decoded[dec]
            self.decoded[dec] = before + iters
            fin = self.decoded[dec] >= self.out[dec]
            if fin.any():
                f = dec[fin]
                fp = dp[fin]
                frac = (self.out[f] - before[fin]) / iters[fin]
                self.done[f] = t0 + prefill_used[fp] + frac * avail[fp]
                self.phase[f] = 4
                qa = np.bincount(fp, weights=(self.admit[f] - self.t_arr[f]) * 1e6, minlength=npods)
                ca = np.bincount(fp, weights=(self.done[f] - self.admit[f]) * 1e6, minlength=npods)
                na = np.bincount(fp, minlength=npods)
                for p in np.nonzero(na)[0]:
                    self.q_us[p] += qa[p]
                    self.c_us[p] += ca[p]
                    self.fin[p] += na[p]
                    self.timed[p] += na[p]
                    self.outstanding[p] -= int(na[p])
                    if self.draining[p] and self.outstanding[p] == 0:
                        self.gone[p] = t1
        self.live = live[self.phase[live] != 4]
        ph = self.phase[self.live]
        lp = self.pod[self.live]
        self.active = np.bincount(lp[(ph == 2) | (ph == 3)], minlength=npods).astype(float)
        self.waiting = np.bincount(lp[ph == 1], minlength=npods).astype(float)

    def run(self, policy: Policy) -> dict:
        next_decision = FIRST_DECISION_S
        by_in_flight = isinstance(policy, Operator)
        steps = int((self.end + TAIL_S + WARM_S) / DT)
        events, peak = [], self.replicas()
        series = [(-WARM_S, self.replicas())]  # (time, replicas ordered) at each change: the pictures (--judge)
        for k in range(steps):
            t = k * DT - WARM_S
            self.now = t
            if t >= next_decision:
                next_decision += policy.period
                want = policy.desired(self, t)
                if want != self.replicas():
                    events.append(t)
                    self.scale_to(want, t, by_in_flight)
                    peak = max(peak, want)
                    series.append((t, want))
            self.step(t)
        return self.score(steps * DT - WARM_S, events, peak, series)

    def score(self, end: float, events: list, peak: int, series: list) -> dict:
        def life(p):
            return max(0.0, (self.gone[p] if not math.isnan(self.gone[p]) else end) - max(self.created[p], 0.0))
        pods = range(len(self.created))
        never_ready = [p for p in pods if not math.isnan(self.gone[p]) and self.gone[p] < self.ready_at[p]]
        scored = self.t_arr >= 0
        ttft = np.where(np.isnan(self.first), 1e9, self.first - self.t_arr)[scored]
        ok = ((self.first - self.t_arr) <= TTFT_SLO) & (
            (self.done - self.first) / np.maximum(self.out - 1, 1) <= TPOT_SLO) & ~np.isnan(self.done)
        return {"slo": float(ok[scored].mean()), "gpu_h": sum(life(p) for p in pods) / 3600.0,
                "wasted_gpu_h": sum(life(p) for p in never_ready) / 3600.0,
                "created": len(self.created) - self.initial, "deleted_before_ready": len(never_ready),
                "events": len(events), "events_after_10min": sum(1 for t in events if t >= 600),
                "peak": peak, "p99_ttft": float(np.quantile(ttft, 0.99)) if len(ttft) else 0.0,
                "hours": (self.end + TAIL_S) / 3600.0, "series": series}


def run_one(args):
    policy, knob, trace, seed = args
    cls = POLICIES[policy][0]
    sim = Sim(trace, seed, initial=int(knob) if cls is Static else None)
    chosen = cls(knob)
    out = sim.run(chosen)
    extra = {**getattr(chosen, "results", {}), "panic_s": getattr(chosen, "panicking", 0) * chosen.period}
    return policy, knob, trace, seed, {**out, **extra}


@dataclass
class Cell:
    runs: list

    def mean(self, key):
        return float(np.mean([r[key] for r in self.runs]))

    def spread(self, key, fmt):
        v = [r[key] for r in self.runs]
        return f"{fmt(float(np.mean(v)))} [{fmt(min(v))}-{fmt(max(v))}]"


def simulate(jobs, n_jobs) -> dict[tuple, Cell]:
    results: dict[tuple, Cell] = {}
    with ProcessPoolExecutor(n_jobs) as ex:
        for policy, knob, trace, _seed, out in ex.map(run_one, jobs, chunksize=1):
            results.setdefault((policy, knob, trace), Cell([])).runs.append(out)
    return results


def churn_share(results, name, k) -> float:
    """Pods deleted before Ready / pods created, over the tuning traces."""
    created = sum(results[(name, k, tr)].mean("created") for tr, _, _ in TUNE_TRACES)
    return sum(results[(name, k, tr)].mean("deleted_before_ready") for tr, _, _ in TUNE_TRACES) / max(created, 1.0)


def peer_goals(results, chosen) -> dict[str, float]:
    """Issue 25's bar on each tuning trace: the best SLO of the tuned load-following peers (PEERS) less
    PEER_MARGIN; SLO_GOAL where no peer was run."""
    peers = [(n, k) for n, k in chosen if n in PEERS]
    if not peers:
        return {tr: SLO_GOAL for tr, _, _ in TUNE_TRACES}
    return {tr: max(results[(n, k, tr)].mean("slo") for n, k in peers) - PEER_MARGIN for tr, _, _ in TUNE_TRACES}


def tuning_cost(results, name, k) -> float:
    """GPU-hours over the tuning traces (mean over the tuning seeds)."""
    return sum(results[(name, k, tr)].mean("gpu_h") for tr, _, _ in TUNE_TRACES)


def meets_goals(results, name, k, goal) -> bool:
    """Whether ``k`` reaches ``goal`` (SLO per tuning trace, mean over the tuning seeds) on every tuning trace."""
    return all(results[(name, k, tr)].mean("slo") >= goal[tr] for tr, _, _ in TUNE_TRACES)


def tuning_figures(results, name, k, unit="") -> str:
    """SLO / GPU-hours per tuning trace, as the tuning output prints them."""
    return ", ".join(f"{tr} {100 * results[(name, k, tr)].mean('slo'):.2f} % / "
                     f"{results[(name, k, tr)].mean('gpu_h'):.1f}{unit}" for tr, _, _ in TUNE_TRACES)


def tuned_knob(results, name, grid, goals=None):
    """Cheapest grid value (GPU-hours over the tuning traces) reaching the goal (mean over the tuning seeds) on every
    tuning trace: SLO_GOAL for the peers, for the operator ``goals`` per trace (peer_goals) and CHURN_GOAL (when some
    value meets it); else the one with the best worst-trace margin over its goal."""
    goal = goals or {tr: SLO_GOAL for tr, _, _ in TUNE_TRACES}
    ok = [k for k in grid if meets_goals(results, name, k, goal)]
    if name == "operator" and any(churn_share(results, name, k) <= CHURN_GOAL for k in ok):
        ok = [k for k in ok if churn_share(results, name, k) <= CHURN_GOAL]
    if ok:
        def cost(k):
            return tuning_cost(results, name, k)
        # within TIE_GPU_H of the cheapest is a tie (noise): the fewest pods deleted before Ready, then the cheapest
        cheapest = min(map(cost, ok))
        ties = [k for k in ok if cost(k) <= cheapest * (1 + TIE_GPU_H)]
        return min(ties, key=lambda k: (churn_share(results, name, k), cost(k)))
    return max(grid, key=lambda k: min(results[(name, k, tr)].mean("slo") - goal[tr] for tr, _, _ in TUNE_TRACES))


def _knob(k) -> str:
    if k is None:
        return "defaults"
    if isinstance(k, tuple) and k and isinstance(k[0], tuple):
        return ", ".join(f"{n}={v:g}" if not isinstance(v, tuple) else f"{n}=({', '.join(f'{x:g}' for x in v)})"
                         for n, v in k)
    if isinstance(k, tuple):
        return ", ".join(f"{v:g}" for v in k)
    return f"{k:g}"


def table(results, chosen, oracle_ref) -> str:
    rows = ["| trace | policy (knob, tuned) | SLO met, mean [min-max] | GPU-h, mean [min-max] | x oracle | "
            "GPU-h on pods deleted before Ready | pods deleted before Ready / created | scale events (after 10 min) | "
            "peak replicas | p99 TTFT s |", "|" + "---|" * 10]
    for trace, _, _ in TEST_TRACES:
        ref = results[("oracle", oracle_ref, trace)].mean("gpu_h")
        for name, knob in chosen:
            c = results[(name, knob, trace)]
            created = c.mean("created")
            p99 = c.mean("p99_ttft")
            rows.append(
                f"| {trace} | {name} ({_knob(knob)}) | {c.spread('slo', lambda v: f'{100 * v:.1f} %')} | "
                f"{c.spread('gpu_h', lambda v: f'{v:.1f}')} | {c.mean('gpu_h') / ref:.2f} | "
                f"{c.mean('wasted_gpu_h'):.2f} | {c.mean('deleted_before_ready'):.1f} / {created:.1f} | "
                f"{c.mean('events'):.0f} ({c.mean('events_after_10min'):.0f}) | {c.mean('peak'):.0f} | "
                f"{'>60' if p99 > 60 else f'{p99:.1f}'} |")
    return "\n".join(rows)


def sweep(n_seeds: int, n_jobs: int, base: tuple = ()) -> None:
    """The operator's constants one at a time around the shipped defaults (SWEEP), tuning traces only; prints each
    value's figures and the value the tuning rule picks (tuned_knob) per constant. ``base``: (name, value) pairs set
    before each swept value (e.g. the learned headroom on, to sweep its constants)."""
    started = time.time()
    configs = sorted({base + _sweep_value(n, v) for n, values in SWEEP.items() for v in values})
    jobs = [("operator", c, tr, seed) for c in configs for tr, _, _ in TUNE_TRACES
            for seed in range(101, 101 + n_seeds)]
    jobs += [(n, k, tr, seed) for n in PEERS for k in POLICIES[n][1] for tr, _, _ in TUNE_TRACES
             for seed in range(101, 101 + n_seeds)]  # the peers, tuned, set the operator's goal per trace
    res = simulate(jobs, n_jobs)
    goals = peer_goals(res, [(n, tuned_knob(res, n, POLICIES[n][1])) for n in PEERS])
    print(f"sweep ({len(jobs)} simulations, {n_seeds} seed(s) per tuning trace, {time.time() - started:.0f} s); goal "
          + ", ".join(f"{tr} {100 * g:.2f} %" for tr, g in goals.items()))
    for n, values in SWEEP.items():
        grid = [base + _sweep_value(n, v) for v in values]
        pick = tuned_knob(res, "operator", grid, goals)
        for c in grid:
            print(f"  {_knob(c[len(base):]):32s} " + tuning_figures(res, "operator", c)
                  + f"; deleted before Ready {100 * churn_share(res, 'operator', c):.0f} %"
                  + ("  <- picked" if c == pick else ""))


def _slo_gpu(cell: Cell, digits: int = 2) -> str:
    """"SLO % / GPU-h" (means over the seeds): a cell of the --restart-at, --warnings and --unseen tables."""
    return f"{100 * cell.mean('slo'):.{digits}f} % / {cell.mean('gpu_h'):.{digits}f}"


def restarts(restart_s: float, n_seeds: int, n_jobs: int) -> None:
    """--restart-at: the shipped operator on the test traces without a restart, and restarted at ``restart_s`` with
    a new scaler or resuming status.autoscaling.memory."""
    started = time.time()
    rows = [("no restart", "operator", None), ("restart, new scaler", "operator-restarted", (restart_s, 0)),
            ("restart, memory resumed", "operator-restarted", (restart_s, 1))]
    jobs = [(n, k, tr, seed) for _, n, k in rows for tr, _, _ in TEST_TRACES for seed in range(1, 1 + n_seeds)]
    res = simulate(jobs, n_jobs)
    print(f"an operator restart at {restart_s:g} s on the test traces ({n_seeds} seeds each; SLO met / GPU-h, mean)\n")
    print("| trace | " + " | ".join(label for label, _, _ in rows) + " |\n|---|" + "---|" * len(rows))
    for tr, _, _ in TEST_TRACES:
        print(f"| {tr} | " + " | ".join(_slo_gpu(res[(n, k, tr)]) for _, n, k in rows) + " |")
    print(f"\n{len(jobs)} simulations, {time.time() - started:.0f} s")


def warnings(reaction_s: float, n_seeds: int, tune_seeds: int, n_jobs: int) -> None:
    """--warnings: where the shipped operator's BurstsOverHeadroom warning fires (test and tuning traces; it is when
    the automatic burst floor engages), what the floor does, and what an admin who turned the floor off and follows
    the warning ``reaction_s`` later gets."""
    started = time.time()
    rows = [("operator", None), ("operator", FLOOR_OFF), ("operator-admin", reaction_s)]
    traces = [(tr, range(1, 1 + n_seeds)) for tr, _, _ in TEST_TRACES] + \
             [(tr, range(101, 101 + tune_seeds)) for tr, _, _ in TUNE_TRACES]
    res = simulate([(n, k, tr, seed) for n, k in rows for tr, seeds in traces for seed in seeds], n_jobs)
    print(f"the burst warning of the shipped operator, and an admin who follows it {reaction_s:g} s later "
          f"({n_seeds} seeds per test trace, {tune_seeds} per tuning trace; SLO met / GPU-h, mean)\n")
    print("| trace | runs warned | first warning, min (median) | defaults (burst floor automatic) | burst floor off | "
          "off, and an admin follows the warning |\n|---|---|---|---|---|---|")
    for tr, _ in traces:
        runs = res[("operator", None, tr)].runs
        first = [r["warned_at"] / 60 for r in runs if r["warned"]]
        print(f"| {tr} | {len(first)} / {len(runs)} | {f'{np.median(first):.0f}' if first else '-'} | "
              + " | ".join(_slo_gpu(res[(n, k, tr)]) for n, k in rows) + " |")
    print(f"\n{sum(len(c.runs) for c in res.values())} simulations, {time.time() - started:.0f} s")


def ablation(traces, title: str, n_seeds: int, n_jobs: int) -> None:
    """--unseen and --ablation: the shipped operator, with its untuned mechanisms off one at a time (the burst floor,
    the rise over the base), and the tuned peers (TUNED), on ``traces``."""
    started = time.time()
    rows = [("operator", None), ("operator", FLOOR_OFF), ("operator", RISE_OFF), *((n, TUNED[n]) for n in PEERS)]
    res = simulate([(n, k, tr, seed) for n, k in rows for tr, _, _ in traces for seed in range(1, 1 + n_seeds)],
                   n_jobs)
    print(f"{title} ({n_seeds} seeds each; SLO met / GPU-h, mean)\n")
    print("| trace | operator (defaults) | burst floor off | rise over the base off | "
          + " | ".join(f"{n} ({_knob(TUNED[n])})" for n in PEERS) + " |\n|---|" + "---|" * len(rows))
    for tr, _, _ in traces:
        print(f"| {tr} | " + " | ".join(_slo_gpu(res[(n, k, tr)], 1) for n, k in rows) + " |")
    print(f"\n{sum(len(c.runs) for c in res.values())} simulations, {time.time() - started:.0f} s")


def flash_bound(n_seeds: int, n_jobs: int) -> None:
    """--flash-bound: on the flash crowd (a test trace; nothing is tuned here), the shipped operator and the tuned
    peers, and what a first order of each size placed 0, 15 or 30 s after the crowd's onset reaches (OrderAtOnset):
    how early, and how large, a first order must be to reach the best peer's SLO."""
    started = time.time()
    trace = "flash-crowd-10x"
    refs = [("operator", None), *TUNED.items()]
    bound = [("operator-onset", (d, k)) for d in FLASH_BOUND_DELAYS_S for k in FLASH_BOUND_ORDERS]
    res = simulate([(n, k, trace, seed) for n, k in refs + bound for seed in range(1, 1 + n_seeds)], n_jobs)
    onsets = ", ".join(f"{crowd_onset(trace, seed) / 60:.1f}" for seed in range(1, 1 + n_seeds))
    print(f"{trace}, {n_seeds} seeds (onset, min: {onsets}); SLO met / GPU-h (mean), pods deleted before Ready / "
          f"created, peak replicas\n")
    print("| policy | SLO / GPU-h | deleted before Ready / created | peak |\n|---|---|---|---|")
    for n, k in refs:
        c = res[(n, k, trace)]
        print(f"| {n} ({_knob(k)}) | {_slo_gpu(c, 1)} | {c.mean('deleted_before_ready'):.1f} / "
              f"{c.mean('created'):.1f} | {c.mean('peak'):.0f} |")
    print("\nthe shipped operator, and a first order of N replicas placed knowing the onset (SLO met / GPU-h):\n")
    print("| first order at | " + " | ".join(f"N = {k}" for k in FLASH_BOUND_ORDERS) + " |\n|---|"
          + "---|" * len(FLASH_BOUND_ORDERS))
    for d in FLASH_BOUND_DELAYS_S:
        print(f"| onset + {d:g} s | " + " | ".join(_slo_gpu(res[("operator-onset", (d, k), trace)], 1)
                                                   for k in FLASH_BOUND_ORDERS) + " |")
    print(f"\n{sum(len(c.runs) for c in res.values())} simulations, {time.time() - started:.0f} s")


def variants(n_seeds: int, n_jobs: int) -> None:
    """--variants: the shipped operator (and with panic mode) and the tuned peers on VARIANT_TRACES: SLO / GPU-h,
    pods deleted before Ready / created, and the dominance verdict of --judge."""
    started = time.time()
    rows = [("operator", None), ("operator", PANIC_ON), *((n, TUNED[n]) for n in PEERS)]
    res = simulate([(n, k, tr, seed) for n, k in rows for tr, _, _ in VARIANT_TRACES
                    for seed in range(1, 1 + n_seeds)], n_jobs)
    print(f"variants of the test traces, written before they were run ({n_seeds} seeds each; SLO met / GPU-h; pods "
          f"deleted before Ready / created)\n")
    print("| trace | operator (defaults) | operator, panic | " + " | ".join(f"{n} ({_knob(TUNED[n])})" for n in PEERS)
          + " | verdict (defaults) |\n|---|" + "---|" * (len(rows) + 1))
    for tr, _, _ in VARIANT_TRACES:
        ours = _point(res[("operator", None, tr)])
        by = [n for n in PEERS if dominates(_point(res[(n, TUNED[n], tr)]), ours)]
        print(f"| {tr} | " + " | ".join(f"{_slo_gpu(res[(n, k, tr)])}; {_churn(res[(n, k, tr)])}" for n, k in rows)
              + f" | {'dominated by ' + ', '.join(by) if by else 'not dominated'} |")
    print(f"\n{sum(len(c.runs) for c in res.values())} simulations, {time.time() - started:.0f} s")


def _cron_at(t_s: float) -> str:
    """A daily cron expression (UTC) firing at ``t_s`` of the simulated day: the simulation's clock is epoch seconds,
    so t = 0 is 1970-01-01 00:00 UTC and the operator's schedule floors are evaluated on it as on a real clock."""
    minute = int(t_s // 60) % (24 * 60)
    return f"{minute % 60} {minute // 60} * * *"


# --judge: issue 48's rule. A tuned peer dominates the operator on a test trace when its SLO is more than
# PEER_MARGIN higher and it uses fewer GPU-hours. The equal-cost curve: targetUtilization, the knob a user turns.
CURVE_UTILIZATIONS = (0.5, 0.6, 0.7, 0.8, 0.9)
PANIC_ON = (("panic", 200.0),)  # Knative's defaults (panic-threshold-percentage 200, window 10 %): nothing tuned
PAST_DAYS = range(101, 105)  # the business day's tuning seeds: the past days a user sets a morning floor from
FLOOR_TRACE = "business-day"
PANIC_TRACE = "flash-crowd-10x"
JUDGE_PICTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "img")


def dominates(peer: tuple[float, float], ours: tuple[float, float]) -> bool:
    """(SLO, GPU-h) ``peer`` dominates ``ours``: more than PEER_MARGIN better and cheaper."""
    return peer[0] > ours[0] + PEER_MARGIN and peer[1] < ours[1]


def slo_at_cost(curve: list[tuple[float, float]], gpu_h: float) -> float | None:
    """The best SLO of the operator's curve points ((SLO, GPU-h)) that cost at most ``gpu_h``; None when every point
    costs more. No interpolation: a peer is compared with what the operator reached, not with a line between."""
    within = [slo for slo, g in curve if g <= gpu_h]
    return max(within) if within else None


def above_curve(curve: list[tuple[float, float]], peer: tuple[float, float]) -> bool:
    """A peer point above the operator's curve (a loss at equal cost): its SLO is more than PEER_MARGIN over the best
    the operator reaches at its GPU-hours or less; cheaper than every curve point, over the cheapest one's SLO."""
    at = slo_at_cost(curve, peer[1])
    if at is None:
        at = min(curve, key=lambda p: p[1])[0]
    return peer[0] > at + PEER_MARGIN


def morning_floor(n_jobs: int) -> tuple[tuple, str]:
    """The schedule floor a user sets on the business day from past days (PAST_DAYS: seeds no test run uses): from
    one longest cold start before the morning rise (the median rate of the past days passes a quarter of the way from
    its start to its 90th percentile) until 10 min after it is 90 % up, the replicas the shipped operator ran in those
    10 min (median over the past days of their most)."""
    duration = ALL_TRACES[FLOOR_TRACE][0]
    res = simulate([("operator", None, FLOOR_TRACE, s) for s in PAST_DAYS], n_jobs)
    t = np.arange(0.0, duration, SCRAPE)
    median = np.median([np.asarray(rate_of(FLOOR_TRACE, s)(t), dtype=float) for s in PAST_DAYS], axis=0)
    base, top = float(median[0]), float(np.quantile(median, 0.9))
    rising = float(t[np.argmax(median >= base + 0.25 * (top - base))])
    up = float(t[np.argmax(median >= base + 0.9 * (top - base))])
    start = 60.0 * math.floor((rising - COLD_START[1]) / 60)
    end = 60.0 * math.ceil((up + 600) / 60)
    most = [max([n for ts, n in run["series"] if ts <= up + 600 and ts >= up] +
                [n for ts, n in run["series"] if ts <= up][-1:]) for run in res[("operator", None, FLOOR_TRACE)].runs]
    floor_n = int(np.median(most))
    how = (f"past days (business-day seeds {PAST_DAYS.start}-{PAST_DAYS.stop - 1}): median rate {base:.1f} -> "
           f"{top:.1f} req/s, rising at {rising / 60:.0f} min, 90 % up at {up / 60:.0f} min; the shipped operator ran "
           f"{', '.join(map(str, most))} replicas in the 10 min after -> floor {floor_n} from {start / 60:.0f} to "
           f"{end / 60:.0f} min ({_cron_at(start)!r} to {_cron_at(end)!r} UTC)")
    return (("floor", (start, end, floor_n)),), how


def _point(cell: Cell) -> tuple[float, float]:
    return cell.mean("slo"), cell.mean("gpu_h")


def _churn(cell: Cell) -> str:
    created = cell.mean("created")
    return f"{cell.mean('deleted_before_ready'):.1f} / {created:.1f} ({100 * cell.mean('deleted_before_ready') / max(created, 1e-9):.0f} %)"


def judge(n_seeds: int, n_jobs: int, pictures: bool) -> None:
    """--judge: on each test trace the shipped defaults against each peer's tuned point (TUNED) and whole grid, the
    operator's SLO-vs-GPU-hours curve over CURVE_UTILIZATIONS, panic mode on the flash crowd and a morning floor on
    the business day (beside the defaults, and panic on every trace), the dominance verdict and the churn; pictures
    into docs/img (matplotlib)."""
    started = time.time()
    floor_knob, floor_how = morning_floor(n_jobs)
    curve_knobs = {u: (None if u == AutoscalingSpec().target_utilization else (("target_utilization", u),))
                   for u in CURVE_UTILIZATIONS}
    rows = [("operator", None), ("operator", PANIC_ON)] + [("operator", k) for k in curve_knobs.values() if k]
    rows += [(n, k) for n in PEERS for k in POLICIES[n][1]]
    jobs = [(n, k, tr, seed) for n, k in rows for tr, _, _ in TEST_TRACES for seed in range(1, 1 + n_seeds)]
    jobs += [("operator", floor_knob, FLOOR_TRACE, seed) for seed in range(1, 1 + n_seeds)]
    res = simulate(jobs, n_jobs)
    print(f"issue 48's judging rule on the test traces ({n_seeds} seeds each; SLO met / GPU-h, means); a tuned peer "
          f"dominates when its SLO is more than {100 * PEER_MARGIN:.1f} point higher and it costs fewer GPU-hours\n")
    print(f"morning floor, set from {floor_how}\n")
    print("| trace | operator (defaults) | pods deleted before Ready / created | "
          + " | ".join(f"{n} ({_knob(TUNED[n])})" for n in PEERS) + " | verdict |\n|---|---|---|"
          + "---|" * len(PEERS) + "---|")
    verdicts = {}
    for tr, _, _ in TEST_TRACES:
        ours = _point(res[("operator", None, tr)])
        by = [n for n in PEERS if dominates(_point(res[(n, TUNED[n], tr)]), ours)]
        verdicts[tr] = "dominated by " + ", ".join(by) if by else "not dominated"
        print(f"| {tr} | {_slo_gpu(res[('operator', None, tr)])} | {_churn(res[('operator', None, tr)])} | "
              + " | ".join(_slo_gpu(res[(n, TUNED[n], tr)]) for n in PEERS) + f" | {verdicts[tr]} |")
    print("\nwhere a user switches them on, beside the defaults (SLO met / GPU-h; pods deleted before Ready / created; "
          "minutes in panic, mean)\n")
    print("| trace | defaults | panic mode (Knative's defaults) | morning floor | verdict with it |\n|---|---|---|---|---|")
    for tr, _, _ in TEST_TRACES:
        cells = [res[("operator", None, tr)], res[("operator", PANIC_ON, tr)]]
        floor = res.get(("operator", floor_knob, tr))
        switched = floor if tr == FLOOR_TRACE else res[("operator", PANIC_ON, tr)] if tr == PANIC_TRACE else None
        verdict = "-"
        if switched is not None:
            by = [n for n in PEERS if dominates(_point(res[(n, TUNED[n], tr)]), _point(switched))]
            verdict = ("dominated by " + ", ".join(by) if by else "not dominated") + \
                (" (floor)" if tr == FLOOR_TRACE else " (panic)")
        print(f"| {tr} | {_slo_gpu(cells[0])}; {_churn(cells[0])} | {_slo_gpu(cells[1])}; {_churn(cells[1])}; "
              f"{cells[1].mean('panic_s') / 60:.1f} min | "
              + (f"{_slo_gpu(floor)}; {_churn(floor)}" if floor is not None else "-") + f" | {verdict} |")
    print("\nequal cost: the operator's curve (targetUtilization: SLO met / GPU-h) and each peer's points above it "
          "(a loss: more than 0.1 point over the best the curve reaches at that cost or less)\n")
    print("| trace | " + " | ".join(f"u = {u:g}" for u in CURVE_UTILIZATIONS) + " | "
          + " | ".join(f"{n}: tuned point vs the curve; grid points above it" for n in PEERS) + " |\n|---|"
          + "---|" * (len(CURVE_UTILIZATIONS) + len(PEERS)))
    curves = {}
    for tr, _, _ in TEST_TRACES:
        curve = [_point(res[("operator", curve_knobs[u], tr)]) for u in CURVE_UTILIZATIONS]
        curves[tr] = curve
        cols = []
        for n in PEERS:
            tuned = _point(res[(n, TUNED[n], tr)])
            at = slo_at_cost(curve, tuned[1])
            above = [k for k in POLICIES[n][1] if above_curve(curve, _point(res[(n, k, tr)]))]
            cols.append(f"{'above (loss)' if above_curve(curve, tuned) else 'not above'}: {100 * tuned[0]:.2f} % at "
                        f"{tuned[1]:.2f}, curve {'-' if at is None else f'{100 * at:.2f} %'}; "
                        f"{len(above)} of {len(POLICIES[n][1])} above")
        print(f"| {tr} | " + " | ".join(f"{100 * slo:.2f} % / {g:.2f}" for slo, g in curve) + " | "
              + " | ".join(cols) + " |")
    print(f"\n{len(jobs) + len(PAST_DAYS)} simulations, {time.time() - started:.0f} s on {n_jobs} process(es)")
    if pictures:
        draw(res, curves, curve_knobs, floor_knob, n_seeds)


def draw(res, curves, curve_knobs, floor_knob, n_seeds) -> None:
    """One PNG per test trace into docs/img: replicas ordered and demand over time (seed 1) per policy, and SLO vs
    GPU-hours: the operator's curve, its defaults, panic / floor, each peer's grid and tuned point."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("pictures: matplotlib is not installed (pip install matplotlib); none drawn")
        return
    os.makedirs(JUDGE_PICTURES, exist_ok=True)
    colors = {"operator": "tab:blue", "keda-inflight": "tab:orange", "knative-kpa": "tab:green"}
    for tr, duration, _ in TEST_TRACES:
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
        lines = [("operator (defaults)", res[("operator", None, tr)], colors["operator"], "-")]
        if tr == PANIC_TRACE:
            lines.append(("operator, panic", res[("operator", PANIC_ON, tr)], "tab:purple", "--"))
        if tr == FLOOR_TRACE:
            lines.append(("operator, morning floor", res[("operator", floor_knob, tr)], "tab:purple", "--"))
        lines += [(f"{n} ({_knob(TUNED[n])})", res[(n, TUNED[n], tr)], colors[n], "-") for n in PEERS]
        for label, cell, color, style in lines:
            series = cell.runs[0]["series"] + [(duration + TAIL_S, cell.runs[0]["series"][-1][1])]
            ts, ns = zip(*series)
            left.step(np.asarray(ts) / 60, ns, where="post", color=color, linestyle=style, label=label, lw=1.3)
        t = np.arange(0.0, duration, 5.0)
        demand = left.twinx()
        demand.plot(t / 60, rate_of(tr, 1)(t), color="grey", lw=0.8, alpha=0.6)
        demand.set_ylabel("demand, req/s (grey)")
        left.set_xlabel("minutes")
        left.set_ylabel("replicas ordered (seed 1)")
        left.set_title(tr)
        left.legend(fontsize=7, loc="upper left")
        curve = curves[tr]
        right.plot([g for _, g in curve], [100 * slo for slo, _ in curve], "o-", color=colors["operator"],
                   label="operator, targetUtilization " + "-".join(f"{u:g}" for u in (CURVE_UTILIZATIONS[0],
                                                                                       CURVE_UTILIZATIONS[-1])))
        for u, (slo, g) in zip(CURVE_UTILIZATIONS, curve):
            right.annotate(f"{u:g}", (g, 100 * slo), fontsize=7, xytext=(3, 3), textcoords="offset points")
        slo, g = _point(res[("operator", None, tr)])
        right.plot([g], [100 * slo], "*", ms=14, color=colors["operator"], label="operator (defaults)")
        switched = (res[("operator", PANIC_ON, tr)] if tr == PANIC_TRACE else
                    res[("operator", floor_knob, tr)] if tr == FLOOR_TRACE else None)
        if switched is not None:
            slo, g = _point(switched)
            right.plot([g], [100 * slo], "P", ms=10, color="tab:purple",
                       label="operator, panic" if tr == PANIC_TRACE else "operator, morning floor")
        for n in PEERS:
            grid = [_point(res[(n, k, tr)]) for k in POLICIES[n][1]]
            right.scatter([g for _, g in grid], [100 * slo for slo, _ in grid], s=12, color=colors[n], alpha=0.4,
                          label=f"{n}, grid")
            slo, g = _point(res[(n, TUNED[n], tr)])
            right.plot([g], [100 * slo], "D", ms=9, color=colors[n], label=f"{n}, tuned ({_knob(TUNED[n])})")
        right.set_xlabel("GPU-hours")
        right.set_ylabel(f"SLO met, % (mean of {n_seeds} seeds)")
        right.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = os.path.join(JUDGE_PICTURES, f"autoscale-{tr}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        print(f"wrote {os.path.relpath(path)}")



POOL_GPUS = 12  # the fixed pool both backends share (1 GPU per replica)
POOL_PRIORITY = {"pool-interactive": 10, "pool-batch": 0}
POOL_MIN_REPLICAS = 1  # of each backend: the batch job keeps one replica whatever happens


def held_gpus(sim: Sim) -> int:
    """GPUs a backend's pods hold: every pod not gone, draining ones too (a removed replica finishes its requests)."""
    return sum(1 for p in range(len(sim.created)) if math.isnan(sim.gone[p]))


POOL_MODES = ("alone", "off", "on")


def run_shared_pool(args) -> tuple[str, int, dict]:
    """Two backends, each with the shipped operator's decide(), on POOL_GPUS GPUs. "on": pool.share() caps them by
    priority; "off": each orders what its decide() wants; "alone": the high-priority backend with the pool to itself
    (its SLO when GPUs suffice). A pod starts only on a GPU that is free (a removed replica holds its GPU until its
    drain ends): the rest wait as Pending pods would, and the scheduler is taken to place the high-priority
    backend's first (the kindest assumption for the run without)."""
    mode, seed = args
    feature = mode == "on"
    from llmbackend.autoscaling.pool import Claim, PoolState, share
    names = [n for n, _, _ in POOL_TRACES][:1 if mode == "alone" else 2]
    sims = {n: Sim(n, seed) for n in names}
    ops = {n: Operator((("min_replicas", POOL_MIN_REPLICAS),)) for n in names}
    state = PoolState()
    steps = int((3600 + TAIL_S + WARM_S) / DT)
    next_decision = FIRST_DECISION_S
    events: dict[str, list] = {n: [] for n in names}
    peak = {n: sims[n].replicas() for n in names}
    # seconds (scored period) the high-priority backend had fewer replicas than its decide() wanted while the pool
    # could hold them (all but the low one's minReplicas)
    short_s = 0.0
    order = sorted(names, key=lambda n: -POOL_PRIORITY[n])
    for k in range(steps):
        t = k * DT - WARM_S
        for sim in sims.values():
            sim.now = t
        if t >= next_decision:
            next_decision += SCRAPE
            wanted = {n: ops[n].desired(sims[n], t) for n in names}
            allowed = dict(wanted)
            if feature:
                # every replica here runs (one is started only on a free GPU): bound, as the operator reads pods
                shares, state = share([Claim("bench", n, ("pool",), POOL_GPUS, POOL_PRIORITY[n], sims[n].replicas(),
                                             wanted[n], POOL_MIN_REPLICAS, 1, bound=sims[n].replicas())
                                       for n in names], t, state)
                allowed = {n: shares[("bench", n)].replicas for n in names}
            for n in names:  # scale-downs first: their GPUs come free as their drains end
                if allowed[n] < sims[n].replicas():
                    events[n].append(t)
                    sims[n].scale_to(allowed[n], t, True)
            for n in order:  # then what the free GPUs allow, a Pending pod at a time
                sim = sims[n]
                free = POOL_GPUS - sum(held_gpus(x) for x in sims.values())
                want = min(allowed[n], sim.replicas() + max(0, free))
                if want > sim.replicas():
                    events[n].append(t)
                    sim.scale_to(want, t, True)
                    peak[n] = max(peak[n], want)
            top = order[0]
            if t >= 0 and sims[top].replicas() < min(wanted[top], POOL_GPUS - POOL_MIN_REPLICAS):
                short_s += SCRAPE
        for sim in sims.values():
            sim.step(t)
    end = steps * DT - WARM_S
    out = {n: sims[n].score(end, events[n], peak[n], []) for n in names}
    out["high_short_s"] = short_s
    return mode, seed, out


def shared_pool(n_seeds: int, n_jobs: int) -> None:
    """--shared-pool: the high-priority backend's SLO with and without the GPU pool shared by priority, and what the
    low-priority one gets (its GPU-hours)."""
    high, low = (n for n, _, _ in POOL_TRACES)
    jobs = [(m, s) for m in POOL_MODES for s in range(n_seeds)]
    with ProcessPoolExecutor(n_jobs) as ex:
        runs = list(ex.map(run_shared_pool, jobs, chunksize=1))
    print(f"Shared GPU pool: {POOL_GPUS} GPUs, {high} (priority {POOL_PRIORITY[high]}) and {low} (priority "
          f"{POOL_PRIORITY[low]}), minReplicas {POOL_MIN_REPLICAS} each, shipped defaults, {n_seeds} seeds")
    print("| pool shared by priority | high SLO | high GPU-h | high short while GPUs suffice | high peak "
          "| low SLO | low GPU-h | low peak |")
    print("|---|---|---|---|---|---|---|---|")
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731
    for mode in POOL_MODES:
        rs = [r for m, _, r in runs if m == mode]
        hc = Cell([r[high] for r in rs])
        short = float(np.mean([r["high_short_s"] for r in rs])) / 60.0
        low_cols = "| - | - | - |" if mode == "alone" else (
            lambda lc: f"| {lc.spread('slo', pct)} | {lc.mean('gpu_h'):.2f} | {lc.mean('peak'):.1f} |")(
                Cell([r[low] for r in rs]))
        label = {"alone": "alone (the pool to itself)", "off": "off", "on": "on"}[mode]
        print(f"| {label} | {hc.spread('slo', pct)} | {hc.mean('gpu_h'):.2f} | {short:.1f} min "
              f"| {hc.mean('peak'):.1f} {low_cols}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds per test trace")
    ap.add_argument("--tune-seeds", type=int, default=4, help="seeds per tuning trace")
    ap.add_argument("--tune-only", action="store_true", help="stop after tuning (print the knobs chosen)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--quick", action="store_true", help="coarse grids, 1 seed (a smoke test while developing)")
    ap.add_argument("--grid", action="store_true", help="print every grid value's figures on the tuning traces")
    ap.add_argument("--sweep", action="store_true", help="sweep the operator's constants on the tuning traces only")
    ap.add_argument("--extra", action="append", default=[],
                    help="an operator knob (values of OPERATOR_KNOBS, comma-separated) also run on the test traces")
    ap.add_argument("--beyond", action="append", default=[],
                    help="an operator knob (as --extra) also run on the tuning traces and printed against the "
                         "operator's goals, never a candidate for the pick: to look past the grid's edges")
    ap.add_argument("--base", default="", help="with --sweep: name=value,... set before each swept value")
    ap.add_argument("--restart-at", type=float, help="only: the shipped operator restarted at this second of each "
                                                      "test trace, with a new scaler and resuming its memory")
    ap.add_argument("--warnings", type=float, metavar="REACTION_S",
                    help="only: where the burst warning fires, and an admin who follows it this many seconds later")
    ap.add_argument("--unseen", action="store_true",
                    help="only: the operator, without the burst floor and without the rise over the base, and the "
                         "tuned peers, on UNSEEN_TRACES")
    ap.add_argument("--ablation", action="store_true", help="only: the same rows as --unseen on the test traces")
    ap.add_argument("--held-out", action="store_true", help="only: the same rows as --unseen on HELD_OUT_TRACES")
    ap.add_argument("--flash-bound", action="store_true",
                    help="only: on the flash crowd, what a first order of each size placed knowing the onset reaches")
    ap.add_argument("--judge", action="store_true",
                    help="only: issue 48's dominance verdict, the equal-cost curve, panic on the flash crowd and a "
                         "morning floor on the business day, and the pictures (docs/img)")
    ap.add_argument("--no-pictures", action="store_true", help="with --judge: print only")
    ap.add_argument("--variants", action="store_true",
                    help="only: the operator and the tuned peers on VARIANT_TRACES (issue 48's assumptions)")
    ap.add_argument("--shared-pool", action="store_true",
                    help="only: two backends on a fixed GPU pool, with and without sharing it by priority")
    ap.add_argument("--only", help="comma-separated policies (default: " + ",".join(DEFAULT_POLICIES) + ")")
    args = ap.parse_args()
    started = time.time()
    if args.restart_at is not None:
        restarts(args.restart_at, args.seeds, args.jobs)
        return 0
    if args.warnings is not None:
        warnings(args.warnings, args.seeds, args.tune_seeds, args.jobs)
        return 0
    if args.flash_bound:
        flash_bound(args.seeds, args.jobs)
        return 0
    if args.shared_pool:
        shared_pool(args.seeds, args.jobs)
        return 0
    if args.judge:
        judge(args.seeds, args.jobs, not args.no_pictures)
        return 0
    if args.variants:
        variants(args.seeds, args.jobs)
        return 0
    if args.unseen or args.ablation or args.held_out:
        traces, title = ((UNSEEN_TRACES, "traces written after the design of what they check") if args.unseen else
                         (HELD_OUT_TRACES, "held-out traces") if args.held_out else (TEST_TRACES, "test traces"))
        ablation(traces, title, args.seeds, args.jobs)
        return 0
    if args.sweep:
        base = tuple((n, float(v)) for n, v in (kv.split("=") for kv in args.base.split(",") if kv))
        if base:
            print("base: " + _knob(base))
        sweep(args.tune_seeds, args.jobs, base)
        return 0
    if args.quick:
        args.seeds, args.tune_seeds = 1, 1
    names = args.only.split(",") if args.only else DEFAULT_POLICIES
    if "oracle" not in names:
        names.append("oracle")
    grids = {n: (QUICK_GRIDS.get(n, POLICIES[n][1][:2]) if args.quick else POLICIES[n][1]) for n in names}
    # 1. tuning: every grid value of every policy on the tuning traces only
    beyond = [tuple(float(v) for v in b.split(",")) for b in args.beyond]
    tune_jobs = [(n, k, tr, seed) for n, ks in [*((n, grids[n]) for n in names), ("operator", beyond)] for k in ks
                 for tr, _, _ in TUNE_TRACES for seed in range(101, 101 + args.tune_seeds)]
    tuned = simulate(tune_jobs, args.jobs)
    chosen = [(n, tuned_knob(tuned, n, grids[n])) for n in names if n != "operator"]
    goals = peer_goals(tuned, chosen)
    if "operator" in names:
        chosen.insert(0, ("operator", tuned_knob(tuned, "operator", grids["operator"], goals)))
    print(f"tuning ({len(tune_jobs)} simulations, {time.time() - started:.0f} s): knob chosen per policy")
    for n, k in chosen:
        print(f"  {n}: {_knob(k)}  (" + tuning_figures(tuned, n, k, " GPU-h") + ")")
    if args.grid:
        for n in names:
            for k in grids[n]:
                churn = f"; deleted before Ready {100 * churn_share(tuned, n, k):.0f} %" if n == "operator" else ""
                print(f"    {n} {_knob(k):24s} " + tuning_figures(tuned, n, k) + churn)
    for k in beyond:  # outside the grid: shown against the operator's goals, not picked
        meets = meets_goals(tuned, "operator", k, goals)
        print(f"    beyond the grid: operator {_knob(k):24s} " + tuning_figures(tuned, "operator", k)
              + f"; {tuning_cost(tuned, 'operator', k):.1f} GPU-h in all, goals {'met' if meets else 'missed'}")
    if args.tune_only:
        return 0
    if "operator" in names:
        chosen.insert(0, ("operator", None))  # the shipped defaults, beside the pick of the same grid
        for extra in args.extra:  # other operator settings, reported beside (not tuned)
            chosen.insert(2, ("operator", tuple(float(v) for v in extra.split(","))))
    # 2. test traces, the chosen knobs only
    test_jobs = [(n, k, tr, seed) for n, k in chosen for tr, _, _ in TEST_TRACES for seed in range(1, 1 + args.seeds)]
    results = simulate(test_jobs, args.jobs)
    oracle_ref = dict(chosen)["oracle"]
    print(f"\ntest traces ({args.seeds} seed(s) each), knobs as tuned above:\n")
    print(table(results, chosen, oracle_ref))
    print(f"\n{len(tune_jobs) + len(test_jobs)} simulations, {time.time() - started:.0f} s on {args.jobs} process(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
