"""serving.openai: the frontend container, its port on the pod and the Service, and the frontend's pure parts."""

from __future__ import annotations

import ast
import json
import sys

import pytest

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import openai
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects
from llmbackend.serving import openai_frontend as fe

REF = BackendRef("llama", "serving", "uid-1")
SURGE = RolloutStrategy("RollingUpdate", 1, 0)


def _spec(**overrides) -> LLMBackendSpec:
    spec = {"model": {"preset": "llama-3.1-8b", "name": "Llama-8B",
                      "source": {"pvc": {"claimName": "models", "path": "/llama"}}}}
    spec.update(overrides)
    return LLMBackendSpec.model_validate(spec)


def _plan(nodes=1) -> PlanStatus:
    return PlanStatus(tensor_parallel=8, pipeline_parallel=nodes, gpus_per_replica=8 * nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=60 << 30, gpu_product="NVIDIA-H100-80GB-HBM3")


def _objects(spec, nodes=1):
    return {o["kind"]: o for o in desired_objects(REF, spec, _plan(nodes), 1, SURGE)}


def _pod(objects):
    if "Deployment" in objects:
        return objects["Deployment"]["spec"]["template"]["spec"]
    return objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


@pytest.mark.parametrize("backend", ["tensorrtllm", "vllm"])
def test_on_by_default_container_port_service_and_file(backend):
    objects = _objects(_spec(engine={"backend": backend}))
    pod = _pod(objects)
    frontend = {c["name"]: c for c in pod["containers"]}[openai.CONTAINER_NAME]
    assert frontend["image"] == {c["name"]: c for c in pod["containers"]}["triton"]["image"]
    assert frontend["ports"] == [{"name": "openai", "containerPort": openai.OPENAI_PORT, "protocol": "TCP"}]
    assert "--served-model-name=Llama-8B" in frontend["args"]
    assert "nvidia.com/gpu" not in str(frontend["resources"])
    service_ports = {p["name"]: p for p in objects["Service"]["spec"]["ports"]}
    assert service_ports["openai"] == {"name": "openai", "port": openai.OPENAI_PORT, "targetPort": "openai", "protocol": "TCP"}
    data = objects["ConfigMap"]["data"]
    assert data[openai.FRONTEND_KEY] == openai.frontend_source()
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert data[openai.HTTP_BODY_KEY] == openai.http_body_source()
    assert [i["key"] for i in volumes[openai.VOLUME_NAME]["configMap"]["items"]] == [openai.FRONTEND_KEY,
                                                                                    openai.HTTP_BODY_KEY]
    # not copied into the Triton model repository
    repository = [i["key"] for i in volumes["model-config"]["configMap"]["items"]]
    assert openai.FRONTEND_KEY not in repository and openai.HTTP_BODY_KEY not in repository
    # the frontend reads the chat template from the model source, read-only
    mounts = {m["name"]: m for m in frontend["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True and f"--tokenizer-dir={mounts['models']['mountPath']}" in frontend["args"]


def test_off_renders_no_frontend():
    objects = _objects(_spec(serving={"openai": False}))
    assert [c["name"] for c in _pod(objects)["containers"]] == ["triton"]
    assert "openai" not in {p["name"] for p in objects["Service"]["spec"]["ports"]}
    assert openai.FRONTEND_KEY not in objects["ConfigMap"]["data"]


def test_multi_node_only_the_leader_serves_openai():
    objects = _objects(_spec(), nodes=2)
    template = objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    assert openai.CONTAINER_NAME in [c["name"] for c in template["leaderTemplate"]["spec"]["containers"]]
    assert [c["name"] for c in template["workerTemplate"]["spec"]["containers"]] == ["triton"]


def _imports(source: str) -> set[str]:
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    return imported


def test_frontend_needs_only_the_standard_library_jinja2_and_its_shipped_helper():
    assert _imports(openai.frontend_source()) - set(sys.stdlib_module_names) == {"jinja2", "http_body"}
    assert _imports(openai.http_body_source()) <= set(sys.stdlib_module_names)


def test_the_rendered_memory_limit_covers_bodies_heads_and_connections():
    """The container's limit is the baseline plus what the body budget admits, each byte of it at the cost of a
    parsed body, plus every connection it admits with a head at the cap and its thread
    (tests/openai/test_openai_bodies.py and test_openai_headers.py measure the peak against it)."""
    container = {c["name"]: c for c in _pod(_objects(_spec()))["containers"]}[openai.CONTAINER_NAME]
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    assert int(limit[:-2]) << 20 >= (openai.BASELINE_MEMORY_BYTES + openai.BODY_BUDGET_BYTES * openai.BYTES_PER_BODY_BYTE
                                     + openai.MAX_CONNECTIONS * openai.BYTES_PER_CONNECTION)
    assert openai.BODY_BUDGET_BYTES >= openai.MAX_BODY_BYTES  # at least one body at the cap fits
    assert openai.BYTES_PER_CONNECTION > openai.MAX_HEADER_BYTES  # a head at the cap fits in a connection's share
    for arg in (f"--max-body-bytes={openai.MAX_BODY_BYTES}", f"--body-budget-bytes={openai.BODY_BUDGET_BYTES}",
                f"--max-header-bytes={openai.MAX_HEADER_BYTES}", f"--header-timeout={openai.HEADER_TIMEOUT_S}",
                f"--max-connections={openai.MAX_CONNECTIONS}"):
        assert arg in container["args"]


LIMIT = 4096  # the context limit the frontend is started with (--max-seq-len)


@pytest.mark.parametrize("body, expected", [
    ({}, {"max_tokens": LIMIT}),  # no max_tokens: up to the context limit (the engine cuts it after the prompt)
    ({"max_tokens": 7, "temperature": 0.5, "top_p": 1}, {"max_tokens": 7, "temperature": 0.5, "top_p": 1.0}),
    ({"max_completion_tokens": 9, "max_tokens": 7}, {"max_tokens": 9}),
    ({"max_completion_tokens": 9}, {"max_tokens": 9}),
    ({"stop": "END"}, {"max_tokens": LIMIT, "stop_words": ["END"]}),
    ({"seed": -1}, {"max_tokens": LIMIT, "seed": (1 << 64) - 1}),
])
def test_sampling_inputs(body, expected):
    assert fe.sampling_inputs(body, LIMIT) == expected


@pytest.mark.parametrize("body, param", [
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": "5"}, "max_tokens"), ({"temperature": 3}, "temperature"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"temperature": True}, "temperature"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": [""]}, "stop"),
    ({"stream": "yes"}, "stream"),
])
def test_sampling_inputs_rejects(body, param):
    with pytest.raises(fe.OpenAIError) as info:
        fe.sampling_inputs(body, LIMIT)
    assert (info.value.status, info.value.param, info.value.body()["error"]["type"]) == (400, param, "invalid_request_error")


