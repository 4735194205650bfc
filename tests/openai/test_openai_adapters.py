"""LoRA adapters served as models, end to end: the official `openai` client, the operator's OpenAI frontend and a real
tritonserver serving the rendered model repository, with the CPU stand-in engines (each loads an adapter from its
path as the engine does, and its answer begins with the adapter's name: which adapter answered).

Two adapters of one base side by side, each in /v1/models and each request answered by its adapter; Triton's generate
endpoint takes the adapter as its `adapter` input; an unknown model is a 404 model_not_found, as OpenAI answers; an
adapter removed from the spec is gone from /v1/models and refused without restarting tritonserver. The adapter list
is the rendered ConfigMap key, laid out as the pod mounts it (its pod paths moved under a local directory, as the
kubelet's mounts would put them; rewritten in place as the kubelet replaces a mounted ConfigMap)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from devcluster.tritonserver import available
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import adapters as ra
from llmbackend.render.workloads import RolloutStrategy, desired_objects

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "triton")]
from harness import free_port  # noqa: E402
from llmapi_support import REF, serve  # noqa: E402
from servers import frontend_files, local_args, run_frontend  # noqa: E402

pytest.importorskip("openai", reason="pip install -e '.[test]' (the official openai client)")
pytest.importorskip("jinja2", reason="pip install -e '.[test]' (chat templates)")

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

HERE = Path(__file__).resolve().parent
MODEL = "llama-3.1-8b"
TOKENIZER = HERE / "tokenizer"
BASE = {"preset": MODEL, "source": {"pvc": {"claimName": "models", "path": "/llama"}}}
ADAPTERS = [{"name": "sql", "source": {"pvc": {"claimName": "loras", "path": "/sql"}}},
            {"name": "chat", "source": {"pvc": {"claimName": "loras", "path": "/chat"}}}]
PLAN = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                  memory_per_gpu_bytes=40 << 30)


def backend_spec(backend: str, adapters: list[dict[str, Any]]) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({
        "model": BASE, "adapters": adapters,
        "engine": {"backend": backend, "maxBatchSize": 4, "maxSeqLen": 300, "maxInputLen": 299},
        "serving": {"openai": True}})


def write_list(spec: LLMBackendSpec, mounts: Path, list_file: Path) -> None:
    """The rendered adapter list as the pods read it, its paths under `mounts`; replaced in one step (a new inode),
    as the kubelet swaps a mounted ConfigMap's files."""
    config_map = next(o for o in desired_objects(REF, spec, PLAN, 1, RolloutStrategy("Recreate"))
                      if o["kind"] == "ConfigMap")
    doc = json.loads(config_map["data"][ra.ADAPTERS_KEY])
    for entry in doc["adapters"]:
        entry["path"] = str(mounts) + entry["path"]
    tmp = list_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, list_file)


