"""AsyncLLM (vLLM 0.31.0 V1 engine client): generate() / abort() over a simulated in-flight batching engine.

Simulation: `max_num_seqs` slots; every VLLM_STANDIN_STEP_S seconds each running request gets one token (the first
step is prefill + first token); waiting requests take free slots FIFO before each step. Output token i echoes the
prompt's words cyclically. Per step the stat loggers get SchedulerStats (waiting, running, KV usage) and
IterationStats whose finished_requests carry queued_time (scheduled - arrival) and inference_time (last token -
scheduled), as vLLM computes them.

Engine death on demand (env VLLM_STANDIN_KILL_FILE: when that file appears the simulated engine-core process "dies"),
as vLLM 0.31.0 reports it: every generate() in flight raises EngineDeadError (async_llm.py
`AsyncLLM._run_output_handler` -> output_processor.py `OutputProcessor.propagate_error`), `errored` turns True,
`check_health()` raises `dead_error`, and a new request raises EngineDeadError before it is queued
(`AsyncLLM.add_request`).

Like vLLM: an unknown engine argument is a TypeError (AsyncEngineArgs is a dataclass); a `quantization` argument that
contradicts the checkpoint's config.json quantization_config, or an AWQ/GPTQ method on a checkpoint without one, is a
ValueError at start; a prompt of max_model_len tokens or more is a VLLMValidationError from generate() (0.31.0
v1/engine/input_processor.py `InputProcessor._validate_model_input`: longer, or equal with no room to generate); an aborted request's
generator ends with finish_reason "abort"; cancelling the consumer aborts the request (AsyncLLM.generate's
`except (asyncio.CancelledError, GeneratorExit)`). Stat loggers' record() gets mm_cache_stats and engine_idx as
keywords, as vllm/v1/metrics/loggers.py StatLoggerManager.record does in 0.31.0.

Structured outputs (`SamplingParams.structured_outputs`, json or json_object; the default backend "auto"): checked
when the request is added (sampling_params.py `SamplingParams._validate_structured_outputs`: xgrammar's check
`validate_xgrammar_grammar`, then guidance as the fallback; a schema neither compiles is a VLLMValidationError with
guidance's reason, `validate_guidance_grammar`); the output is a text the grammar accepts (the xgrammar stand-in's),
finishing "stop" once complete (the grammar then allows only EOS), or "length" at max_tokens.

LoRA (engine args enable_lora, max_lora_rank, max_loras, max_cpu_loras; `generate(lora_request=LoRARequest(...))`):
a lora_request while LoRA is off is a VLLMValidationError (v1/engine/input_processor.py
`InputProcessor._validate_lora`); an adapter is loaded from lora_path on first use and kept by id in a cache of
max_cpu_loras (least recently used leave; lora/worker_manager.py `LRUCacheWorkerLoRAManager`), a rank above
max_lora_rank refused (lora/peft_helper.py `PEFTHelper.validate_legal`). The stand-in's "adapter weights": an answer
with an adapter begins with the adapter's name, so a test sees which adapter answered; RequestOutput.lora_request is
set.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import os
import threading
import time
import zlib
from collections.abc import AsyncGenerator, Iterable

from ...config import CacheConfig, SchedulerConfig, VllmConfig
from ...engine.arg_utils import AsyncEngineArgs
from ...exceptions import VLLMValidationError
from ...logprobs import Logprob
from ...outputs import CompletionOutput, RequestOutput
from ...sampling_params import SamplingParams
from ..metrics.stats import FinishedRequestStats, IterationStats, SchedulerStats
from .exceptions import EngineDeadError

BLOCK_SIZE = 16
PRE_QUANTIZED_ONLY = ("awq", "gptq", "awq_marlin", "gptq_marlin", "compressed-tensors", "modelopt")


def _checkpoint_quantization(model: str) -> str | None:
    path = model[len("file://"):] if model.startswith("file://") else model
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    method = (config.get("quantization_config") or {}).get("quant_method")
    return str(method).lower() if method else None


def check_quantization(engine_args: AsyncEngineArgs) -> str | None:
    """The quantization vLLM would use, or ValueError where vLLM refuses to start."""
    declared = _checkpoint_quantization(engine_args.model)
    asked = engine_args.quantization
    if declared and asked and asked != declared:
        raise ValueError(
            f"Quantization method specified in the model config ({declared}) does not match the quantization "
            f"method specified in the `quantization` argument ({asked}).")
    if asked in PRE_QUANTIZED_ONLY and not declared:
        raise ValueError(f"quantization {asked!r} needs a pre-quantized checkpoint (no quantization_config found)")
    return declared or asked


def _token_id(word: str) -> int:
    return zlib.crc32(word.encode()) % 32000


def _check_structured_outputs(params: SamplingParams) -> None:
    """sampling_params.py `SamplingParams._validate_structured_outputs` in "auto" mode (0.31.0): xgrammar's check
    (backend_xgrammar.py `validate_xgrammar_grammar`), then guidance's (backend_guidance.py
    `validate_guidance_grammar`, "Grammar error: ..."), which the stand-in models with the same converter."""
    so = params.structured_outputs
    if so is None or so.json is None:
        return
    import xgrammar

    try:
        schema = json.loads(so.json) if isinstance(so.json, str) else so.json
    except ValueError as exc:
        raise VLLMValidationError("Invalid JSON grammar specification.") from exc
    try:
        xgrammar.Grammar.from_json_schema(schema)
    except Exception as err:  # noqa: BLE001 - the converter's reason
        raise VLLMValidationError(f"Grammar error: {err}") from None


def _guided_pieces(so, words: list[str]) -> list[str] | None:
    if so is None or not (so.json is not None or so.json_object):
        return None  # regex, choice, grammar, structural tags: not simulated
    import xgrammar

    schema = None if so.json is None else json.loads(so.json) if isinstance(so.json, str) else so.json
    return xgrammar._pieces(xgrammar._accepted_text(schema, words))


class _Sequence:
    """One of a request's n sampled sequences (a child request, v1/engine/parallel_sampling.py): sequence i starts
    i words into the prompt, so the choices differ as sampled ones do."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.text = ""
        self.token_ids: list[int] = []
        self.logprobs: list[dict[int, Logprob]] | None = None
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None
        self.returned_finished = False

    def completion(self) -> CompletionOutput:
        logprobs = None if self.logprobs is None else list(self.logprobs)
        return CompletionOutput(self.index, self.text, list(self.token_ids), logprobs=logprobs,
                                finish_reason=self.finish_reason, stop_reason=self.stop_reason)


