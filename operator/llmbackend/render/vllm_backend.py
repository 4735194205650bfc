"""Rendering of a vLLM backend's Triton model: the operator's Python model over vLLM's async engine.

Files: `<model>/config.pbtxt` (python backend, decoupled, max_batch_size 0, metric names as parameters),
`<model>/1/model.py` (render/models/vllm_engine.py, shipped as package data) and `<model>/1/model.json`
(vLLM AsyncEngineArgs). Not Triton's stock vllm backend: it exports no engine queue time and no waiting count,
which the autoscaler needs (see docs/vllm.md).

Quantization: a checkpoint that declares its own (architecture.checkpointQuantization, from config.json's
quantization_config) is loaded as it is: no `quantization` argument (vLLM rejects one that contradicts the
checkpoint). The spec's quantization is a runtime choice only for 16-bit checkpoints (fp8: vLLM quantizes at load).
A spec quantization that contradicts the checkpoint is an EngineConfigError, reported as a condition.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ..api import engine_metrics as M
from ..api.catalog import resolve_architecture
from ..api.engine_versions import VLLM_VERSION
from ..api.v1alpha1 import KVCacheDtype, LLMBackendSpec, Quantization
from . import adapters, drain, llm_io
from .pbtxt import Ident, Message, msg, parse, to_pbtxt

MODEL_FILE = "models/vllm_engine.py"
# The vLLM version whose API the model file and the CPU stand-in (dev/standins/vllm) follow.
VLLM_API_VERSION = VLLM_VERSION

# config.pbtxt parameter key -> exported metric name (the model reads its names from here). The keys of the shared
# engine metrics are the ones the TensorRT-LLM LLM API model reads; the vllm: names are this backend's own.
METRIC_PARAMETERS: dict[str, str] = {
    **llm_io.ENGINE_METRIC_PARAMETERS,
    "metric_vllm_waiting": M.VLLM_WAITING_GAUGE,
    "metric_vllm_running": M.VLLM_RUNNING_GAUGE,
    "metric_vllm_kv_usage": M.VLLM_KV_USAGE_GAUGE,
}

QUANTIZATION_MISMATCH = "QuantizationMismatch"
UNSUPPORTED_QUANTIZATION = "UnsupportedQuantization"

_FP8, _INT8, _INT4 = Quantization.FP8, Quantization.INT8_WO, Quantization.INT4_AWQ
_NVFP4, _MXFP4 = Quantization.NVFP4, Quantization.MXFP4
# Checkpoint quant_method -> the spec quantizations that describe such weights. A method not listed is accepted
# with any non-16-bit spec value (its width is unknown here).
CHECKPOINT_METHODS: dict[str, frozenset[Quantization]] = {
    "fp8": frozenset({_FP8}),
    "modelopt": frozenset({_FP8}),
    "fbgemm_fp8": frozenset({_FP8}),
    "awq": frozenset({_INT4}),
    "awq_marlin": frozenset({_INT4}),
    "gptq": frozenset({_INT4, _INT8}),
    "gptq_marlin": frozenset({_INT4, _INT8}),
    "bitsandbytes": frozenset({_INT4, _INT8}),
    "compressed-tensors": frozenset({_FP8, _INT8, _INT4}),
    # ModelOpt NVFP4 (api/checkpoint.py reads quant_algo NVFP4 as nvfp4; vLLM's method is modelopt_fp4).
    "nvfp4": frozenset({_NVFP4}),
    "modelopt_fp4": frozenset({_NVFP4}),
    # gpt-oss: int4_awq was the way to size it before mxfp4 existed, and stays accepted.
    "mxfp4": frozenset({_MXFP4, _INT4}),
}
# fp4 weights come only from a checkpoint quantized ahead: neither engine quantizes to fp4 at load.
FP4 = frozenset({_NVFP4, _MXFP4})
_SIXTEEN_BIT = {Quantization.BF16: "bfloat16", Quantization.FP16: "float16"}


class EngineConfigError(ValueError):
    """The spec cannot be rendered for this engine; `reason` is the condition reason, the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def quantization_args(spec: LLMBackendSpec) -> dict[str, str]:
    """`dtype` / `quantization` for vLLM from the spec and the checkpoint's declared quantization."""
    quant = Quantization(spec.engine.quantization)
    declared = resolve_architecture(spec.model).checkpoint_quantization
    if declared:
        if quant in _SIXTEEN_BIT:  # 16-bit compute over the checkpoint's own quantized weights
            return {"dtype": _SIXTEEN_BIT[quant]}
        allowed = CHECKPOINT_METHODS.get(declared)
        if allowed is not None and quant not in allowed:
            fits = ", ".join(sorted(q.value for q in allowed))
            raise EngineConfigError(
                QUANTIZATION_MISMATCH,
                f"engine.quantization is {quant.value} but the checkpoint declares quantization {declared!r} "
                f"(config.json quantization_config), which vLLM loads as it is: set engine.quantization to {fits} "
                "or bf16, or point the model at a checkpoint quantized as wanted")
        return {}  # vLLM reads the method from the checkpoint; passing one risks a contradiction
    if quant in _SIXTEEN_BIT:
        return {"dtype": _SIXTEEN_BIT[quant]}
    if quant == _FP8:
        return {"quantization": "fp8"}  # vLLM quantizes a 16-bit checkpoint to FP8 at load time
    if quant == _INT4:
        return {"quantization": "awq"}  # AWQ only loads AWQ checkpoints; vLLM checks the weights
    raise EngineConfigError(
        UNSUPPORTED_QUANTIZATION,
        f"vLLM cannot quantize a 16-bit checkpoint to {quant.value} at load time: use fp8, bf16 or fp16, or a "
        "checkpoint quantized ahead (and set model.architecture.checkpointQuantization)")


