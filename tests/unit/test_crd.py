"""The CRD in crds/ is generated from the pydantic models and must not drift; its schema must be structural."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmbackend.api import crdgen

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "llmbackend.yaml"


def test_committed_crd_matches_the_models():
    assert CRD_FILE.read_text() == crdgen.render(), "crds/llmbackend.yaml drifted: run `make crd` and commit it"


def test_committed_configuration_reference_matches_the_models():
    reference = CRD_FILE.parents[1] / "docs" / "configuration.md"
    assert reference.read_text() == crdgen.reference_markdown(), "docs/configuration.md drifted: run `make crd`"


def _walk(schema, path="spec"):
    yield path, schema
    for name, prop in (schema.get("properties") or {}).items():
        yield from _walk(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural_and_documented():
    crd = yaml.safe_load(CRD_FILE.read_text())
    version = crd["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(root["properties"]["spec"]):
        for unsupported in ("$ref", "anyOf", "allOf", "patternProperties", "propertyNames", "const"):
            assert unsupported not in node, f"{path}: {unsupported} is not allowed in a Kubernetes structural schema"
        assert "type" in node, f"{path} has no type (not structural)"
        assert not ("properties" in node and "additionalProperties" in node), path
    spec_props = root["properties"]["spec"]["properties"]
    for field in ("model", "engine", "parallelism", "replicas", "autoscaling", "scheduling"):
        assert field in spec_props
    assert spec_props["engine"]["properties"]["quantization"]["enum"] == ["bf16", "fp16", "fp8", "int8_wo", "int4_awq", "nvfp4", "mxfp4"]
    assert spec_props["engine"]["properties"]["maxBatchSize"]["description"]
    rules = [r["rule"] for r in spec_props["autoscaling"]["x-kubernetes-validations"]]
    assert any("minReplicas <= self.maxReplicas" in r for r in rules)


def test_scale_subresource_and_printer_columns():
    crd = yaml.safe_load(CRD_FILE.read_text())
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector",
    }
    plain = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert plain == ["Ready", "Status", "Reason", "Model", "TPxPP", "Age"]
    assert crd["spec"]["names"]["shortNames"] == ["llmb"] and crd["spec"]["names"]["categories"] == ["llm"]


def test_every_top_level_spec_field_and_what_scheduling_holds_has_a_description():
    """`kubectl explain llmbackend.spec.planning` (and every other field of spec) says what the field is for."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    missing = [f"spec.{name}" for name, prop in spec.items() if not prop.get("description")]
    missing += [f"spec.scheduling.{name}" for name, prop in spec["scheduling"]["properties"].items()
                if not prop.get("description")]
    assert not missing, f"no description (kubectl explain shows <empty>): {missing}"


def test_every_field_of_spec_the_project_defines_has_a_one_line_description():
    """`kubectl explain` shows <empty> for a field without a description (spec.planning and spec.scheduling did, issue
    49). The mirrors of Kubernetes' own types (tolerations, podTemplate's env, envFrom, volumes and mounts) are left
    to the Kubernetes reference. A description is one paragraph: kubectl wraps it itself."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    kubernetes_own = ("spec.scheduling.tolerations[].", "spec.serving.podTemplate.env[]",
                      "spec.serving.podTemplate.envFrom[]", "spec.serving.podTemplate.volumes[]",
                      "spec.serving.podTemplate.volumeMounts[].")
    missing, broken = [], []

    def walk(schema, path):
        for name, prop in (schema.get("properties") or {}).items():
            field = f"{path}.{name}"
            if not prop.get("description") and not field.startswith(kubernetes_own):
                missing.append(field)
            if "\n" in (prop.get("description") or ""):
                broken.append(field)
            walk(prop, field)
        if "items" in schema:
            walk(schema["items"], f"{path}[]")

    walk(spec, "spec")
    assert not missing, f"no description (kubectl explain shows <empty>): {missing}"
    assert not broken, f"line breaks from a docstring: {broken}"
