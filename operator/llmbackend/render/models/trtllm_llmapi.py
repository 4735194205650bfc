"""Triton Python model serving TensorRT-LLM through its LLM API; written by the llmbackend operator.

Shipped in the backend's ConfigMap as `<model>/1/model.py` beside `model.yaml` (the `LLM()` arguments) and runs
in the stock `tritonserver:<yy.mm>-trtllm-python-py3` image: it imports only the standard library, numpy, PyYAML,
`triton_python_backend_utils` and `tensorrt_llm`, never the operator's package.

Requests (Triton's generate endpoints map JSON keys to these tensors; all [1] except stop_words [-1]):
text_input (required); max_tokens, stream, temperature, top_p, top_k, seed, frequency_penalty, presence_penalty,
repetition_penalty, stop_words, exclude_input_in_output, return_num_input_tokens, return_num_output_tokens,
guided_decoding_guide_type ("json" | "json_schema") and guided_decoding_guide (the schema, JSON text): structured
output through the engine's guided decoding (GuidedDecodingParams; model.yaml sets guided_decoding_backend xgrammar);
num_return_sequences (SamplingParams n), num_logprobs (SamplingParams logprobs), skip_special_tokens, adapter
(a LoRA adapter's name from the list $LLMBACKEND_ADAPTERS_FILE names, passed as `generate_async(lora_request=...)`).
Responses: text_output (streaming: the new text of this response), finish_reason ("stop" | "length" on the final
response, empty before), num_input_tokens / num_output_tokens when asked for (num_input_tokens also on the first
streamed response; num_output_tokens counts every choice), sequence_index (the choice: with n > 1 each choice gets
its own responses, and its own final one, the last of them ending the request), logprobs when asked for (JSON text:
per token of this response, [token, logprob, [[alternative, logprob], ...]]). A request Triton cancels ends with an
error response of code CANCELLED, sent by this model (the engine sends nothing for a request still waiting for a
slot).

Threads: the engine's asyncio loop runs only engine calls; every call into Triton (responses, metrics, logging) goes
through one IPC thread, and cancellation is polled on its own thread (Python-backend calls are blocking round
trips to the server process).

Streaming cost: the text a stream gained since its last response is coalesced into one response. The first token
is queued at once; while a stream's response waits in the IPC queue, later tokens join it instead of queueing
responses of their own, so under load the number of Triton round trips per token falls without delaying any token
(upstream: TensorRT-LLM batches a stream's tokens with `stream_interval`, `_torch/pyexecutor/py_executor.py`
`PyExecutor._handle_responses`; vLLM merges outputs a slow consumer has not taken, `v1/engine/output_processor.py`
`RequestOutputCollector.put`). config.pbtxt `stream_interval` (default 1) sets the fewest tokens per response after
the first, as TensorRT-LLM's and vLLM's own `stream_interval` do. Each cancellation sweep asks at most
CANCEL_CHECKS_PER_SWEEP requests (those asked longest ago), so a sweep never holds the IPC thread long.

The model is decoupled: execute() hands each request to the engine's asyncio loop and returns at once, so Triton's
own queue and compute counters see only that hand-off. The engine's real wait (for a free slot or free KV blocks)
is exported instead, as custom metrics on :8002 named by config.pbtxt parameters (the operator passes its
constants): per finished request, queue = first_scheduled - arrival and compute = last_token - first_scheduled
(the LLM API's per-request timing metrics, `return_perf_metrics: true` in model.yaml), as cumulative microsecond
counters, plus finished and failed request counters, and their sum (the request's time in the engine, seconds) as a
histogram with the buckets config.pbtxt gives; and gauges from the engine's iteration stats
(`enable_iter_perf_stats: true`) under the names the Gateway API Inference Extension reads.

Engine failure: a dead executor (its worker's error surfaced by `_handle_background_error`, or `is_shutdown()` while
the model still serves; checked every HEALTH_POLL_S and after any request error that is not the request's own) ends
every request in flight with an UNAVAILABLE error at once (a dead worker sends them nothing more), answers new ones
the same way, logs the reason, writes it as the container's termination message and sends SIGTERM to tritonserver
(this stub's parent): the server stops accepting connections at once (readiness and liveness fail) and exits, and
Kubernetes restarts the container. Triton's own liveness never fails for a dead model, so exiting is the one signal
that restarts the pod; `is_ready()` (asked by python_backend r26.03 and later, the pinned image's included) also
fails the model's readiness from the moment the engine is known dead.

Multi-GPU follows the LLM API's MPI model: on one node the LLM starts its worker ranks itself; across nodes the
pod command wraps tritonserver in `trtllm-llmapi-launch` under mpirun, so rank 0 serves and the others work.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import queue
import signal
import threading
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

# How long the iteration-stats stream may stay silent before it ends (the engine is idle), and the pause between
# streams while idle, seconds.
STATS_INTERVAL_S = 1.0
# The shortest time between two gauge updates while the engine runs (it yields a record every iteration, ~tens of ms).
STATS_PUBLISH_S = 0.25
# How often the cancellation thread asks Triton whether in-flight requests were cancelled, seconds.
CANCEL_POLL_S = 0.05
# The most `is_cancelled()` round trips one sweep makes (python_backend has no batched check: pb_cancel.cc
# `PbCancel::IsCancelled` is one round trip per request). Sweeps take the requests asked longest ago, so each is asked
# within ceil(in flight / this) sweeps: 4 sweeps (~0.2 s plus the IPC queue's wait) at 256 streams.
CANCEL_CHECKS_PER_SWEEP = 64
# Fewest new tokens per streamed response after the first, when config.pbtxt sets no stream_interval: 1, the default
# of TensorRT-LLM's and vLLM's own stream_interval (every token is sent as soon as the IPC thread is free; under load
# the coalescing batches tokens anyway, so a larger interval only saves round trips an idle server can afford).
DEFAULT_STREAM_INTERVAL = 1
# How often the engine's health is checked while nothing fails, seconds (the bound on noticing a silent death).
HEALTH_POLL_S = 0.5
# A health check that does not return within this is a failure too (surfacing a worker's error shuts the executor
# down, which may wait on the dead worker), seconds.
HEALTH_TIMEOUT_S = 10.0
# How long finalize lets requests in flight finish when config.pbtxt gives no drain_seconds, seconds.
DEFAULT_DRAIN_S = 60.0
# The most finalize waits for the engine to shut down (a dead engine may never answer), seconds.
SHUTDOWN_WAIT_S = 30.0
# Where Kubernetes reads a container's termination message (the pod's lastState.terminated.message).
TERMINATION_LOG = "/dev/termination-log"

_OPTIONAL_SCALARS = {
    # tensor name -> (SamplingParams argument, python type)
    "max_tokens": ("max_tokens", int),
    "temperature": ("temperature", float),
    "top_p": ("top_p", float),
    "top_k": ("top_k", int),
    "seed": ("seed", int),
    "frequency_penalty": ("frequency_penalty", float),
    "presence_penalty": ("presence_penalty", float),
    "repetition_penalty": ("repetition_penalty", float),
    "skip_special_tokens": ("skip_special_tokens", bool),
}
_DEFAULT_MAX_TOKENS = 16
# The most alternatives per token a request may ask for (OpenAI's top_logprobs bound, vLLM's default max_logprobs).
MAX_LOGPROBS = 20


class BadRequest(ValueError):
    """The request itself is invalid: answered with an error, the model keeps serving."""


# ---- LoRA adapters (spec.adapters; the operator's render/adapters.py writes the list) ----

ADAPTERS_ENV = "LLMBACKEND_ADAPTERS_FILE"
ADAPTERS_RECHECK_S = 1.0  # how often the list's file is looked at again (the kubelet replaces it in place)


class Adapters:
    """The adapters this model serves, by name: {"adapters": [{"name", "id", "path"}]} from the file $ADAPTERS_ENV
    names, read again when it changes (an adapter added or removed needs no restart). A list that cannot be read
    keeps the last good one."""

    def __init__(self, path: str | None, make_request: Any) -> None:
        self.path = path
        self.make_request = make_request  # (name, int id, path) -> the engine's LoRARequest
        self.lock = threading.Lock()
        self.checked = 0.0
        self.stamp: tuple[float, int] | None = None
        self.by_name: dict[str, Any] = {}

    def _refresh(self) -> None:
        now = time.monotonic()
        if self.path is None or now - self.checked < ADAPTERS_RECHECK_S:
            return
        self.checked = now
        try:
            st = os.stat(self.path)
            if (st.st_mtime, st.st_ino) == self.stamp:
                return
            with open(self.path, encoding="utf-8") as f:
                entries = json.load(f).get("adapters") or []
            self.by_name = {str(e["name"]): (int(e["id"]), str(e["path"])) for e in entries}
            self.stamp = (st.st_mtime, st.st_ino)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return

    def request_for(self, name: str | None) -> Any:
        """The engine's LoRARequest for an adapter name; None for no name. Raises BadRequest for an unknown one."""
        if not name:
            return None
        with self.lock:
            self._refresh()
            found = self.by_name.get(name)
            served = sorted(self.by_name)
        if found is None:
            raise BadRequest(f"unknown adapter {name!r}; this model serves " + (", ".join(served) or "no adapters"))
        try:
            return self.make_request(name, found[0], found[1])
        except (ValueError, TypeError, AssertionError, OSError) as exc:  # e.g. the path is gone: this request's fault
            raise BadRequest(f"adapter {name!r} cannot be loaded: {exc}") from None


