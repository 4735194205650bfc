"""Thirtieth attacker pass on the GPU pool (autoscaling/pool.py ``share``), aimed at the fixes of pass 29 (04e2079,
18bfabd, cb8b05a): step 2's give-back (``leftover_above``, the ``cuts`` list), ``contested`` asked for the replica the
freed GPUs go to first (``fed_for``), step 3's ``third_waits``, and unread claims (``may_run``, ``surely_waiting``,
``kept_free`` counting lower unread backends' GPUs as free). As a tenant (namespace T) who may create/edit LLMBackends
and bare pods in its namespace and use one PriorityClass. Shares are fed back sync after sync through pass 26's
kube-scheduler model (``_runs``); "the scheduler alone" is the same model with every backend at its wanted replicas.
Claim order: hi before lo, so the model evicts hi first, as the kube-scheduler (which reprieves lo's pods on their
node once the preemptor is placed) does.

PROBES: 6 test functions, 25 cases (19 pass, 6 strict xfail): 5 functions hold (2 of them controls for the finding),
1 is the finding (6 cases: both modes, pods read, or judged from the ranks with the tenant's pods replicas).

FINDING 1 (high; theft across namespaces; across mode needs no class for the tenant, only a priority number, which
``--priority-across-namespaces`` makes comparable; default mode needs the victim's own namespace to have an
uncompletable Pending sibling of a higher priority): step 2's give-back counts "its own rank's outrankers that wait"
(``siblings = waiting_gpus.above(cut) - waiting_gpus.by_pod.above(level)``) as whole waiting GPUs, not as replicas
the freed GPUs complete, the very gap pass 29's finding 1 closed for higher pod priorities only. Pool 11: H (class
10, a third namespace) has one Pending 8-GPU replica; V runs ``hi`` (one 8-GPU replica, priority 5) and ``lo``
(three 1-GPU replicas, priority 0); the tenant's ``e`` (class 0, priority 10**6) has one Pending 4-GPU replica at its
floor (it can never complete: 3 GPUs are left once H runs), and three Pending class-0 1-GPU pods (bare, or replicas
of its ``d``). Across mode: step 2 cuts lo to 0 and then hi; the give-back reads e's 4 waiting GPUs as lo's
outranking sibling (same pod priority, higher priority), finds 11 - 8 - 4 < 1 left and gives nothing back; H runs,
e never fits, and the tenant's class-0 pods run on lo's 3 GPUs: lo 3 -> 0, the tenant 0 -> 3. The scheduler alone
evicts hi only and lo keeps 3. The same with no pod read and the tenant's pods replicas of d (judged from the
ranks: the give-back's ``elif`` branch counts e's whole grant above lo; with bare pods judged mode cuts nothing).
Default mode: the same with ``e`` in V's own namespace (V's uncompletable sibling
keeps V's needless cuts; the tenant, with no class and no number, takes lo's GPUs); with e in T, default mode holds
(control: siblings are V's namespace only). Fix: in the give-back, count the siblings as the higher levels are
counted, whole replicas the leftover completes (run ``leftover_above``'s loop one step further, over the waiting
replicas of the cut's pod priority that outrank it, the larger first; in judged mode, leave out of ``granted_gpus.above``
the grants the freed GPUs cannot complete).

HELD: judged mode with the tenant's pods bare (step 2 cuts no running replica while such pods wait); the same pool
with e's Pending replica cut (minReplicas 0) gives lo back in both modes; default mode with e
in T gives lo back; a tenant's class-10 bare pod that can never run (5 or 6 GPUs beside 4 lower GPUs, pool 8) does
not stop another namespace's class-10 backend that wants more than the pool from preempting class-0 replicas as the
scheduler would (``third_waits`` is not asked in step 3's preemption of a lower victim: c gets 8, as alone); a fuzz
(pools of 4 to 16 GPUs, 2 to 7 backends, replicas of 1/2/4/8 GPUs, classes 1/5/10, numbers up to 10**6, floors,
bare pods of 1/2/4/8 GPUs at pod priorities 0/1/5/10, 0 to 50 % unread claims, both modes, 6 syncs; pass 29's
invariants: (a) a running, held, wanted replica is cut only where a backend outranks it, (b) floors never cut in a
share, (c) a grower holds no more than the pool beside a higher pod priority and its namespace's equals, preempted
replicas excused, (d) shares settle where reads are right and no bare pod ran, (e) default mode: bare pods get no
more than the scheduler alone or the free GPUs plus what was preempted) held over 7 seeds of 150 pools while
writing this pass (3 of those seeds kept here).

UNSURE / NOT ASSERTED: whether ``fed_for``'s ``contested(cut, cut)`` (an equal of another namespace next in line)
can deny lastingly: no reproduction found in the time given; the kept_free change was read (it only raises the
reservation by lower unread GPUs, within HOLD_S) and not probed further. Nothing checked on a real cluster.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

import pytest
import test_pool_attack29 as pass29
from test_pool_attack26 import _runs, _shares
from test_pool_attack28 import pending_claim, running_claim

MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
JUDGED = pytest.mark.parametrize("judged", [False, True], ids=["read", "judged"])


def _seen(judged: bool):
    """judged: no backend's pods read (held and bound None): the pool judges from the ranks."""
    return (lambda c: dataclasses.replace(c, held=None, bound=None)) if judged else None


