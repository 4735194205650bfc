"""Triton Python model serving TensorRT-LLM through its LLM API; written by the llmbackend operator.

Shipped in the backend's ConfigMap as `<model>/1/model.py` beside `model.yaml` (the `LLM()` arguments) and runs
in the stock `tritonserver:<yy.mm>-trtllm-python-py3` image: it imports only the standard library, numpy, PyYAML,
`triton_python_backend_utils` and `tensorrt_llm`, never the operator's package.

Requests (Triton's generate endpoints map JSON keys to these tensors; all [1] except stop_words [-1]):
text_input (required); max_tokens, stream, temperature, top_p, top_k, seed, frequency_penalty, presence_penalty,
repetition_penalty, stop_words, exclude_input_in_output, return_num_input_tokens, return_num_output_tokens.
Responses: text_output (streaming: the new text of this response), finish_reason ("stop" | "length" |
"cancelled" on the final response, empty before), num_input_tokens / num_output_tokens when asked for.

The model is decoupled: execute() hands each request to the engine's asyncio loop and returns at once, so Triton's
own queue and compute counters see only that hand-off. The engine's real wait (for a free slot or free KV blocks)
is exported instead, as custom metrics on :8002 named by config.pbtxt parameters (the operator passes its
constants): per finished request, queue = first_scheduled - arrival and compute = last_token - first_scheduled
(the LLM API's per-request timing metrics, `return_perf_metrics: true` in model.yaml), as cumulative microsecond
counters, plus finished and failed request counters, and their sum (the request's time in the engine, seconds) as a
histogram with the buckets config.pbtxt gives; and gauges from the engine's iteration stats
(`enable_iter_perf_stats: true`) under the names the Gateway API Inference Extension reads.

Multi-GPU follows the LLM API's MPI model: on one node the LLM starts its worker ranks itself; across nodes the
pod command wraps tritonserver in `trtllm-llmapi-launch` under mpirun, so rank 0 serves and the others work.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

# How often the iteration-stats gauges are refreshed, seconds.
STATS_INTERVAL_S = 1.0

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
}
_DEFAULT_MAX_TOKENS = 16


class BadRequest(ValueError):
    """The request itself is invalid: answered with an error, the model keeps serving."""


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
        "stream": flag("stream", False),
        "exclude_input": flag("exclude_input_in_output", True),
        "num_input": flag("return_num_input_tokens", False),
        "num_output": flag("return_num_output_tokens", False),
    }


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


def gauges_from_stats(stats: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Iteration stats -> (request_type -> value, kv_cache_block_type -> value)."""
    batching = stats.get("inflightBatchingStats") or {}
    kv = stats.get("kvCacheStats") or {}
    requests = {
        "waiting": float(stats.get("numQueuedRequests", 0)) + float(batching.get("numPausedRequests", 0)),
        "scheduled": float(batching.get("numScheduledRequests", stats.get("numActiveRequests", 0))),
        "active": float(stats.get("numActiveRequests", 0)),
        "max": float(stats.get("maxNumActiveRequests", 0)),
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
                params["metric_engine_failures"], "Requests that ended with an error, cumulative", counter),
            "requests": pb_utils.MetricFamily(
                params["metric_request_gauge"], "Engine requests by state, from the iteration stats", gauge),
            "kv": pb_utils.MetricFamily(
                params["metric_kv_gauge"], "Engine KV-cache blocks, from the iteration stats", gauge),
        }
        self.queue = self.families["queue"].Metric(labels=labels)
        self.compute = self.families["compute"].Metric(labels=labels)
        self.finished = self.families["finished"].Metric(labels=labels)
        self.failed = self.families["failed"].Metric(labels=labels)
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


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        from tensorrt_llm import LLM
        from tensorrt_llm.llmapi import KvCacheConfig

        model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException("this model must be decoupled (model_transaction_policy)")
        params = {k: v["string_value"] for k, v in (model_config.get("parameters") or {}).items()}
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "model.yaml")) as f:
            llm_args = yaml.safe_load(f) or {}
        llm_args.pop("triton_config", None)  # for Triton's config, not for LLM()
        kv = llm_args.pop("kv_cache_config", None)
        if kv is not None:
            llm_args["kv_cache_config"] = KvCacheConfig(**kv)
        self.logger = pb_utils.Logger
        self.llm = LLM(**llm_args)
        self.metrics = _Metrics(params, {"model": args["model_name"], "version": args["model_version"]})
        self.in_flight = 0
        self.stopping = False
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="llmapi-loop", daemon=True)
        self.thread.start()
        self.stats_task = asyncio.run_coroutine_threadsafe(self._stats_loop(), self.loop)

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop)
        return None

    def finalize(self) -> None:
        self.stopping = True
        self.stats_task.cancel()
        self.llm.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    # ---- one request ----

    async def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self.in_flight += 1
        try:
            await self._generate(request, sender)
        except BadRequest as exc:
            self.metrics.failed.increment(1)
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"bad request: {exc}")), flags=final)
        except Exception as exc:  # noqa: BLE001 - any engine error ends this request only
            self.metrics.failed.increment(1)
            self.logger.log_error(f"request failed: {type(exc).__name__}: {exc}")
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}")),
                        flags=final)
        finally:
            self.in_flight -= 1

    async def _generate(self, request: Any, sender: Any) -> None:
        from tensorrt_llm import SamplingParams

        req = parse_request(request)
        try:
            sampling = SamplingParams(**req["sampling"])
            result = self.llm.generate_async(req["prompt"], sampling_params=sampling, streaming=req["stream"])
        except (TypeError, ValueError) as exc:  # the engine's own validation (e.g. prompt longer than max_seq_len)
            raise BadRequest(str(exc)) from None
        watcher = asyncio.ensure_future(self._abort_when_cancelled(request, result))
        sent_text = 0
        prefix = "" if req["exclude_input"] else req["prompt"]
        output = None
        try:
            async for item in result:
                output = item.outputs[0]
                done = bool(getattr(item, "finished", False)) or output.finish_reason is not None
                if request.is_cancelled():
                    continue  # the watcher aborts; the engine then finishes the stream as cancelled
                if req["stream"] and not done:
                    tensors = [_text_tensor("text_output", prefix + output.text[sent_text:]),
                               _text_tensor("finish_reason", "")]
                    sent_text, prefix = len(output.text), ""
                    sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
        finally:
            watcher.cancel()
        if output is None:
            raise RuntimeError("the engine returned no output")
        times = engine_times_us(output)
        if times is not None:
            self.metrics.request_finished(*times)
        self.metrics.finished.increment(1)
        if request.is_cancelled():
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        text = output.text[sent_text:] if req["stream"] else output.text
        tensors = [_text_tensor("text_output", prefix + text),
                   _text_tensor("finish_reason", str(output.finish_reason or "stop"))]
        if req["num_input"]:
            tensors.append(_int_tensor("num_input_tokens", len(getattr(result, "prompt_token_ids", None) or [])))
        if req["num_output"]:
            tensors.append(_int_tensor("num_output_tokens", len(output.token_ids)))
        sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def _abort_when_cancelled(self, request: Any, result: Any) -> None:
        """Triton's request cancellation (client closed the stream / cancelled the call) aborts the engine request,
        also while it still waits in the engine's queue and produces no output."""
        while True:
            await asyncio.sleep(0.05)
            if request.is_cancelled():
                result.abort()
                return

    # ---- gauges ----

    async def _stats_loop(self) -> None:
        while not self.stopping:
            latest = None
            try:
                async for stats in self.llm.get_stats_async(timeout=STATS_INTERVAL_S):
                    latest = json.loads(stats) if isinstance(stats, str) else stats
            except Exception as exc:  # noqa: BLE001 - stats are best effort; serving goes on
                self.logger.log_warn(f"iteration stats unavailable: {type(exc).__name__}: {exc}")
            requests, blocks = gauges_from_stats(latest) if latest is not None else ({}, {})
            if self.in_flight == 0:
                # Nothing in flight: the engine is idle (it reports no stats then, and its last iteration still
                # counts the requests it finished in it: kept, a replica would read busy between short requests).
                requests.update(waiting=0.0, scheduled=0.0, active=0.0)
            self.metrics.observe_stats(requests, blocks)
            await asyncio.sleep(STATS_INTERVAL_S)
