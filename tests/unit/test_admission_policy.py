"""manifests/default/admission-policy.yaml covers every field of the CRD that names a Secret or a ServiceAccount.

A new field that names a Secret (anything whose key says "secret") must be added to the policy's `secretNames`, or
tenants could mount that Secret through the operator. The policy itself runs on the real API server in
tests/e2e/test_tenant_admission.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def _policy() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((REPO / "manifests/default/admission-policy.yaml").read_text()))
    return next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")


def _paths(schema: dict[str, Any], path: tuple[str, ...] = ()):
    for key, sub in (schema.get("properties") or {}).items():
        yield (*path, key), sub
        yield from _paths(sub, (*path, key))
    if "items" in schema:
        yield from _paths(schema["items"], path)


def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds/llmbackend.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_every_secret_naming_field_of_the_crd_is_in_the_policy():
    expression = next(v["expression"] for v in _policy()["spec"]["variables"] if v["name"] == "secretNames")
    secret_fields = {path for path, _ in _paths(_crd_spec_schema()) if "secret" in path[-1].lower()}
    assert secret_fields, "the CRD names no Secret: the walk is broken"
    missing = []
    for path in secret_fields:
        # The policy reads each field by its path; list items are filtered/mapped by the same keys.
        if not all(f".{key}" in expression or f".?{key}" in expression for key in path):
            missing.append(".".join(path))
    assert missing == []


def test_the_service_account_field_is_checked():
    paths = {path for path, _ in _paths(_crd_spec_schema()) if path[-1] == "serviceAccountName"}
    assert paths == {("serving", "podTemplate", "serviceAccountName")}
    variables = {v["name"]: v["expression"] for v in _policy()["spec"]["variables"]}
    assert "?serving.?podTemplate.?serviceAccountName" in variables["serviceAccount"]


def test_policy_is_bound_and_denies():
    docs = list(yaml.safe_load_all((REPO / "manifests/default/admission-policy.yaml").read_text()))
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == _policy()["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert _policy()["spec"]["failurePolicy"] == "Fail"
    kustomization = yaml.safe_load((REPO / "manifests/default/kustomization.yaml").read_text())
    assert "admission-policy.yaml" in kustomization["resources"]
