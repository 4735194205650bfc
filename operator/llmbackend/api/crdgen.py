"""Generate the LLMBackend CustomResourceDefinition from the pydantic models.

`llmbackend crd > crds/llmbackend.yaml`; tests/unit/test_crd.py fails when the committed file drifts.
Pydantic's JSON Schema is turned into a structural OpenAPI v3 schema: `$ref`s inlined, Optional[X]
collapsed to X (absent fields are simply omitted), titles dropped, CEL rules kept.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import yaml
from pydantic import BaseModel

from . import v1alpha1 as api

# No adapter of the object `o` has the name its base model is served as (spec.model.name, else the preset, else
# metadata.name: render/names.model_name); the spec's own rules compare the first two.
_ADAPTER_NOT_BASE = ("(!has({o}.spec.adapters) || has({o}.spec.model.name) || has({o}.spec.model.preset) || "
                     "{o}.spec.adapters.all(a, a.name != {o}.metadata.name))")
_ADAPTER_NOT_BASE_MESSAGE = ("an adapter may not have the base model's name (metadata.name, which the base model is "
                             "served as while spec.model.name and spec.model.preset are unset): rename the adapter or "
                             "set spec.model.name")

# Not allowed (or meaningless) in a Kubernetes structural schema.
DROP_KEYS = {"title", "propertyNames"}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, defs)
    any_of = node.get("anyOf")
    if any_of is not None:
        non_null = [branch for branch in any_of if branch.get("type") != "null"]
        if len(non_null) == 1:  # Optional[X]
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _inline({**non_null[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP_KEYS or key == "$defs":
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {name: _inline(prop, defs) for name, prop in value.items()}
        elif key == "description" and isinstance(value, str):
            # A class docstring keeps its source line breaks; kubectl explain wraps text itself.
            out[key] = re.sub(r"\s*\n\s*", " ", value)
        else:
            out[key] = _inline(value, defs)
    # Kubernetes has no patternProperties: map values keep their schema, key syntax becomes a CEL rule.
    pattern_properties = out.pop("patternProperties", None)
    if pattern_properties:
        (key_pattern, value_schema), = pattern_properties.items()
        out["additionalProperties"] = value_schema
        rule = {"rule": f"self.all(k, k.matches({json.dumps(key_pattern)}))", "message": f"keys must match {key_pattern}"}
        out.setdefault("x-kubernetes-validations", []).append(rule)
    # `additionalProperties: false` is implied by `properties` in Kubernetes and may not stand beside it.
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    # JSON Schema 2020's numeric exclusive bounds -> OpenAPI v3.0's boolean form.
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), (int, float)) and not isinstance(out.get(bound), bool):
            out[flag] = out.pop(bound)
            out[bound] = True
    # Enum-only schemas need a type to be structural.
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "const" in out:
        out["enum"] = [out.pop("const")]
        out.setdefault("type", "string")
    return out


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    return _inline(schema, defs)


def crd() -> dict[str, Any]:
    spec_schema = openapi_schema(api.LLMBackendSpec)
    status_schema = openapi_schema(api.LLMBackendStatus)
    root: dict[str, Any] = {
        "type": "object",
        "description": (api.LLMBackend.__doc__ or "").strip(),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {**spec_schema, "description": "Desired state: the model, the engine, sharding, replicas and autoscaling."},
            "status": {**status_schema, "description": "Observed state, written by the operator."},
        },
        "required": ["spec"],
    }
    # Names end up in labels, Service names and DNS: keep them within DNS-1035 label limits.
    root["x-kubernetes-validations"] = [
        {
            "rule": "self.metadata.name.size() <= 52 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "message": "metadata.name must be a DNS-1035 label of at most 52 characters (it names Services and pods)",
        },
        # The two rules below apply only when a backend is created (names never change): a root rule that also ran
        # on updates would refuse every write to a backend stored before it, its status included.
        {
            "rule": "oldSelf.hasValue() || !self.metadata.name.matches('(" + "|".join(api.CHILD_NAME_SUFFIXES) + ")$')",
            "optionalOldSelf": True,
            "message": "metadata.name must not end with " + ", ".join(api.CHILD_NAME_SUFFIXES)
                       + ": the operator names children <name><suffix>, so such a name could be another backend's child",
        },
        {
            # A backend stored before it is refused a LeaderWorkerSet instead (BackendNameAmbiguous).
            "rule": "oldSelf.hasValue() || !self.metadata.name.matches('" + api.GROUP_INDEX_NAME_PATTERN + "')",
            "optionalOldSelf": True,
            "message": "metadata.name must not end with '-' and digits (as llama-3): a multi-node backend's "
                       "LeaderWorkerSet names its groups' pods and StatefulSets <name>-<group>, so such a name could "
                       "be another backend's group; use e.g. llama3 or llama-3-8b",
        },
        # Without spec.model.name or a preset the base model is served as the backend's name (render/names
        # model_name), which only a root rule sees. Refused when it becomes true: created so (the first rule), or
        # updated into it (the second, a transition rule: updates only). A backend stored so before the rules still
        # takes every write, its status included; the operator marks such an adapter Incompatible
        # (AdapterNameIsBaseModel). One rule with oldSelf.value() would be simpler, but the API server estimates it
        # over its cost budget.
        {
            "rule": f"oldSelf.hasValue() || {_ADAPTER_NOT_BASE.format(o='self')}",
            "optionalOldSelf": True,
            "message": _ADAPTER_NOT_BASE_MESSAGE,
        },
        {
            "rule": f"{_ADAPTER_NOT_BASE.format(o='self')} || !{_ADAPTER_NOT_BASE.format(o='oldSelf')}",
            "message": _ADAPTER_NOT_BASE_MESSAGE,
        },
    ]
    # Plain `kubectl get llmb` answers "is it serving, and if not why"; -o wide adds the plan and scaling.
    columns = [
        ("Ready", "string", ".status.ready", 0),
        ("Status", "string", ".status.phase", 0),
        ("Reason", "string", ".status.reason", 0),
        ("Model", "string", ".status.modelName", 0),
        ("TPxPP", "string", ".status.parallelism", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
        ("Backend", "string", ".status.backend", 1),
        ("GPU", "string", ".status.plan.gpuProduct", 1),
        ("GPUs/replica", "integer", ".status.plan.gpusPerReplica", 1),
        ("Ratio", "string", ".status.autoscaling.currentRatio", 1),
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/name": "llmbackend-operator", "app.kubernetes.io/part-of": "llmbackend"},
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": api.SHORT_NAMES,
                "categories": api.CATEGORIES,
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": n, "type": t, "jsonPath": p, **({"priority": prio} if prio else {})}
                        for n, t, p, prio in columns
                    ],
                }
            ],
        },
    }


HEADER = "# Generated by `llmbackend crd` from operator/llmbackend/api/v1alpha1.py. Do not edit by hand.\n"


def render() -> str:
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)


def register(subparsers) -> None:
    parser = subparsers.add_parser("crd", help="print the LLMBackend CRD generated from the API models")
    parser.add_argument("--reference", action="store_true", help="print the Markdown configuration reference instead")
    parser.set_defaults(func=lambda args: sys.stdout.write(reference_markdown() if args.reference else render()) and 0)


def reference_markdown() -> str:
    """Configuration reference (docs/configuration.md), generated from the same schema as the CRD."""
    spec = openapi_schema(api.LLMBackendSpec)
    lines = [
        "# LLMBackend configuration reference",
        "",
        "Generated by `llmbackend crd --reference` from operator/llmbackend/api/v1alpha1.py. Do not edit by hand.",
        "",
        "| field | type | default | constraints | description |",
        "|---|---|---|---|---|",
    ]

    def walk(node: dict[str, Any], path: str) -> None:
        for name, prop in (node.get("properties") or {}).items():
            field_path = f"{path}.{name}"
            kind = prop.get("type", "")
            if kind == "array":
                kind = f"[]{prop.get('items', {}).get('type', '')}"
            constraints = []
            for key, label in (("minimum", ">="), ("maximum", "<="), ("maxLength", "max length"), ("pattern", "pattern")):
                if key in prop:
                    bound = ">" if key == "minimum" and prop.get("exclusiveMinimum") else label
                    constraints.append(f"{bound} `{prop[key]}`" if key == "pattern" else f"{bound} {prop[key]}")
            if "enum" in prop:
                constraints.append("one of " + ", ".join(f"`{v}`" for v in prop["enum"]))
            for rule in prop.get("x-kubernetes-validations", []):
                constraints.append(rule["message"])
            default = prop.get("default")
            default_text = "" if default is None or isinstance(default, dict) else f"`{json_dumps(default)}`"
            description = (prop.get("description") or "").replace("\n", " ").replace("|", "\\|")
            constraint_text = "; ".join(constraints).replace("|", "\\|")
            lines.append(f"| `{field_path}` | {kind} | {default_text} | {constraint_text} | {description} |")
            if prop.get("type") == "object":
                walk(prop, field_path)
            if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
                walk(prop["items"], field_path + "[]")

    walk(spec, "spec")
    return "\n".join(lines) + "\n"


def json_dumps(value: Any) -> str:
    import json

    return json.dumps(value)
