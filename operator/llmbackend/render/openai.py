"""The OpenAI-compatible endpoint of a backend (`serving.openai`): the frontend container, its port and its file.

The frontend (llmbackend/serving/openai_frontend.py, standard library + jinja2) runs as a second container of
each serving pod with the serving image, reads the checkpoint's chat template from the model source and talks
to Triton on localhost. It travels in the backend's ConfigMap under FRONTEND_KEY, mounted on its own (not
copied into the Triton model repository).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from ..api.v1alpha1 import LLMBackendSpec
from . import triton

OPENAI_PORT = 9000
PORT_NAME = "openai"
CONTAINER_NAME = "openai"
FRONTEND_KEY = "openai-frontend.py"
HTTP_BODY_KEY = "http_body.py"  # the frontend's helper (serving/http_body.py), imported from the same folder
# Request bodies: the largest one, and how many bytes of bodies are read and parsed at once (more wait, then 503).
# A parsed body costs up to BYTES_PER_BODY_BYTE its size (JSON of deeply nested empty lists: a list object of
# ~90 bytes every 2 bytes, ~47x in CPython; tests/openai/test_openai_bodies.py measures it), so the container's
# limit is the baseline plus the budget times it.
MAX_BODY_BYTES = 4 << 20
BODY_BUDGET_BYTES = 16 << 20
BYTES_PER_BODY_BYTE = 52
BASELINE_MEMORY_BYTES = 128 << 20  # Python, jinja2, the chat template
# Request heads and connections (serving/http_body.py): the request line and headers of one request at most
# MAX_HEADER_BYTES (431 beyond), within HEADER_TIMEOUT_S (408), and at most MAX_CONNECTIONS connections (requests in
# flight, streams included); more get 503 at once. Each connection holds a thread and at most one head:
# BYTES_PER_CONNECTION covers a head at the cap with its parsed copy and the thread (measured by
# tests/openai/test_openai_headers.py), so the limit is baseline + body budget + connections x BYTES_PER_CONNECTION.
MAX_HEADER_BYTES = 32 << 10
HEADER_TIMEOUT_S = 10
MAX_CONNECTIONS = 512
BYTES_PER_CONNECTION = 160 << 10
MEMORY_BYTES = (BASELINE_MEMORY_BYTES + BODY_BUDGET_BYTES * BYTES_PER_BODY_BYTE
                + MAX_CONNECTIONS * BYTES_PER_CONNECTION)
MEMORY_LIMIT = f"{(MEMORY_BYTES + (1 << 20) - 1) >> 20}Mi"
FRONTEND_DIR = "/opt/llmbackend"
VOLUME_NAME = "openai-frontend"


def enabled(spec: LLMBackendSpec) -> bool:
    return spec.serving.openai


def frontend_source() -> str:
    return resources.files("llmbackend.serving").joinpath("openai_frontend.py").read_text(encoding="utf-8")


def http_body_source() -> str:
    return resources.files("llmbackend.serving").joinpath("http_body.py").read_text(encoding="utf-8")


def config_map_data(spec: LLMBackendSpec) -> dict[str, str]:
    """Extra ConfigMap entries: the frontend program and its helper (changing them rolls the pods through the
    config hash)."""
    return {FRONTEND_KEY: frontend_source(), HTTP_BODY_KEY: http_body_source()} if enabled(spec) else {}


def checkpoint_dir(spec: LLMBackendSpec) -> str:
    """Where the checkpoint's tokenizer_config.json (chat template) lies inside the pod: the model source mount."""
    return triton.MODELS_DIR


def container(spec: LLMBackendSpec, image: str, triton_model: str, served_model: str,
              security_context: dict[str, Any], model_mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The frontend container; `model_mounts`: the serving container's mounts of the model source (read-only)."""
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python3", f"{FRONTEND_DIR}/{FRONTEND_KEY}"],
        "args": [
            f"--port={OPENAI_PORT}",
            f"--triton-url=http://127.0.0.1:{triton.HTTP_PORT}",
            # /metrics on the OpenAI port: the Inference Extension's endpoint picker scrapes the pool's target port.
            f"--metrics-url=http://127.0.0.1:{triton.METRICS_PORT}/metrics",
            f"--model={triton_model}",
            f"--served-model-name={served_model}",
            f"--tokenizer-dir={checkpoint_dir(spec)}",
            f"--max-body-bytes={MAX_BODY_BYTES}",
            f"--body-budget-bytes={BODY_BUDGET_BYTES}",
            # the context limit: what a request without max_tokens may generate up to, and what longer ones exceed
            f"--max-seq-len={spec.engine.max_seq_len}",
            f"--max-header-bytes={MAX_HEADER_BYTES}",
            f"--header-timeout={HEADER_TIMEOUT_S}",
            f"--max-connections={MAX_CONNECTIONS}",
        ],
        "env": [{**triton.OFFLINE_ENV}],  # the tokenizer is a local directory (read-only)
        "ports": [{"name": PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}],
        # /health is ready only when Triton's model is: the Service sends OpenAI traffic to loaded pods only.
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT_NAME}, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": PORT_NAME}, "periodSeconds": 10, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": MEMORY_LIMIT}},
        "volumeMounts": [{"name": VOLUME_NAME, "mountPath": FRONTEND_DIR, "readOnly": True},
                         *[{**m, "readOnly": True} for m in model_mounts]],
        "securityContext": security_context,
    }


def volume(config_map_name: str) -> dict[str, Any]:
    return {"name": VOLUME_NAME, "configMap": {"name": config_map_name, "items": [
        {"key": key, "path": key} for key in (FRONTEND_KEY, HTTP_BODY_KEY)]}}


def service_port() -> dict[str, Any]:
    return {"name": PORT_NAME, "port": OPENAI_PORT, "targetPort": PORT_NAME, "protocol": "TCP"}
