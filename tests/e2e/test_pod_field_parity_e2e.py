"""The CRD refuses the pod fields the API server refuses in a pod, and admits those it admits, on the real API server.

A backend whose Deployment the API server refuses (422) has no pod, ever, yet was admitted and took part in the GPU
pool (tests/unit/test_pool_attack2.py, finding 1). Each case here is sent twice with --dry-run=server: inside a bare
Pod (the API server's own validation, pkg/apis/core/validation/validation.go, is the reference) and inside an
LLMBackend (the CRD's schema and CEL rules); both must give the same answer.
"""

from __future__ import annotations

import pytest
import yaml
from conftest import backend_manifest

EXISTS = {"key": "example.com/any", "operator": "Exists"}


def _pod(namespace: str, tolerations=None, template=None) -> dict:
    template = template or {}
    container = {"name": "c", "image": "busybox"}
    for field in ("env", "volumeMounts"):
        if field in template:
            container[field] = template[field]
    spec: dict = {"containers": [container]}
    if tolerations:
        spec["tolerations"] = tolerations
    if "volumes" in template:
        spec["volumes"] = template["volumes"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "parity", "namespace": namespace, "labels": template.get("labels") or {}},
            "spec": spec}


def _backend(namespace: str, tolerations=None, template=None) -> dict:
    spec: dict = {}
    if tolerations:
        spec["scheduling"] = {"tolerations": tolerations}
    if template:
        spec["serving"] = {"podTemplate": template}
    return backend_manifest("parity", namespace, **spec)


def _env(source: dict) -> dict:
    return {"env": [{"name": "X", "valueFrom": source}]}


CASES = [
    # tolerations: ValidateTolerations
    pytest.param([{**EXISTS, "value": "x"}], None, False, id="exists-with-value"),
    pytest.param([{**EXISTS, "effect": "NoSchedule", "tolerationSeconds": 5}], None, False,
                 id="seconds-without-noexecute"),
    pytest.param([{"key": "a" * 64, "operator": "Exists"}], None, False, id="key-name-over-63"),
    pytest.param([{"operator": "Equal", "value": "x"}], None, False, id="equal-without-key"),
    pytest.param([{"value": "x"}], None, False, id="no-operator-without-key"),
    pytest.param([{**EXISTS, "effect": "NoExecute", "tolerationSeconds": 5}], None, True, id="noexecute-seconds"),
    pytest.param([{"operator": "Exists"}], None, True, id="exists-without-key"),
    pytest.param([{"key": "example.com/" + "a" * 63, "value": "v"}], None, True, id="key-name-63"),
    # env: validateEnvVarValueFrom, validateObjectFieldSelector, validateContainerResourceFieldSelector
    pytest.param(None, _env({"fieldRef": {"fieldPath": "metadata.bogus"}}), False, id="fieldRef-bogus"),
    pytest.param(None, _env({"fieldRef": {"fieldPath": "metadata.labels"}}), False, id="fieldRef-labels-whole"),
    pytest.param(None, _env({"fieldRef": {"fieldPath": "spec.restartPolicy"}}), False, id="fieldRef-volume-only"),
    pytest.param(None, _env({"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v2"}}), False,
                 id="fieldRef-apiVersion"),
    pytest.param(None, _env({"fieldRef": {"fieldPath": "status.podIPs"}}), True, id="fieldRef-podIPs"),
    pytest.param(None, _env({"fieldRef": {"fieldPath": "status.hostIPs"}}), True, id="fieldRef-hostIPs"),
    pytest.param(None, _env({"fieldRef": {"fieldPath": "metadata.labels['example.com/x']"}}), True,
                 id="fieldRef-one-label"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.bogus"}}), False, id="resource-bogus"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1Mi"}}), False,
                 id="resource-cpu-divisor"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "requests.memory", "divisor": "3Mi"}}), False,
                 id="resource-memory-divisor"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}}), True,
                 id="resource-memory"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.hugepages-2Mi"}}), True, id="resource-hugepages"),
    # divisors by canonical text (quantity.go CanonicalizeBytes): the same value in the same suffix family
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1000m"}}), True,
                 id="divisor-1000m-is-1"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.memory", "divisor": "1024Mi"}}), True,
                 id="divisor-1024Mi-is-1Gi"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.memory", "divisor": "1000"}}), True,
                 id="divisor-1000-is-1k"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.memory", "divisor": "1024"}}), False,
                 id="divisor-1024-stays-1024"),
    pytest.param(None, _env({"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}}), True,
                 id="divisor-0-is-unset"),
    # other podTemplate fields
    pytest.param(None, {"volumes": [{"name": "v", "csi": {"driver": "d" * 64}}]}, False, id="csi-driver-over-63"),
    pytest.param(None, {"volumes": [{"name": "v", "csi": {"driver": "d" * 63}}]}, True, id="csi-driver-63"),
    pytest.param(None, {"labels": {"a" * 64: "x"}}, False, id="label-key-name-over-63"),
]


@pytest.mark.parametrize("tolerations, template, allowed", CASES)
def test_the_crd_answers_as_the_api_server_does_for_a_pod(cluster, namespace, tolerations, template, allowed):
    pod = cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                          input=yaml.safe_dump(_pod(namespace, tolerations, template)))
    assert (pod.returncode == 0) == allowed, f"the reference moved: the API server says {pod.stderr or 'ok'}"
    backend = cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                              input=yaml.safe_dump(_backend(namespace, tolerations, template)))
    assert (backend.returncode == 0) == allowed, backend.stderr or "admitted"
