"""CPU stand-in for the subset of TensorRT-LLM's LLM API that the operator's Triton model uses.

Shapes and semantics follow TensorRT-LLM 1.2.1 (the release Triton's trtllm-python-py3 images carry since 26.04; see
docs/engines.md), read in NVIDIA/TensorRT-LLM's source. Each behaviour the serving model relies on names the upstream
file and function it follows. In short:

- `LLM(model=..., **llm_args)` rejects unknown arguments like the real pydantic TorchLlmArgs.
- `generate_async(prompt, sampling_params, streaming)` returns a result that is async-iterable (one item per engine
  iteration when streaming, only the final one otherwise) with `outputs[0].text`, `token_ids`, `finish_reason`
  ("stop" | "length" | "cancelled") and, with `return_perf_metrics`, `request_perf_metrics.timing_metrics`
  (`datetime.timedelta` on a steady clock); `abort()`.
- The executor: an intake queue (`submit`), drained into a waiting queue at the start of every iteration; waiting
  requests enter free slots (`max_batch_size`); each iteration gives every active request one token.
- Cancellation: an aborted request that still waits for a slot is dropped with NO response; an active one finishes
  with finish_reason "cancelled".
- Iteration stats (`enable_iter_perf_stats`): one record per iteration with work, none while idle;
  `numQueuedRequests` counts the intake queue only (requests waiting for a slot appear in no field);
  `get_stats_async(timeout)` returns one long-lived IterationResult whose iteration ends only after `timeout` seconds
  without a record, and stays ended until the next `generate_async`; before the first request it prints
  "Iteration statistics are not available yet" and yields nothing.

- Long requests: max_tokens is clamped to max_seq_len - prompt length (with a warning); a prompt that fills
  max_seq_len alone fails with RequestError raised while the result is iterated (executor/base_worker.py
  `_enqueue_request._deduce_max_tokens`; the worker's error travels back as an error response,
  executor/result.py `GenerationResultBase._handle_response`).
- Executor death on demand (env `TRTLLM_STANDIN_KILL_FILE`: when that file appears the worker "dies"): requests in
  flight get no further response, the worker's error waits in the executor's error queue and is raised by the next
  client call (`generate_async`, `get_stats_async`) or by `_executor._handle_background_error()`, which also shuts
  the executor down so `_executor.is_shutdown()` turns True (executor/executor.py `GenerationExecutor`
  `_handle_background_error`, `is_shutdown`; executor/proxy.py `mpi_done_callback`).

- Guided decoding (`SamplingParams(guided_decoding=GuidedDecodingParams(json=... | json_object=True))`, with
  `LLM(guided_decoding_backend="xgrammar")`): the output is a text the guide's grammar accepts, ending with
  finish_reason "stop" once the grammar is complete (the grammar matcher then allows only EOS:
  `_torch/pyexecutor/guided_decoder.py` `GuidedDecoder._build`), or cut at max_tokens ("length"). Without a
  backend the executor has no GuidedDecoder (`_torch/pyexecutor/py_executor_creator.py`) and the guide is not
  applied. The grammar comes from the xgrammar stand-in.
- LoRA (`LLM(lora_config={max_lora_rank, max_loras, max_cpu_loras, lora_target_modules})`,
  `generate_async(lora_request=LoRARequest(name, id, path))`): a request naming an adapter without lora_config fails;
  the adapter's adapter_config.json is read from lora_path the first time its id is asked for and kept by id in a
  host cache of max_cpu_loras adapters (least recently used leaves; tensorrt_llm/lora_manager.py and the PEFT cache,
  keyed by lora_int_id), its rank checked against max_lora_rank. The stand-in's "adapter weights": an answer with an
  adapter begins with the adapter's name, so a test sees which adapter answered.

What it simulates, nothing more: a fixed decode time per iteration (env `TRTLLM_STANDIN_ITERATION_S`, default
0.02 s). The "tokenizer" splits on whitespace; the "model" answers with the prompt's words, echoed in order. This is
not TensorRT-LLM's code.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import itertools
import json
import math
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

__version__ = "1.2.1+cpu-standin"
FOLLOWS_TENSORRT_LLM = "1.2.1"

_TOKENS_PER_BLOCK = 32


class RequestError(RuntimeError):
    """executor/utils.py RequestError: the executor refused or failed one request (the engine lives on)."""


def _now() -> datetime.timedelta:
    return datetime.timedelta(seconds=time.monotonic())


@dataclasses.dataclass
class KvCacheConfig:
    free_gpu_memory_fraction: float | None = None
    enable_block_reuse: bool = True
    dtype: str = "auto"
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.free_gpu_memory_fraction is not None and not 0 < self.free_gpu_memory_fraction <= 1:
            raise ValueError(f"free_gpu_memory_fraction must be in (0, 1], got {self.free_gpu_memory_fraction}")


@dataclasses.dataclass
class CudaGraphConfig:
    """tensorrt_llm/llmapi/llm_args.py, CudaGraphConfig and its validate_cuda_graph_config (read in the source index's
    stored 1.x revisions; the 1.2.1 tag itself is not readable here, docs/engines.md): a strict model (unknown fields
    are an error); max_batch_size is non-negative; with batch_sizes given, max_batch_size is max(batch_sizes) or must
    equal it."""

    batch_sizes: list[int] | None = None
    max_batch_size: int = 0
    enable_padding: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_batch_size, int) or isinstance(self.max_batch_size, bool) or self.max_batch_size < 0:
            raise ValueError(f"cuda_graph_config.max_batch_size must be non-negative, got {self.max_batch_size!r}")
        if not isinstance(self.enable_padding, bool):
            raise ValueError(f"cuda_graph_config.enable_padding must be a bool, got {self.enable_padding!r}")
        if self.batch_sizes:
            derived = max(self.batch_sizes)
            if self.max_batch_size not in (0, derived):
                raise ValueError("CudaGraphConfig.max_batch_size is incompatible with CudaGraphConfig.batch_sizes")
            self.max_batch_size = derived


@dataclasses.dataclass(kw_only=True)
class GuidedDecodingParams:
    """sampling_params.py GuidedDecodingParams: one guide per request (`_validate`)."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False
    structural_tag: str | None = None

    def _validate(self) -> None:
        guides = sum(bool(getattr(self, f.name)) for f in dataclasses.fields(self))
        if guides > 1:
            raise ValueError(f"Only one guide can be used for a request, but got {guides}.")


