"""Seventieth attacker pass on the GPU pool (the pod feed and share() driven together: rollout surge pods, pods that
change between the two reads, a slow scheduler). Seat: an independent attacker who did not write the code, as a
tenant (namespace T) who may create LLMBackends (any field the CRD allows) and bare pods in its own namespace and who
controls its own rollouts, attacking W (and X). Not aimed at one commit: 1606fd6. Time-boxed pass (2 cores beside
other work, about 35 minutes).

What was driven: pass 69's multi-sync driver (``Operator._share_pools`` over live pods, one ``operator`` kept across
syncs, ``now`` 30 s apart, the kube-scheduler model between syncs), extended (scratch: /tmp/atk70/drv69c.py,
fuzz70.py, grid70.py; here by a subclass of pass 69's ``_World``) with: T's rollouts (at a chosen sync T's spec
changes - the same template, another class lo/mid/hi, half or twice the GPUs a replica - and the new ReplicaSet's
surge pod never turns Ready: the old pods and the surge pod both stay, the surge pod re-created when preempted, the
loop's target naming the new class/GPUs at the Deployment's old count); a slow scheduler (acts at every k-th sync,
k = 1..3; or binds at most 1-2 pods a pass); verdicts whose lastTransitionTime lags (45 s, 120 s); pods changed
between the evaluation's read (``evaluated``, deep-copied) and the live lists (the scheduler binding in between; T
deleting its unbound bare pods; T deleting one of its backend's bound pods, re-created Pending by its ReplicaSet);
across mode with T's spec priority 0/5/10 kept (not zeroed as pass 69 did); plus pass 69's levers (bare pods gated,
pinned, of classes 0-1000, appearing and going; T's CPU hog on a node; an unread backend of T's).

Search (not kept as tests): (1) a directed grid of lever PAIRS: 16 feed levers (none, rollout same / class hi /
class lo / GPUs up / GPUs down, slow k=2, k=3, cap 1, lag 120, the scheduler between the reads, T's pod re-created
between the reads, CPU hog, a bare Pending pod at T's backend's size, a pinned class-1000 bare pod, T's backend
unread) x 8 share() levers (none, across with T's spec priority 10, T's floor 2, T's class hi, T's class equal to
W's, T's 4-GPU replicas, T wanting 3 more, across + priority 10 + floor 2) x 8 base scenes (seed 710, pools of 4-24
GPUs on 1-3 nodes): 1,024 scenes, judged strict as pass 69 (W+X below the scheduler alone in both backend orders, and
below it with T asking for what the pool gave T, and T above its own best alone, in each of the last 3 of 9 syncs):
8 hits. (2) A fuzz, seed 701, 1,500 scenes, all levers at random, the same strict judge: 33 hits. Each hit reduced
greedily (a lever turned off where the strict hit stays): 21 keep a rollout of T's (alone in 14; most of them a
class-raising one; a bind cap or the scheduler between the reads beside it in the rest), 8 reduce to T's pod deleted
and re-created between the two reads (a slow scheduler or a bind cap beside it in 3), 1 to the bind cap with the
scheduler between the reads (515), 2 to T's bare class-500 pods alone (1144, 1306) and 1 to across mode alone
(1419). The rollout hits re-judged against the scheduler alone with T asking for its rollout's class and GPUs from
the start (T may name any class; that is what it could get by asking): 13 of 21 are gone; 8 stay (701 trials 29,
86, 269, 351, 699, 882, 1216, 1291; 86 reduced below).

Classified:
(a) 701 trial 86 (``_rollout_scene``, probe ``test_held_a_stuck_class_raising_rollout_costs_w_what_the_turns_and_the_scheduler_do``):
pool 3 x 4, all of class mid; the pool's turns give T's t0 (1-GPU) its four replicas on n3 beside W's two 4-GPU pods
(the documented turns among equals; the scheduler alone gives W all 12: W's pods are older). T's stuck rollout to
class hi then makes a class-1000 surge pod, which the model's scheduler places by preempting W's pod on n1 (one
victim on every node; the model takes the first node, where the kube-scheduler would break the tie by the victims'
start times: a gap of the model, and a preemption the scheduler makes on its own, not the pool). W 8 -> 4, 3 GPUs of
n1 idle beside W's 4-GPU replica that fits nowhere. The pool made no cut: W's loss is the turns plus the scheduler's
own preemption for a class T may name. Not a finding.
(b) T's pod deleted and re-created Pending between the two reads (701 trials 123, 225, 250, 632, ..., grid
mid_recreate x gpr4): reduced (``_churn_scene``), T's churn only loses T GPUs in the scheduler alone (W's older
Pending pods take what it frees); with the pool W's growth without room is a waiting claim, no Pending pod, so the
churned GPUs go back to T's re-created pod: W gets what it gets without the churn in both (probes
``test_held_a_pod_re_created_between_the_two_reads_moves_nothing``, control
``test_control_without_the_churn_the_scheduler_alone_leaves_w_pending``). The strict judge counts T's self-harm in
the scheduler-alone run as W's due: a gap of the comparison, not a finding (pass 48 HELD (1) again, over syncs).
(c) Grid bare_hi_pin x (none, min2, cls_hi, cls_eq): T's pinned class-1000 bare pod preempts (the scheduler's own
act); when it goes, the GPUs go to T's replacement Pending pods (its preempted replicas, the Deployment unchanged),
older than any Pending pod of W's growth, which the pool holds as a claim without room: docs/autoscaling.md ("they
are Pending pods older than any a grant makes now, which the scheduler places first"); the scheduler alone keeps W's
growth Pending from sync 0, older than T's replacements. First come among equals with W's wait not being a pod (the
pool's grant-only-room rule), transient in 7 of 9 syncs of the scene; not a finding (at most low).
(d) The slow scheduler (k = 2, 3), the bind cap, lagging lastTransitionTimes and verdicts naming CPU/affinity on
some nodes: no hit reduced to one of them alone; where they stayed beside a rollout or the churn, turning them off
kept the hit (so they are not its cause) in all but 4 (trials 282, 351, 515, 791: k or the cap together with the
churn or a rollout; each W's growth Pending one or two syncs longer while T's pods bound first: first come among
equals under a slow scheduler, low). Pass 63 F1 (a slow scheduler and a verdict counting a CPU-refused node) was not
re-filed. (e) Across mode with T's spec priority 5/10 beside W's 0-10: no strict hit needed it (toggled off, every
across hit stayed or was a rollout hit above).

FINDINGS: none new (no high, no medium). The one shape the driver could not classify to the end in the time box:
the 8 rollout hits left after the re-judge were read for trial 86 only; the other 7 (trials 29, 269, 351, 699, 882,
1216, 1291 - a class-lowering or GPU-changing rollout in 29/882, class-raising the rest, some with the bind cap)
are listed here UNCLASSIFIED, not filed: each has T's surge pod at a class other than its running pods', i.e. pass
48 SUSPECTED (a) (a claim counted at its new class while its old pods run at the old pod priority). Nor were 1144,
1306 (T's class-500 bare pods) and 1419 (across mode alone) read: pass 69's shapes (b)/(d) by their levers, not
classified here.

PROBES: 3 test functions (3 pass, 0 xfail), through ``_share_pools`` with pass 69's scheduler model.

SUSPECTED, NOT SHOWN: (a) the 6 unclassified rollout hits above. (b) Verdicts naming host ports or volume zones
were not modelled (only CPU and node affinity, as pass 69). (c) A rollout that changes GPUs a replica while the
old RS scales: the model scales the old ReplicaSet only (the Deployment's proportional scaling not modelled).

A probe that holds asserts the safe behaviour and passes; one that breaks asserts the safe behaviour and is a strict
xfail naming the finding.
"""

