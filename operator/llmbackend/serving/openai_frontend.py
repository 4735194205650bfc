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
`num_output_tokens` (taken as running totals: the largest value seen is the count).
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from datetime import datetime
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
DEFAULT_MAX_TOKENS = 256


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


def sampling_inputs(body: dict[str, Any]) -> dict[str, Any]:
    """Triton inputs for the OpenAI sampling fields (validated; absent fields are left to the engine)."""
    inputs: dict[str, Any] = {}
    max_tokens = _integer(body, "max_completion_tokens", 1, 1 << 20) or _integer(body, "max_tokens", 1, 1 << 20)
    inputs["max_tokens"] = max_tokens or DEFAULT_MAX_TOKENS
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
    n = body.get("n", 1)
    if n != 1:
        raise _bad("only n=1 is supported", "n")
    for name in ("logprobs", "top_logprobs", "echo", "tools", "functions", "suffix"):
        if body.get(name):
            raise _bad(f"'{name}' is not supported by this server", name)
    if body.get("best_of", 1) != 1:
        raise _bad("only best_of=1 is supported", "best_of")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    return inputs


def _check_model(body: dict[str, Any], served: str) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required (see GET /v1/models)", "model")
    if model != served:
        raise OpenAIError(404, f"The model '{model}' does not exist; this server serves '{served}'",
                          param="model", code="model_not_found")


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
                    raise _triton_error(400, json.dumps(event).encode())
                yield event
        finally:
            conn.close()  # closing mid-stream lets Triton cancel the request


def _triton_error(status: int, data: bytes) -> OpenAIError:
    try:
        message = json.loads(data).get("error", "")
    except ValueError:
        message = data[:500].decode(errors="replace")
    if 400 <= status < 500:
        return OpenAIError(400, f"the model rejected the request: {message}")
    return OpenAIError(502 if status >= 500 else status, f"inference failed: {message}", "server_error")


def _first(event: dict[str, Any], name: str) -> Any:
    value = event.get(name)
    return value[0] if isinstance(value, list) and value else value


# ---- the HTTP server ----