@dataclasses.dataclass
class SamplingParams:
    max_tokens: int = 32
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    stop: str | list[str] | None = None
    end_id: int | None = None
    return_perf_metrics: bool = False
    guided_decoding: GuidedDecodingParams | None = None
    n: int = 1
    logprobs: int | None = None
    skip_special_tokens: bool = True  # the stand-in's vocabulary has no special tokens

    def __post_init__(self) -> None:
        if self.max_tokens is None or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.guided_decoding is not None:
            self.guided_decoding._validate()
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclasses.dataclass
class TimingMetrics:
    arrival_time: datetime.timedelta = datetime.timedelta(0)
    first_scheduled_time: datetime.timedelta = datetime.timedelta(0)
    first_token_time: datetime.timedelta = datetime.timedelta(0)
    last_token_time: datetime.timedelta = datetime.timedelta(0)


@dataclasses.dataclass
class KvCacheMetrics:
    num_total_allocated_blocks: int = 0
    num_new_allocated_blocks: int = 0
    num_reused_blocks: int = 0
    num_missed_blocks: int = 0
    kv_cache_hit_rate: float = 0.0


@dataclasses.dataclass
class RequestPerfMetrics:
    timing_metrics: TimingMetrics = dataclasses.field(default_factory=TimingMetrics)
    kv_cache_metrics: KvCacheMetrics = dataclasses.field(default_factory=KvCacheMetrics)


class Logprob(NamedTuple):
    """executor/result.py Logprob: a token's log probability and its rank among the vocabulary."""

    logprob: float
    rank: int | None = None


