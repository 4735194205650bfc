"""The clients applications put in front of an OpenAI endpoint (issue 46), against the operator's OpenAI frontend
in front of a real tritonserver with the CPU stand-in engine: LangChain's ChatOpenAI (invoke, stream, bind_tools,
with_structured_output) and LiteLLM (completion, and its context-window error, which is what its fallbacks key on); and the Responses API
(/v1/responses: text, tools, streaming) with the official `openai` client and LangChain's `use_responses_api`.

Both clients go through the same frontend code whatever the engine, so one stack serves the module (the
tensorrtllm backend, one tritonserver, one frontend): CPU is shared. The checkpoint's chat template is the Hermes
family's from test_openai_features.py, so tools go through it and a call the stand-in echoes back is read as a tool
call (the stand-in "model" repeats its prompt, the user's turn first).
"""

from __future__ import annotations

import json
import os

import pytest
from test_openai_endpoint import CONTEXT, MODEL, backend_spec, frontend, frontend_files
from test_openai_features import FAMILIES, WEATHER

from devcluster.tritonserver import available

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else LiteLLM fetches its cost map from GitHub on import
pytest.importorskip("langchain_openai", reason="pip install -e '.[test]' (LangChain's ChatOpenAI)")
pytest.importorskip("litellm", reason="pip install -e '.[test]' (LiteLLM)")
pydantic = pytest.importorskip("pydantic")

pytestmark = [pytest.mark.triton, pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning"),  # LiteLLM's types
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

TEMPLATE, CALL = FAMILIES["hermes"]  # CALL: get_weather(city=Paris) in the Hermes format


class City(pydantic.BaseModel):
    """A city and its population."""

    city: str
    population: int


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    from llmapi_support import serve

    spec = backend_spec(4, maxSeqLen=CONTEXT, maxInputLen=CONTEXT - 1)
    workdir = tmp_path_factory.mktemp("clients")
    (workdir / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    program, args = frontend_files(spec, workdir)
    with serve(spec, workdir) as (server, name):
        assert name == MODEL
        with frontend(program, args, server, workdir) as url:
            yield url


@pytest.fixture(scope="module")
def litellm():
    import litellm

    return litellm


def _chat(base_url, **kwargs):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=base_url, api_key="unused", max_retries=0, timeout=60, **kwargs)


# ---- LangChain's ChatOpenAI ----

def test_langchain_invoke_and_stream_give_the_same_answer(base_url):
    llm = _chat(base_url, max_tokens=5, stream_usage=True)
    answer = llm.invoke("one two three")
    assert answer.content.split() == ["one", "two", "three", "<|assistant|>", "one"]  # the template's echo
    assert answer.response_metadata["finish_reason"] == "length"
    assert answer.usage_metadata["output_tokens"] == 5
    chunks = list(llm.stream("one two three"))
    assert sum(1 for c in chunks if c.content) >= 4  # one chunk per token, not the whole answer at the end
    assert "".join(c.content for c in chunks) == answer.content
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert whole.usage_metadata["output_tokens"] == 5  # the streamed usage (stream_options.include_usage)


def test_langchain_bind_tools_reads_the_call_as_a_tool_call(base_url):
    # the echo: the call, then "<|tools|> get_weather <|assistant|>" (a second, cut-off call would make the answer
    # unreadable as calls, as in vLLM's Hermes parser)
    llm = _chat(base_url, max_tokens=len(CALL.split()) + 3).bind_tools([WEATHER])
    answer = llm.invoke(CALL)
    assert [(c["name"], c["args"]) for c in answer.tool_calls] == [("get_weather", {"city": "Paris"})], answer
    assert answer.tool_calls[0]["id"].startswith("call_")
    assert answer.response_metadata["finish_reason"] == "tool_calls" and CALL not in answer.content
    forced = _chat(base_url, max_tokens=64).bind_tools([WEATHER], tool_choice="get_weather").invoke("what now")
    assert [c["name"] for c in forced.tool_calls] == ["get_weather"] and forced.tool_calls[0]["args"]["city"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output_returns_the_pydantic_model(base_url, method):
    """json_schema (the default): response_format with the model's strict schema; function_calling: a forced
    tool call. Before issue 46: free text LangChain failed to parse."""
    llm = _chat(base_url, max_tokens=64).with_structured_output(City, method=method)
    result = llm.invoke("Paris is the city")
    assert isinstance(result, City) and result.city


# ---- LiteLLM ----

@pytest.mark.parametrize("stream", [False, True])
def test_litellm_completion(base_url, litellm, stream):
    kwargs = {"model": f"openai/{MODEL}", "api_base": base_url, "api_key": "unused", "num_retries": 0,
              "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 4}
    if stream:
        chunks = list(litellm.completion(stream=True, **kwargs))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 4
    else:
        result = litellm.completion(**kwargs)
        content = result.choices[0].message.content
        assert (result.usage.completion_tokens, result.choices[0].finish_reason) == (4, "length")
    assert content.split() == ["one", "two", "three", "<|assistant|>"]


@pytest.mark.parametrize("over", ["prompt", "max_tokens"])
def test_litellm_raises_context_window_exceeded_over_the_limit(base_url, litellm, over):
    """What LiteLLM's context-window fallbacks key on: before issue 46, a plain BadRequestError."""
    words, max_tokens = (CONTEXT + 20, 4) if over == "prompt" else (10, CONTEXT)
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(model=f"openai/{MODEL}", api_base=base_url, api_key="unused", num_retries=0,
                           messages=[{"role": "user", "content": "word " * words}], max_tokens=max_tokens)


# ---- the Responses API (/v1/responses), text (tools and streaming: test_openai_features.py) ----

@pytest.fixture(scope="module")
def client(base_url):
    import openai

    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)


def test_responses_text_input_and_output(client):
    """Before: 404. Mapped to the chat path: the same template, sampling and usage counts."""
    done = client.responses.create(model=MODEL, input="one two three", max_output_tokens=4)
    assert done.output_text.split() == ["one", "two", "three", "<|assistant|>"]
    assert (done.status, done.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert (done.usage.input_tokens, done.usage.output_tokens) == (4, 4) and done.model == MODEL
    assert done.id.startswith("resp_") and done.output[0].role == "assistant"
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "hello there"}]}]
    answer = client.responses.create(model=MODEL, instructions="be brief", input=parts, max_output_tokens=4)
    assert answer.output_text.split() == ["be", "brief", "hello", "there"]  # instructions: the system turn, first


