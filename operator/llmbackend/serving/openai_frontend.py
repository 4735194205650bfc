"""OpenAI-compatible HTTP frontend for one Triton-served LLM (/v1/chat/completions, /v1/completions, /v1/models).

Runs as the `openai` container of each serving pod (same image as Triton), shipped as this one file in the
backend's ConfigMap, and talks to Triton on localhost through its generate extension
(`/v2/models/<m>/generate_stream`, server-sent events). Standard library only, plus `jinja2` for the
checkpoint's chat template (the Triton TensorRT-LLM and vLLM images ship it with transformers).
It cannot import the operator's package: it is copied into the pod with its one helper, http_body.py (request
bodies: framing checked before reading, a cap, and a budget of body bytes in flight; request heads: bytes and a
deadline; connections: a cap. The container's memory limit covers them all, render/openai.py).

Model interface (the serving models of this project implement it): input `text_input` and optional sampling
inputs; outputs `text_output` (the new text of each streamed response), `finish_reason`, `num_input_tokens`,
`num_output_tokens` (taken as running totals: the largest value seen is the count; the serving models send
`num_input_tokens` with their first streamed response too, which is when the context limit is checked).

What clients depend on, as OpenAI's API does it (docs/openai.md): a field this server does not implement is a 400
naming it, never silently dropped (USED_FIELDS, IGNORED_FIELDS, REFUSED_FIELDS); no `max_tokens` means up to the
context limit (`--max-seq-len`); a request over that limit is a 400 with code `context_length_exceeded`; every
answer carries an `x-request-id`; every request body is read, or the connection closed, whatever the answer (no
poisoned keep-alive); a client that disconnects from a non-streaming request cancels its engine request.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import re
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

try:
    from . import http_body  # imported as part of the package (tests)
except ImportError:  # python3 openai-frontend.py in the pod: its sibling in the same ConfigMap folder
    import http_body  # type: ignore[no-redef]

log = logging.getLogger("openai-frontend")

BODY_TIMEOUT_S = 60.0  # the whole body must arrive within this
BODY_WAIT_S = 10.0     # a request waits this long for room in the body budget, then 503 with Retry-After
MAX_STOP_SEQUENCES = 4
DISCONNECT_POLL_S = 0.2  # how often a non-streaming request checks that its client is still connected
GENERATE_ROUTES = ("/v1/completions", "/v1/chat/completions")
# A client's x-request-id is echoed when it looks like an id (no spaces or control characters, not too long).
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


class OpenAIError(Exception):
    """An error the client sees as OpenAI's `{"error": {...}}` body."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _bad(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


# ---- request validation (pure) ----


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _bad(f"'{name}' must be a number between {low} and {high}", name)
    return float(value)


def _integer(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(f"'{name}' must be an integer between {low} and {high}", name)
    return value


# What this server does with each field of OpenAI's request bodies (chat/completions and completions, as the
# official `openai` client 3.x types them), so that nothing a client asks for is dropped without a word:
# "used" fields shape the answer; "ignored" ones change nothing a client can see in the answer (bookkeeping of
# OpenAI's own platform, hints); "refused" ones get a 400 naming the field unless their value asks for nothing (the
# default: null, false, [], n=1, ...). A field in none of these gets OpenAI's own answer, "Unrecognized request
# argument", unless it is null. docs/openai.md lists the same policy.
USED_FIELDS = {
    "both": {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p",
             "frequency_penalty", "presence_penalty", "seed", "stop",
             "top_k", "repetition_penalty"},  # the last two: vLLM's extensions to the schema
    "chat": {"messages"},
    "text": {"prompt"},
}
IGNORED_FIELDS = {"user", "safety_identifier", "metadata", "store", "prompt_cache_key", "prompt_cache_retention",
                  "prediction",  # predicted output only speeds generation up: the answer is the same without it
                  "parallel_tool_calls"}  # means nothing without tools, which are refused
_NOTHING: Callable[[Any], bool] = lambda v: v is None  # noqa: E731
_FALSE: Callable[[Any], bool] = lambda v: v is None or v is False  # noqa: E731
_EMPTY: Callable[[Any], bool] = lambda v: v is None or v == [] or v == {}  # noqa: E731


def _one_of(*values: Any) -> Callable[[Any], bool]:
    # exact types: in Python True == 1 and False == 0, which would let `n: true` pass as n=1
    return lambda v: v is None or any(type(v) is type(ok) and v == ok for ok in values)


# field -> (its value asks for nothing, what the server does not do)
REFUSED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (_one_of(1), "more than one choice per request (n > 1)"),
    "best_of": (_one_of(1), "best_of > 1"),
    "logprobs": (_FALSE, "log probabilities"),
    "top_logprobs": (_one_of(0), "log probabilities"),
    "echo": (_FALSE, "echoing the prompt"),
    "suffix": (_one_of(""), "suffixes (insertion)"),
    "logit_bias": (_EMPTY, "logit_bias"),
    "tools": (_EMPTY, "tool calling"),
    "functions": (_EMPTY, "function calling"),
    "tool_choice": (_one_of("none", "auto"), "tool calling"),
    "function_call": (_one_of("none", "auto"), "function calling"),
    "response_format": (lambda v: v is None or v == {"type": "text"}, "structured output (response_format)"),
    "modalities": (lambda v: v is None or v == ["text"], "output modalities other than text"),
    "audio": (_NOTHING, "audio output"),
    "reasoning_effort": (_NOTHING, "reasoning_effort"),
    "verbosity": (_NOTHING, "verbosity"),
    "web_search_options": (_NOTHING, "web search"),
    "service_tier": (_one_of("auto", "default"), "service tiers"),
    "ignore_eos": (_FALSE, "ignore_eos"),  # vLLM's extension, which load generators send
}
STREAM_OPTIONS = {"include_usage": "used", "include_obfuscation": "ignored"}  # obfuscation: padding, not content


