"""Triton Python model serving vLLM's V1 async engine, with the engine's own queue and compute time as metrics.

Owned by the llmbackend operator and shipped in the rendered model repository as `<model>/1/model.py`; it runs
inside the stock `tritonserver:<yy.mm>-vllm-python-py3` image and imports only what that image has (it must not
import llmbackend). Written against vLLM 0.31.0's public API (the version is pinned in
llmbackend/api/engine_versions.py and checked by tests/unit/test_engine_conformance.py):

- `vllm.AsyncEngineArgs(**model.json)` and `vllm.v1.engine.async_llm.AsyncLLM.from_engine_args(args,
  stat_loggers=[cls])`, where `cls` subclasses `vllm.v1.metrics.loggers.StatLoggerBase` (the documented custom
  stat logger interface: `__init__(vllm_config, engine_index)`, `record(scheduler_stats, iteration_stats, ...)`,
  `log_engine_initialized()`);
- `AsyncLLM.generate(prompt, SamplingParams, request_id, lora_request=...)`: async generator of cumulative
  `RequestOutput`s (`lora_request`: `vllm.lora.request.LoRARequest` of the adapter the optional `adapter` input names,
  from the list $LLMBACKEND_ADAPTERS_FILE names); `AsyncLLM.abort(request_id)`;
- per step `SchedulerStats.num_waiting_reqs / num_running_reqs / kv_cache_usage` and per finished request
  `IterationStats.finished_requests[i].queued_time / inference_time` (seconds): the queue and compute counters, and
  their sum (the request's time in the engine) observed into a histogram.

Engine failure, as vLLM 0.31.0 reports it (v1/engine/async_llm.py): `check_health()` raises once `errored`, every
`generate()` in flight raises `EngineDeadError` (`_run_output_handler` -> `OutputProcessor.propagate_error`), and
`add_request` raises it for any new request. The model checks health every HEALTH_POLL_S and on any engine error; a
dead engine ends every request in flight with an UNAVAILABLE error, answers new ones the same way, logs the reason,
writes it as the container's termination message and sends SIGTERM to tritonserver (this stub's parent), which stops
accepting connections at once (readiness and liveness fail) and exits, so Kubernetes restarts the container.
Upstream's vllm_backend (`_check_health`) unloads the model instead, which needs explicit model control; Triton's own
liveness never fails for a dead model. `is_ready()` (asked by python_backend r26.03 and later, the pinned image's
included) also fails the model's readiness from the moment the engine is known dead.
Client errors (`VLLMClientError`, e.g. `VLLMValidationError` for a prompt that does not fit) are answered
INVALID_ARG and are not engine failures.

Streaming cost: the text a stream gained since its last response is coalesced into one response. The first token
is queued at once; while a stream's response waits in the IPC queue, later outputs join it instead of queueing
responses of their own, so under load the Triton round trips per token fall without delaying any token (vLLM does
the same one step earlier: `RequestOutputCollector.put` merges outputs its consumer has not taken yet,
v1/engine/output_processor.py, 0.31.0). config.pbtxt `stream_interval` (default 1) sets the fewest tokens per
response after the first, as vLLM's own `--stream-interval` does (`RequestState.make_request_output`: the first
token, every stream_interval tokens, and the final output). Each cancellation sweep asks at most
CANCEL_CHECKS_PER_SWEEP requests (those asked longest ago), so a sweep never holds the IPC thread long.

Why not Triton's stock vllm backend: it exports token counters and latency histograms only, no queue time and no
waiting count, so the autoscaler would have no engine-level queue-to-compute signal.

Metric names come from config.pbtxt `parameters` (rendered from llmbackend.api.engine_metrics), so the operator
keeps one definition of them.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import queue
import re
import signal
import threading
import time
import uuid
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from vllm import AsyncEngineArgs, SamplingParams
from vllm.exceptions import VLLMClientError
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.metrics.loggers import StatLoggerBase

# How often the cancellation thread asks Triton whether in-flight requests were cancelled, seconds.
CANCEL_POLL_S = 0.05
# The most `is_cancelled()` round trips one sweep makes (python_backend has no batched check: pb_cancel.cc
# `PbCancel::IsCancelled` is one round trip per request). Sweeps take the requests asked longest ago, so each is asked
# within ceil(in flight / this) sweeps: 4 sweeps (~0.2 s plus the IPC queue's wait) at 256 streams.
CANCEL_CHECKS_PER_SWEEP = 64
# The longest a per-step gauge update is held back while the request counts stay the same, seconds (vLLM records
# every engine step, tens of ms; one update is ~10 Triton round trips). Count changes are published at once.
STATS_PUBLISH_S = 0.25
# Fewest new tokens per streamed response after the first, when config.pbtxt sets no stream_interval: 1, vLLM's own
# default (SchedulerConfig.stream_interval); under load the coalescing batches tokens anyway.
DEFAULT_STREAM_INTERVAL = 1
# How often the engine's health is checked while nothing fails, seconds (the bound on noticing a silent death).
HEALTH_POLL_S = 0.5
# A health check that does not return within this is a failure too, seconds.
HEALTH_TIMEOUT_S = 10.0
# How long finalize lets requests in flight finish when config.pbtxt gives no drain_seconds, seconds.
DEFAULT_DRAIN_S = 60.0
# The most finalize waits for the engine to shut down (a dead engine may never answer), seconds.
SHUTDOWN_WAIT_S = 30.0
# Where Kubernetes reads a container's termination message (the pod's lastState.terminated.message).
TERMINATION_LOG = "/dev/termination-log"
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# vLLM's finish reasons reach the client as vLLM's own OpenAI layer passes them ("stop", "length", "abort",
# "repetition"); "error" is a failure (500 there: entrypoints/generate/base/serving.py `_raise_if_error`, 0.31.0).
# A request the client cancelled never gets here: it is answered CANCELLED by the cancellation thread.

# The most alternatives per token a request may ask for: vLLM's default max_logprobs (config/model.py ModelConfig).
MAX_LOGPROBS = 20
# Optional [1] inputs passed to SamplingParams under the same name: name -> Python type.
SAMPLING_INPUTS = {
    "max_tokens": int,
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "seed": int,
    "frequency_penalty": float,
    "presence_penalty": float,
    "repetition_penalty": float,
    "skip_special_tokens": bool,
}
METRIC_PARAMETERS = (
    "metric_engine_queue", "metric_engine_compute", "metric_engine_requests", "metric_engine_failures",
    "metric_engine_rejected",
    "metric_engine_request_seconds", "metric_engine_request_seconds_buckets",
    "metric_request_gauge", "metric_request_types", "metric_kv_gauge", "metric_kv_types",
    "metric_vllm_waiting", "metric_vllm_running", "metric_vllm_kv_usage", "metric_lora_info",
)
# What this model can report for each label value of the shared gauges (vLLM has no separate "active" count:
# running requests are the active ones).
REQUEST_TYPES = ("waiting", "scheduled", "active", "max")
KV_TYPES = ("used", "free", "max", "fraction")


class BadRequest(ValueError):
    """The request's inputs are invalid: answered with an error, the model keeps serving."""

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



