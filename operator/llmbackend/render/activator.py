"""The activator of a backend that scales to zero (mode operator, minReplicas 0): what receives requests at zero.

Two children: the activator Deployment (one small pod, the operator image, `python -m llmbackend.serving.activator`)
and a Service `<name>-serving` that selects only the serving pods, which the activator forwards to. The backend's
own Service keeps its name and ports; its selector names the activator while the backend has no Ready serving pod
(or is scaled to 0) and the serving pods otherwise (workloads.render_service): the operator, which decides 0 -> 1
anyway, flips it. The serving pods' labels never change, so enabling scale to zero restarts nothing.
"""

from __future__ import annotations

from typing import Any

from ..api import engine_metrics as EM
from ..api.v1alpha1 import ACTIVATOR_SUFFIX, SERVING_SUFFIX, AutoscalingMode, LLMBackendSpec
from . import openai, triton

COMPONENT = "activator"
CONTAINER_NAME = "activator"
MAX_HELD = 1000
READINESS_PERIOD_S = 2
# Request bodies: the largest one, and how many bytes of bodies the activator holds at once (more get 503 at once).
# A held body costs about its size (BYTES_PER_BODY_BYTE, with the buffer's growth; measured by
# tests/activator/test_activator_bodies.py), so the container's limit is the baseline plus the budget times it.
MAX_BODY_BYTES = 16 << 20
BODY_BUDGET_BYTES = 128 << 20
BYTES_PER_BODY_BYTE = 1.25
BASELINE_MEMORY_BYTES = 64 << 20  # Python and its modules
# Request heads and connections (serving/http_body.py): the request line and headers of one request at most
# MAX_HEADER_BYTES (431 beyond), within HEADER_TIMEOUT_S (408), and at most MAX_CONNECTIONS connections on the
# proxied ports together (room for the MAX_HELD held requests), METRICS_CONNECTIONS on the metrics port; more get
# 503 at once. Each connection holds a thread and at most one head: BYTES_PER_CONNECTION covers a head at the cap
# with its parsed copy and the thread (measured by tests/activator/test_activator_headers.py), so the limit is
# baseline + body budget + connections x BYTES_PER_CONNECTION.
MAX_HEADER_BYTES = 32 << 10
HEADER_TIMEOUT_S = 10
MAX_CONNECTIONS = 1024
METRICS_CONNECTIONS = 32
BYTES_PER_CONNECTION = 160 << 10
MEMORY_BYTES = (BASELINE_MEMORY_BYTES + int(BODY_BUDGET_BYTES * BYTES_PER_BODY_BYTE)
                + (MAX_CONNECTIONS + METRICS_CONNECTIONS) * BYTES_PER_CONNECTION)
MEMORY_LIMIT = f"{(MEMORY_BYTES + (1 << 20) - 1) >> 20}Mi"
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": MEMORY_LIMIT}}
RUN_AS_UID = 65532  # the operator image's user (Dockerfile)


def enabled(spec: LLMBackendSpec) -> bool:
    """Rendered for the built-in autoscaler only: with modes hpa/keda another controller owns replicas."""
    a = spec.autoscaling
    return a.enabled and a.mode == AutoscalingMode.OPERATOR and a.min_replicas == 0


def deployment_name(backend: str) -> str:
    return backend + ACTIVATOR_SUFFIX


def serving_service_name(backend: str) -> str:
    return backend + SERVING_SUFFIX


def proxied_ports(spec: LLMBackendSpec) -> list[tuple[str, int]]:
    """(Service port name, port) the activator holds requests on: HTTP only (Triton's gRPC is not proxied)."""
    ports = [("http", triton.HTTP_PORT)]
    if openai.enabled(spec):
        ports.append((openai.PORT_NAME, openai.OPENAI_PORT))
    return ports


def args(spec: LLMBackendSpec, backend: str, namespace: str) -> list[str]:
    return [*(f"--port={port}" for _, port in proxied_ports(spec)),
            f"--upstream={serving_service_name(backend)}.{namespace}.svc",
            f"--metrics-port={triton.METRICS_PORT}", f"--held-metric={EM.ACTIVATOR_HELD_METRIC}",
            f"--hold-timeout={spec.autoscaling.hold_timeout_seconds}", f"--max-held={MAX_HELD}",
            f"--max-body-bytes={MAX_BODY_BYTES}", f"--body-budget-bytes={BODY_BUDGET_BYTES}",
            f"--max-header-bytes={MAX_HEADER_BYTES}", f"--header-timeout={HEADER_TIMEOUT_S}",
            f"--max-connections={MAX_CONNECTIONS}", f"--max-metrics-connections={METRICS_CONNECTIONS}"]


def render(backend: str, namespace: str, spec: LLMBackendSpec, serving_service: dict[str, Any], labels: dict[str, str],
           selector: dict[str, str], owner: dict[str, Any], image: str) -> list[dict[str, Any]]:
    """The serving pods' own Service and the activator Deployment, in apply order.

    serving_service: the backend's Service as it is with replicas (selecting the serving pods), copied under the
    name `<name>-serving` so the activator forwards port for port; labels: the activator's (the backend's, component
    activator); selector: the activator pods'.
    """
    def meta(name: str, obj_labels: dict[str, str]) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": obj_labels, "ownerReferences": [owner]}

    service = {**serving_service, "metadata": {**serving_service["metadata"], "name": serving_service_name(backend)}}
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID, "readOnlyRootFilesystem": True}
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python", "-m", "llmbackend.serving.activator"],
        "args": args(spec, backend, namespace),
        "ports": [*({"name": name, "containerPort": port, "protocol": "TCP"} for name, port in proxied_ports(spec)),
                  {"name": "metrics", "containerPort": triton.METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": READINESS_PERIOD_S},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
                          "failureThreshold": 6},
        "resources": RESOURCES,
        "securityContext": security,
    }
    return [service, {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(deployment_name(backend), labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": {
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                # Held requests wait for a replica, not for this pod: on a restart they are answered (connection
                # closed) rather than kept for minutes.
                "terminationGracePeriodSeconds": 5,
                "containers": [container],
            }},
        },
    }]
