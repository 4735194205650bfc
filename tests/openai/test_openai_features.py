"""What applications call (issue 46), with the official `openai` client against the operator's OpenAI frontend in
front of a real tritonserver serving the rendered repository with each engine's CPU stand-in (the stack of
test_openai_endpoint.py: both backends).

Structured output: under a guide the stand-in engines emit a text the guide's grammar accepts (the xgrammar
stand-in's), made of the prompt's words, and stop once it is complete, as a model decoding under the grammar's mask
does; a schema the grammar backend cannot convert is refused by the engine (vLLM) or by the model before the engine
(TensorRT-LLM), and reaches the client as a 400 on `response_format` with the backend's reason.

Tools: the stand-in "model" echoes its prompt, so a user message that holds a tool call in a family's format comes
back as the model's output, and the frontend must read it as that family's tool call; each family gets a frontend
of its own over the same tritonserver, with a chat template carrying that family's markers (tool names rendered
into the prompt, so the echo shows the tools went through the template).
"""

from __future__ import annotations

import json

import pytest
import test_openai_endpoint as endpoint
from test_openai_endpoint import CONTEXT, MODEL, backend_spec, base_url, client, frontend, frontend_files, stack  # noqa: F401 - the fixtures: one stack per module

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


# ---- tools (issue 46, item 3) ----

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def _template(call: str) -> str:
    """A chat template in the family's shape: tool names rendered, past calls in `call` (the family's format), tool
    results, plain turns. Only the user turn's content is echoed first, so the call in it starts the output where
    a family expects it at the start (Llama's JSON)."""
    return ("{%- for m in messages %}"
            "{%- if m.role == 'assistant' and m.tool_calls %}{% for tc in m.tool_calls %}" + call + " {% endfor %}"
            "{%- elif m.role == 'tool' %}<|tool|> {{ m.content }} "
            "{%- else %}{{ m.content }} {% endif %}{% endfor %}"
            "{%- if tools %}<|tools|> {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}"
            "{%- if add_generation_prompt %}<|assistant|>{% endif %}")