class LoraInfo:
    """The LoRA gauge of the Model Server Protocol the Gateway API Inference Extension's lora-affinity-scorer reads
    (labels running_lora_adapters and waiting_lora_adapters: comma-separated adapter names; max_lora; the value: the
    time it was current, the EPP takes the series of the largest value), as vLLM exports vllm:lora_requests_info
    (vllm/v1/metrics/loggers.py `PrometheusStatLogger`). An adapter counts as running while a request that names it is
    in the engine (the engine does not say which wait for a slot: waiting stays empty). One series per set of running
    adapters seen, reused when that set comes back. Calls come through the IPC thread."""

    def __init__(self, name: str, labels: dict[str, str], max_loras: int) -> None:
        self.family = pb_utils.MetricFamily(name, "LoRA adapters in the engine (Model Server Protocol)",
                                            pb_utils.MetricFamily.GAUGE)
        self.labels, self.max_loras = labels, max_loras
        self.running: dict[str, int] = {}
        self.series: dict[str, Any] = {}
        self.publish()

    def change(self, adapter: str, delta: int) -> None:
        self.running[adapter] = self.running.get(adapter, 0) + delta
        if self.running[adapter] <= 0:
            del self.running[adapter]
        self.publish()

    def publish(self) -> None:
        key = ",".join(sorted(self.running))
        if key not in self.series:
            self.series[key] = self.family.Metric(labels={
                **self.labels, "running_lora_adapters": key, "waiting_lora_adapters": "",
                "max_lora": str(self.max_loras)})
        self.series[key].set(time.time())


def _is_request_error(exc: BaseException) -> bool:
    """The executor refused this one request (executor/utils.py RequestError, raised while the result is iterated,
    e.g. a prompt that fills max_seq_len: base_worker.py `_deduce_max_tokens`), or the LLM API validated its
    arguments (TypeError / ValueError from generate_async): the engine lives on."""
    return isinstance(exc, (BadRequest, TypeError, ValueError)) or type(exc).__name__ == "RequestError"


def _error(message: str, code_name: str) -> Any:
    """An error response with a Triton error code (older python_backend builds have no codes)."""
    code = getattr(pb_utils.TritonError, code_name, None)
    error = pb_utils.TritonError(message, code) if code is not None else pb_utils.TritonError(message)
    return pb_utils.InferenceResponse(error=error)


def exit_server(reason: str) -> bool:
    """Make tritonserver, this stub's parent, shut down (SIGTERM: it stops accepting connections at once, then
    exits), after leaving the reason where Kubernetes shows it. False when the parent is not tritonserver."""
    # Only in a Kubernetes container, where the kubelet provides the file: never create one elsewhere.
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(TERMINATION_LOG):
        try:
            with open(TERMINATION_LOG, "w") as f:
                f.write(f"EngineFailed: {reason}"[:4000])
        except OSError:
            pass  # not writable: the log line still says why
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/comm") as f:
            if not f.read().strip().startswith("tritonserver"):
                return False
    except OSError:
        return False
    os.kill(parent, signal.SIGTERM)
    return True


