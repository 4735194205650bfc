"""The CRD's pydantic side of the pod fields the API server refuses (tests/e2e/test_pod_field_parity_e2e.py checks
the same answers against the real API server, Pod and LLMBackend both): the operator re-validates every stored spec
with these models, so they must answer as the CEL rules do."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmbackend.api.v1alpha1 import ResourceFieldSelector, Toleration


@pytest.mark.parametrize("resource, divisor, allowed", [
    ("limits.cpu", "1m", True), ("limits.cpu", "1", True), ("limits.cpu", "1000m", True), ("limits.cpu", "0", True),
    ("limits.cpu", "1Mi", False), ("limits.cpu", "2", False), ("limits.cpu", "0.5", False),
    ("requests.memory", "1Mi", True), ("requests.memory", "1024Mi", True), ("requests.memory", "1000", True),
    ("requests.memory", "1024", False), ("requests.memory", "3Mi", False), ("requests.memory", "1m", False),
    ("limits.hugepages-2Mi", "1Gi", True), ("limits.ephemeral-storage", "1E", True),
])
def test_divisors_as_the_api_server_reads_them(resource, divisor, allowed):
    if allowed:
        assert ResourceFieldSelector.model_validate({"resource": resource, "divisor": divisor})
    else:
        with pytest.raises(ValidationError, match="divisor of"):
            ResourceFieldSelector.model_validate({"resource": resource, "divisor": divisor})


@pytest.mark.parametrize("toleration, message", [
    ({"key": "k", "operator": "Exists", "value": "x"}, "value must be empty"),
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}, "needs effect NoExecute"),
    ({"key": "k", "tolerationSeconds": 5}, "needs effect NoExecute"),
    ({"operator": "Equal", "value": "x"}, "operator must be Exists when key is empty"),
    ({"value": "x"}, "operator must be Exists when key is empty"),
    ({"key": "example.com/" + "a" * 64, "operator": "Exists"}, "pattern"),
])
def test_tolerations_the_api_server_refuses(toleration, message):
    with pytest.raises(ValidationError, match=message):
        Toleration.model_validate(toleration)


@pytest.mark.parametrize("toleration", [
    {"operator": "Exists"}, {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
    {"key": "example.com/" + "a" * 63, "value": "v", "effect": "NoSchedule"}, {"key": "k", "operator": "Equal"},
])
def test_tolerations_the_api_server_allows(toleration):
    assert Toleration.model_validate(toleration)