def _sibling_give_back(e_ns: str, low: str, e_min: int = 1):
    """Pool 11: H (class 10) one Pending 8-GPU replica; V runs hi (one 8-GPU, priority 5) and lo (three 1-GPU,
    priority 0); ``e`` (class 0, priority 10**6, namespace ``e_ns``) one Pending 4-GPU replica at minReplicas
    ``e_min``; the tenant's three Pending class-0 1-GPU pods: replicas of its ``d`` ("pending") or bare ("bare")."""
    cs = [pending_claim("H", "H", 11, 1, 8, class_priority=10, min_replicas=0),
          running_claim("V", "hi", 11, 1, 8, priority=5),
          running_claim("V", "lo", 11, 3),
          pending_claim(e_ns, "e", 11, 1, 4, priority=10**6, min_replicas=e_min)]
    bare = []
    if low == "pending":
        cs.append(pending_claim("T", "d", 11, 3))
    else:
        bare = [("T", 1, 0, 3, 0)]
    return cs, bare


def _tenant(running: dict, low: str) -> int:
    return running[("T", "d")] if low == "pending" else running[("bare", 0)]


@MODES
@pytest.mark.parametrize("low", ["pending", "bare"])
def test_control_a_sibling_that_yields_leaves_lo_what_the_scheduler_leaves(across, low):
    cs, bare = _sibling_give_back("T", low, e_min=0)
    _, out, running, _, alone, _ = next(_runs(cs, across, 1, bare))
    assert running[("H", "H")] == 1 and alone[("V", "lo")] == 3, (running, alone)
    assert running[("V", "lo")] == 3 and _tenant(running, low) == 0, (_shares(out), running)


@JUDGED
@pytest.mark.parametrize("low", ["pending", "bare"])
def test_control_default_mode_a_tenants_number_is_no_sibling_of_lo(low, judged):
    cs, bare = _sibling_give_back("T", low)
    for _, out, running, _, _, _ in _runs(cs, False, 2, bare, _seen(judged)):
        assert running[("V", "lo")] == 3 and _tenant(running, low) == 0, (_shares(out), running)


_SIBLING_FINDING = pytest.mark.xfail(strict=True, reason=(
    "FINDING 1 (high): step 2's give-back counts the cut's own-rank outrankers that wait (siblings) as whole waiting "
    "GPUs, not replicas the freed GPUs complete. Pool 11: H class-10 Pending 8-GPU; V runs hi (8-GPU, priority 5) and "
    "lo (3x1-GPU, priority 0); e (class 0, priority 10**6) one uncompletable Pending 4-GPU replica at its floor, in T "
    "(across mode) or in V (default); the tenant's 3 Pending class-0 1-GPU pods. lo is cut and never given back, the "
    "tenant runs on lo's 3 GPUs (scheduler alone: lo keeps 3). Fix: count siblings as whole replicas the leftover "
    "completes, as leftover_above does for higher pod priorities. Fixed with the pods read; open with none read "
    "(judged mode: granted_gpus.above counts the grants the freed GPUs cannot complete)."))


