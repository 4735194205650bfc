"""Pure rendering of the Triton model repository and the tritonserver command line.

Nothing here talks to Kubernetes; every function maps spec values to strings.

tensorrtllm, format llmapi (the default): ONE Python-backend model named after the model's display name:
`<model>/config.pbtxt` (decoupled, max_batch_size 0, no dynamic_batching, metric names as parameters),
`<model>/1/model.yaml` (the `LLM()` arguments from the plan and the spec) and `<model>/1/model.py`, the operator's
own Triton model (render/models/trtllm_llmapi.py, shipped as package data). The stock serving image needs nothing
else: TensorRT-LLM's PyTorch path loads the Hugging Face checkpoint at MODELS_DIR directly.

The rest of this docstring describes the legacy engine ensemble (`engine.format: engine`).

Layout inside the serving pod (assumptions shared with the workload renderer):

* `/models` (MODELS_DIR): the model source, read-only. For a PVC source the
  claim's `path` directory is what is mounted there (see PVCSource.path), so
  the tokenizer is at `/models/tokenizer` and TensorRT-LLM engines at
  `engine_dir(spec, tp, pp, gpu_product)`. For a URI source the serving image (or
  an init container) fetches the same layout into `/models`.
* `MODEL_REPOSITORY` (`/model-repository`): the Triton model repository that
  `render_model_repository()` describes (file path -> content). Triton needs a
  version directory `<model>/1/` for every model, even when it is empty:
  `version_dirs()` lists them. The Python models `preprocessing/1/model.py`
  and `postprocessing/1/model.py` are NOT rendered: they come from the serving
  image (`IMAGE_PYTHON_MODELS`), because they must match the image's
  TensorRT-LLM version.

Design rule (checked by `batching_violations()`): an engine that batches in
flight owns batching. Triton must never form batches or hold requests in front
of it. Only the `tensorrt_llm` model has a `dynamic_batching` block, with
`max_queue_delay_microseconds: 0` and no `preferred_batch_size`; it exists only
because the TensorRT-LLM backend reads `default_queue_policy.max_queue_size` as
the bound of the executor's request queue.
"""

from __future__ import annotations

import functools
import posixpath
import re
from importlib import resources
from typing import Any

import yaml

from ..api.catalog import resolve_architecture
from ..api.v1alpha1 import (
    DEFAULT_TRITON_IMAGE,
    DEFAULT_VLLM_IMAGE,
    Backend,
    BatchSchedulerPolicy,
    EngineFormat,
    KVCacheDtype,
    LLMBackendSpec,
    Quantization,
)
from . import adapters, drain, llm_io, vllm_backend
from .llm_io import tensor
from .pbtxt import Ident, Message, msg, parse, to_pbtxt

MODELS_DIR = "/models"
# The engines load a local directory (the read-only cache or claim): nothing to fetch, and huggingface_hub must not try
# (it would write lock and cache files next to what it fetches). vLLM downloads only when the model is not a local
# directory and takes its download lock in the temp dir, /tmp here (vllm/model_executor/model_loader/weight_utils.py,
# get_lock / download_weights_from_hf, v0.31.0); HF_HUB_OFFLINE is huggingface_hub's switch (constants.HF_HUB_OFFLINE).
OFFLINE_ENV = {"name": "HF_HUB_OFFLINE", "value": "1"}
TOKENIZER_DIR = f"{MODELS_DIR}/tokenizer"
ENGINES_DIR = f"{MODELS_DIR}/engines"
MODEL_REPOSITORY = "/model-repository"

HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002

# Where the NGC `tritonserver:<yy.mm>-trtllm-python-py3` image ships the upstream
# inflight_batcher_llm models. Verify per image version; the workload copies
# these next to the rendered configs.
IMAGE_ALL_MODELS_DIR = "/app/all_models/inflight_batcher_llm"
IMAGE_PYTHON_MODELS: dict[str, str] = {
    "preprocessing/1/model.py": f"{IMAGE_ALL_MODELS_DIR}/preprocessing/1/model.py",
    "postprocessing/1/model.py": f"{IMAGE_ALL_MODELS_DIR}/postprocessing/1/model.py",
}

TRTLLM_MODELS = ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")
ENSEMBLE_MODEL = "ensemble"

# The executor's queue bound (tensorrt_llm default_queue_policy.max_queue_size) is
# this many full batches: enough to keep the engine fed between iterations, small
# enough that overload is rejected quickly (and shows up in metrics and the
# autoscaler) instead of piling up as hidden latency.
QUEUE_BATCHES = 4

# Python (tokenizer) model instances. Each instance is a process; with Triton's
# default scheduler (no dynamic batching) requests wait only when all are busy.
TOKENIZER_INSTANCES = 4

_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_PATH = re.compile(r"^[A-Za-z0-9._/\-]+$")


# ---- small helpers ----


def validate_model_name(name: str) -> str:
    """Triton model names become directory names: allow only `[A-Za-z0-9_.-]`, not '.' or '..'."""
    if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"invalid model name {name!r}: must match {_MODEL_NAME.pattern} and not be '.' or '..'")
    return name


def _validate_path(path: str, what: str) -> str:
    if not _PATH.fullmatch(path):
        raise ValueError(f"invalid {what} {path!r}: must match {_PATH.pattern}")
    return path