def check_fields(body: dict[str, Any], kind: str) -> None:
    """400 for the first field of the body that asks for something this server does not do (the lists above)."""
    used = USED_FIELDS["both"] | USED_FIELDS[kind]
    for name, value in body.items():
        if name in used or name in IGNORED_FIELDS:
            continue
        if name in REFUSED_FIELDS:
            asks_nothing, what = REFUSED_FIELDS[name]
            if not asks_nothing(value):
                raise _bad(f"'{name}' is not supported by this server: it does not do {what} "
                           f"(leave '{name}' out; docs/openai.md lists what is supported)", name)
        elif value is not None:
            raise _bad(f"Unrecognized request argument supplied: {name} (this server does not support it)", name)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        for name, value in options.items():
            if name not in STREAM_OPTIONS and value is not None:
                raise _bad(f"'stream_options.{name}' is not supported by this server", f"stream_options.{name}")


def requested_max_tokens(body: dict[str, Any]) -> int | None:
    """The completion's length limit the client asked for (`max_completion_tokens` first, as OpenAI), or None."""
    newer = _integer(body, "max_completion_tokens", 1, 1 << 30)
    older = _integer(body, "max_tokens", 1, 1 << 30)
    return newer if newer is not None else older


def sampling_inputs(body: dict[str, Any], context_limit: int) -> dict[str, Any]:
    """Triton inputs for the OpenAI sampling fields (validated; absent fields are left to the engine). Without a
    max_tokens the completion may run to the context limit, as OpenAI's: the engine cuts max_tokens to what is left
    after the prompt (TensorRT-LLM 1.2.1 executor/base_worker.py `_deduce_max_tokens`; vLLM 0.31.0's scheduler
    stops a request at max_model_len)."""
    inputs: dict[str, Any] = {}
    max_tokens = requested_max_tokens(body)
    inputs["max_tokens"] = context_limit if max_tokens is None else max_tokens
    for name, low, high in (("temperature", 0, 2), ("top_p", 0, 1), ("frequency_penalty", -2, 2),
                            ("presence_penalty", -2, 2), ("repetition_penalty", 0, 10)):
        value = _number(body, name, low, high)
        if value is not None:
            inputs[name] = value
    top_k = _integer(body, "top_k", 0, 1 << 20)
    if top_k is not None:
        inputs["top_k"] = top_k
    seed = _integer(body, "seed", -(1 << 63), (1 << 64) - 1)
    if seed is not None:
        inputs["seed"] = seed % (1 << 64)  # the model's seed is UINT64
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOP_SEQUENCES:
            raise _bad(f"'stop' must be a string or a list of up to {MAX_STOP_SEQUENCES} non-empty strings", "stop")
        if stops:
            inputs["stop_words"] = stops
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    return inputs


