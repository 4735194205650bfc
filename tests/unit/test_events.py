"""Events as client-go's recorder sends them (controller/events.py): repeats counted on one Event, similar ones
combined after ten, a budget per object; and only what a person acts on is an Event at all (decide.condition_events)."""

from __future__ import annotations

from typing import Any

from llmbackend.controller import events as ev
from llmbackend.controller.conditions import Conditions
from llmbackend.controller.decide import condition_events


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(message: str = "pods cannot be placed", reason: str = "Unschedulable", uid: str = "u-1") -> dict[str, Any]:
    return {"metadata": {"generateName": "b.", "namespace": "ns"}, "involvedObject": {"uid": uid, "name": "b"},
            "type": "Warning", "reason": reason, "message": message, "source": {"component": "llmbackend-operator"},
            "firstTimestamp": "t0", "lastTimestamp": "t1", "count": 1}


def post(correlator: ev.EventCorrelator, e: dict[str, Any], name: str = "b.1") -> ev.Send | None:
    send = correlator.correlate(e)
    if send is not None and send.create is not None:
        correlator.posted(send.create, {**send.create, "metadata": {"name": name}})
    return send


def test_a_repeat_is_counted_on_the_event_already_posted():
    correlator = ev.EventCorrelator(Clock())
    first = post(correlator, event())
    assert first is not None and first.create is not None
    for count in (2, 3):
        again = post(correlator, event())
        assert again == ev.Send(name="b.1", patch={"count": count, "lastTimestamp": "t1", "message": event()["message"]})
    other = post(correlator, event(reason="EngineFailed"), name="b.2")
    assert other is not None and other.create is not None, "another reason is another event"


def test_similar_events_are_combined_after_ten_and_then_counted():
    correlator = ev.EventCorrelator(Clock())
    sends = [post(correlator, event(f"0/{i} nodes"), name=f"b.{i}") for i in range(12)]
    assert all(s is not None and s.create is not None for s in sends[:10])
    assert sends[9].create["message"].startswith(ev.COMBINED_PREFIX), "the tenth distinct message is the combined one"
    assert sends[10] == ev.Send(name="b.9", patch={"count": 2, "lastTimestamp": "t1",
                                                   "message": ev.COMBINED_PREFIX + "0/10 nodes"})
    assert sends[11].patch["count"] == 3


def test_an_object_that_fails_in_a_loop_has_a_budget_refilled_slowly():
    clock = Clock()
    correlator = ev.EventCorrelator(clock)
    allowed = [post(correlator, event(str(i % 3))) is not None for i in range(40)]
    assert sum(allowed) == ev.SPAM_BURST
    assert post(correlator, event(uid="u-2")) is not None, "another backend has its own budget"
    clock.now += 1 / ev.SPAM_QPS
    assert post(correlator, event("0")) is not None and post(correlator, event("0")) is None


def test_a_counted_event_that_expired_is_posted_anew():
    correlator = ev.EventCorrelator(Clock())
    post(correlator, event())
    correlator.forget(event())
    send = post(correlator, event())
    assert send is not None and send.create is not None


def test_only_failures_and_the_plan_are_events():
    conditions = Conditions([], 1)
    conditions.set("Planned", True, "Fits", "Plan: TP2")
    conditions.set("Available", False, "ReplicasNotReady", "0/1 replicas ready")
    conditions.set("Progressing", True, "RollingOut", "")
    conditions.set("Degraded", False, "AsExpected", "")
    assert condition_events(conditions) == [("Normal", "Fits", "Plan: TP2")]
    failing = Conditions(conditions.to_list(), 1)
    failing.set("Available", False, "EngineFailed", "the engine died")
    failing.set("Degraded", True, "EngineFailed", "the engine died; see the pod's log")
    assert ("Warning", "EngineFailed", "the engine died; see the pod's log") in condition_events(failing)
