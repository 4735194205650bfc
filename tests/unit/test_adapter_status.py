"""status.adapters and the Degraded condition of an adapter that cannot be served (controller/adapters.py, decide):
only Ready adapters reach the serving pods' list; a wrong base names both models; a steady backend whose adapter
list changes rolls nothing."""

from __future__ import annotations

import json
from typing import Any

from test_decide import NODES, backend, conditions, first_pass, served

from llmbackend.api import adapters as api_adapters
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller import adapters as ca
from llmbackend.controller import modelcache as cmc
from llmbackend.controller.decide import Observed, decide, finish_status
from llmbackend.controller.fakekube import FakeKube
from llmbackend.render import adapters as ra

MODEL = {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}
SQL = {"name": "sql", "source": {"uri": "hf://acme/sql-lora"}}
QWEN = {"name": "qwen-sql", "source": {"uri": "hf://acme/qwen-sql-lora"}}
LEGAL = {"name": "legal", "source": {"pvc": {"claimName": "loras", "path": "/legal"}}}
DONE = {"phase": "Ready", "reason": "ModelCached", "message": "the checkpoint is complete in the model cache"}


def report(base: str = "meta-llama/Llama-3.1-8B-Instruct", r: int = 16) -> dict[str, Any]:
    return {"adapterConfig": {"peft_type": "LORA", "base_model_name_or_path": base, "r": r,
                              "target_modules": ["q_proj", "v_proj"], "bias": "none"}}


def spec(*adapters: dict[str, Any]) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": MODEL, "adapters": list(adapters)})


def test_a_downloaded_adapter_that_fits_is_ready_with_its_rank():
    s = spec(SQL)
    got = ca.adapter_status(s, s.adapters[0], DONE, report())  # type: ignore[index]
    assert got["phase"] == "Ready" and got["rank"] == 16 and got["reason"] == api_adapters.ADAPTER_COMPATIBLE
    assert got["path"] == ra.adapter_path(s, s.adapters[0]) and got["source"] == "hf://acme/sql-lora"  # type: ignore[index]


def test_a_wrong_base_or_a_high_rank_is_incompatible_and_a_failed_download_failed():
    s = spec(SQL)
    a = s.adapters[0]  # type: ignore[index]
    wrong = ca.adapter_status(s, a, DONE, report(base="Qwen/Qwen3-32B"))
    assert (wrong["phase"], wrong["reason"]) == ("Incompatible", api_adapters.ADAPTER_BASE_MISMATCH)
    high = ca.adapter_status(s, a, DONE, report(r=128))
    assert (high["phase"], high["reason"]) == ("Incompatible", api_adapters.ADAPTER_RANK_TOO_HIGH)
    failed = ca.adapter_status(s, a, {"phase": "Failed", "reason": "SourceNotFound", "message": "404"}, None)
    assert (failed["phase"], failed["reason"]) == ("Failed", "SourceNotFound")
    running = ca.adapter_status(s, a, {"phase": "Downloading", "reason": "Downloading", "message": "..."}, None)
    assert running["phase"] == "Downloading"
    unreadable = ca.adapter_status(s, a, DONE, {"adapterConfigError": "adapter_config.json is not valid JSON"})
    assert (unreadable["phase"], unreadable["reason"]) == ("Incompatible", api_adapters.ADAPTER_CONFIG_INVALID)


def test_a_pvc_adapter_is_listed_and_says_it_was_not_checked():
    s = spec(LEGAL)
    got = ca.adapter_status(s, s.adapters[0], None, None)  # type: ignore[index]
    assert got["phase"] == "Ready" and got["reason"] == ca.ADAPTER_NOT_CHECKED and got["source"] == "pvc://loras/legal"