PAST = "{{ {'name': tc.function.name, 'arguments': tc.function.arguments} | tojson }}"
# family -> (its chat template, a call to get_weather(city=Paris) in its output format)
FAMILIES = {
    "hermes": (_template("<tool_call>" + PAST + "</tool_call>"),
               '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'),
    "llama3_json": (_template("<|python_tag|>" + PAST),
                    '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    "mistral": (_template("[TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ tc.function.arguments | tojson }}"),
                '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
    "deepseek_v31": (_template("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{{ tc.function.name }}<｜tool▁sep｜>"
                               "{{ tc.function.arguments | tojson }}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
                     '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
                     '<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, stack, tmp_path_factory):  # noqa: F811
    """(family, a client of a frontend whose checkpoint's chat template is that family's, the call in its format)."""
    import openai

    _, server, _, backend = stack
    name = request.param
    workdir = tmp_path_factory.mktemp(f"tools-{name}")
    (workdir / "tokenizer_config.json").write_text(json.dumps({"chat_template": FAMILIES[name][0]}))
    program, args = frontend_files(backend_spec(4, maxSeqLen=CONTEXT, maxInputLen=CONTEXT - 1, backend=backend),
                                   workdir)
    with frontend(program, args, server, workdir) as url:
        yield name, openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60), FAMILIES[name][1]


def _ask(api, stream, **kwargs):
    """(content, [(name, arguments dict)], finish_reason) of one chat answer, streamed or not."""
    if not stream:
        choice = api.chat.completions.create(model=MODEL, **kwargs).choices[0]
        calls = [(c.function.name, json.loads(c.function.arguments), c.id, c.type)
                 for c in choice.message.tool_calls or []]
        return choice.message.content, calls, choice.finish_reason
    content, calls, finish = "", {}, None
    for chunk in api.chat.completions.create(model=MODEL, stream=True, **kwargs):
        for c in chunk.choices:
            content += c.delta.content or ""
            for call in c.delta.tool_calls or []:  # assembled by index, as OpenAI's clients do
                entry = calls.setdefault(call.index, {"name": "", "arguments": "", "id": None, "type": None})
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
                entry["id"], entry["type"] = call.id or entry["id"], call.type or entry["type"]
            finish = c.finish_reason or finish
    return content or None, [(c["name"], json.loads(c["arguments"]), c["id"], c["type"])
                             for _, c in sorted(calls.items())], finish


@pytest.mark.parametrize("stream", [False, True])
def test_auto_tool_calls_are_read_in_each_family_s_format(family, stream):
    name, api, call = family
    words = len(call.split())
    content, calls, finish = _ask(api, stream, messages=[{"role": "user", "content": call}],
                                  tools=[WEATHER, TIME], max_tokens=words + 4)
    assert [(n, a, t) for n, a, _, t in calls] == [("get_weather", {"city": "Paris"}, "function")], (content, calls)
    assert calls[0][2].startswith("call_") and finish == "tool_calls"
    assert content is None or call not in content  # the call itself is not content


@pytest.mark.parametrize("stream", [False, True])
def test_plain_answers_and_tool_choice_none_are_content(family, stream):
    name, api, call = family
    content, calls, finish = _ask(api, stream, messages=[{"role": "user", "content": "hello there"}],
                                  tools=[WEATHER], max_tokens=6)
    assert calls == [] and finish == "length" and "get_weather" in content  # the tools went through the template
    content, calls, _ = _ask(api, stream, messages=[{"role": "user", "content": call}], tools=[WEATHER],
                             tool_choice="none", max_tokens=len(call.split()))
    assert calls == [] and content.split() == call.split()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_required_and_named_calls_are_forced_by_guided_decoding(family, stream, choice):
    _, api, _ = family
    content, calls, finish = _ask(api, stream, messages=[{"role": "user", "content": "what now"}],
                                  tools=[WEATHER, TIME], tool_choice=choice, max_tokens=64)
    assert len(calls) == 1 and calls[0][0] == "get_weather" and isinstance(calls[0][1]["city"], str), (content, calls)
    assert finish == "tool_calls" and not content


def test_a_tool_result_conversation_renders_through_the_template(family):
    """A past call's arguments reach the template as an object (vLLM chat_utils.py `_postprocess_messages`): the
    echoed call reads back as {"city": "Paris"}, not as the JSON text of a string."""
    _, api, call = family
    messages = [{"role": "user", "content": "weather?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    content, calls, _ = _ask(api, False, messages=messages, tools=[WEATHER], max_tokens=1 + len(call.split()))
    assert [(n, a) for n, a, _, _ in calls] == [("get_weather", {"city": "Paris"})], (content, calls)


def test_tools_a_template_cannot_carry_are_a_400_that_says_what_works(client):  # noqa: F811
    """tests/openai/tokenizer's template has no tool-call markers: auto cannot be read back; required still works."""
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], max_tokens=4)
    assert info.value.body["param"] == "tools" and "'required'" in info.value.body["message"]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=USER, tool_choice="required", max_tokens=4)
    assert info.value.body["param"] == "tool_choice"
    forced = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER], tool_choice="required",
                                            max_tokens=64)
    assert forced.choices[0].message.tool_calls[0].function.name == "get_weather"


@pytest.mark.parametrize("stream", [False, True])
def test_two_calls_and_parallel_tool_calls_false(family, stream):
    """Every call of an answer is read; parallel_tool_calls false keeps the first (vLLM's
    maybe_filter_parallel_tool_calls). Before: parallel_tool_calls was ignored."""
    _, api, call = family
    two = call + " " + call.replace("Paris", "Rome")
    kwargs = {"messages": [{"role": "user", "content": two}], "tools": [WEATHER], "max_tokens": len(two.split())}
    content, calls, finish = _ask(api, stream, **kwargs)
    assert [a["city"] for _, a, _, _ in calls] == ["Paris", "Rome"], (content, calls, finish)
    assert len({i for _, _, i, _ in calls}) == 2  # each call its own id
    content, calls, finish = _ask(api, stream, parallel_tool_calls=False, **kwargs)
    assert [a["city"] for _, a, _, _ in calls] == ["Paris"] and finish == "tool_calls", (content, calls, finish)


# ---- the Responses API (/v1/responses) with tools, streamed and not (issue 46, item 6) ----

# The same functions in the Responses API's shape: at the top level, not under "function"
R_WEATHER = {"type": "function", **WEATHER["function"]}
R_TIME = {"type": "function", **TIME["function"]}


def _respond(api, stream, **kwargs):
    """(the final Response, the events' types) of one /v1/responses request; streamed through the official client's
    stream helper (client.responses.stream), which checks the events' order and identities as it assembles them."""
    if not stream:
        return api.responses.create(model=MODEL, **kwargs), []
    with api.responses.stream(model=MODEL, **kwargs) as events:
        seen = list(events)
        # get_final_response() takes response.completed only; an answer cut short ends with response.incomplete
        final = seen[-1].response if seen[-1].type == "response.incomplete" else events.get_final_response()
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    assert seen[-1].response.id == seen[0].response.id == final.id
    return final, [e.type for e in seen]


