#!/usr/bin/env python3
"""Discrete-time simulation of Triton + TRT-LLM replicas under three traffic
traces, comparing autoscaling policies on the queue-to-compute ratio.

Model (stated, not measured on GPUs):
* Poisson arrivals at the trace's rate; output length uniform 50..350 tokens.
* A replica batches in flight: up to ``SLOTS`` sequences; each active sequence
  decodes at ``R0 / (1 + b / B_HALF)`` tokens/s when ``b`` sequences are active,
  so replica throughput rises with batch size toward ``R0 × B_HALF`` (saturation).
  Prefill is ignored. A request's *queue time* is arrival → admitted into a slot
  (a TTFT proxy), *compute time* is admission → last token.
* Dispatch: one shared FIFO queue, a free slot on any ready replica takes the
  head (a best-case load balancer; the same for every policy).
* New replicas warm up for U(60, 120) s (engine load) before serving and count
  GPU time from creation. Removed replicas stop admitting and drain; they count
  GPU time until empty. Scale-down removes warming replicas first.
* The metric: Σ queue / Σ compute of requests *completed* in the window (what
  Triton's counters give), averaged over ready replicas.

Policies, all on the same traces and random seed:
* ``decide(defaults)``: llmbackend's decide() with AutoscalingSpec defaults
  (target 1.0, tol 0.1, window 60 s, sync 15 s, up-stab 0, down-stab 300 s,
  up step 4, down step 1), reading the ratio directly from the pods.
* ``decide(target .15)``: defaults but target 0.15. The ratio's unit is "compute
  times": with ~15 s generations at full batch, ratio 1 means ~15 s in queue,
  far beyond a 2 s TTFT-like SLO; 0.15 ≈ SLO / compute time.
* ``+occ``: decide() given the engine's max batch size (``SLOTS``), enabling its
  occupancy guard (no scale-down that would leave > 50 % of slots busy, from
  Σ compute / elapsed = mean requests in flight).
* ``HPA``: the Kubernetes HPA algorithm (sync 15 s, tolerance 0.1, down-stab
  300 s, default policies: up max(+100 %, +4 pods)/15 s, down 100 %/15 s) on the
  same ratio (target 1.0), which reaches it through Prometheus + adapter:
  rate[1m] and an assumed 30 s extra pipeline delay (scrape, rule evaluation,
  adapter cache) — a stated assumption, change ``HPA_METRIC_DELAY``. Also with
  target 0.15.

Prints p50/p99 queue time, SLO attainment (queue time <= SLO_QUEUE_S), GPU-hours,
scale events, mean replicas. No asserts.

    python benchmarks/autoscale_sim.py [--seed 1] [--gpus-per-replica 1]
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import os
import random
import sys
from collections import deque
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "operator"))

from llmbackend.api.v1alpha1 import AutoscalingSpec  # noqa: E402
from llmbackend.autoscaling.decision import ScalerState, decide  # noqa: E402
from llmbackend.autoscaling.ratio import RatioReading  # noqa: E402

DT = 0.5
SLOTS = 32
R0 = 40.0       # tok/s of a lone sequence
B_HALF = 16.0   # batch size at which per-sequence speed halves
SLO_QUEUE_S = 2.0
MIN_R, MAX_R = 1, 16
HPA_METRIC_DELAY = 30.0


# ---------------- traces (requests/s as a function of t) ----------------

def trace_step(t: float) -> float:
    return 12.0 if 600 <= t < 2400 else 2.0


def trace_spike(t: float) -> float:
    return 16.0 if 1200 <= t < 1500 else 3.0


def trace_diurnal(t: float) -> float:
    period = 4 * 3600.0
    return 1.0 + 11.0 * (1 - math.cos(2 * math.pi * t / period)) / 2


TRACES = {"step": (trace_step, 3600), "spike": (trace_spike, 3600), "diurnal": (trace_diurnal, 4 * 3600)}


# ---------------- cluster ----------------

@dataclass
class Replica:
    created: float
    ready_at: float
    progress: float = 0.0
    heap: list = field(default_factory=list)  # (finish_progress, seq, arrival, admitted)
    draining: bool = False
    removed_at: float | None = None

    def ready(self, t: float) -> bool:
        return t >= self.ready_at and not self.draining


class Cluster:
    def __init__(self, rng: random.Random, initial: int) -> None:
        self.rng = rng
        self.reps: list[Replica] = [Replica(0.0, 0.0) for _ in range(initial)]
        self.queue: deque = deque()
        self.seq = 0
        self.cum_q = 0.0
        self.cum_c = 0.0
        self.hist_t: list[float] = []
        self.hist_q: list[float] = []
        self.hist_c: list[float] = []
        self.queue_times: list[float] = []
        self.gpu_s = 0.0
        self.events = 0

    def live(self) -> list[Replica]:
        return [r for r in self.reps if r.removed_at is None]

    def count(self) -> int:  # replicas the workload has (what `spec.replicas` says)
        return sum(1 for r in self.live() if not r.draining)

    def scale_to(self, n: int, t: float) -> None:
        cur = self.count()
        if n == cur:
            return
        self.events += 1
        if n > cur:
            for _ in range(n - cur):
                self.reps.append(Replica(t, t + self.rng.uniform(60, 120)))
        else:
            active = [r for r in self.live() if not r.draining]
            # remove warming replicas first (newest), then the least loaded
            active.sort(key=lambda r: (r.ready_at <= t, len(r.heap)))
            for r in active[: cur - n]:
                r.draining = True

    def step(self, t: float, rate: float, n_tokens) -> None:
        # arrivals
        lam = rate * DT
        k = _poisson(self.rng, lam)
        for _ in range(k):
            self.queue.append((t + self.rng.random() * DT, n_tokens()))
        for r in self.live():
            self.gpu_s += DT
            if t < r.ready_at:
                continue
            b = len(r.heap)
            if b:
                r.progress += DT * R0 / (1 + b / B_HALF)
                while r.heap and r.heap[0][0] <= r.progress:
                    _, _, arr, adm = heapq.heappop(r.heap)
                    self.cum_q += adm - arr
                    self.cum_c += t + DT - adm
            if r.draining and not r.heap:
                r.removed_at = t
        # admission (least-loaded ready replica first)
        ready = [r for r in self.live() if r.ready(t)]
        while self.queue and ready:
            r = min(ready, key=lambda x: len(x.heap))
            if len(r.heap) >= SLOTS:
                break
            arr, L = self.queue.popleft()
            adm = max(arr, t)
            self.queue_times.append(adm - arr)
            self.seq += 1
            heapq.heappush(r.heap, (r.progress + L, self.seq, arr, adm))
        self.hist_t.append(t)
        self.hist_q.append(self.cum_q)
        self.hist_c.append(self.cum_c)

    def inflight(self, t: float, window: float) -> float:
        """Σ compute time completed in the window / window (Little's law, as from Triton's counters)."""
        lo = t - window
        if lo < 0 or not self.hist_t:
            return 0.0
        i = len(self.hist_t) - 1
        j = bisect.bisect_right(self.hist_t, lo) - 1
        return (self.hist_c[i] - self.hist_c[max(j, 0)]) / window

    def ratio(self, t: float, window: float, delay: float = 0.0) -> float | None:
        """Σqueue/Σcompute of completions in [t-delay-window, t-delay]; None if nothing completed."""
        hi = t - delay
        lo = hi - window
        if lo < 0 or not self.hist_t:
            return None
        i = min(bisect.bisect_right(self.hist_t, hi) - 1, len(self.hist_t) - 1)
        j = bisect.bisect_right(self.hist_t, lo) - 1
        if i < 0 or j < 0:
            return None
        dq = self.hist_q[i] - self.hist_q[j]
        dc = self.hist_c[i] - self.hist_c[j]
        if dc <= 0 and dq <= 0:
            return 0.0 if not self.queue else None
        return dq / max(dc, 1e-6)


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    L, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= L:
            return k
        k += 1


# ---------------- policies ----------------

class DecidePolicy:
    def __init__(self, name: str, spec: AutoscalingSpec, occupancy_guard: bool = False) -> None:
        self.name, self.spec, self.state = name, spec, ScalerState()
        self.guard = occupancy_guard

    def act(self, t: float, cl: Cluster) -> int:
        ready = sum(1 for r in cl.live() if r.ready(t))
        ratio = cl.ratio(t, self.spec.window_seconds)
        inflight = cl.inflight(t, self.spec.window_seconds)
        reading = RatioReading(ratio, "Ok" if ratio is not None else "NoSamples", pods_used=ready,
                               mean_inflight_per_pod=(inflight / ready) if ready else None)
        d = decide(self.state, reading, self.spec, cl.count(), t,
                   max_batch_size=SLOTS if self.guard else None)
        self.state = d.state
        return d.desired_replicas


class HPAPolicy:
    def __init__(self, target: float = 1.0, tol: float = 0.1, down_stab: float = 300.0) -> None:
        self.name = "HPA" if target == 1.0 else f"HPA(target {target:g})"
        self.target, self.tol, self.down_stab = target, tol, down_stab
        self.recs: deque = deque()
        self.spec = type("S", (), {"sync_period_seconds": 15})

    def act(self, t: float, cl: Cluster) -> int:
        cur = cl.count()
        ratio = cl.ratio(t, 60.0, HPA_METRIC_DELAY)
        if ratio is None:
            return cur
        ready = min(cur, sum(1 for r in cl.live() if r.ready(t)))
        unready = cur - ready
        usage = ratio / self.target
        desired = cur
        if ready and abs(usage - 1) > self.tol:
            if usage > 1:
                nu = ready * usage / cur
                if nu > 1 + self.tol:
                    desired = math.ceil(nu * cur)
            else:
                nu = (ready * usage + unready) / cur
                if nu < 1 - self.tol:
                    desired = math.ceil(nu * cur)
        self.recs.append((t, desired))
        while self.recs and self.recs[0][0] < t - self.down_stab:
            self.recs.popleft()
        desired = min(desired, max(r for _, r in self.recs))  # scale-down stabilization
        desired = min(desired, max(2 * cur, cur + 4))            # default scale-up policy
        return max(MIN_R, min(MAX_R, desired))


# ---------------- run ----------------

def run(trace_name: str, policy, seed: int, gpus_per_replica: int) -> dict:
    fn, duration = TRACES[trace_name]
    rng = random.Random(seed)
    cl = Cluster(rng, MIN_R)
    sync = policy.spec.sync_period_seconds
    next_sync = 0.0
    t = 0.0
    while t < duration:
        cl.step(t, fn(t), lambda: rng.randint(50, 350))
        if t >= next_sync:
            cl.scale_to(policy.act(t, cl), t)
            next_sync += sync
        t += DT
    qt = sorted(cl.queue_times) + [duration - a for a, _ in cl.queue]  # still queued at the end
    qt.sort()
    n = len(qt)
    pct = lambda p: qt[min(n - 1, int(p * n))] if n else float("nan")  # noqa: E731
    return {
        "p50": pct(0.50), "p99": pct(0.99),
        "slo": 100.0 * sum(1 for x in qt if x <= SLO_QUEUE_S) / max(1, n),
        "gpuh": cl.gpu_s * gpus_per_replica / 3600.0,
        "events": cl.events,
        "mean_rep": cl.gpu_s / duration,
        "requests": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpus-per-replica", type=int, default=1)
    ap.add_argument("--traces", default="step,spike,diurnal")
    a = ap.parse_args()
    base = dict(enabled=True, min_replicas=MIN_R, max_replicas=MAX_R)
    policies = [
        lambda: DecidePolicy("decide(defaults)", AutoscalingSpec(**base)),
        lambda: DecidePolicy("decide(target .15)", AutoscalingSpec(**base, target_ratio=0.15)),
        lambda: DecidePolicy("decide(defaults)+occ", AutoscalingSpec(**base), occupancy_guard=True),
        lambda: DecidePolicy("decide(.15)+occ", AutoscalingSpec(**base, target_ratio=0.15), occupancy_guard=True),
        lambda: HPAPolicy(),
        lambda: HPAPolicy(target=0.15),
    ]
    cap = R0 * B_HALF * SLOTS / (B_HALF + SLOTS) / 200
    print(f"replica: {SLOTS} slots, ~{cap:.2f} req/s at full batch (200-token mean); warm-up U(60,120)s; "
          f"SLO: queue time <= {SLO_QUEUE_S:g}s; replicas {MIN_R}..{MAX_R}; {a.gpus_per_replica} GPU/replica; seed {a.seed}")
    hdr = f"{'trace':8s} {'policy':20s} {'requests':>8s} {'p50 q(s)':>9s} {'p99 q(s)':>9s} {'SLO %':>7s} {'GPU-h':>7s} {'mean rep':>8s} {'events':>6s}"
    print(hdr)
    print("-" * len(hdr))
    for tr in a.traces.split(","):
        for mk in policies:
            p = mk()
            r = run(tr, p, a.seed, a.gpus_per_replica)
            print(f"{tr:8s} {p.name:20s} {r['requests']:8d} {r['p50']:9.2f} {r['p99']:9.2f} {r['slo']:7.2f} "
                  f"{r['gpuh']:7.2f} {r['mean_rep']:8.2f} {r['events']:6d}")


if __name__ == "__main__":
    main()
