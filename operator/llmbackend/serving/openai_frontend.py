"""OpenAI-compatible HTTP frontend for one Triton-served LLM (/v1/chat/completions, /v1/completions, /v1/models;
/v1/responses for text and function tools, streamed or not, through the chat path).

Runs as the `openai` container of each serving pod (same image as Triton), shipped as this one file in the
backend's ConfigMap, and talks to Triton on localhost through its generate extension
(`/v2/models/<m>/generate_stream`, server-sent events). Standard library only, plus `jinja2` for the
checkpoint's chat template (the Triton TensorRT-LLM and vLLM images ship it with transformers).
It cannot import the operator's package: it is copied into the pod with its one helper, http_body.py (request
bodies: framing checked before reading, a cap, and a budget of body bytes in flight; request heads: bytes and a
deadline; connections: a cap. The container's memory limit covers them all, render/openai.py).

Model interface (the serving models of this project implement it): input `text_input` and optional sampling
inputs, `guided_decoding_guide_type`/`guided_decoding_guide` (response_format, forced tool calls),
`num_return_sequences` (n), `num_logprobs`, `skip_special_tokens`; outputs `text_output` (the new text of each
streamed response), `finish_reason`, `sequence_index` (the choice), `logprobs` (JSON text per token),
`num_input_tokens`, `num_output_tokens` (taken as running totals: the largest value seen is the count; the serving
models send `num_input_tokens` with their first streamed response too, which is when the context limit is checked).

What applications call (issue 46): structured output, n > 1 and logprobs through the engines' own parameters; tools
rendered through the checkpoint's chat template and read back in the model family's format (vLLM's parsers').

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
GENERATE_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
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
             "top_k", "repetition_penalty",  # vLLM's extensions to the schema
             "response_format",  # chat in OpenAI's API; vLLM takes it on completions too
             "n", "logprobs"},
    "chat": {"messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls"},
    "text": {"prompt"},
}
IGNORED_FIELDS = {"user", "safety_identifier", "metadata", "store", "prompt_cache_key", "prompt_cache_retention",
                  "prediction"}  # predicted output only speeds generation up: the answer is the same without it
_NOTHING: Callable[[Any], bool] = lambda v: v is None  # noqa: E731
_FALSE: Callable[[Any], bool] = lambda v: v is None or v is False  # noqa: E731
_EMPTY: Callable[[Any], bool] = lambda v: v is None or v == [] or v == {}  # noqa: E731


def _one_of(*values: Any) -> Callable[[Any], bool]:
    # exact types: in Python True == 1 and False == 0, which would let `n: true` pass as n=1
    return lambda v: v is None or any(type(v) is type(ok) and v == ok for ok in values)


# field -> (its value asks for nothing, what the server does not do)
REFUSED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "best_of": (_one_of(1), "best_of > 1"),
    "echo": (_FALSE, "echoing the prompt"),
    "suffix": (_one_of(""), "suffixes (insertion)"),
    "logit_bias": (_EMPTY, "logit_bias"),
    "functions": (_EMPTY, "function calling"),
    "function_call": (_one_of("none", "auto"), "function calling"),
    "modalities": (lambda v: v is None or v == ["text"], "output modalities other than text"),
    "audio": (_NOTHING, "audio output"),
    "reasoning_effort": (_NOTHING, "reasoning_effort"),
    "verbosity": (_NOTHING, "verbosity"),
    "web_search_options": (_NOTHING, "web search"),
    "service_tier": (_one_of("auto", "default"), "service tiers"),
    "ignore_eos": (_FALSE, "ignore_eos"),  # vLLM's extension, which load generators send
}
# include_obfuscation: padding, not content. continuous_usage_stats: vLLM's usage on every chunk, which guidellm sends
# with every streaming request; the Triton models count a request's output tokens in their final response only, so
# the counts come once, in the last chunk (as with include_usage alone), and a client that keeps the last usage it
# saw, as guidellm does, gets the exact counts.
STREAM_OPTIONS = {"include_usage": "used", "include_obfuscation": "ignored", "continuous_usage_stats": "ignored"}


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


# The Responses API (/v1/responses): a request is put as the chat request it asks for (the same prompt, template,
# sampling, tools and checks) and the chat answer as a Response, whole or as the Responses API's stream of events.
# Fields: used as below, ignored as chat's, or asking for nothing; anything else (previous_response_id, built-in
# tools, structured output, background, ...) a 400 naming it. Shapes: OpenAI's API reference, "Responses"
# (https://platform.openai.com/docs/api-reference/responses/create), as the official client 3.x types them
# (openai/types/responses/). vLLM 0.31.0 maps the same items to chat messages (entrypoints/responses_utils.py
# `construct_chat_message_with_tool_call`: a function_call is an assistant tool call, a function_call_output a
# tool message).
RESPONSES_USED = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools",
                  "tool_choice", "parallel_tool_calls"}
RESPONSES_NOTHING: dict[str, Callable[[Any], bool]] = {
    "truncation": lambda v: v is None or v == "disabled", "background": lambda v: v is None or v is False,
    "text": lambda v: v is None or v == {} or v == {"format": {"type": "text"}},
    "include": lambda v: v is None or v == [],
    # include_obfuscation pads stream events with random characters: padding, not content
    "stream_options": lambda v: v is None or (isinstance(v, dict) and set(v) <= {"include_obfuscation"})}
# What a function tool may carry ({"type": "function", "name", "parameters", ...} at the top level, not nested under
# "function" as in chat); the rest of OpenAI's FunctionTool (defer_loading, allowed_callers, output_schema, async)
# changes how OpenAI's platform runs tools, so a value there is refused, not dropped.
RESPONSES_TOOL_KEYS = ("name", "description", "parameters", "strict")


def chat_body_from_responses(body: dict[str, Any]) -> dict[str, Any]:
    """A /v1/responses body as the /v1/chat/completions body it asks for, or 400 naming the field it cannot take."""
    for name, value in body.items():
        if name in RESPONSES_USED or name in IGNORED_FIELDS or RESPONSES_NOTHING.get(name, _NOTHING)(value):
            continue
        raise _bad(f"'{name}' is not supported by this server's Responses API, which does text and function tools, "
                   "streamed or not (docs/openai.md; /v1/chat/completions also does structured output, n and "
                   "logprobs)", name)
    messages: list[dict[str, Any]] = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise _bad("'instructions' must be a string", "instructions")
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        messages.extend(_responses_input(given))
    else:
        raise _bad("'input' must be a string or a non-empty list of items", "input")
    chat = {"model": body.get("model"), "messages": messages}
    for name in ("temperature", "top_p", "user", "metadata", "stream", "parallel_tool_calls"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tools") is not None:
        chat["tools"] = _chat_tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _chat_tool_choice(body["tool_choice"])
    return chat


def _chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Responses' function tools as chat's ({"type": "function", "function": {...}}); built-in tools are a 400."""
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of function tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _bad(f"tools[{i}]: only function tools ({{\"type\": \"function\", \"name\": ...}}) are supported; "
                       f"this server has no built-in tools ({kind!r})", "tools")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad(f"tools[{i}] needs a 'name'", "tools")
        extra = [k for k, v in tool.items() if k != "type" and k not in RESPONSES_TOOL_KEYS and v is not None]
        if extra:
            raise _bad(f"tools[{i}].{extra[0]} is not supported by this server", "tools")
        function = {k: tool[k] for k in RESPONSES_TOOL_KEYS if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...} "
               "(built-in tools, MCP and allowed_tools are not supported)", "tool_choice")


