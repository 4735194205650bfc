"""Thirty-seventh attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did
not write the code, as a tenant (namespace T) who may create LLMBackends, bare pods and pods of the PriorityClasses it
may use, in its own namespace, and as plain bad luck (pod lists that fail). Aimed at a5b12a5 (pass 36's fixes): step
1's ``placed`` (a level's Pending replicas that fit alone count for the lower levels only as far as they fit together)
and step 3's new break in the victim loop (no cut of an intermediate pod priority while the lower floors' running pods
make what the taker lacks). Shares are fed back sync after sync through pass 26's kube-scheduler model (``_runs``);
"the scheduler alone" is the same model with every backend at its wanted replicas, in both claim orders
(``_both_orders``). Time-boxed pass (25 minutes): a scan of 600 break-shaped pools (a class-10 grower, class-5/3
intermediates, class-0 floors running and Pending, bare pods) and the probes below.

PROBES: 4 test functions, 16 cases (12 pass, 4 strict xfail): 3 functions hold (a control for the finding; pass 36
finding 2's shape with one backend's pods unread; the break beside a lower floor that waits), 1 is a finding.

FINDING 1 (high by the rubric: growth frozen for good with a GPU idle, both modes; the tenant needs one class-5 backend
of a large replica that never fits; found by this pass's scan, pool 6, not the break): W's c (class 10) wants three
4-GPU replicas (runs none); V's v0 (class 0, priority 5) runs two 2-GPU replicas (min 1, wants 2); V's v1 (class 0,
priority 5) runs one 1-GPU replica of two (min 1, wants 2); T's (or X's) x3 (class 5) has two Pending 4-GPU replicas,
wants 3, min 0. c takes 4 GPUs (preempting v0), v1 runs 1: 1 GPU idle for good. x3's Pending replica never fits
beside c (room 2 < 4) and never runs, yet it is granted one replica every sync and its grant is refreshed as "held"
in ``PoolState.granted``: v1's status says "kept for 1 backend(s) of other namespaces: 4 GPU(s) it held within the
last 300s", and v1 never gets the idle GPU (the scheduler alone: v1 2). Without x3, or without v0, v1 grows to 2
(control). Docs: "pods that never run reserve nothing". Suspected fix: in step 4 (``reserved``/the history written
to ``PoolState.granted``) count of a backend only the GPUs its pods held (bound replicas, exact mode), not the grant
of replicas that never ran; or set apart x3's replica (step 1) before the reservation is read.

HELD: (1) Pass 36 finding 2's shape (w2 class 10 growing, x3 class 5 running, x5 class 0 running one of four at its
floor, v4 class 0 Pending, T's class-5 bare pods) with x5's, v4's or x3's pods unread: the break keeps x3 at 2, w2
runs 2, as with the scheduler alone (an unread lower floor's replicas count in ``preemptible`` only as far as they
may run beside those read running, and here they do). (2) The break beside a lower floor that waits: a class-0 floor
whose replica is Pending (read) does not count as preemptible (``surely_waiting``), so the intermediate class-5
replica is still cut for the class-10 growth when that is the only way, as the scheduler alone does.

SUSPECTED, NOT SHOWN: the scan's other hits were namespace-internal orders (a higher-priority sibling's Pending replica
kept before a lower sibling's growth, v's own reshuffle) or the model's choice of victims among equals (claim order),
not classified further for lack of time; one (trial 44 of seed 1: V's v0 priority 5 Pending 4-GPU replica that never
fits, v2 priority 0 denied its 1-GPU growth beside an idle GPU) looks like finding 1's reservation within one namespace.
Not shown: a break whose preemption loop then fails its caps (``short`` capped by ``room(c)`` when room is negative
under a reservation; the break reads ``max(0, usable)``) - no shape found in the time.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): finding 1: where a backend's pods are read, the memory of what it held (``HOLD_S``,
``PoolState.granted``) records only the GPUs its running pods held, not a grant to a Pending replica that never ran."""

from __future__ import annotations

import dataclasses

import pytest
import test_pool_attack36 as pass36
from test_pool_attack26 import _runs, _shares
from test_pool_attack28 import claim
from test_pool_attack29 import _unread
from test_pool_attack34 import _both_orders

MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])


# --- (1) a never-running Pending grant reserves GPUs against a lower growth ------------------------------------------

