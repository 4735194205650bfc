"""The official `openai` client against the operator's OpenAI frontend in front of a real tritonserver.

Everything comes from what the operator renders for a tensorrtllm and a vllm backend: Triton serves the ConfigMap's
model repository (the LLM API model or the vLLM model, with the CPU stand-in engine as the only stand-in), and the
frontend is the
ConfigMap's `openai-frontend.py` (and its `http_body.py`) run with the rendered container's arguments (addresses made local; the
checkpoint's tokenizer_config.json is tests/openai/tokenizer). A "token" of the stand-in is a whitespace-separated
word and its reply repeats the prompt's words, so the expected counts below follow from the prompts, and the chat
prompt is what the checkpoint's chat template makes of the messages.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import pytest

from devcluster.tritonserver import available
from llmbackend.api import engine_metrics as em

# No conftest.py here: tests/e2e's tests import theirs as `conftest`, and a second one would shadow it.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "triton")]
from harness import free_port  # noqa: E402
from llmapi_support import backend_spec, metric, metrics, serve  # noqa: E402
from servers import frontend_files, local_args, run_frontend  # noqa: E402

pytest.importorskip("openai", reason="pip install -e '.[test]' (the official openai client)")
pytest.importorskip("jinja2", reason="pip install -e '.[test]' (chat templates)")

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

HERE = Path(__file__).resolve().parent
MODEL = "llama-3.1-8b"  # the preset: the Triton model and the OpenAI model id
TOKENIZER = HERE / "tokenizer"
# The engine's context limit (maxSeqLen), small so that a completion may run to it within seconds (the stand-in
# decodes a token per 20 ms).
CONTEXT = 300


@pytest.fixture(scope="module", params=["tensorrtllm", "vllm"])
def stack(request, tmp_path_factory):
    """(the frontend's base URL, the tritonserver, the Triton model's name, the backend)."""
    backend = request.param
    spec = backend_spec(4, maxSeqLen=CONTEXT, maxInputLen=CONTEXT - 1, backend=backend)
    workdir = tmp_path_factory.mktemp("openai")
    program, container_args = frontend_files(spec, workdir)
    # both stand-ins decode a token per 20 ms (the vLLM one's default is 10 ms)
    with mock.patch.dict(os.environ, VLLM_STANDIN_STEP_S="0.02"), serve(spec, workdir) as (server, name):
        assert name == MODEL
        with frontend(program, container_args, server, TOKENIZER) as url:
            yield url, server, name, backend


def frontend(program: Path, container_args: list[str], server, tokenizer: Path):
    """A frontend process for this tritonserver, reading the checkpoint's tokenizer_config.json from `tokenizer`."""
    port = free_port()
    return run_frontend(program, local_args(container_args, server.http_url, server.metrics_url, str(tokenizer),
                                            port), port)


@pytest.fixture(scope="module")
def base_url(stack):
    return stack[0]


@pytest.fixture(scope="module")
def client(base_url):
    import openai

    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)


def _chat_prompt_words(messages: list[dict[str, str]]) -> int:
    """Words of the prompt the template in tests/openai/tokenizer renders (BOS dropped by the frontend)."""
    lines = [f"<|{m['role']}|> {m['content']}" for m in messages]
    return len(("\n".join(lines) + "\n<|assistant|>").split())


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_completion_text_and_usage(client):
    prompt = "one two three"
    result = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5)
    text = result.choices[0].text
    assert text.split() == ["one", "two", "three", "one", "two"]  # the stand-in repeats the prompt
    assert result.choices[0].finish_reason == "length"
    assert result.usage.prompt_tokens == len(prompt.split())
    assert result.usage.completion_tokens == 5
    assert result.usage.total_tokens == len(prompt.split()) + 5


def test_completion_streaming_matches_non_streaming(client):
    prompt = "the quick brown fox"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4).choices[0].text
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    # the first token alone, then a chunk per token while the server keeps up; under load the serving models coalesce
    # what a stream gained while its response waited (vllm_engine.py / trtllm_llmapi.py, "Streaming cost"): CI saw
    # [' the', ' quick brown fox']
    assert len(texts) >= 2 and texts[0] == whole[:len(texts[0])]
    assert "".join(texts) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (len(prompt.split()), 4)


