"""Pure pieces of the controller: drift detection, plan stickiness key, conditions, the work queue."""

from __future__ import annotations

import asyncio

from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller.conditions import Conditions
from llmbackend.controller.decide import is_subset, spec_hash
from llmbackend.controller.run import WorkQueue


def test_is_subset_ignores_server_defaults_but_sees_changed_or_missing_fields():
    desired = {"spec": {"replicas": 2, "template": {"containers": [{"name": "t", "image": "a"}]}}}
    live = {"spec": {"replicas": 2, "revisionHistoryLimit": 10,
                     "template": {"containers": [{"name": "t", "image": "a", "terminationMessagePath": "/dev/x"}]}}}
    assert is_subset(desired, live)
    assert not is_subset(desired, {"spec": {**live["spec"], "replicas": 3}})
    assert not is_subset(desired, {"spec": {**live["spec"], "template": {"containers": []}}})


def test_spec_hash_ignores_replicas_and_autoscaling_but_not_the_engine():
    base = {"model": {"preset": "llama-3.1-8b"}}
    a = LLMBackendSpec.model_validate(base)
    assert spec_hash(a) == spec_hash(LLMBackendSpec.model_validate({**base, "replicas": 5}))
    assert spec_hash(a) == spec_hash(LLMBackendSpec.model_validate({**base, "autoscaling": {"enabled": True}}))
    assert spec_hash(a) != spec_hash(LLMBackendSpec.model_validate({**base, "engine": {"quantization": "fp8"}}))


def test_condition_transition_time_moves_only_on_status_change():
    def available(conditions: Conditions) -> dict:
        return next(c for c in conditions.to_list() if c["type"] == "Available")

    first = Conditions(None, 1)
    first.set("Available", False, "ReplicasNotReady", "0/1")
    old = first.to_list()
    again = Conditions(old, 2)
    again.set("Available", False, "ReplicasNotReady", "still 0/1")
    assert available(again)["lastTransitionTime"] == available(first)["lastTransitionTime"]
    assert available(again)["observedGeneration"] == 2
    assert [c for c in again.changed() if c["type"] == "Available"] == []
    flipped = Conditions(old, 2)
    flipped.set("Available", True, "ReplicasReady", "1/1")
    assert [c["type"] for c in flipped.changed()] == ["Available"]


def test_conditions_are_the_four_types_for_this_generation_and_nothing_else():
    old = [{"type": t, "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z",
            "observedGeneration": 1} for t in ("Planned", "Available", "Ready", "Legacy")]
    conditions = Conditions(old, 2)
    conditions.set("Degraded", True, "UnknownPreset", "no such preset")
    written = conditions.to_list()
    assert [c["type"] for c in written] == ["Planned", "Available", "Progressing", "Degraded"]
    assert {c["observedGeneration"] for c in written} == {2}
    # what this pass did not set is Unknown, never the old value carried at generation 1
    assert [c["status"] for c in written] == ["Unknown", "Unknown", "Unknown", "True"]


def test_work_queue_deduplicates_and_reruns_a_key_dirtied_while_active():
    async def scenario():
        queue = WorkQueue()
        key = ("ns", "a")
        queue.add(key)
        queue.add(key)
        assert len(queue) == 1
        got = await queue.get()
        queue.add(key)  # changed while being reconciled
        assert len(queue) == 0
        queue.done(got)
        assert len(queue) == 1, "re-queued once the active pass ended"

    asyncio.run(scenario())


def test_merge_patch_nulls_fields_no_longer_reported_at_any_depth():
    from llmbackend.controller.decide import merge_patch

    old = {"replicas": 2, "autoscaling": {"currentRatio": "0.000", "reason": "WithinTolerance"}, "plan": {"tp": 1}}
    new = {"replicas": 2, "autoscaling": {"reason": "StaleMetrics"}}
    assert merge_patch(old, new) == {"autoscaling": {"currentRatio": None, "reason": "StaleMetrics"}, "plan": None}
    assert merge_patch(new, new) == {}, "nothing changed: nothing to write"