@pytest.mark.parametrize("kind, body, param", [
    ("text", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),  # chat's field
    ("chat", {"functions": [{"name": "f"}]}, "functions"),
    ("chat", {"function_call": {"name": "f"}}, "function_call"),
    ("text", {"best_of": 3}, "best_of"), ("text", {"top_logprobs": 2}, "top_logprobs"),  # chat's field
    ("text", {"echo": True}, "echo"), ("text", {"suffix": "end"}, "suffix"),
    ("chat", {"logit_bias": {"50256": -100}}, "logit_bias"), ("chat", {"modalities": ["text", "audio"]}, "modalities"),
    ("chat", {"audio": {"voice": "alloy", "format": "wav"}}, "audio"), ("chat", {"reasoning_effort": "low"},
                                                                      "reasoning_effort"),
    ("chat", {"verbosity": "low"}, "verbosity"), ("chat", {"web_search_options": {}}, "web_search_options"),
    ("chat", {"service_tier": "priority"}, "service_tier"), ("text", {"ignore_eos": True}, "ignore_eos"),
    ("chat", {"guided_json": {"type": "object"}}, "guided_json"),  # not OpenAI's: unrecognized
    ("chat", {"prompt": "x"}, "prompt"), ("text", {"messages": []}, "messages"),  # the other endpoint's field
    ("chat", {"stream_options": {"include_usage": True, "per_chunk_usage": True}}, "stream_options.per_chunk_usage"),
])
def test_fields_the_server_does_not_implement_are_refused_by_name(kind, body, param):
    with pytest.raises(fe.OpenAIError) as info:
        fe.check_fields(body, kind)
    assert (info.value.status, info.value.param) == (400, param)
    assert "not supported" in info.value.message or "Unrecognized" in info.value.message