@dataclasses.dataclass
class CompletionOutput:
    index: int = 0
    text: str = ""
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str | None = None
    request_perf_metrics: RequestPerfMetrics | None = None
    _last_text_len: int = 0
    _last_token_len: int = 0

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len:]

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_len:]


class RequestOutput:
    """What generate_async returns: async-iterable, `abort()`, `finished`, `outputs`, `prompt_token_ids`."""

    def __init__(self, engine: _Engine, request_id: int, prompt: str, prompt_token_ids: list[int],
                 params: SamplingParams, streaming: bool, perf: bool, stamp_arrival: bool,
                 guided: bool = False) -> None:
        self._engine = engine
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.streaming = streaming
        self._params = params
        self._stop = [params.stop] if isinstance(params.stop, str) else list(params.stop or [])
        self._words = prompt.split() or ["..."]
        # Under a guide the "model" emits a text its grammar accepts, one piece per token, then stops.
        self._guided = _guided_pieces(params.guided_decoding, self._words) if guided else None
        # SamplingParams.n sequences (n > 1: one CompletionOutput each, `index` 0..n-1)
        # The engine thread writes `_live`; a consumer sees `outputs`, copied from it when the iterator hands out the
        # next item. Upstream the consumer's own loop applies each response (executor/result.py
        # GenerationResult._aresult_step -> _handle_response), so an item never changes while the consumer reads it.
        self._live = [CompletionOutput(index=i, request_perf_metrics=RequestPerfMetrics() if perf and i == 0 else None)
                      for i in range(params.n)]
        self.outputs = [dataclasses.replace(out, token_ids=[]) for out in self._live]
        self._lora_name: str | None = None  # the stand-in's adapter "weights": its name leads the answer
        self.finished = False
        # tensorrt_llm/llmapi/llm.py LLM.generate_async (1.2.1): arrival_time is stamped at the call only when the LLM
        # was built with return_perf_metrics=True; otherwise the executor stamps it when the request leaves the
        # waiting queue (see _Engine._admit), so queue time then misses the wait for a slot.
        self._timing = TimingMetrics(arrival_time=_now() if stamp_arrival else datetime.timedelta(0))
        self._pending = 0            # snapshots not yet consumed by the iterator
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # -- engine side (engine thread) --

    def _step(self) -> None:
        now = _now()
        with self._cond:  # a snapshot (_snapshot) never sees half a token
            if not self._live[0].token_ids:
                self._timing.first_token_time = now
            for out in self._live:
                if out.finish_reason is None:
                    self._step_one(out, now)
            if all(out.finish_reason is not None for out in self._live):
                self._finish(None, now)
        self._publish()

    def _step_one(self, out: CompletionOutput, now: datetime.timedelta) -> None:
        """One token of one sequence. Sequence i of n starts i words into the prompt (the choices differ, as
        sampled ones do)."""
        position = len(out.token_ids)
        if self._guided is not None:
            piece = self._guided[position]
            self._emit(out, piece, position)
            out.text += piece
            if len(out.token_ids) == len(self._guided):
                out.finish_reason = "stop"  # the grammar is complete: only EOS is allowed
            elif len(out.token_ids) >= self._params.max_tokens:
                out.finish_reason = "length"
            return
        words = [self._lora_name, *self._words] if self._lora_name else self._words
        word = words[(position + out.index) % len(words)]
        piece = (" " + word) if out.text else word  # a token's text carries its leading space, as BPE tokens do
        self._emit(out, piece, position)
        out.text += piece
        if any(s and out.text.endswith(s) for s in self._stop):
            out.text = out.text[: -len(next(s for s in self._stop if s and out.text.endswith(s)))].rstrip()
            out.finish_reason = "stop"
        elif len(out.token_ids) >= self._params.max_tokens:
            out.finish_reason = "length"

    def _emit(self, out: CompletionOutput, text: str, position: int) -> None:
        token = self._engine.vocab(text)
        out.token_ids.append(token)
        k = self._params.logprobs
        if k is not None:
            # executor/result.py TokenLogprobs: per token {token id: Logprob(logprob, rank)} for the k likeliest,
            # the sampled one first here (rank 1). The values are the stand-in's own.
            chosen = -round(0.1 + 0.05 * (position % 4), 4)
            space = " " if text.startswith(" ") else ""
            others = [space + w for w in dict.fromkeys(self._words) if space + w != text][: max(0, k - 1)]
            ranked = {token: Logprob(chosen, 1)}
            for rank, other in enumerate(others, 2):
                ranked.setdefault(self._engine.vocab(other), Logprob(chosen - (rank - 1), rank))
            out.logprobs = (out.logprobs or []) + [ranked]

    def _finish(self, reason: str | None, now: datetime.timedelta) -> None:
        """The request ends: every sequence still running ends with `reason` (cancelled, shut down)."""
        with self._cond:  # re-entrant: _step holds it too
            for out in self._live:
                if out.finish_reason is None:
                    out.finish_reason = reason
            self._timing.last_token_time = now
            if self._live[0].request_perf_metrics is not None:
                self._live[0].request_perf_metrics.timing_metrics = dataclasses.replace(self._timing)
            self.finished = True

    def _publish(self) -> None:
        with self._cond:
            self._pending += 1
            self._cond.notify_all()
            waiters = list(self._waiters)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    # -- client side --

    def abort(self) -> None:
        self._engine.abort(self)

    def result(self, timeout: float | None = None) -> RequestOutput:
        with self._cond:
            if not self._cond.wait_for(lambda: self.finished, timeout):
                raise TimeoutError(f"request {self.request_id} not finished after {timeout}s")
            self._snapshot()
        return self

    def _snapshot(self) -> bool:
        """Under _cond: `outputs` becomes a copy of what the engine has written; whether the request is finished.
        text_diff / token_ids_diff read from where the previous item ended."""
        self.outputs = [dataclasses.replace(live, token_ids=list(live.token_ids),
                                            logprobs=None if live.logprobs is None else list(live.logprobs),
                                            _last_text_len=len(seen.text), _last_token_len=len(seen.token_ids))
                        for live, seen in zip(self._live, self.outputs, strict=True)]
        return self.finished

    def __aiter__(self) -> AsyncIterator[RequestOutput]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._cond:
            self._waiters.append((loop, event))
        try:
            while True:
                with self._cond:
                    ready, done = self._pending > 0, self.finished
                    self._pending = 0
                    event.clear()
                    if done or (ready and self.streaming):
                        self._snapshot()
                if done or (ready and self.streaming):
                    yield self
                    if done:
                        return
                    continue
                await event.wait()
        finally:
            with self._cond:
                self._waiters.remove((loop, event))