def context_exceeded(limit: int, param: str, prompt_tokens: int | None = None,
                     max_tokens: int | None = None) -> OpenAIError:
    """OpenAI's answer to a request over the context limit: code `context_length_exceeded` on the prompt's field,
    and a message that begins as OpenAI's does ("This model's maximum context length is N tokens"), which is what
    LiteLLM matches to raise ContextWindowExceededError (litellm_core_utils/exception_mapping_utils.py
    `ExceptionCheckers.is_error_str_context_window_exceeded`), so that context-window fallbacks fire."""
    if prompt_tokens is not None and max_tokens is not None:
        detail = (f"this request asks for {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {param}, "
                  f"{max_tokens} for the completion)")
    elif max_tokens is not None:
        detail = f"max_tokens {max_tokens} leaves no room for the {param}"
    else:
        detail = f"the {param} leave no room for a completion" if param == "messages" else \
            "the prompt leaves no room for a completion"
    return OpenAIError(400, f"This model's maximum context length is {limit} tokens; {detail}. Shorten the {param} "
                            "or lower max_tokens.", param=param, code="context_length_exceeded")


def _check_model(body: dict[str, Any], served: str, adapters: list[str] | None = None) -> str | None:
    """The adapter a request's `model` names (None: the base model); 404 model_not_found for any other name."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required (see GET /v1/models)", "model")
    if model == served:
        return None
    if model in (adapters or []):
        return model
    raise model_not_found(model, served, adapters)


def model_not_found(model: str, served: str, adapters: list[str] | None) -> OpenAIError:
    names = ", ".join(f"'{n}'" for n in [served, *(adapters or [])])
    return OpenAIError(404, f"The model '{model}' does not exist; this server serves {names}", param="model",
                       code="model_not_found")


# ---- LoRA adapters served as models (spec.adapters: the operator's render/adapters.py writes the list) ----

ADAPTERS_ENV = "LLMBACKEND_ADAPTERS_FILE"
ADAPTERS_RECHECK_S = 1.0


class AdapterList:
    """The adapters the Triton model serves, by name, from the file $LLMBACKEND_ADAPTERS_FILE names: the same list the
    model reads, re-read when the kubelet replaces it (adapters come and go without a restart). An unreadable list
    keeps the last good one."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.checked = 0.0
        self.stamp: tuple[float, int] | None = None
        self.names: list[str] = []

    def current(self) -> list[str]:
        with self.lock:
            now = time.monotonic()
            if self.path is not None and now - self.checked >= ADAPTERS_RECHECK_S:
                self.checked = now
                self._read()
            return list(self.names)

    def _read(self) -> None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
            if (st.st_mtime, st.st_ino) == self.stamp:
                return
            with open(self.path, encoding="utf-8") as f:
                entries = json.load(f).get("adapters") or []
            self.names = [str(e["name"]) for e in entries]
            self.stamp = (st.st_mtime, st.st_ino)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return


