"""Seventy-first attacker pass on the GPU pool (pass 70's unclassified hits: T's class-changing rollouts, T's
class-500 bare pods, across mode). Seat: an independent attacker who did not write the code, as a tenant (namespace
T) who may create LLMBackends (any CRD field) and bare pods in its own namespace and who controls its own rollouts,
attacking W (and X). Not aimed at one commit: a848052 (HEAD with d04923b, ``floors_drawn_before``). Time-boxed pass
(2 cores beside a CI run, about 35 minutes).

What was driven: pass 70's scratch drivers (/tmp/atk70, copied to /tmp/atk71 and pointed at this tree: the
production loop ``Operator._share_pools`` over live pods, one ``operator`` across 9 syncs 30 s apart, pass 69's
scheduler model between syncs, pass 70's stuck rollouts, bind cap, reads-apart levers). Each of the 10 hits re-run
on HEAD with its full levers and with pass 70's reduced levers (red701.txt): all 10 still hit the strict judge.
Then re-judged (scratch recheck2.py) against the scheduler alone where T asks, from the start, for its rollout's
class and GPUs a replica AND for as many replicas as the GPUs its backend held under the pool (surge pod included:
a stuck rollout's surge pod is a replica's worth of GPUs T could have asked for as one replica more; pass 70's
re-judge asked only for the loop's decision, so it left the surge pod's GPUs as T's gain). Then a fresh fuzz of the
class-changing rollout shape (scratch fuzz71.py, seed 711, 3,000 scenes: pools 8-24 GPUs on 1-3 nodes, 1-2 backends
of W, 0-1 of X, 1-2 of T, T's rollout to another class (none/lo/mid/hi) and/or 1/2/4 GPUs a replica at sync 0-2,
stuck, or completing at sync 4/5 (old pods replaced by Pending pods of the new template, the surge kept), across
mode in 30%; the same strict judge plus the asking re-judge): stopped for time after about 1,900 scenes (trial
1873), 12 hits (trials 89, 125, 282, 422, 851, 1126, 1222, 1506, 1612, 1762, 1769, 1873).

Pass 70's hits, classified (each lever toggled on HEAD, scratch v29/v882/v882b/vb.py):
- 269, 351, 699, 1291 (rollout; 351 same template with the bind cap, 1291 to class lo at 2 GPUs, 269/699 to class
  hi): something T could get by asking for it. Against T asking its rollout's class/GPUs with the replicas its GPUs
  under the pool make (surge included), W gets no more in either backend order (269: 14 vs 14/14; 351: 0 vs 1/0;
  699: 0 vs 0/0; 1291: 6 vs 6/6). In 699 the pool does cut W's running class-100 pod for T's claim counted at class
  1000 whose new pods come at 100 (pass 48 SUSPECTED (a)'s shape), but T asking class hi with 4 replicas takes the
  same 16 GPUs through the scheduler's own preemption (probe ``test_held_a_class_raising_stuck_rollout_...``).
- 29 (rollout to class lo, 1 GPU): the documented turns among equals. The hit stays without the rollout (pool W 5,
  scheduler alone 7 / 6 by backend order): W and T at class mid split 11 of 12 GPUs by the namespace turns (W 5, T 6)
  where the model's scheduler places equal-age Pending pods in list order; the rollout's 1-GPU surge only fills the
  odd GPU W's 2-GPU replica cannot use (probe ``test_held_29_is_the_turns_without_any_rollout``).
- 882, 1216 (rollout to class lo / hi, across mode): across mode (admin opt-in, docs/autoscaling.md "the pod
  priority first and then the priority, for backends of every namespace") and T could get it by asking: gone in
  default mode (882: 4/4/4; 1216: 4/4/4); with T's backend at the new class from the start the pool in across mode
  cuts W the same (882: 2; 1216: 0). The rollout leaves T's GPUs at the old, lower pod priority: weaker for T, not a
  gain.
- 1419 (across alone): across mode cutting X's class-0 (spec priority 0) pods for T's spec priority 10 at the same
  pod priority: the documented across mode (default mode: X keeps, 5/5/4; no probe kept).
- 1144 (T's class-500 bare pods, come and go): T's self-harm counted as W's due (pass 70 (b)'s gap of the
  comparison): without the bare pods pool and scheduler alone both give W 7; in the scheduler alone the bare pods
  preempt T's own 4-GPU pod, whose replacement lands after W's growth Pending since sync 0; the pool (which held W's
  growth as a waiting claim, no Pending pod, for lack of room) returns to the pre-bare state, W 7. The pool never cut
  W (its decision for W constant).
- 1306 (T's class-500 bare pod stays): the scheduler's own preemption for a class T may name, with the victim among
  equal-priority, equal-age class-100 pods of W and T a tie the model breaks by list order (a gap of the model: the
  kube-scheduler's tie is not a namespace's), the pool's decision for W never lowered.

FINDINGS: none filed (no high, no medium).

Fresh fuzz hits (seed 711), levers toggled one at a time (scratch an71.py), NOT classified in the time box: 89 read
(SUSPECTED (a) below); 422, 1126, 1762 gone with across mode off (likely the documented across rank, as 882/1216);
125, 282, 1222, 1506, 1612, 1769, 1873 gone when the rollout does not complete (stuck: no hit) and with no rollout:
they need T's COMPLETING rollout, which the scratch model makes by deleting all old pods at once and re-creating them
Pending at the new template in both runs (likely pass 70 (b)/(c): T's own churn handing the scheduler-alone run's
older Pending pods of W the GPUs, W's wait under the pool being a claim, not a pod; not shown); 851 stays with no
rollout and in default mode (not read at all).

SUSPECTED, NOT SHOWN: (a) 711 trial 89 (default mode too): pool 3 x 4; W's w0 (class mid, 4-GPU, min 2) runs 1 on
n1, W's w1 (class-less, 2-GPU, min 2) runs 3 (n2 full, one on n3); T's class-less 4-GPU t0 (min 2, none running)
rolls to 2-GPU replicas at sync 0: its 2-GPU surge pod (pod priority 0) waits. The pool cuts w1's youngest pod on n2
for w0's growth (W's own reshuffle: the scheduler alone preempts w1's one pod on n3, where 2 GPUs are free, and
leaves none free); the cut frees 2 GPUs on n2 beside 2 free on n3, no node with 4, so w0's pod preempts a second w1
pod and T's surge pod, older than w1's re-created pod at the same pod priority, takes n3's 2: W 12 -> 10, lasting.
Shape of pass 48 finding 1 (a surge pod takes what W's own reshuffle freed), here through fragmentation (the cut's
victim is the youngest pod, not the one on the node the taker will land on) rather than the surge's accounting.
Not reduced, not tried with a bare pod instead of the surge; at most low-medium if it holds. (b) The completing
rollout hits and 851 above. (c) The rollout model
scales the old ReplicaSet only (proportional scaling not modelled), as pass 70.

PROBES: 2 test functions (both pass), through ``_share_pools`` with pass 69's scheduler model and pass 70's rollout
world.

A probe that holds asserts the safe behaviour and passes; one that breaks asserts the safe behaviour and is a strict
xfail naming the finding.
"""