def _guided_pieces(guide: GuidedDecodingParams | None, words: list[str]) -> list[str] | None:
    if guide is None or not (guide.json or guide.json_object):
        return None  # regex, grammar, structural tags: not simulated
    import xgrammar  # the grammar backend, as upstream's XGrammarMatcherFactory

    schema = None
    if guide.json:
        schema = guide.json if isinstance(guide.json, dict) else json.loads(guide.json)
    return xgrammar._pieces(xgrammar._accepted_text(schema, words))


class IterationResult:
    """tensorrt_llm/executor/result.py IterationResult (1.2.1): the executor's one long-lived stats stream.

    `__anext__` awaits the next record for up to `timeout` seconds and ends the iteration (marks itself done) only
    after `timeout` without one; a done stream stays done until `mark_undone()`, which the executor calls on every
    new request (executor.py GenerationExecutor._maybe_initialize_iteration_results). Records travel as JSON text
    and are yielded as dicts (json.loads), as upstream."""

    def __init__(self) -> None:
        self._done = False
        self._timeout: float = 2
        self._items: collections.deque[str] = collections.deque(maxlen=1000)
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def set_timeout(self, timeout: float) -> None:
        self._timeout = timeout

    def mark_undone(self) -> None:
        self._done = False

    def _put(self, record: dict[str, Any]) -> None:  # engine thread
        with self._cond:
            self._items.append(json.dumps(record))
            self._cond.notify_all()
            waiters = list(self._waiters)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def get_results(self) -> list[dict[str, Any]]:
        """result.py IterationResult.get_results: every record until `timeout` passes without one."""
        out = []
        while not self._done:
            with self._cond:
                if not self._cond.wait_for(lambda: bool(self._items), self._timeout):
                    self._done = True
                    break
                out.append(json.loads(self._items.popleft()))
        return out

    def __aiter__(self) -> IterationResult:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._done:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        entry = (loop, event)
        deadline = loop.time() + self._timeout
        with self._cond:
            self._waiters.append(entry)
        try:
            while True:
                with self._cond:
                    if self._items:
                        return json.loads(self._items.popleft())
                    event.clear()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    self._done = True
                    raise StopAsyncIteration
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except TimeoutError:
                    pass
        finally:
            with self._cond:
                self._waiters.remove(entry)