def _calls(response):
    return [(item.name, json.loads(item.arguments)) for item in response.output if item.type == "function_call"]


FUNCTION_CALL_EVENTS = ["response.output_item.added", "response.function_call_arguments.delta",
                        "response.function_call_arguments.done", "response.output_item.done"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_call_and_its_result_round_trip(family, stream):
    """A function_call output item read in each family's format; sent back with a function_call_output, both reach
    the chat template (the past call as the family's call, the result as a tool turn). Before: 400 on 'tools'."""
    name, api, call = family
    first, kinds = _respond(api, stream, input=[{"role": "user", "content": call}], tools=[R_WEATHER, R_TIME],
                            max_output_tokens=len(call.split()) + 4)
    assert _calls(first) == [("get_weather", {"city": "Paris"})], first.output
    fc = first.output[-1]
    assert fc.call_id.startswith("call_") and fc.id.startswith("fc_") and first.status == "completed"
    assert not any(call in item.content[0].text for item in first.output if item.type == "message")
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    if stream:
        assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
        assert kinds[-5:-1] == FUNCTION_CALL_EVENTS
    result = {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny-and-mild"}
    second, _ = _respond(api, stream, input=[{"role": "user", "content": "weather?"}, *first.output, result],
                         tools=[R_WEATHER], tool_choice="none", max_output_tokens=48)
    words = second.output_text.split()
    assert words[0] == "weather?" and "<|tool|>" in words, words
    past = " ".join(words[1:words.index("<|tool|>")])
    assert "get_weather" in past and "Paris" in past, past  # the past call, rendered in the family's format
    assert words[words.index("<|tool|>") + 1].startswith("sunny-and-mild")  # the result, as a tool turn
    assert _calls(second) == [] and second.status == "incomplete"  # tool_choice none: text, cut by the limit


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_responses_required_and_named_tool_choice(client, stream, choice):  # noqa: F811
    """Forced by the engine's guided decoding, as on chat: any chat template (this one has no tool-call format)."""
    final, kinds = _respond(client, stream, input="what now", tools=[R_WEATHER, R_TIME], tool_choice=choice,
                            max_output_tokens=64)
    (name, arguments), = _calls(final)
    assert name == "get_weather" and isinstance(arguments["city"], str), final.output
    assert [item.type for item in final.output] == ["function_call"] and final.status == "completed"
    if stream:
        assert kinds == ["response.created", "response.in_progress", *FUNCTION_CALL_EVENTS, "response.completed"]


def test_responses_stream_text_events(client):  # noqa: F811
    """stream: true, text: the event sequence the official client parses, deltas piece by piece, usage at the end.
    Cut by max_output_tokens, the stream ends with response.incomplete, as OpenAI's. Before: 400 on 'stream'."""
    events = list(client.responses.create(model=MODEL, input="one two three", max_output_tokens=6, stream=True))
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * len(deltas),
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.incomplete"], kinds
    assert len(deltas) > 3  # streamed as the engine decodes, not at the end
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-4]
    assert done.text == "".join(deltas) and "one two three" in done.text  # the stand-in echoes the prompt
    final = events[-1].response
    assert final.output[0].content[0].text == done.text and final.output[0].id == events[2].item.id
    assert (final.status, final.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    usage = final.usage  # the prompt's tokens as each engine counts them (vLLM's stand-in counts one more)
    assert usage.input_tokens >= 4 and usage.output_tokens == 6
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_responses_tools_the_template_cannot_read_and_built_in_tools_are_400s(client):  # noqa: F811
    import openai

    for kwargs, param in (({"tools": [R_WEATHER]}, "tools"),  # auto: this template has no tool-call format
                          ({"tools": [{"type": "web_search"}]}, "tools"),
                          ({"tools": [R_WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
                           "tool_choice")):
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as info:
                client.responses.create(model=MODEL, input="hello", max_output_tokens=4, stream=stream, **kwargs)
            assert info.value.body["param"] == param, info.value.body


def test_a_responses_stream_the_client_closes_cancels_its_engine_request(stack):  # noqa: F811
    """The client reads a few events and closes the stream: the next write fails, the frontend closes its Triton
    stream and the engine stops decoding (as for chat streams), instead of going on for ~6 s."""
    import openai

    url, server, name, backend = stack
    api = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
    before = endpoint._finished(server, name, backend)
    events = api.responses.create(model=MODEL, input="keep talking", max_output_tokens=CONTEXT - 10, stream=True)
    for event in events:
        if event.type == "response.output_text.delta":
            break
    events.close()
    endpoint._wait_engine_idle(server, name, backend, before, within_s=2.5)
