"""The operator's autoscale loop (controller/run.py) keeps going for every backend when one backend's scaler cannot
start, and a memory in status that cannot be resumed starts a new scaler rather than none."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_backoff import _operator, _priority_classes

from llmbackend.api.v1alpha1 import AutoscalingSpec
from llmbackend.autoscaling.decision import ScalerState
from llmbackend.controller import run
from llmbackend.controller.decide import AutoscaleTarget

MEMORY = {"watchingSince": "2026-12-04T10:00:00Z", "lastSeen": "2026-12-04T11:00:00Z"}


def _target(name: str, memory=None) -> AutoscaleTarget:
    return AutoscaleTarget("ns", name, AutoscalingSpec(enabled=True), "llm", f"llmbackend.dev/backend={name}", 1, None,
                           1, 8, memory=memory)


def test_a_scaler_that_does_not_start_stops_no_other_backend(monkeypatch):
    operator = _operator()
    operator.state.autoscale_targets.update({("ns", "bad"): _target("bad"), ("ns", "good"): _target("good")})
    real = operator._new_scaler

    def new_scaler(target):
        if target.name == "bad":
            raise RuntimeError("boom")
        return real(target)

    evaluated: list[tuple[str, str]] = []

    async def evaluate(key, target, scaler):
        evaluated.append(key)

    monkeypatch.setattr(operator, "_new_scaler", new_scaler)
    monkeypatch.setattr(operator, "_evaluate", evaluate)

    async def a_few_seconds() -> None:
        loop = asyncio.create_task(operator._autoscale_loop())
        await asyncio.sleep(2.5)
        assert not loop.done(), "the loop ended"
        loop.cancel()
        for scaler in operator.scalers.values():
            await run._close_scaler(scaler)

    asyncio.run(a_few_seconds())
    assert ("ns", "good") in evaluated and ("ns", "bad") not in evaluated
    assert set(operator.scalers) == {("ns", "good")}


def test_a_memory_that_breaks_resuming_starts_a_new_scaler(monkeypatch):
    def broken(*_args, **_kw):
        raise ValueError("a memory no one foresaw")

    async def new_scaler() -> ScalerState:
        scaler = _operator()._new_scaler(_target("b", MEMORY))
        await run._close_scaler(scaler)
        return scaler["state"]

    monkeypatch.setattr(ScalerState, "resumed", classmethod(broken))
    assert asyncio.run(new_scaler()) == ScalerState()


def test_a_new_scaler_resumes_the_memory_its_target_carries():
    now = time.time()
    current = {"watchingSince": _rfc3339(now - 3600), "lastSeen": _rfc3339(now - 60)}

    async def new_scaler(memory) -> ScalerState:
        scaler = _operator()._new_scaler(_target("b", memory))
        await run._close_scaler(scaler)
        return scaler["state"]

    assert asyncio.run(new_scaler(current)).since == pytest.approx(now - 3600, abs=1)
    assert asyncio.run(new_scaler(MEMORY)) == ScalerState()  # last seen long ago: the gap
    assert asyncio.run(new_scaler(None)) == ScalerState()


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@pytest.mark.parametrize("prometheus", [
    {"query": 'sum(kube_secret_info{namespace="finance"})'},   # stored before the field was removed
    {"activationQuery": 'sum(kube_secret_info{namespace="finance"})'},
    {"activationQueryName": "finance-secrets"},                # a name the admin did not define
])
def test_a_query_the_admin_did_not_write_is_held_and_nothing_is_queried(monkeypatch, prometheus):
    from llmbackend.api import conditions as cond
    from llmbackend.autoscaling.sources import PrometheusRatioSource

    operator = _operator()
    monkeypatch.setattr(run.egress.settings, "prometheus_urls", ("http://127.0.0.1:*",))
    monkeypatch.setattr(run.egress.settings, "prometheus_queries", {"waiting": 'sum(q{namespace="{namespace}"})'})
    spec = AutoscalingSpec.model_validate({"enabled": True, "minReplicas": 0, "source": "prometheus",
                                           "prometheus": {"url": "http://127.0.0.1:9", **prometheus}})
    target = AutoscaleTarget("ns", "b", spec, "llm", "llmbackend.dev/backend=b", 0, None, 1, 8)
    queried: list[str] = []

    async def record(self, query):
        queried.append(query)
        return {}

    monkeypatch.setattr(PrometheusRatioSource, "_query", record)
    monkeypatch.setattr(PrometheusRatioSource, "waiting", record)

    async def evaluate():
        scaler = operator._new_scaler(target)
        await operator._evaluate(("ns", "b"), target, scaler)
        await run._close_scaler(scaler)

    asyncio.run(evaluate())
    decision = operator.state.decisions[("ns", "b")]
    assert decision.reason == cond.PROMETHEUS_QUERY_NOT_ALLOWED and decision.current_ratio is None
    assert decision.desired_replicas == 0 and queried == []


def test_the_loop_reads_the_panic_window_and_reports_the_schedule_floor_in_status(monkeypatch):
    from llmbackend.autoscaling.ratio import RatioReading
    from llmbackend.autoscaling.sources import TritonScraper

    operator = _operator()
    spec = AutoscalingSpec.model_validate({
        "enabled": True, "maxReplicas": 3, "panic": {"enabled": True},
        # a start every minute and an end once a year: the floor holds (but in the first minute of the year)
        "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *", "timeZone": "Europe/Berlin", "desiredReplicas": 5}]})
    target = AutoscaleTarget("ns", "b", spec, "llm", "llmbackend.dev/backend=b", 1, None, 1, 8)
    pod = {"metadata": {"name": "p", "creationTimestamp": "2026-12-04T10:00:00Z"},
           "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
    monkeypatch.setattr(operator.kube, "list", lambda *a, **kw: [pod])
    windows: list[float] = []

    async def scrape(self, pods):
        return 0

    def reading(self, window_s, now=None):
        windows.append(window_s)
        return RatioReading(None, reason="NoSamples", pods_used=0)

    monkeypatch.setattr(TritonScraper, "scrape", scrape)
    monkeypatch.setattr(TritonScraper, "reading", reading)

    async def evaluate():
        scaler = operator._new_scaler(target)
        await operator._evaluate(("ns", "b"), target, scaler)
        await run._close_scaler(scaler)

    asyncio.run(evaluate())
    decision = operator.state.decisions[("ns", "b")]
    assert windows == [60, 22.5]  # the metrics window, then the panic window of the same scrapes
    assert decision.desired_replicas == 3  # the floor of 5, clipped to maxReplicas
    assert decision.extra["scheduleFloor"].startswith("schedule[0] (* * * * * to 0 0 1 1 *, Europe/Berlin) holds "
                                                      "minReplicas at 3 (desiredReplicas 5, at most maxReplicas)")
    assert decision.extra["panic"] is None  # no engine reading: no panic


def _pool_target(namespace: str, name: str, current: int, priority=None, priority_class=None) -> AutoscaleTarget:
    return AutoscaleTarget(namespace, name, AutoscalingSpec(enabled=True, max_replicas=8), "llm",
                           f"llmbackend.dev/backend={name}", current, 8, 1, 8, pool="H100/abc", pool_gpus=8,
                           priority=priority, priority_class=priority_class)


def _wanting(n: int) -> run.ScaleDecision:
    return run.ScaleDecision(n, "ForecastLoad", f"wants {n}", None, None)


def test_the_loop_caps_a_lower_priority_backend_for_a_higher_one_and_says_so_on_both():
    operator = _operator()
    targets = {("ns", "high"): _pool_target("ns", "high", 2, priority=10),
               ("ns", "low"): _pool_target("ns", "low", 6, priority=0)}
    operator.uncapped = {("ns", "high"): _wanting(8), ("ns", "low"): _wanting(6)}
    asyncio.run(operator._share_pools(targets))
    high, low = operator.state.decisions[("ns", "high")], operator.state.decisions[("ns", "low")]
    assert (high.desired_replicas, low.desired_replicas) == (7, 1)  # the low one keeps its minReplicas
    assert low.reason == "PreemptedBy" and low.extra["preemptedBy"] == "ns/high (priority 10): 5 replica(s)"
    assert "capped at 1 by the GPU pool shared by priority: preempted by ns/high" in low.message
    assert high.reason == "WaitingForCapacity"
    assert high.extra["waitingForCapacity"].startswith("1 replica(s), 1 GPU(s), of a pool of 8; held by ns/low")
    assert "took replica(s) from ns/low (priority 0): 5, drained first" in high.message


def test_a_tenant_priority_never_reaches_into_another_namespace_but_a_priority_class_does(monkeypatch):
    operator = _operator()
    reads: list[str] = []

    _priority_classes(monkeypatch, operator, {"critical": 1000, "batch": 0}, reads)
    targets = {("a", "high"): _pool_target("a", "high", 2, priority=1_000_000),
               ("b", "low"): _pool_target("b", "low", 6, priority_class="batch")}
    operator.uncapped = {("a", "high"): _wanting(8), ("b", "low"): _wanting(6)}
    asyncio.run(operator._share_pools(targets))
    assert operator.state.decisions[("b", "low")].desired_replicas == 6
    assert operator.state.decisions[("b", "low")].extra["preemptedBy"] is None
    targets[("a", "high")] = _pool_target("a", "high", 2, priority_class="critical")
    asyncio.run(operator._share_pools(targets))
    assert operator.state.decisions[("b", "low")].desired_replicas == 1
    # 5 replicas above its minReplicas, and the GPUs of the 1 left that the kube-scheduler preempts for a higher
    # class; status counts the other namespace's backend and does not name it
    assert operator.state.decisions[("b", "low")].extra["preemptedBy"] == "1 backend(s) of other namespaces: 6 replica(s)"
    asyncio.run(operator._share_pools(targets))
    assert reads == ["PriorityClass", "PriorityClass"]  # one list a pass with a name not read (PRIORITY_CLASS_TTL_S)


def test_a_class_whose_pods_no_node_of_the_pool_can_hold_takes_nothing_and_says_why(monkeypatch):
    # the attacker pass: a tenant with a class it may use and memory no node has drained another namespace once,
    # before any of its pods existed to be seen unplaceable
    operator = _operator()
    _priority_classes(monkeypatch, operator, {"gold": 1000, "bronze": 0})
    why = "no node of the pool can hold a serving pod: 0/1 nodes are available: 1 Insufficient memory"
    hog = _pool_target("tenant", "hog", 1, priority_class="gold")
    hog.unplaceable = why
    targets = {("tenant", "hog"): hog, ("prod", "model"): _pool_target("prod", "model", 8, priority_class="bronze")}
    operator.uncapped = {("tenant", "hog"): _wanting(8), ("prod", "model"): _wanting(8)}
    # a pod of it bound to a node (the model can be wrong: a node changed) still holds its GPU
    operator.scalers[("tenant", "hog")] = {"pods": [{"metadata": {"name": "hog-0"}, "spec": {}}]}
    asyncio.run(operator._share_pools(targets))
    model, hog_decision = operator.state.decisions[("prod", "model")], operator.state.decisions[("tenant", "hog")]
    assert model.desired_replicas == 8 and model.extra["preemptedBy"] is None
    assert hog_decision.desired_replicas == 1 and hog_decision.reason == "WaitingForCapacity"
    assert hog_decision.extra["waitingForCapacity"] == f"8 replica(s) not claimed from the GPU pool: {why}"
    assert hog_decision.message.endswith(f"capped at 1 by the GPU pool shared by priority: 8 replica(s) not claimed "
                                         f"from the GPU pool: {why}")
    operator.scalers[("tenant", "hog")] = {"pods": [{
        "metadata": {"name": "hog-0", "labels": {"pod-template-hash": "h"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "hog-h", "uid": "rs", "controller": True}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "server",
                                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}]}
    asyncio.run(operator._share_pools(targets))
    assert operator.state.decisions[("prod", "model")].desired_replicas == 7, "its bound pod's GPU is held"


def test_replicas_given_up_for_another_backend_go_least_busy_first(monkeypatch):
    from llmbackend.autoscaling.sources import TritonScraper

    operator = _operator()
    targets = {("ns", "high"): _pool_target("ns", "high", 2, priority=10),
               ("ns", "low"): _pool_target("ns", "low", 6, priority=0)}
    pods = [{"metadata": {"name": f"low-{i}"}} for i in range(6)]
    source = TritonScraper("llm")
    monkeypatch.setattr(source, "in_flight_by_pod", lambda: {"low-0": 3.0, "low-1": 0.0})
    operator.scalers[("ns", "low")] = {"source": source, "pods": pods}
    costs: list[tuple] = []
    monkeypatch.setattr(operator, "_set_deletion_costs",
                        lambda ns, p, in_flight, first: costs.append((ns, p, in_flight, first)))
    operator.uncapped = {("ns", "high"): _wanting(8), ("ns", "low"): _wanting(6)}
    asyncio.run(operator._share_pools(targets))
    # (no pod bound to a node of the pool: none makes the room first, drain.room_first)
    assert costs == [("ns", pods, {"low-0": 3.0, "low-1": 0.0}, {})]
    assert operator.state.decisions[("ns", "low")].desired_replicas == 1
    asyncio.run(_close_source(source))


async def _close_source(source) -> None:
    await run._close_scaler({"source": source})


def prometheus_evaluation(monkeypatch, operator, key, replicas, pods, written):
    """A backend at 3 replicas whose Prometheus source reads nothing (its decision: ``replicas``, its min and max),
    over ``pods``; the annotations the operator writes go to ``written``. Returns its target."""
    from llmbackend.autoscaling.sources import PrometheusRatioSource

    monkeypatch.setattr(run.egress.settings, "prometheus_urls", ("http://127.0.0.1:*",))
    monkeypatch.setattr(run.egress.settings, "prometheus_queries", {"waiting": 'sum(q{namespace="{namespace}"})'})
    spec = AutoscalingSpec.model_validate({"enabled": True, "minReplicas": replicas, "maxReplicas": replicas,
                                           "source": "prometheus", "prometheus": {"url": "http://127.0.0.1:9"}})
    target = AutoscaleTarget(key[0], key[1], spec, "llm", f"llmbackend.dev/backend={key[1]}", 3, None, 1, 8)
    monkeypatch.setattr(operator.kube, "list", lambda *a, **kw: pods)
    monkeypatch.setattr(operator.kube, "annotate", lambda kind, ns, name, ann: written.append((ns, name, ann)))

    async def nothing(self, query):
        return {}

    monkeypatch.setattr(PrometheusRatioSource, "_query", nothing)
    monkeypatch.setattr(PrometheusRatioSource, "waiting", nothing)
    return target


def evaluate_once(operator, key, target) -> None:
    """One evaluation of the backend by a scaler made for it, closed after."""
    async def evaluate():
        scaler = operator._new_scaler(target)
        await operator._evaluate(key, target, scaler)
        await run._close_scaler(scaler)

    asyncio.run(evaluate())


def test_a_scale_down_with_any_source_puts_a_spent_room_first_mark_back_to_0(monkeypatch):
    """A pool cut's room-first mark (drain.room_first) left on pods outlives the cut; before the backend's next
    scale-down it goes back to 0, a Prometheus source's too (it reads no in-flight counts)."""
    from llmbackend.autoscaling.drain import DELETION_COST_ANNOTATION, ROOM_FIRST_COST

    operator, written = _operator(), []
    marked = {DELETION_COST_ANNOTATION: str(ROOM_FIRST_COST + 2**16)}
    pods = [{"metadata": {"name": "p0", "annotations": marked}, "status": {}},
            {"metadata": {"name": "p1", "annotations": {DELETION_COST_ANNOTATION: "7"}}, "status": {}}]
    target = prometheus_evaluation(monkeypatch, operator, ("ns", "b"), 1, pods, written)
    evaluate_once(operator, ("ns", "b"), target)
    assert operator.state.decisions[("ns", "b")].desired_replicas == 1  # (maxReplicas: a scale-down from 3)
    assert written == [("ns", "p0", {DELETION_COST_ANNOTATION: "0"})]


def test_a_pool_pass_reads_each_claims_running_replicas_and_starts_a_fresh_room_ledger():
    """The rooms a cut makes are for the replicas a taker does not run yet (attack pass 74 finding 2), as this
    pass's claims read them; the GPUs free and the replicas lacking are spent once a pass (finding 4), anew each."""
    from llmbackend.autoscaling.pool import Claim

    operator = _operator()
    operator.room_ledger = ({"n2": 0}, {("T", "t"): 0})  # (a pass before spent it)
    claims = [Claim("T", "t", ("H100",), 8, 10, 1, 3, 1, 4, bound=1),
              Claim("W", "w", ("A100",), 8, 0, 3, 3, 1, 2)]  # (pods not read: bound None)
    assert asyncio.run(operator._unclaimed({}, claims)) == (None, None, None)  # (no pool shared: nothing listed)
    assert operator.pool_running == {("T", "t"): 1} and operator.room_ledger is None