def _parameters(model_config: dict) -> dict[str, str]:
    return {k: v.get("string_value", "") for k, v in (model_config.get("parameters") or {}).items()}


class EngineMetrics:
    """The Triton metric families this model exports (kept alive as long as their metrics: see REFERENCE.md)."""

    def __init__(self, names: dict[str, str], labels: dict[str, str]) -> None:
        missing = [p for p in METRIC_PARAMETERS if not names.get(p)]
        if missing:
            raise pb_utils.TritonModelException(f"config.pbtxt lacks metric name parameters: {missing}")
        counter, gauge = pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE
        family = pb_utils.MetricFamily
        self.families = {
            "queue": family(names["metric_engine_queue"], "Engine queue time of finished requests (us)", counter),
            "compute": family(names["metric_engine_compute"], "Engine inference time of finished requests (us)",
                              counter),
            "finished": family(names["metric_engine_requests"], "Requests the engine finished", counter),
            "failed": family(names["metric_engine_failures"], "Requests that failed in the server or the engine",
                             counter),
            "rejected": family(names["metric_engine_rejected"], "Requests answered with a client error (400-class)",
                               counter),
            "requests": family(names["metric_request_gauge"], "Engine requests by state", gauge),
            "kv": family(names["metric_kv_gauge"], "Engine KV-cache blocks", gauge),
            "waiting": family(names["metric_vllm_waiting"], "Requests waiting to be scheduled", gauge),
            "running": family(names["metric_vllm_running"], "Requests running in the batch", gauge),
            "kv_usage": family(names["metric_vllm_kv_usage"], "KV-cache usage (1 = full)", gauge),
        }
        f = self.families
        self.queue_us = f["queue"].Metric(labels=labels)
        self.compute_us = f["compute"].Metric(labels=labels)
        self.finished = f["finished"].Metric(labels=labels)
        self.failed = f["failed"].Metric(labels=labels)
        self.rejected = f["rejected"].Metric(labels=labels)
        request_types = names["metric_request_types"].split(",")
        kv_types = names["metric_kv_types"].split(",")
        unknown = sorted(set(request_types) - set(REQUEST_TYPES)) + sorted(set(kv_types) - set(KV_TYPES))
        if unknown:
            raise pb_utils.TritonModelException(f"this model cannot report gauge label values {unknown}")
        self.requests = {t: f["requests"].Metric(labels={**labels, "request_type": t}) for t in request_types}
        self.kv = {t: f["kv"].Metric(labels={**labels, "kv_cache_block_type": t}) for t in kv_types}
        # vLLM's own gauges carry vLLM's label name for the model as well.
        vllm_labels = {**labels, "model_name": labels["model"]}
        self.waiting = f["waiting"].Metric(labels=vllm_labels)
        self.running = f["running"].Metric(labels=vllm_labels)
        self.kv_usage = f["kv_usage"].Metric(labels=vllm_labels)
        # Each finished request's time in the engine (queued + inference = arrival to last token, seconds), when
        # this Triton's Python backend has HISTOGRAM metrics (the counters above do not depend on it).
        self.request_seconds = None
        histogram = getattr(family, "HISTOGRAM", None)
        if histogram is not None:
            buckets = [float(b) for b in names["metric_engine_request_seconds_buckets"].split(",")]
            f["request_seconds"] = family(names["metric_engine_request_seconds"],
                                          "Time of finished requests in the engine, arrival to last token (s)", histogram)
            self.request_seconds = f["request_seconds"].Metric(labels=labels, buckets=buckets)

    def step(self, waiting: int, running: int, usage: float, max_seqs: int, kv_blocks: int) -> None:
        used = round(usage * kv_blocks)
        values = {"waiting": waiting, "scheduled": running, "active": running, "max": max_seqs}
        for kind, metric in self.requests.items():
            metric.set(values[kind])
        kv = {"fraction": usage, "max": kv_blocks, "used": used, "free": kv_blocks - used}
        for kind, metric in self.kv.items():
            metric.set(kv[kind])
        self.waiting.set(waiting)
        self.running.set(running)
        self.kv_usage.set(usage)

    def request_finished(self, queued_s: float, inference_s: float) -> None:
        self.queue_us.increment(max(0.0, queued_s) * 1e6)
        self.compute_us.increment(max(0.0, inference_s) * 1e6)
        self.finished.increment(1)
        if self.request_seconds is not None:
            self.request_seconds.observe(max(0.0, queued_s) + max(0.0, inference_s))