class _FailedResult:
    """A result whose request the executor refused: iterating it raises the error (result.py, an error response)."""

    def __init__(self, error: BaseException) -> None:
        self._error = error
        self.outputs = [CompletionOutput()]
        self.finished = False
        self.prompt_token_ids: list[int] = []

    def abort(self) -> None:
        pass

    def __aiter__(self) -> _FailedResult:
        return self

    async def __anext__(self) -> RequestOutput:
        raise self._error


async def _empty_async_iterable() -> AsyncIterator[dict[str, Any]]:
    """executor.py empty_async_iterable: what get_stats_async returns before the first request."""
    if False:  # noqa: SIM108 - keeps this an async generator, as upstream
        yield {}


class _Engine:
    """The PyTorch executor, reduced to its request flow: one thread, fixed slots, fixed iteration time."""

    def __init__(self, slots: int, max_seq_len: int, iteration_s: float, stats: bool,
                 kill_file: str | None = None) -> None:
        self.kill_file = kill_file
        self.died: BaseException | None = None  # the worker's error, once it died
        self.slots = slots
        self.max_seq_len = max_seq_len
        self.iteration_s = iteration_s
        self.max_blocks = slots * math.ceil(max_seq_len / _TOKENS_PER_BLOCK)
        self.intake: collections.deque[RequestOutput] = collections.deque()   # executor_request_queue
        self.waiting: collections.deque[RequestOutput] = collections.deque()  # waiting for a slot
        self.running: list[RequestOutput] = []                                # active requests
        self.cancel_ids: set[int] = set()
        self.words: dict[int, str] = {}  # the "vocabulary": token id -> text
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopped = False
        self.iter = 0
        self.stats_enabled = stats
        self.stats_sink: IterationResult | None = None
        self.thread = threading.Thread(target=self._run, name="trtllm-standin-engine", daemon=True)
        self.thread.start()

    def vocab(self, text: str) -> int:
        token = sum(text.encode()) % 32000
        self.words[token] = text
        return token

    def submit(self, req: RequestOutput) -> None:
        with self.lock:
            if self.died is not None:
                raise self.died
            if self.stopped:
                raise RuntimeError("the LLM has been shut down")
            self.intake.append(req)
        self.wake.set()

    def abort(self, req: RequestOutput) -> None:
        # executor_request_queue.py enqueue_cancel_request: a cancel travels through the intake queue too.
        with self.lock:
            if not req.finished:
                self.cancel_ids.add(req.request_id)
        self.wake.set()

    def _blocks(self, req: RequestOutput) -> int:
        return math.ceil((len(req.prompt_token_ids) + len(req._live[0].token_ids)) / _TOKENS_PER_BLOCK)

    def _killed(self) -> bool:
        if self.kill_file is None or not os.path.exists(self.kill_file):
            return False
        # The worker process is gone: nothing more is answered (requests in flight see no response at all).
        with self.lock:
            self.died = RuntimeError("executor worker died (stand-in kill file)")
            self.stopped = True
        return True

    def _run(self) -> None:
        while True:
            if self._killed():
                return
            with self.lock:
                if self.stopped:
                    cancelled = list(self.intake) + list(self.waiting) + self.running
                    self.intake.clear()
                    self.waiting.clear()
                    self.running.clear()
                    break
                idle = not self.intake and not self.waiting and not self.running and not self.cancel_ids
            if idle:
                self.wake.wait(0.05 if self.kill_file else 0.5)
                self.wake.clear()
                continue
            self._iteration()
            time.sleep(self.iteration_s)
        for req in cancelled:
            req._finish("cancelled", _now())
            req._publish()

    def _admit(self, now: datetime.timedelta) -> None:
        """py_executor.py PyExecutor._fetch_new_requests: waiting requests take free slots, in order."""
        while self.waiting and len(self.running) < self.slots:
            req = self.waiting.popleft()
            if req._timing.arrival_time == datetime.timedelta(0):
                req._timing.arrival_time = now  # no LLM-level return_perf_metrics: stamped on leaving the queue
            req._timing.first_scheduled_time = now
            self.running.append(req)

    def _iteration(self) -> None:
        now = _now()
        with self.lock:
            # py_executor.py PyExecutor._fetch_and_process_requests: the intake queue is drained every iteration.
            self.waiting.extend(self.intake)
            self.intake.clear()
            cancel, self.cancel_ids = self.cancel_ids, set()
            # py_executor.py PyExecutor._handle_canceled_requests: a cancelled request that still waits for a slot
            # leaves the waiting queue (update_waiting_queue) with NO response; active ones finish as CANCELLED.
            self.waiting = collections.deque(r for r in self.waiting if r.request_id not in cancel)
            cancelled_active = [r for r in self.running if r.request_id in cancel]
            self.running = [r for r in self.running if r.request_id not in cancel]
            self._admit(now)
            scheduled = list(self.running)
        for req in cancelled_active:
            req._finish("cancelled", now)
            req._publish()
        for req in scheduled:
            req._step()
        with self.lock:
            self.running = [r for r in self.running if not r.finished]
            used = sum(self._blocks(r) for r in self.running)
            self.iter += 1
            sink = self.stats_sink if self.stats_enabled else None
            # py_executor.py PyExecutor._get_init_iter_stats / _update_iter_stats: one record per iteration with
            # work. numQueuedRequests = executor_request_queue.get_request_queue_size(): the intake queue (requests
            # that arrived during this iteration), NOT the requests waiting for a slot.
            record = {
                "iter": self.iter,
                "iterLatencyMS": self.iteration_s * 1000.0,
                "numActiveRequests": len(scheduled) + len(cancelled_active),
                "numQueuedRequests": len(self.intake),
                "numCompletedRequests": sum(1 for r in scheduled if r.finished),
                "maxNumActiveRequests": self.slots,
                "inflightBatchingStats": {
                    "numScheduledRequests": len(scheduled),
                    "numContextRequests": sum(1 for r in scheduled if len(r._live[0].token_ids) == 1),
                    "numGenRequests": sum(1 for r in scheduled if len(r._live[0].token_ids) > 1),
                    "numPausedRequests": 0,
                },
                "kvCacheStats": {
                    "maxNumBlocks": self.max_blocks,
                    "freeNumBlocks": self.max_blocks - used,
                    "usedNumBlocks": used,
                    "tokensPerBlock": _TOKENS_PER_BLOCK,
                    "allocTotalBlocks": used,
                },
            }
        if sink is not None and (scheduled or cancelled_active):
            sink._put(record)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
        self.wake.set()
        self.thread.join(5)