def test_chat_uses_the_checkpoint_chat_template(client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    result = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)
    assert result.object == "chat.completion"
    assert result.choices[0].message.role == "assistant"
    assert len(result.choices[0].message.content.split()) == 3
    assert result.usage.prompt_tokens == _chat_prompt_words(messages)
    assert result.usage.completion_tokens == 3


def test_chat_streaming(client):
    messages = [{"role": "user", "content": [{"type": "text", "text": "stream "}, {"type": "text", "text": "please"}]}]
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    content = "".join(d.content or "" for d in deltas)
    assert len(content.split()) == 6
    assert chunks[-1].usage.prompt_tokens == _chat_prompt_words([{"role": "user", "content": "stream please"}])
    assert chunks[-1].usage.completion_tokens == 6


def test_stop_sequence_ends_with_stop(client):
    result = client.completions.create(model=MODEL, prompt="alpha beta gamma delta omega", max_tokens=20, stop=["delta"])
    assert result.choices[0].finish_reason == "stop"
    assert result.choices[0].text.split() == ["alpha", "beta", "gamma"]


@pytest.mark.parametrize("kwargs, param", [
    ({"model": MODEL, "messages": []}, "messages"),                            # no messages
    ({"model": MODEL, "messages": "hi"}, "messages"),                          # wrong type
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": 7}, "temperature"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
    ({"model": MODEL, "messages": [{"role": "tool-x", "content": "x"}]}, "messages"),  # the template refuses
])
def test_malformed_chat_gets_openai_error_and_server_keeps_serving(client, kwargs, param):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**kwargs)
    error = info.value.body
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]
    ok = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "still there"}], max_tokens=1)
    assert ok.choices[0].message.content.strip()


def test_unknown_model_is_404_model_not_found(client):
    import openai

    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="no-such-model", prompt="x")
    assert info.value.body["code"] == "model_not_found"


def test_invalid_json_body(base_url):
    request = urllib.request.Request(f"{base_url}/completions", data=b"{not json", method="POST",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310 - loopback
    assert info.value.code == 400
    assert json.loads(info.value.read())["error"]["type"] == "invalid_request_error"


def test_metrics_are_relayed_on_the_openai_port(base_url, client):
    client.completions.create(model=MODEL, prompt="count me", max_tokens=1)
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    assert f'nv_inference_request_success{{model="{MODEL}",version="1"}}' in text
    # what the Inference Extension's endpoint picker reads on this port
    assert f'{em.REQUEST_GAUGE}{{' in text and f'{em.KV_GAUGE}{{' in text


# ---- what clients depend on, as OpenAI's API does it (issue 46, item 6) ----


@pytest.mark.parametrize("endpoint, kwargs, param", [
    ("chat", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", {"reasoning_effort": "high"}, "reasoning_effort"),
    ("chat", {"extra_body": {"guided_json": {"type": "object"}}}, "guided_json"),
    ("text", {"echo": True}, "echo"),
    ("text", {"suffix": "the end"}, "suffix"),
    ("text", {"best_of": 2}, "best_of"),
])
def test_what_the_server_does_not_do_is_a_400_naming_it(client, endpoint, kwargs, param):
    """Before: response_format, tool_choice, logit_bias and others were accepted and dropped (200 with free text).
    (response_format, n, logprobs and tools are served now: test_openai_features.py.)"""
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        if endpoint == "chat":
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                           **kwargs)
        else:
            client.completions.create(model=MODEL, prompt="hi", max_tokens=2, **kwargs)
    error = info.value.body
    assert (error["param"], error["type"]) == (param, "invalid_request_error")
    assert "not supported" in error["message"] or "Unrecognized" in error["message"]


def test_without_max_tokens_the_completion_runs_to_the_context_limit(client, base_url):
    """Before: every reply stopped at 256 tokens. Now, as OpenAI: up to the context limit, which /v1/models states."""
    with urllib.request.urlopen(f"{base_url}/models", timeout=10) as response:  # noqa: S310 - loopback
        assert json.loads(response.read())["data"][0]["max_model_len"] == CONTEXT
    prompt = "one two three"
    result = client.completions.create(model=MODEL, prompt=prompt)
    assert result.choices[0].finish_reason == "length"
    assert result.usage.prompt_tokens == 3
    assert result.usage.completion_tokens == CONTEXT - 3
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go on"}],
                                          max_completion_tokens=4)
    assert chat.usage.completion_tokens == 4  # max_completion_tokens is max_tokens' newer name


