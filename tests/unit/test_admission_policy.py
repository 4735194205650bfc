"""manifests/default/admission-policy.yaml covers every field of the CRD that names another object.

The list of referencing fields is generated from the CRD's schema (crds/llmbackend.yaml, itself generated from the
pydantic models): every field whose name says it refers to an object must have a row in docs/security.md's table
"Every field that names another object", and each policy variable that row names must read the field and be enforced
by a validation. Every other field must be reviewed as naming no object (NAMES_NO_OBJECT). A new field therefore
fails here until it is classified, and a referencing one until it is checked and listed. The policy itself runs on
the real API server in tests/e2e/test_tenant_admission.py.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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

# Every other field of the spec, reviewed one by one: it names no object (a number, a mode, the backend's or a
# container's own names, a path inside the pod or the claim, an external model's URI whose credentials and endpoint
# have rows: its pods see only that source's copy of the cache claim, once the backend's own download Job, with its
# own credentials, finished; docs/security.md, "A copy another backend downloaded"). Fields under a field with a row
# are covered by that row; objects and lists of objects are judged by their fields. A field the CRD gains is in
# neither place until someone decides which it is, whatever its name: a name cue (REFERENCE_KEY) alone misses
# `tokenSecret: {name}` or PodSpec's own `serviceAccount`.
NAMES_NO_OBJECT = {
    "": "replicas",
    "model": "preset name",
    "model.architecture": "numLayers hiddenSize numAttentionHeads numKeyValueHeads headDim vocabSize parameterCount "
                          "activeParameterCount numExperts numExpertsPerToken numSharedExperts kvLoraRank qkRopeHeadDim "
                          "slidingWindow slidingWindowLayers tieWordEmbeddings weightBytes checkpointQuantization",
    "model.source": "uri region",
    "model.source.pvc": "path",
    "model.source.cache": "size",
    "engine": "backend format quantization kvCacheDtype maxBatchSize maxInputLen maxSeqLen maxNumTokens "
              "kvCacheFreeGpuMemFraction kvCacheMinSequences batchSchedulerPolicy enableChunkedContext "
              "enableKvCacheReuse streaming",
    "engine.speculative": "method draftTokens acceptanceRate draftPath draftParameterCount",
    "engine.vllm": "gpuMemoryUtilization",
    "engine.lora": "maxRank maxLoras maxCpuLoras",
    "parallelism": "tensorParallel pipelineParallel expertParallel attentionDataParallel objective",
    "autoscaling": "enabled mode source minReplicas maxReplicas targetRatio tolerance windowSeconds syncPeriodSeconds "
                   "scaleUpStabilizationSeconds scaleDownStabilizationSeconds maxScaleUpStep maxScaleDownStep "
                   "targetUtilization saturationSeconds kvCacheThreshold forecast coldStartSeconds burstMemorySeconds "
                   "burstFloor learnedHeadroomMax learnedUtilization scaleToZeroAfterSeconds holdTimeoutSeconds priority",
    # The removed free-form PromQL: the CRD refuses setting them, the operator never runs them (security.md).
    "autoscaling.prometheus": "query activationQuery",
    "autoscaling.schedule": "start end timeZone desiredReplicas minReplicas",
    "autoscaling.panic": "enabled windowPercentage thresholdPercentage",
    # Node labels and taints, not objects: security.md's "Not covered" says what they reach.
    "scheduling": "nodeSelector",
    "scheduling.tolerations": "key operator value effect tolerationSeconds",
    "scheduling.resources": "cpu memory",
    "scheduling.multiNode": "startupTimeoutSeconds exclusiveTopology allowCrossNodeNvlinkWithoutComputeDomain",
    "serving": "openai drainSeconds progressDeadlineSeconds",
    "serving.podTemplate.env": "name value",
    "serving.podTemplate.envFrom": "prefix",
    "serving.podTemplate.volumes": "name",
    "serving.podTemplate.volumes.secret": "defaultMode optional",
    "serving.podTemplate.volumes.secret.items": "key path mode",
    "serving.podTemplate.volumes.emptyDir": "medium sizeLimit",
    "serving.podTemplate.volumeMounts": "name mountPath subPath readOnly",  # name: one of the pod's own volumes
    "planning": "placement",
    "adapters": "name",
    "adapters.source": "uri region",
    "adapters.source.pvc": "path",
    "adapters.source.cache": "size",
}


def names_no_object() -> set[str]:
    return {f"{parent}.{key}".lstrip(".") for parent, keys in NAMES_NO_OBJECT.items() for key in keys.split()}


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


def _has_fields(schema: dict[str, Any]) -> bool:
    """An object or a list of objects: what it names is what its fields name."""
    return bool(schema.get("properties") or (schema.get("items") or {}).get("properties"))


def unclassified_fields(schema: dict[str, Any], rows: set[str]) -> list[str]:
    """Fields of the spec with neither a row (their own or an enclosing field's) nor a place in NAMES_NO_OBJECT."""
    reviewed = names_no_object()
    out = []
    for path, sub in _paths(schema):
        field = ".".join(path)
        if _has_fields(sub) or field in reviewed or any(field == r or field.startswith(f"{r}.") for r in rows):
            continue
        out.append(field)
    return sorted(out)


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
    schema = _crd_spec_schema()
    fields = referencing_fields(schema)
    assert sorted(fields - rows.keys()) == [], "referencing fields without a row in docs/security.md's table"
    every_field = {".".join(path) for path, _ in _paths(schema)}
    assert sorted(rows.keys() - every_field) == [], "rows for fields the CRD does not have"


def test_every_field_of_the_crd_is_a_reference_with_a_row_or_reviewed_as_naming_none():
    schema = _crd_spec_schema()
    assert unclassified_fields(schema, set(table_rows())) == [], (
        "new fields of the CRD: give each a row in docs/security.md's table if it names another object (and a check "
        "in the admission policy), else add it to NAMES_NO_OBJECT here")
    every_field = {".".join(path) for path, _ in _paths(schema)}
    assert sorted(names_no_object() - every_field) == [], "NAMES_NO_OBJECT lists fields the CRD does not have"
    assert sorted(names_no_object() & (referencing_fields(schema) | set(table_rows()))) == []


@pytest.mark.parametrize("path,field", [
    ("model.source.tokenSecret", {"type": "object", "properties": {"name": {"type": "string"}}}),
    ("serving.podTemplate.serviceAccount", {"type": "string"}),  # PodSpec's older spelling of serviceAccountName
    ("adapters.source.secret", {"type": "object", "properties": {"name": {"type": "string"}}}),
    ("serving.podTemplate.volumes.secret.claim", {"type": "string"}),
    ("scheduling.multiNode.credentials", {"type": "object", "additionalProperties": {"type": "string"}}),
])
def test_a_field_added_to_the_crd_fails_until_it_is_classified(path, field):
    """Whatever its name: none of these is found by the name cues, each is caught."""
    schema = copy.deepcopy(_crd_spec_schema())
    *parents, leaf = path.split(".")
    node = schema
    for key in parents:
        node = node["properties"][key]
        node = node.get("items", node) if "properties" not in node else node
    node["properties"][leaf] = field
    assert path not in referencing_fields(schema)
    assert any(f == path or f.startswith(f"{path}.") for f in unclassified_fields(schema, set(table_rows())))


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