class _Tokenizer:
    """`LLM.tokenizer` (llmapi/tokenizer.py TransformersTokenizer), reduced to `decode`: a token id's text."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine

    def decode(self, token_ids: list[int], **_: Any) -> str:
        return " ".join(self._engine.words.get(t, "") for t in token_ids)


class _Executor:
    """executor/executor.py GenerationExecutor, reduced to its error path: a worker's error waits in `_error_queue`
    until a client call runs `_handle_background_error`, which shuts the executor down and raises it."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine
        self._shut_down = False

    def _handle_background_error(self) -> None:
        error = self._engine.died
        if error is not None and not self._shut_down:
            self._shut_down = True
            raise error

    def is_shutdown(self) -> bool:
        return self._shut_down

    def shutdown(self) -> None:
        self._shut_down = True
        self._engine.stop()


_NO_STATS_YET = ("Iteration statistics are not available yet. To collect runtime statistics, please call "
                 "get_stats_async() in async coroutine or the /metrics endpoint (if you're using trtllm-serve) AFTER "
                 "prompts have been submitted.")

_LLM_ARGS = {
    "tokenizer", "backend", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size",
    "moe_tensor_parallel_size", "kv_cache_config", "max_batch_size", "max_num_tokens", "max_seq_len",
    "max_input_len", "enable_chunked_prefill", "return_perf_metrics", "enable_iter_perf_stats", "scheduler_config",
    "cuda_graph_config", "trust_remote_code", "skip_tokenizer_init", "guided_decoding_backend", "lora_config",
}