class TritonIpc:
    """One thread for every call that crosses to the Triton parent process (`sender.send`, metric updates, logging).

    Python-backend calls are blocking round trips (python_backend `pb_response_sender.cc`, `pb_metric_reporter.cc`,
    `pb_cancel.cc`). vLLM calls stat loggers and yields outputs on its asyncio loop, so such calls there would stall
    the engine's output handling for every request; upstream's vllm_backend queues its metric updates to a thread
    for this reason (`src/utils/metrics.py`). Calls run in submission order."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="triton-ipc", daemon=True)
        self.thread.start()

    def call(self, fn, *args, **kwargs) -> None:
        self.calls.put((fn, args, kwargs))

    def _run(self) -> None:
        while True:
            item = self.calls.get()
            if item is None:
                return
            fn, args, kwargs = item
            try:
                fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - one failed call must not stop the others
                try:
                    pb_utils.Logger.log_error(f"Triton call {getattr(fn, '__name__', fn)} failed: {exc}")
                except Exception:  # noqa: BLE001, S110 - logging is itself IPC; nothing more to do
                    pass

    def stop(self, timeout_s: float) -> None:
        self.calls.put(None)
        self.thread.join(timeout_s)


class TritonStatLogger(StatLoggerBase):
    """vLLM custom stat logger: forwards the engine's per-step and per-request stats to Triton's metrics, through
    the IPC thread (record() runs on vLLM's event loop)."""

    metrics: EngineMetrics  # bound by a subclass made in initialize(): vLLM constructs loggers from the class
    ipc: TritonIpc

    def __init__(self, vllm_config, engine_index: int = 0) -> None:
        self.vllm_config = vllm_config
        self.engine_index = engine_index
        # The newest per-step gauge values not yet published. vLLM records every engine step and one publish is
        # ~10 round trips, more than the step's tokens cost at low concurrency: a step whose request counts did not
        # change is published only STATS_PUBLISH_S after the last publish, and while a publish waits in the IPC
        # queue newer values replace its arguments instead of queueing another (gauges: the newest value wins).
        self.gauge_lock = threading.Lock()
        self.gauges: tuple | None = None
        self.published: tuple[float, tuple] = (0.0, ())  # when, and the request counts then

    def record(self, scheduler_stats, iteration_stats, *args, **kwargs) -> None:
        if scheduler_stats is not None:
            cache = getattr(self.vllm_config, "cache_config", None)
            scheduler = getattr(self.vllm_config, "scheduler_config", None)
            # Older vLLM releases named it gpu_cache_usage.
            usage = getattr(scheduler_stats, "kv_cache_usage", getattr(scheduler_stats, "gpu_cache_usage", 0.0))
            # vLLM's own vllm:num_requests_waiting adds the requests the scheduler skipped this step (waiting for
            # remote KV, a grammar, a LoRA slot): v1/metrics/loggers.py PrometheusStatLogger.record (0.31.0).
            waiting = scheduler_stats.num_waiting_reqs + getattr(scheduler_stats, "num_skipped_waiting_reqs", 0)
            values = (waiting, scheduler_stats.num_running_reqs, usage,
                      getattr(scheduler, "max_num_seqs", 0) or 0, getattr(cache, "num_gpu_blocks", 0) or 0)
            self._queue_gauges(values)
        if iteration_stats is not None:
            for finished in iteration_stats.finished_requests:
                self.ipc.call(self.metrics.request_finished, finished.queued_time, finished.inference_time)

    def _queue_gauges(self, values: tuple) -> None:
        now = time.monotonic()
        with self.gauge_lock:
            published_at, counts = self.published
            if values[:2] == counts and now - published_at < STATS_PUBLISH_S:
                return
            self.published = (now, values[:2])
            queued, self.gauges = self.gauges is not None, values
        if not queued:
            self.ipc.call(self._publish_gauges)

    def _publish_gauges(self) -> None:
        """IPC thread: the newest per-step values recorded since the last publish."""
        with self.gauge_lock:
            values, self.gauges = self.gauges, None
        if values is not None:
            self.metrics.step(*values)

    def log_engine_initialized(self) -> None:
        pass


def _optional(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _scalar(request, name: str):
    value = _optional(request, name)
    if value is None:
        return None
    if value.size != 1:
        raise BadRequest(f"input {name!r} must hold exactly one value, got shape {list(value.shape)}")
    return value.reshape(-1)[0]


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _lora_request(name: str, lora_id: int, path: str):
    """vLLM's per-request adapter (vllm/lora/request.py LoRARequest at 0.31.0: lora_name, lora_int_id > 0, lora_path;
    the engine loads it on first use and keeps max_cpu_loras of them, evicting the least recently used)."""
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=path)


def adapter_name(request) -> str | None:
    """The optional `adapter` input: the adapter (spec.adapters name) to serve this request with."""
    value = _scalar(request, "adapter")
    return _text(value) if value else None


def parse_request(request) -> tuple[str, dict, bool, bool, bool, bool]:
    """(prompt, SamplingParams kwargs, stream, exclude_input, return_num_input, return_num_output)."""
    texts = _optional(request, "text_input")
    if texts is None or texts.size != 1:
        raise BadRequest("text_input must hold exactly one prompt")
    try:
        prompt = _text(texts.reshape(-1)[0])
    except UnicodeDecodeError as exc:
        raise BadRequest(f"text_input is not UTF-8: {exc}") from exc
    if not prompt.strip():
        raise BadRequest("text_input is empty")
    kwargs: dict = {}
    for name, kind in SAMPLING_INPUTS.items():
        value = _scalar(request, name)
        if value is not None:
            kwargs[name] = kind(value)
    if "max_tokens" in kwargs and kwargs["max_tokens"] < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {kwargs['max_tokens']}")
    stop = _optional(request, "stop_words")
    if stop is not None and stop.size:
        kwargs["stop"] = [_text(s) for s in stop.reshape(-1) if _text(s)]

    def flag(name: str, default: bool) -> bool:
        value = _scalar(request, name)
        return default if value is None else bool(value)

    choices = _scalar(request, "num_return_sequences")
    if choices is not None:
        kwargs["n"] = int(choices)  # vLLM checks n >= 1 (SamplingParams._verify_args)
    logprobs = _scalar(request, "num_logprobs")
    if logprobs is not None:
        if not 0 <= int(logprobs) <= MAX_LOGPROBS:
            raise BadRequest(f"num_logprobs must be between 0 and {MAX_LOGPROBS}, got {logprobs}")
        kwargs["logprobs"] = int(logprobs)  # the sampled token's, and this many alternatives per token
    guide = parse_guide(_scalar(request, "guided_decoding_guide_type"), _scalar(request, "guided_decoding_guide"))
    if guide is not None:
        # vLLM checks the schema when the request is added (SamplingParams._validate_structured_outputs:
        # xgrammar, falling back to guidance): one it cannot compile is a VLLMValidationError for this request only.
        kwargs["structured_outputs"] = StructuredOutputsParams(**guide)
    # The prompt is left out of the output unless asked for (as in the TensorRT-LLM model; OpenAI clients expect that).
    return (prompt, kwargs, flag("stream", False), flag("exclude_input_in_output", True),
            flag("return_num_input_tokens", False), flag("return_num_output_tokens", False))


# The message of a guide vLLM refuses begins with this (the OpenAI frontend names response_format for it).
GUIDE_ERROR = "guided decoding:"
# How vLLM 0.31.0 words a structured-output refusal (sampling_params.py `_validate_structured_outputs`,
# backend_xgrammar.py `validate_xgrammar_grammar`, backend_guidance.py `validate_guidance_grammar`).
_GUIDE_REFUSAL = re.compile(r"grammar|structured output|json schema", re.IGNORECASE)


def parse_guide(guide_type, guide) -> dict | None:
    """guided_decoding_guide_type / guided_decoding_guide (tensorrtllm_backend's input names) -> the arguments of
    StructuredOutputsParams, as vLLM's OpenAI layer maps response_format (0.31.0 entrypoints/generate/base/protocol.py
    `structured_outputs_from_response_format`). None: no guide."""
    guide_type = None if guide_type is None else _text(guide_type)
    if guide_type in (None, "", "none"):
        return None
    if guide_type == "json":
        return {"json_object": True}
    if guide_type == "json_schema":
        guide = None if guide is None else _text(guide)
        if not guide or not guide.strip():
            raise BadRequest(f"{GUIDE_ERROR} guide type json_schema needs the schema in guided_decoding_guide")
        try:
            return {"json": json.loads(guide)}
        except ValueError as exc:
            raise BadRequest(f"{GUIDE_ERROR} the schema is not JSON: {exc}") from None
    raise BadRequest(f"{GUIDE_ERROR} guide type {guide_type!r} is not served (json, json_schema)")


def make_response(text: str, finish_reason: str, n_in: int | None, n_out: int | None, index: int = 0,
                  logprobs: list | None = None):
    tensors = [
        pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_)),
        pb_utils.Tensor("finish_reason", np.array([finish_reason.encode("utf-8")], dtype=np.object_)),
        pb_utils.Tensor("sequence_index", np.array([index], dtype=np.int32)),
    ]
    if logprobs is not None:
        tensors.append(pb_utils.Tensor("logprobs", np.array([json.dumps(logprobs).encode("utf-8")], dtype=np.object_)))
    if n_in is not None:
        tensors.append(pb_utils.Tensor("num_input_tokens", np.array([n_in], dtype=np.int32)))
    if n_out is not None:
        tensors.append(pb_utils.Tensor("num_output_tokens", np.array([n_out], dtype=np.int32)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def error_response(message: str, code_name: str = "INTERNAL"):
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


def cancelled_response():
    """The final response of a request Triton cancelled: an error with code CANCELLED (as upstream's LLM models)."""
    code = getattr(pb_utils.TritonError, "CANCELLED", None)
    if code is None:
        return error_response("request cancelled")
    return pb_utils.InferenceResponse(error=pb_utils.TritonError("request cancelled", code))


class Unsent:
    """A choice's streamed output not sent yet: text, its token count, its log probabilities."""

    def __init__(self) -> None:
        self.text = ""
        self.tokens = 0
        self.logprobs: list = []


def logprob_entries(completion, start: int, top: int) -> list:
    """CompletionOutput.logprobs from token `start` on, as [token text, logprob, [[text, logprob], ... the `top`
    likeliest]]. vLLM 0.31.0 gives per token {token id: Logprob(logprob, rank, decoded_token)}: the sampled token
    and the `logprobs` likeliest (vllm/logprobs.py; FlatLogprobs only when asked for with flat_logprobs)."""
    entries = []
    token_ids, logprobs = completion.token_ids, completion.logprobs or []
    for position in range(start, min(len(token_ids), len(logprobs))):
        token, ranked = token_ids[position], logprobs[position]
        chosen = ranked.get(token)
        alternatives = sorted(ranked.values(), key=lambda lp: lp.rank if lp.rank is not None else 1 << 30)[:top]
        entries.append([chosen.decoded_token if chosen is not None else "",
                        chosen.logprob if chosen is not None else None,
                        [[lp.decoded_token or "", lp.logprob] for lp in alternatives]])
    return entries


class InFlight:
    """A request handed to the engine and not yet answered. The streaming fields are guarded by the model's lock."""

    def __init__(self, request, sender) -> None:
        self.request = request
        self.sender = sender
        self.task = None             # the coroutine serving it (engine loop)
        self.unsent: dict[int, Unsent] = {}  # per choice: streamed output not sent yet
        self.logprobs = False        # the request asked for log probabilities
        self.flush_queued = False    # a flush of the unsent output waits in the IPC queue
        self.sent_partial = False
        self.num_input_tokens: int | None = None  # asked for: sent with the first partial response, then None
        self.last_cancel_check = -1  # the cancellation sweep that last asked about it


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        self.logger = pb_utils.Logger
        self.adapters = Adapters(os.environ.get(ADAPTERS_ENV), _lora_request)
        config = json.loads(args["model_config"])
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.metrics = EngineMetrics(_parameters(config), labels)
        self.drain_s = float(_parameters(config).get("drain_seconds") or DEFAULT_DRAIN_S)
        self.stream_interval = max(1, int(_parameters(config).get("stream_interval") or DEFAULT_STREAM_INTERVAL))
        self.sweeps = 0  # cancellation sweeps run (IPC thread)
        path = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(path, encoding="utf-8") as f:
            engine_args = json.load(f)
        self.ipc = TritonIpc()
        names = _parameters(config)
        self.lora_info = LoraInfo(names["metric_lora_info"], labels, int(engine_args.get("max_loras") or 0)) if (
            engine_args.get("enable_lora") and names.get("metric_lora_info")) else None
        logger_cls = type("BoundTritonStatLogger", (TritonStatLogger,), {"metrics": self.metrics, "ipc": self.ipc})
        # Requests handed to the engine and not yet answered, by request_id.
        self.lock = threading.Lock()
        self.in_flight: dict[str, InFlight] = {}
        self.engine_error: str | None = None  # why the engine is dead, once it is
        self.stopping = threading.Event()

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine-loop", daemon=True)
        self.thread.start()

        async def start():
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args), stat_loggers=[logger_cls])

        self.engine = asyncio.run_coroutine_threadsafe(start(), self.loop).result()
        self.logger.log_info(f"vLLM engine started: {json.dumps(engine_args, sort_keys=True)}")
        self.cancel_thread = threading.Thread(target=self._cancellation_loop, name="triton-cancel", daemon=True)
        self.cancel_thread.start()
        self.health_task = asyncio.run_coroutine_threadsafe(self._health_loop(), self.loop)

    def execute(self, requests):
        # Decoupled: hand each request to the engine's loop and return at once; vLLM batches in flight.
        for request in requests:
            sender = request.get_response_sender()
            try:
                parsed = parse_request(request)
                params = SamplingParams(**parsed[1])  # vLLM validates ranges (temperature, top_p, ...)
                lora = self.adapters.request_for(adapter_name(request))
            except Exception as exc:  # noqa: BLE001 - TypeError, ValueError, or (vLLM >= 0.2x) VLLMValidationError
                self.metrics.rejected.increment(1)
                sender.send(error_response(f"bad request: {exc}", "INVALID_ARG"), flags=FINAL)
                continue
            if self.engine_error is not None:
                self.metrics.failed.increment(1)
                sender.send(error_response(f"engine failed: {self.engine_error}", "UNAVAILABLE"), flags=FINAL)
                continue
            request_id = uuid.uuid4().hex
            entry = InFlight(request, sender)
            entry.logprobs = params.logprobs is not None
            with self.lock:
                self.in_flight[request_id] = entry
            self.loop.call_soon_threadsafe(self._start, request_id, parsed, params, lora)
        return None

    def _start(self, request_id: str, parsed, params, lora=None) -> None:
        with self.lock:
            entry = self.in_flight.get(request_id)
            if entry is None:
                return  # cancelled before it reached the loop
            entry.task = self.loop.create_task(self._serve_counted(request_id, parsed, params, lora))

    async def _serve_counted(self, request_id: str, parsed, params, lora=None) -> None:
        """_serve, with the request's adapter counted in the LoRA gauge while it is in the engine."""
        adapter = lora.lora_name if lora is not None and self.lora_info is not None else None
        if adapter:
            self.ipc.call(self.lora_info.change, adapter, 1)
        try:
            await self._serve(request_id, parsed, params, lora)
        finally:
            if adapter:
                self.ipc.call(self.lora_info.change, adapter, -1)

    def _send(self, request_id: str, response, final: bool) -> bool:
        """Queue a response for the IPC thread; after the final one nothing more is sent for this request."""
        with self.lock:
            entry = self.in_flight.get(request_id)
            if entry is None:
                return False
            if final:
                del self.in_flight[request_id]
            self.ipc.call(entry.sender.send, response, flags=FINAL if final else 0)
        return True

    async def _serve(self, request_id: str, parsed, params, lora=None) -> None:
        try:
            await self._generate(request_id, parsed, params, lora)
        except asyncio.CancelledError:
            pass  # cancelled by Triton (the cancellation thread answered) or the engine died (_engine_failed did)
        except (BadRequest, VLLMClientError) as exc:  # the request's own fault (0.31: VLLMValidationError)
            message = str(exc)
            if params.structured_outputs is not None and _GUIDE_REFUSAL.search(message) and GUIDE_ERROR not in message:
                message = f"{GUIDE_ERROR} {message}"  # the schema, not the prompt: the frontend names response_format
            if self._send(request_id, error_response(f"bad request: {message}", "INVALID_ARG"), True):
                self.ipc.call(self.metrics.rejected.increment, 1)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not stop the model; a dead engine does
            if isinstance(exc, EngineDeadError) or self.engine.errored:
                self._engine_failed(f"{type(exc).__name__}: {exc}")
                return
            if self._send(request_id, error_response(f"engine error: {exc}"), True):
                self.ipc.call(self.metrics.failed.increment, 1)
                self.ipc.call(self.logger.log_warn, f"request {request_id} failed: {exc!r}")

    async def _generate(self, request_id: str, parsed, params, lora=None) -> None:
        prompt, _, stream, exclude_input, want_in, want_out = parsed
        n, top = params.n, params.logprobs
        # Per choice (CompletionOutput.index): the newest cumulative output, and how much of it was handed to the
        # stream buffer. With n > 1 each RequestOutput carries the choices that progressed, by index
        # (v1/engine/parallel_sampling.py `ParentRequest.get_outputs`; merged by index in
        # output_processor.py `RequestOutputCollector.put` -> outputs.py `RequestOutput.add`).
        latest: dict[int, object] = {}
        sent, sent_tokens = [0] * n, [0] * n
        last = None
        count_input = want_in  # sent with the first streamed response too (a frontend checks the context)
        async for output in self.engine.generate(prompt, params, request_id, lora_request=lora):
            last = output
            for completion in output.outputs:
                i = completion.index
                latest[i] = completion
                if not stream or output.finished or len(completion.text) <= sent[i]:
                    continue
                if count_input:  # rides on the first partial response
                    self._count_input(request_id, len(output.prompt_token_ids or []))
                    count_input = False
                logprobs = logprob_entries(completion, sent_tokens[i], top) if top is not None else None
                self._stream(request_id, i, completion.text[sent[i]:], len(completion.token_ids) - sent_tokens[i],
                             logprobs)
                sent[i], sent_tokens[i] = len(completion.text), len(completion.token_ids)
        if last is None or not latest:
            raise RuntimeError("the engine produced no output")
        if any(c.finish_reason == "error" for c in latest.values()):
            # vLLM >= 0.2x: the engine failed this request (finish reason "error"); it is not an answer.
            raise RuntimeError("the engine failed the request (finish_reason 'error')")
        with self.lock:  # what no partial response carried goes with the final ones
            entry = self.in_flight.get(request_id)
            unsent = entry.unsent if entry is not None else {}
            if entry is not None:
                entry.unsent = {}
        n_in = len(last.prompt_token_ids or []) if want_in else None
        total_out = sum(len(c.token_ids) for c in latest.values())
        # One response per choice, the last one final: the final response ends the Triton request.
        for i in sorted(latest):
            completion = latest[i]
            pending = unsent.get(i) or Unsent()
            reason = str(completion.finish_reason or "stop")
            if stream:
                text = pending.text + completion.text[sent[i]:]
                start = sent_tokens[i]
            else:
                text = completion.text if exclude_input else prompt + completion.text
                start = 0
            logprobs = None
            if top is not None:
                logprobs = pending.logprobs + logprob_entries(completion, start, top)
            final = i == max(latest)
            self._send(request_id, make_response(text, reason, n_in, total_out if want_out and final else None, i,
                                                 logprobs), final)

    # ---- streaming: a stream's new text is coalesced into one response per trip through the IPC queue ----

    def _count_input(self, request_id: str, count: int) -> None:
        with self.lock:
            entry = self.in_flight.get(request_id)
            if entry is not None:
                entry.num_input_tokens = count

    def _stream(self, request_id: str, index: int, text: str, tokens: int, logprobs) -> None:
        """Engine loop: add a choice's new text to what it has not sent yet; queue a flush unless one is queued (it
        will carry this text too) or, after the first response, fewer than stream_interval tokens wait."""
        with self.lock:
            entry = self.in_flight.get(request_id)
            if entry is None:
                return
            pending = entry.unsent.setdefault(index, Unsent())
            pending.text += text
            pending.tokens += tokens
            if logprobs:
                pending.logprobs += logprobs
            if entry.flush_queued or (entry.sent_partial and pending.tokens < self.stream_interval):
                return
            entry.flush_queued = True
        self.ipc.call(self._flush, request_id, entry)

    def _flush(self, request_id: str, entry: InFlight) -> None:
        """IPC thread: send everything the stream gained since its last response, one response per choice. Runs
        before any final response queued after it, so the client sees the text in order; the final ones carry what
        is left."""
        with self.lock:
            entry.flush_queued = False
            if self.in_flight.get(request_id) is not entry:
                return  # answered already (final, cancelled or failed)
            unsent = {i: p for i, p in entry.unsent.items() if p.text}
            entry.unsent = {i: p for i, p in entry.unsent.items() if not p.text}
            if not unsent:
                return
            entry.sent_partial = True
            num_input, entry.num_input_tokens = entry.num_input_tokens, None
        for index, pending in sorted(unsent.items()):
            logprobs = pending.logprobs if entry.logprobs else None
            entry.sender.send(make_response(pending.text, "", num_input, None, index, logprobs), flags=0)
            num_input = None

    # ---- engine health (engine loop; _engine_failed from any thread) ----

    async def _health_loop(self) -> None:
        """AsyncLLM.check_health (0.31.0) raises the engine's dead error once `errored`: polled, so a death with no
        request in flight is noticed too (upstream's vllm_backend asks on each execute, `_check_health`)."""
        while not self.stopping.is_set() and self.engine_error is None:
            try:
                await asyncio.wait_for(self.engine.check_health(), HEALTH_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - whatever the engine died of
                self._engine_failed(f"{type(exc).__name__}: {exc}")
                return
            await asyncio.sleep(HEALTH_POLL_S)

    def _end_all(self, reason: str) -> int:
        """End every request in flight with an UNAVAILABLE error and stop waiting for the engine. Returns how many."""
        with self.lock:
            entries = [(rid, e.task) for rid, e in self.in_flight.items()]
        ended = 0
        for request_id, task in entries:
            if self._send(request_id, error_response(reason, "UNAVAILABLE"), True):
                ended += 1
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
        message = (f"EngineFailed: the vLLM engine is dead ({reason}); {ended} request(s) in flight ended with an "
                   "error; stopping tritonserver so that the container restarts")
        self.ipc.call(self.logger.log_error, message)
        self.ipc.call(exit_server, reason)  # after the error responses and the log line, in order

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

    def _cancellation_loop(self) -> None:
        """Triton's request cancellation, checked off the engine loop (`is_cancelled()` is a blocking round trip to
        the server process, python_backend `pb_cancel.cc`): abort the engine request, which frees its slot or takes
        it out of the waiting queue, and answer once with our own CANCELLED response."""
        checked = threading.Event()
        checked.set()
        while not self.stopping.wait(CANCEL_POLL_S):
            if checked.is_set():  # one check at a time in the IPC queue, however slow the server process is
                checked.clear()
                self.ipc.call(self._check_cancelled, checked)

    def _check_cancelled(self, checked) -> None:
        """Runs on the IPC thread: `is_cancelled()` is asked in order with the sends, so never about a request whose
        final response was already sent (Triton has released it then)."""
        try:
            self.sweeps += 1
            with self.lock:
                entries = list(self.in_flight.items())
            # bounded: the requests asked longest ago (in arrival order among equals)
            entries = heapq.nsmallest(CANCEL_CHECKS_PER_SWEEP, entries, key=lambda ie: ie[1].last_cancel_check)
            for request_id, checked_entry in entries:
                checked_entry.last_cancel_check = self.sweeps
                try:
                    cancelled = checked_entry.request.is_cancelled()
                except Exception:  # noqa: BLE001 - the request is gone; its final response settles it
                    continue
                if cancelled:
                    with self.lock:
                        entry = self.in_flight.get(request_id)
                        task = entry.task if entry is not None else None
                    if self._send(request_id, cancelled_response(), True):
                        self.loop.call_soon_threadsafe(self._abort, request_id, task)
        finally:
            checked.set()

    def _abort(self, request_id: str, task) -> None:
        self.loop.create_task(self.engine.abort(request_id))
        if task is not None:
            task.cancel()

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
        self.health_task.cancel()
        # What outlived the drain bound is answered before the engine stops (its shutdown ends no stream itself).
        self._end_all("the model is unloading")
        engine = getattr(self, "engine", None)
        if engine is not None:
            # A dead engine may never finish shutting down: bounded, so the server can exit and be restarted.
            stopper = threading.Thread(target=engine.shutdown, name="vllm-shutdown", daemon=True)
            stopper.start()
            stopper.join(SHUTDOWN_WAIT_S)
        self._end_all("the model is unloading")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            # what initialize opened, closed once the tasks a stop left unstarted end (a task made just before the
            # stop never ran a step: dropped at close, its coroutine warns), as asyncio.run ends its own
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.wait(left, timeout=5))
            self.loop.close()
        self.cancel_thread.join(timeout=5)
        self.ipc.stop(10)