def make_adapter(path: Path, rank: int = 16) -> None:
    """A PEFT adapter directory: what the stand-ins read of it (adapter_config.json)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "r": rank,
        "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"], "bias": "none"}))


@pytest.fixture(scope="module", params=["tensorrtllm", "vllm"])
def stack(request, tmp_path_factory):
    """(frontend base URL, tritonserver, backend, workdir, list file)."""
    backend = request.param
    spec = backend_spec(backend, ADAPTERS)
    workdir = tmp_path_factory.mktemp("adapters")
    mounts = workdir / "mounts"
    for adapter in spec.adapters or []:
        make_adapter(Path(str(mounts) + ra.adapter_path(spec, adapter)))
    list_file = workdir / "adapters.json"
    write_list(spec, mounts, list_file)
    objects = desired_objects(REF, spec, PLAN, 1, RolloutStrategy("Recreate"))
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    for container in pod["containers"]:  # both containers read the list the env names
        assert ra.env() in container["env"], container["name"]
    program, frontend_args = frontend_files(spec, workdir)
    with mock.patch.dict(os.environ, {"VLLM_STANDIN_STEP_S": "0.02", ra.ADAPTERS_ENV: str(list_file)}), \
            serve(spec, workdir) as (server, name):
        assert name == MODEL
        port = free_port()
        args = local_args(frontend_args, server.http_url, server.metrics_url, str(TOKENIZER), port)
        with run_frontend(program, args, port) as url:
            yield url, server, backend, workdir, list_file, mounts


@pytest.fixture(scope="module")
def client(stack):
    import openai

    return openai.OpenAI(base_url=stack[0], api_key="unused", max_retries=0, timeout=60)


def test_the_base_and_every_adapter_are_models(client):
    models = {m.id: m for m in client.models.list().data}
    assert list(models) == [MODEL, "sql", "chat"]
    assert models["sql"].model_extra["parent"] == MODEL
    assert client.models.retrieve("chat").id == "chat"


def test_each_request_is_answered_by_the_adapter_it_names(client):
    prompt = "select every row"
    for model, first in ((MODEL, "select"), ("sql", "sql"), ("chat", "chat")):
        result = client.completions.create(model=model, prompt=prompt, max_tokens=4)
        assert result.model == model
        words = result.choices[0].text.split()
        assert words[0] == first, (model, words)
        assert (words[1:] == ["select", "every", "row"]) if model != MODEL else (words == ["select", "every", "row",
                                                                                           "select"])


def test_adapters_stream_side_by_side(client):
    from concurrent.futures import ThreadPoolExecutor

    def stream(model: str) -> tuple[str, str]:
        chunks = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello there"}],
                                                max_tokens=6, stream=True)
        seen = {c.model for c in chunks_list} if (chunks_list := list(chunks)) else set()
        assert seen == {model}
        return model, "".join(c.choices[0].delta.content or "" for c in chunks_list if c.choices)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(stream, ["sql", "chat", "sql", "chat"]))
    for model, text in answers:
        assert text.split()[0] == model


def test_an_unknown_model_is_a_404_as_openai_answers(client):
    import openai

    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="no-such-adapter", prompt="x", max_tokens=1)
    assert err.value.code == "model_not_found" and "'sql'" in err.value.message
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-adapter")


def _generate(server, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/{MODEL}/generate",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310 - loopback
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_tritons_generate_endpoint_takes_the_adapter(stack):
    server = stack[1]
    status, body = _generate(server, {"text_input": "one two", "max_tokens": 3, "adapter": "chat"})
    assert status == 200 and body["text_output"].split() == ["chat", "one", "two"]
    status, body = _generate(server, {"text_input": "one two", "max_tokens": 3, "adapter": "nope"})
    assert status == 400 and "unknown adapter 'nope'" in body["error"]


def _lora_series(server) -> list[tuple[float, dict[str, str]]]:
    """The LoRA gauge's series of the model (value, labels), the latest first: what the endpoint picker reads."""
    from llmapi_support import metrics

    from llmbackend.api import engine_metrics as em

    found = [(value, dict(labels)) for (name, labels), value in metrics(server).items()
             if name == em.LORA_INFO_GAUGE and dict(labels).get("model") == MODEL]
    return sorted(found, key=lambda s: -s[0])


def test_the_lora_gauge_names_the_adapters_in_the_engine(stack, client):
    """The Model Server Protocol's LoRA gauge the Inference Extension's lora-affinity-scorer reads: while a request
    for sql decodes, the latest series names sql running (max_lora: spec.engine.lora.maxLoras); afterwards none."""
    import threading

    server = stack[1]
    done = threading.Event()

    def long_stream() -> None:
        for _ in client.completions.create(model="sql", prompt="a b c", max_tokens=150, stream=True):
            pass
        done.set()

    threading.Thread(target=long_stream, daemon=True).start()
    deadline = time.monotonic() + 10
    while not (_lora_series(server) and _lora_series(server)[0][1]["running_lora_adapters"] == "sql"):
        assert time.monotonic() < deadline and not done.is_set(), _lora_series(server)
        time.sleep(0.1)
    assert _lora_series(server)[0][1]["max_lora"] == "4" and _lora_series(server)[0][1]["waiting_lora_adapters"] == ""
    assert done.wait(30)
    deadline = time.monotonic() + 5
    while _lora_series(server)[0][1]["running_lora_adapters"] != "":
        assert time.monotonic() < deadline, _lora_series(server)
        time.sleep(0.1)


def test_an_adapter_removed_from_the_spec_goes_without_a_restart(stack, client):
    import openai

    url, server, backend, workdir, list_file, mounts = stack
    pid = server.pid
    write_list(backend_spec(backend, ADAPTERS[:1]), mounts, list_file)  # spec.adapters without chat
    deadline = time.monotonic() + 10
    while [m.id for m in client.models.list().data] != [MODEL, "sql"]:
        assert time.monotonic() < deadline, "the frontend did not re-read the adapter list"
        time.sleep(0.2)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="chat", prompt="x", max_tokens=1)
    time.sleep(1.1)  # the model looks at the list at most once a second
    status, body = _generate(server, {"text_input": "one", "max_tokens": 2, "adapter": "chat"})
    assert status == 400 and "unknown adapter 'chat'" in body["error"]
    assert client.completions.create(model="sql", prompt="still here", max_tokens=3).choices[0].text.split()[0] == "sql"
    assert server.pid == pid
    os.kill(pid, 0)  # the same tritonserver process serves on
    # ... and an adapter added back is served again, still without a restart
    write_list(backend_spec(backend, ADAPTERS), mounts, list_file)
    time.sleep(1.2)
    assert client.completions.create(model="chat", prompt="back", max_tokens=2).choices[0].text.split() == [
        "chat", "back"]
