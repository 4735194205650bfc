"""Tests for render/triton.py and render/pbtxt.py (pure rendering, no cluster).

Golden files live in tests/unit/golden/triton/<case>/; regenerate them with
UPDATE_GOLDEN=1 and review the diff before committing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.render import triton, vllm_backend
from llmbackend.render.pbtxt import Ident, ParseError, msg, parse, quote, to_pbtxt, unquote
from llmbackend.render.triton import (
    assert_engine_managed_batching,
    batching_violations,
    engine_dir,
    render_model_repository,
    triton_command,
)

GOLDEN = Path(__file__).parent / "golden" / "triton"


def spec(engine: dict | None = None, source: dict | None = None, preset: str = "llama-3.1-8b") -> LLMBackendSpec:
    model: dict = {"preset": preset}
    if source is not None:
        model["source"] = source
    return LLMBackendSpec.model_validate({"model": model, "engine": engine or {}})


def legacy(engine: dict | None = None) -> LLMBackendSpec:
    """The opt-in legacy TensorRT engine ensemble."""
    return spec({"format": "engine", **(engine or {})})


def triton_schema(text: str):
    """Parse a rendered config.pbtxt with Triton's own protobuf schema (raises on any unknown field or bad value)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


# ---- golden files ----

GOLDEN_CASES = {
    "trtllm-llmapi-default-tp2": (spec(), "llama-3.1-8b", 2, 1, None, None),
    "trtllm-llmapi-moe-fp8kv-tp4-ep4": (
        spec({"quantization": "fp8", "kvCacheDtype": "fp8", "maxBatchSize": 256, "enableKvCacheReuse": True,
              "batchSchedulerPolicy": "guaranteed_no_evict", "streaming": False}, preset="mixtral-8x7b"),
        "mixtral-8x7b", 4, 1, 4, "NVIDIA-H100-80GB-HBM3",
    ),
    "trtllm-default-tp1": (legacy(), "llama-3.1-8b", 1, 1, None, "NVIDIA-H100-80GB-HBM3"),
    "trtllm-fp8-tp4-pp2-nostream": (
        spec({
            "format": "engine", "quantization": "fp8", "maxBatchSize": 128, "batchSchedulerPolicy": "guaranteed_no_evict",
            "kvCacheFreeGpuMemFraction": 0.85, "enableChunkedContext": False,
            "enableKvCacheReuse": True, "streaming": False,
        }),
        "llama-3.1-405b", 4, 2, None, "NVIDIA-H200",
    ),
    "vllm-fp8-tp2-pvc": (
        spec({"backend": "vllm", "quantization": "fp8", "maxBatchSize": 32, "maxSeqLen": 8192},
             {"pvc": {"claimName": "weights", "path": "/llama"}}),
        "llama-3.1-8b", 2, 1, None, None,
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden(case: str) -> None:
    s, name, tp, pp, ep, gpu = GOLDEN_CASES[case]
    files = render_model_repository(s, name, tp, pp, ep, gpu)
    # model.py is the package's own file, shipped verbatim: checked for identity, not kept twice.
    for rel in [r for r in files if r.endswith("/1/model.py")]:
        assert files.pop(rel) in (triton.llmapi_model_source(), vllm_backend.model_source())
    root = GOLDEN / case
    if os.environ.get("UPDATE_GOLDEN") == "1":
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    for rel, text in files.items():
        if rel.endswith("config.pbtxt"):
            triton_schema(text)
    on_disk = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    assert sorted(on_disk) == sorted(files), "rendered file set changed"
    for rel, text in files.items():
        assert text == on_disk[rel], f"{case}/{rel} differs from golden (UPDATE_GOLDEN=1 to regenerate, then review)"


# ---- tensorrtllm structure ----


def _cfg(files: dict[str, str], path: str) -> dict:
    return parse(files[path])


def _one(d: dict, key: str, default=None):
    return d[key][-1] if key in d else default


def _params(cfg: dict) -> dict[str, str]:
    return {_one(p, "key"): _one(_one(p, "value"), "string_value") for p in cfg.get("parameters", [])}


def _tensors(cfg: dict, kind: str) -> dict[str, str]:
    return {_one(t, "name"): _one(t, "data_type") for t in cfg.get(kind, [])}


def test_trtllm_files_and_parameters() -> None:
    s = legacy({"maxBatchSize": 96, "kvCacheFreeGpuMemFraction": 0.8, "enableKvCacheReuse": True})
    files = render_model_repository(s, "m", 2, 2)
    assert sorted(files) == sorted(f"{m}/config.pbtxt" for m in triton.TRTLLM_MODELS)
    trt = _cfg(files, "tensorrt_llm/config.pbtxt")
    assert _one(trt, "backend") == "tensorrtllm"
    assert _one(trt, "max_batch_size") == 96
    assert _one(_one(trt, "model_transaction_policy"), "decoupled") is True
    dyn = _one(trt, "dynamic_batching")
    assert _one(dyn, "max_queue_delay_microseconds") == 0
    assert "preferred_batch_size" not in dyn
    assert _one(_one(dyn, "default_queue_policy"), "max_queue_size") == 96 * triton.QUEUE_BATCHES
    p = _params(trt)
    assert p["gpt_model_type"] == "inflight_fused_batching"
    assert p["gpt_model_path"] == "/models/engines/triton-26.10/unknown-gpu/bf16-tp2-pp2-b96-s4096-t8192" \
        == engine_dir(s, 2, 2)
    assert p["max_beam_width"] == "1"
    assert p["batch_scheduler_policy"] == "max_utilization"
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.8"
    assert p["enable_chunked_context"] == "true"
    assert p["enable_kv_cache_reuse"] == "true"
    assert p["exclude_input_in_output"] == "true"
    for name in ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "streaming"):
        assert name in _tensors(trt, "input")
    for name in ("output_ids", "sequence_length"):
        assert name in _tensors(trt, "output")
    for model in ("preprocessing", "postprocessing"):
        cfg = _cfg(files, f"{model}/config.pbtxt")
        assert _one(cfg, "backend") == "python"
        assert _params(cfg)["tokenizer_dir"] == "/models/tokenizer"
        assert "model.py in 1/ comes from the serving image" in files[f"{model}/config.pbtxt"]
    # model.py reads multimodal_model_path unconditionally; empty means text-only
    assert _params(_cfg(files, "preprocessing/config.pbtxt"))["multimodal_model_path"] == ""


def test_trtllm_streaming_off_is_not_decoupled() -> None:
    files = render_model_repository(legacy({"streaming": False}), "m", 1, 1)
    trt = _cfg(files, "tensorrt_llm/config.pbtxt")
    assert _one(_one(trt, "model_transaction_policy"), "decoupled") is False


def test_ensemble_wiring_is_consistent() -> None:
    """Every ensemble edge connects an existing producer to an existing consumer of the same dtype."""
    files = render_model_repository(legacy(), "m", 1, 1)
    ens = _cfg(files, "ensemble/config.pbtxt")
    assert _one(ens, "platform") == "ensemble"
    ens_inputs = _tensors(ens, "input")
    for name in ("text_input", "max_tokens", "stream"):
        assert name in ens_inputs
    assert "text_output" in _tensors(ens, "output")
    available = dict(ens_inputs)  # tensor name -> dtype
    steps = _one(ens, "ensemble_scheduling")["step"]
    assert [_one(s, "model_name") for s in steps] == ["preprocessing", "tensorrt_llm", "postprocessing"]
    for step in steps:
        model = _cfg(files, f"{_one(step, 'model_name')}/config.pbtxt")
        m_in, m_out = _tensors(model, "input"), _tensors(model, "output")
        for edge in step.get("input_map", []):
            key, value = _one(edge, "key"), _one(edge, "value")
            assert key in m_in, f"{key} is not an input of {_one(step, 'model_name')}"
            assert value in available, f"{value} is produced by no earlier step"
            assert available[value] == m_in[key], f"dtype mismatch on {value} -> {key}"
        for edge in step.get("output_map", []):
            key, value = _one(edge, "key"), _one(edge, "value")
            assert key in m_out, f"{key} is not an output of {_one(step, 'model_name')}"
            available[value] = m_out[key]
        # required (non-optional) model inputs must be fed
        fed = {_one(e, "key") for e in step.get("input_map", [])}
        for t in model["input"]:
            if not _one(t, "optional", False):
                assert _one(t, "name") in fed, f"required input {_one(t, 'name')} not fed"
    for name, dtype in _tensors(ens, "output").items():
        assert available.get(name) == dtype


def test_version_dirs_and_served_name() -> None:
    assert triton.version_dirs("tensorrtllm", "m", "engine") == [
        "ensemble/1", "preprocessing/1", "tensorrt_llm/1", "postprocessing/1"]
    assert triton.version_dirs("tensorrtllm", "m") == ["m/1"]
    assert triton.version_dirs("vllm", "m") == ["m/1"]
    assert triton.served_model_name("tensorrtllm", "m", "engine") == "ensemble"
    assert triton.served_model_name("tensorrtllm", "m") == "m"
    assert triton.served_model_name("vllm", "m") == "m"
    assert set(triton.IMAGE_PYTHON_MODELS) == {"preprocessing/1/model.py", "postprocessing/1/model.py"}


def test_engine_dir_is_keyed_by_everything_that_invalidates_an_engine() -> None:
    base = legacy({"image": "nvcr.io/nvidia/tritonserver:25.03-trtllm-python-py3"})
    key = engine_dir(base, 1, 1, "NVIDIA-H100-80GB-HBM3")
    assert key == "/models/engines/triton-25.03/sm90/bf16-tp1-pp1-b64-s4096-t8192"
    assert engine_dir(base, 1, 1, "NVIDIA-H200") == key, "same SM, same engine"
    changed = [
        engine_dir(legacy({"image": "nvcr.io/nvidia/tritonserver:25.05-trtllm-python-py3"}), 1, 1, "NVIDIA-H100-80GB-HBM3"),
        engine_dir(base, 1, 1, "NVIDIA-A100-SXM4-80GB"),
        engine_dir(base, 1, 1, "NVIDIA-L40S"),
        engine_dir(legacy({"image": base.engine.image, "quantization": "fp8"}), 1, 1, "NVIDIA-H100-80GB-HBM3"),
        engine_dir(base, 2, 1, "NVIDIA-H100-80GB-HBM3"),
        engine_dir(base, 1, 2, "NVIDIA-H100-80GB-HBM3"),
        engine_dir(legacy({"image": base.engine.image, "maxBatchSize": 8}), 1, 1, "NVIDIA-H100-80GB-HBM3"),
        engine_dir(legacy({"image": base.engine.image, "maxSeqLen": 8192}), 1, 1, "NVIDIA-H100-80GB-HBM3"),
        engine_dir(legacy({"image": base.engine.image, "maxNumTokens": 4096}), 1, 1, "NVIDIA-H100-80GB-HBM3"),
    ]
    assert len({key, *changed}) == len(changed) + 1, "each invalidating change names a new directory"
    assert triton.gpu_key("NVIDIA-A100-SXM4-80GB") == "sm80" and triton.gpu_key("NVIDIA-A10G") == "sm86"
    assert triton.gpu_key("NVIDIA-L40S") == "sm89" and triton.gpu_key("NVIDIA-L4") == "sm89"
    assert triton.gpu_key("Some New GPU") == "some-new-gpu" and triton.gpu_key(None) == "unknown-gpu"
    assert triton.runtime_key("registry.local/triton@sha256:" + "ab" * 32).startswith("digest-abab")
    assert triton.runtime_key("registry.local/triton:my-build") == "my-build"
    with pytest.raises(ValueError):
        engine_dir(base, 0, 1)


# ---- vllm ----


def test_vllm_files_and_config() -> None:
    files = render_model_repository(spec({"backend": "vllm"}), "my-model_1.0", 4, 1)
    assert sorted(files) == ["my-model_1.0/1/model.json", "my-model_1.0/1/model.py", "my-model_1.0/config.pbtxt"]
    cfg = _cfg(files, "my-model_1.0/config.pbtxt")
    assert _one(cfg, "name") == "my-model_1.0"
    assert _one(cfg, "backend") == "python"  # the operator's model over vLLM's AsyncLLM, not the stock backend
    assert _one(cfg, "max_batch_size") == 0
    assert _one(_one(cfg, "model_transaction_policy"), "decoupled") is True
    assert "dynamic_batching" not in cfg
    assert cfg["instance_group"] == [{"count": [1], "kind": [Ident("KIND_MODEL")]}]
    assert {"text_input", "stream", "max_tokens", "stop_words"} <= set(_tensors(cfg, "input"))
    assert {"text_output", "finish_reason"} <= set(_tensors(cfg, "output"))


def test_vllm_model_json() -> None:
    s = spec(
        {"backend": "vllm", "maxBatchSize": 48, "maxSeqLen": 16384, "maxNumTokens": 4096,
         "kvCacheFreeGpuMemFraction": 0.3, "enableKvCacheReuse": True, "vllm": {"gpuMemoryUtilization": 0.85}},
        {"pvc": {"claimName": "w"}},
    )
    args = json.loads(render_model_repository(s, "m", 2, 3)["m/1/model.json"])
    assert args == {
        "model": "/models",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 3,
        "gpu_memory_utilization": 0.85,  # vLLM's own field; kvCacheFreeGpuMemFraction is TensorRT-LLM's
        "max_num_seqs": 48,
        "max_model_len": 16384,
        "enforce_eager": False,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "max_num_batched_tokens": 4096,
        "dtype": "bfloat16",
        "disable_log_stats": False,
    }


@pytest.mark.parametrize(
    ("quantization", "expected"),
    [
        ("bf16", {"dtype": "bfloat16"}),
        ("fp16", {"dtype": "float16"}),
        ("fp8", {"quantization": "fp8", "kv_cache_dtype": "fp8"}),
        ("int4_awq", {"quantization": "awq"}),
    ],
)
def test_vllm_quantization_mapping(quantization: str, expected: dict) -> None:
    args = triton.vllm_engine_args(spec({"backend": "vllm", "quantization": quantization}), 1, 1)
    keys = {"dtype", "quantization", "kv_cache_dtype"}
    assert {k: v for k, v in args.items() if k in keys} == expected


def test_vllm_rejects_unsupported_quantization() -> None:
    with pytest.raises(ValueError, match="int8_wo"):
        render_model_repository(spec({"backend": "vllm", "quantization": "int8_wo"}), "m", 1, 1)


def test_vllm_uri_source_explicit_fp8_kv_and_no_chunking() -> None:
    s = spec({"backend": "vllm", "kvCacheDtype": "fp8", "enableChunkedContext": False,
              "maxSeqLen": 32768, "maxNumTokens": 8192}, {"uri": "s3://bucket/llama-3.1-8b"})
    args = triton.vllm_engine_args(s, 1, 1)
    assert args["model"] == "/model-cache/s3/bucket/llama-3.1-8b/refs/latest"  # the cached copy
    assert args["kv_cache_dtype"] == "fp8"
    assert args["enable_chunked_prefill"] is False
    assert args["max_num_batched_tokens"] == 32768  # a whole prompt must fit one step


# ---- the batching rule ----

engine_specs = st.fixed_dictionaries({
    "backend": st.sampled_from(["tensorrtllm", "vllm"]),
    "format": st.sampled_from(["llmapi", "engine"]),
    "quantization": st.sampled_from(["bf16", "fp16", "fp8", "int8_wo", "int4_awq"]),
    "kvCacheDtype": st.sampled_from(["auto", "bf16", "fp16", "fp8"]),
    "maxBatchSize": st.integers(1, 4096),
    "maxInputLen": st.integers(1, 100_000),
    "maxSeqLen": st.integers(2, 1_048_576),
    "maxNumTokens": st.integers(1, 1_048_576),
    "kvCacheFreeGpuMemFraction": st.floats(0.05, 0.99, allow_nan=False),
    "batchSchedulerPolicy": st.sampled_from(["max_utilization", "guaranteed_no_evict"]),
    "enableChunkedContext": st.booleans(),
    "enableKvCacheReuse": st.booleans(),
    "streaming": st.booleans(),
}).filter(lambda e: e["maxInputLen"] < e["maxSeqLen"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=engine_specs, tp=st.integers(1, 16), pp=st.integers(1, 8))
def test_batching_rule_holds_for_every_engine_spec(engine: dict, tp: int, pp: int) -> None:
    s = spec(engine)
    if engine["backend"] == "vllm" and engine["quantization"] == "int8_wo":
        with pytest.raises(ValueError):
            render_model_repository(s, "m", tp, pp)
        return
    files = render_model_repository(s, "m", tp, pp)
    assert batching_violations(files) == []
    assert_engine_managed_batching(files)
    for path, text in files.items():
        if path.endswith("config.pbtxt"):
            triton_schema(text)
            cfg = parse(text)
            if _one(cfg, "backend") == "tensorrtllm":
                assert _one(cfg, "max_batch_size") == engine["maxBatchSize"]
                assert _one(_one(cfg, "model_transaction_policy"), "decoupled") is engine["streaming"]
                p = _params(cfg)
                assert float(p["kv_cache_free_gpu_mem_fraction"]) == engine["kvCacheFreeGpuMemFraction"]
                assert p["batch_scheduler_policy"] == engine["batchSchedulerPolicy"]
            else:
                assert "dynamic_batching" not in cfg


@pytest.fixture
def trt_files() -> dict[str, str]:
    return render_model_repository(legacy(), "m", 1, 1)


def _violates(files: dict[str, str], path: str, old: str, new: str, pattern: str) -> None:
    assert old in files[path]
    broken = {**files, path: files[path].replace(old, new, 1)}
    problems = batching_violations(broken)
    assert any(re.search(pattern, p) for p in problems), problems
    with pytest.raises(AssertionError):
        assert_engine_managed_batching(broken)


def test_checker_catches_queue_delay(trt_files: dict[str, str]) -> None:
    _violates(trt_files, "tensorrt_llm/config.pbtxt", "max_queue_delay_microseconds: 0",
              "max_queue_delay_microseconds: 100", r"max_queue_delay_microseconds must be 0")


def test_checker_catches_preferred_batch_size(trt_files: dict[str, str]) -> None:
    _violates(trt_files, "tensorrt_llm/config.pbtxt", "dynamic_batching {",
              "dynamic_batching {\n  preferred_batch_size: [ 64 ]", r"preferred_batch_size")


def test_checker_catches_missing_queue_bound(trt_files: dict[str, str]) -> None:
    size = triton.executor_queue_size(spec())
    _violates(trt_files, "tensorrt_llm/config.pbtxt", f"max_queue_size: {size}", "max_queue_size: 0",
              r"max_queue_size must be a positive")


def test_checker_catches_static_batching(trt_files: dict[str, str]) -> None:
    _violates(trt_files, "tensorrt_llm/config.pbtxt", '"inflight_fused_batching"', '"V1"',
              r"gpt_model_type")


@pytest.mark.parametrize("model", ["ensemble", "preprocessing", "postprocessing"])
def test_checker_catches_batching_in_front_models(trt_files: dict[str, str], model: str) -> None:
    anchor = 'platform: "ensemble"' if model == "ensemble" else 'backend: "python"'
    _violates(trt_files, f"{model}/config.pbtxt", anchor,
              anchor + "\ndynamic_batching { max_queue_delay_microseconds: 0 }",
              rf"{model}/config.pbtxt: .*must not have dynamic_batching")


def test_checker_catches_sequence_batching(trt_files: dict[str, str]) -> None:
    _violates(trt_files, "tensorrt_llm/config.pbtxt", 'backend: "tensorrtllm"',
              'backend: "tensorrtllm"\nsequence_batching { }', r"sequence_batching")


def test_checker_vllm_rules() -> None:
    files = render_model_repository(spec({"backend": "vllm"}), "m", 1, 1)
    _violates(files, "m/config.pbtxt", "max_batch_size: 0", "max_batch_size: 8", r"max_batch_size: 0")
    _violates(files, "m/config.pbtxt", "decoupled: true", "decoupled: false", r"must be decoupled")
    _violates(files, "m/config.pbtxt", 'backend: "python"', 'backend: "python"\ndynamic_batching {}',
              r"must not have dynamic_batching")


def test_checker_parses_rather_than_greps(trt_files: dict[str, str]) -> None:
    commented = {**trt_files, "tensorrt_llm/config.pbtxt":
                 "# preferred_batch_size: [ 64 ] max_queue_delay_microseconds: 100\n"
                 + trt_files["tensorrt_llm/config.pbtxt"]}
    assert batching_violations(commented) == []
    garbage = {**trt_files, "ensemble/config.pbtxt": 'name: "ensemble" {{{'}
    assert any("cannot parse" in p for p in batching_violations(garbage))
    assert batching_violations({}) == ["no config.pbtxt in the repository"]
    assert any("unexpected backend" in p for p in batching_violations({"x/config.pbtxt": 'backend: "onnxruntime"'}))


# ---- escaping ----


@given(st.text())
def test_quote_roundtrip_and_ascii(s: str) -> None:
    lit = quote(s)
    assert unquote(lit) == s
    assert all(0x20 <= ord(c) < 0x7F for c in lit)
    assert "\n" not in lit


@given(st.text(), st.text())
def test_hostile_strings_cannot_break_out(value: str, header: str) -> None:
    m = msg(
        ("name", value),
        ("max_batch_size", 0),
        ("parameters", msg(("key", value), ("value", msg(("string_value", value))))),
        ("tags", [value, value]),
    )
    parsed = parse(to_pbtxt(m, header=header))
    assert parsed == {
        "name": [value],
        "max_batch_size": [0],
        "parameters": [{"key": [value], "value": [{"string_value": [value]}]}],
        "tags": [value, value],
    }


@pytest.mark.parametrize("hostile", [
    '" }\ndynamic_batching { preferred_batch_size: [ 8 ] }\nname: "x',
    "\\\" max_batch_size: 9 #",
    "a\x00b\x1b[31m\x7f",
    "ünïcødé ✓ 日本",
    "'single' \"double\" \\back\\",
])
def test_hostile_examples(hostile: str) -> None:
    text = to_pbtxt(msg(("name", hostile)), header=hostile)
    assert parse(text) == {"name": [hostile]}


def test_pbtxt_rejects_bad_identifiers_and_names() -> None:
    with pytest.raises(ValueError):
        Ident("KIND_CPU }")
    with pytest.raises(ValueError):
        msg(("name: 1 x", "y"))
    with pytest.raises(ValueError):
        quote("\ud800")  # lone surrogate is not Unicode text
    with pytest.raises(ParseError):
        unquote('"abc')


def test_parse_handles_upstream_style() -> None:
    text = """
    name: "tensorrt_llm"  # comment
    dynamic_batching {
        preferred_batch_size: [ 4, 8 ]
        max_queue_delay_microseconds: 100
        default_queue_policy: { max_queue_size: 10 }
    }
    instance_group [ { count: 1, kind : KIND_CPU } ]
    s: 'a' "b"
    """
    cfg = parse(text)
    dyn = cfg["dynamic_batching"][0]
    assert dyn["preferred_batch_size"] == [4, 8]
    assert dyn["default_queue_policy"] == [{"max_queue_size": [10]}]
    assert cfg["instance_group"] == [{"count": [1], "kind": ["KIND_CPU"]}]
    assert cfg["s"] == ["ab"]


valid_names = st.from_regex(r"\A[A-Za-z0-9_.-]{1,40}\Z").filter(lambda n: n not in (".", ".."))


@given(valid_names)
def test_valid_model_names_render(name: str) -> None:
    files = render_model_repository(spec({"backend": "vllm"}), name, 1, 1)
    assert parse(files[f"{name}/config.pbtxt"])["name"] == [name]


@given(st.text().filter(lambda n: not re.fullmatch(r"[A-Za-z0-9_.-]+", n) or n in (".", "..")))
def test_invalid_model_names_rejected(name: str) -> None:
    for backend in ("tensorrtllm", "vllm"):
        with pytest.raises(ValueError):
            render_model_repository(spec({"backend": backend}), name, 1, 1)


@pytest.mark.parametrize("bad", ["../etc", "a/b", "a b", 'a"b', "a\nb", "a\n", "", ".", ".."])
def test_invalid_model_name_examples(bad: str) -> None:
    with pytest.raises(ValueError):
        render_model_repository(spec(), bad, 1, 1)


# ---- command lines ----

SINGLE = [
    "tritonserver", "--model-repository=/model-repository",
    "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
    "--allow-metrics=true", "--allow-gpu-metrics=true", "--disable-auto-complete-config",
]


def test_single_process_commands() -> None:
    assert triton_command("/model-repository", 1, 1, "tensorrtllm") == SINGLE
    # vLLM spawns its own TP/PP workers: one tritonserver regardless of world size
    assert triton_command("/model-repository", 4, 2, "vllm") == SINGLE


def _contexts(argv: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for a in argv:
        if a == ":":
            out.append([])
        else:
            out[-1].append(a)
    return out


def test_llmapi_runs_one_tritonserver_per_node() -> None:
    # the LLM API spawns its own GPU ranks on one node, from one MPI process
    assert triton_command("/model-repository", 1, 1, "tensorrtllm") == SINGLE
    assert triton_command("/model-repository", 8, 1, "tensorrtllm") == ["mpirun", "--allow-run-as-root", "-n", "1",
                                                                         *SINGLE]


def test_mpirun_command_one_rank_per_gpu() -> None:
    argv = triton_command("/model-repository", 2, 2, "tensorrtllm", "engine")
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    ctxs = _contexts(argv[2:])
    assert len(ctxs) == 4
    for rank, ctx in enumerate(ctxs):
        assert ctx[:4] == ["-n", "1", "tritonserver", "--model-repository=/model-repository"]
        assert f"--backend-config=python,shm-region-prefix-name=prefix{rank}_" in ctx
        assert "--disable-auto-complete-config" in ctx
        if rank == 0:
            assert "--http-port=8000" in ctx and "--metrics-port=8002" in ctx
        else:
            assert not any(a.startswith(("--http-port", "--grpc-port", "--metrics-port")) for a in ctx)
            assert {"--allow-http=false", "--allow-grpc=false", "--allow-metrics=false",
                    "--model-control-mode=explicit", "--load-model=tensorrt_llm"} <= set(ctx)
    assert not any(" " in a for a in argv)  # argv, never a shell string


@pytest.mark.parametrize("call", [
    lambda: triton_command("/repo; rm -rf /", 1, 1, "tensorrtllm"),
    lambda: triton_command("/repo", 0, 1, "tensorrtllm"),
    lambda: triton_command("/repo", 1, 1, "onnx"),
])
def test_command_validation(call) -> None:
    with pytest.raises(ValueError):
        call()


# ---- LLM API model ----


def test_llmapi_repository_and_model_yaml() -> None:
    import yaml

    from llmbackend.api import engine_metrics as em

    s = spec({"maxBatchSize": 48, "maxNumTokens": 4096, "maxSeqLen": 8192, "kvCacheFreeGpuMemFraction": 0.7,
              "enableKvCacheReuse": True, "enableChunkedContext": False, "kvCacheDtype": "fp8", "streaming": False},
             {"pvc": {"claimName": "w", "path": "/llama"}})
    files = render_model_repository(s, "llama-3.1-8b", 2, 3)
    assert sorted(files) == ["llama-3.1-8b/1/model.py", "llama-3.1-8b/1/model.yaml", "llama-3.1-8b/config.pbtxt"]
    pb = triton_schema(files["llama-3.1-8b/config.pbtxt"])
    assert (pb.name, pb.backend, pb.max_batch_size) == ("llama-3.1-8b", "python", 0)
    assert pb.model_transaction_policy.decoupled, "always decoupled, even with streaming off: generate_stream needs it"
    assert not pb.HasField("dynamic_batching")
    assert {i.name for i in pb.input if not i.optional} == {"text_input"}
    assert [o.name for o in pb.output] == ["text_output", "finish_reason", "num_input_tokens", "num_output_tokens",
                                          "sequence_index", "logprobs"]
    params = {k: v.string_value for k, v in pb.parameters.items()}
    # the names model.py exports are the constants of api/engine_metrics.py
    assert params["metric_engine_queue"] == em.ENGINE_QUEUE_METRIC
    assert params["metric_engine_compute"] == em.ENGINE_COMPUTE_METRIC
    assert params["metric_engine_requests"] == em.ENGINE_REQUESTS_METRIC
    assert params["metric_engine_failures"] == em.ENGINE_FAILURES_METRIC
    assert params["metric_engine_rejected"] == em.ENGINE_REJECTED_METRIC
    assert params["metric_engine_request_seconds"] == em.ENGINE_REQUEST_SECONDS_METRIC
    buckets = [float(b) for b in params["metric_engine_request_seconds_buckets"].split(",")]
    assert buckets == list(em.ENGINE_REQUEST_SECONDS_BUCKETS)
    assert params["metric_request_gauge"] == em.REQUEST_GAUGE
    assert params["metric_request_types"].split(",") == list(em.REQUEST_TYPES)
    assert params["metric_kv_gauge"] == em.KV_GAUGE
    assert params["metric_kv_types"].split(",") == list(em.KV_TYPES)
    args = yaml.safe_load(files["llama-3.1-8b/1/model.yaml"])
    assert args["model"] == "/models"
    assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (2, 3)
    assert "moe_expert_parallel_size" not in args
    assert (args["max_batch_size"], args["max_num_tokens"], args["max_seq_len"]) == (48, 4096, 8192)
    assert args["enable_chunked_prefill"] is False
    assert args["kv_cache_config"] == {"free_gpu_memory_fraction": 0.7, "enable_block_reuse": True, "dtype": "fp8"}
    assert args["return_perf_metrics"] is True and args["enable_iter_perf_stats"] is True
    # every decode-only batch up to maxBatchSize replays a CUDA graph (padded up), not only sizes 1-31, 32, 64, 128
    assert args["cuda_graph_config"] == {"enable_padding": True, "max_batch_size": 48}
    assert args["triton_config"] == {"decoupled": True, "max_batch_size": 0}
    assert files["llama-3.1-8b/1/model.py"] == triton.llmapi_model_source()
    assert "llmbackend" not in [line.split()[1] for line in triton.llmapi_model_source().splitlines()
                                if line.startswith(("import ", "from "))], "model.py runs in the stock image"


def test_llmapi_expert_parallel_from_the_plan() -> None:
    import yaml

    files = render_model_repository(spec(preset="mixtral-8x7b"), "mixtral", 4, 1, 2)
    assert yaml.safe_load(files["mixtral/1/model.yaml"])["moe_expert_parallel_size"] == 2
    with pytest.raises(ValueError):
        render_model_repository(spec(preset="mixtral-8x7b"), "mixtral", 4, 1, 0)


def test_checker_requires_llmapi_model_decoupled_and_unbatched() -> None:
    files = render_model_repository(spec(), "m", 1, 1)
    bad = dict(files, **{"m/config.pbtxt": files["m/config.pbtxt"].replace("max_batch_size: 0", "max_batch_size: 8")})
    assert any("max_batch_size: 0" in p for p in batching_violations(bad))
    bad = dict(files, **{"m/config.pbtxt": files["m/config.pbtxt"].replace("decoupled: true", "decoupled: false")})
    assert any("decoupled" in p for p in batching_violations(bad))