class Frontend:
    def __init__(self, triton: Triton, served_model: str, template: ChatTemplate, metrics_url: str | None,
                 max_body_bytes: int, body_budget_bytes: int):
        self.triton, self.served_model, self.template, self.metrics_url = triton, served_model, template, metrics_url
        self.created = int(time.time())
        self.max_body_bytes = max_body_bytes
        self.bodies = http_body.BodyBudget(body_budget_bytes)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.served_model, "object": "model", "created": self.created,
                                            "owned_by": "llmbackend"}]}

    def prepare(self, path: str, body: Any) -> tuple[str, dict[str, Any], bool, bool]:
        """(kind, Triton inputs, stream, include_usage) for a request body, or OpenAIError."""
        if not isinstance(body, dict):
            raise _bad("the request body must be a JSON object")
        _check_model(body, self.served_model)
        inputs = sampling_inputs(body)
        if path == "/v1/chat/completions":
            kind, prompt = "chat", self.template.render(chat_messages(body))
        else:
            kind, prompt = "text", completion_prompt(body)
        stream = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        inputs.update(text_input=prompt, stream=stream, exclude_input_in_output=True,
                      return_num_input_tokens=True, return_num_output_tokens=True)
        return kind, inputs, stream, bool(options.get("include_usage"))


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class Handler(http_body.BoundedHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmbackend-openai"
    frontend: Frontend  # set on the subclass by serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, error: OpenAIError) -> None:
        data = json.dumps(error.body()).encode()
        self.send_response(error.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if error.retry_after is not None:
            self.send_header("Retry-After", str(error.retry_after))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?")[0]
        if path == "/v1/models":
            self._json(200, self.frontend.models())
        elif path == f"/v1/models/{self.frontend.served_model}":
            self._json(200, self.frontend.models()["data"][0])
        elif path == "/metrics" and self.frontend.metrics_url:
            self._metrics()
        elif path == "/health":
            ready = self.frontend.triton.ready()
            self._json(200 if ready else 503, {"status": "ok" if ready else "model not ready"})
        else:
            self._error(OpenAIError(404, f"no route {path}", code="not_found"))

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
            self._error(OpenAIError(503, f"Triton metrics not reachable: {exc}", "server_error"))
            return
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?")[0]
        try:
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self.close_connection = True  # its body is not read
                raise OpenAIError(404, f"no route {path}", code="not_found")
            frontend = self.frontend
            try:
                length = http_body.declared_length(self.headers, frontend.max_body_bytes)
                # A chunked body may be as large as the cap: reserve that, give back the rest once it is read.
                with frontend.bodies.reserve(frontend.max_body_bytes if length is None else length,
                                             wait_s=BODY_WAIT_S) as reservation:
                    kind, conn, stream, include_usage = self._send_to_triton(path, reservation)
            except http_body.BodyError as exc:
                self.close_connection = True  # what follows a refused body is not a request
                raise OpenAIError(exc.status, exc.message, "server_error" if exc.status >= 500 else
                                  "invalid_request_error", code="request_body", retry_after=exc.retry_after) from None
            events = frontend.triton.events(conn)
            if stream:
                self._stream(kind, events, include_usage)
            else:
                self._complete(kind, events)
        except OpenAIError as exc:
            self._error(exc)
            if self.close_connection:  # its body was not read
                http_body.discard_rest(self.connection)
        except Exception:  # noqa: BLE001 - one bad request must not take the server down
            log.exception("request failed")
            self._error(OpenAIError(500, "internal error in the OpenAI frontend", "server_error"))

    def _send_to_triton(self, path: str,
                        reservation: http_body.Reservation) -> tuple[str, http.client.HTTPConnection, bool, bool]:
        """Read and parse the body, send the request to Triton: (kind, its connection, stream, include_usage). The
        body, its parse and the prompt live only in this frame, freed before the budget is given back."""
        raw = http_body.read_body(self.headers, self.rfile, self.frontend.max_body_bytes, BODY_TIMEOUT_S,
                                  self.connection)
        reservation.shrink(len(raw))
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise _bad(f"the request body is not valid JSON: {exc}") from None
        kind, inputs, stream, include_usage = self.frontend.prepare(path, body)
        return kind, self.frontend.triton.send(inputs), stream, include_usage

    def _complete(self, kind: str, events: Generator[dict[str, Any], None, None]) -> None:
        text, finish, prompt_tokens, completion_tokens = [], None, 0, 0
        for event in events:
            text.append(_first(event, "text_output") or "")
            finish = _first(event, "finish_reason") or finish
            prompt_tokens = max(prompt_tokens, int(_first(event, "num_input_tokens") or 0))
            completion_tokens = max(completion_tokens, int(_first(event, "num_output_tokens") or 0))
        rid, created, model = _ids(kind), int(time.time()), self.frontend.served_model
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                      "finish_reason": finish or "stop", "logprobs": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": "".join(text), "finish_reason": finish or "stop", "logprobs": None}
            obj = "text_completion"
        self._json(200, {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                         "usage": _usage(prompt_tokens, completion_tokens)})

    def _stream(self, kind: str, events: Generator[dict[str, Any], None, None], include_usage: bool) -> None:
        first = next(events, None)  # errors before the first response still get a plain HTTP error
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        rid, created, model = _ids(kind), int(time.time()), self.frontend.served_model
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
        except (BrokenPipeError, ConnectionResetError):
            events.close()  # the client left: drop the Triton stream (cancels the request)
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
    # So do the head and connection limits (the memory one connection holds is bounded by them).
    ap.add_argument("--max-header-bytes", type=int, required=True,
                    help="request line and headers of one request together, in bytes; more get 431")
    ap.add_argument("--header-timeout", type=float, required=True,
                    help="seconds for the request line and headers to arrive; then 408 and close")
    ap.add_argument("--max-connections", type=int, required=True,
                    help="connections at once (a thread each); more get 503 with Retry-After at once")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    template = ChatTemplate.load(a.tokenizer_dir)
    if template.source is None:
        log.warning("no chat template under %s: /v1/chat/completions answers 400", a.tokenizer_dir)
    served = a.served_model_name or a.model
    if a.body_budget_bytes < a.max_body_bytes:
        ap.error("--body-budget-bytes must hold at least one body of --max-body-bytes")
    frontend = Frontend(Triton(a.triton_url, a.model), served, template, a.metrics_url, a.max_body_bytes,
                        a.body_budget_bytes)
    log.info("serving model %s on %s:%d (Triton model %s at %s)", served, a.host, a.port, a.model, a.triton_url)
    serve(a.host, a.port, frontend, max_connections=a.max_connections, max_header_bytes=a.max_header_bytes,
          header_timeout_s=a.header_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