def test_responses_through_langchain(base_url):
    llm = _chat(base_url, max_tokens=3, use_responses_api=True)
    assert llm.invoke("one two three").text.split() == ["one", "two", "three"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tools_and_streaming_through_langchain(base_url, stream):
    """ChatOpenAI(use_responses_api=True): bind_tools gets the function_call item as a tool call; stream reads the
    Responses API's events. Before: 400 on 'tools' and on 'stream'."""
    llm = _chat(base_url, max_tokens=len(CALL.split()) + 3, use_responses_api=True, streaming=stream)
    answer = llm.bind_tools([WEATHER]).invoke(CALL)
    assert [(c["name"], c["args"]) for c in answer.tool_calls] == [("get_weather", {"city": "Paris"})], answer
    assert answer.tool_calls[0]["id"].startswith("call_")
    if stream:
        chunks = list(_chat(base_url, max_tokens=3, use_responses_api=True).stream("one two three"))
        assert sum(1 for c in chunks if c.text) >= 3  # a chunk per token
        assert "".join(c.text for c in chunks).split() == ["one", "two", "three"]


@pytest.mark.parametrize("field, value", [("background", True), ("tools", [{"type": "web_search"}]),
                                          ("previous_response_id", "resp_1"),
                                          ("text", {"format": {"type": "json_object"}})])
def test_responses_refuses_what_it_does_not_do_naming_the_field(client, field, value):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="hello", extra_body={field: value})
    assert info.value.body["param"] == field and "supported" in info.value.body["message"]


def test_responses_over_the_context_limit_is_context_length_exceeded(client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="word " * (CONTEXT + 20), max_output_tokens=4)
    assert info.value.body["code"] == "context_length_exceeded"