def _scalar(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise BadRequest(f"input {name!r} must hold one value, got {values.size}")
    value = values[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()


def _strings(request: Any, name: str) -> list[str]:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return []
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in tensor.as_numpy().reshape(-1)]


def _lora_request(name: str, lora_id: int, path: str) -> Any:
    """TensorRT-LLM's per-request adapter (tensorrt_llm/executor/request.py LoRARequest: lora_name, lora_int_id,
    lora_path; the engine loads the weights from the path the first time, then keeps them in its LoRA cache)."""
    from tensorrt_llm.executor.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=path)


def parse_request(request: Any) -> dict[str, Any]:
    """Tensors -> prompt, SamplingParams arguments and flags. Raises BadRequest with what is wrong."""
    prompt = _scalar(request, "text_input")
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadRequest("text_input is required and must be a non-empty string")
    sampling: dict[str, Any] = {"max_tokens": _DEFAULT_MAX_TOKENS}
    for tensor, (arg, kind) in _OPTIONAL_SCALARS.items():
        value = _scalar(request, tensor)
        if value is not None:
            try:
                sampling[arg] = kind(value)
            except (TypeError, ValueError):
                raise BadRequest(f"input {tensor!r} must be a {kind.__name__}, got {value!r}") from None
    if sampling["max_tokens"] < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {sampling['max_tokens']}")
    if sampling.get("temperature", 0.0) < 0:
        raise BadRequest(f"temperature must be >= 0, got {sampling['temperature']}")
    if "top_p" in sampling and not 0.0 < sampling["top_p"] <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {sampling['top_p']}")
    if sampling.get("top_k", 0) < 0:
        raise BadRequest(f"top_k must be >= 0, got {sampling['top_k']}")
    choices = _scalar(request, "num_return_sequences")
    if choices is not None:
        if int(choices) < 1:
            raise BadRequest(f"num_return_sequences must be at least 1, got {choices}")
        sampling["n"] = int(choices)
    logprobs = _scalar(request, "num_logprobs")
    if logprobs is not None and not 0 <= int(logprobs) <= MAX_LOGPROBS:
        raise BadRequest(f"num_logprobs must be between 0 and {MAX_LOGPROBS}, got {logprobs}")
    if logprobs is not None:
        # TensorRT-LLM's logprobs=k returns the k likeliest tokens' logprobs, the sampled one among them: at least 1
        sampling["logprobs"] = max(1, int(logprobs))
    stop = [s for s in _strings(request, "stop_words") if s]
    if stop:
        sampling["stop"] = stop
    sampling["return_perf_metrics"] = True

    def flag(name: str, default: bool) -> bool:
        value = _scalar(request, name)
        return default if value is None else bool(value)

    return {
        "prompt": prompt,
        "sampling": sampling,
        "logprobs": None if logprobs is None else int(logprobs),
        "guide": parse_guide(_scalar(request, "guided_decoding_guide_type"), _scalar(request, "guided_decoding_guide")),
        "stream": flag("stream", False),
        "exclude_input": flag("exclude_input_in_output", True),
        "num_input": flag("return_num_input_tokens", False),
        "num_output": flag("return_num_output_tokens", False),
        "adapter": _scalar(request, "adapter") or None,
    }


# The message of a guide the grammar backend cannot compile begins with this (the OpenAI frontend names
# response_format for it).
GUIDE_ERROR = "guided decoding:"


def parse_guide(guide_type: Any, guide: Any) -> dict[str, Any] | None:
    """The guided_decoding_* inputs -> GuidedDecodingParams arguments (None: no guide). Raises BadRequest."""
    if guide_type in (None, "", "none"):
        return None
    if guide_type == "json":
        return {"json_object": True}
    if guide_type == "json_schema":
        if not isinstance(guide, str) or not guide.strip():
            raise BadRequest(f"{GUIDE_ERROR} guide type json_schema needs the schema in guided_decoding_guide")
        try:
            schema = json.loads(guide)
        except ValueError as exc:
            raise BadRequest(f"{GUIDE_ERROR} the schema is not JSON: {exc}") from None
        return {"json": schema}
    raise BadRequest(f"{GUIDE_ERROR} guide type {guide_type!r} is not served (json, json_schema)")


def check_guide(guide: dict[str, Any]) -> None:
    """Compile a JSON schema with xgrammar, the grammar backend model.yaml names, before the request reaches the
    engine: the executor builds a request's grammar matcher inside its forward step (_torch/pyexecutor/guided_decoder.py
    `GuidedDecoder._build` -> grammar_matcher.py `XGrammarMatcherFactory.create`), where a schema it cannot compile
    raises into the step's error handler, which fails every active request (py_executor.py `_handle_errors` with no
    request list), not just this one.
    Raises BadRequest with xgrammar's reason."""
    if "json" not in guide:
        return
    import xgrammar  # a TensorRT-LLM dependency, in the same image

    try:
        xgrammar.Grammar.from_json_schema(json.dumps(guide["json"]))
    except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError with its reason
        raise BadRequest(f"{GUIDE_ERROR} the JSON schema cannot be compiled: {exc}") from None


def _seconds(value: Any) -> float:
    """A timing metric as seconds: datetime.timedelta on the engine's steady clock (or a plain number)."""
    if value is None:
        return 0.0
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return float(value)


def engine_times_us(output: Any) -> tuple[float, float] | None:
    """(queue, compute) microseconds of a finished request, or None when the engine gave no complete timing."""
    perf = getattr(output, "request_perf_metrics", None)
    timing = getattr(perf, "timing_metrics", None)
    if timing is None:
        return None
    arrival = _seconds(timing.arrival_time)
    scheduled = _seconds(timing.first_scheduled_time)
    last = _seconds(timing.last_token_time)
    if not 0 < arrival <= scheduled <= last:
        return None  # e.g. cancelled while still waiting: never scheduled
    return (scheduled - arrival) * 1e6, (last - scheduled) * 1e6


