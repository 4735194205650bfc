"""Twenty-sixth attacker pass on the GPU pool (autoscaling/pool.py ``share``/``feeds_others``/``next_waiting``/
``third_waits``/``room_for``/``older_waiting``/``_UnclaimedPods``), as a tenant who may edit LLMBackends in its own
namespace and create pods there. Aimed at 418ebf5 (pass 25's fixes): step 2's whole-replica check for every cut of a
running replica (following the waiting replicas in line as cuts free GPUs), pods no claim covers counted only when
they fit in what a cut frees beside the idle GPUs, and judged mode skipping while such pods wait. Shares are fed back
sync after sync through a kube-scheduler model (tests/unit/pool_scheduler.py's, extended: bare pods carry a pod
priority and, like claimed pods, are preempted by a higher one; the pool is one bin of GPUs; among pods of one
priority the bare pods are the oldest; a pod that does not fit preempts lower pod priorities, the lowest first and in
claim order, only when that makes it fit). The counterfactual "the scheduler alone" is the same model with every
backend at its wanted replicas.

Summary: one finding.
High (theft, both modes, no forgery, no class for the tenant; rests on the scheduler model's choice of victims):
step 3 treats GPUs granted to Pending replicas of a *lower* pod priority as held, so a higher class that grows cuts a
running replica of another namespace although GPUs step 2 already freed this pass would place its pods first (the
kube-scheduler places a class-5 pod before priority-0 Pending pods). Pool 6: t runs one 4-GPU replica, a runs two
1-GPU replicas, c (class 5, 1-GPU replicas) waits 1 and wants 3; the tenant d holds two Pending 2-GPU replicas
(priority 0). Step 2 cuts t (4 GPUs) for c's waiting replica (3 left over), step 3 then cuts a to 0 for c's other
two replicas; c runs 3 and the tenant's Pending replica runs on a's GPUs (a 2 -> 0, d 0 -> 1). The scheduler alone
preempts t for c and a keeps both replicas; d stays Pending. Without d's Pending replicas a keeps its GPUs. The same
with a third namespace's bare 1-GPU pods instead of d's replica (they get 3 GPUs, not 1), and the fuzz over 1/2/4-GPU
replicas finds it on its own. The documented "the Pending replicas of a backend it outranks are cut first" does not
hold in step 3 for victims of a lower pod priority (``fit()`` skips a victim that runs nothing). Smallest fix: in step
3, before cutting a running replica for c, count as usable (clear) the grants of Pending replicas of pod priorities
below c's (exact mode: ``waiting_gpus.pod_priority_below(c)``), as step 3 already clears those of c's pod priority.
Sound: without the lower Pending backend the same pool keeps a's replicas (control); step 2 feeds no third
namespace's bare pod of a lower priority and stops for one of the taker's pod priority that fits; a 4-GPU bare pod
with no idle GPU does not freeze a namespace's 1-GPU reshuffle (step 2 and step 3) while a 1-GPU one does; a class
waiting a 2-GPU replica is not fed by one GPU cut (both modes); a fuzz of 200 pools of 1-GPU and of 1/2-GPU replicas
(classes, unread claims, judged pools, bare pods of 1/2/4 GPUs and priorities 0/5 in every namespace) keeps floors,
settles and feeds no bare pod beyond what the scheduler alone would give; ``share`` with 400 waiting class replicas
and 2,000 bare pods of 8 sizes costs no more than with one size, and scales about linearly.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s
from pool_scheduler import bare_gain_within_scheduler_alone, claim

from llmbackend.autoscaling.pool import Claim, Unclaimed, share

POOL = ("gpu",)


def _scheduled(claims: list[Claim], out: dict, bare) -> dict:
    """pool_scheduler.scheduled with bare pods ``(namespace, GPUs, running, waiting, pod priority)`` that a higher
    pod priority preempts like any pod."""
    pool = claims[0].pool_gpus
    running = {c.key: min(out[c.key].replicas, c.bound or 0) for c in claims}
    for i, (_, _, r, _, _) in enumerate(bare):
        running[("bare", i)] = r
    queue = []
    for i, (_, g, _, w, p) in enumerate(bare):
        queue += [(-p, 0, -1, ("bare", i), g)] * w
    for i, c in enumerate(claims):
        older = max(0, min(out[c.key].replicas, c.current if c.held is None else c.held) - running[c.key])
        queue += [(-c.scheduling_priority, 0, i, c.key, c.gpus_per_replica)] * older
        queue += [(-c.scheduling_priority, 1, i, c.key, c.gpus_per_replica)] * (
            out[c.key].replicas - running[c.key] - older)
    free = pool - sum(running[c.key] * c.gpus_per_replica for c in claims) - sum(r * g for _, g, r, _, _ in bare)
    for prio, _, _, key, g in sorted(queue, key=lambda e: e[:3]):
        if free < g:
            lower = sorted([(v.scheduling_priority, v.key, v.gpus_per_replica) for v in claims
                            if v.scheduling_priority < -prio and running[v.key] and v.gpus_per_replica > 0]
                           + [(p, ("bare", i), gg) for i, (_, gg, _, _, p) in enumerate(bare)
                              if p < -prio and running[("bare", i)]], key=lambda e: e[0])
            if free + sum(running[k] * gg for _, k, gg in lower) >= g:
                for _, k, gg in lower:
                    while running[k] and free < g:
                        running[k] -= 1
                        free += gg
        if free >= g:
            running[key] += 1
            free -= g
    return running


def _runs(claims: list[Claim], across: bool = False, syncs: int = 3, bare=(), seen=None, bound_read: bool = True,
          ages: bool = True):
    """Each sync: the shares (``seen``: the claims as the pool reads them), what the model runs after them, what ran
    before, and what it runs with every backend at its wanted replicas (the scheduler alone). ``bound_read``: the
    pool is told the GPUs the pods bound to its nodes hold (``share``'s ``in_use``: the claims' and the bare pods').
    ``ages``: the pool is told the pods' ages as the model has them (``_scheduled``: bare pods the oldest; a claim's
    Pending replicas since the sync it first had some, or before the first sync)."""
    state, now, bare = None, 1000.0, list(bare)
    before = {c.key: c.bound or 0 for c in claims} | {("bare", i): b[2] for i, b in enumerate(bare)}
    waiting_since = {c.key: now - 1 for c in claims}
    for _ in range(syncs):
        listed = {POOL: [Unclaimed(ns, p, g, 0.0 if ages else None) for ns, g, _, w, p in bare for _ in range(w)]}
        bound = {POOL: sum((c.bound or 0) * c.gpus_per_replica for c in claims)
                 + sum(g * r for _, g, r, _, _ in bare)} if bound_read else None
        by_priority: dict[int, int] = {}  # the bare pods that run, by pod priority (``bound_unclaimed``)
        for _, g, r, _, p in bare:
            by_priority[p] = by_priority.get(p, 0) + g * r
        read = [seen(c) if seen else c for c in claims]
        if ages:
            for c in claims:
                if c.bound is not None and (c.held if c.held is not None else c.current) <= c.bound:
                    waiting_since[c.key] = now  # none waits: its next Pending replica is new
            read = [dataclasses.replace(c, pending_since=waiting_since[c.key]) for c in read]
        out, state = share(read, now, state, across, listed, bound, {POOL: by_priority} if bound_read else None)
        running = _scheduled(claims, out, bare)
        alone = _scheduled(claims, {c.key: dataclasses.replace(out[c.key], replicas=max(c.wanted, c.min_replicas))
                                    for c in claims}, bare)
        yield claims, out, running, before, alone, bare
        before = dict(running)
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=running[c.key]) for c in claims]
        bare = [(ns, g, running[("bare", i)], r + w - running[("bare", i)], p)
                for i, (ns, g, r, w, p) in enumerate(bare)]
        now += 30.0


def _first(claims, **kw):
    return next(_runs(claims, syncs=1, **kw))


def _shares(out) -> dict:
    return {k: s.replicas for k, s in out.items()}


# --- (1) step 3: GPUs granted to Pending replicas of a lower pod priority count as held --------------------------

def _class_grows(tenant: bool) -> list[Claim]:
    """Pool 6: t runs one 4-GPU replica, a two 1-GPU ones (both priority 0); c (class 5, 1-GPU) waits 1, wants 3;
    ``tenant``: d (the tenant, priority 0) holds two Pending 2-GPU replicas."""
    cs = [claim("t", "t", pool_gpus=6, current=1, held=1, bound=1, wanted=1, gpus_per_replica=4),
          claim("a", "a", pool_gpus=6, current=2, held=2, bound=2, wanted=2),
          claim("c", "c", pool_gpus=6, class_priority=5, current=1, held=1, bound=0, wanted=3)]
    if tenant:
        cs.append(claim("d", "d", pool_gpus=6, current=2, held=2, bound=0, wanted=2, gpus_per_replica=2))
    return cs


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_control_without_a_lower_pending_backend_a_keeps_its_replicas(across):
    _, out, running, _, alone, _ = _first(_class_grows(False), across=across)
    assert running[("c", "c")] == 3 and running[("a", "a")] == 2 == alone[("a", "a")], (_shares(out), running)


# FINDING (high): step 3 cuts a's running replicas for c although the GPUs step 2 freed (granted to a lower Pending
# replica in the accounting) would place c's pods first; the tenant's Pending replica runs on a's GPUs.
# Fixed (was a strict xfail): FINDING (high, theft) step 3 counted GPUs granted to Pending replicas of a lower pod priority as held and cut another namespace's running replica for a higher class; known from the pods, those GPUs are the taker's room (pool.py room(): the scheduler places its pods first).
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_tenants_lower_pending_replica_does_not_run_on_gpus_a_class_took_from_another_namespace(across):
    _, out, running, _, alone, _ = _first(_class_grows(True), across=across)
    assert alone[("d", "d")] == 0 and alone[("a", "a")] == 2, alone
    assert running[("d", "d")] == 0 and running[("a", "a")] == 2, (_shares(out), running)


# Fixed (was a strict xfail): FINDING (high, theft) same cause, through a third namespace's bare pods; fixed with it.
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_third_namespace_bare_pods_get_no_more_than_the_scheduler_alone_gives(across):
    bare = [("x", 1, 0, 3, 0)]
    _, out, running, _, alone, _ = _first(_class_grows(True), across=across, bare=bare)
    assert alone[("bare", 0)] == 1, alone
    assert running[("bare", 0)] <= alone[("bare", 0)] and running[("a", "a")] == 2, (_shares(out), running)


# --- (2) step 2: the whole-replica rule and sizes of bare pods (regressions of passes 24-25) ----------------------

@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
@pytest.mark.parametrize("judged", [False, True], ids=["exact", "judged"])
def test_one_cut_gpu_does_not_feed_a_bare_pod_while_a_class_waits_a_2_gpu_replica(across, judged):
    cs = [claim("c", "c", pool_gpus=5, class_priority=5, gpus_per_replica=2, current=3, held=3, bound=2, wanted=3),
          claim("b", "b", pool_gpus=5, current=1, held=1, bound=1, wanted=1)]
    seen = (lambda c: dataclasses.replace(c, bound=None)) if judged else None
    for _, out, running, _, _, _ in _runs(cs, across=across, bare=[("t", 1, 0, 1, 0)], seen=seen):
        assert running[("bare", 0)] == 0 and running[("b", "b")] == 1, (_shares(out), running)


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_class_waiting_two_gpus_completed_by_two_cuts_feeds_no_lower_bare_pod(across):
    cs = [claim("c", "c", pool_gpus=6, class_priority=5, gpus_per_replica=2, current=3, held=3, bound=2, wanted=3),
          claim("b", "b", pool_gpus=6, current=2, held=2, bound=2, wanted=2)]
    for _, out, running, _, _, _ in _runs(cs, across=across, bare=[("t", 1, 0, 2, 0), ("x", 2, 0, 1, 0)]):
        assert running[("bare", 0)] == 0 == running[("bare", 1)], (_shares(out), running)
    assert running[("c", "c")] == 3, running


@pytest.mark.parametrize("step2", [True, False], ids=["step-2", "step-3"])
@pytest.mark.parametrize("size", [1, 4])
def test_a_bare_pod_stops_a_reshuffle_only_if_it_fits_what_the_cut_frees(step2, size):
    a1 = dict(current=1, held=1, bound=0) if step2 else {}
    cs = [claim("a", "a0", pool_gpus=4, current=4, held=4, bound=4, wanted=4),
          claim("a", "a1", pool_gpus=4, priority=5, wanted=1, **a1)]
    for _, out, running, _, _, _ in _runs(cs, bare=[("t", size, 0, 1, 0)]):
        assert running[("bare", 0)] == 0, (_shares(out), running)
    # a 1-GPU pod would take the freed GPU (the reshuffle waits); a 4-GPU one never could (it goes ahead)
    assert running[("a", "a1")] == (0 if size == 1 else 1), (_shares(out), running)


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_bare_pod_of_the_takers_pod_priority_stops_the_cut_and_a_lower_one_does_not(across):
    cs = [claim("c", "c", pool_gpus=4, class_priority=5, current=1, held=1, bound=0, wanted=1),
          claim("b", "b", pool_gpus=4, current=4, held=4, bound=4, wanted=4)]
    _, out, _, _, _, _ = _first(cs, across=across, bare=[("t", 1, 0, 1, 5)])
    assert _shares(out)[("b", "b")] == 4, _shares(out)
    _, out, running, _, _, _ = _first(cs, across=across, bare=[("t", 1, 0, 1, 0)])
    assert _shares(out)[("b", "b")] == 3 and running[("bare", 0)] == 0, (_shares(out), running)


# --- (3) fuzz: 1/2/4-GPU replicas, classes, unread claims, judged pools, bare pods of sizes and priorities ---------

def _fuzz_pool(rng: random.Random, sizes: list[int]):
    pool = rng.choice([3, 4, 6, 8])
    cs, used = [], 0
    for i in range(rng.randint(2, 6)):
        g = min(pool, rng.choice(sizes))
        cur = rng.randint(0, 3)
        bound = min(cur, max(0, (pool - used) // g))
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = rng.choice("tabc") if i else "t"
        cs.append(claim(ns, f"{ns}{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5]), current=cur, held=cur,
                        bound=bound, wanted=max(cur, minimum) + rng.randint(0, 2), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice([None, None, 5, 10])))
    return cs, pool, used


def _fuzz(seed: int, sizes: list[int], trials: int = 200) -> None:
    """Per sync: the bare pods of namespaces that lost no running replica gain no more GPUs than the scheduler alone
    gives them, or than were free plus what the model preempted (a namespace's own reshuffle, where every backend
    that grew is of the one namespace cut, is left out: its GPUs are its to give); floors hold; the last two syncs'
    shares are equal."""
    rng = random.Random(seed)
    for trial in range(trials):
        across = trial % 2 == 0
        cs, pool, used = _fuzz_pool(rng, sizes)
        judged = rng.random() < 0.2
        unread = {c.key for c in cs if judged or rng.random() < 0.25}

        def seen(c, unread=unread):
            return dataclasses.replace(c, bound=None) if c.key in unread else c
        bare = []
        for ns in rng.sample("tabcx", rng.randint(1, 3)):
            g = rng.choice([1, 2, 4])
            r = 1 if used + g <= pool and rng.random() < 0.3 else 0
            used += r * g
            bare.append((ns, g, r, rng.randint(1, 2), rng.choice([0, 0, 5])))
        shares = []
        # 8 syncs: a backend judged (not read) is cut a replica a sync while a replica of a higher pod priority waits
        # that its judged GPUs never free (seed 13, trial 102 settles on the 7th since Pending replicas nothing could
        # place no longer count as waiting; its end state is the same)
        for claims, out, running, before, alone, us in _runs(cs, across, 8, bare, seen):
            shares.append(_shares(out))
            assert bare_gain_within_scheduler_alone(pool, claims, out, running, before, alone, us), (
                trial, across, unread, claims, _shares(out), running, before, alone, us)
            for v in claims:
                assert out[v.key].replicas >= min(v.current, v.min_replicas) or out[v.key].preempted_by, (trial, v)
        assert shares[-1] == shares[-2], (trial, cs, bare, shares[-3:])


def test_fuzz_one_gpu_replicas_feed_no_bare_pod():
    _fuzz(11, [1])


def test_fuzz_one_and_two_gpu_replicas_feed_no_bare_pod():
    _fuzz(13, [1, 2])


# Fixed (was a strict xfail): FINDING (high, theft) the fuzz's find of the same shape; fixed with it.
def test_fuzz_one_two_and_four_gpu_replicas_feed_no_bare_pod():
    _fuzz(1, [1, 2, 4])


# --- (4) cost -----------------------------------------------------------------------------------------------------

def _cpu(claims, listed) -> float:
    return quiet_cpu_s(lambda: share(claims, 1000.0, None, False, listed))


def _waiting_line(n: int, sizes: list[int], pods: int = 2000):
    """n namespaces running 4 GPUs each, n class-5 backends of other namespaces each waiting a 2-GPU replica (the
    line ``next_waiting`` walks), and bare pods of 50 namespaces, 7 pod priorities and ``sizes``."""
    cs = [claim(f"b{i}", "b", pool_gpus=4 * n, current=4, held=4, bound=4, wanted=4) for i in range(n)]
    cs += [claim(f"c{i}", "c", pool_gpus=4 * n, class_priority=5, gpus_per_replica=2, current=2, held=2, bound=0,
                 wanted=2) for i in range(n)]
    return cs, {POOL: [Unclaimed(f"x{i % 50}", i % 7, sizes[i % len(sizes)]) for i in range(pods)]}


def test_many_bare_pod_sizes_cost_no_more_than_one_size_and_the_line_scales():
    one, many = _cpu(*_waiting_line(400, [1])), _cpu(*_waiting_line(400, list(range(1, 9))))
    small = _cpu(*_waiting_line(100, list(range(1, 9))))
    assert many <= 3 * one + 0.03, (one, many)
    assert many <= 8 * small + 0.03, (small, many)