class _Request:
    def __init__(self, request_id: str, prompt: str, params: SamplingParams, max_model_len: int,
                 lora_request=None) -> None:
        self.id = request_id
        self.prompt = prompt
        self.words = prompt.split() or ["."]
        self.prompt_ids = [_token_id(w) for w in self.words]
        self.lora_request = lora_request
        if lora_request is not None:  # the adapter's "weights": its name leads the answer
            self.words = [lora_request.lora_name, *self.words]
        self.params = params
        # Like vLLM's scheduler: a request stops ("length") at max_model_len whatever max_tokens asks for.
        room = max(1, max_model_len - len(self.prompt_ids))
        self.max_tokens = min(params.max_tokens or room, room)
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.arrival = time.monotonic()
        self.scheduled: float | None = None
        self.sequences = [_Sequence(i) for i in range(params.n)]
        self.finish_reason: str | None = None  # of the request: set once every sequence finished
        self.guided = _guided_pieces(params.structured_outputs, self.words)

    @property
    def token_ids(self) -> list[int]:
        return [t for seq in self.sequences for t in seq.token_ids]

    def step(self) -> None:
        for seq in self.sequences:
            if seq.finish_reason is None:
                self._step_one(seq)
        if all(seq.finish_reason is not None for seq in self.sequences):
            self.finish_reason = self.sequences[0].finish_reason

    def _emit(self, seq: _Sequence, text: str) -> None:
        token = _token_id(text)
        position = len(seq.token_ids)
        seq.token_ids.append(token)
        k = self.params.logprobs
        if k is not None:
            # vllm/logprobs.py: per token {token id: Logprob(logprob, rank, decoded_token)}, the sampled token and the
            # k likeliest (here the sampled one is the likeliest, rank 1). The values are the stand-in's own.
            chosen = -round(0.1 + 0.05 * (position % 4), 4)
            ranked = {token: Logprob(chosen, 1, text)}
            space = " " if text.startswith(" ") else ""
            others = [space + w for w in dict.fromkeys(self.words) if space + w != text][: max(0, k - 1)]
            for rank, other in enumerate(others, 2):
                ranked.setdefault(_token_id(other), Logprob(chosen - (rank - 1), rank, other))
            seq.logprobs = (seq.logprobs or []) + [ranked]

    def _step_one(self, seq: _Sequence) -> None:
        if self.guided is not None:
            piece = self.guided[len(seq.token_ids)]
            self._emit(seq, piece)
            seq.text += piece
            if len(seq.token_ids) == len(self.guided):
                seq.finish_reason = "stop"  # the grammar is complete: only EOS is allowed
            elif len(seq.token_ids) >= self.max_tokens:
                seq.finish_reason = "length"
            return
        word = self.words[(len(seq.token_ids) + seq.index) % len(self.words)]
        self._emit(seq, " " + word)  # a token's text carries its leading space, as BPE tokens do
        seq.text += " " + word
        for stop in self.params.stop or []:
            at = seq.text.find(stop)
            if at >= 0:
                seq.text = seq.text[:at]
                seq.finish_reason, seq.stop_reason = "stop", stop
                return
        if len(seq.token_ids) >= self.max_tokens:
            seq.finish_reason = "length"

    def abort(self) -> None:
        for seq in self.sequences:
            if seq.finish_reason is None:
                seq.finish_reason = "abort"
        self.finish_reason = "abort"

    def output(self) -> RequestOutput:
        """The sequences that progressed, each cumulative; a finished one only once (parallel_sampling.py
        `ParentRequest.get_outputs`); finished once every sequence is."""
        completions = []
        for seq in self.sequences:
            if seq.returned_finished:
                continue
            seq.returned_finished = seq.finish_reason is not None
            completions.append(seq.completion())
        return RequestOutput(self.id, self.prompt, list(self.prompt_ids), None, completions,
                             self.finish_reason is not None, lora_request=self.lora_request)

    def tokens(self) -> int:
        return len(self.prompt_ids) + len(self.token_ids)