from __future__ import annotations

from test_pool_attack69 import _syncs, _World
from test_pool_attack70 import _World70


def _raising_scene(rollout=True, t_cls="lo", t_wanted=3):
    """701 trial 699, as pass 70's world holds it: pool n1 (16 GPUs); W's w0 (4-GPU, class lo, spec priority 5)
    runs 1 and wants 2; T's t0 (4-GPU, class lo) runs 2 and wants 3; T's rollout to class hi after sync 0 is stuck."""
    return _World70(
        {"n1": 16},
        {
            ("W", "w0"): dict(gpr=4, prio=5, cls="lo", min=0, wanted=2, cur=1),
            ("T", "t0"): dict(gpr=4, prio=0, cls=t_cls, min=0, wanted=t_wanted, cur=2),
        },
        rollout={1: (("T", "t0"), "hi")} if rollout else None,
    )


def test_held_a_class_raising_stuck_rollout_leaves_w_what_t_asking_for_the_class_leaves_it(monkeypatch):
    """With the stuck rollout T holds 3 class-100 pods and a class-1000 surge pod (16 GPUs with W's 4: W keeps 4 of
    the 8 it has without the rollout). T asking class hi with 4 replicas from the start gets all 16 through the
    scheduler alone (W 0): the rollout gets T no more than asking."""
    assert _syncs(monkeypatch, _raising_scene(rollout=False), 6) == 8
    assert _syncs(monkeypatch, _raising_scene(), 6) == 4
    assert _syncs(monkeypatch, _raising_scene(rollout=False, t_cls="hi", t_wanted=4), 6, pool=False) == 0


def _turns_scene():
    """701 trial 29 without its rollout: pool n1/n2/n3 (4 GPUs each); W's w0 (1-GPU, class mid, spec priority 10)
    and w1 (2-GPU, mid) start at 0, want 1 and 3; T's t0 (2-GPU, class lo) runs 2, T's t1 (2-GPU, mid) runs 1, each
    wants 3."""
    return _World(
        {"n1": 4, "n2": 4, "n3": 4},
        {
            ("W", "w0"): dict(gpr=1, prio=10, cls="mid", min=0, wanted=1, cur=0),
            ("W", "w1"): dict(gpr=2, prio=0, cls="mid", min=0, wanted=3, cur=0),
            ("T", "t0"): dict(gpr=2, prio=10, cls="lo", min=0, wanted=3, cur=2),
            ("T", "t1"): dict(gpr=2, prio=10, cls="mid", min=0, wanted=3, cur=1),
        },
    )


def test_held_29_is_the_turns_without_any_rollout(monkeypatch):
    """No rollout at all: the pool's namespace turns at class mid give W 5 (w0 1 + w1 2) and T's t1 3, where the
    model's scheduler alone places W's equal-age Pending pods first (W 7): the documented turns among equals."""
    assert _syncs(monkeypatch, _turns_scene(), 6) == 5
    assert _syncs(monkeypatch, _turns_scene(), 6, pool=False) == 7
