"""spec.adapters on the real API server with the operator as a process: the CRD's rules, status.adapters, the adapter
list in the backend's ConfigMap, and an adapter removed without the serving pods being replaced (the Deployment's
template, generation and pods stay)."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import apply_manifest, available, backend_manifest, model_cache_volume, wait_for

from llmbackend.render import adapters as ra

ADAPTERS = [{"name": "sql", "source": {"pvc": {"claimName": "loras", "path": "/sql"}}},
            {"name": "chat", "source": {"pvc": {"claimName": "loras", "path": "/chat"}}}]


def _listed(cluster, namespace: str, name: str) -> list[str]:
    config_map = cluster.kube.get("ConfigMap", namespace, f"{name}-model-repo") or {}
    text = (config_map.get("data") or {}).get(ra.ADAPTERS_KEY)
    return [a["name"] for a in json.loads(text)["adapters"]] if text else []


def _status_names(cluster, namespace: str, name: str) -> list[str]:
    obj = cluster.kube.get("LLMBackend", namespace, name) or {}
    return [a["name"] for a in (obj.get("status") or {}).get("adapters") or []]


@pytest.fixture
def loras_claim(cluster, namespace):
    """The claim the pvc adapters are on, bound to a volume of its own (no storage provisioner here)."""
    volume = model_cache_volume(namespace, claim="loras")
    volume["metadata"]["name"] = f"{namespace}-loras"
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "loras", "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                      "storageClassName": "", "volumeName": volume["metadata"]["name"]}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([volume, claim]))
    yield "loras"
    cluster.kubectl("delete", "pv", volume["metadata"]["name"], "--wait=false", check=False)


def test_adapters_are_listed_and_one_is_removed_without_replacing_the_pods(cluster, operator, namespace, loras_claim):
    name = "lora"
    apply_manifest(cluster, backend_manifest(name, namespace, adapters=ADAPTERS))
    wait_for(lambda: available(cluster, namespace, name), timeout=60, what="Available=True")
    wait_for(lambda: _listed(cluster, namespace, name) == ["sql", "chat"], what="both adapters listed")
    obj = cluster.kube.get("LLMBackend", namespace, name)
    assert [(a["name"], a["phase"], a["reason"]) for a in obj["status"]["adapters"]] == [
        ("sql", "Ready", "AdapterNotChecked"), ("chat", "Ready", "AdapterNotChecked")]
    deployment = cluster.kube.get("Deployment", namespace, name)
    before = (deployment["metadata"]["generation"], deployment["spec"]["template"])
    pods = {p["metadata"]["uid"] for p in cluster.kube.list("Pod", namespace, label_selector=f"app.kubernetes.io/instance={name}")}
    assert pods

    apply_manifest(cluster, backend_manifest(name, namespace, adapters=ADAPTERS[:1]))
    wait_for(lambda: _listed(cluster, namespace, name) == ["sql"], what="chat gone from the list")
    wait_for(lambda: _status_names(cluster, namespace, name) == ["sql"], what="chat gone from status.adapters")
    deployment = cluster.kube.get("Deployment", namespace, name)
    assert (deployment["metadata"]["generation"], deployment["spec"]["template"]) == before
    after = {p["metadata"]["uid"] for p in cluster.kube.list("Pod", namespace, label_selector=f"app.kubernetes.io/instance={name}")}
    assert after == pods
    wait_for(lambda: available(cluster, namespace, name), timeout=30, what="still Available")


def test_the_crd_refuses_a_duplicate_adapter_and_the_base_models_name(cluster, namespace):
    duplicate = backend_manifest("dup", namespace, adapters=[ADAPTERS[0], {**ADAPTERS[1], "name": "sql"}])
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(duplicate), check=False)
    assert refused.returncode != 0 and "Duplicate value" in refused.stderr, refused.stderr
    base = backend_manifest("same", namespace, adapters=[{**ADAPTERS[0], "name": "llama-3.1-8b"}])
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(base), check=False)
    assert refused.returncode != 0 and "may not have the base model's name" in refused.stderr, refused.stderr
    storage = backend_manifest("sc", namespace, adapters=[{"name": "x", "source": {
        "uri": "hf://acme/x", "cache": {"storageClassName": "fast"}}}])
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(storage), check=False)
    assert refused.returncode != 0 and "adapters use the cache claim as it is" in refused.stderr, refused.stderr


def test_the_crd_refuses_an_adapter_named_as_the_backend_serving_the_base_under_its_own_name(cluster, namespace):
    """Issue 46 F4: without spec.model.name or a preset the base model is served as metadata.name, which shadowed an
    adapter of that name. Refused on create and on an update into it; other updates of such a backend go through."""
    model = {"source": {"uri": "s3://models/tuned"}}
    clash = backend_manifest("tuned", namespace, model=model, adapters=[{**ADAPTERS[0], "name": "tuned"}])
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(clash), check=False)
    assert refused.returncode != 0 and "may not have the base model's name (metadata.name" in refused.stderr, refused.stderr
    apply_manifest(cluster, backend_manifest("tuned", namespace, model=model, adapters=ADAPTERS[:1]))
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(clash), check=False)
    assert refused.returncode != 0 and "metadata.name" in refused.stderr, refused.stderr
    named = backend_manifest("tuned", namespace, model={**model, "name": "base"}, adapters=[{**ADAPTERS[0], "name": "tuned"}])
    apply_manifest(cluster, named)  # served as "base": the adapter's name is free