# Fixed with the pods read (was a strict xfail for every case): the give-back counts the siblings as whole replicas
# the leftover completes (``after_siblings``); with no pod read it is still open
@pytest.mark.parametrize(("across", "e_ns", "low", "judged"), [
    (True, "T", "bare", False), (True, "T", "pending", False), (False, "V", "bare", False),
    (False, "V", "pending", False), pytest.param(True, "T", "pending", True, marks=_SIBLING_FINDING),
    pytest.param(False, "V", "pending", True, marks=_SIBLING_FINDING)])
def test_give_back_is_not_blocked_by_a_sibling_the_freed_gpus_cannot_complete(across, e_ns, low, judged):
    cs, bare = _sibling_give_back(e_ns, low)
    _, out, running, _, alone, _ = next(_runs(cs, across, 1, bare, _seen(judged)))
    assert alone[("V", "lo")] == 3 and running[("H", "H")] == 1, (alone, running)
    assert running[("V", "lo")] == 3 and _tenant(running, low) == 0, (_shares(out), running)


@pytest.mark.parametrize(("across", "e_ns"), [(True, "T"), (False, "V")])
def test_judged_mode_a_bare_pod_stops_the_cut_the_sibling_would_have_kept(across, e_ns):
    """Finding 1's pool with no pod read and the tenant's pods bare: step 2 cuts no running replica while such pods
    wait (``feeds_others`` judged), so lo keeps its 3 GPUs."""
    cs, bare = _sibling_give_back(e_ns, "bare")
    for _, out, running, _, _, _ in _runs(cs, across, 2, bare, _seen(True)):
        assert running[("V", "lo")] == 3 and running[("bare", 0)] == 0, (_shares(out), running)


@MODES
@pytest.mark.parametrize(("want", "size"), [(12, 6), (12, 5), (8, 6)])
def test_an_uncompletable_class_bare_pod_does_not_stop_an_equal_class_from_preempting_lower(across, want, size):
    """Pool 8: X (class 0) runs four 1-GPU replicas; C's c (class 10) runs four and wants ``want``; the tenant's
    class-10 bare pod of ``size`` GPUs waits (it fits c's wanted GPUs, so ``third_waits`` sees it, but only 4 lower
    GPUs are there: it never runs). c gets 8, as from the scheduler alone, and the bare pod nothing."""
    cs = [running_claim("X", "x", 8, 4), running_claim("C", "c", 8, 4, class_priority=10, wanted=want)]
    for _, out, running, _, alone, _ in _runs(cs, across, 3, [("T", size, 0, 1, 10)]):
        assert running[("C", "c")] == alone[("C", "c")] == 8 and running[("bare", 0)] == 0, (_shares(out), running)
        assert _shares(out)[("C", "c")] == 8, _shares(out)


def _fuzz_pool(rng: random.Random):
    """Pass 29's generator with more levels: classes 1/5/10, the tenant in half the backends, bare pods of pod
    priorities 0/1/5/10 in up to three namespaces, pools of 9 and 11 GPUs too."""
    return pass29._fuzz_pool(rng, pools=(4, 6, 8, 9, 11, 12, 16), most=7, namespaces="ttab",
                             classes=(None, None, 1, 5, 10), bare_classes=(0, 0, 1, 5, 10), bare_namespaces="tabx")


@pytest.mark.parametrize(("seed", "unread_p", "bare_p"), [(301, 0.3, 1.0), (305, 0.0, 0.0), (307, 0.5, 1.0)])
def test_fuzz_pass_29s_invariants_hold_with_more_pod_priority_levels(seed, unread_p, bare_p):
    pass29._fuzz(seed, 150, unread_p, bare_p, _fuzz_pool)