from __future__ import annotations

import copy

from test_pool_attack48 import _rs_pod
from test_pool_attack57 import _stamp
from test_pool_attack69 import CLASSES, _syncs, _World


class _World70(_World):
    """Pass 69's cluster, plus: T's stuck rollout (``rollout``: sync index -> (key, new class): the new ReplicaSet's
    surge pod, re-created when preempted, the backend's spec naming the new class while the old pods keep the old
    one), and T's pod deleted and re-created Pending between the evaluation's read and the live read (``churn``)."""

    def __init__(self, nodes, backends, rollout=None, churn=None):
        self.rollout, self.churn, self.calls, self.surges, self.old_cls = dict(rollout or {}), churn, 0, {}, {}
        super().__init__(nodes, backends)

    def make(self, key, now):
        if key in self.old_cls:  # the old ReplicaSet's pods keep the old class
            b = self.backends[key]
            cls, b["cls"] = b["cls"], self.old_cls[key]
            try:
                super().make(key, now)
            finally:
                b["cls"] = cls
        else:
            super().make(key, now)

    def _surge(self, key, cls, now):
        self.seq += 1
        pod = _rs_pod(
            key[0],
            key[1],
            f"{key[1]}-new-{self.seq}",
            self.backends[key]["gpr"],
            None,
            template="new",
            priority=CLASSES.get(cls, 0),
        )
        pod["metadata"]["creationTimestamp"] = _stamp(now)
        pod["status"] = {"phase": "Pending"}
        self.made[pod["metadata"]["name"]] = now
        self.pods.append(pod)

    def mine(self, key):
        pods = super().mine(key)
        if self.churn == key and not getattr(self, "_reconciling", False):
            seen = copy.deepcopy(pods)  # the evaluation's read; then T deletes a bound pod, re-created Pending
            bound = [p for p in pods if p["spec"].get("nodeName")]
            if bound:
                self.pods.remove(bound[0])
                self.make(key, max(self.made.values()) + 0.5)
            return seen
        return pods

    def reconcile(self, desired, now):
        self._reconciling = True
        try:
            old = {
                k: [
                    p
                    for p in self.pods
                    if p["metadata"]["labels"].get("pod-template-hash") == "new"
                    and (p["metadata"]["namespace"], p["metadata"]["labels"]["llmbackend.dev/backend"]) == k
                ]
                for k in self.surges
            }
            for pods in old.values():
                for p in pods:
                    self.pods.remove(p)
            super().reconcile(desired, now)
            for k, pods in old.items():
                self.pods.extend(pods)
                if not pods:  # preempted: the new ReplicaSet makes it again
                    self._surge(k, self.surges[k], now)
        finally:
            self._reconciling = False

    def schedule(self, now):
        if self.calls in self.rollout:
            key, cls = self.rollout[self.calls]
            self.old_cls[key], self.surges[key] = self.backends[key]["cls"], cls
            self.backends[key]["cls"] = cls  # the spec (the loop's target) names the new class
            self._surge(key, cls, now - 1)
        self.calls += 1
        super().schedule(now)