def vllm_engine_args(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
                     weights: str, expert_parallel: int | None = None, attention_dp: bool = False,
                     draft: str | None = None) -> dict[str, Any]:
    """vLLM AsyncEngineArgs written to model.json.

    The plan's tensor_parallel is the replica's GPUs per stage. With attention data parallelism they become vLLM's
    data parallel ranks (tensor_parallel_size 1, data_parallel_size = those GPUs) with expert parallelism, the layout
    vLLM's data parallel deployment guide gives for MLA MoE models (docs/serving/data_parallel_deployment.md: each
    DP rank is an engine core with its own scheduler, so max_num_seqs is per rank; the experts form an EP group of
    DP x TP). A plan with EP and tensor parallel attention sets enable_expert_parallel (EP = TP).
    """
    e = spec.engine
    dp = tensor_parallel if attention_dp else 1
    args: dict[str, Any] = {
        "model": weights,
        "tensor_parallel_size": tensor_parallel // dp,
        "pipeline_parallel_size": pipeline_parallel,
        # vLLM's own fraction of TOTAL memory (weights + activations + KV), not kvCacheFreeGpuMemFraction.
        "gpu_memory_utilization": float(e.vllm.gpu_memory_utilization),
        "max_num_seqs": -(-e.max_batch_size // dp),  # maxBatchSize is the replica's; each DP rank schedules its own
        "max_model_len": e.max_seq_len,
        "enforce_eager": False,
        "enable_chunked_prefill": e.enable_chunked_context,
        "enable_prefix_caching": e.enable_kv_cache_reuse,
        # Without chunked prefill a whole prompt must fit in one step.
        "max_num_batched_tokens": e.max_num_tokens if e.enable_chunked_context
        else max(e.max_num_tokens, e.max_seq_len),
        "disable_log_stats": False,  # the stat logger is where queue/compute time come from
    }
    if dp > 1:
        args["data_parallel_size"] = dp
    if dp > 1 or (expert_parallel or 1) > 1:
        args["enable_expert_parallel"] = True
    if e.speculative is not None:
        # vLLM's SpeculativeConfig (vllm/config/speculative.py): method "mtp" (the checkpoint's own MTP layers),
        # "eagle3" or "draft_model" with the draft's directory as model; num_speculative_tokens drafted a step.
        method = str(getattr(e.speculative.method, "value", e.speculative.method))
        speculative: dict[str, Any] = {"method": method, "num_speculative_tokens": e.speculative.draft_tokens}
        if draft is not None:
            speculative["model"] = draft
        args["speculative_config"] = speculative
    args.update(quantization_args(spec))
    kv = KVCacheDtype(e.kv_cache_dtype)
    if kv == KVCacheDtype.FP8 or (kv == KVCacheDtype.AUTO and Quantization(e.quantization) == _FP8):
        args["kv_cache_dtype"] = "fp8"
    args.update(adapters.vllm_lora_args(spec))
    return args


def model_source() -> str:
    """The operator's Triton Python model for vLLM (package data)."""
    return resources.files(__package__).joinpath(MODEL_FILE).read_text(encoding="utf-8")


def vllm_model_config(model_name: str, drain_s: int) -> Message:
    return msg(
        ("name", model_name),
        ("backend", "python"),
        # 0: Triton does not batch; vLLM batches in flight.
        ("max_batch_size", 0),
        ("model_transaction_policy", msg(("decoupled", True))),
        # Declared explicitly because tritonserver runs with --disable-auto-complete-config.
        *llm_io.tensors(),
        # KIND_MODEL: vLLM places itself on the GPUs.
        ("instance_group", [msg(("count", 1), ("kind", Ident("KIND_MODEL")))]),
        *[("parameters", msg(("key", key), ("value", msg(("string_value", value)))))
          for key, value in [("engine", "vllm"), *METRIC_PARAMETERS.items(), (llm_io.DRAIN_PARAMETER, str(drain_s))]],
    )


def render_vllm(spec: LLMBackendSpec, model_name: str, tensor_parallel: int, pipeline_parallel: int,
                weights: str, header: str, expert_parallel: int | None = None,
                attention_dp: bool = False, draft: str | None = None) -> dict[str, str]:
    """Relative path -> content for a vLLM backend. Raises EngineConfigError for a spec vLLM cannot serve."""
    files = {
        f"{model_name}/config.pbtxt": to_pbtxt(
            vllm_model_config(model_name, drain.backend_drain_seconds(spec)),
            header + f"\nModel: the operator's Python model over vLLM's AsyncLLM (vLLM {VLLM_API_VERSION} API)."),
        f"{model_name}/1/model.py": model_source(),
        f"{model_name}/1/model.json": json.dumps(
            vllm_engine_args(spec, tensor_parallel, pipeline_parallel, weights, expert_parallel, attention_dp, draft),
            indent=2, sort_keys=True) + "\n",
    }
    problems = engine_model_violations(files)
    if problems:  # a bug in this module, never a user error
        raise AssertionError("rendered vLLM model breaks the batching rule: " + "; ".join(problems))
    return files


def engine_model_violations(files: dict[str, str]) -> list[str]:
    """A vLLM engine model (python backend, parameter engine=vllm) must be decoupled with max_batch_size 0."""
    problems: list[str] = []
    for path, text in sorted(files.items()):
        if not path.endswith("/config.pbtxt"):
            continue
        try:
            cfg = parse(text)
        except ValueError:
            continue  # batching_violations reports unparsable files
        params = {p.get("key", [None])[-1]: p.get("value", [{}])[-1].get("string_value", [None])[-1]
                  for p in cfg.get("parameters", [])}
        if params.get("engine") != "vllm":
            continue
        if cfg.get("max_batch_size", [0])[-1] != 0:
            problems.append(f"{path}: vLLM model must have max_batch_size: 0")
        if (cfg.get("model_transaction_policy", [{}])[-1].get("decoupled", [None])[-1]) is not True:
            problems.append(f"{path}: vLLM model must be decoupled")
        if "dynamic_batching" in cfg or "sequence_batching" in cfg:
            problems.append(f"{path}: vLLM model must not have dynamic_batching or sequence_batching")
    return problems