def completion_prompt(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("'prompt' must be a string (token arrays and batches of prompts are not supported)", "prompt")
    return prompt


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages as the chat template expects them: role + content string (text parts joined)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a 'role'", f"messages[{i}]")
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise _bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
                texts.append(part["text"])
            content = "".join(texts)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")
        out.append({**message, "content": content})
    return out


# ---- chat template ----


class ChatTemplate:
    """The checkpoint's chat template (tokenizer_config.json `chat_template`, or chat_template.jinja)."""

    def __init__(self, source: str | None, bos_token: str | None = None, eos_token: str | None = None):
        self.source, self.bos_token, self.eos_token = source, bos_token, eos_token
        self._template = None
        self.unavailable: str | None = None
        if source:
            # Sandboxed like transformers: templates come with checkpoints and must not reach Python objects.
            try:
                from jinja2.ext import loopcontrols
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError:  # completions still work; chat says why it cannot
                self.unavailable = "the serving image has no jinja2 to render the chat template"
                return

            def raise_exception(message: str) -> None:
                raise _bad(f"chat template: {message}", "messages")

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._template = env.from_string(source)

    @classmethod
    def load(cls, tokenizer_dir: str | None) -> ChatTemplate:
        if not tokenizer_dir:
            return cls(None)
        config: dict[str, Any] = {}
        path = os.path.join(tokenizer_dir, "tokenizer_config.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: use "default"
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
        jinja_file = os.path.join(tokenizer_dir, "chat_template.jinja")
        if not source and os.path.exists(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                source = f.read()

        def token(name: str) -> str | None:
            value = config.get(name)
            return value.get("content") if isinstance(value, dict) else value

        return cls(source if isinstance(source, str) else None, token("bos_token"), token("eos_token"))

    def render(self, messages: list[dict[str, Any]]) -> str:
        if self.unavailable:
            raise OpenAIError(500, f"{self.unavailable}; use /v1/completions", "server_error")
        if self._template is None:
            raise _bad("this model's checkpoint has no chat template (tokenizer_config.json chat_template); "
                       "use /v1/completions", "messages")
        try:
            prompt = self._template.render(messages=messages, add_generation_prompt=True,
                                           bos_token=self.bos_token or "", eos_token=self.eos_token or "")
        except OpenAIError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template error is the request's problem
            raise _bad(f"chat template failed on these messages: {exc}", "messages") from None
        # The engine tokenizes text_input with special tokens: drop the template's BOS so it is not doubled.
        if self.bos_token and prompt.startswith(self.bos_token):
            prompt = prompt[len(self.bos_token):]
        return prompt


# ---- Triton ----


class Triton:
    """Streams one request through Triton's generate extension on localhost."""

    def __init__(self, url: str, model: str, timeout_s: float = 600):
        parts = urlsplit(url)
        self.host, self.port, self.model, self.timeout_s = parts.hostname or "127.0.0.1", parts.port or 8000, model, timeout_s

    def ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
            conn.request("GET", f"/v2/models/{self.model}/ready")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def send(self, inputs: dict[str, Any]) -> http.client.HTTPConnection:
        """Write the request to Triton (the prompt leaves this process's memory with it); OpenAIError when it cannot."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("POST", f"/v2/models/{self.model}/generate_stream", body=json.dumps(inputs),
                         headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        except OSError as exc:
            conn.close()
            raise OpenAIError(503, f"the inference server is not reachable: {exc}", "server_error") from None
        return conn

    def events(self, conn: http.client.HTTPConnection) -> Generator[dict[str, Any], None, None]:  # close() ends it
        """Yield each response of the decoupled model to the request sent on `conn`; raise OpenAIError on failure."""
        try:
            try:
                response = conn.getresponse()
            except OSError as exc:
                raise OpenAIError(503, f"the inference server is not reachable: {exc}", "server_error") from None
            if response.status != 200:
                raise _triton_error(response.status, response.read())
            for raw in response:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:].strip())
                if "error" in event:
                    raise _triton_error(400, line[5:].strip().encode())
                yield event
        finally:
            conn.close()  # closing mid-stream lets Triton cancel the request


# How the pinned engines word a prompt that leaves no room in the context (their error reaches us as text):
# TensorRT-LLM 1.2.1 executor/base_worker.py `_enqueue_request._deduce_max_tokens` ("`default_max_tokens` (N) must
# be greater than 0 ..."); vLLM 0.31.0 v1/engine/input_processor.py `InputProcessor._validate_model_input` ("The
# decoder prompt (length N) is longer than the maximum model length of M"). The stand-ins (dev/standins) say the same.
_ENGINE_CONTEXT_OVERFLOW = re.compile(r"`default_max_tokens` \(-?\d+\) must be greater than 0|maximum model length")


class ContextOverflow(OpenAIError):
    """The engine refused the prompt as longer than its context; Frontend turns it into context_exceeded()."""


def _triton_error(status: int, data: bytes) -> OpenAIError:
    try:
        message = str(json.loads(data).get("error", ""))
    except (ValueError, AttributeError):
        message = data[:500].decode(errors="replace")
    if 400 <= status < 500:
        if _ENGINE_CONTEXT_OVERFLOW.search(message):
            log.info("the engine refused a prompt over the context limit: %s", message)
            return ContextOverflow(400, message, code="context_length_exceeded")
        return OpenAIError(400, f"the model rejected the request: {message}")
    return OpenAIError(502 if status >= 500 else status, f"inference failed: {message}", "server_error")


def _first(event: dict[str, Any], name: str) -> Any:
    value = event.get(name)
    return value[0] if isinstance(value, list) and value else value


# ---- the HTTP server ----


@dataclass
class Prepared:
    """A request ready for Triton."""

    kind: str  # "chat" | "text"
    inputs: dict[str, Any]
    stream: bool
    include_usage: bool
    prompt_param: str  # where the prompt is in the body: "messages" | "prompt"
    max_tokens: int | None  # as the client asked; None: up to the context limit
    model: str = ""  # the model the request named (the base's or an adapter's): what the answer names


class Frontend:
    def __init__(self, triton: Triton, served_model: str, template: ChatTemplate, metrics_url: str | None,
                 max_body_bytes: int, body_budget_bytes: int, context_limit: int):
        self.triton, self.served_model, self.template, self.metrics_url = triton, served_model, template, metrics_url
        self.created = int(time.time())
        self.max_body_bytes = max_body_bytes
        self.bodies = http_body.BodyBudget(body_budget_bytes)
        self.context_limit = context_limit
        self.adapters = AdapterList(os.environ.get(ADAPTERS_ENV))

    def models(self) -> dict[str, Any]:
        # max_model_len: the context limit (prompt + completion, tokens), under vLLM's name for it
        base = {"id": self.served_model, "object": "model", "created": self.created, "owned_by": "llmbackend",
                "max_model_len": self.context_limit}
        return {"object": "list", "data": [base, *(self.adapter_model(name) for name in self.adapters.current())]}

    def adapter_model(self, name: str) -> dict[str, Any]:
        """An adapter's /v1/models entry: `parent` names the base model, as vLLM lists its LoRA modules
        (vllm/entrypoints/openai/serving_models.py `OpenAIServingModels.show_available_models`)."""
        return {"id": name, "object": "model", "created": self.created, "owned_by": "llmbackend",
                "parent": self.served_model, "max_model_len": self.context_limit}

    def prepare(self, path: str, body: Any) -> Prepared:
        """The Triton request for a request body, or OpenAIError."""
        if not isinstance(body, dict):
            raise _bad("the request body must be a JSON object")
        adapter = _check_model(body, self.served_model, self.adapters.current())
        kind = "chat" if path == "/v1/chat/completions" else "text"
        check_fields(body, kind)
        inputs = sampling_inputs(body, self.context_limit)
        if kind == "chat":
            prompt_param, prompt = "messages", self.template.render(chat_messages(body))
        else:
            prompt_param, prompt = "prompt", completion_prompt(body)
        max_tokens = requested_max_tokens(body)
        if max_tokens is not None and max_tokens >= self.context_limit:  # a prompt has at least one token
            raise context_exceeded(self.context_limit, prompt_param, max_tokens=max_tokens)
        options = body.get("stream_options") or {}
        # Triton always streams to us: the first response brings the prompt's length (the context check) before the
        # rest is generated; a non-streaming answer is put together here.
        inputs.update(text_input=prompt, stream=True, exclude_input_in_output=True,
                      return_num_input_tokens=True, return_num_output_tokens=True)
        if adapter is not None:  # the Triton model turns it into the engine's LoRARequest
            inputs["adapter"] = adapter
        return Prepared(kind, inputs, bool(body.get("stream", False)), bool(options.get("include_usage")),
                        prompt_param, max_tokens, body["model"])

    def checked(self, request: Prepared, events: Generator[dict[str, Any], None, None]) -> Iterator[dict[str, Any]]:
        """Triton's responses, with the context limit enforced: once the engine has counted the prompt, a request
        whose prompt + max_tokens is over the limit is cancelled (closing Triton's stream) and answered 400, as
        OpenAI does (the engines themselves would cut max_tokens short; this frontend has no tokenizer to count the
        prompt before sending it)."""
        checked = False
        try:
            for event in events:
                prompt_tokens = int(_first(event, "num_input_tokens") or 0)
                if prompt_tokens and not checked:
                    checked = True
                    if request.max_tokens is not None and prompt_tokens + request.max_tokens > self.context_limit:
                        events.close()
                        raise context_exceeded(self.context_limit, request.prompt_param, prompt_tokens,
                                               request.max_tokens)
                yield event
        except ContextOverflow:
            raise context_exceeded(self.context_limit, request.prompt_param) from None


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class ClientGone(Exception):
    """The client closed its connection before its answer was written."""


class DisconnectWatch:
    """While a request waits for its answer, watch the client's socket on a thread: when the client closes it, shut
    the connection to Triton down, so Triton cancels the request and the model aborts it in the engine (nothing else
    notices: a non-streaming answer is written only at the end). Bytes from the client (a pipelined request) end the
    watch: the client is there."""

    def __init__(self, client: socket.socket, upstream: http.client.HTTPConnection):
        self.client, self.upstream = client, upstream
        self.gone = threading.Event()
        self._done = threading.Event()

    def __enter__(self) -> DisconnectWatch:
        threading.Thread(target=self._watch, name="disconnect-watch", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()  # the thread ends within DISCONNECT_POLL_S; nobody waits for it

    def _watch(self) -> None:
        poller = select.poll()  # not select(): it fails on descriptors above 1023, i.e. under many connections
        try:
            poller.register(self.client, select.POLLIN | select.POLLPRI)
        except (OSError, ValueError):
            return  # the socket is already closed on our side
        while not self._done.is_set():
            try:
                if not poller.poll(DISCONNECT_POLL_S * 1000) or self._done.is_set():
                    continue
                if self.client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    return
            except BlockingIOError:
                continue
            except ValueError:
                return  # closed on our side: not the client's doing
            except OSError:
                pass  # reset by the client
            self.gone.set()
            sock = self.upstream.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return


def _request_id(given: str | None) -> str:
    if given and _REQUEST_ID.fullmatch(given):
        return given
    return "req_" + uuid.uuid4().hex


class Handler(http_body.BoundedHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmbackend-openai"
    frontend: Frontend  # set on the subclass by serve()
    request_id: str | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    # ---- every answer: an x-request-id; errors as OpenAI's JSON ----

    def handle_one_request(self) -> None:
        self.request_id = None  # a request line or headers that do not parse get a fresh id, not the last one's
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            self.request_id = _request_id(self.headers.get("x-request-id"))
        return ok

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        if self.request_id is None:
            self.request_id = _request_id(None)
        self.send_header("x-request-id", self.request_id)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a request line or headers it cannot parse, a method no do_X
        serves): OpenAI's JSON error instead of an HTML page, and the connection closed (what follows is not read)."""
        self.close_connection = True
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._error(OpenAIError(code, message or phrase, "invalid_request_error" if code < 500 else "server_error"))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, error: OpenAIError, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(error.body()).encode()
        self.send_response(error.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if error.retry_after is not None:
            self.send_header("Retry-After", str(error.retry_after))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # ---- routing: every method, every path; a body is always read, or the connection closed ----

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_GET

    def _serve(self) -> None:
        path = self.path.split("?")[0]
        try:
            if self.command == "POST" and path in GENERATE_ROUTES:
                self._generate(path)
                return
            self._discard_body()  # whatever the answer, the next request on this connection must parse
            if self.command in ("GET", "HEAD"):
                self._get(path)
            elif path in GENERATE_ROUTES or path.startswith("/v1/models") or path in ("/health", "/metrics"):
                allowed = "POST" if path in GENERATE_ROUTES else "GET, HEAD"
                self._error(OpenAIError(405, f"{self.command} is not allowed on {path}; use {allowed}",
                                        code="method_not_allowed"), {"Allow": allowed})
            else:
                raise OpenAIError(404, f"no route {self.command} {path} on this server (it serves "
                                       f"{', '.join(GENERATE_ROUTES)} and /v1/models)", code="not_found")
        except OpenAIError as exc:
            self._error(exc)
            if self.close_connection:  # its body was not read
                http_body.discard_rest(self.connection)
        except ClientGone:
            log.info("request %s: the client disconnected; its engine request was cancelled", self.request_id)
            self.close_connection = True
        except OSError as exc:  # the client went away while we wrote
            log.info("request %s: connection lost: %s", self.request_id, exc)
            self.close_connection = True
        except Exception:  # noqa: BLE001 - one bad request must not take the server down
            log.exception("request %s failed", self.request_id)
            self.close_connection = True  # what was written, or left unread, is unknown
            try:
                self._error(OpenAIError(500, "internal error in the OpenAI frontend", "server_error"))
            except OSError:
                pass

    def _body_refused(self, exc: http_body.BodyError) -> OpenAIError:
        self.close_connection = True  # what follows a refused body is not a request
        return OpenAIError(exc.status, exc.message, "server_error" if exc.status >= 500 else "invalid_request_error",
                           code="request_body", retry_after=exc.retry_after)

    def _discard_body(self) -> None:
        """Read and drop a body the route does not use, within the body budget (a GET may carry one too)."""
        frontend = self.frontend
        try:
            length = http_body.declared_length(self.headers, frontend.max_body_bytes)
            if length == 0:
                return
            with frontend.bodies.reserve(frontend.max_body_bytes if length is None else length, wait_s=BODY_WAIT_S):
                http_body.read_body(self.headers, self.rfile, frontend.max_body_bytes, BODY_TIMEOUT_S, self.connection)
        except http_body.BodyError as exc:
            raise self._body_refused(exc) from None

    def _get(self, path: str) -> None:
        if path == "/v1/models":
            self._json(200, self.frontend.models())
        elif path == f"/v1/models/{self.frontend.served_model}":
            self._json(200, self.frontend.models()["data"][0])
        elif path.startswith("/v1/models/") and path[len("/v1/models/"):] in self.frontend.adapters.current():
            self._json(200, self.frontend.adapter_model(path[len("/v1/models/"):]))
        elif path.startswith("/v1/models/"):
            raise model_not_found(path[len("/v1/models/"):], self.frontend.served_model,
                                  self.frontend.adapters.current())
        elif path == "/metrics" and self.frontend.metrics_url:
            self._metrics()
        elif path == "/health":
            ready = self.frontend.triton.ready()
            self._json(200 if ready else 503, {"status": "ok" if ready else "model not ready"})
        else:
            raise OpenAIError(404, f"no route {self.command} {path}", code="not_found")

    def _metrics(self) -> None:
        """Triton's Prometheus metrics, relayed: scrapers that only know this port (the EPP) read the engine gauges."""
        url = urlsplit(self.frontend.metrics_url or "")
        try:
            conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 8002, timeout=5)
            conn.request("GET", url.path or "/metrics")
            response = conn.getresponse()
            data, status = response.read(), response.status
            content_type = response.getheader("Content-Type", "text/plain; version=0.0.4")
            conn.close()
        except OSError as exc:
            raise OpenAIError(503, f"Triton metrics not reachable: {exc}", "server_error") from None
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # ---- completions ----

    def _generate(self, path: str) -> None:
        frontend = self.frontend
        try:
            length = http_body.declared_length(self.headers, frontend.max_body_bytes)
            # A chunked body may be as large as the cap: reserve that, give back the rest once it is read.
            with frontend.bodies.reserve(frontend.max_body_bytes if length is None else length,
                                         wait_s=BODY_WAIT_S) as reservation:
                request, conn = self._send_to_triton(path, reservation)
        except http_body.BodyError as exc:
            raise self._body_refused(exc) from None
        events = frontend.checked(request, frontend.triton.events(conn))
        if request.stream:
            self._stream(request, conn, events)
        else:
            self._complete(request, conn, events)

    def _send_to_triton(self, path: str,
                        reservation: http_body.Reservation) -> tuple[Prepared, http.client.HTTPConnection]:
        """Read and parse the body, send the request to Triton. The body, its parse and the prompt live only in this
        frame, freed before the budget is given back."""
        raw = http_body.read_body(self.headers, self.rfile, self.frontend.max_body_bytes, BODY_TIMEOUT_S,
                                  self.connection)
        reservation.shrink(len(raw))
        try:
            body = json.loads(raw or b"null")
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser's stack
            detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise _bad(f"the request body is not valid JSON: {detail}") from None
        request = self.frontend.prepare(path, body)
        return request, self.frontend.triton.send(request.inputs)

    def _until_answered(self, conn: http.client.HTTPConnection, wait: Callable[[], Any]) -> Any:
        """wait() (reading Triton's responses) while watching the client: if it disconnects, the Triton request is
        cancelled and ClientGone raised."""
        with DisconnectWatch(self.connection, conn) as watch:
            try:
                result = wait()
            except Exception:
                if watch.gone.is_set():
                    raise ClientGone() from None
                raise
            if watch.gone.is_set():
                raise ClientGone()
            return result

    def _complete(self, request: Prepared, conn: http.client.HTTPConnection, events: Iterator[dict[str, Any]]) -> None:
        text: list[str] = []
        finish, prompt_tokens, completion_tokens = None, 0, 0

        def collect() -> None:
            nonlocal finish, prompt_tokens, completion_tokens
            for event in events:
                text.append(_first(event, "text_output") or "")
                finish = _first(event, "finish_reason") or finish
                prompt_tokens = max(prompt_tokens, int(_first(event, "num_input_tokens") or 0))
                completion_tokens = max(completion_tokens, int(_first(event, "num_output_tokens") or 0))

        self._until_answered(conn, collect)
        kind = request.kind
        rid, created, model = _ids(kind), int(time.time()), request.model or self.frontend.served_model
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                      "finish_reason": finish or "stop", "logprobs": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": "".join(text), "finish_reason": finish or "stop", "logprobs": None}
            obj = "text_completion"
        self._json(200, {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                         "usage": _usage(prompt_tokens, completion_tokens)})

    def _stream(self, request: Prepared, conn: http.client.HTTPConnection, events: Iterator[dict[str, Any]]) -> None:
        # errors before the first response (the context check included) still get a plain HTTP error
        first = self._until_answered(conn, lambda: next(events, None))
        kind, include_usage = request.kind, request.include_usage
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        rid, created, model = _ids(kind), int(time.time()), request.model or self.frontend.served_model
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        prompt_tokens = completion_tokens = 0

        def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> None:
            payload: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": choices}
            if include_usage:
                payload["usage"] = usage
            self._send_event(json.dumps(payload))

        def choice(text: str, finish: str | None, role: bool = False) -> dict[str, Any]:
            if kind == "chat":
                delta = {"role": "assistant", "content": text} if role else {"content": text}
                return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}

        try:
            if kind == "chat":
                chunk([choice("", None, role=True)])
            pending = [first] if first is not None else []
            for event in _chain(pending, events):
                prompt_tokens = max(prompt_tokens, int(_first(event, "num_input_tokens") or 0))
                completion_tokens = max(completion_tokens, int(_first(event, "num_output_tokens") or 0))
                text, finish = _first(event, "text_output") or "", _first(event, "finish_reason") or None
                if text or finish:
                    chunk([choice(text, finish)])
            if include_usage:
                chunk([], _usage(prompt_tokens, completion_tokens))
        except OpenAIError as exc:
            self._send_event(json.dumps(exc.body()))
        except OSError:
            conn.close()  # the client left: drop the Triton stream (cancels the request)
            self.close_connection = True
            return
        self._send_event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _send_event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()


def _chain(first: list[dict[str, Any]], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from first
    yield from rest


def _ids(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def serve(host: str, port: int, frontend: Frontend, ready: threading.Event | None = None,
          stop: threading.Event | None = None, max_connections: int = 512, max_header_bytes: int = 32 << 10,
          header_timeout_s: float = 10.0) -> None:
    handler = type("BoundHandler", (Handler,), {"frontend": frontend})
    server = http_body.BoundedServer((host, port), handler, http_body.Slots(max_connections), max_header_bytes,
                                     header_timeout_s)
    if ready is not None:
        ready.set()
    if stop is not None:
        def stop_when_set() -> None:
            stop.wait()
            server.shutdown()

        threading.Thread(target=stop_when_set, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the pod's port; tests pass 127.0.0.1
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--triton-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True, help="Triton model name")
    ap.add_argument("--served-model-name", help="the OpenAI model id (default: --model)")
    ap.add_argument("--tokenizer-dir", help="checkpoint directory holding tokenizer_config.json")
    ap.add_argument("--metrics-url", help="Triton's metrics URL, relayed on GET /metrics")
    # The body limits come from the renderer (render/openai.py), which sizes the container's memory limit on them.
    ap.add_argument("--max-body-bytes", type=int, required=True, help="largest request body; larger get 413")
    ap.add_argument("--body-budget-bytes", type=int, required=True,
                    help="request bodies read and parsed at once, in bytes; beyond it a request waits, then 503")
    ap.add_argument("--max-seq-len", type=int, required=True,
                    help="the engine's context limit (prompt + completion, tokens): max_tokens' default and bound")
    http_body.add_head_arguments(ap, "connections at once (a thread each); more get 503 with Retry-After at once")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    template = ChatTemplate.load(a.tokenizer_dir)
    if template.source is None:
        log.warning("no chat template under %s: /v1/chat/completions answers 400", a.tokenizer_dir)
    served = a.served_model_name or a.model
    if a.body_budget_bytes < a.max_body_bytes:
        ap.error("--body-budget-bytes must hold at least one body of --max-body-bytes")
    if a.max_seq_len < 2:
        ap.error("--max-seq-len must be at least 2")
    frontend = Frontend(Triton(a.triton_url, a.model), served, template, a.metrics_url, a.max_body_bytes,
                        a.body_budget_bytes, a.max_seq_len)
    log.info("serving model %s on %s:%d (Triton model %s at %s)", served, a.host, a.port, a.model, a.triton_url)
    serve(a.host, a.port, frontend, max_connections=a.max_connections, max_header_bytes=a.max_header_bytes,
          header_timeout_s=a.header_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
