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
