"""manifests/argocd/llmbackend.dev/LLMBackend, run as argo-cd runs its resource_customizations: each case of
health_test.yaml through util/lua (gopher-lua) and through gitops-engine's GetResourceHealth with the script
taken from argocd-cm-patch.yaml, as the application controller evaluates a user's health customization."""

from __future__ import annotations

import shutil

import pytest
import yaml
from argocd_health import ARGOCD_CM, CUSTOMIZATION_DIR, health, run_test_cases

CASES = yaml.safe_load((CUSTOMIZATION_DIR / "health_test.yaml").read_text())["tests"]


@pytest.fixture(scope="module")
def results(argocd_health_binary):
    return {r["inputPath"]: r for r in run_test_cases(argocd_health_binary)}


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"].removeprefix("testdata/") for c in CASES])
def test_upstream_style_case(results, case):
    result = results[case["inputPath"]]
    assert not result.get("error"), result
    for entry_point in ("vm", "controller"):
        got = result[entry_point]
        assert (got["status"], got.get("message", "")) == (case["healthStatus"]["status"], case["healthStatus"]["message"]), \
            f"{entry_point}: {got}"
    assert result["ok"]


def test_every_testdata_file_has_a_case():
    listed = {c["inputPath"] for c in CASES}
    present = {f"testdata/{p.name}" for p in (CUSTOMIZATION_DIR / "testdata").glob("*.yaml")}
    assert listed == present


def test_a_wrong_expectation_fails(argocd_health_binary, tmp_path):
    """The harness reports a mismatch (exit 1, ok false), so the cases above can fail."""
    copy = tmp_path / "LLMBackend"
    shutil.copytree(CUSTOMIZATION_DIR, copy)
    spec = yaml.safe_load((copy / "health_test.yaml").read_text())
    spec["tests"] = [t for t in spec["tests"] if t["inputPath"] == "testdata/healthy.yaml"]
    spec["tests"][0]["healthStatus"] = {"status": "Degraded", "message": "not what the script says"}
    (copy / "health_test.yaml").write_text(yaml.safe_dump(spec))
    [result] = run_test_cases(argocd_health_binary, copy)
    assert result["ok"] is False and result["vm"]["status"] == "Healthy"


def test_deletion_is_handled_by_argo_cd_before_the_script(argocd_health_binary):
    """GetResourceHealth answers for a deleting object itself; the script agrees when called directly."""
    obj = yaml.safe_load((CUSTOMIZATION_DIR / "testdata" / "degraded_unknownPreset.yaml").read_text())
    assert health(argocd_health_binary, obj)[0] == "Degraded"
    obj["metadata"]["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    assert health(argocd_health_binary, obj) == ("Progressing", "Pending deletion")


def test_argocd_cm_patch_is_what_the_controller_evaluates():
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert list(data) == ["resource.customizations.health.llmbackend.dev_LLMBackend"]
