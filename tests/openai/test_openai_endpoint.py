"""The official `openai` client against the operator's OpenAI frontend in front of a real tritonserver.

Everything comes from what the operator renders for a tensorrtllm backend: Triton serves the ConfigMap's model
repository (the LLM API model, with the CPU stand-in engine as the only stand-in), and the frontend is the
ConfigMap's `openai-frontend.py` (and its `http_body.py`) run with the rendered container's arguments (addresses made local; the
checkpoint's tokenizer_config.json is tests/openai/tokenizer). A "token" of the stand-in is a whitespace-separated
word and its reply repeats the prompt's words, so the expected counts below follow from the prompts, and the chat
prompt is what the checkpoint's chat template makes of the messages.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from devcluster.tritonserver import available
from llmbackend.api import engine_metrics as em
from llmbackend.api.v1alpha1 import PlanStatus
from llmbackend.render import openai as rendered_openai
from llmbackend.render.workloads import RolloutStrategy, desired_objects

# No conftest.py here: tests/e2e's tests import theirs as `conftest`, and a second one would shadow it.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "triton")]
from harness import free_port  # noqa: E402
from llmapi_support import REF, backend_spec, serve  # noqa: E402
from servers import local_args, run_frontend  # noqa: E402

pytest.importorskip("openai", reason="pip install -e '.[test]' (the official openai client)")
pytest.importorskip("jinja2", reason="pip install -e '.[test]' (chat templates)")

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

HERE = Path(__file__).resolve().parent
MODEL = "llama-3.1-8b"  # the preset: the Triton model and the OpenAI model id
TOKENIZER = HERE / "tokenizer"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    spec = backend_spec(4)
    workdir = tmp_path_factory.mktemp("openai")
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    objects = desired_objects(REF, spec, plan, 1, RolloutStrategy("Recreate"))
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == rendered_openai.VOLUME_NAME)
    for item in volume["configMap"]["items"]:  # the frontend and its helper, as the pod mounts them
        (workdir / item["path"]).write_text(config_map["data"][item["key"]])
    program = workdir / rendered_openai.FRONTEND_KEY
    container = next(c for c in pod["containers"] if c["name"] == rendered_openai.CONTAINER_NAME)
    with serve(spec, workdir) as (server, name):
        assert name == MODEL
        port = free_port()
        args = local_args(container["args"], server.http_url, server.metrics_url, str(TOKENIZER), port)
        with run_frontend(program, args, port) as url:
            yield url


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
    assert len(texts) >= 4  # one chunk per generated token
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
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 3}, "n"),
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