def gauges_from_stats(stats: dict[str, Any], ranks: int = 1) -> tuple[dict[str, float], dict[str, float]]:
    """Iteration stats -> (request_type -> value, kv_cache_block_type -> value).

    `ranks`: attention data-parallel ranks. TensorRT-LLM 1.2.1 reports rank 0's iteration stats only under attention
    DP (per-rank records came later: NVIDIA/TensorRT-LLM#13649) and its executor balances requests over the ranks,
    so rank 0's per-rank counts times the ranks stand for the engine; the intake queue is rank 0's and global."""
    batching = stats.get("inflightBatchingStats") or {}
    kv = stats.get("kvCacheStats") or {}
    requests = {
        "waiting": float(stats.get("numQueuedRequests", 0)) + ranks * float(batching.get("numPausedRequests", 0)),
        "scheduled": ranks * float(batching.get("numScheduledRequests", stats.get("numActiveRequests", 0))),
        "active": ranks * float(stats.get("numActiveRequests", 0)),
        "max": ranks * float(stats.get("maxNumActiveRequests", 0)),
    }
    max_blocks = float(kv.get("maxNumBlocks", 0))
    used = float(kv.get("usedNumBlocks", max_blocks - float(kv.get("freeNumBlocks", max_blocks))))
    blocks = {
        "used": used,
        "free": float(kv.get("freeNumBlocks", max_blocks - used)),
        "max": max_blocks,
        "fraction": used / max_blocks if max_blocks > 0 else 0.0,
    }
    return requests, blocks


def waiting_requests(submitted: int, record: dict[str, Any], ranks: int = 1) -> float:
    """Requests this model submitted that wait, from one iteration-stats record. numQueuedRequests is the engine's
    intake queue only and requests waiting for a slot are in no field: they are the submitted ones the engine does
    not count as active. Paused requests wait too: active, but set aside this iteration by the scheduler for KV-cache
    room (the rendered MAX_UTILIZATION policy); _torch/pyexecutor/py_executor.py `_update_iter_stats` records them as
    inflightBatchingStats.numPausedRequests (the scheduled batch's paused_requests)."""
    batching = record.get("inflightBatchingStats") or {}
    # Attention DP (`ranks` > 1): rank 0's counts stand for each rank (see gauges_from_stats).
    not_admitted = max(0, submitted - ranks * int(record.get("numActiveRequests", 0)))
    return float(not_admitted + ranks * int(batching.get("numPausedRequests", 0)))


def _request_histogram(families: dict[str, Any], params: dict[str, str], labels: dict[str, str]) -> Any:
    """Histogram of each finished request's time in the engine (arrival to last token, seconds), or None when
    config.pbtxt names none or this Triton's Python backend has no HISTOGRAM metrics (the counters still work)."""
    name = params.get("metric_engine_request_seconds")
    kind = getattr(pb_utils.MetricFamily, "HISTOGRAM", None)
    if not name or kind is None:
        return None
    buckets = [float(b) for b in params.get("metric_engine_request_seconds_buckets", "").split(",") if b]
    families["request_seconds"] = pb_utils.MetricFamily(
        name, "Time of finished requests in the engine, arrival to last token, seconds", kind)
    return families["request_seconds"].Metric(labels=labels, buckets=buckets)


class _Metrics:
    """Triton custom metrics; the MetricFamily objects are kept as long as their Metric objects."""

    def __init__(self, params: dict[str, str], labels: dict[str, str]) -> None:
        counter, gauge = pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE
        self.families = {
            "queue": pb_utils.MetricFamily(
                params["metric_engine_queue"], "Engine queue time (first scheduled - arrival) of finished requests, "
                "microseconds, cumulative", counter),
            "compute": pb_utils.MetricFamily(
                params["metric_engine_compute"], "Engine compute time (last token - first scheduled) of finished "
                "requests, microseconds, cumulative", counter),
            "finished": pb_utils.MetricFamily(
                params["metric_engine_requests"], "Requests the engine finished (cancelled ones included), "
                "cumulative", counter),
            "failed": pb_utils.MetricFamily(
                params["metric_engine_failures"], "Requests that failed in the server or the engine, cumulative",
                counter),
            "rejected": pb_utils.MetricFamily(
                params["metric_engine_rejected"], "Requests answered with a client error (400-class), cumulative",
                counter),
            "requests": pb_utils.MetricFamily(
                params["metric_request_gauge"], "Engine requests by state, from the iteration stats", gauge),
            "kv": pb_utils.MetricFamily(
                params["metric_kv_gauge"], "Engine KV-cache blocks, from the iteration stats", gauge),
        }
        self.queue = self.families["queue"].Metric(labels=labels)
        self.compute = self.families["compute"].Metric(labels=labels)
        self.finished = self.families["finished"].Metric(labels=labels)
        self.failed = self.families["failed"].Metric(labels=labels)
        self.rejected = self.families["rejected"].Metric(labels=labels)
        self.request_types = [t for t in params["metric_request_types"].split(",") if t]
        self.kv_types = [t for t in params["metric_kv_types"].split(",") if t]
        self.requests = {t: self.families["requests"].Metric(labels={**labels, "request_type": t})
                         for t in self.request_types}
        self.kv = {t: self.families["kv"].Metric(labels={**labels, "kv_cache_block_type": t}) for t in self.kv_types}
        self.request_seconds = _request_histogram(self.families, params, labels)

    def request_finished(self, queue_us: float, compute_us: float) -> None:
        self.queue.increment(round(queue_us))  # whole microseconds, like Triton's own duration counters
        self.compute.increment(round(compute_us))
        if self.request_seconds is not None:
            self.request_seconds.observe((queue_us + compute_us) / 1e6)

    def observe_stats(self, requests: dict[str, float], blocks: dict[str, float]) -> None:
        for name, metric in self.requests.items():
            if name in requests:
                metric.set(requests[name])
        for name, metric in self.kv.items():
            if name in blocks:
                metric.set(blocks[name])


def _text_tensor(name: str, text: str) -> Any:
    return pb_utils.Tensor(name, np.array([text.encode("utf-8")], dtype=np.object_))


