"""What applications call (issue 46), with the official `openai` client against the operator's OpenAI frontend in
front of a real tritonserver serving the rendered repository with each engine's CPU stand-in (the stack of
test_openai_endpoint.py: both backends).

Structured output: under a guide the stand-in engines emit a text the guide's grammar accepts (the xgrammar
stand-in's), made of the prompt's words, and stop once it is complete, as a model decoding under the grammar's mask
does; a schema the grammar backend cannot convert is refused by the engine (vLLM) or by the model before the engine
(TensorRT-LLM), and reaches the client as a 400 on `response_format` with the backend's reason.
"""

from __future__ import annotations

import json

import pytest
from test_openai_endpoint import MODEL, base_url, client, stack  # noqa: F401 - the fixtures, one stack per module

pydantic = pytest.importorskip("pydantic")

pytestmark = [pytest.mark.triton]

USER = [{"role": "user", "content": "Paris is the city"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer",
                                                                                      "minimum": 1}},
          "required": ["city", "population"], "additionalProperties": False}


class City(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    city: str
    population: int


def test_parse_with_a_pydantic_model_returns_the_parsed_object(client):  # noqa: F811
    """client.chat.completions.parse() (what LangChain's with_structured_output calls): before, a 400 (and before
    that, free text the client failed to parse)."""
    result = client.chat.completions.parse(model=MODEL, messages=USER, response_format=City, max_tokens=64)
    choice = result.choices[0]
    assert isinstance(choice.message.parsed, City), choice.message.content
    assert choice.message.parsed.city
    assert choice.finish_reason == "stop"  # the grammar completed: the engine stopped, not max_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_is_valid_for_the_schema(client, stream):  # noqa: F811
    response_format = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    if stream:
        chunks = list(client.chat.completions.create(model=MODEL, messages=USER, response_format=response_format,
                                                     max_tokens=64, stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3  # streamed piece by piece
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        result = client.chat.completions.create(model=MODEL, messages=USER, response_format=response_format,
                                                max_tokens=64)
        content, finish = result.choices[0].message.content, result.choices[0].finish_reason
    City.model_validate_json(content)  # SCHEMA's own rules: both required, no other keys, strict types
    assert json.loads(content)["population"] >= 1  # and its minimum
    assert finish == "stop"


@pytest.mark.parametrize("endpoint", ["chat", "text"])
def test_json_object_output_is_a_json_object(client, endpoint):  # noqa: F811
    if endpoint == "chat":
        content = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=64,
                                                 response_format={"type": "json_object"}).choices[0].message.content
    else:  # vLLM's extension: response_format on completions too
        content = client.completions.create(model=MODEL, prompt="Paris is the city", max_tokens=64,
                                            extra_body={"response_format": {"type": "json_object"}}).choices[0].text
    assert isinstance(json.loads(content), dict)


def test_a_guided_answer_cut_by_max_tokens_ends_with_length(client):  # noqa: F811
    result = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}})
    assert result.choices[0].finish_reason == "length" and result.usage.completion_tokens == 3


@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_the_engine_cannot_compile_is_a_400_with_its_reason(client, stream):  # noqa: F811
    import openai

    bad = {"type": "json_schema", "json_schema": {"name": "bad", "schema": {
        "type": "object", "properties": {"when": {"$ref": "#/$defs/missing"}}}}}
    with pytest.raises(openai.BadRequestError) as info:
        result = client.chat.completions.create(model=MODEL, messages=USER, response_format=bad, max_tokens=8,
                                                stream=stream)
        if stream:
            list(result)
    error = info.value.body
    assert (error["param"], error["type"]) == ("response_format", "invalid_request_error"), error
    assert "$ref #/$defs/missing" in error["message"], error  # the grammar backend's reason
    ok = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)  # and the engine serves on
    assert ok.choices[0].message.content


# ---- n > 1 and log probabilities: each engine's own (SamplingParams n, logprobs) ----

def _chat_choices(client, stream, **kwargs):  # noqa: F811
    """{index: (content, finish_reason, [logprob entries])} of a chat answer, streamed or not."""
    if not stream:
        result = client.chat.completions.create(model=MODEL, stream=False, **kwargs)
        return {c.index: (c.message.content, c.finish_reason, c.logprobs.content if c.logprobs else None)
                for c in result.choices}, result.usage
    out: dict[int, list] = {}
    usage = None
    for chunk in client.chat.completions.create(model=MODEL, stream=True, stream_options={"include_usage": True},
                                                **kwargs):
        usage = chunk.usage or usage
        for c in chunk.choices:
            text, finish, entries = out.setdefault(c.index, ["", None, None])
            if c.logprobs is not None:
                entries = (entries or []) + list(c.logprobs.content or [])
            out[c.index] = [text + (c.delta.content or ""), c.finish_reason or finish, entries]
    return {i: tuple(v) for i, v in out.items()}, usage


@pytest.mark.parametrize("stream", [False, True])
def test_chat_n_choices_with_logprobs(client, stream):  # noqa: F811
    """Before: n > 1 and logprobs were a 400."""
    choices, usage = _chat_choices(client, stream, messages=[{"role": "user", "content": "alpha beta gamma delta"}],
                                   max_tokens=4, n=3, logprobs=True, top_logprobs=2)
    assert sorted(choices) == [0, 1, 2]
    assert len({content for content, _, _ in choices.values()}) == 3  # three samples, not one answer thrice
    for content, finish, entries in choices.values():
        assert finish == "length" and len(entries) == 4
        assert "".join(e.token for e in entries) == content  # one entry per token, in order
        for e in entries:
            assert e.logprob <= 0 and e.bytes == list(e.token.encode())
            assert len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
    assert usage.completion_tokens == 12  # every choice's tokens, as OpenAI counts them


def test_chat_logprobs_without_top_logprobs_lists_no_alternatives(client):  # noqa: F811
    choices, _ = _chat_choices(client, False, messages=USER, max_tokens=2, logprobs=True)
    assert [len(e.top_logprobs) for e in choices[0][2]] == [0, 0]
    plain, _ = _chat_choices(client, False, messages=USER, max_tokens=2)
    assert plain[0][2] is None  # not asked: no logprobs


@pytest.mark.parametrize("stream", [False, True])
def test_completions_n_choices_with_logprobs(client, stream):  # noqa: F811
    kwargs = {"model": MODEL, "prompt": "one two three four", "max_tokens": 3, "n": 2, "logprobs": 2}
    out: dict[int, list] = {}
    if stream:
        for chunk in client.completions.create(stream=True, **kwargs):
            for c in chunk.choices:
                text, finish, lp = out.setdefault(c.index, ["", None, {"tokens": [], "offsets": [], "top": []}])
                if c.logprobs is not None:
                    lp["tokens"] += c.logprobs.tokens
                    lp["offsets"] += c.logprobs.text_offset
                    lp["top"] += c.logprobs.top_logprobs
                out[c.index] = [text + c.text, c.finish_reason or finish, lp]
    else:
        for c in client.completions.create(**kwargs).choices:
            out[c.index] = [c.text, c.finish_reason, {"tokens": c.logprobs.tokens, "offsets": c.logprobs.text_offset,
                                                      "top": c.logprobs.top_logprobs}]
    assert sorted(out) == [0, 1] and out[0][0] != out[1][0]
    for text, finish, lp in out.values():
        assert finish == "length" and "".join(lp["tokens"]) == text
        assert lp["offsets"] == [len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
        assert all(token in top and len(top) >= 2 for token, top in zip(lp["tokens"], lp["top"], strict=True))