def _validate_parallelism(tensor_parallel: int, pipeline_parallel: int) -> int:
    for name, value in (("tensor_parallel", tensor_parallel), ("pipeline_parallel", pipeline_parallel)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return tensor_parallel * pipeline_parallel


# GPU product (GFD's nvidia.com/gpu.product, as in the plan) -> the SM an engine is built for. Longest names first
# where one contains another (A100 before A10, L40 before L4). Unknown products key the engine by product name.
_PRODUCT_SM: tuple[tuple[str, str], ...] = (
    ("GB200", "sm100"), ("B200", "sm100"), ("GH200", "sm90"), ("H200", "sm90"), ("H100", "sm90"), ("H800", "sm90"),
    ("A100", "sm80"), ("A800", "sm80"), ("A30", "sm80"), ("A10", "sm86"), ("A40", "sm86"), ("L40", "sm89"),
    ("L4", "sm89"),
)


def image_for(spec: LLMBackendSpec) -> str:
    """The serving image: the spec's, or the default for the backend (api/v1alpha1.py, one place)."""
    if spec.engine.image:
        return spec.engine.image
    return DEFAULT_VLLM_IMAGE if Backend(spec.engine.backend) == Backend.VLLM else DEFAULT_TRITON_IMAGE


def _slug(value: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", value.lower()).strip("-") or "unknown"


def runtime_key(image: str) -> str:
    """What pins the TensorRT-LLM version of an image: `triton-<yy.mm>` for NGC release tags, else the tag or digest."""
    if "@" in image:
        return "digest-" + _slug(image.rsplit("@", 1)[1].replace("sha256:", ""))[:16]
    tag = image.rsplit("/", 1)[-1].partition(":")[2] or "latest"
    release = re.match(r"^(\d{2}\.\d{2})-trtllm", tag)
    return f"triton-{release.group(1)}" if release else _slug(tag)


def gpu_key(gpu_product: str | None) -> str:
    """The SM an engine is built for, from the plan's GPU product (`sm90`), else the product's name."""
    if not gpu_product:
        return "unknown-gpu"
    upper = gpu_product.upper()
    for name, sm in _PRODUCT_SM:
        if name in upper:
            return sm
    return _slug(gpu_product)


def engine_dir(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
               gpu_product: str | None = None) -> str:
    """Legacy engines: one directory per everything that invalidates a TensorRT engine.

    `/models/engines/<runtime>/<sm>/<quant>-tp<T>-pp<P>-b<batch>-s<seq>-t<tokens>`: the image's TensorRT-LLM
    version (its Triton release), the GPU architecture, quantization, TP x PP and the max_* limits the executor
    takes from the engine. The engine builder must write there; a change of any of them points at a new directory.
    """
    _validate_parallelism(tensor_parallel, pipeline_parallel)
    e = spec.engine
    quant = Quantization(e.quantization).value
    return (f"{ENGINES_DIR}/{runtime_key(image_for(spec))}/{gpu_key(gpu_product)}/"
            f"{quant}-tp{tensor_parallel}-pp{pipeline_parallel}-b{e.max_batch_size}-s{e.max_seq_len}"
            f"-t{e.max_num_tokens}")


def executor_queue_size(spec: LLMBackendSpec) -> int:
    """max_queue_size for the tensorrt_llm model: QUEUE_BATCHES x maxBatchSize."""
    return spec.engine.max_batch_size * QUEUE_BATCHES


def weights_path(spec: LLMBackendSpec) -> str:
    """What the engine loads: for a URI source its complete copy in the model cache (render/modelcache.py),
    else MODELS_DIR (where the claim's path is mounted)."""
    source = spec.model.source
    if source is not None and source.uri is not None:
        from .modelcache import model_path

        return model_path(source)
    return MODELS_DIR


def is_engine_ensemble(backend: str | Backend, engine_format: str | EngineFormat = EngineFormat.LLMAPI) -> bool:
    """True only for the legacy TensorRT engine ensemble (tensorrtllm with `format: engine`)."""
    return Backend(backend) == Backend.TENSORRTLLM and EngineFormat(engine_format) == EngineFormat.ENGINE


def served_model_name(backend: str | Backend, model_name: str,
                      engine_format: str | EngineFormat = EngineFormat.LLMAPI) -> str:
    """The Triton model clients call (and the `model` label in metrics/statistics)."""
    validate_model_name(model_name)
    return ENSEMBLE_MODEL if is_engine_ensemble(backend, engine_format) else model_name


def version_dirs(backend: str | Backend, model_name: str,
                 engine_format: str | EngineFormat = EngineFormat.LLMAPI) -> list[str]:
    """Version directories Triton requires; create them even when no rendered file lies inside."""
    validate_model_name(model_name)
    if is_engine_ensemble(backend, engine_format):
        return [f"{m}/1" for m in TRTLLM_MODELS]
    return [f"{model_name}/1"]


# ---- tensor declarations ----


def _params(**values: str) -> list[tuple[str, Message]]:
    return [
        ("parameters", msg(("key", key), ("value", msg(("string_value", value)))))
        for key, value in values.items()
    ]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _map(kind: str, pairs: list[tuple[str, str]]) -> list[tuple[str, Message]]:
    return [(kind, msg(("key", key), ("value", value))) for key, value in pairs]


# ---- tensorrtllm backend ----


def _tensorrt_llm_config(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
                         gpu_product: str | None) -> Message:
    e = spec.engine
    inputs = [
        tensor("input_ids", "TYPE_INT32", [-1], ragged=True),
        tensor("input_lengths", "TYPE_INT32", [1], scalar=True),
        tensor("request_output_len", "TYPE_INT32", [1], scalar=True),
        tensor("end_id", "TYPE_INT32", [1], scalar=True, optional=True),
        tensor("pad_id", "TYPE_INT32", [1], scalar=True, optional=True),
        tensor("stop_words_list", "TYPE_INT32", [2, -1], optional=True, ragged=True),
        tensor("bad_words_list", "TYPE_INT32", [2, -1], optional=True, ragged=True),
        tensor("temperature", "TYPE_FP32", [1], scalar=True, optional=True),
        tensor("runtime_top_k", "TYPE_INT32", [1], scalar=True, optional=True),
        tensor("runtime_top_p", "TYPE_FP32", [1], scalar=True, optional=True),
        tensor("streaming", "TYPE_BOOL", [1], scalar=True, optional=True),
    ]
    outputs = [
        tensor("output_ids", "TYPE_INT32", [-1, -1]),
        tensor("sequence_length", "TYPE_INT32", [-1]),
        tensor("cum_log_probs", "TYPE_FP32", [-1]),
        tensor("output_log_probs", "TYPE_FP32", [-1, -1]),
        tensor("context_logits", "TYPE_FP32", [-1, -1]),
        tensor("generation_logits", "TYPE_FP32", [-1, -1, -1]),
        tensor("batch_index", "TYPE_INT32", [1]),
        tensor("sequence_index", "TYPE_INT32", [1]),
    ]
    return msg(
        ("name", "tensorrt_llm"),
        ("backend", "tensorrtllm"),
        ("max_batch_size", e.max_batch_size),
        ("model_transaction_policy", msg(("decoupled", e.streaming))),
        # Kept ONLY for default_queue_policy.max_queue_size (the executor's queue bound).
        # Delay 0 and no preferred_batch_size: Triton never holds requests to form a batch.
        ("dynamic_batching", msg(
            ("max_queue_delay_microseconds", 0),
            ("default_queue_policy", msg(("max_queue_size", executor_queue_size(spec)))),
        )),
        ("input", inputs),
        ("output", outputs),
        # KIND_CPU: the backend places the engine on the GPUs itself (one MPI rank per GPU).
        ("instance_group", [msg(("count", 1), ("kind", Ident("KIND_CPU")))]),
        *_params(
            gpt_model_type="inflight_fused_batching",
            gpt_model_path=engine_dir(spec, tensor_parallel, pipeline_parallel, gpu_product),
            max_beam_width="1",
            batch_scheduler_policy=BatchSchedulerPolicy(e.batch_scheduler_policy).value,
            kv_cache_free_gpu_mem_fraction=repr(float(e.kv_cache_free_gpu_mem_fraction)),
            enable_chunked_context=_bool(e.enable_chunked_context),
            enable_kv_cache_reuse=_bool(e.enable_kv_cache_reuse),
            exclude_input_in_output="true",
            FORCE_CPU_ONLY_INPUT_TENSORS="no",
        ),
    )


def _preprocessing_config(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
                          gpu_product: str | None) -> Message:
    inputs = [
        tensor("QUERY", "TYPE_STRING", [1]),
        tensor("DECODER_QUERY", "TYPE_STRING", [1], optional=True),
        tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", [1]),
        tensor("BAD_WORDS_DICT", "TYPE_STRING", [-1], optional=True),
        tensor("STOP_WORDS_DICT", "TYPE_STRING", [-1], optional=True),
        tensor("EMBEDDING_BIAS_WORDS", "TYPE_STRING", [-1], optional=True),
        tensor("EMBEDDING_BIAS_WEIGHTS", "TYPE_FP32", [-1], optional=True),
        tensor("END_ID", "TYPE_INT32", [1], optional=True),
        tensor("PAD_ID", "TYPE_INT32", [1], optional=True),
        tensor("PROMPT_TABLE_EXTRA_ID", "TYPE_UINT64", [1], optional=True),
    ]
    # The image's model.py looks up the dtype of each of these outputs at load time
    # (including the multimodal ones), so all of them must be declared.
    outputs = [
        tensor("INPUT_ID", "TYPE_INT32", [-1]),
        tensor("REQUEST_INPUT_LEN", "TYPE_INT32", [1]),
        tensor("DECODER_INPUT_ID", "TYPE_INT32", [-1]),
        tensor("REQUEST_DECODER_INPUT_LEN", "TYPE_INT32", [1]),
        tensor("BAD_WORDS_IDS", "TYPE_INT32", [2, -1]),
        tensor("STOP_WORDS_IDS", "TYPE_INT32", [2, -1]),
        tensor("EMBEDDING_BIAS", "TYPE_FP32", [-1]),
        tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", [-1]),
        tensor("OUT_END_ID", "TYPE_INT32", [1]),
        tensor("OUT_PAD_ID", "TYPE_INT32", [1]),
        tensor("OUT_PROMPT_TABLE_EXTRA_IDS", "TYPE_UINT64", [-1]),
        tensor("PIXEL_VALUES", "TYPE_FP16", [-1, -1, -1, -1]),
        tensor("IMAGE_SIZES", "TYPE_INT64", [-1, 2]),
    ]
    return msg(
        ("name", "preprocessing"),
        ("backend", "python"),
        ("max_batch_size", spec.engine.max_batch_size),
        ("input", inputs),
        ("output", outputs),
        ("instance_group", [msg(("count", TOKENIZER_INSTANCES), ("kind", Ident("KIND_CPU")))]),
        *_params(
            tokenizer_dir=TOKENIZER_DIR,
            add_special_tokens="true",
            # read unconditionally by model.py; empty = text-only model
            multimodal_model_path="",
            gpt_model_path=engine_dir(spec, tensor_parallel, pipeline_parallel, gpu_product),
        ),
    )


def _postprocessing_config(spec: LLMBackendSpec) -> Message:
    return msg(
        ("name", "postprocessing"),
        ("backend", "python"),
        ("max_batch_size", spec.engine.max_batch_size),
        ("input", [
            tensor("TOKENS_BATCH", "TYPE_INT32", [-1, -1]),
            tensor("SEQUENCE_LENGTH", "TYPE_INT32", [-1]),
        ]),
        ("output", [tensor("OUTPUT", "TYPE_STRING", [-1])]),
        ("instance_group", [msg(("count", TOKENIZER_INSTANCES), ("kind", Ident("KIND_CPU")))]),
        *_params(tokenizer_dir=TOKENIZER_DIR, skip_special_tokens="true"),
    )


def _ensemble_config(spec: LLMBackendSpec) -> Message:
    def step(model: str, inputs: list[tuple[str, str]], outputs: list[tuple[str, str]]) -> Message:
        return msg(("model_name", model), ("model_version", -1),
                   *_map("input_map", inputs), *_map("output_map", outputs))

    steps = [
        step("preprocessing",
             [("QUERY", "text_input"), ("REQUEST_OUTPUT_LEN", "max_tokens"),
              ("BAD_WORDS_DICT", "bad_words"), ("STOP_WORDS_DICT", "stop_words"),
              ("END_ID", "end_id"), ("PAD_ID", "pad_id")],
             [("INPUT_ID", "_INPUT_ID"), ("REQUEST_INPUT_LEN", "_REQUEST_INPUT_LEN"),
              ("REQUEST_OUTPUT_LEN", "_REQUEST_OUTPUT_LEN"), ("BAD_WORDS_IDS", "_BAD_WORDS_IDS"),
              ("STOP_WORDS_IDS", "_STOP_WORDS_IDS"), ("OUT_END_ID", "_END_ID"),
              ("OUT_PAD_ID", "_PAD_ID")]),
        step("tensorrt_llm",
             [("input_ids", "_INPUT_ID"), ("input_lengths", "_REQUEST_INPUT_LEN"),
              ("request_output_len", "_REQUEST_OUTPUT_LEN"), ("end_id", "_END_ID"),
              ("pad_id", "_PAD_ID"), ("bad_words_list", "_BAD_WORDS_IDS"),
              ("stop_words_list", "_STOP_WORDS_IDS"), ("temperature", "temperature"),
              ("runtime_top_k", "top_k"), ("runtime_top_p", "top_p"), ("streaming", "stream")],
             [("output_ids", "_TOKENS_BATCH"), ("sequence_length", "_SEQUENCE_LENGTH")]),
        step("postprocessing",
             [("TOKENS_BATCH", "_TOKENS_BATCH"), ("SEQUENCE_LENGTH", "_SEQUENCE_LENGTH")],
             [("OUTPUT", "text_output")]),
    ]
    return msg(
        ("name", ENSEMBLE_MODEL),
        ("platform", "ensemble"),
        ("max_batch_size", spec.engine.max_batch_size),
        ("input", [
            tensor("text_input", "TYPE_STRING", [1]),
            tensor("max_tokens", "TYPE_INT32", [1]),
            tensor("bad_words", "TYPE_STRING", [-1], optional=True),
            tensor("stop_words", "TYPE_STRING", [-1], optional=True),
            tensor("end_id", "TYPE_INT32", [1], optional=True),
            tensor("pad_id", "TYPE_INT32", [1], optional=True),
            tensor("temperature", "TYPE_FP32", [1], optional=True),
            tensor("top_k", "TYPE_INT32", [1], optional=True),
            tensor("top_p", "TYPE_FP32", [1], optional=True),
            tensor("stream", "TYPE_BOOL", [1], optional=True),
        ]),
        ("output", [tensor("text_output", "TYPE_STRING", [-1])]),
        ("ensemble_scheduling", msg(("step", steps))),
    )


_HEADER = (
    "Rendered by the llmbackend operator ({what}); do not edit.\n"
    "Batching belongs to the engine (in-flight batching): Triton must not form batches or delay requests."
)


def _render_trtllm(spec: LLMBackendSpec, tp: int, pp: int, gpu_product: str | None) -> dict[str, str]:
    python_note = "\nThe Python model.py in 1/ comes from the serving image; only this config is rendered."
    return {
        "ensemble/config.pbtxt": to_pbtxt(_ensemble_config(spec), _HEADER.format(what="ensemble")),
        "preprocessing/config.pbtxt": to_pbtxt(
            _preprocessing_config(spec, tp, pp, gpu_product), _HEADER.format(what="tokenizer") + python_note),
        "tensorrt_llm/config.pbtxt": to_pbtxt(
            _tensorrt_llm_config(spec, tp, pp, gpu_product),
            _HEADER.format(what=f"TensorRT-LLM engine, TP={tp} PP={pp}")
            + "\ndynamic_batching is kept only for default_queue_policy.max_queue_size, "
              "the executor's queue bound.",
        ),
        "postprocessing/config.pbtxt": to_pbtxt(
            _postprocessing_config(spec), _HEADER.format(what="detokenizer") + python_note),
    }


# ---- tensorrtllm backend, LLM API (default) ----

# The operator's own Triton Python model, shipped as package data and rendered verbatim as <model>/1/model.py.
LLMAPI_MODEL_SOURCE = ("llmbackend.render.models", "trtllm_llmapi.py")

_KV_DTYPE = {KVCacheDtype.AUTO: "auto", KVCacheDtype.FP8: "fp8", KVCacheDtype.BF16: "bfloat16",
             KVCacheDtype.FP16: "float16"}
_CAPACITY_POLICY = {BatchSchedulerPolicy.MAX_UTILIZATION: "MAX_UTILIZATION",
                    BatchSchedulerPolicy.GUARANTEED_NO_EVICT: "GUARANTEED_NO_EVICT"}


def llmapi_model_source() -> str:
    package, name = LLMAPI_MODEL_SOURCE
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def checkpoint_path(spec: LLMBackendSpec) -> str:
    """What LLM(model=...) loads: the claim's path mounted at MODELS_DIR, or a URI source's complete copy in the
    model cache. A user's URI never lands in model.yaml: only the cache path derived from it."""
    return weights_path(spec)


def llmapi_args(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
                expert_parallel: int | None = None, attention_dp: bool = False) -> dict[str, Any]:
    """The `LLM()` constructor arguments written to model.yaml (plus the `triton_config` block).

    Attention data parallelism (enable_attention_dp): every one of the tensor_parallel ranks schedules its own
    requests, and max_batch_size is per rank ("Max batch size in each rank", TensorRT-LLM's
    docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md: concurrency 1024 over --tp 8 --ep 8
    with max_batch_size 128; docs/source/deployment-guide/deployment-guide-for-qwen3-on-trtllm.md: with attention DP the
    concurrency reaches max_batch_size x GPUs), so the replica's maxBatchSize is split over the ranks.
    """
    _validate_parallelism(tensor_parallel, pipeline_parallel)
    e = spec.engine
    per_rank_batch = -(-e.max_batch_size // tensor_parallel) if attention_dp else e.max_batch_size
    args: dict[str, Any] = {
        "model": checkpoint_path(spec),
        "backend": "pytorch",
        "tensor_parallel_size": tensor_parallel,
        "pipeline_parallel_size": pipeline_parallel,
        "max_batch_size": per_rank_batch,
        "max_num_tokens": e.max_num_tokens,
        "max_seq_len": e.max_seq_len,
        "max_input_len": e.max_input_len,
        "enable_chunked_prefill": e.enable_chunked_context,
        "kv_cache_config": {
            "free_gpu_memory_fraction": float(e.kv_cache_free_gpu_mem_fraction),
            "enable_block_reuse": e.enable_kv_cache_reuse,
            "dtype": _KV_DTYPE[KVCacheDtype(e.kv_cache_dtype)],
        },
        "scheduler_config": {"capacity_scheduler_policy": _CAPACITY_POLICY[BatchSchedulerPolicy(e.batch_scheduler_policy)]},
        # Decode-only steps replay CUDA graphs (steps that carry prompt chunks never do). TensorRT-LLM's default
        # (llmapi/llm_args.py, CudaGraphConfig.validate_cuda_graph_config and _generate_cuda_graph_batch_sizes)
        # captures batch sizes 1-31, 32, 64 and 128 without padding, so a decode batch of 40 or of 200 runs eagerly
        # and pays every kernel launch. Padding up to maxBatchSize is how NVIDIA's own benchmarks run
        # (perf-overview's llm_options.yml), the runs the performance model's constants were fitted on.
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": per_rank_batch},
        # Per-request timing (engine queue/compute time) and iteration stats (gauges): what the autoscaler reads.
        "return_perf_metrics": True,
        "enable_iter_perf_stats": True,
        # Structured output (OpenAI response_format): GuidedDecodingParams in a request's SamplingParams works only
        # with a grammar backend set here (llmapi/llm_args.py BaseLlmArgs.guided_decoding_backend); xgrammar is the
        # one that compiles JSON schemas, as vLLM's default does.
        "guided_decoding_backend": "xgrammar",
        "triton_config": {"decoupled": True, "max_batch_size": 0},
    }
    quant = Quantization(e.quantization)
    if quant in (Quantization.BF16, Quantization.FP16):
        args["dtype"] = "bfloat16" if quant == Quantization.BF16 else "float16"
    # Quantized weights (fp8, int4_awq, ...) are read from the checkpoint's own quantization_config.
    if expert_parallel is not None:
        if not isinstance(expert_parallel, int) or isinstance(expert_parallel, bool) or expert_parallel < 1:
            raise ValueError(f"expert_parallel must be a positive int, got {expert_parallel!r}")
        args["moe_expert_parallel_size"] = expert_parallel
    if attention_dp:
        args["enable_attention_dp"] = True
    if e.speculative is not None:
        args["speculative_config"] = trtllm_speculative_config(spec)
    args.update(adapters.llmapi_lora_args(spec))
    return args


# TensorRT-LLM's LLM API speculative_config (tensorrt_llm/llmapi/llm_args.py, DecodingBaseConfig.from_dict at the 1.x
# revisions: the decoding_type key picks MTPDecodingConfig, EagleDecodingConfig (EAGLE-3, one-model by default) or
# DraftTargetDecodingConfig; the draft's checkpoint is speculative_model_dir).
_TRTLLM_DECODING = {"mtp": "MTP", "eagle3": "Eagle", "draft_model": "DraftTarget"}


def trtllm_speculative_config(spec: LLMBackendSpec) -> dict[str, Any]:
    s = spec.engine.speculative
    assert s is not None
    method = str(getattr(s.method, "value", s.method))
    if method == "mtp":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": s.draft_tokens}
    config: dict[str, Any] = {"decoding_type": _TRTLLM_DECODING[method], "max_draft_len": s.draft_tokens,
                              "speculative_model_dir": draft_path(spec)}
    if method == "eagle3":
        config["eagle3_one_model"] = True
    return config


def draft_path(spec: LLMBackendSpec) -> str:
    """The draft's directory: draftPath under the model's (validated relative, without '..')."""
    s = spec.engine.speculative
    assert s is not None and s.draft_path is not None
    return posixpath.join(checkpoint_path(spec), s.draft_path)


# Fail-fast checkpoint check, shipped in the ConfigMap (NOT in the model repository) and run as an init container.
CHECKPOINT_CHECK_SOURCE = ("llmbackend.render.scripts", "check_checkpoint.py")
CHECKPOINT_CHECK_KEY = "llmbackend-check-checkpoint.py"  # ConfigMap key
CHECKPOINT_CHECK_DIR = "/llmbackend-checks"              # where the init container mounts it


def checkpoint_check_source() -> str:
    package, name = CHECKPOINT_CHECK_SOURCE
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def checkpoint_check_command(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
                             expert_parallel: int | None = None) -> list[str] | None:
    """argv of the init container that checks the checkpoint at MODELS_DIR before tritonserver starts; None when
    there is nothing to check yet (URI sources are fetched later; the legacy ensemble loads engines)."""
    _validate_parallelism(tensor_parallel, pipeline_parallel)
    source = spec.model.source
    if source is None or source.pvc is None or is_engine_ensemble(spec.engine.backend, spec.engine.format) \
            or Backend(spec.engine.backend) != Backend.TENSORRTLLM:
        return None
    argv = ["python3", f"{CHECKPOINT_CHECK_DIR}/check_checkpoint.py", "--model-dir", MODELS_DIR,
            "--tp", str(tensor_parallel), "--pp", str(pipeline_parallel),
            "--source", f"PersistentVolumeClaim {source.pvc.claim_name}, path {source.pvc.path}"]
    if expert_parallel is not None:
        argv += ["--ep", str(expert_parallel)]
    return argv


def _llmapi_config(model_name: str, drain_s: int) -> Message:
    return msg(
        ("name", model_name),
        ("backend", "python"),
        # 0: Triton does not batch; the LLM API batches in flight.
        ("max_batch_size", 0),
        # Always decoupled: one request may produce many responses (streaming), and execute() only hands off.
        ("model_transaction_policy", msg(("decoupled", True))),
        *llm_io.tensors(),
        # KIND_CPU, one instance: the LLM places itself on the GPUs and batches all requests itself.
        ("instance_group", [msg(("count", 1), ("kind", Ident("KIND_CPU")))]),
        *_params(engine="tensorrtllm-llmapi", **llm_io.ENGINE_METRIC_PARAMETERS,
                 **{llm_io.DRAIN_PARAMETER: str(drain_s)}),
    )


def fp4_checkpoint_check(spec: LLMBackendSpec) -> None:
    """nvfp4/mxfp4 need a checkpoint that declares that format: TensorRT-LLM reads fp4 weights (and their scales)
    from a ModelOpt NVFP4 or an MXFP4 checkpoint and cannot quantize 16-bit or fp8 weights to fp4 at load."""
    quant = Quantization(spec.engine.quantization)
    if quant not in vllm_backend.FP4:
        return
    declared = resolve_architecture(spec.model).checkpoint_quantization
    if declared == quant.value:
        return
    kind = "an NVIDIA ModelOpt NVFP4 checkpoint" if quant == Quantization.NVFP4 else "an MXFP4 checkpoint (gpt-oss)"
    raise vllm_backend.EngineConfigError(
        vllm_backend.QUANTIZATION_MISMATCH,
        f"engine.quantization is {quant.value}, which TensorRT-LLM loads only from {kind}; this checkpoint declares "
        f"{declared or 'no quantization (16-bit weights)'} (config.json quantization_config or "
        "model.architecture.checkpointQuantization): point the model at such a checkpoint or set engine.quantization "
        "to what the checkpoint holds")


def _render_llmapi(spec: LLMBackendSpec, model_name: str, tp: int, pp: int, ep: int | None,
                   attention_dp: bool = False) -> dict[str, str]:
    fp4_checkpoint_check(spec)
    args = llmapi_args(spec, tp, pp, ep, attention_dp)
    header = ("# Rendered by the llmbackend operator; do not edit. LLM() arguments for TensorRT-LLM's LLM API,\n"
              "# read by 1/model.py (triton_config is for Triton, not for LLM()).\n")
    return {
        f"{model_name}/config.pbtxt": to_pbtxt(
            _llmapi_config(model_name, drain.backend_drain_seconds(spec)),
            _HEADER.format(what=f"TensorRT-LLM LLM API, TP={tp} PP={pp}")),
        f"{model_name}/1/model.yaml": header + yaml.safe_dump(args, sort_keys=False),
        f"{model_name}/1/model.py": llmapi_model_source(),
    }


# ---- vllm backend (rendered by vllm_backend.py) ----


def vllm_engine_args(spec: LLMBackendSpec, tensor_parallel: int, pipeline_parallel: int,
                     expert_parallel: int | None = None, attention_dp: bool = False) -> dict[str, Any]:
    """The vLLM engine arguments written to model.json."""
    _validate_parallelism(tensor_parallel, pipeline_parallel)
    draft = draft_path(spec) if spec.engine.speculative is not None and spec.engine.speculative.draft_path else None
    return vllm_backend.vllm_engine_args(spec, tensor_parallel, pipeline_parallel, weights_path(spec),
                                         expert_parallel, attention_dp, draft)


def _render_vllm(spec: LLMBackendSpec, model_name: str, tp: int, pp: int, ep: int | None,
                 attention_dp: bool) -> dict[str, str]:
    fp4_checkpoint_check(spec)
    draft = draft_path(spec) if spec.engine.speculative is not None and spec.engine.speculative.draft_path else None
    return vllm_backend.render_vllm(spec, model_name, tp, pp, weights_path(spec), _HEADER.format(what="vLLM"), ep,
                                    attention_dp, draft)


# ---- entry point ----


def render_model_repository(
    spec: LLMBackendSpec, model_name: str, tensor_parallel: int, pipeline_parallel: int,
    expert_parallel: int | None = None, gpu_product: str | None = None, attention_dp: bool = False,
) -> dict[str, str]:
    """Relative file path -> content of the Triton model repository for this spec.

    `expert_parallel`, `attention_dp` and `gpu_product` come from the plan (EP and attention data parallelism for
    MoE models; the GPU keys legacy engines).

    Raises ValueError for an invalid model name or parallelism, and
    vllm_backend.EngineConfigError (a ValueError with a condition reason)
    for a quantization the backend cannot serve.
    """
    return dict(_rendered(_SpecKey(spec), model_name, tensor_parallel, pipeline_parallel, expert_parallel, gpu_product,
                          attention_dp))


class _SpecKey:
    """A spec as a cache key: equal when their JSON is (pydantic models are not hashable)."""

    def __init__(self, spec: LLMBackendSpec):
        self.spec = spec
        self.json = spec.model_dump_json()

    def __hash__(self) -> int:
        return hash(self.json)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SpecKey) and other.json == self.json


@functools.lru_cache(maxsize=1024)
def _rendered(key: _SpecKey, model_name: str, tensor_parallel: int, pipeline_parallel: int,
              expert_parallel: int | None, gpu_product: str | None, attention_dp: bool) -> dict[str, str]:
    """Once per distinct input: every pass of a backend renders the same repository, and rendering and checking it
    were most of a no-op pass's CPU (issue 47). Errors are raised each time (lru_cache keeps only results)."""
    spec = key.spec
    validate_model_name(model_name)
    _validate_parallelism(tensor_parallel, pipeline_parallel)
    backend = Backend(spec.engine.backend)
    if is_engine_ensemble(backend, spec.engine.format):
        files = _render_trtllm(spec, tensor_parallel, pipeline_parallel, gpu_product)
    elif backend == Backend.TENSORRTLLM:
        files = _render_llmapi(spec, model_name, tensor_parallel, pipeline_parallel, expert_parallel, attention_dp)
    else:
        files = _render_vllm(spec, model_name, tensor_parallel, pipeline_parallel, expert_parallel, attention_dp)
    problems = batching_violations(files)
    if problems:  # a bug in this module, never a user error
        raise AssertionError("rendered config breaks the batching rule: " + "; ".join(problems))
    return files


# ---- the design rule, checked on rendered text ----


def _one(fields: dict[str, list[Any]], name: str, default: Any = None) -> Any:
    values = fields.get(name)
    return values[-1] if values else default


def batching_violations(files: dict[str, str]) -> list[str]:
    """Every way the rendered repository lets Triton batch or hold requests in front of the engine.

    Parses each `*/config.pbtxt` (not string matching) and checks:
    - no model has `sequence_batching`;
    - ensemble, python and vllm models have no `dynamic_batching`;
    - vllm models and the operator's python models (parameter engine=tensorrtllm-llmapi or vllm)
      have `max_batch_size: 0` and a decoupled transaction policy;
    - the tensorrtllm model batches in flight (`gpt_model_type`), and its
      `dynamic_batching` has delay 0, no `preferred_batch_size`, no priority
      queues, and a positive `default_queue_policy.max_queue_size`;
    - no other backend appears.
    """
    problems: list[str] = []
    configs = {p: t for p, t in files.items() if posixpath.basename(p) == "config.pbtxt"}
    if not configs:
        return ["no config.pbtxt in the repository"]
    for path in sorted(configs):
        try:
            cfg = parse(configs[path])
        except ValueError as exc:
            problems.append(f"{path}: cannot parse: {exc}")
            continue
        platform = _one(cfg, "platform")
        backend = _one(cfg, "backend")
        dyn = cfg.get("dynamic_batching", [])
        if "sequence_batching" in cfg:
            problems.append(f"{path}: sequence_batching is not allowed")
        if len(dyn) > 1:
            problems.append(f"{path}: more than one dynamic_batching block")
        if platform == "ensemble" or backend in ("python", "vllm"):
            if dyn:
                problems.append(f"{path}: {platform or backend} model must not have dynamic_batching")
            params = {
                _one(p, "key"): _one(_one(p, "value", {}), "string_value")
                for p in cfg.get("parameters", [])
            }
            if backend == "vllm" or params.get("engine") in ("tensorrtllm-llmapi", "vllm"):
                if _one(cfg, "max_batch_size", 0) != 0:
                    problems.append(f"{path}: {params.get('engine') or backend} model must have max_batch_size: 0")
                policy = _one(cfg, "model_transaction_policy", {})
                if _one(policy, "decoupled") is not True:
                    problems.append(f"{path}: {params.get('engine') or backend} model must be decoupled")
        elif backend == "tensorrtllm":
            params = {
                _one(p, "key"): _one(_one(p, "value", {}), "string_value")
                for p in cfg.get("parameters", [])
            }
            if params.get("gpt_model_type") not in ("inflight_fused_batching", "inflight_batching"):
                problems.append(f"{path}: gpt_model_type must be an in-flight batching mode, "
                                f"got {params.get('gpt_model_type')!r}")
            if not dyn:
                problems.append(f"{path}: tensorrtllm model needs dynamic_batching for "
                                "default_queue_policy.max_queue_size")
            for block in dyn:
                delay = _one(block, "max_queue_delay_microseconds", 0)
                if delay != 0:
                    problems.append(f"{path}: max_queue_delay_microseconds must be 0, got {delay!r}")
                if "preferred_batch_size" in block:
                    problems.append(f"{path}: preferred_batch_size is not allowed "
                                    f"({block['preferred_batch_size']!r})")
                for key in ("priority_levels", "priority_queue_policy", "default_priority_level"):
                    if key in block:
                        problems.append(f"{path}: {key} is not allowed")
                queue = _one(_one(block, "default_queue_policy", {}), "max_queue_size", 0)
                if not isinstance(queue, int) or isinstance(queue, bool) or queue <= 0:
                    problems.append(f"{path}: default_queue_policy.max_queue_size must be a positive int, "
                                    f"got {queue!r}")
        else:
            problems.append(f"{path}: unexpected backend/platform {backend or platform!r}")
    return problems + vllm_backend.engine_model_violations(configs)


def assert_engine_managed_batching(files: dict[str, str]) -> None:
    """Raise AssertionError listing every violation of the batching rule."""
    problems = batching_violations(files)
    if problems:
        raise AssertionError("batching rule violated:\n- " + "\n- ".join(problems))


# ---- tritonserver command lines ----


def _rank_args(rank: int, world_size: int, model_repository: str) -> list[str]:
    """tritonserver arguments for one MPI rank. Rank 0 serves; other ranks only host the engine."""
    args = ["tritonserver", f"--model-repository={model_repository}"]
    if rank == 0:
        args += [
            f"--http-port={HTTP_PORT}", f"--grpc-port={GRPC_PORT}", f"--metrics-port={METRICS_PORT}",
            "--allow-metrics=true", "--allow-gpu-metrics=true",
        ]
    else:
        # Upstream (launch_triton_server.py, LWS example): other ranks load only the
        # engine model and open no endpoints (no port clashes inside one pod).
        args += [
            "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false",
            "--model-control-mode=explicit", "--load-model=tensorrt_llm",
        ]
    args.append("--disable-auto-complete-config")
    if world_size > 1:
        # Python models of ranks on one host need distinct shared-memory regions.
        args.append(f"--backend-config=python,shm-region-prefix-name=prefix{rank}_")
    return args


def _mpmd(world_size: int, model_repository: str) -> list[str]:
    """`-n 1 <rank 0 args> : -n 1 <rank 1 args> : ...` (one app context per rank)."""
    argv: list[str] = []
    for rank in range(world_size):
        if rank:
            argv.append(":")
        argv += ["-n", "1", *_rank_args(rank, world_size, model_repository)]
    return argv


def triton_command(model_repository: str, tensor_parallel: int, pipeline_parallel: int, backend: str,
                   engine_format: str | EngineFormat = EngineFormat.LLMAPI) -> list[str]:
    """Container args (argv, no shell) for one pod holding the whole replica.

    vllm, or TP x PP = 1: a single tritonserver (vLLM starts its own workers). tensorrtllm through the LLM API with
    TP x PP > 1: one tritonserver under `mpirun -n 1`; the LLM spawns its GPU ranks through MPI on this node, as
    upstream's scripts/launch_triton_server.py runs the LLM API model. Legacy engine ensemble with TP x PP > 1:
    `mpirun` with one tritonserver per rank (one rank per GPU).
    """
    _validate_path(model_repository, "model repository")
    world = _validate_parallelism(tensor_parallel, pipeline_parallel)
    if Backend(backend) == Backend.VLLM or world == 1:
        return _rank_args(0, 1, model_repository)
    if not is_engine_ensemble(backend, engine_format):
        return ["mpirun", "--allow-run-as-root", "-n", "1", *_rank_args(0, 1, model_repository)]
    return ["mpirun", "--allow-run-as-root", *_mpmd(world, model_repository)]


