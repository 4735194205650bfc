"""Rendering of a vLLM backend (render/vllm_backend.py): quantization from the checkpoint, vLLM's own memory
fraction, the config checked against Triton's protobuf schema, metric names from the one module, and the model
file / stand-in agreeing on vLLM's API."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format

from llmbackend.api import engine_metrics as M
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.render import triton, vllm_backend
from llmbackend.render.vllm_backend import (
    QUANTIZATION_MISMATCH,
    UNSUPPORTED_QUANTIZATION,
    EngineConfigError,
    quantization_args,
)

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "dev" / "standins"
ARCH = {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 8, "headDim": 128,
        "vocabSize": 128256, "parameterCount": 8_030_000_000}


def spec(engine: dict | None = None, checkpoint: str | None = None, uri: str | None = None) -> LLMBackendSpec:
    arch = dict(ARCH, **({"checkpointQuantization": checkpoint} if checkpoint else {}))
    model: dict = {"architecture": arch, "name": "m"}
    if uri:
        model["source"] = {"uri": uri}
    return LLMBackendSpec.model_validate({"model": model, "engine": {"backend": "vllm", **(engine or {})}})


@pytest.fixture(scope="module")
def standin():
    sys.path.insert(0, str(STANDINS))
    try:
        import vllm  # the CPU stand-in

        assert getattr(vllm, "STANDIN", False), f"a real vllm shadows the stand-in: {vllm.__file__}"
        yield vllm
    finally:
        sys.path.remove(str(STANDINS))


# ---- quantization: the checkpoint's declaration wins; the spec is a runtime choice only for 16-bit checkpoints ----

QUANT_CASES = [
    # (spec quantization, checkpoint quant_method, expected args | error reason)
    ("bf16", None, {"dtype": "bfloat16"}),
    ("fp16", None, {"dtype": "float16"}),
    ("fp8", None, {"quantization": "fp8"}),            # vLLM quantizes a 16-bit checkpoint at load
    ("int4_awq", None, {"quantization": "awq"}),
    ("int8_wo", None, UNSUPPORTED_QUANTIZATION),
    ("fp8", "fp8", {}),                                 # pre-quantized FP8: no forced argument
    ("fp8", "modelopt", {}),
    ("fp8", "compressed-tensors", {}),
    ("bf16", "modelopt", {"dtype": "bfloat16"}),        # 16-bit compute over the checkpoint's FP8 weights
    ("fp16", "awq", {"dtype": "float16"}),
    ("int4_awq", "awq", {}),
    ("int4_awq", "gptq", {}),
    ("int8_wo", "gptq", {}),
    ("int4_awq", "mxfp4", {}),                          # a method not in the table: its width is unknown here
    ("fp8", "awq", QUANTIZATION_MISMATCH),
    ("int4_awq", "modelopt", QUANTIZATION_MISMATCH),
    ("int8_wo", "fp8", QUANTIZATION_MISMATCH),
]


@pytest.mark.parametrize(("quant", "checkpoint", "expected"), QUANT_CASES)
def test_quantization_args(quant: str, checkpoint: str | None, expected) -> None:
    s = spec({"quantization": quant}, checkpoint)
    if isinstance(expected, str):
        with pytest.raises(EngineConfigError) as info:
            quantization_args(s)
        assert info.value.reason == expected
        assert quant in str(info.value)  # the message names the value to change
        with pytest.raises(ValueError):  # render_model_repository surfaces it (the controller makes it a condition)
            triton.render_model_repository(s, "m", 1, 1)
    else:
        assert quantization_args(s) == expected


def test_pre_quantized_fp8_checkpoint_renders_without_a_quantization_argument(standin, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "modelopt"}}))
    s = spec({"quantization": "fp8"}, "modelopt")
    args = json.loads(triton.render_model_repository(s, "m", 1, 1)["m/1/model.json"])
    assert "quantization" not in args
    args["model"] = str(tmp_path)  # the stand-in reads the checkpoint's config.json where the pod would mount it
    from vllm.v1.engine.async_llm import check_quantization

    assert check_quantization(standin.AsyncEngineArgs(**args)) == "modelopt"
    # What the renderer used to write is what vLLM refuses for such a checkpoint.
    with pytest.raises(ValueError, match="does not match"):
        check_quantization(standin.AsyncEngineArgs(**dict(args, quantization="fp8")))


# ---- memory: vLLM's own fraction of total memory ----


def test_gpu_memory_utilization_is_its_own_field() -> None:
    default = triton.vllm_engine_args(spec({"kvCacheFreeGpuMemFraction": 0.3}), 1, 1)
    assert default["gpu_memory_utilization"] == 0.9  # not the TensorRT-LLM KV fraction
    args = triton.vllm_engine_args(spec({"vllm": {"gpuMemoryUtilization": 0.7}}), 1, 1)
    assert args["gpu_memory_utilization"] == 0.7
    with pytest.raises(ValueError):
        spec({"vllm": {"gpuMemoryUtilization": 1.5}})


# ---- config.pbtxt against Triton's schema; names from the one module ----


def _config(files: dict[str, str]):
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(files["m/config.pbtxt"], model_config_pb2.ModelConfig())


def test_config_parses_with_tritons_schema_and_batching_belongs_to_vllm() -> None:
    from tritonclient.grpc import model_config_pb2

    cfg = _config(triton.render_model_repository(spec(), "m", 2, 1))
    assert cfg.backend == "python" and cfg.max_batch_size == 0
    assert cfg.model_transaction_policy.decoupled
    assert not cfg.HasField("dynamic_batching") and not cfg.HasField("sequence_batching")
    assert [g.kind for g in cfg.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_MODEL]
    dtype = model_config_pb2.DataType.Name
    inputs = {i.name: (dtype(i.data_type), list(i.dims), i.optional) for i in cfg.input}
    assert inputs["text_input"] == ("TYPE_STRING", [1], False)
    assert inputs["stop_words"] == ("TYPE_STRING", [-1], True)
    assert inputs["seed"] == ("TYPE_UINT64", [1], True)
    assert all(opt for name, (_, _, opt) in inputs.items() if name != "text_input")
    assert inputs["guided_decoding_guide_type"] == inputs["guided_decoding_guide"] == ("TYPE_STRING", [1], True)
    assert len(inputs) == 20 and inputs["adapter"] == ("TYPE_STRING", [1], True)
    outputs = {o.name: (dtype(o.data_type), list(o.dims)) for o in cfg.output}
    assert outputs == {"text_output": ("TYPE_STRING", [1]), "finish_reason": ("TYPE_STRING", [1]),
                       "num_input_tokens": ("TYPE_INT32", [1]), "num_output_tokens": ("TYPE_INT32", [1]),
                       "sequence_index": ("TYPE_INT32", [1]), "logprobs": ("TYPE_STRING", [1])}


def test_metric_names_reach_the_model_from_engine_metrics() -> None:
    cfg = _config(triton.render_model_repository(spec(), "m", 1, 1))
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    exported = {v for k, v in params.items() if k not in ("engine", "drain_seconds")
                and not k.endswith(("_types", "_buckets"))}
    assert params["metric_request_types"].split(",") == list(M.REQUEST_TYPES)
    assert params["metric_kv_types"].split(",") == list(M.KV_TYPES)
    buckets = [float(b) for b in params["metric_engine_request_seconds_buckets"].split(",")]
    assert buckets == list(M.ENGINE_REQUEST_SECONDS_BUCKETS)
    assert exported == {M.ENGINE_QUEUE_METRIC, M.ENGINE_COMPUTE_METRIC, M.ENGINE_REQUESTS_METRIC,
                        M.ENGINE_FAILURES_METRIC, M.ENGINE_REJECTED_METRIC, M.ENGINE_REQUEST_SECONDS_METRIC, M.REQUEST_GAUGE, M.KV_GAUGE,
                        M.VLLM_WAITING_GAUGE, M.VLLM_RUNNING_GAUGE, M.VLLM_KV_USAGE_GAUGE, M.LORA_INFO_GAUGE}
    # The model file asks for exactly these parameter keys (read without importing it: it needs Triton's stub).
    tree = ast.parse(vllm_backend.model_source())
    wanted = next(ast.literal_eval(n.value) for n in tree.body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "METRIC_PARAMETERS")
    assert set(wanted) == set(params) - {"engine", "drain_seconds"}


def test_model_file_is_the_shipped_source_and_model_json_fits_engine_args(standin) -> None:
    files = triton.render_model_repository(spec({"quantization": "fp8", "kvCacheDtype": "fp8"}), "m", 2, 2)
    source = (ROOT / "operator" / "llmbackend" / "render" / "models" / "vllm_engine.py").read_text()
    assert files["m/1/model.py"] == source
    compile(source, "model.py", "exec")
    args = json.loads(files["m/1/model.json"])
    fields = {f.name for f in dataclasses.fields(standin.AsyncEngineArgs)}
    assert set(args) <= fields, set(args) - fields  # an unknown argument would stop vLLM
    assert args["quantization"] == "fp8" and args["kv_cache_dtype"] == "fp8"


# ---- the stand-in batches in flight ----


def test_standin_batches_in_flight_and_reports_vllms_stats(standin, monkeypatch) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.metrics.loggers import StatLoggerBase

    monkeypatch.setenv("VLLM_STANDIN_STEP_S", "0.001")
    steps: list = []

    class Recorder(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0) -> None:
            self.config = vllm_config

        def record(self, scheduler_stats, iteration_stats, *args, **kwargs) -> None:
            steps.append((scheduler_stats, iteration_stats))

        def log_engine_initialized(self) -> None:
            pass

    async def go():
        engine = AsyncLLM.from_engine_args(standin.AsyncEngineArgs(max_num_seqs=2, max_model_len=64),
                                           stat_loggers=[Recorder])

        async def one(i: int):
            outs = [o async for o in engine.generate("a b c", standin.SamplingParams(max_tokens=3), f"r{i}")]
            return outs[-1]

        results = await asyncio.gather(*(one(i) for i in range(6)))
        engine.shutdown()
        return results

    results = asyncio.run(go())
    assert all(r.finished and r.outputs[0].finish_reason == "length" and len(r.outputs[0].token_ids) == 3
               for r in results)
    assert max(s.num_running_reqs for s, _ in steps) == 2  # never more than the slots
    assert max(s.num_waiting_reqs for s, _ in steps) == 4  # the rest wait
    finished = [f for _, it in steps for f in it.finished_requests]
    assert len(finished) == 6
    waited = sorted(f.queued_time for f in finished)
    assert waited[-1] > waited[0] and all(f.inference_time > 0 for f in finished)