@pytest.mark.parametrize("kind, body", [
    ("chat", {"model": "m", "messages": [], "max_completion_tokens": 5, "stream": True,
              "stream_options": {"include_usage": True, "include_obfuscation": False}}),
    # vLLM's usage on every chunk, which guidellm sends with every streaming request: the counts come in the last chunk
    ("chat", {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
    # the values that ask for nothing: what clients send by default
    ("chat", {"tools": [], "tool_choice": "none",
              "response_format": {"type": "text"}, "modalities": ["text"], "audio": None, "logit_bias": {},
              "service_tier": "auto", "parallel_tool_calls": True, "functions": None, "function_call": "auto"}),
    ("text", {"best_of": 1, "echo": False, "suffix": None, "ignore_eos": False}),
    # ignored: nothing a client sees in the answer depends on them
    ("chat", {"user": "u", "metadata": {"k": "v"}, "store": True, "safety_identifier": "s",
              "prompt_cache_key": "k", "prediction": {"type": "content", "content": "x"}}),
    ("chat", {"some_future_field": None}),  # null asks for nothing
])
def test_fields_that_ask_for_nothing_are_accepted(kind, body):
    fe.check_fields(body, kind)


# ---- structured output (issue 46, item 4) ----

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize("kind", ["chat", "text"])
@pytest.mark.parametrize("response_format, inputs", [
    (None, {}), ({"type": "text"}, {}),
    ({"type": "json_object"}, {fe.GUIDE_TYPE: "json"}),
    ({"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}},
     {fe.GUIDE_TYPE: "json_schema", fe.GUIDE: json.dumps(SCHEMA)}),
    ({"type": "json_schema", "json_schema": {"name": "anything"}}, {fe.GUIDE_TYPE: "json"}),  # no schema: any object
])
def test_response_format_becomes_the_models_guided_decoding_inputs(kind, response_format, inputs):
    """Before: response_format was refused with 400 (and, before that, silently ignored)."""
    body = {"response_format": response_format}
    fe.check_fields(body, kind)
    assert fe.guided_inputs(body) == inputs


@pytest.mark.parametrize("response_format", [
    "json", {"type": "yaml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": "{}"}}, {"type": "json_schema", "json_schema": []},
])
def test_malformed_response_format_is_a_400_naming_it(response_format):
    with pytest.raises(fe.OpenAIError) as info:
        fe.guided_inputs({"response_format": response_format})
    assert (info.value.status, info.value.param) == (400, "response_format")


def test_a_schema_the_engine_cannot_compile_is_a_400_on_response_format():
    refused = fe._triton_error(400, json.dumps({"error": "bad request: guided decoding: the JSON schema cannot be "
                                                         "compiled: Unsupported type \"thing\""}).encode())
    assert (refused.status, refused.param) == (400, "response_format") and "Unsupported type" in refused.message
    assert fe._triton_error(400, b'{"error": "bad request: top_p"}').param is None


@pytest.mark.parametrize("model_message, status", [
    # the serving models' words (render/models): the engine died, the replica restarts
    ("engine failed: EngineDeadError: EngineCore encountered an issue.", 503),
    # the engine failed this one request (vLLM's and the LLM API model's INTERNAL errors), or the model unloads
    ("engine error: RuntimeError: the engine failed the request (finish_reason 'error')", 500),
    ("the model is unloading", 500),
    ("bad request: top_p must be in (0, 1]", 400),
])
def test_engine_failures_are_server_errors_and_only_the_requests_own_fault_is_a_400(model_message, status):
    """Triton 2.51's HTTP endpoints answer every error response with 400, whatever its code: the model's words decide
    (before: a dead engine reached the client as a 400 'the model rejected the request', which clients do not
    retry)."""
    for body in (json.dumps({"error": model_message}).encode(),
                 b"data: " + json.dumps({"error": model_message}).encode()):  # generate_stream's first response
        error = fe._triton_error(400, body)
        assert error.status == status, (body, error.status)
        assert error.type == ("invalid_request_error" if status == 400 else "server_error")
        assert model_message in error.message and "data:" not in error.message


# ---- logprobs and n (issue 46, item 5) ----


@pytest.mark.parametrize("kind, body, inputs, top", [
    ("chat", {}, {}, None), ("chat", {"n": 1, "logprobs": False, "top_logprobs": None}, {}, None),
    ("chat", {"n": 3}, {"num_return_sequences": 3}, None),
    ("chat", {"logprobs": True}, {"num_logprobs": 0}, 0),
    ("chat", {"logprobs": True, "top_logprobs": 5, "n": 2}, {"num_logprobs": 5, "num_return_sequences": 2}, 5),
    ("text", {"logprobs": 0}, {"num_logprobs": 0}, 0), ("text", {"logprobs": 3, "n": 4},
                                                         {"num_logprobs": 3, "num_return_sequences": 4}, 3),
    ("text", {"logprobs": None}, {}, None),
])
def test_n_and_logprobs_become_the_models_inputs(kind, body, inputs, top):
    """Before: n > 1 and logprobs were refused with 400."""
    fe.check_fields(body, kind)
    assert fe.choice_inputs(body, kind) == (inputs, top)


@pytest.mark.parametrize("kind, body, param", [
    ("chat", {"n": 0}, "n"), ("chat", {"n": 129}, "n"), ("chat", {"n": True}, "n"), ("text", {"n": "2"}, "n"),
    ("chat", {"logprobs": 2}, "logprobs"), ("chat", {"top_logprobs": 2}, "top_logprobs"),
    ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"), ("text", {"logprobs": True}, "logprobs"),
    ("text", {"logprobs": -1}, "logprobs"), ("text", {"logprobs": 21}, "logprobs"),
])
def test_bad_n_and_logprobs_are_400_naming_them(kind, body, param):
    with pytest.raises(fe.OpenAIError) as info:
        fe.choice_inputs(body, kind)
    assert (info.value.status, info.value.param) == (400, param)


def test_a_non_streaming_answer_too_large_to_hold_is_refused_before_it_is_generated():
    """n and logprobs multiply what a non-streaming answer holds in the frontend's memory until it is written."""
    fe.check_answer_size(False, 3, 8192, 5)  # n=3 with logprobs on an 8k context: fine
    fe.check_answer_size(False, 128, 2048, None)
    fe.check_answer_size(True, 128, 131072, 20)  # streamed: one response at a time
    for n, tokens, top, param in [(1, 131072, 20, "logprobs"), (128, 131072, None, "n"), (64, 8192, 5, "n")]:
        with pytest.raises(fe.OpenAIError) as info:
            fe.check_answer_size(False, n, tokens, top)
        assert (info.value.status, info.value.param) == (400, param) and "stream" in info.value.message


ENTRIES = [["Hello", -0.1, [["Hello", -0.1], ["Hi", -1.1]]], [" wörld", -0.25, [[" wörld", -0.25]]]]


def test_chat_logprobs_are_openai_s_shape():
    assert fe.chat_logprobs(ENTRIES) == {"refusal": None, "content": [
        {"token": "Hello", "logprob": -0.1, "bytes": list(b"Hello"),
         "top_logprobs": [{"token": "Hello", "logprob": -0.1, "bytes": list(b"Hello")},
                          {"token": "Hi", "logprob": -1.1, "bytes": list(b"Hi")}]},
        {"token": " wörld", "logprob": -0.25, "bytes": list(" wörld".encode()),
         "top_logprobs": [{"token": " wörld", "logprob": -0.25, "bytes": list(" wörld".encode())}]}]}


def test_completion_logprobs_are_openai_s_shape_with_offsets():
    assert fe.completion_logprobs(ENTRIES, offset=3) == {
        "tokens": ["Hello", " wörld"], "token_logprobs": [-0.1, -0.25],
        "top_logprobs": [{"Hello": -0.1, "Hi": -1.1}, {" wörld": -0.25}], "text_offset": [3, 8]}


# ---- tool calling (issue 46, item 3) ----

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time"}}
# the tool-call parts of the catalog families' own chat templates
TEMPLATES = {
    fe.HERMES: "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools> reply with "
               "<tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>{% endif %}",
    fe.LLAMA3_JSON: "{% if tools %}<|start_header_id|>ipython<|end_header_id|>{% endif %}<|python_tag|>",
    fe.MISTRAL: "[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS][TOOL_CALLS]",
    fe.DEEPSEEK_V3: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ name }}\n```json\n",
    fe.DEEPSEEK_V31: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{{ name }}<｜tool▁sep｜>{{ arguments }}",
    fe.HARMONY: "<|start|>assistant<|channel|>commentary to=functions.{{ name }}",
}


@pytest.mark.parametrize("family", list(TEMPLATES))
def test_the_tool_call_family_is_read_from_the_chat_template(family):
    assert fe.tool_family(TEMPLATES[family]) == family
    assert fe.tool_family("{{ messages }}") is None and fe.tool_family(None) is None


def test_tool_plans():
    assert fe.tool_plan({}, TEMPLATES[fe.HERMES]) is None
    assert fe.tool_plan({"tools": [], "tool_choice": "none"}, None) is None
    auto = fe.tool_plan({"tools": [WEATHER]}, TEMPLATES[fe.HERMES])
    assert (auto.choice, auto.family, auto.schema, auto.keep_special_tokens) == ("auto", fe.HERMES, None, True)
    assert not fe.tool_plan({"tools": [WEATHER]}, TEMPLATES[fe.LLAMA3_JSON]).keep_special_tokens
    assert fe.tool_plan({"tools": [WEATHER], "tool_choice": "none"}, None).choice == "none"
    required = fe.tool_plan({"tools": [WEATHER, TIME], "tool_choice": "required"}, None)
    # vLLM tool_parsers/utils.py _get_json_schema_from_tools
    assert required.schema == {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [
        {"properties": {"name": {"type": "string", "enum": ["get_weather"]},
                        "parameters": WEATHER["function"]["parameters"]}, "required": ["name", "parameters"]},
        {"properties": {"name": {"type": "string", "enum": ["get_time"]},
                        "parameters": {"type": "object", "properties": {}}}, "required": ["name", "parameters"]}]}}
    named = fe.tool_plan({"tools": [WEATHER, TIME], "tool_choice": {"type": "function",
                                                                    "function": {"name": "get_weather"}}}, None)
    assert (named.choice, named.name, named.schema) == ("named", "get_weather", WEATHER["function"]["parameters"])


@pytest.mark.parametrize("body, template, param", [
    ({"tools": "f"}, TEMPLATES[fe.HERMES], "tools"),
    ({"tools": [{"type": "function", "function": {}}]}, TEMPLATES[fe.HERMES], "tools"),
    ({"tools": [{"type": "code_interpreter"}]}, TEMPLATES[fe.HERMES], "tools"),
    ({"tools": [WEATHER]}, "{{ messages }}", "tools"),  # auto, and no format to read calls back
    ({"tools": [WEATHER]}, TEMPLATES[fe.HARMONY], "tools"),
    ({"tool_choice": "required"}, TEMPLATES[fe.HERMES], "tool_choice"),  # no tools
    ({"tools": [WEATHER], "tool_choice": "always"}, TEMPLATES[fe.HERMES], "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, None, "tool_choice"),
])
def test_bad_tools_are_400_naming_them(body, template, param):
    with pytest.raises(fe.OpenAIError) as info:
        fe.tool_plan(body, template)
    assert (info.value.status, info.value.param) == (400, param)


CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


@pytest.mark.parametrize("family, text, content", [
    # vllm/tool_parsers/hermes_tool_parser.py: content is what precedes the first <tool_call>
    (fe.HERMES, 'Let me look.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me look."),
    (fe.HERMES, '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', None),  # cut before the end tag
    # llama_tool_parser.py: JSON objects with name and arguments (or parameters)
    (fe.LLAMA3_JSON, '{"name": "get_weather", "parameters": {"city": "Paris"}}', None),
    (fe.LLAMA3_JSON, '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris"}}', None),
    # parser/mistral.py: before v11 a JSON list, from v11 name[ARGS]{...}
    (fe.MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]', None),
    (fe.MISTRAL, 'Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "Sure. "),
    (fe.DEEPSEEK_V3, 'ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
                     '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', "ok"),
    (fe.DEEPSEEK_V31, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
                      '<｜tool▁call▁end｜><｜tool▁calls▁end｜>', None),
])
def test_tool_calls_are_read_as_vllm_s_parsers_read_them(family, text, content):
    plan = fe.ToolPlan([WEATHER], family, "auto")
    got_content, calls = fe.parse_tool_calls(plan, text)
    assert got_content == content
    assert [c["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("family, text", [
    (fe.HERMES, "no call here"), (fe.HERMES, "<tool_call>{not json}</tool_call>"),
    (fe.LLAMA3_JSON, 'a set {"x": 1}'),  # JSON without a name: content (the parser's KeyError path)
    (fe.MISTRAL, "[TOOL_CALLS]oops"), (fe.DEEPSEEK_V31, "plain"),
])
def test_text_that_is_not_a_tool_call_stays_content(family, text):
    assert fe.parse_tool_calls(fe.ToolPlan([WEATHER], family, "auto"), text) == (text, [])


def test_forced_calls_are_read_from_the_guided_json():
    required = fe.ToolPlan([WEATHER], None, "required")
    assert fe.parse_tool_calls(required, '[{"name": "get_weather", "parameters": {"city": "Paris"}}]') == (None, [CALL])
    named = fe.ToolPlan([WEATHER], None, "named", name="get_weather")
    assert fe.parse_tool_calls(named, '{"city": "Paris"}') == (None, [CALL])
    assert fe.parse_tool_calls(required, '[{"name": "get_wea') == ('[{"name": "get_wea', [])  # cut by max_tokens


def test_parallel_tool_calls_false_keeps_the_first_call():
    """vLLM entrypoints/serve/utils/tool_calls_utils.py maybe_filter_parallel_tool_calls."""
    two = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' * 2
    body = {"tools": [WEATHER], "parallel_tool_calls": False}
    fe.check_fields(body, "chat")
    assert fe.parse_tool_calls(fe.tool_plan(body, TEMPLATES[fe.HERMES]), two) == (None, [CALL])
    assert len(fe.parse_tool_calls(fe.tool_plan({"tools": [WEATHER]}, TEMPLATES[fe.HERMES]), two)[1]) == 2
    with pytest.raises(fe.OpenAIError):
        fe.tool_plan({"tools": [WEATHER], "parallel_tool_calls": "no"}, TEMPLATES[fe.HERMES])


def test_streaming_sends_content_until_the_marker_and_the_calls_at_the_end():
    stream = fe.ToolStream(fe.ToolPlan([WEATHER], fe.HERMES, "auto"))
    sent = [stream.feed(t) for t in ("Let me ", "look.<tool", '_call>{"name": "get_weather", ',
                                     '"arguments": {"city": "Paris"}}</tool_call>')]
    assert sent == ["Let me ", "look.", "", ""]  # "<tool" was held back: it may begin the marker
    assert stream.finish() == ("", [CALL])
    plain = fe.ToolStream(fe.ToolPlan([WEATHER], fe.HERMES, "auto"))
    assert [plain.feed(t) for t in ("a <", "b")] == ["a ", "<b"] and plain.finish() == ("", [])
    llama = fe.ToolStream(fe.ToolPlan([WEATHER], fe.LLAMA3_JSON, "auto"))
    assert llama.feed(' {"name": "get_weather",') == "" and llama.feed(' "parameters": {"city": "Paris"}}') == ""
    assert llama.finish() == ("", [CALL])
    broken = fe.ToolStream(fe.ToolPlan([WEATHER], fe.HERMES, "auto"))
    broken.feed("x<tool_call>{bad")
    assert broken.finish() == ("<tool_call>{bad", [])  # not a call after all: the held text is content


def test_assistant_tool_calls_reach_the_template_with_arguments_as_objects():
    messages = fe.chat_messages({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]})
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert messages[1]["content"] == "" and messages[2]["tool_call_id"] == "call_1"
    template = fe.ChatTemplate(TEMPLATES[fe.HERMES])
    assert '"name": "get_weather"' in template.render(messages, [WEATHER])


def test_context_errors_read_as_openai_s_for_litellm():
    """LiteLLM raises ContextWindowExceededError when the message contains "this model's maximum context length is"
    (litellm_core_utils/exception_mapping_utils.py, ExceptionCheckers.is_error_str_context_window_exceeded)."""
    for error in (fe.context_exceeded(64, "messages", 60, 10), fe.context_exceeded(64, "prompt", max_tokens=64),
                  fe.context_exceeded(64, "prompt")):
        body = error.body()["error"]
        assert error.status == 400 and body["code"] == "context_length_exceeded"
        assert body["param"] in ("messages", "prompt") and body["type"] == "invalid_request_error"
        assert "this model's maximum context length is 64 tokens" in body["message"].lower()
    assert "70 tokens (60 in the messages, 10 for the completion)" in fe.context_exceeded(64, "messages", 60, 10).message


@pytest.mark.parametrize("engine_message", [
    # TensorRT-LLM 1.2.1 executor/base_worker.py _deduce_max_tokens (upstream's text, and the stand-in's)
    "bad request: `default_max_tokens` (0) must be greater than 0, `default_max_tokens` (0) = max_seq_len (64) - "
    "`splited_prompt_len` (64)",
    "bad request: `default_max_tokens` (-3) must be greater than 0: max_seq_len (64) - prompt length (67)",
    # vLLM 0.31.0 v1/engine/input_processor.py _validate_model_input
    "bad request: The decoder prompt (length 70) is longer than the maximum model length of 64. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
])
def test_engine_context_errors_are_recognised(engine_message):
    error = fe._triton_error(400, json.dumps({"error": engine_message}).encode())
    assert isinstance(error, fe.ContextOverflow) and error.code == "context_length_exceeded"
    other = fe._triton_error(400, json.dumps({"error": "bad request: top_p must be in (0, 1]"}).encode())
    assert not isinstance(other, fe.ContextOverflow) and other.code is None


@pytest.mark.parametrize("given, echoed", [
    ("abc-123", True), ("req_0f3A.9:x/y+z=@", True), ("a" * 128, True),
    (None, False), ("", False), ("a" * 129, False), ("has space", False), ("new\nline", False), ("ünï", False),
])
def test_request_id_echoes_sane_ids_only(given, echoed):
    rid = fe._request_id(given)
    assert (rid == given) is echoed
    if not echoed:
        assert rid.startswith("req_") and len(rid) == 36


def test_chat_template_renders_and_drops_the_bos_the_engine_adds():
    template = fe.ChatTemplate("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                               "{% if add_generation_prompt %}[assistant]{% endif %}", "<s>", "</s>")
    messages = fe.chat_messages({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    assert template.render(messages) == "[user]hi[assistant]"


def test_chat_template_errors_are_the_requests_fault():
    template = fe.ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(fe.OpenAIError) as info:
        template.render([{"role": "user", "content": "x"}])
    assert info.value.status == 400 and "roles must alternate" in info.value.message
    with pytest.raises(fe.OpenAIError):
        fe.ChatTemplate(None).render([{"role": "user", "content": "x"}])


def test_chat_template_is_sandboxed():
    template = fe.ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(fe.OpenAIError):
        template.render([{"role": "user", "content": "x"}])


def test_chat_template_loads_named_templates(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        '{"bos_token": {"content": "<s>"}, "chat_template": [{"name": "tool_use", "template": "T"}, '
        '{"name": "default", "template": "{{ bos_token }}D"}]}')
    template = fe.ChatTemplate.load(str(tmp_path))
    assert template.bos_token == "<s>" and template.render([{"role": "user", "content": "x"}]) == "D"


def test_without_jinja2_chat_explains_and_the_frontend_still_starts(monkeypatch):
    for module in ("jinja2", "jinja2.ext", "jinja2.sandbox"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as in an image without jinja2
    template = fe.ChatTemplate("{{ messages }}")
    with pytest.raises(fe.OpenAIError) as info:
        template.render([{"role": "user", "content": "x"}])
    assert info.value.status == 500 and "jinja2" in info.value.message


# ---- the Responses API: a request put as a chat request ----

def test_a_responses_request_becomes_the_chat_request_it_asks_for():
    body = {"model": "m", "instructions": "be brief", "max_output_tokens": 7, "temperature": 0.5, "store": True,
            "input": [{"role": "developer", "content": "rules"},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi "},
                                                                      {"type": "input_text", "text": "there"}]},
                      {"role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}],
            "stream": False, "tools": [], "tool_choice": "auto", "text": {"format": {"type": "text"}}}
    assert fe.chat_body_from_responses(body) == {
        "model": "m", "max_tokens": 7, "temperature": 0.5, "stream": False, "tools": [], "tool_choice": "auto",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "system", "content": "rules"},
                     {"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]}
    assert fe.chat_body_from_responses({"model": "m", "input": "hi"})["messages"] == [{"role": "user",
                                                                                        "content": "hi"}]


@pytest.mark.parametrize("body, param", [
    ({"input": None}, "input"), ({"input": []}, "input"), ({"input": 3}, "input"),
    ({"input": ["text"]}, "input[0]"), ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}]},
     "input[0].output"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{not json"}]},
     "input[0].arguments"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[0].name"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": ["user"], "content": "x"}]}, "input[0].role"),  # unhashable: not a lookup's TypeError
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": {"deep": "x"}}]}, "input[0].content"),
    ({"input": "x", "instructions": ["x"]}, "instructions"),
    ({"input": "x", "stream": "yes"}, "stream"), ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "x", "tools": {"type": "function", "name": "f"}}, "tools"),
    ({"input": "x", "tools": [{"type": "function", "parameters": {}}]}, "tools"),  # no name
    ({"input": "x", "tools": [{"type": "function", "name": "f", "defer_loading": True}]}, "tools"),
    ({"input": "x", "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"input": "x", "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice"),
    ({"input": "x", "tool_choice": ["auto"]}, "tool_choice"),
    ({"input": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"input": "x", "background": True}, "background"), ({"input": "x", "max_tool_calls": 2}, "max_tool_calls"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text"),
    ({"input": "x", "reasoning": {"effort": "low"}}, "reasoning"), ({"input": "x", "prompt": {"id": "p"}}, "prompt"),
])
def test_what_the_responses_api_cannot_take_is_a_400_naming_it(body, param):
    with pytest.raises(fe.OpenAIError) as info:
        chat = fe.chat_body_from_responses({"model": "m", **body})
        fe.sampling_inputs(chat, 100)  # what the chat path checks next (stream's type)
    assert (info.value.status, info.value.body()["error"]["param"]) == (400, param)


@pytest.mark.parametrize("finish, status, details", [("stop", "completed", None),
                                                     ("length", "incomplete", {"reason": "max_output_tokens"})])
def test_a_chat_answer_becomes_a_response(finish, status, details):
    answer = {"id": "chatcmpl-1", "created": 5, "model": "m", "usage": fe._usage(3, 2),
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "a b"}, "finish_reason": finish}]}
    response = fe.response_from_chat(answer, {"instructions": "x", "max_output_tokens": 2})
    assert (response["object"], response["status"], response["incomplete_details"]) == ("response", status, details)
    assert response["output"][0]["content"] == [{"type": "output_text", "text": "a b", "annotations": [],
                                                 "logprobs": []}]
    assert response["usage"]["input_tokens"] == 3 and response["usage"]["total_tokens"] == 5
    assert (response["instructions"], response["max_output_tokens"], response["created_at"]) == ("x", 2, 5)


RESPONSES_WEATHER = {"type": "function", "name": "get_weather", "description": "d", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_responses_tools_and_tool_items_become_chat_s():
    """Function tools at the top level (not under "function"), a named tool_choice, and a past call with its
    result: the chat request the same conversation is on /v1/chat/completions (vLLM's responses_utils.py mapping)."""
    body = {"model": "m", "tools": [RESPONSES_WEATHER, {"type": "function", "name": "noop", "parameters": None}],
            "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False, "stream": True,
            "stream_options": {"include_obfuscation": False},
            "input": [{"role": "user", "content": "weather?"},
                      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me"}],
                       "id": "msg_1", "status": "completed"},
                      {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                       "arguments": '{"city": "Paris"}', "id": "fc_1", "status": "completed"},
                      {"type": "function_call", "call_id": "call_2", "name": "noop", "arguments": ""},
                      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                      {"type": "function_call_output", "call_id": "call_2",
                       "output": [{"type": "input_text", "text": "done"}]}]}
    chat = fe.chat_body_from_responses(body)
    assert chat["tools"] == [{"type": "function", "function": {k: RESPONSES_WEATHER[k] for k in ("name", "description",
                                                                                     "parameters", "strict")}},
                             {"type": "function", "function": {"name": "noop"}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat["parallel_tool_calls"], chat["stream"]) == (False, True)
    assert chat["messages"] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me", "tool_calls": [  # the calls join the assistant's turn
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "noop", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "done"}]
    # and the chat path takes it: the plan forces the named function
    plan = fe.tool_plan(chat, None)
    assert plan is not None and (plan.choice, plan.name, plan.single) == ("named", "get_weather", True)
    calls_alone = fe.chat_body_from_responses({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})["messages"]
    assert calls_alone == [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    for choice in ("auto", "none", "required"):
        assert fe.chat_body_from_responses({"model": "m", "input": "x", "tool_choice": choice})["tool_choice"] == choice


def test_a_chat_answer_with_tool_calls_becomes_function_call_items():
    calls = fe.openai_tool_calls([{"name": "get_weather", "arguments": '{"city": "Paris"}'}])
    for content, kinds in ((None, ["function_call"]), ("Sure.", ["message", "function_call"])):
        answer = {"created": 5, "model": "m", "usage": fe._usage(3, 2), "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls},
             "finish_reason": "tool_calls"}]}
        body = {"tools": [RESPONSES_WEATHER], "tool_choice": "required", "parallel_tool_calls": False}
        response = fe.response_from_chat(answer, body)
        assert [item["type"] for item in response["output"]] == kinds and response["status"] == "completed"
        call = response["output"][-1]
        assert (call["call_id"], call["name"], call["arguments"]) == (calls[0]["id"], "get_weather",
                                                                      '{"city": "Paris"}')
        assert call["id"].startswith("fc_") and call["status"] == "completed"
        assert (response["tools"], response["tool_choice"], response["parallel_tool_calls"]) == (
            [RESPONSES_WEATHER], "required", False)  # what was asked, echoed


def _client_types():
    pydantic = pytest.importorskip("pydantic")
    responses = pytest.importorskip("openai.types.responses")
    return pydantic.TypeAdapter(responses.ResponseStreamEvent), responses


@pytest.mark.parametrize("case", ["text", "calls", "text+calls", "nothing", "cut"])
def test_response_events_are_the_client_s_types_in_order(case):
    """Every event validates (strictly: required fields, literals) as the official client's ResponseStreamEvent,
    sequence numbers count from 0, and the last event's Response holds every item done."""
    adapter, types = _client_types()
    out = fe.ResponseEvents({"model": "m", "tools": [RESPONSES_WEATHER]}, "m", 7)
    events = out.start()
    texts = ["Hello", " world"] if "text" in case or case == "cut" else []
    for text in texts:
        events += out.text_delta(text)
    calls = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}] if "calls" in case else []
    status = "incomplete" if case == "cut" else "completed"
    events += out.finish(calls, status, fe._usage(4, 3))
    parsed = [adapter.validate_python(e, strict=True) for e in events]
    assert [e.sequence_number for e in parsed] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    message = ["response.output_item.added", "response.content_part.added",
               *["response.output_text.delta"] * len(texts), "response.output_text.done",
               "response.content_part.done", "response.output_item.done"]
    call = ["response.output_item.added", "response.function_call_arguments.delta",
            "response.function_call_arguments.done", "response.output_item.done"]
    last = "response.incomplete" if case == "cut" else "response.completed"
    expected = ["response.created", "response.in_progress", *(message if texts or not calls else []),
                *(call if calls else []), last]
    assert kinds == expected
    final = parsed[-1].response
    assert isinstance(final, types.Response) and final.status == status and final.id == parsed[0].response.id
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (4, 3, 7)
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert final.model_dump(exclude_none=True)["output"] == [adapter.validate_python(
        {"type": "response.output_item.done", "sequence_number": 0, "output_index": 0, "item": i}).item.model_dump(
        exclude_none=True) for i in items]
    if texts:
        assert final.output[0].content[0].text == "Hello world" and final.output[0].status == status
    if calls:
        fc = final.output[-1]
        assert (fc.type, fc.name, fc.arguments, fc.status) == ("function_call", "get_weather", '{"city": "Paris"}',
                                                              "completed")
        assert fc.call_id.startswith("call_")
    if case == "cut":
        assert final.incomplete_details.reason == "max_output_tokens"


def test_a_failure_mid_stream_is_an_error_event_then_response_failed():
    adapter, _ = _client_types()
    out = fe.ResponseEvents({"model": "m"}, "m", 7)
    events = out.start() + out.text_delta("Hi") + out.failed(fe.OpenAIError(502, "inference failed: boom",
                                                                            "server_error"))
    parsed = [adapter.validate_python(e, strict=True) for e in events]
    assert [e.type for e in parsed[-2:]] == ["error", "response.failed"]
    assert parsed[-2].message == "inference failed: boom" and parsed[-1].response.status == "failed"
    assert parsed[-1].response.error.code == "server_error"


def test_tool_call_json_nested_deeper_than_the_parser_s_stack_is_a_400_or_text_not_a_crash():
    """Hostile input: a past call's arguments nested 100,000 deep (well within the body cap) is a 400 on the item,
    on /v1/responses and on chat; a model answer nested as deep is text, not a 500 in the middle of a stream."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(fe.OpenAIError) as info:
        fe.chat_body_from_responses({"model": "m", "input": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": deep}]})
    assert info.value.body()["error"]["param"] == "input[0].arguments"
    with pytest.raises(fe.OpenAIError) as info:
        fe.chat_messages({"messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": deep}}]}]})
    assert info.value.status == 400
    required = fe.ToolPlan([], fe.HERMES, "required")
    assert fe.parse_tool_calls(required, deep) == (deep, [])
    stream = fe.ToolStream(fe.ToolPlan([], fe.HERMES, "auto"))
    stream.feed("<tool_call>" + deep)
    assert stream.finish() == ("<tool_call>" + deep, [])
