"""The tensors every LLM model the operator renders declares (TensorRT-LLM's LLM API model and the vLLM model):
one request/response contract for Triton's generate endpoints, the OpenAI frontend and standard clients; and the
config.pbtxt parameters that pass both models the names of the engine metrics they export."""

from __future__ import annotations

from typing import Any

from ..api import engine_metrics as em
from .pbtxt import Ident, Message, msg

# config.pbtxt parameters carrying the metric names to model.py (which cannot import this package).
ENGINE_METRIC_PARAMETERS: dict[str, str] = {
    "metric_engine_queue": em.ENGINE_QUEUE_METRIC,
    "metric_engine_compute": em.ENGINE_COMPUTE_METRIC,
    "metric_engine_requests": em.ENGINE_REQUESTS_METRIC,
    "metric_engine_failures": em.ENGINE_FAILURES_METRIC,
    "metric_engine_rejected": em.ENGINE_REJECTED_METRIC,
    "metric_engine_request_seconds": em.ENGINE_REQUEST_SECONDS_METRIC,
    "metric_engine_request_seconds_buckets": ",".join(f"{b:g}" for b in em.ENGINE_REQUEST_SECONDS_BUCKETS),
    "metric_request_gauge": em.REQUEST_GAUGE,
    "metric_request_types": ",".join(em.REQUEST_TYPES),
    "metric_kv_gauge": em.KV_GAUGE,
    "metric_kv_types": ",".join(em.KV_TYPES),
    "metric_lora_info": em.LORA_INFO_GAUGE,
}

# config.pbtxt parameter: how long finalize() lets requests in flight finish before it stops the engine, seconds
# (the pod's drain bound, render/drain.py: the same as Triton's --exit-timeout-secs).
DRAIN_PARAMETER = "drain_seconds"

# The request/response interface of every LLM model the operator renders for generate/OpenAI clients:
# (name, Triton type, dims, optional). Triton's generate endpoints map JSON keys to these names.
LLM_INPUTS: tuple[tuple[str, str, list[int], bool], ...] = (
    ("text_input", "TYPE_STRING", [1], False),
    ("max_tokens", "TYPE_INT32", [1], True),
    ("stream", "TYPE_BOOL", [1], True),
    ("temperature", "TYPE_FP32", [1], True),
    ("top_p", "TYPE_FP32", [1], True),
    ("top_k", "TYPE_INT32", [1], True),
    ("seed", "TYPE_UINT64", [1], True),
    ("frequency_penalty", "TYPE_FP32", [1], True),
    ("presence_penalty", "TYPE_FP32", [1], True),
    ("repetition_penalty", "TYPE_FP32", [1], True),
    ("stop_words", "TYPE_STRING", [-1], True),
    ("exclude_input_in_output", "TYPE_BOOL", [1], True),
    ("return_num_input_tokens", "TYPE_BOOL", [1], True),
    ("return_num_output_tokens", "TYPE_BOOL", [1], True),
    # Structured output, under tensorrtllm_backend's names for it: guide type "json" (any JSON object) or
    # "json_schema" (the guide is the schema, JSON text); each model maps it to its engine's guided decoding.
    ("guided_decoding_guide_type", "TYPE_STRING", [1], True),
    ("guided_decoding_guide", "TYPE_STRING", [1], True),
    # n > 1: choices per request (tensorrtllm_backend's name); each response names its choice in sequence_index.
    ("num_return_sequences", "TYPE_INT32", [1], True),
    # Log probabilities: the sampled token's and the k likeliest alternatives' per output token (0 <= k <= 20).
    ("num_logprobs", "TYPE_INT32", [1], True),
    # false keeps special tokens in text_output: tool-call markers that are special tokens in some checkpoints
    ("skip_special_tokens", "TYPE_BOOL", [1], True),
    # spec.adapters: the LoRA adapter to answer with (its name; absent or empty: the base model)
    ("adapter", "TYPE_STRING", [1], True),
)
LLM_OUTPUTS: tuple[tuple[str, str, list[int]], ...] = (
    ("text_output", "TYPE_STRING", [1]),
    ("finish_reason", "TYPE_STRING", [1]),
    ("num_input_tokens", "TYPE_INT32", [1]),
    ("num_output_tokens", "TYPE_INT32", [1]),
    ("sequence_index", "TYPE_INT32", [1]),
    # JSON text: per output token of this response, [token text, logprob, [[alternative text, logprob], ...]]
    ("logprobs", "TYPE_STRING", [1]),
)


def tensor(name: str, dtype: str, dims: list[int], *, optional: bool = False,
           ragged: bool = False, scalar: bool = False) -> Message:
    """One config.pbtxt `input`/`output` entry."""
    fields: list[tuple[str, Any]] = [("name", name), ("data_type", Ident(dtype)), ("dims", dims)]
    if scalar:  # [1] on the wire, a scalar inside the engine
        fields.append(("reshape", msg(("shape", []))))
    if optional:
        fields.append(("optional", True))
    if ragged:
        fields.append(("allow_ragged_batch", True))
    return msg(*fields)


def tensors() -> list[tuple[str, list[Message]]]:
    """The `input` and `output` fields of an LLM model's config.pbtxt."""
    return [("input", [tensor(n, t, d, optional=o) for n, t, d, o in LLM_INPUTS]),
            ("output", [tensor(n, t, d) for n, t, d in LLM_OUTPUTS])]
