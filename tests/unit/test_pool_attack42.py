"""Forty-second attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did not
write the code, as a tenant (namespace T) who may create LLMBackends and bare pods in its own namespace. Aimed at
81f4eb9: ``feeds_others_left`` (an own reshuffle's leftover asked about another namespace's growth that does not
outrank the victim, and Pending pods no claim covers at or below its pod priority) and ``_growth_above_waiting`` (the
pool judged twice only where a backend wanting more is of a higher pod priority than a replica read Pending). Shares
fed back sync after sync through pass 26's kube-scheduler model (``_runs``); "the scheduler alone" is the same model
with every backend at its wanted replicas, in both claim orders (``_both_orders``). Hard time box (20 minutes).

PROBES: 4 test functions, 6 cases (all pass, no xfail): the freeze lever (a cheap class-0 short backend of T's
freezes V's own reshuffle: held, the pool runs what the scheduler alone runs), the control of backends that are not
short (unplaceable, quota 0: they freeze nothing), pass 41's control (T not growing: the reshuffle happens), and the
skipped first judgement (a fuzz: forcing the double judgement where ``_growth_above_waiting`` is False changes no
share).

FINDINGS: none in the time box.

HELD: (a) the freeze lever: T's one cheap class-0 1-GPU backend that wants a replica stops V's own reshuffle (v1's
4 GPUs cut for v3's 3) for good, but the leftover would have gone to that backend (the model places it there), and the
scheduler alone never preempts an equal pod: v1 keeps its replica and v3 waits either way, in both orders. Not the
rubric's "frozen growth the scheduler alone would give" - only V's own priority order is not served while T asks for
a GPU it could really take (and gets none). A backend that is not short (unplaceable; quota read with 0 free, as
controller/run.py always sets ``quota`` beside ``quota_free``) freezes nothing: the reshuffle happens. (b)
``_growth_above_waiting``: the growth map feeds only ``_never_placed``, where it moves ``taken_above`` for the pod
priorities below the grower, and only their Pending replicas (``waiting_replicas``) read it; growth of a pod priority
at or below the lowest waiting one changes nothing. A fuzz of 200 pools a mode (pod priorities 0/5/10, 1/2/4-GPU
replicas, read Pending replicas, growth, three namespaces), of those where the check says "once": the shares with the first
judgement forced are identical.

SUSPECTED, NOT SHOWN: a backend of T's that becomes short during the pass (a replica cut by a higher class in step 3)
is not in ``short_by_rank`` (built once, before steps 2 and 3), so a later own reshuffle's leftover could go to its
re-created pod; the quota budget spent in another pool first (drawn order) leaves T's backend short by ``wants`` but
with no ``quota_room``: a freeze that heals once the other pool's pod runs. Neither built in the time box.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import random

import pytest
from test_pool_attack26 import _runs, _shares
from test_pool_attack28 import claim, running_claim
from test_pool_attack34 import _both_orders

import llmbackend.autoscaling.pool as pool_mod
from llmbackend.autoscaling.pool import share

MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])


def _reshuffle(extra: list) -> list:
    """Pool 7: T's t (class 5) runs three 1-GPU replicas and wants no more; V's v1 (class 5, priority 0) runs one 4-GPU
    replica; V's v3 (class 5, priority 5) wants one 3-GPU replica; ``extra``: T's other backends."""
    return [running_claim("T", "t", 7, 3, 1, class_priority=5),
            running_claim("V", "v1", 7, 1, 4, class_priority=5),
            claim("V", "v3", 7, class_priority=5, priority=5, gpus_per_replica=3, wanted=1), *extra]


def test_control_t_not_growing_v_reshuffles():
    for i, (_, out, running, _, _, _) in enumerate(_runs(_reshuffle([]), False, 3)):
        assert running == {("T", "t"): 3, ("V", "v1"): 0, ("V", "v3"): 1}, (i, _shares(out), running)


def test_held_a_cheap_lower_short_backend_freezes_vs_reshuffle_as_the_scheduler_alone_would():
    x = claim("T", "x", 7, class_priority=0, wanted=1)
    for i, (claims, out, running, _, _, _) in enumerate(_runs(_reshuffle([x]), False, 3)):
        assert running == {("T", "t"): 3, ("T", "x"): 0, ("V", "v1"): 1, ("V", "v3"): 0}, (i, _shares(out), running)
        assert all(ran == running for ran in _both_orders(claims, out)), running


@pytest.mark.parametrize("x_kw", [dict(unplaceable="no node"), dict(quota=0, quota_free=(("gpus", 0),))],
                         ids=["unplaceable", "quota-0"])
def test_held_a_backend_that_cannot_grow_freezes_nothing(x_kw):
    x = claim("T", "x", 7, class_priority=0, wanted=1, **x_kw)
    for i, (_, out, running, _, _, _) in enumerate(_runs(_reshuffle([x]), False, 3)):
        assert running[("V", "v3")] == 1 and running[("V", "v1")] == 0, (i, _shares(out), running)
        assert running[("T", "x")] == 0


def _pool(rng: random.Random) -> list:
    size = rng.randint(4, 12)
    cs = []
    for i in range(rng.randint(2, 6)):
        g = rng.choice([1, 2, 4])
        cur = rng.randint(0, 3)
        bound = rng.randint(0, cur)
        cs.append(claim(rng.choice("TVW"), f"b{i}", size, class_priority=rng.choice([0, 5, 10]),
                        priority=rng.randint(0, 5), gpus_per_replica=g, current=cur, held=cur, bound=bound,
                        wanted=rng.randint(0, 4), min_replicas=rng.randint(0, min(cur, 1))))
    return cs


@MODES
def test_held_skipping_the_first_judgement_changes_no_share(across, monkeypatch):
    rng, skipped = random.Random(42), 0
    for trial in range(200):
        cs = _pool(rng)
        if pool_mod._growth_above_waiting(cs):
            continue
        skipped += 1
        once, _ = share(cs, 1000.0, None, across)
        with monkeypatch.context() as m:
            m.setattr(pool_mod, "_growth_above_waiting", lambda members: True)
            twice, _ = share(cs, 1000.0, None, across)
        assert _shares(once) == _shares(twice), (trial, cs)
    assert skipped > 50