class AsyncLLM:
    def _start(self, engine_args: AsyncEngineArgs, stat_loggers) -> None:
        self._quantization = check_quantization(engine_args)
        self._max_num_seqs = engine_args.max_num_seqs or 256
        self._max_model_len = engine_args.max_model_len or 8192
        self._step_s = float(os.environ.get("VLLM_STANDIN_STEP_S", "0.01"))
        blocks = self._max_num_seqs * math.ceil(self._max_model_len / BLOCK_SIZE)
        self.vllm_config = VllmConfig(
            CacheConfig(BLOCK_SIZE, engine_args.gpu_memory_utilization, blocks, engine_args.kv_cache_dtype),
            SchedulerConfig(self._max_num_seqs, engine_args.max_num_batched_tokens or 8192, self._max_model_len))
        self._log_stats = not engine_args.disable_log_stats
        self._lora = ((engine_args.max_lora_rank, engine_args.max_cpu_loras or engine_args.max_loras)
                      if engine_args.enable_lora else None)
        self._loras: collections.OrderedDict[int, str] = collections.OrderedDict()
        self._stat_loggers = [factory(self.vllm_config, 0) for factory in (stat_loggers or [])]
        for logger in self._stat_loggers:
            logger.log_engine_initialized()
        self._waiting: collections.deque[_Request] = collections.deque()
        self._running: dict[str, _Request] = {}
        self._requests: dict[str, _Request] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._engine_dead = False  # upstream: engine_core.resources.engine_dead
        kill_file = os.environ.get("VLLM_STANDIN_KILL_FILE")
        if kill_file:
            loop = asyncio.get_running_loop()  # from_engine_args runs on the loop that drives generate()
            threading.Thread(target=self._watch_kill_file, args=(kill_file, loop), name="vllm-standin-kill",
                             daemon=True).start()

    def _watch_kill_file(self, path: str, loop: asyncio.AbstractEventLoop) -> None:
        while not os.path.exists(path):
            time.sleep(0.02)
        loop.call_soon_threadsafe(self._die)

    def _die(self) -> None:
        """The engine-core process died: async_llm.py `_run_output_handler` catches the client's EngineDeadError and
        output_processor.py `propagate_error` puts it into every request's queue; nothing more is produced."""
        self._engine_dead = True
        if self._task is not None:
            self._task.cancel()
        for request in list(self._requests.values()):
            request.queue.put_nowait(EngineDeadError())

    @property
    def errored(self) -> bool:
        # async_llm.py AsyncLLM.errored: the engine core is dead or the output handler stopped.
        return self._engine_dead

    @property
    def dead_error(self) -> BaseException:
        return EngineDeadError()

    async def check_health(self) -> None:
        # async_llm.py AsyncLLM.check_health (0.31.0): raises dead_error once the engine errored, else returns.
        if self.errored:
            raise self.dead_error

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs, start_engine_loop: bool = True, usage_context=None,
                         stat_loggers=None) -> AsyncLLM:
        # vllm/v1/engine/async_llm.py AsyncLLM.from_engine_args (0.31.0): the engine is built from the engine
        # arguments (upstream's __init__ takes the resolved VllmConfig, which the stand-in does not model).
        engine = cls.__new__(cls)
        engine._start(engine_args, stat_loggers)
        return engine

    def _ensure_loop(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _load_lora(self, lora_request) -> None:
        if self._lora is None:
            raise VLLMValidationError(f"Got lora_request {lora_request} but LoRA is not enabled!")
        if lora_request.lora_int_id not in self._loras:
            with open(os.path.join(lora_request.lora_path, "adapter_config.json"), encoding="utf-8") as f:
                rank = int(json.load(f).get("r", 0))
            if rank > self._lora[0]:
                raise ValueError(f"LoRA rank {rank} is greater than max_lora_rank {self._lora[0]}.")
            self._loras[lora_request.lora_int_id] = lora_request.lora_name
            while len(self._loras) > self._lora[1]:
                self._loras.popitem(last=False)
        self._loras.move_to_end(lora_request.lora_int_id)

    async def generate(self, prompt, sampling_params: SamplingParams, request_id: str, *, lora_request=None,
                       **kwargs) -> AsyncGenerator[RequestOutput, None]:
        text = prompt.get("prompt", "") if isinstance(prompt, dict) else str(prompt)
        if self.errored:  # async_llm.py AsyncLLM.add_request
            raise EngineDeadError()
        if request_id in self._requests:
            raise ValueError(f"Request id {request_id} already running.")
        _check_structured_outputs(sampling_params)  # InputProcessor -> SamplingParams.verify, before queueing
        if lora_request is not None:
            self._load_lora(lora_request)
        request = _Request(request_id, text, sampling_params, self._max_model_len, lora_request)
        if len(request.prompt_ids) > self._max_model_len:
            raise VLLMValidationError(f"The decoder prompt (length {len(request.prompt_ids)}) is longer than the "
                                      f"maximum model length of {self._max_model_len}.")
        if len(request.prompt_ids) == self._max_model_len:
            raise VLLMValidationError(f"The decoder prompt (length {len(request.prompt_ids)}) plus the number of "
                                      f"requested output tokens (at least 1) is longer than the maximum model length "
                                      f"of {self._max_model_len}.")
        self._ensure_loop()
        self._requests[request_id] = request
        self._waiting.append(request)
        assert self._wake is not None
        self._wake.set()
        # vllm/v1/engine/async_llm.py AsyncLLM.generate (0.31.0): yields outputs until one is finished; a consumer
        # that is cancelled or drops the generator aborts the request.
        try:
            while True:
                out = await request.queue.get()
                if isinstance(out, BaseException):  # output_processor.py RequestOutputCollector.get raises it
                    raise out
                yield out
                if out.finished:
                    return
        except (asyncio.CancelledError, GeneratorExit):
            self._abort(request_id)
            raise
        except EngineDeadError:  # dead: nothing to abort (AsyncLLM.generate)
            raise
        finally:
            self._requests.pop(request_id, None)

    async def abort(self, request_id: str | Iterable[str], internal: bool = False) -> None:
        # vllm/v1/engine/async_llm.py AsyncLLM.abort (0.31.0): takes the caller's request ids (the engine's own ids
        # carry a random suffix); a waiting request leaves the queue and its stream ends with finish_reason "abort",
        # with no FinishedRequestStats recorded (vllm/v1/engine/output_processor.py abort_requests).
        for rid in [request_id] if isinstance(request_id, str) else list(request_id):
            self._abort(rid)

    def _abort(self, request_id: str) -> None:
        # vllm/v1/engine/output_processor.py OutputProcessor.abort_requests (0.31.0): the request leaves the
        # scheduler (waiting or running) and its stream gets a final output with FinishReason.ABORT ("abort").
        request = self._requests.get(request_id)
        if request is None or request.finish_reason is not None:
            return
        self._running.pop(request_id, None)
        if request in self._waiting:
            self._waiting.remove(request)
        request.abort()
        request.queue.put_nowait(request.output())

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            if not self._waiting and not self._running:
                self._wake.clear()
                await self._wake.wait()
                continue
            now = time.monotonic()
            while self._waiting and len(self._running) < self._max_num_seqs:
                request = self._waiting.popleft()
                request.scheduled = now
                self._running[request.id] = request
            await asyncio.sleep(self._step_s)
            now = time.monotonic()
            iteration = IterationStats()
            for request in list(self._running.values()):
                if request.finish_reason is not None:  # aborted during the step
                    continue
                request.step()
                iteration.num_generation_tokens += 1
                if request.finish_reason is not None:
                    del self._running[request.id]
                    scheduled = request.scheduled or now
                    iteration.finished_requests.append(FinishedRequestStats(
                        finish_reason=request.finish_reason, e2e_latency=now - request.arrival,
                        num_prompt_tokens=len(request.prompt_ids), num_generation_tokens=len(request.token_ids),
                        max_tokens_param=request.params.max_tokens, queued_time=scheduled - request.arrival,
                        inference_time=now - scheduled))
                request.queue.put_nowait(request.output())
            blocks = sum(math.ceil(r.tokens() / BLOCK_SIZE) for r in self._running.values())
            total = self.vllm_config.cache_config.num_gpu_blocks or 1
            scheduler = SchedulerStats(len(self._running), len(self._waiting), min(1.0, blocks / total))
            if self._log_stats:
                for logger in self._stat_loggers:
                    logger.record(scheduler, iteration, mm_cache_stats=None, engine_idx=0)

    def shutdown(self, timeout: float | None = None) -> None:
        if self._task is not None:
            self._task.cancel()
