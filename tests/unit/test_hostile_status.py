"""The operator reads parts of an LLMBackend's status back (the plan it keeps while the spec is unchanged, the
autoscaler's memory, warnings it already posted). Status is written through its own subresource, which the
admission policies do not check, by whoever RBAC lets: a status of the CRD's shape with any values in it must never
fail a pass (found: a kept plan with tensorParallel 0 failed every pass of the backend, retried forever)."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decide import MODEL, NODES, backend, first_pass, served, settle

from llmbackend.controller.decide import Observed, ScaleDecision, decide, finish_status

MEMORY = {"watchingSince": "2026-12-04T10:00:00Z", "lastSeen": "2026-12-04T11:00:00Z",
          "bursts": [{"start": "2026-12-04T10:55:00Z", "headroom": 1.4}], "loads": "1:2", "rates": "1:2",
          "forecasts": "", "recommendations": "1:1", "peaks": "", "fit": [1, 2, 3, 4, 5, 6],
          "queuedAt": "2026-12-04T10:58:00Z"}
SPECS = [{"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}},
         {"model": MODEL, "replicas": 2}]


def _written(spec):
    """The children and the status the operator writes for ``spec`` (one ready replica)."""
    live = served(first_pass(spec), ready=1)
    scale = None
    if "autoscaling" in spec:
        scale = ScaleDecision(2, "WithinTolerance", "steady", "0.1", "2026-12-04T11:00:00Z",
                              {"signal": "engine", "memory": MEMORY, "burstWarning": "bursts rose"}, 3.0)
    return live, json.loads(json.dumps(finish_status(settle(spec, live, scale_decision=scale, hpas=[]))))


WRITTEN = [_written(spec) for spec in SPECS]


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    else:
        yield path, obj


def _another(value):
    """Another value of ``value``'s JSON type: what the CRD's structural schema lets through."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(-2**40, 2**40)
    if isinstance(value, float):
        return st.floats(allow_nan=False, allow_infinity=False)
    if isinstance(value, str):
        return st.text(max_size=40) | st.sampled_from(["", "2026-12-04T10:00:00Z", "9999-12-31T23:59:59Z",
                                                        "0001-01-01T00:00:00Z", "2026-13-45T99:99:99Z", "nan"])
    return st.none()


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), which=st.sampled_from(range(len(SPECS))), decided=st.booleans())
def test_a_status_of_the_crds_shape_with_any_values_never_fails_a_pass(data, which, decided):
    live, written = WRITTEN[which]
    status = copy.deepcopy(written)
    leaves = list(_leaves(status))
    for _ in range(data.draw(st.integers(1, 6))):
        path, value = data.draw(st.sampled_from(leaves))
        parent = status
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = data.draw(_another(value))
    scale = ScaleDecision(2, "WithinTolerance", "steady", "0.1", None, {"signal": "engine"}) if decided else None
    decision = decide(Observed(backend(SPECS[which], status), NODES, children=live,
                               scale_decision=scale if "autoscaling" in SPECS[which] else None, hpas=[]))
    json.dumps(finish_status(decision), allow_nan=False)


def test_a_kept_plan_with_a_size_below_one_is_planned_afresh():
    live, written = WRITTEN[1]
    status = copy.deepcopy(written)
    status["plan"]["tensorParallel"] = 0
    decision = decide(Observed(backend(SPECS[1], status), NODES, children=live, hpas=[]))
    assert decision.status.plan is not None and decision.status.plan.tensor_parallel == written["plan"]["tensorParallel"]
