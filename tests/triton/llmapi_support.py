"""Shared pieces for the real-Triton tests of the LLM API model: the exact ConfigMap the operator renders, written
to disk and served by the real tritonserver with the CPU stand-in engine; metric reading; clients."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devcluster.tritonserver import TritonServer, run_tritonserver
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.names import BackendRef, model_name
from llmbackend.render.servingpod import config_map_files
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDINS = REPO_ROOT / "dev" / "standins"
REF = BackendRef("llama", "default", "uid-1")


def backend_spec(slots: int, **engine: Any) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": {"maxBatchSize": slots, "maxSeqLen": 8192, **engine},
    })


def rendered_repository(spec: LLMBackendSpec, into: Path, tp: int = 1) -> tuple[str, Path]:
    """Write the ConfigMap the operator would apply (same code path as the controller) as a model repository."""
    plan = PlanStatus(tensor_parallel=tp, pipeline_parallel=1, gpus_per_replica=tp, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    objects = desired_objects(REF, spec, plan, 1, RolloutStrategy("Recreate"))
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    for rel, content in config_map_files(config_map).items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        (into / rel).write_text(content)
    return model_name(REF, spec), into


@contextlib.contextmanager
def serve(spec: LLMBackendSpec, workdir: Path, iteration_s: float = 0.02) -> Iterator[tuple[TritonServer, str]]:
    name, repo = rendered_repository(spec, workdir / "repo")
    env = dict(os.environ, TRTLLM_STANDIN_ITERATION_S=str(iteration_s))
    with run_tritonserver(repo, extra_pythonpath=[STANDINS], env=env, startup_timeout_s=120) as server:
        yield server, name


def metrics(server: TritonServer) -> dict[tuple[str, frozenset], float]:
    """Prometheus text -> {(name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.metrics_url, timeout=5) as r:  # noqa: S310 - loopback
        text = r.read().decode()
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def metric(samples: dict, name: str, model: str, **labels: str) -> float:
    """Sum of a metric's samples for one model (and the given extra labels)."""
    total = 0.0
    found = False
    for (n, lbls), value in samples.items():
        d = dict(lbls)
        # prometheus_client's parser names counter samples <name>_total (Triton's text has no suffix)
        if n in (name, name + "_total") and d.get("model") == model and all(d.get(k) == v for k, v in labels.items()):
            total += value
            found = True
    if not found:
        raise KeyError(f"{name}{{model={model!r}, {labels}}} not exported")
    return total


def generate(server: TritonServer, model: str, body: dict[str, Any], stream: bool = False,
             timeout: float = 60) -> tuple[int, Any]:
    """POST /generate (JSON) or /generate_stream (list of SSE events)."""
    url = f"http://{server.http_url}/v2/models/{model}/generate" + ("_stream" if stream else "")
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback
            raw = r.read().decode()
            code = r.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")
    if not stream:
        return code, json.loads(raw)
    events = [json.loads(line[len("data: "):]) for line in raw.splitlines() if line.startswith("data: ")]
    return code, events


def closed_loop(server: TritonServer, model: str, concurrency: int, per_client: int, max_tokens: int) -> list[str]:
    """`concurrency` clients, each sends `per_client` requests one after another. Returns the error messages."""
    errors: list[str] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        for j in range(per_client):
            code, body = generate(server, model, {"text_input": f"client {i} request {j} says hello",
                                                  "max_tokens": max_tokens})
            if code != 200:
                with lock:
                    errors.append(str(body))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return errors