def _rollout_scene(rollout=True):
    """701 trial 86, reduced: pool n1/n2/n3 (4 GPUs each), every class mid (500). W's w0 (4-GPU, spec priority 5,
    min 2) and w1 (4-GPU, spec priority 10, min 1) start at 0; T's t0 (1-GPU, min 1) starts at 0 and wants 4. At sync
    2 T's rollout moves t0 to class hi (1000); its surge pod never turns Ready."""
    return _World70(
        {"n1": 4, "n2": 4, "n3": 4},
        {
            ("W", "w0"): dict(gpr=4, prio=5, cls="mid", min=2, wanted=2, cur=0),
            ("W", "w1"): dict(gpr=4, prio=10, cls="mid", min=1, wanted=1, cur=0),
            ("T", "t0"): dict(gpr=1, prio=5, cls="mid", min=1, wanted=4, cur=0),
        },
        rollout={3: (("T", "t0"), "hi")} if rollout else None,
    )


def test_held_a_stuck_class_raising_rollout_costs_w_what_the_turns_and_the_scheduler_do(monkeypatch):
    """Without the rollout the pool's turns give T its four 1-GPU replicas (W 8 of 12: the documented turns among
    equals). With it, T's class-1000 surge pod preempts W's one pod on n1 - the scheduler's own preemption for a class
    T may name, one victim on every node (the model takes the first; the kube-scheduler breaks the tie by start
    time) - and the pool cuts nothing of W's: W ends at 4, where T asking for class hi from the start gets W to 8 in
    the model only because T's pods then preempt at sync 0, before the turns."""
    assert _syncs(monkeypatch, _rollout_scene(rollout=False), 6) == 8
    world = _rollout_scene()
    assert _syncs(monkeypatch, world, 6) == 4
    # the pool's decisions never went below what W ran before the rollout: the loss is the scheduler's preemption
    assert sorted(p["metadata"]["name"].split("-")[0] for p in world.pods if p["spec"].get("nodeName")) == [
        "t0",
        "t0",
        "t0",
        "t0",
        "t0",
        "w1",
    ]


def _churn_scene(churn):
    """701 trial 632, reduced: pool n1 (8 GPUs), both of class lo (100). W's w0 (2-GPU, min 1) starts at 0 and wants
    3; T's t0 (2-GPU, spec priority 10, min 2) runs 4 and wants 5 (the node full). ``churn``: each sync T deletes
    one of t0's bound pods between its evaluation's read and the live read; its ReplicaSet re-creates it Pending."""
    return _World70(
        {"n1": 8},
        {
            ("W", "w0"): dict(gpr=2, prio=0, cls="lo", min=1, wanted=3, cur=0),
            ("T", "t0"): dict(gpr=2, prio=10, cls="lo", min=2, wanted=5, cur=4),
        },
        churn=("T", "t0") if churn else None,
    )


def test_control_without_the_churn_the_scheduler_alone_leaves_w_pending(monkeypatch):
    """The scheduler alone, no churn: T's four pods hold the node, W's equal pods wait: W 0."""
    assert _syncs(monkeypatch, _churn_scene(False), 6, pool=False) == 0


def test_held_a_pod_re_created_between_the_two_reads_moves_nothing(monkeypatch):
    """With the pool, W gets what it gets without T's churn (0: no room at equal class; its growth a waiting claim,
    no Pending pod), churn or not; the evaluation's stale read (T's pod bound) beside the live one (Pending) grants
    T nothing more and cuts nothing of W's (pass 48 HELD (1), over six syncs). The strict judge's hit was the
    scheduler-alone run, where T's churn hands its GPUs to W's older Pending pods: T's self-harm, not W's due."""
    assert [_syncs(monkeypatch, _churn_scene(c), 6) for c in (False, True)] == [0, 0]