def _assert_context_error(error, param):
    assert error["code"] == "context_length_exceeded" and error["param"] == param, error
    assert error["message"].startswith(f"This model's maximum context length is {CONTEXT} tokens"), error
    assert "data:" not in error["message"] and "default_max_tokens" not in error["message"]  # no engine text


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_context_length_exceeded(client, stream):
    """Before: 400 with code null, param null and the engine's raw SSE line as the message (so LiteLLM raised a plain
    BadRequestError, and context-window fallbacks never fired)."""
    import openai

    long_prompt = " ".join(f"w{i}" for i in range(CONTEXT + 5))
    cases = [  # (call, param)
        # the prompt alone does not fit: the engine refuses it
        (lambda: client.completions.create(model=MODEL, prompt=long_prompt, stream=stream), "prompt"),
        # the prompt fits, prompt + max_tokens does not: refused once the engine has counted the prompt
        (lambda: client.completions.create(model=MODEL, prompt="a b c d e f g h i j", max_tokens=CONTEXT - 5,
                                           stream=stream), "prompt"),
        (lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a b c"}],
                                                max_tokens=CONTEXT - 2, stream=stream), "messages"),
        # max_tokens alone leaves no room
        (lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                max_completion_tokens=CONTEXT, stream=stream), "messages"),
    ]
    for call, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            result = call()
            if stream:
                list(result)
        _assert_context_error(info.value.body, param)
    # exactly at the limit is fine
    fits = client.completions.create(model=MODEL, prompt="a b c d e f g h i j", max_tokens=4)
    assert fits.usage.completion_tokens == 4


def test_a_request_over_the_limit_does_not_keep_decoding(stack, client):
    """prompt + max_tokens over the limit: the engine request is cancelled once the prompt is counted (the engines
    themselves would cut max_tokens to what is left and generate all of it)."""
    import openai

    _, server, name, backend = stack
    before = _finished(server, name, backend)
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="a b c", max_tokens=CONTEXT - 1)
    assert time.monotonic() - started < 3  # CONTEXT - 3 tokens at 20 ms each would take ~6 s
    _wait_engine_idle(server, name, backend, before)


def _finished(server, name, backend):
    """Requests the engine finished, cancelled ones included (the TensorRT-LLM model counts them; for vLLM the
    running gauge tells)."""
    return metric(metrics(server), em.ENGINE_REQUESTS_METRIC, name) if backend == "tensorrtllm" else 0


def _wait_engine_idle(server, name, backend, finished_before, within_s=3.0):
    deadline = time.monotonic() + within_s
    while True:
        now = metrics(server)
        if backend == "tensorrtllm":
            idle = (metric(now, em.ENGINE_REQUESTS_METRIC, name) > finished_before
                    and metric(now, em.REQUEST_GAUGE, name, request_type="active") == 0)
        else:
            idle = metric(now, em.VLLM_RUNNING_GAUGE, name) == 0
        if idle:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the engine still decodes the request {within_s:g} s later")
        time.sleep(0.2)


def test_a_client_that_gives_up_cancels_its_engine_request(stack):
    """A non-streaming request whose client times out: the frontend notices the closed socket and cancels the Triton
    request, so the engine stops decoding. Before: the engine went on to the end (~5 s here, ~30 s in the report),
    and every client retry added another orphan."""
    import openai

    base_url, server, name, backend = stack
    impatient = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=1.0)
    before = _finished(server, name, backend)
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(model=MODEL, prompt="keep talking", max_tokens=CONTEXT - 10)  # ~6 s of decode
    _wait_engine_idle(server, name, backend, before, within_s=2.5)


# raw HTTP/1.1 on one keep-alive connection, as a client's connection pool uses it


def _exchange(sock: socket.socket, method: str, path: str, body: bytes | None = None,
              headers: str = "") -> tuple[int, dict[str, str], bytes]:
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n{headers}"
    if body is not None and "Transfer-Encoding" not in headers:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    sock.sendall(head.encode() + b"\r\n" + (body or b""))
    reader = sock.makefile("rb")
    status = int(reader.readline().split()[1])
    fields: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode().partition(":")
        fields[key.strip().lower()] = value.strip()
    if fields.get("transfer-encoding") == "chunked":
        data = b""
        while (size := int(reader.readline().strip(), 16)) > 0:
            data += reader.read(size)
            reader.readline()
        reader.readline()
    else:
        data = reader.read(int(fields.get("content-length", "0")))
    return status, fields, data