def _reserved_by_pending(x3_ns: str | None = "T", v0: bool = True, across: bool = False):
    """Pool 6: W's c (class 10) wants three 4-GPU replicas; V's v0 (class 0, priority 5) runs two 2-GPU replicas;
    V's v1 (class 0, priority 5) runs one 1-GPU replica of two; (``x3_ns``) x3 (class 5) two Pending 4-GPU
    replicas, wants 3."""
    cs = [claim("W", "c", 6, class_priority=10, gpus_per_replica=4, wanted=3)]
    if v0:
        cs.append(claim("V", "v0", 6, gpus_per_replica=2, current=2, held=2, bound=2, wanted=2, min_replicas=1,
                        priority=5))
    cs.append(claim("V", "v1", 6, current=2, held=2, bound=1, wanted=2, min_replicas=1, priority=5))
    if x3_ns:
        cs.append(claim(x3_ns, "x3", 6, class_priority=5, gpus_per_replica=4, current=2, held=2, bound=0, wanted=3))
    return [dataclasses.replace(c, priority=0) for c in cs] if across else cs


@MODES
@pytest.mark.parametrize("shape", [dict(x3_ns=None), dict(v0=False)], ids=["no-x3", "no-v0"])
def test_control_without_the_never_fitting_class_5_replica_or_v0_v1_takes_the_idle_gpu(across, shape):
    claims, out, running, *_ = list(_runs(_reserved_by_pending(across=across, **shape), across, 4))[-1]
    assert running[("V", "v1")] == 2 and all(r[("V", "v1")] == 2 for r in _both_orders(claims, out)), (
        _shares(out), running)


@MODES
@pytest.mark.parametrize("x3_ns", ["T", "X"], ids=["tenants-x3", "third-x3"])
# Fixed (was a strict xfail): pass 37 finding 1: x3's Pending class-5 4-GPU replica never fits beside c's class-10 one, yet its grant is kept as held GPUs (step 4) and reserved against v1: v1's growth of one GPU is frozen for good beside an idle GPU
def test_a_pending_replica_that_never_runs_reserves_no_gpu_against_a_lower_growth(across, x3_ns):
    claims, out, running, *_ = list(_runs(_reserved_by_pending(x3_ns, across=across), across, 4))[-1]
    assert all(r[("V", "v1")] == 2 for r in _both_orders(claims, out)), (_shares(out), running)
    assert running[("V", "v1")] == 2, (_shares(out), running, out[("V", "v1")].waiting_for_capacity)


# --- held: the break with unread lower floors ------------------------------------------------------------------------

@MODES
@pytest.mark.parametrize("who", ["x5", "v4", "x3"])
def test_the_break_with_a_backends_pods_unread_cuts_no_intermediate_and_feeds_the_class_10_growth(across, who):
    cs, bare = pass36._intermediate()
    for claims, out, running, _, _, us in _runs(cs, across, 3, bare, lambda c: _unread(c) if c.name == who else c):
        alone = _both_orders(claims, out, us)
        assert _shares(out)[("X", "x3")] == 2 and running[("X", "x3")] == 2, (_shares(out), running)
    assert running[("W", "w2")] == 2 and all(r[("W", "w2")] == 2 for r in alone), (_shares(out), running, alone)


@MODES
def test_the_break_counts_no_pending_lower_floor_as_preemptible(across):
    """Pool 6: W's w (class 10) wants two 2-GPU replicas; X's x (class 5) runs two 2-GPU replicas above its floor 0,
    wants 1; V's v (class 0) one Pending 2-GPU replica at its floor; T's t (class 0) runs one 2-GPU replica at its
    floor. The scheduler alone preempts t and x's scale-down frees the rest: w runs 2, x 1."""
    cs = [claim("W", "w", 6, class_priority=10, gpus_per_replica=2, wanted=2),
          claim("X", "x", 6, class_priority=5, gpus_per_replica=2, current=2, held=2, bound=2, wanted=1),
          claim("V", "v", 6, gpus_per_replica=2, current=1, held=1, bound=0, wanted=1, min_replicas=1),
          claim("T", "t", 6, gpus_per_replica=2, current=1, held=1, bound=1, wanted=1, min_replicas=1)]
    claims, out, running, *_ = list(_runs(cs, across, 3))[-1]
    alone = _both_orders(claims, out)
    assert running[("W", "w")] == 2 and running[("X", "x")] >= min(r[("X", "x")] for r in alone), (
        _shares(out), running, alone)
