"""What a namespace's ResourceQuota on GPUs admits, and the pool claiming no more (autoscaling/pool.py)."""

from __future__ import annotations

from llmbackend.autoscaling.pool import Claim, quota_replicas, share

POOL = ("H100", "gpu-a")


def _quota(hard: int, used: int, key: str = "requests.nvidia.com/gpu", **spec: object) -> dict:
    return {"spec": {"hard": {key: str(hard)}, **spec}, "status": {"used": {key: str(used)}}}


def _pods(n: int, gpus: int = 1, phase: str = "Running") -> list[dict]:
    return [{"metadata": {"name": f"p{i}"}, "status": {"phase": phase},
             "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}} for i in range(n)]


def test_what_a_quota_admits_counts_the_backends_own_pods_and_the_free_gpus() -> None:
    assert quota_replicas([], _pods(2), 1, None) is None                      # no quota: no cap
    assert quota_replicas([_quota(8, 2)], _pods(2), 1, None) == 8             # its 2 + 6 free
    assert quota_replicas([_quota(8, 6)], _pods(2), 2, None) == 2             # 4 GPUs: two replicas of 2
    assert quota_replicas([_quota(8, 8)], _pods(2), 1, None) == 2             # another backend holds the rest
    assert quota_replicas([_quota(4, 9)], _pods(2), 1, None) == 2             # lowered below what is used
    assert quota_replicas([_quota(8, 2), _quota(3, 2)], _pods(2), 1, None) == 3  # the least of them
    assert quota_replicas([_quota(8, 2)], _pods(2, phase="Failed"), 1, None) == 6  # ended pods hold nothing
    assert quota_replicas([_quota(8, 0, key="pods")], _pods(2), 1, None) is None   # not a GPU quota


def test_a_quota_of_a_priority_class_applies_to_that_class_only() -> None:
    gold = {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                                    "values": ["gold"]}]}}
    assert quota_replicas([_quota(4, 0, **gold)], [], 1, "gold") == 4
    assert quota_replicas([_quota(4, 0, **gold)], [], 1, "silver") is None
    assert quota_replicas([_quota(4, 0, **gold)], [], 1, None) is None
    assert quota_replicas([_quota(4, 0, scopes=["BestEffort"])], [], 1, None) is None  # GPU pods are not BestEffort
    assert quota_replicas([_quota(4, 0, scopes=["NotTerminating"])], [], 1, None) == 4


def _claim(ns: str, name: str, *, current: int, wanted: int, priority: int = 0, quota: int | None = None) -> Claim:
    return Claim(namespace=ns, name=name, pool=POOL, pool_gpus=8, priority=priority, current=current, wanted=wanted,
                 min_replicas=0, gpus_per_replica=1, cluster_wide=True, class_priority=priority, held=current,
                 quota=quota)


def test_the_pool_grants_no_more_than_the_quota_admits_and_says_so() -> None:
    shares, _ = share([_claim("tenant", "a", current=4, wanted=8, priority=1000, quota=4),
                       _claim("other", "v", current=4, wanted=4)], 1000.0)
    assert shares[("other", "v")].replicas == 4 and shares[("other", "v")].preempted_by is None
    mine = shares[("tenant", "a")]
    assert mine.replicas == 4 and mine.unplaceable
    assert "ResourceQuota on GPUs admits 4 replica(s)" in (mine.waiting_for_capacity or "")


def test_a_quota_below_what_a_backend_runs_never_scales_it_down() -> None:
    shares, _ = share([_claim("tenant", "a", current=6, wanted=8, quota=3)], 1000.0)
    assert shares[("tenant", "a")].replicas == 6


def test_free_gpus_within_the_quota_are_still_granted() -> None:
    shares, _ = share([_claim("tenant", "a", current=2, wanted=8, quota=5)], 1000.0)
    assert shares[("tenant", "a")].replicas == 5