def _statuses(s: LLMBackendSpec, reports: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    return [ca.adapter_status(s, a, DONE if reports[a.name] is not None else
                              {"phase": "Downloading", "reason": "Downloading", "message": "running"}, reports[a.name])
            for a in s.adapters or []]


def _listed(decision) -> list[str]:
    config_map = next(c for c in decision.apply if c["kind"] == "ConfigMap")
    return [e["name"] for e in json.loads(config_map["data"][ra.ADAPTERS_KEY])["adapters"]]


def test_the_pods_are_told_of_ready_adapters_only_and_a_wrong_base_is_degraded():
    s = spec(SQL, QWEN)
    statuses = _statuses(s, {"sql": report(), "qwen-sql": report(base="Qwen/Qwen3-32B")})
    doc = {"model": MODEL, "adapters": [SQL, QWEN]}
    decision = first_pass(doc, adapters=statuses)
    assert _listed(decision) == ["sql"]
    status, reason = conditions(decision)["Degraded"]
    assert (status, reason) == ("True", api_adapters.ADAPTER_BASE_MISMATCH)
    written = finish_status(decision)
    assert [(a["name"], a["phase"]) for a in written["adapters"]] == [("sql", "Ready"), ("qwen-sql", "Incompatible")]
    degraded = next(c for c in written["conditions"] if c["type"] == "Degraded")
    assert "Qwen/Qwen3-32B" in degraded["message"] and "the other adapters are served" in degraded["message"]


def test_an_adapter_that_turns_ready_changes_the_list_and_mounts_its_own_copy():
    """A downloaded adapter's copy is mounted on its own (never the whole cache claim: issue 42, attack 3), once its
    own download finished: turning Ready changes the list and the pod template (a rollout)."""
    doc = {"model": MODEL, "adapters": [SQL, QWEN]}
    s = spec(SQL, QWEN)
    downloading = first_pass(doc, adapters=_statuses(s, {"sql": report(), "qwen-sql": None}))
    assert _listed(downloading) == ["sql"] and conditions(downloading)["Degraded"][0] == "False"
    qwen_copy = ra.adapter_path(s, s.adapters[1])  # type: ignore[index]

    def mounted(decision) -> set[str]:
        deployment = next(c for c in decision.apply if c["kind"] == "Deployment")
        return {m["mountPath"] for c in deployment["spec"]["template"]["spec"]["containers"] for m in c["volumeMounts"]}

    assert qwen_copy not in mounted(downloading)
    live = served(downloading, ready=1)
    both = decide(Observed(backend(doc), NODES, children=live,
                           adapters=_statuses(s, {"sql": report(), "qwen-sql": report()})))
    assert [c["kind"] for c in both.apply] == ["ConfigMap", "Deployment"]
    assert _listed(both) == ["sql", "qwen-sql"] and qwen_copy in mounted(both)


def test_a_finished_download_whose_report_is_gone_is_served_unchecked():
    s = spec(SQL)
    got = ca.adapter_status(s, s.adapters[0], DONE, None)  # type: ignore[index]
    assert (got["phase"], got["reason"]) == ("Ready", ca.ADAPTER_NOT_CHECKED)
    assert "delete Job llmb-fetch-" in got["message"]


# ---- issue 46 (an independent attacker pass on spec.adapters) ----

def test_a_finished_download_whose_report_is_unreadable_is_not_served():
    """F2: a report over the kubelet's 4 KiB is cut, so it is not JSON; the adapter was then served as
    AdapterNotChecked, which skips the base-model check. Now it is not served, with the reason and what to do."""
    s = spec(SQL)
    report_text = json.dumps({"phase": "Ready", "adapterConfig": {"r": 8, "use_dora": list(range(3000))}})
    pod = {"metadata": {"name": "p", "creationTimestamp": "2026-12-06T00:00:00Z"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"exitCode": 0, "message": report_text[:4096]}}}]}}  # the kubelet keeps 4 KiB
    report, _ = cmc._termination(None, "serving", [pod])
    got = ca.adapter_status(s, s.adapters[0], DONE, report)  # type: ignore[index]
    assert (got["phase"], got["reason"]) == ("Incompatible", ca.ADAPTER_REPORT_UNREADABLE), got
    assert "delete Job llmb-fetch-" in got["message"] and ca.ready_adapters([got]) == set()
    assert ca.adapters_problem([got])[0] == ca.ADAPTER_REPORT_UNREADABLE  # type: ignore[index]


def test_a_report_that_is_json_but_not_an_object_is_read_as_unreadable_not_a_crash():
    pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"exitCode": 0, "message": "[1, 2]"}}}]}}
    report, _ = cmc._termination(None, "serving", [pod])
    assert report == {"message": "[1, 2]"}
    s = spec(SQL)
    assert ca.adapter_status(s, s.adapters[0], DONE, report)["reason"] == ca.ADAPTER_REPORT_UNREADABLE  # type: ignore[index]


def test_an_adapter_named_as_the_backend_that_serves_the_base_model_under_its_name_is_not_served():
    """F4: without spec.model.name or a preset the base model is served as the backend's name; an adapter of that
    name would never be reached (the base model shadows it). It is Incompatible, with nothing downloaded."""
    kube = FakeKube()
    doc = {"model": {"source": {"uri": "s3://models/tuned"}, "architecture": None},
           "adapters": [{"name": "tuned", "source": {"uri": "hf://acme/tuned-lora"}}, SQL]}
    s = LLMBackendSpec.model_validate(doc)  # the spec alone cannot see the clash: the name is the object's
    taken, sql = ca.sync_adapters(kube, "serving", s, served_model="tuned") or []
    assert (taken["phase"], taken["reason"]) == ("Incompatible", ca.ADAPTER_NAME_TAKEN)
    assert "rename the adapter" in taken["message"] and "spec.model.name" in taken["message"]
    jobs = [o for o in kube.created if o["kind"] == "Job"]
    assert sql["phase"] == "Downloading" and len(jobs) == 1  # only sql's download
    assert ca.ready_adapters([taken, sql]) == set() and ca.adapters_problem([taken, sql])[0] == ca.ADAPTER_NAME_TAKEN  # type: ignore[index]