@pytest.fixture
def connection(base_url):
    url = urlsplit(base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    yield sock
    sock.close()


COMPLETION = json.dumps({"model": MODEL, "prompt": "still usable", "max_tokens": 2}).encode()


@pytest.mark.parametrize("method, path, status", [
    ("POST", "/v1/files", 404), ("POST", "/v1/embeddings", 404), ("POST", "/v2/anything", 404),
    ("PUT", "/v1/chat/completions", 405), ("DELETE", "/v1/models", 405), ("GET", "/v1/responses", 404),
    ("POST", "/v1/responses", 400),  # served: the input below is over the context limit
    ("GET", "/v1/models/other-model", 404),
])
def test_unknown_routes_answer_json_and_leave_the_connection_usable(connection, method, path, status):
    """Before: the 404 left the body unread and the next request on the pooled connection failed (501 or HTML)."""
    body = json.dumps({"model": MODEL, "input": "hello " * 2000}).encode()
    answered, fields, data = _exchange(connection, method, path, body)
    assert answered == status and fields["content-type"] == "application/json", (answered, fields)
    assert json.loads(data)["error"]["message"]
    assert fields.get("connection") != "close"
    again, _, data = _exchange(connection, "POST", "/v1/completions", COMPLETION)
    assert again == 200, data
    assert json.loads(data)["usage"]["completion_tokens"] == 2


def test_a_chunked_body_is_accepted_and_the_connection_stays_usable(connection):
    chunks = b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for piece in (COMPLETION[:10], COMPLETION[10:]))
    for _ in range(2):
        status, _, data = _exchange(connection, "POST", "/v1/completions", chunks + b"0\r\n\r\n",
                                    "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n")
        assert status == 200, data


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,                                            # deeper than the parser's stack
    b'{"model": "' + MODEL.encode() + b'", "prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"model": "\xff\xfe"}',                                                    # not UTF-8
    b"{not json",
    b"",
])
def test_malformed_bodies_are_400_never_500(connection, body):
    """Before: a 100k-deep JSON body was a 500 (RecursionError)."""
    status, fields, data = _exchange(connection, "POST", "/v1/completions", body)
    assert status == 400, data
    assert json.loads(data)["error"]["type"] == "invalid_request_error"
    assert _exchange(connection, "POST", "/v1/completions", COMPLETION)[0] == 200  # and the server keeps serving


def test_every_answer_carries_an_x_request_id(client, connection):
    """Echoed when the client sends a sane one, generated otherwise: on answers, errors, streams and 404s."""
    raw = client.completions.with_raw_response.create(model=MODEL, prompt="id please", max_tokens=1,
                                                      extra_headers={"x-request-id": "trace-42"})
    assert raw.headers["x-request-id"] == "trace-42"
    generated = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=1)
    assert generated.headers["x-request-id"].startswith("req_")
    with client.completions.with_streaming_response.create(model=MODEL, prompt="a b", max_tokens=2, stream=True,
                                                           extra_headers={"x-request-id": "stream-7"}) as response:
        assert response.headers["x-request-id"] == "stream-7"
    seen = set()
    for method, path, body, headers in [
        ("GET", "/v1/models", None, ""), ("POST", "/v1/embeddings", b"{}", ""), ("POST", "/v1/completions", b"{", ""),
        ("GET", "/health", None, "x-request-id: has space\r\n"),
        ("POST", "/v1/completions", COMPLETION, "X-Request-Id: mine-1\r\n"),
    ]:
        _, fields, _ = _exchange(connection, method, path, body, headers)
        assert fields.get("x-request-id"), (method, path, fields)
        seen.add(fields["x-request-id"])
    assert "mine-1" in seen and "has space" not in seen
    assert len(seen) == 5  # a fresh one per request
    # a request line the server cannot parse: still JSON, still an id, and the connection closed
    status, fields, data = _exchange(connection, "BREW", "/v1/models")
    assert status == 501 and fields["x-request-id"].startswith("req_") and json.loads(data)["error"]