def _int_tensor(name: str, value: int) -> Any:
    return pb_utils.Tensor(name, np.array([value], dtype=np.int32))


class _TritonIpc:
    """One thread for every call that crosses to the Triton parent process (`sender.send`, metric updates, logging).

    Python-backend calls are blocking round trips (python_backend `pb_response_sender.cc`, `pb_metric_reporter.cc`,
    `pb_cancel.cc`); made on the engine's event loop they stall every request the loop drives. Upstream's LLM API
    model sends from its own thread for this reason (tensorrtllm_backend `all_models/llmapi/tensorrt_llm/1/model.py`
    `_response_loop`). Calls run in submission order, so a request's responses keep their order."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="triton-ipc", daemon=True)
        self.thread.start()

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.put((fn, args, kwargs))

    def _run(self) -> None:
        while True:
            item = self.calls.get()
            if item is None:
                return
            fn, args, kwargs = item
            try:
                fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - one failed send must not stop the others
                try:
                    self.logger.log_error(f"Triton call {getattr(fn, '__name__', fn)} failed: {exc}")
                except Exception:  # noqa: BLE001, S110 - logging is itself IPC; nothing more to do
                    pass

    def stop(self, timeout_s: float) -> None:
        self.calls.put(None)
        self.thread.join(timeout_s)


class _Unsent:
    """A choice's streamed output not sent yet: text, its token count, its log probabilities."""

    def __init__(self) -> None:
        self.text = ""
        self.tokens = 0
        self.logprobs: list[Any] = []


def _logprob(value: Any) -> float:
    """executor/result.py Logprob(logprob, rank), or a bare number."""
    return float(getattr(value, "logprob", value))


class _InFlight:
    """A request handed to the engine: the model's own book of what it submitted and has not seen end."""

    def __init__(self, request: Any, sender: Any, parsed: dict[str, Any]) -> None:
        self.request = request
        self.sender = sender
        self.parsed = parsed
        self.result: Any = None      # the engine's result, once submitted (engine loop)
        self.task: Any = None        # the coroutine serving it (engine loop)
        self.closed = False          # the final response is queued: nothing more may be sent
        # Streaming (guarded by the model's lock): per choice, what is not sent yet; whether a flush of it waits in
        # the IPC queue, whether any partial response was sent; the sweep that last asked is_cancelled().
        self.unsent: dict[int, _Unsent] = {}
        self.flush_queued = False
        self.sent_partial = False
        self.num_input_tokens: int | None = None  # asked for: sent with the first partial response, then None
        self.last_cancel_check = -1


