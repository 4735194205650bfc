"""The Argo CD health check (manifests/argocd/llmbackend.dev/LLMBackend/health.lua), run in lupa (Lua 5.1 and 5.4).

Argo CD sets the global `obj` to the live object (a Lua table built from its JSON) and takes the
returned table's `status` and `message`. The same cases (health_test.yaml) also run in Argo CD's own
Go code: tests/argocd.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

lupa = pytest.importorskip("lupa", reason="pip install lupa (in the test extra)")

ROOT = Path(__file__).resolve().parents[2]
CUSTOMIZATION = ROOT / "manifests" / "argocd" / "llmbackend.dev" / "LLMBackend"
HEALTH_LUA = CUSTOMIZATION / "health.lua"
CM_PATCH = ROOT / "manifests" / "argocd" / "argocd-cm-patch.yaml"
KEY = "resource.customizations.health.llmbackend.dev_LLMBackend"
T0 = "2025-01-01T00:00:00Z"


# Argo CD embeds gopher-lua (Lua 5.1): run under 5.1, and a current Lua to catch version quirks.
_RUNTIMES = [name for name in ("lua51", "lua54") if importlib.util.find_spec(f"lupa.{name}") is not None]
_runtime = None


@pytest.fixture(autouse=True, params=_RUNTIMES or ["default"])
def lua_version(request):
    global _runtime
    _runtime = lupa if request.param == "default" else importlib.import_module(f"lupa.{request.param}")
    yield request.param


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = _runtime.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(HEALTH_LUA.read_text())
    assert hs is not None, "the script must return hs"
    assert hs["status"] in {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
    return hs["status"], hs["message"] or ""


def cond(ctype: str, status: str, reason: str = "R", message: str = "", gen: int | None = 3) -> dict[str, Any]:
    c = {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0}
    if gen is not None:
        c["observedGeneration"] = gen
    return c


def backend(*conditions: dict[str, Any], generation: int = 3, observed: int | None = 3,
            replicas: int = 1, autoscaling: bool = False, status: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "llmbackend.dev/v1alpha1",
        "kind": "LLMBackend",
        "metadata": {"name": "llama", "namespace": "default", "generation": generation},
        "spec": {
            "model": {"preset": "llama-3.1-8b"},
            "replicas": replicas,
            "autoscaling": {"enabled": autoscaling, "minReplicas": 1, "maxReplicas": 4},
        },
    }
    if status:
        obj["status"] = {"conditions": list(conditions)}
        if observed is not None:
            obj["status"]["observedGeneration"] = observed
    return obj


HEALTHY = (
    cond("Planned", "True", "PlanFound", "TP8 x PP1 on NVIDIA-H100-80GB-HBM3"),
    cond("Available", "True", "MinimumReplicasAvailable", "1/1 replicas ready"),
    cond("Progressing", "False", "RolloutComplete"),
    cond("Degraded", "False", "AsExpected"),
)


def test_healthy_when_available_for_current_generation():
    status, message = health(backend(*HEALTHY))
    assert status == "Healthy"
    assert message == "MinimumReplicasAvailable: 1/1 replicas ready"


def test_progressing_without_status():
    assert health(backend(status=False))[0] == "Progressing"


def test_progressing_with_empty_status():
    obj = backend(*HEALTHY)
    obj["status"] = {}
    assert health(obj)[0] == "Progressing"


def test_progressing_when_status_generation_is_stale():
    status, message = health(backend(*HEALTHY, generation=4, observed=3))
    assert status == "Progressing"
    assert "4" in message


def test_progressing_when_any_condition_is_stale():
    # status.observedGeneration is current but Available was computed for the old spec
    conds = [copy.deepcopy(c) for c in HEALTHY]
    conds[1]["observedGeneration"] = 2
    status, message = health(backend(*conds))
    assert status == "Progressing"
    assert "Available" in message


def test_stale_degraded_is_progressing_not_degraded():
    status, _ = health(backend(cond("Degraded", "True", "PodsUnschedulable", gen=2), generation=3))
    assert status == "Progressing"


def test_progressing_when_available_missing():
    status, _ = health(backend(cond("Planned", "True", "PlanFound")))
    assert status == "Progressing"


def test_progressing_during_rollout():
    status, message = health(backend(
        cond("Planned", "True", "PlanFound"),
        cond("Available", "False", "RolloutInProgress", "0/1 replicas of the new generation ready"),
        cond("Progressing", "True", "NewReplicaSetCreated", "rolling out generation 3"),
    ))
    assert status == "Progressing"
    assert message == "NewReplicaSetCreated: rolling out generation 3"


def test_degraded_condition_wins_and_carries_its_reason():
    status, message = health(backend(
        cond("Planned", "True", "PlanFound"),
        cond("Available", "False", "RolloutInProgress"),
        cond("Progressing", "True", "NewReplicaSetCreated"),
        cond("Degraded", "True", "PodsUnschedulable", "0/4 nodes have 8 free nvidia.com/gpu"),
    ))
    assert status == "Degraded"
    assert message == "PodsUnschedulable: 0/4 nodes have 8 free nvidia.com/gpu"


def test_degraded_when_not_planned():
    status, message = health(backend(
        cond("Planned", "False", "NoPlanFits", "llama-3.1-405b bf16 needs 16 GPUs; largest clique has 8"),
        cond("Available", "False", "NoPlan"),
    ))
    assert status == "Degraded"
    assert message == "NoPlanFits: llama-3.1-405b bf16 needs 16 GPUs; largest clique has 8"


def test_degraded_when_unavailable_and_not_progressing():
    status, message = health(backend(
        cond("Planned", "True", "PlanFound"),
        cond("Available", "False", "CrashLoopBackOff", "tritonserver exited 1"),
        cond("Progressing", "False", "RolloutComplete"),
    ))
    assert status == "Degraded"
    assert message == "CrashLoopBackOff: tritonserver exited 1"


def test_zero_replicas_without_autoscaling_is_healthy_saying_so():
    status, message = health(backend(
        cond("Planned", "True", "Fits"),
        cond("Available", "True", "ZeroReplicas", "spec.replicas is 0"),
        cond("Progressing", "False", "RolloutComplete"),
        cond("Degraded", "False", "AsExpected"),
        replicas=0,
    ))
    assert (status, message) == ("Healthy", "ZeroReplicas: spec.replicas is 0")


def test_idle_autoscaled_backend_at_zero_is_healthy():
    status, message = health(backend(
        cond("Planned", "True", "Fits"),
        cond("Available", "True", "ScaledToZero", "idle"),
        cond("Progressing", "False", "RolloutComplete"),
        cond("Degraded", "False", "AsExpected"),
        replicas=0, autoscaling=True,
    ))
    assert (status, message) == ("Healthy", "ScaledToZero: idle")


def test_rollout_in_flight_is_progressing_even_while_available():
    status, message = health(backend(
        cond("Planned", "True", "Fits"),
        cond("Available", "True", "ReplicasReady"),
        cond("Progressing", "True", "RollingOut", "1/2 updated"),
        cond("Degraded", "False", "AsExpected"),
    ))
    assert (status, message) == ("Progressing", "RollingOut: 1/2 updated")


def test_current_degraded_wins_over_stale_conditions_and_status():
    status, message = health(backend(
        cond("Available", "True", "ReplicasReady", gen=3),
        cond("Degraded", "True", "UnknownPreset", "no such preset", gen=4),
        generation=4, observed=3,
    ))
    assert (status, message) == ("Degraded", "UnknownPreset: no such preset")


def test_stale_condition_of_a_type_no_longer_written_is_ignored():
    conds = [*HEALTHY, cond("Ready", "False", "Legacy", gen=1)]
    assert health(backend(*conds))[0] == "Healthy"


def test_deleting_is_progressing_as_argo_cd_reports_it():
    obj = backend(*HEALTHY)
    obj["metadata"]["deletionTimestamp"] = T0
    assert health(obj) == ("Progressing", "Pending deletion")


CASES = yaml.safe_load((CUSTOMIZATION / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"].removeprefix("testdata/") for c in CASES])
def test_upstream_style_case(case):
    obj = yaml.safe_load((CUSTOMIZATION / case["inputPath"]).read_text())
    assert health(obj) == (case["healthStatus"]["status"], case["healthStatus"]["message"])


def test_zero_replicas_with_autoscaling_is_not_suspended():
    status, _ = health(backend(*HEALTHY, replicas=0, autoscaling=True))
    assert status == "Healthy"


def test_zero_replicas_still_progressing_until_observed():
    status, _ = health(backend(*HEALTHY, replicas=0, generation=4, observed=3))
    assert status == "Progressing"


def test_conditions_without_observed_generation_use_status_generation():
    conds = [cond(c["type"], c["status"], c["reason"], c["message"], gen=None) for c in HEALTHY]
    assert health(backend(*conds))[0] == "Healthy"
    assert health(backend(*conds, generation=4, observed=3))[0] == "Progressing"


def test_argocd_cm_patch_embeds_health_lua_verbatim():
    doc = yaml.safe_load(CM_PATCH.read_text())
    assert doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "argocd-cm"
    assert doc["metadata"]["namespace"] == "argocd"
    assert doc["data"][KEY] == HEALTH_LUA.read_text(), (
        f"{CM_PATCH.relative_to(ROOT)} must embed {HEALTH_LUA.relative_to(ROOT)} verbatim"
    )


def _current(obj: dict[str, Any]) -> bool:
    status, generation = obj.get("status") or {}, obj["metadata"].get("generation")
    return (not obj["metadata"].get("deletionTimestamp") and status.get("observedGeneration") == generation
            and all(c.get("observedGeneration", generation) == generation for c in status.get("conditions") or []))


def _summarized(case: dict[str, Any]) -> dict[str, Any] | None:
    """The case's object when the operator has summarized its current generation (others wait for the operator)."""
    obj = yaml.safe_load((CUSTOMIZATION / case["inputPath"]).read_text())
    return obj if _current(obj) and (obj.get("status") or {}).get("conditions") else None


SUMMARIZED = [(c["inputPath"].removeprefix("testdata/"), obj) for c in CASES if (obj := _summarized(c))]


def test_some_cases_carry_a_summary_of_the_current_generation():
    assert len(SUMMARIZED) >= len(CASES) // 2, [case for case, _ in SUMMARIZED]


@pytest.mark.parametrize("obj", [obj for _, obj in SUMMARIZED], ids=[case for case, _ in SUMMARIZED])
def test_the_operator_summary_reads_status_as_argo_cd_does(obj):
    """status.phase/reason (controller/conditions.summarize, the printer columns) and health.lua are one rule."""
    from llmbackend.controller.conditions import summarize

    summary = summarize(obj["status"]["conditions"])
    argocd_status, argocd_message = health(obj)
    assert {"Ready": "Healthy", "ScaledToZero": "Healthy"}.get(summary.phase, summary.phase) == argocd_status
    assert argocd_message.startswith(f"{summary.reason}: ") or argocd_message == summary.reason