class LLM:
    """`LLM(model, **llm_args)`; `model` is a checkpoint directory (must hold config.json) or a hub id."""

    _ids = itertools.count(1)

    def __init__(self, model: str, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _LLM_ARGS)
        if unknown:
            raise TypeError(f"LLM() got unexpected arguments: {', '.join(unknown)}")
        path = Path(model)
        # The stand-in loads no weights; it only rejects a directory that is not a checkpoint. (A path absent
        # here, like the pod's /models, is accepted: on this machine it names the simulated checkpoint.)
        if path.is_dir() and not (path / "config.json").is_file():
            raise ValueError(f"{model}: no config.json; not a Hugging Face checkpoint directory")
        kv = kwargs.get("kv_cache_config")
        if isinstance(kv, dict):
            kv = KvCacheConfig(**kv)
        if kv is not None and not isinstance(kv, KvCacheConfig):
            raise TypeError("kv_cache_config must be a KvCacheConfig")
        graphs = kwargs.get("cuda_graph_config")
        if isinstance(graphs, dict):  # pydantic builds the sub-config from a dict (model.yaml gives one)
            graphs = CudaGraphConfig(**graphs)
        if graphs is not None and not isinstance(graphs, CudaGraphConfig):
            raise TypeError("cuda_graph_config must be a CudaGraphConfig")
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_batch_size", "max_num_tokens", "max_seq_len"):
            value = kwargs.get(key)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{key} must be a positive int, got {value!r}")
        lora = kwargs.get("lora_config")
        if lora is not None and not isinstance(lora, dict):
            lora = {k: getattr(lora, k) for k in ("max_lora_rank", "max_loras", "max_cpu_loras") if hasattr(lora, k)}
        self._lora = lora  # tensorrt_llm/lora_helper.py LoraConfig: max_lora_rank 64, max_loras/max_cpu_loras 4
        self._loras: collections.OrderedDict[int, dict[str, Any]] = collections.OrderedDict()
        self._model = model
        self._args = dict(kwargs, kv_cache_config=kv, cuda_graph_config=graphs)
        self._max_seq_len = int(kwargs.get("max_seq_len") or 2048)
        self._perf = bool(kwargs.get("return_perf_metrics"))
        self._stats: IterationResult | None = None
        self._engine = _Engine(
            slots=int(kwargs.get("max_batch_size") or 8),
            max_seq_len=self._max_seq_len,
            iteration_s=float(os.environ.get("TRTLLM_STANDIN_ITERATION_S", "0.02")),
            stats=bool(kwargs.get("enable_iter_perf_stats")),
            kill_file=os.environ.get("TRTLLM_STANDIN_KILL_FILE") or None,
        )
        self._executor = _Executor(self._engine)
        self.tokenizer = _Tokenizer(self._engine)

    def _load_lora(self, lora_request: Any) -> str:
        """The adapter's name once its adapter_config.json is in the host cache (read on first use, by id)."""
        if self._lora is None:
            raise ValueError("a lora_request needs the LLM built with lora_config")
        adapter_id = int(lora_request.lora_int_id)
        if adapter_id not in self._loras:
            with open(os.path.join(lora_request.lora_path, "adapter_config.json"), encoding="utf-8") as f:
                config = json.load(f)
            rank, max_rank = int(config.get("r", 0)), int(self._lora.get("max_lora_rank") or 64)
            if rank > max_rank:
                raise ValueError(f"LoRA rank {rank} of {lora_request.lora_name} exceeds max_lora_rank {max_rank}")
            self._loras[adapter_id] = {"name": lora_request.lora_name, "rank": rank}
            while len(self._loras) > int(self._lora.get("max_cpu_loras") or 4):
                self._loras.popitem(last=False)
        self._loras.move_to_end(adapter_id)
        return str(self._loras[adapter_id]["name"])

    def generate_async(self, inputs: str, sampling_params: SamplingParams | None = None,
                       lora_request: Any = None, streaming: bool = False, **_: Any) -> RequestOutput:
        if not isinstance(inputs, str):
            raise TypeError("the stand-in accepts text prompts only")
        lora_name = self._load_lora(lora_request) if lora_request is not None else None
        params = sampling_params or SamplingParams()
        prompt_ids = [sum(w.encode()) % 32000 for w in inputs.split()]
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        self._executor._handle_background_error()  # executor.py: every client call surfaces a worker's error
        if self._executor.is_shutdown():
            raise RuntimeError("the LLM has been shut down")
        # base_worker.py _deduce_max_tokens: no room left after the prompt fails the request (raised while the
        # result is iterated); more max_tokens than room is clamped with a warning.
        room = self._max_seq_len - len(prompt_ids)
        if room <= 0:
            return _FailedResult(RequestError(
                f"`default_max_tokens` ({room}) must be greater than 0: max_seq_len ({self._max_seq_len}) - prompt "
                f"length ({len(prompt_ids)})"))
        if params.max_tokens > room:
            print(f"User-specified `max_tokens` ({params.max_tokens}) is greater than deduced `default_max_tokens` "
                  f"({room}), using default_max_tokens instead.", flush=True)
            params = dataclasses.replace(params, max_tokens=room)
        # executor.py GenerationExecutor._maybe_initialize_iteration_results: the stats stream exists from the
        # first request on; every new request marks it undone (more records expected).
        if self._stats is None:
            self._stats = IterationResult()
            self._engine.stats_sink = self._stats
        else:
            self._stats.mark_undone()
        req = RequestOutput(self._engine, next(self._ids), inputs, prompt_ids, params, streaming,
                            self._perf or params.return_perf_metrics, stamp_arrival=self._perf,
                            guided=self._args.get("guided_decoding_backend") is not None)
        req._lora_name = lora_name
        self._engine.submit(req)
        return req

    def get_stats_async(self, timeout: float = 2) -> IterationResult | AsyncIterator[dict[str, Any]]:
        """llm.py LLM.get_stats_async -> executor.py GenerationExecutor.aget_stats (1.2.1)."""
        self._executor._handle_background_error()
        if self._stats is None:
            print(_NO_STATS_YET, flush=True)  # upstream: print_colored(..., "yellow") on stdout
            return _empty_async_iterable()
        self._stats.set_timeout(timeout)
        return self._stats

    def get_stats(self, timeout: float = 2) -> list[dict[str, Any]]:
        """executor.py GenerationExecutor.get_stats: blocks until `timeout` passes without a record."""
        if self._stats is None:
            print(_NO_STATS_YET, flush=True)
            return []
        self._stats.set_timeout(timeout)
        return self._stats.get_results()

    def shutdown(self) -> None:
        self._executor.shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


__all__ = ["LLM", "SamplingParams", "GuidedDecodingParams", "KvCacheConfig", "CudaGraphConfig", "RequestOutput", "CompletionOutput", "RequestPerfMetrics",
           "IterationResult"]