def _cancelled_response() -> Any:
    code = getattr(pb_utils.TritonError, "CANCELLED", None)
    error = (pb_utils.TritonError("request cancelled", code) if code is not None
             else pb_utils.TritonError("request cancelled"))
    return pb_utils.InferenceResponse(error=error)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        from tensorrt_llm import LLM
        from tensorrt_llm.llmapi import KvCacheConfig

        model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException("this model must be decoupled (model_transaction_policy)")
        params = {k: v["string_value"] for k, v in (model_config.get("parameters") or {}).items()}
        self.drain_s = float(params.get("drain_seconds") or DEFAULT_DRAIN_S)
        self.stream_interval = max(1, int(params.get("stream_interval") or DEFAULT_STREAM_INTERVAL))
        self.sweeps = 0  # cancellation sweeps run (IPC thread)
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "model.yaml")) as f:
            llm_args = yaml.safe_load(f) or {}
        llm_args.pop("triton_config", None)  # for Triton's config, not for LLM()
        kv = llm_args.pop("kv_cache_config", None)
        if kv is not None:
            llm_args["kv_cache_config"] = KvCacheConfig(**kv)
        speculative = llm_args.pop("speculative_config", None)
        if speculative is not None:
            # As trtllm-serve's update_llm_args_with_extra_dict (llmapi/llm_args.py) builds it: decoding_type picks
            # the config class (MTP, Eagle, DraftTarget).
            from tensorrt_llm.llmapi.llm_args import DecodingBaseConfig

            llm_args["speculative_config"] = DecodingBaseConfig.from_dict(dict(speculative))
        # Attention data parallelism: the iteration stats are rank 0's (gauges_from_stats).
        self.attention_dp_ranks = int(llm_args.get("tensor_parallel_size", 1)) if llm_args.get(
            "enable_attention_dp") else 1
        self.logger = pb_utils.Logger
        self.adapters = Adapters(os.environ.get(ADAPTERS_ENV), _lora_request)
        self.llm = LLM(**llm_args)
        self.metrics = _Metrics(params, {"model": args["model_name"], "version": args["model_version"]})
        self.ipc = _TritonIpc(self.logger)
        lora = llm_args.get("lora_config")
        self.lora_info = LoraInfo(params["metric_lora_info"], {"model": args["model_name"], "version": args[
            "model_version"]}, int(lora.get("max_loras") or 0)) if isinstance(lora, dict) and params.get(
            "metric_lora_info") else None
        # Requests submitted and not yet ended, by our own id. Guarded by `lock` (Triton's, the engine's and the
        # cancellation threads all touch it).
        self.lock = threading.Lock()
        self.in_flight: dict[int, _InFlight] = {}
        self.next_id = 0
        self.submitted_any = False
        self.engine_error: str | None = None  # why the engine is dead, once it is
        self.stopping = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="llmapi-loop", daemon=True)
        self.thread.start()
        self.stats_task = asyncio.run_coroutine_threadsafe(self._stats_loop(), self.loop)
        self.health_task = asyncio.run_coroutine_threadsafe(self._health_loop(), self.loop)
        self.cancel_thread = threading.Thread(target=self._cancellation_loop, name="triton-cancel", daemon=True)
        self.cancel_thread.start()

    def execute(self, requests: list[Any]) -> None:
        # Triton's thread: parse here (tensors are local), hand valid requests to the engine's loop, return at once.
        for request in requests:
            sender = request.get_response_sender()
            try:
                parsed = parse_request(request)
                parsed["lora"] = self.adapters.request_for(parsed["adapter"])
            except BadRequest as exc:
                self.metrics.rejected.increment(1)
                sender.send(_error(f"bad request: {exc}", "INVALID_ARG"),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            if self.engine_error is not None:
                self.metrics.failed.increment(1)
                sender.send(_error(f"engine failed: {self.engine_error}", "UNAVAILABLE"),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            entry = _InFlight(request, sender, parsed)
            with self.lock:
                self.next_id += 1
                key = self.next_id
                self.in_flight[key] = entry
            self.loop.call_soon_threadsafe(self._start, key, entry)
        return None

    def is_ready(self) -> bool:
        """Model readiness (`/v2/models/<model>/ready`, which the OpenAI container's readiness asks), called by
        python_backend r26.03 and later (src/pb_stub.cc `Stub::ProcessUserModelReadinessRequest`; older builds never
        call it): False once the engine is dead, even if tritonserver is slow to exit. Cheap: it shares the stub's
        message queue."""
        return self.engine_error is None

    def finalize(self) -> None:
        if self.stopping.is_set():
            return  # finalized already
        self._drain()
        self.stopping.set()
        self.stats_task.cancel()
        self.health_task.cancel()
        # What outlived the drain bound is answered before the engine stops: an engine's shutdown may end it as if
        # it had finished (the stand-in finishes it "cancelled"), which would look like an answer.
        self._end_all("the model is unloading")
        # A dead engine may never finish shutting down: bounded, so the server can exit and be restarted.
        stopper = threading.Thread(target=self.llm.shutdown, name="llmapi-shutdown", daemon=True)
        stopper.start()
        stopper.join(SHUTDOWN_WAIT_S)
        self._end_all("the model is unloading")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            # what initialize opened, closed once the tasks a stop left unstarted end (a task made just before the
            # stop never ran a step: dropped at close, its coroutine warns), as asyncio.run ends its own
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.wait(left, timeout=5))
            self.loop.close()
        self.cancel_thread.join(5)
        self.ipc.stop(10)

    def _drain(self) -> None:
        """Let the requests in flight finish, up to the drain bound, before the engine stops (as upstream's vllm_backend
        waits for its ongoing request count in `_run_llm_engine`). Triton itself waits for them on SIGTERM and on an
        unload before it calls finalize (measured); this bounds the cases where it does not."""
        deadline = time.monotonic() + self.drain_s
        while self.engine_error is None and time.monotonic() < deadline:
            with self.lock:
                left = len(self.in_flight)
            if not left:
                return
            time.sleep(0.1)

    # ---- sending (any thread): through the IPC thread, at most one final response per request ----

    def _send(self, key: int, response: Any, final: bool) -> bool:
        with self.lock:
            entry = self.in_flight.get(key)
            if entry is None or entry.closed:
                return False
            if final:
                entry.closed = True
                del self.in_flight[key]
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            # queued under the lock: a cancellation's final response cannot overtake a queued partial one
            self.ipc.call(entry.sender.send, response, flags=flags)
        return True

    # ---- one request (engine loop) ----

    def _start(self, key: int, entry: _InFlight) -> None:
        entry.task = self.loop.create_task(self._serve_counted(key, entry))

    async def _serve_counted(self, key: int, entry: _InFlight) -> None:
        """_serve, with the request's adapter counted in the LoRA gauge while it is in the engine."""
        adapter = entry.parsed.get("adapter") if self.lora_info is not None else None
        if adapter:
            self.ipc.call(self.lora_info.change, adapter, 1)
        try:
            await self._serve(key, entry)
        finally:
            if adapter:
                self.ipc.call(self.lora_info.change, adapter, -1)

    async def _serve(self, key: int, entry: _InFlight) -> None:
        try:
            await self._generate(key, entry)
        except asyncio.CancelledError:
            pass  # cancelled by Triton (the cancellation thread answered) or the engine died (_engine_failed did)
        except Exception as exc:  # noqa: BLE001 - a request's error ends this request; a dead engine ends all
            if _is_request_error(exc):
                if self._send(key, _error(f"bad request: {exc}", "INVALID_ARG"), True):
                    self.ipc.call(self.metrics.rejected.increment, 1)
                return
            message = f"{type(exc).__name__}: {exc}"
            if await self._check_engine() is not None:  # this error may be the worker's own, surfaced once
                self._engine_failed(message)
                return
            if self._send(key, _error(f"engine error: {message}", "INTERNAL"), True):
                self.ipc.call(self.metrics.failed.increment, 1)
                self.ipc.call(self.logger.log_error, f"request failed: {message}")

    async def _generate(self, key: int, entry: _InFlight) -> None:
        from tensorrt_llm import SamplingParams
        from tensorrt_llm.llmapi import GuidedDecodingParams

        req = entry.parsed
        kwargs = dict(req["sampling"])
        if req["guide"] is not None:
            # compiling a schema takes milliseconds to seconds: off the engine loop
            await asyncio.get_running_loop().run_in_executor(None, check_guide, req["guide"])
            kwargs["guided_decoding"] = GuidedDecodingParams(**req["guide"])
        sampling = SamplingParams(**kwargs)
        result = self.llm.generate_async(req["prompt"], sampling_params=sampling, streaming=req["stream"],
                                         lora_request=req.get("lora"))
        entry.result = result
        self.submitted_any = True
        n = int(kwargs.get("n") or 1)
        # per choice: how much of the cumulative output was handed to the stream buffer
        sent_text, sent_tokens = [0] * n, [0] * n
        prefix = ["" if req["exclude_input"] else req["prompt"]] * n
        want_logprobs = req["logprobs"] is not None
        outputs: list[Any] = []
        count_input = req["num_input"]  # sent with the first streamed response too (a frontend checks the context)
        async for item in result:
            outputs = list(item.outputs)
            done = bool(getattr(item, "finished", False)) or all(o.finish_reason is not None for o in outputs)
            if not req["stream"] or done or entry.closed:
                continue
            for i, output in enumerate(outputs):
                text, tokens = output.text, len(output.token_ids)  # each read once: what is sent is what is counted
                if len(text) <= sent_text[i]:
                    continue
                if count_input:  # rides on the first partial response
                    entry.num_input_tokens = len(getattr(result, "prompt_token_ids", None) or [])
                    count_input = False
                logprobs = self._logprobs(output, sent_tokens[i], req["logprobs"]) if want_logprobs else None
                self._stream(key, entry, i, prefix[i] + text[sent_text[i]:], tokens - sent_tokens[i], logprobs)
                sent_text[i], sent_tokens[i], prefix[i] = len(text), tokens, ""
        if not outputs:
            raise RuntimeError("the engine returned no output")
        times = engine_times_us(outputs[0])
        if times is not None:
            self.ipc.call(self.metrics.request_finished, *times)
        if entry.closed:
            return  # cancelled: the answer is already sent
        with self.lock:  # what no partial response carried goes with the final ones
            unsent, entry.unsent = entry.unsent, {}
        # One response per choice, the last one final: the final response ends the Triton request.
        for i, output in enumerate(outputs):
            pending = unsent.get(i) or _Unsent()
            start = sent_tokens[i] if req["stream"] else 0
            text = output.text[sent_text[i]:] if req["stream"] else output.text
            tensors = [_text_tensor("text_output", pending.text + prefix[i] + text),
                       _text_tensor("finish_reason", str(output.finish_reason or "stop")),
                       _int_tensor("sequence_index", i)]
            if want_logprobs:
                logprobs = pending.logprobs + self._logprobs(output, start, req["logprobs"])
                tensors.append(_text_tensor("logprobs", json.dumps(logprobs)))
            last = i == len(outputs) - 1
            if req["num_input"]:
                tensors.append(_int_tensor("num_input_tokens", len(getattr(result, "prompt_token_ids", None) or [])))
            if req["num_output"] and last:  # every choice's tokens: what OpenAI's usage counts
                tensors.append(_int_tensor("num_output_tokens", sum(len(o.token_ids) for o in outputs)))
            if self._send(key, pb_utils.InferenceResponse(output_tensors=tensors), last) and last:
                self.ipc.call(self.metrics.finished.increment, 1)

    def _logprobs(self, output: Any, start: int, top: int) -> list[Any]:
        """The log probabilities of output tokens from `start` on, as [token text, logprob, [[text, logprob], ...
        the `top` likeliest]]. TensorRT-LLM's CompletionOutput.logprobs is a list per token of {token id:
        Logprob(logprob, rank)} (executor/result.py TokenLogprobs), the sampled token among them; older releases
        gave the sampled token's logprob alone (a float). Token texts come from the LLM's tokenizer, as trtllm-serve
        decodes them (serve/postprocess_handlers.py `create_logprobs`)."""
        entries = []
        token_ids, logprobs = output.token_ids, output.logprobs or []
        for position in range(start, min(len(token_ids), len(logprobs))):
            token, ranked = token_ids[position], logprobs[position]
            if not isinstance(ranked, dict):
                entries.append([self._decode(token), float(ranked), []])
                continue
            chosen = ranked.get(token)
            alternatives = sorted(ranked.items(), key=lambda item: -_logprob(item[1]))[:top]
            entries.append([self._decode(token), _logprob(chosen) if chosen is not None else None,
                            [[self._decode(t), _logprob(lp)] for t, lp in alternatives]])
        return entries

    def _decode(self, token: int) -> str:
        tokenizer = getattr(self.llm, "tokenizer", None)
        return tokenizer.decode([token]) if tokenizer is not None else str(token)

    # ---- streaming: a stream's new text is coalesced into one response per trip through the IPC queue ----

    def _stream(self, key: int, entry: _InFlight, index: int, text: str, tokens: int,
                logprobs: list[Any] | None) -> None:
        """Engine loop: add a choice's new text to what it has not sent yet; queue a flush unless one is queued (it
        will carry this text too) or, after the first response, fewer than stream_interval tokens wait."""
        with self.lock:
            if entry.closed:
                return
            pending = entry.unsent.setdefault(index, _Unsent())
            pending.text += text
            pending.tokens += tokens
            if logprobs:
                pending.logprobs += logprobs
            if entry.flush_queued or (entry.sent_partial and pending.tokens < self.stream_interval):
                return
            entry.flush_queued = True
        self.ipc.call(self._flush, entry)

    def _flush(self, entry: _InFlight) -> None:
        """IPC thread: send everything the stream gained since its last response, one response per choice. Runs
        before any final response queued after it, so the client sees the text in order; the final ones carry what
        is left."""
        with self.lock:
            entry.flush_queued = False
            if entry.closed:
                return
            unsent = {i: p for i, p in entry.unsent.items() if p.text}
            entry.unsent = {i: p for i, p in entry.unsent.items() if not p.text}
            if not unsent:
                return
            entry.sent_partial = True
            num_input, entry.num_input_tokens = entry.num_input_tokens, None
        for index, pending in sorted(unsent.items()):
            tensors = [_text_tensor("text_output", pending.text), _text_tensor("finish_reason", ""),
                       _int_tensor("sequence_index", index)]
            if entry.parsed["logprobs"] is not None:
                tensors.append(_text_tensor("logprobs", json.dumps(pending.logprobs)))
            if num_input is not None:
                tensors.append(_int_tensor("num_input_tokens", num_input))
                num_input = None
            entry.sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=0)

    # ---- engine health (engine loop; _engine_failed from any thread) ----

    def _health_problem(self) -> str | None:
        """Why the executor is dead, or None. executor/executor.py (1.2.1): a worker's error waits in the executor's
        error queue until `_handle_background_error()` raises it (and shuts the executor down: proxy.py
        `mpi_done_callback` queues it when an MPI worker ends); `is_shutdown()` is True after that or a shutdown."""
        executor = getattr(self.llm, "_executor", None)
        if executor is None or self.stopping.is_set():
            return None
        surface = getattr(executor, "_handle_background_error", None)
        try:
            if surface is not None:
                surface()
        except Exception as exc:  # noqa: BLE001 - whatever the worker died of
            return f"{type(exc).__name__}: {exc}"
        is_shutdown = getattr(executor, "is_shutdown", None)
        if is_shutdown is not None and is_shutdown():
            return "the TensorRT-LLM executor shut down"
        return None

    async def _check_engine(self) -> str | None:
        """_health_problem off the engine loop, bounded: a check that hangs is itself a dead engine."""
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(None, self._health_problem), HEALTH_TIMEOUT_S)
        except TimeoutError:
            return f"the executor's health check did not return within {HEALTH_TIMEOUT_S:g} s"

    async def _health_loop(self) -> None:
        while not self.stopping.is_set() and self.engine_error is None:
            reason = await self._check_engine()
            if reason is not None:
                self._engine_failed(reason)
                return
            await asyncio.sleep(HEALTH_POLL_S)

    def _end_all(self, reason: str) -> int:
        """End every request in flight with an UNAVAILABLE error and stop waiting for the engine. Returns how many."""
        with self.lock:
            entries = [(k, e) for k, e in self.in_flight.items() if not e.closed]
        ended = 0
        for key, entry in entries:
            if self._send(key, _error(reason, "UNAVAILABLE"), True):
                ended += 1
                task = entry.task
                if task is not None:
                    self.loop.call_soon_threadsafe(task.cancel)
        if ended:
            self.ipc.call(self.metrics.failed.increment, ended)
        return ended

    def _engine_failed(self, reason: str) -> None:
        """Once: answer everything in flight, say why, and make tritonserver exit so Kubernetes restarts the pod."""
        with self.lock:
            if self.engine_error is not None or self.stopping.is_set():
                return  # already handled, or unloading (finalize answers what is left)
            self.engine_error = reason
        ended = self._end_all(f"engine failed: {reason}")
        message = (f"EngineFailed: the TensorRT-LLM engine is dead ({reason}); {ended} request(s) in flight ended "
                   "with an error; stopping tritonserver so that the container restarts")
        self.ipc.call(self.logger.log_error, message)
        self.ipc.call(exit_server, reason)  # after the error responses and the log line, in order

    # ---- cancellation (own thread) ----

    def _cancellation_loop(self) -> None:
        """Triton's request cancellation (client closed the stream / cancelled the call), checked off the engine
        loop: `is_cancelled()` is a blocking round trip to the parent process (python_backend `pb_cancel.cc`).

        TensorRT-LLM drops an aborted request that still waits for a slot without any response
        (`PyExecutor._handle_canceled_requests`), so, as upstream's LLM API model does, the model aborts and sends
        its own CANCELLED final response, then stops waiting for the engine."""
        checked = threading.Event()
        checked.set()
        while not self.stopping.wait(CANCEL_POLL_S):
            if checked.is_set():  # one check at a time in the IPC queue, however slow the parent process is
                checked.clear()
                self.ipc.call(self._check_cancelled, checked)

    def _check_cancelled(self, checked: threading.Event) -> None:
        """Runs on the IPC thread: `is_cancelled()` is asked in order with the sends, so never about a request whose
        final response was already sent (Triton has released it then; asking about it could reach freed memory in
        the parent process)."""
        try:
            self.sweeps += 1
            with self.lock:
                entries = [(k, e) for k, e in self.in_flight.items() if not e.closed]
            # bounded: the requests asked longest ago (in arrival order among equals)
            entries = heapq.nsmallest(CANCEL_CHECKS_PER_SWEEP, entries, key=lambda ke: ke[1].last_cancel_check)
            for key, entry in entries:
                entry.last_cancel_check = self.sweeps
                try:
                    cancelled = entry.request.is_cancelled()
                except Exception:  # noqa: BLE001 - the request is gone; its final response settles it
                    continue
                if cancelled and self._send(key, _cancelled_response(), True):
                    self.ipc.call(self.metrics.finished.increment, 1)
                    self.loop.call_soon_threadsafe(self._abort, entry)
        finally:
            checked.set()

    def _abort(self, entry: _InFlight) -> None:
        # Active: the engine frees the slot and finishes it as "cancelled"; waiting: it drops it silently. Either
        # way nobody waits for its output any more (a cancelled request's engine timing is not counted).
        if entry.result is not None:
            entry.result.abort()
        if entry.task is not None:
            entry.task.cancel()

    # ---- gauges (engine loop reads, IPC thread publishes) ----

    async def _stats_loop(self) -> None:
        """TensorRT-LLM's stats stream (`LLM.get_stats_async`, executor/result.py `IterationResult.__anext__`)
        yields one record per engine iteration with work and ends only after `timeout` seconds without one: under
        load it never ends, so each record is published as it comes. Before the first request the stream does not
        exist (the engine prints a warning per call), so it is not polled then."""
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set() and self.engine_error is None:
            if self.submitted_any:
                latest, published_at = None, 0.0
                try:
                    async for stats in self.llm.get_stats_async(timeout=STATS_INTERVAL_S):
                        latest = json.loads(stats) if isinstance(stats, str) else stats
                        if loop.time() - published_at >= STATS_PUBLISH_S:  # one record per iteration: thinned
                            self._publish(gauges_from_stats(latest, self.attention_dp_ranks), latest)
                            latest, published_at = None, loop.time()
                except Exception as exc:  # noqa: BLE001 - stats are best effort, unless the engine died
                    if await self._check_engine() is not None:
                        self._engine_failed(f"{type(exc).__name__}: {exc}")
                        return
                    self.ipc.call(self.logger.log_warn, f"iteration stats unavailable: {type(exc).__name__}: {exc}")
                if latest is not None:
                    self._publish(gauges_from_stats(latest, self.attention_dp_ranks), latest)
            self._publish(({}, {}), None)
            await asyncio.sleep(STATS_INTERVAL_S)

    def _publish(self, gauges: tuple[dict[str, float], dict[str, float]], record: dict[str, Any] | None) -> None:
        requests, blocks = gauges
        with self.lock:
            submitted = sum(1 for e in self.in_flight.values() if e.result is not None)
        if record is not None:
            requests["waiting"] = waiting_requests(submitted, record, self.attention_dp_ranks)
        elif submitted == 0:
            # Nothing in flight: the engine is idle (it reports nothing then, and its last record still counts the
            # requests it finished in it).
            requests.update(waiting=0.0, scheduled=0.0, active=0.0)
        if requests or blocks:
            self.ipc.call(self.metrics.observe_stats, requests, blocks)

