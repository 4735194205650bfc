"""The demo's last step: a real answer from the model repository the operator wrote into the ConfigMap.

kwok runs nothing inside the simulated pods, so the demo plays the pod's part: it reads the backend's ConfigMap
back from the API server, lays it out as the pod's init container would, and starts the real `tritonserver`
(nvidia-pytriton's binary) on it, bound to the pod's IP (kwok gives pods loopback addresses, 127.0.1.x) on Triton's
ports, with the CPU stand-in `tensorrt_llm` (dev/standins) on the model's path. It then asks one question through
Triton's generate endpoint and prints the reply and the engine metrics the operator's model exported.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmbackend.api import engine_metrics as em
from llmbackend.render import triton
from llmbackend.render.names import BackendRef, config_map_name, selector_string
from llmbackend.render.servingpod import config_map_files

from .build import REPO_ROOT
from .tritonserver import TritonServerError, available, run_tritonserver

STANDINS = REPO_ROOT / "dev" / "standins"
PROMPT = "Triton serves this model through the TensorRT-LLM LLM API"
BURST = 8
ENGINE_METRIC_PREFIXES = (em.ENGINE_QUEUE_METRIC, em.ENGINE_COMPUTE_METRIC, em.ENGINE_REQUESTS_METRIC,
                          em.ENGINE_FAILURES_METRIC, em.REQUEST_GAUGE, em.KV_GAUGE, em.TRITON_QUEUE_METRIC)


def _post(url: str, body: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback (the simulated pod's IP)
        return dict(json.loads(r.read().decode()))


def engine_metric_lines(text: str, model: str) -> list[str]:
    """The exported engine metrics (and Triton's own queue counter, for comparison) of one model."""
    return [line for line in text.splitlines()
            if line.startswith(ENGINE_METRIC_PREFIXES) and f'model="{model}"' in line]


def real_answer(kube: Any, namespace: str, backend: dict[str, Any], workdir: Path,
                say: Callable[[str], None] = print) -> bool:
    """Serve the backend's ConfigMap on the first pod's IP, print a reply and the engine metrics. False when it
    could not (the reason is printed)."""
    if not available():
        say("(no real answer: nvidia-pytriton's tritonserver is not installed; `make setup` installs it)")
        return False
    meta = backend["metadata"]
    ref = BackendRef(meta["name"], namespace, meta.get("uid", ""))
    config_map = kube.get("ConfigMap", namespace, config_map_name(ref))
    pods = [p for p in kube.list("Pod", namespace, label_selector=selector_string(ref)) if (p.get("status") or {}).get("podIP")]
    if config_map is None or not pods:
        say("(no real answer: the ConfigMap or a pod with an IP is missing)")
        return False
    pod_ip = pods[0]["status"]["podIP"]
    model = (backend.get("status") or {}).get("modelName") or meta["name"]
    repo = workdir / "model-repository"
    shutil.rmtree(repo, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    for rel, content in config_map_files(config_map).items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)
    say(f"\nreal Triton on pod {pods[0]['metadata']['name']} ({pod_ip}): loading the model repository of ConfigMap "
        f"{config_map_name(ref)} ({', '.join(sorted(config_map_files(config_map)))}) with the CPU stand-in engine ...")
    try:
        with run_tritonserver(repo, host=pod_ip, http_port=triton.HTTP_PORT, grpc_port=triton.GRPC_PORT,
                              metrics_port=triton.METRICS_PORT, extra_pythonpath=[STANDINS],
                              log_path=workdir / "tritonserver.log") as server:
            url = f"http://{server.http_url}/v2/models/{model}/generate"
            reply = _post(url, {"text_input": PROMPT, "max_tokens": 12, "return_num_output_tokens": True})
            say(f"POST {url}\n  prompt: {PROMPT!r}\n  reply:  {reply['text_output']!r} "
                f"(finish_reason {reply['finish_reason']}, {reply['num_output_tokens']} tokens)")
            # A few concurrent requests, then one refresh of the iteration-stats gauges.
            threads = [threading.Thread(target=_post, args=(url, {"text_input": f"{PROMPT} {i}", "max_tokens": 8}))
                       for i in range(BURST)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            time.sleep(2.5)  # the model refreshes its iteration-stats gauges every second
            with urllib.request.urlopen(server.metrics_url, timeout=10) as r:  # noqa: S310 - loopback
                lines = engine_metric_lines(r.read().decode(), model)
            say(f"engine metrics on {server.metrics_url} (after {1 + BURST} requests):")
            for line in lines:
                say(f"  {line}")
    except (TritonServerError, OSError) as exc:
        say(f"(no real answer: {exc})".splitlines()[0] + f"\n  log: {workdir / 'tritonserver.log'}")
        return False
    return True
