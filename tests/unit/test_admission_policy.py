"""manifests/default/admission-policy.yaml covers every field of the CRD that names another object.

The list of referencing fields is generated from the CRD's schema (crds/llmbackend.yaml, itself generated from the
pydantic models): every field whose name says it refers to an object must have a row in docs/security.md's table
"Every field that names another object", and each policy variable that row names must read the field and be enforced
by a validation. A new referencing field therefore fails here until it is checked and listed. The policy itself runs
on the real API server in tests/e2e/test_tenant_admission.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from llmbackend.render.modelcache import DEFAULT_CACHE_CLAIM

REPO = Path(__file__).resolve().parents[2]
SECURITY_DOC = REPO / "docs/security.md"

# A key that names another object: a reference (secretRef, configMapKeyRef, ...), a name of another object
# (claimName, priorityClassName, ...; the bare `name` of an object is its own), a list of them (imagePullSecrets),
# an image, a volume source or driver that acts on what it is given, or a place the operator or its Jobs contact.
REFERENCE_KEY = re.compile(r"(Ref|Refs|.Name|Names|Secrets|Image|Class|Claims|Claim)$")
REFERENCE_KEYS = {"image", "configMap", "csi", "driver", "volumeAttributes", "ephemeral", "projected", "endpoint", "url",
                  "secretProviderClass", "volumeClaimTemplate", "dataSource", "dataSourceRef"}
# k8s.io/api core/v1 types.go, VolumeSource (v1.33: the 30 sources, `image` the last). The CRD may keep a subset; any
# other is pruned by the API server (the schema keeps no unknown fields).
KUBERNETES_VOLUME_SOURCES = {
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image"}
# Volume sources of the CRD that name nothing.
OBJECT_FREE_VOLUME_SOURCES = {"emptyDir"}


def _policy() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((REPO / "manifests/default/admission-policy.yaml").read_text()))
    return next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")


def _variables() -> dict[str, str]:
    return {v["name"]: v["expression"] for v in _policy()["spec"]["variables"]}


def _paths(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    for key, sub in (schema.get("properties") or {}).items():
        yield (*path, key), sub
        yield from _paths(sub, (*path, key))
    if "items" in schema:
        yield from _paths(schema["items"], path)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _paths(schema["additionalProperties"], path)


def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds/llmbackend.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def referencing_fields(schema: dict[str, Any]) -> set[str]:
    return {".".join(path) for path, _ in _paths(schema)
            if REFERENCE_KEY.search(path[-1]) or path[-1] in REFERENCE_KEYS}


def table_rows() -> dict[str, str]:
    """docs/security.md's table: field -> the rest of its row."""
    text = SECURITY_DOC.read_text()
    table = text.split("### Every field that names another object", 1)[1]
    rows = {}
    for line in table.splitlines():
        match = re.match(r"\| `([A-Za-z.]+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def _terms(expression: str) -> list[str]:
    """The `+`-joined terms of a variable, one per line that starts with `+` (continuation lines belong to it)."""
    terms = [""]
    for line in expression.splitlines():
        if line.lstrip().startswith("+"):
            terms.append("")
        terms[-1] += line + "\n"
    return terms


def reads(expression: str, field: str) -> bool:
    """Some term of the expression reads the field's keys in order from `object.spec`, or a prefix of them ending in a
    key whose whole object the term acts on (`has(v.csi)` covers everything under csi)."""
    keys = field.split(".")
    for term in _terms(expression):
        if "object.spec" not in term:
            continue
        at = term.index("object.spec") + len("object.spec")
        for i, key in enumerate(keys):
            found = re.compile(rf"\.\??{key}\b").search(term, at)
            if not found:
                break
            at = found.end()
            if i == len(keys) - 1 or re.search(rf"has\(\w+\.{key}\)", term):
                return True
    return False


def enforced_variables() -> set[str]:
    """Variables a validation reads, directly or through another variable."""
    variables = _variables()
    used = "\n".join(v["expression"] for v in _policy()["spec"]["validations"])
    enforced: set[str] = set()
    while True:
        new = {name for name in variables if f"variables.{name}" in used} - enforced
        if not new:
            return enforced
        enforced |= new
        used += "\n".join(variables[name] for name in new)


def test_the_walk_finds_the_references_the_attacker_used():
    found = referencing_fields(_crd_spec_schema())
    for field in ("model.source.pvc.claimName", "model.source.cache.claimName", "model.source.secretRef",
                  "serving.podTemplate.volumes.persistentVolumeClaim.claimName", "serving.podTemplate.volumes.configMap",
                  "serving.podTemplate.volumes.csi", "serving.podTemplate.volumes.csi.volumeAttributes",
                  "serving.podTemplate.serviceAccountName", "scheduling.priorityClassName", "engine.image"):
        assert field in found
    assert "model.name" not in found and "serving.podTemplate.env.name" not in found  # an object's own name


def test_every_referencing_field_of_the_crd_has_a_row_and_nothing_else_does():
    rows = table_rows()
    fields = referencing_fields(_crd_spec_schema())
    assert sorted(fields - rows.keys()) == [], "referencing fields without a row in docs/security.md's table"
    assert sorted(rows.keys() - fields) == [], "rows for fields the CRD does not have (or the walk does not find)"


def test_each_row_is_read_by_the_policy_variables_it_names_and_they_are_enforced():
    variables, enforced = _variables(), enforced_variables()
    unchecked = []
    for field, row in table_rows().items():
        named = re.findall(r"policy `(\w+)`", row)
        if not named:
            assert "no policy check:" in row, f"{field}: name the policy variable, or say why no policy check"
            continue
        for name in named:
            assert name in variables, f"{field}: the policy has no variable {name}"
            if not reads(variables[name], field) or name not in enforced:
                unchecked.append(f"{field} by {name}")
    assert unchecked == []


def test_each_row_names_tests_that_exist():
    for field, row in table_rows().items():
        cells = row.split("|")
        proof = cells[-1]
        if "no policy check:" in row and proof.strip() == "—":
            continue
        tests = re.findall(r"`(tests/[\w/]+\.py)::(\w+)(?:\[([\w-]+)\])?`", proof)
        assert tests, f"{field}: name the test that proves it"
        for path, function, case in tests:
            source = (REPO / path).read_text()
            assert f"def {function}(" in source, f"{field}: {path}::{function} does not exist"
            if case:
                assert f'"{case}":' in source, f"{field}: {path} has no case {case}"
        for case in re.findall(r"`\[([\w-]+)\]`", proof):  # more cases of the same test
            assert f'"{case}":' in (REPO / tests[0][0]).read_text(), f"{field}: no case {case}"


def test_volume_sources_are_known_and_the_rest_is_pruned():
    volume = next(s for p, s in _paths(_crd_spec_schema()) if p == ("serving", "podTemplate", "volumes"))["items"]
    sources = set(volume["properties"]) - {"name"}
    assert sources <= KUBERNETES_VOLUME_SOURCES
    rows = table_rows()
    for source in sources - OBJECT_FREE_VOLUME_SOURCES:
        assert any(f == f"serving.podTemplate.volumes.{source}" or f.startswith(f"serving.podTemplate.volumes.{source}.")
                   for f in rows), f"volume source {source} has no row"
    # What the CRD does not list (projected, ephemeral, image, hostPath, ...) is pruned: no part of the spec keeps
    # unknown fields.
    assert "x-kubernetes-preserve-unknown-fields" not in yaml.safe_dump(_crd_spec_schema())


def test_the_default_cache_claim_is_the_operators():
    assert f"orValue('{DEFAULT_CACHE_CLAIM}')" in _variables()["podAuthorOnly"]
    assert f".filter(n, n != '{DEFAULT_CACHE_CLAIM}')" in _variables()["podAuthorOnly"]


def test_policy_is_bound_and_denies():
    docs = list(yaml.safe_load_all((REPO / "manifests/default/admission-policy.yaml").read_text()))
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == _policy()["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert _policy()["spec"]["failurePolicy"] == "Fail"
    assert set(_policy()["spec"]["matchConstraints"]["resourceRules"][0]["operations"]) == {"CREATE", "UPDATE"}
    kustomization = yaml.safe_load((REPO / "manifests/default/kustomization.yaml").read_text())
    assert "admission-policy.yaml" in kustomization["resources"]