def _responses_input(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as chat messages: messages, function_call (an assistant tool call; calls that follow an assistant
    turn join it, so a template sees one turn with its calls) and function_call_output (a tool message)."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        param = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "function_call":
            call = {"id": _item_text(item, "call_id", param), "type": "function",
                    "function": {"name": _item_text(item, "name", param), "arguments": _item_arguments(item, param)}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last["tool_calls"] = [*(last.get("tool_calls") or []), call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": _item_text(item, "call_id", param),
                             "content": _text_content(item.get("output"), f"{param}.output")})
        else:
            messages.append(_responses_message(item, param))
    return messages


def _item_text(item: dict[str, Any], name: str, param: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise _bad(f"{param}.{name} must be a non-empty string", f"{param}.{name}")
    return value


def _item_arguments(item: dict[str, Any], param: str) -> str:
    arguments = item.get("arguments")
    try:
        if isinstance(arguments, str):
            json.loads(arguments or "{}")
            return arguments
    except (ValueError, RecursionError):
        pass
    raise _bad(f"{param}.arguments must be the function's arguments as JSON text", f"{param}.arguments")


def _text_content(content: Any, param: str) -> str:
    """A string, or a list of input_text / output_text parts joined."""
    if isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") in ("input_text", "output_text")
                 and isinstance(p.get("text"), str)]
        if len(parts) != len(content):
            raise _bad(f"{param}: only input_text and output_text parts are supported", param)
        content = "".join(parts)
    if not isinstance(content, str):
        raise _bad(f"{param} must be a string or a list of text parts", param)
    return content


def _responses_message(item: Any, param: str) -> dict[str, Any]:
    """One message item ({"role", "content": text or [input_text/output_text parts]}) as a chat message."""
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        raise _bad(f"{param}: only messages, function_call and function_call_output items are supported", param)
    role = item.get("role")
    role = "system" if role == "developer" else role  # chat templates know system, not OpenAI's newer name
    if not isinstance(role, str) or role not in ("system", "user", "assistant"):
        raise _bad(f"{param}.role must be user, assistant, system or developer", f"{param}.role")
    return {"role": role, "content": _text_content(item.get("content"), f"{param}.content")}


def response_object(body: dict[str, Any], rid: str, created: int, model: str, status: str,
                    output: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
    """The Response object (OpenAI's API reference, "The response object"): what the request asked for, echoed, with
    the output items and usage so far."""
    cut = status == "incomplete"
    parallel = body.get("parallel_tool_calls")
    return {"id": rid, "object": "response", "created_at": created, "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
            "model": model, "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"), "temperature": body.get("temperature"),
            "top_p": body.get("top_p"), "metadata": body.get("metadata") or {}, "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
            "text": {"format": {"type": "text"}}, "truncation": "disabled", "output": output,
            "usage": None if usage is None else {
                "input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0,
                                                                                "cache_write_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0}}}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """A function_call output item: `call_id` is what the client's function_call_output answers."""
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def _item_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def response_from_chat(answer: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion answer (one choice) as the Response object OpenAI's Responses API returns: the message (when
    it has text, or when there are no calls) and then a function_call item per tool call."""
    choice = answer["choices"][0]
    message = choice["message"]
    status = "incomplete" if choice["finish_reason"] == "length" else "completed"
    calls = message.get("tool_calls") or []
    output = []
    if message["content"] or not calls:
        output.append(_message_item(_item_id("msg_"), status, [_text_part(message["content"] or "")]))
    output += [_call_item(_item_id("fc_"), call["id"], call["function"]["name"], call["function"]["arguments"],
                          "completed") for call in calls]
    return response_object(body, _item_id("resp_"), answer["created"], answer["model"], status, output,
                           answer["usage"])


class ResponseEvents:
    """The server-sent events of one streamed Response, in the order of OpenAI's API reference ("Streaming events",
    https://platform.openai.com/docs/api-reference/responses-streaming) and with the fields of the official client's
    types (openai/types/responses/response_*_event.py): response.created and response.in_progress; the message item
    (output_item.added, content_part.added, output_text.delta per piece of text, output_text.done,
    content_part.done, output_item.done); a function_call item per tool call (output_item.added,
    function_call_arguments.delta with the whole arguments, function_call_arguments.done, output_item.done); then
    response.completed, or response.incomplete when max_output_tokens cut the answer, with the usage. Every event
    carries its sequence_number. vLLM 0.31.0 streams plain text the same way (entrypoints/openai/
    serving_responses.py `_process_simple_streaming_events`); it does not stream tool calls there."""

    def __init__(self, body: dict[str, Any], model: str, created: int) -> None:
        self.body, self.model, self.created = body, model, created
        self.rid = _item_id("resp_")
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # the items done
        self.message: str | None = None  # the open message item's id
        self.text = ""

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _response(self, status: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
        return response_object(self.body, self.rid, self.created, self.model, status, list(self.output), usage)

    def start(self) -> list[dict[str, Any]]:
        return [self._event("response.created", response=self._response("in_progress")),
                self._event("response.in_progress", response=self._response("in_progress"))]

    def text_delta(self, delta: str) -> list[dict[str, Any]]:
        """Text for the message item, which is opened with its first text."""
        events = []
        index = len(self.output)
        if self.message is None:
            self.message = _item_id("msg_")
            events += [self._event("response.output_item.added", output_index=index,
                                   item=_message_item(self.message, "in_progress", [])),
                       self._event("response.content_part.added", item_id=self.message, output_index=index,
                                   content_index=0, part=_text_part(""))]
        if delta:
            self.text += delta
            events.append(self._event("response.output_text.delta", item_id=self.message, output_index=index,
                                      content_index=0, delta=delta, logprobs=[]))
        return events

    def finish(self, calls: list[dict[str, str]], status: str, usage: dict[str, int]) -> list[dict[str, Any]]:
        """The end: the message item done (an empty one when there is nothing else), each call, the Response."""
        events = []
        if self.message is None and not calls:
            events += self.text_delta("")
        if self.message is not None:
            index, part = len(self.output), _text_part(self.text)
            item = _message_item(self.message, status, [part])
            events += [self._event("response.output_text.done", item_id=self.message, output_index=index,
                                   content_index=0, text=self.text, logprobs=[]),
                       self._event("response.content_part.done", item_id=self.message, output_index=index,
                                   content_index=0, part=part),
                       self._event("response.output_item.done", output_index=index, item=item)]
            self.output.append(item)
        for call in openai_tool_calls(calls):
            index, item_id = len(self.output), _item_id("fc_")
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            events.append(self._event("response.output_item.added", output_index=index,
                                      item=_call_item(item_id, call["id"], name, "", "in_progress")))
            events.append(self._event("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                                      delta=arguments))
            # `name` as in the API reference's function_call_arguments.done (the client's type has no field for it)
            events.append(self._event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                                      name=name, arguments=arguments))
            item = _call_item(item_id, call["id"], name, arguments, "completed")
            events.append(self._event("response.output_item.done", output_index=index, item=item))
            self.output.append(item)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return events + [self._event(kind, response=self._response(status, usage))]

    def failed(self, error: OpenAIError) -> list[dict[str, Any]]:
        """An error after the stream began: an error event, then response.failed (the API reference's pair)."""
        response = self._response("failed")
        response["error"] = {"code": "server_error", "message": error.message}
        return [self._event("error", code=error.code, message=error.message, param=error.param),
                self._event("response.failed", response=response)]


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


# Structured output: OpenAI's response_format -> the models' guided decoding inputs (tensorrtllm_backend's names:
# guide type "json" is any JSON object, "json_schema" a schema given as JSON text). vLLM's OpenAI server maps it the
# same way (0.31.0 entrypoints/generate/base/protocol.py `structured_outputs_from_response_format`: json_object ->
# StructuredOutputsParams(json_object=True), json_schema -> StructuredOutputsParams(json=schema)).
GUIDE_TYPE, GUIDE = "guided_decoding_guide_type", "guided_decoding_guide"
# How the serving models begin the message of a guide the engine's grammar backend cannot compile (400).
GUIDE_ERROR = "guided decoding:"


def guided_inputs(body: dict[str, Any]) -> dict[str, str]:
    """Triton inputs for `response_format` ({} for none or {"type": "text"}); 400 naming it when malformed."""
    value = body.get("response_format")
    if value is None:
        return {}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {GUIDE_TYPE: "json"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
            raise _bad("'response_format.json_schema' must be an object with a 'name' (and a 'schema')",
                       "response_format")
        schema = spec.get("schema")
        if schema is None:  # OpenAI: a name without a schema asks for any JSON object
            return {GUIDE_TYPE: "json"}
        if not isinstance(schema, dict):
            raise _bad("'response_format.json_schema.schema' must be a JSON Schema object", "response_format")
        return {GUIDE_TYPE: "json_schema", GUIDE: json.dumps(schema)}
    raise _bad("'response_format.type' must be 'text', 'json_object' or 'json_schema'", "response_format")


MAX_CHOICES = 128      # n, as OpenAI bounds it
MAX_TOP_LOGPROBS = 20  # top_logprobs (chat) / logprobs (completions): OpenAI's chat bound, vLLM's max_logprobs
# A non-streaming answer is held whole until it is written: n choices x max_tokens, and with logprobs an entry per
# token and alternative (parsed, then shaped as OpenAI's objects with a `bytes` list each). The most one answer may
# cost, estimated with these per-token costs (CPython objects, rounded up); a request whose answer could cost more is
# a 400 that says to stream it (a stream holds one response at a time) or to ask for less.
ANSWER_BUDGET_BYTES = 256 << 20
BYTES_PER_TOKEN = 64
BYTES_PER_LOGPROB = 700  # measured with tracemalloc: ~640 per token and alternative for chat, ~300 for completions


def check_answer_size(stream: bool, n: int, max_tokens: int, top_logprobs: int | None) -> None:
    if stream:
        return
    per_token = BYTES_PER_TOKEN + (0 if top_logprobs is None else (top_logprobs + 1) * BYTES_PER_LOGPROB)
    if n * max_tokens * per_token > ANSWER_BUDGET_BYTES:
        param = "n" if n > 1 else "logprobs" if top_logprobs else "max_tokens"
        raise _bad(f"this answer could hold {n} choice(s) x {max_tokens} tokens"
                   f"{'' if top_logprobs is None else f' with {top_logprobs} alternatives each'}, more than this "
                   "server holds for one non-streaming answer; stream it (stream: true), or lower max_tokens, n or "
                   "top_logprobs", param)


def choice_inputs(body: dict[str, Any], kind: str) -> tuple[dict[str, int], int | None]:
    """Triton inputs for `n` and the log probabilities, and how many alternatives per token the answer lists (None:
    no logprobs). Chat: `logprobs: true` and `top_logprobs` 0-20; completions: `logprobs` 0-20 (OpenAI's own bound
    is 5; vLLM's 20)."""
    inputs: dict[str, int] = {}
    n = _integer(body, "n", 1, MAX_CHOICES)
    if n is not None and n > 1:
        inputs["num_return_sequences"] = n
    if kind == "chat":
        wanted = body.get("logprobs")
        if wanted is not None and not isinstance(wanted, bool):
            raise _bad("'logprobs' must be a boolean", "logprobs")
        top = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
        if top is not None and not wanted:
            raise _bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        count = (top or 0) if wanted else None
    else:
        count = _integer(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    if count is not None:
        inputs["num_logprobs"] = count
    return inputs, count


def chat_logprobs(entries: list[Any]) -> dict[str, Any]:
    """The models' [token, logprob, [[alternative, logprob], ...]] entries as OpenAI's chat `logprobs` object."""
    def token(text: str, logprob: Any) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {"content": [{**token(text, logprob), "top_logprobs": [token(t, lp) for t, lp in alternatives]}
                        for text, logprob, alternatives in entries], "refusal": None}


def completion_logprobs(entries: list[Any], offset: int = 0) -> dict[str, Any]:
    """The same entries as OpenAI's completions `logprobs` object; text_offset counts from `offset` (the text this
    choice already had). top_logprobs holds the alternatives and the sampled token, as OpenAI's does."""
    offsets = []
    for text, _, _ in entries:
        offsets.append(offset)
        offset += len(text)
    return {"tokens": [text for text, _, _ in entries], "token_logprobs": [logprob for _, logprob, _ in entries],
            "top_logprobs": [{**{t: lp for t, lp in alternatives}, text: logprob}
                             for text, logprob, alternatives in entries],
            "text_offset": offsets}


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
        if message.get("role") == "assistant" and message.get("tool_calls"):
            message = {**message, "tool_calls": _template_tool_calls(message["tool_calls"], i)}
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")
        out.append({**message, "content": content})
    return out


# ---- tool calling ----
#
# Tools go into the prompt through the checkpoint's own chat template (`tools=`, as transformers'
# apply_chat_template and vLLM pass them). What the model answers is read back by its family's format, as vLLM
# 0.31.0's tool parsers read it (vllm/tool_parsers/*): the family is recognised by the template's own tool-call
# markers. tool_choice "required" and a named function are forced with guided decoding, as vLLM does
# (tool_parsers/utils.py `get_json_schema_from_tools`): the output is then JSON for the schema below, whatever the
# family.

HERMES, LLAMA3_JSON, MISTRAL, DEEPSEEK_V3, DEEPSEEK_V31, HARMONY = (
    "hermes", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31", "harmony")
# Where each family's tool calls begin in the output (streaming holds text back from there).
TOOL_MARKERS = {HERMES: "<tool_call>", MISTRAL: "[TOOL_CALLS]", DEEPSEEK_V3: "<｜tool▁calls▁begin｜>",
                DEEPSEEK_V31: "<｜tool▁calls▁begin｜>", LLAMA3_JSON: "<|python_tag|>"}


def tool_family(template: str | None) -> str | None:
    """The tool-call format of a checkpoint, from its chat template's markers (None: the template has none)."""
    source = template or ""
    if "<tool_call>" in source:
        return HERMES  # Qwen2.5/Qwen3, Hermes: vLLM's hermes parser
    if "[TOOL_CALLS]" in source:
        return MISTRAL
    if "<｜tool▁calls▁begin｜>" in source:
        return DEEPSEEK_V3 if "```json" in source else DEEPSEEK_V31
    if "<|channel|>" in source:
        return HARMONY  # gpt-oss
    if "<|python_tag|>" in source or "ipython" in source:
        return LLAMA3_JSON  # Llama 3.1-3.3
    return None


@dataclass
class ToolPlan:
    """What a request's tools ask for: the tools for the template, the family's parser, the forced choice."""

    tools: list[dict[str, Any]]
    family: str | None
    choice: str  # "auto" | "none" | "required" | "named"
    name: str | None = None  # the named function
    schema: dict[str, Any] | None = None  # the guide forcing required / named calls
    keep_special_tokens: bool = False  # the family's markers are special tokens the engine would drop
    single: bool = False  # parallel_tool_calls: false, the first call only


def tool_plan(body: dict[str, Any], template: str | None) -> ToolPlan | None:
    """Validate `tools` / `tool_choice`; None when there are no tools (tool_choice none/auto/absent)."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools in (None, []):
        if choice not in (None, "none", "auto"):
            raise _bad("'tool_choice' needs 'tools'", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of functions", "tools")
    params: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict)
                or not isinstance(function.get("name"), str) or not function["name"]):
            raise _bad(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", "tools")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _bad(f"tools[{i}].function.parameters must be a JSON Schema object", "tools")
        params[function["name"]] = parameters or {"type": "object", "properties": {}}
    family = tool_family(template)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    plan = _tool_plan(tools, params, family, choice)
    # parallel_tool_calls false keeps the first call, as vLLM does (entrypoints/serve/utils/tool_calls_utils.py
    # `maybe_filter_parallel_tool_calls`)
    plan.single = parallel is False
    return plan


def _tool_plan(tools: list[dict[str, Any]], params: dict[str, dict[str, Any]], family: str | None,
               choice: Any) -> ToolPlan:
    if choice in (None, "auto", "none"):
        plan = ToolPlan(tools, family, choice or "auto")
        if plan.choice == "auto":
            if family is None:
                raise _bad("this model's chat template has no tool-call format this server reads (Llama 3.x, "
                           "Qwen/Hermes, Mistral, DeepSeek V3); tool_choice 'required' or a named function still "
                           "work (guided decoding)", "tools")
            if family == HARMONY:
                raise _bad("gpt-oss's tool calls (the harmony format) are not read by this server; use "
                           "tool_choice 'required' or a named function (guided decoding)", "tools")
            # vLLM's hermes and mistral parsers keep special tokens (their markers are special in some checkpoints):
            # tool_parsers/hermes_tool_parser.py `adjust_request`, parser/mistral.py
            plan.keep_special_tokens = family in (HERMES, MISTRAL)
        return plan
    if choice == "required":
        # tool_parsers/utils.py `_get_json_schema_from_tools`: a non-empty array of {name, parameters}
        defs: dict[str, Any] = {}
        variants = []
        for name, schema in params.items():
            schema = dict(schema)
            defs.update(schema.pop("$defs", None) or {})
            variants.append({"properties": {"name": {"type": "string", "enum": [name]}, "parameters": schema},
                             "required": ["name", "parameters"]})
        array: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": variants}}
        if defs:
            array["$defs"] = defs
        return ToolPlan(tools, family, "required", schema=array)
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if name not in params:
            raise _bad(f"tool_choice names '{name}', which is not in 'tools'", "tool_choice")
        # a named function: the output is its arguments (utils.py `get_json_schema_from_tools`, forced function)
        return ToolPlan(tools, family, "named", name=name, schema=params[name])
    raise _bad("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
               "{\"name\": ...}}", "tool_choice")


def _template_tool_calls(calls: Any, i: int) -> list[dict[str, Any]]:
    """An assistant message's tool_calls for the chat template: arguments as objects, not JSON text, as templates
    expect them (vLLM entrypoints/chat_utils.py `_postprocess_messages`)."""
    if not isinstance(calls, list):
        raise _bad(f"messages[{i}].tool_calls must be a list", f"messages[{i}].tool_calls")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad(f"messages[{i}].tool_calls: each call needs a function with a name", f"messages[{i}].tool_calls")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser's stack
                raise _bad(f"messages[{i}].tool_calls: arguments are not JSON", f"messages[{i}].tool_calls") from None
        out.append({**call, "function": {**function, "arguments": arguments}})
    return out


def _call(name: Any, arguments: Any, text: bool = False) -> dict[str, str]:
    """A call from a parsed object: its arguments as JSON text (json.dumps, as vLLM's parsers do, whatever the value),
    or, with `text`, arguments that already are the model's JSON text (regex-read formats, forced calls)."""
    if not isinstance(name, str) or (text and not isinstance(arguments, str)):
        raise TypeError("a tool call's name must be a string")
    return {"name": name, "arguments": arguments if text else json.dumps(arguments, ensure_ascii=False)}


_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_DEEPSEEK_V3_CALL = re.compile(r"<｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<name>.*)\n```json\n(?P<args>.*)"
                               r"\n```<｜tool▁call▁end｜>")
_DEEPSEEK_V31_CALL = re.compile(r"<｜tool▁call▁begin｜>(?P<name>.*?)<｜tool▁sep｜>(?P<args>.*?)<｜tool▁call▁end｜>")


def parse_tool_calls(plan: ToolPlan, text: str) -> tuple[str | None, list[dict[str, str]]]:
    """(content, [{name, arguments (JSON text)}]) from a whole answer. Output that does not parse as the family's
    tool calls is content, as vLLM's parsers return it."""
    content, calls = _parse_tool_calls(plan, text)
    return content, calls[:1] if plan.single else calls


def _parse_tool_calls(plan: ToolPlan, text: str) -> tuple[str | None, list[dict[str, str]]]:
    try:
        if plan.choice == "required":  # vLLM chat_completion/serving.py: the guided JSON array
            return None, [_call(c["name"], c["parameters"]) for c in json.loads(text)]
        if plan.choice == "named":
            return None, [_call(plan.name, text, text=True)]
        family = plan.family
        if family == HERMES:  # tool_parsers/hermes_tool_parser.py `extract_tool_calls`
            if "<tool_call>" not in text:
                return text, []
            calls = [json.loads(a or b) for a, b in _HERMES_CALL.findall(text)]
            content = text[:text.find("<tool_call>")]
            return content or None, [_call(c["name"], c["arguments"]) for c in calls]
        if family == LLAMA3_JSON:  # tool_parsers/llama_tool_parser.py `extract_tool_calls`
            if "<|python_tag|>" not in text and "{" not in text:
                return text, []
            decoder, end, found = json.JSONDecoder(), -1, []
            for match in re.finditer(r"\{", text):
                if match.start() <= end:
                    continue
                obj, length = decoder.raw_decode(text[match.start():])
                end = match.start() + length
                found.append(_call(obj["name"], obj["arguments"] if "arguments" in obj else obj["parameters"]))
            return (None, found) if found else (text, [])
        if family == MISTRAL:  # parser/mistral.py: [TOOL_CALLS][{...}] (before v11), [TOOL_CALLS]name[ARGS]{...}
            if "[TOOL_CALLS]" not in text:
                return text, []
            content, _, rest = text.partition("[TOOL_CALLS]")
            if "[ARGS]" in rest:
                found = []
                for part in rest.split("[TOOL_CALLS]"):
                    name, _, args = part.partition("[ARGS]")
                    found.append(_call(name.strip(), json.JSONDecoder().raw_decode(args.strip())[0]))
            else:
                found = [_call(c["name"], c["arguments"]) for c in json.JSONDecoder().raw_decode(rest.strip())[0]]
            return content or None, found
        if family in (DEEPSEEK_V3, DEEPSEEK_V31):  # tool_parsers/deepseekv3_tool_parser.py, deepseekv31_...
            marker = TOOL_MARKERS[family]
            if marker not in text:
                return text, []
            pattern = _DEEPSEEK_V3_CALL if family == DEEPSEEK_V3 else _DEEPSEEK_V31_CALL
            found = [_call(m.group("name"), m.group("args"), text=True) for m in pattern.finditer(text)]
            content = text[:text.find(marker)]
            return content or None, found
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return text, []  # not a well-formed call: the model's text, as the parsers give it back
    return text, []


def openai_tool_calls(calls: list[dict[str, str]], streaming: bool = False) -> list[dict[str, Any]]:
    out = []
    for index, call in enumerate(calls):
        entry: dict[str, Any] = {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                                 "function": {"name": call["name"], "arguments": call["arguments"]}}
        out.append({"index": index, **entry} if streaming else entry)
    return out


class ToolStream:
    """Streaming with tools: content is sent as it comes until the family's tool-call marker (or the start of one)
    appears; from there the text is held, and at the end it is parsed whole and its calls are sent in one delta
    each, arguments complete (OpenAI's clients assemble deltas; a call's arguments arriving whole is a valid
    stream). Forced calls (required / named) are held from the start."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.text = ""     # everything so far
        self.sent = 0      # how much of it went out as content
        self.holding = plan.choice in ("required", "named")

    def feed(self, text: str) -> str:
        """New text -> the content that may go out now."""
        self.text += text
        if self.holding:
            return ""
        family = self.plan.family
        if family == LLAMA3_JSON and self.text.lstrip()[:1] == "{":  # llama_tool_parser.py: JSON from the start
            self.holding = True
            return ""
        marker = TOOL_MARKERS.get(family or "", "")
        at = self.text.find(marker, self.sent) if marker else -1
        if at >= 0:
            self.holding = True
            out, self.sent = self.text[self.sent:at], at
            return out
        # keep back a tail that may be the start of the marker
        keep = next((k for k in range(min(len(marker) - 1, len(self.text) - self.sent), 0, -1)
                     if marker.startswith(self.text[-k:])), 0) if marker else 0
        end = len(self.text) - keep
        out, self.sent = self.text[self.sent:end], end
        return out

    def finish(self) -> tuple[str, list[dict[str, str]]]:
        """At the end: (content still to send, the tool calls)."""
        held = self.text[self.sent:]
        if not self.holding:
            return held, []
        content, calls = parse_tool_calls(self.plan, self.text)
        if not calls:
            return held, []  # not calls after all: the held text is content
        already = self.text[:self.sent]
        rest = (content or "")[len(already):] if (content or "").startswith(already) else ""
        return rest, calls


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

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        if self.unavailable:
            raise OpenAIError(500, f"{self.unavailable}; use /v1/completions", "server_error")
        if self._template is None:
            raise _bad("this model's checkpoint has no chat template (tokenizer_config.json chat_template); "
                       "use /v1/completions", "messages")
        try:
            prompt = self._template.render(messages=messages, tools=tools, add_generation_prompt=True,
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
            final = False  # the last response ends the request: it carries a finish_reason (the model interface)
            for raw in response:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:].strip())
                if "error" in event:
                    raise _triton_error(400, line[5:].strip().encode())
                final = bool(_first(event, "finish_reason"))
                yield event
            if not final:
                # Triton closed the stream before the model's final response: it gave up on the request (shutdown
                # past --exit-timeout-secs) or it died. What came is not the answer.
                raise OpenAIError(503, "the inference server stopped before the answer was complete (it is shutting "
                                  "down or restarting); retry the request", "server_error")
        finally:
            conn.close()  # closing mid-stream lets Triton cancel the request


# How the pinned engines word a prompt that leaves no room in the context (their error reaches us as text):
# TensorRT-LLM 1.2.1 executor/base_worker.py `_enqueue_request._deduce_max_tokens` ("`default_max_tokens` (N) must
# be greater than 0 ..."); vLLM 0.31.0 v1/engine/input_processor.py `InputProcessor._validate_model_input` ("The
# decoder prompt (length N) is longer than the maximum model length of M"). The stand-ins (dev/standins) say the same.
_ENGINE_CONTEXT_OVERFLOW = re.compile(r"`default_max_tokens` \(-?\d+\) must be greater than 0|maximum model length")


class ContextOverflow(OpenAIError):
    """The engine refused the prompt as longer than its context; Frontend turns it into context_exceeded()."""


# How the serving models (render/models) begin the message of a failure that is not the request's fault: the engine
# died (the replica restarts: 503, retry elsewhere), the engine failed this one request, the model was unloading
# (500). Their Triton error codes say the same (UNAVAILABLE, INTERNAL), but Triton's HTTP generate endpoints answer
# every error response with 400 whatever its code (measured on 2.51), so the words decide.
ENGINE_DEAD = "engine failed:"
SERVER_FAILURES = ("engine error:", "the model is unloading")


def _triton_error(status: int, data: bytes) -> OpenAIError:
    text = data.decode(errors="replace").strip()
    if text.startswith("data:"):  # generate_stream's first response, an error: one server-sent event
        text = text[5:].strip()
    try:
        message = str(json.loads(text).get("error", ""))
    except (ValueError, AttributeError):
        message = text[:500]
    if message.startswith(ENGINE_DEAD):
        return OpenAIError(503, f"inference failed, the replica restarts; retry the request: {message}",
                           "server_error")
    if message.startswith(SERVER_FAILURES):
        return OpenAIError(500, f"inference failed: {message}", "server_error")
    if 400 <= status < 500:
        if _ENGINE_CONTEXT_OVERFLOW.search(message):
            log.info("the engine refused a prompt over the context limit: %s", message)
            return ContextOverflow(400, message, code="context_length_exceeded")
        # a guide the engine's grammar backend cannot compile: its reason, on the field that asked for it
        param = "response_format" if GUIDE_ERROR in message else None
        return OpenAIError(400, f"the model rejected the request: {message}", param=param)
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
    n: int = 1  # choices
    logprobs: int | None = None  # alternatives per token in the answer's logprobs; None: no logprobs
    tools: ToolPlan | None = None  # how tool calls are asked for and read back; None: no tools
    model: str = ""  # the model the request named (the base's or an adapter's): what the answer names
    responses: dict[str, Any] | None = None  # a /v1/responses request's body: the chat answer is given as a Response
    # (or, streamed, as its events)


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
        responses = None
        if path == "/v1/responses":
            responses, body, path = body, chat_body_from_responses(body), "/v1/chat/completions"
        adapter = _check_model(body, self.served_model, self.adapters.current())
        kind = "chat" if path == "/v1/chat/completions" else "text"
        check_fields(body, kind)
        inputs = sampling_inputs(body, self.context_limit)
        inputs.update(guided_inputs(body))
        choices, top_logprobs = choice_inputs(body, kind)
        inputs.update(choices)
        check_answer_size(bool(body.get("stream")), choices.get("num_return_sequences", 1), inputs["max_tokens"],
                          top_logprobs)
        tools = tool_plan(body, self.template.source) if kind == "chat" else None
        if tools is not None:
            if tools.schema is not None:  # required / named: the calls are the guided output
                if inputs.get(GUIDE_TYPE):
                    raise _bad("'response_format' cannot be combined with tool_choice 'required' or a named "
                               "function (the tool call is the structured output)", "response_format")
                inputs.update({GUIDE_TYPE: "json_schema", GUIDE: json.dumps(tools.schema)})
            if tools.keep_special_tokens:
                inputs["skip_special_tokens"] = False
        if kind == "chat":
            rendered_tools = tools.tools if tools is not None else None
            prompt_param, prompt = "messages", self.template.render(chat_messages(body), rendered_tools)
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
                        prompt_param, max_tokens, choices.get("num_return_sequences", 1), top_logprobs, tools,
                        body["model"], responses)

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
        if request.stream and request.responses is not None:
            self._stream_response(request, conn, events)
        elif request.stream:
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
        choices: dict[int, _Choice] = {}
        prompt_tokens = completion_tokens = 0

        def collect() -> None:
            nonlocal prompt_tokens, completion_tokens
            for event in events:
                _choice(choices, event).add(event)
                prompt_tokens = max(prompt_tokens, int(_first(event, "num_input_tokens") or 0))
                completion_tokens = max(completion_tokens, int(_first(event, "num_output_tokens") or 0))

        self._until_answered(conn, collect)
        kind = request.kind
        rid, created, model = _ids(kind), int(time.time()), request.model or self.frontend.served_model
        answers = []
        for index in range(request.n):
            choice = choices.get(index) or _Choice()
            text, finish = "".join(choice.text), choice.finish or "stop"
            logprobs = None
            if request.logprobs is not None:
                logprobs = chat_logprobs(choice.logprobs) if kind == "chat" else completion_logprobs(choice.logprobs)
            if kind == "chat":
                message: dict[str, Any] = {"role": "assistant", "content": text}
                plan = request.tools
                if plan is not None and plan.choice != "none":
                    content, calls = parse_tool_calls(plan, text)
                    if calls:
                        message = {"role": "assistant", "content": content, "tool_calls": openai_tool_calls(calls)}
                        finish = "tool_calls"
                answers.append({"index": index, "message": message, "finish_reason": finish, "logprobs": logprobs})
            else:
                answers.append({"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs})
        answer = {"id": rid, "object": "chat.completion" if kind == "chat" else "text_completion",
                  "created": created, "model": model, "choices": answers, "usage": _usage(prompt_tokens, completion_tokens)}
        self._json(200, answer if request.responses is None else response_from_chat(answer, request.responses))

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

        offsets: dict[int, int] = {}  # completions' text_offset: the text each choice has had so far
        plan = request.tools
        streams = {i: ToolStream(plan) for i in range(request.n)} if plan is not None and plan.choice != "none" \
            else None
        held: dict[int, list[Any]] = {}  # logprob entries of text held back (tool calls), per choice

        def choice(index: int, text: str, finish: str | None, entries: list[Any] | None,
                   role: bool = False) -> dict[str, Any]:
            logprobs = None
            if request.logprobs is not None and not role:
                logprobs = chat_logprobs(entries or []) if kind == "chat" else \
                    completion_logprobs(entries or [], offsets.get(index, 0))
            offsets[index] = offsets.get(index, 0) + len(text)
            if kind == "chat":
                delta = {"role": "assistant", "content": text} if role else {"content": text}
                return {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
            return {"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}

        try:
            if kind == "chat":
                for index in range(request.n):
                    chunk([choice(index, "", None, None, role=True)])
            pending = [first] if first is not None else []
            for event in _chain(pending, events):
                prompt_tokens = max(prompt_tokens, int(_first(event, "num_input_tokens") or 0))
                completion_tokens = max(completion_tokens, int(_first(event, "num_output_tokens") or 0))
                text, finish = _first(event, "text_output") or "", _first(event, "finish_reason") or None
                if not (text or finish):
                    continue
                index = int(_first(event, "sequence_index") or 0)
                tools = streams.get(index) if streams is not None else None
                if tools is None:
                    chunk([choice(index, text, finish, _entries(event))])
                    continue
                held[index] = held.get(index, []) + _entries(event)
                content = tools.feed(text)
                calls: list[dict[str, str]] = []
                if finish:
                    rest, calls = tools.finish()
                    content += rest
                if content or (finish and not calls):
                    chunk([choice(index, content, None if calls else finish, held.pop(index, []))])
                if calls:
                    chunk([{"index": index, "delta": {"tool_calls": openai_tool_calls(calls, streaming=True)},
                            "finish_reason": "tool_calls", "logprobs": None}])
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

    def _stream_response(self, request: Prepared, conn: http.client.HTTPConnection,
                         events: Iterator[dict[str, Any]]) -> None:
        """A /v1/responses request with `stream: true`: the Responses API's events (ResponseEvents), with tool calls
        read as chat's streaming reads them (ToolStream: text held from the family's marker on, calls parsed at the
        end). No `[DONE]`: the Responses stream ends with its response.completed (or .incomplete) event."""
        assert request.responses is not None
        first = self._until_answered(conn, lambda: next(events, None))  # errors until here: a plain HTTP error
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        out = ResponseEvents(request.responses, request.model or self.frontend.served_model, int(time.time()))
        plan = request.tools
        tools = ToolStream(plan) if plan is not None and plan.choice != "none" else None
        prompt_tokens = completion_tokens = 0
        finish = None
        try:
            self._send_response_events(out.start())
            for event in _chain([first] if first is not None else [], events):
                prompt_tokens = max(prompt_tokens, int(_first(event, "num_input_tokens") or 0))
                completion_tokens = max(completion_tokens, int(_first(event, "num_output_tokens") or 0))
                text = _first(event, "text_output") or ""
                finish = _first(event, "finish_reason") or finish
                content = tools.feed(text) if tools is not None else text
                if content:
                    self._send_response_events(out.text_delta(content))
            calls: list[dict[str, str]] = []
            if tools is not None:
                rest, calls = tools.finish()
                if rest:
                    self._send_response_events(out.text_delta(rest))
            status = "incomplete" if finish == "length" and not calls else "completed"
            self._send_response_events(out.finish(calls, status, _usage(prompt_tokens, completion_tokens)))
        except OpenAIError as exc:
            self._send_response_events(out.failed(exc))
        except OSError:
            conn.close()  # the client left: drop the Triton stream (cancels the request)
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def _send_response_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:  # named as OpenAI's server names them (`event:`); the client reads `type` in the data
            self._send_event(json.dumps(event), event["type"])

    def _send_event(self, data: str, name: str | None = None) -> None:
        payload = (f"event: {name}\n" if name else "").encode() + f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()


class _Choice:
    """One choice of a non-streaming answer, put together from the model's responses for it."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.finish: str | None = None
        self.logprobs: list[Any] = []

    def add(self, event: dict[str, Any]) -> None:
        self.text.append(_first(event, "text_output") or "")
        self.finish = _first(event, "finish_reason") or self.finish
        self.logprobs += _entries(event)


def _choice(choices: dict[int, _Choice], event: dict[str, Any]) -> _Choice:
    return choices.setdefault(int(_first(event, "sequence_index") or 0), _Choice())


def _entries(event: dict[str, Any]) -> list[Any]:
    """A model response's logprobs output: JSON text of [token, logprob, [[alternative, logprob], ...]] per token."""
    raw = _first(event, "logprobs")
    if not raw:
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        raise OpenAIError(502, "the model sent malformed logprobs", "server_error") from None
    return entries if isinstance(entries, list) else []


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
