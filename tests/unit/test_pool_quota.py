"""What a namespace's ResourceQuota on GPUs admits, and the pool claiming no more (autoscaling/pool.py)."""

from __future__ import annotations

from llmbackend.autoscaling.pool import Claim, share
from llmbackend.autoscaling.quota import quota_replicas

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


def test_the_loop_reads_the_namespaces_quotas_and_caps_the_claim_and_says_why(monkeypatch, caplog) -> None:
    """run.py _share_pools: the tenant's backend of class gold (1000) wants 8 on a pool where another namespace's
    class-less backend holds 4; the tenant's quota of 4 GPUs is used by its 4 pods. Its claim stops at 4 and status
    says why; with the quotas unreadable, nothing caps it (the log says so)."""
    import asyncio

    from test_autoscale_loop import _pool_target, _wanting
    from test_backoff import _operator, _priority_classes

    operator = _operator()
    targets = {("tenant", "a"): _pool_target("tenant", "a", 4, priority_class="gold"),
               ("other", "v"): _pool_target("other", "v", 4)}
    operator.scalers = {key: {"pods": _pods(4)} for key in targets}  # the pods of each one's last evaluation
    quotas = {"tenant": [_quota(4, 4)], "other": []}
    monkeypatch.setattr(operator, "_held", lambda key, target, pods, fits=None: asyncio.sleep(0, result=target.current_replicas))

    def listed(kind, namespace=None, label_selector=None, field_selector=None):
        assert kind == "ResourceQuota"
        if quotas is None:
            raise OSError("forbidden")
        return quotas[namespace]

    monkeypatch.setattr(operator.kube, "list", listed)
    _priority_classes(monkeypatch, operator, {"gold": 1000})
    operator.uncapped = {("tenant", "a"): _wanting(8), ("other", "v"): _wanting(4)}
    asyncio.run(operator._share_pools(targets))
    mine, other = operator.state.decisions[("tenant", "a")], operator.state.decisions[("other", "v")]
    assert (mine.desired_replicas, other.desired_replicas) == (4, 4)
    assert "ResourceQuota on GPUs admits 4 replica(s)" in mine.message and not other.extra.get("preemptedBy")

    quotas = None  # the quotas cannot be read: the claim is not capped (the class takes from the other, as before)
    operator.uncapped = {("tenant", "a"): _wanting(8), ("other", "v"): _wanting(4)}
    asyncio.run(operator._share_pools(targets))
    assert operator.state.decisions[("tenant", "a")].desired_replicas == 8
    assert "not readable for the GPU pool share" in caplog.text


def test_a_backend_whose_pods_are_not_read_yet_is_still_capped_by_its_namespace_s_quota(monkeypatch) -> None:
    """Seen in a side-by-side run: the tenant's backend had no evaluation with pods yet (new, or its evaluation still
    running), and its claim went uncapped for a pass: it took a replica from another namespace for pods the quota then
    refused. Its pods unread count as none (the quota's used GPUs still count them): growth waits, nobody is drained."""
    import asyncio

    from test_autoscale_loop import _pool_target, _wanting
    from test_backoff import _operator, _priority_classes

    operator = _operator()
    targets = {("tenant", "a"): _pool_target("tenant", "a", 4, priority_class="gold"),
               ("other", "v"): _pool_target("other", "v", 4)}
    operator.scalers = {("other", "v"): {"pods": _pods(4)}}  # the tenant's backend: no evaluation with pods yet
    monkeypatch.setattr(operator, "_held", lambda key, target, pods, fits=None: asyncio.sleep(0, result=target.current_replicas))
    monkeypatch.setattr(operator, "_pool_pods", lambda key, target, pods: asyncio.sleep(0, result=pods))
    quotas = {"tenant": [_quota(4, 4)], "other": []}
    monkeypatch.setattr(operator.kube, "list", lambda kind, namespace=None, **_: quotas[namespace])
    _priority_classes(monkeypatch, operator, {"gold": 1000})
    operator.uncapped = {("tenant", "a"): _wanting(8), ("other", "v"): _wanting(4)}
    asyncio.run(operator._share_pools(targets))
    mine, other = operator.state.decisions[("tenant", "a")], operator.state.decisions[("other", "v")]
    assert other.desired_replicas == 4 and not other.extra.get("preemptedBy"), other
    assert mine.desired_replicas == 4, mine
