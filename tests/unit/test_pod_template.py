"""spec.serving.podTemplate (render/podtemplate.py): merged into every serving pod, never over what the operator sets.

Golden files: tests/unit/golden/pods/<case>.yaml hold the whole rendered workload; regenerate them with
UPDATE_GOLDEN=1 and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from devcluster.cli import topology_nodes
from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.controller.decide import Observed, decide
from llmbackend.planning.inventory import Inventory
from llmbackend.render.names import BACKEND_LABEL, BackendRef, launcher_account_name, serving_account_name
from llmbackend.render.podtemplate import PodTemplateConflictError
from llmbackend.render.workloads import RolloutStrategy, desired_objects

GOLDEN = Path(__file__).parent / "golden" / "pods"
REF = BackendRef("llama", "serving", "uid-1")
SERVING, LAUNCHER = serving_account_name(REF), launcher_account_name(REF)
SURGE = RolloutStrategy("RollingUpdate", 1, 0)
TEMPLATE: dict[str, Any] = {
    "labels": {"team": "search", "sidecar.istio.io/inject": "false"},
    "annotations": {"prometheus.io/scrape": "true"},
    "imagePullSecrets": [{"name": "ngc-pull"}],
    "serviceAccountName": "llm-serving",
    "runtimeClassName": "nvidia",
    "env": [{"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
    "envFrom": [{"configMapRef": {"name": "proxy-settings"}}],
    "volumes": [{"name": "ca-bundle", "configMap": {"name": "corp-ca"}},
                {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}],
    "volumeMounts": [{"name": "ca-bundle", "mountPath": "/etc/ssl/corp", "readOnly": True},
                     {"name": "scratch", "mountPath": "/scratch"}],
}


def _spec(template: dict[str, Any] | None = TEMPLATE, backend: str = "tensorrtllm", preset: str = "llama-3.1-8b",
          **serving: Any) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({
        "model": {"preset": preset, "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": {"backend": backend},
        "serving": {**serving, **({"podTemplate": template} if template is not None else {})},
    })


def _plan(tp: int = 1, pp: int = 1, nodes: int = 1) -> PlanStatus:
    return PlanStatus(tensor_parallel=tp, pipeline_parallel=pp, gpus_per_replica=tp * pp, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")


def _workload(spec: LLMBackendSpec, plan: PlanStatus | None = None) -> dict[str, Any]:
    objects = desired_objects(REF, spec, plan or _plan(), 2, SURGE)
    return next(o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))


def _templates(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if workload["kind"] == "Deployment":
        return {"server": workload["spec"]["template"]}
    lwt = workload["spec"]["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


MULTI_NODE = _plan(tp=8, pp=2, nodes=2)
CASES = {
    "deployment-tensorrtllm-openai": (_spec(), _plan()),
    "leaderworkerset-tensorrtllm-mpi": (_spec(preset="llama-3.1-405b"), MULTI_NODE),
    "leaderworkerset-vllm-ray": (_spec(backend="vllm", preset="llama-3.1-405b", openai=False), MULTI_NODE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_serving_pod_gets_the_template(case: str) -> None:
    spec, plan = CASES[case]
    for role, template in _templates(_workload(spec, plan)).items():
        meta, pod = template["metadata"], template["spec"]
        assert meta["labels"]["team"] == "search" and meta["labels"][BACKEND_LABEL] == "llama", role
        assert meta["annotations"]["prometheus.io/scrape"] == "true"
        assert pod["imagePullSecrets"] == [{"name": "ngc-pull"}]
        assert pod["runtimeClassName"] == "nvidia"
        assert pod["automountServiceAccountToken"] is (role == "leader" and spec.engine.backend == "tensorrtllm")
        volumes = [v["name"] for v in pod["volumes"]]
        assert volumes[-2:] == ["ca-bundle", "scratch"] and "model-repository" in volumes
        for container in pod["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["NCCL_DEBUG"]["value"] == "WARN", (role, container["name"])
            assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
            assert container["envFrom"] == [{"configMapRef": {"name": "proxy-settings"}}]
            assert {"name": "scratch", "mountPath": "/scratch"} in container["volumeMounts"]
        for init in pod["initContainers"]:
            assert "envFrom" not in init and all(m["name"] != "scratch" for m in init["volumeMounts"])
    containers = [c["name"] for t in _templates(_workload(spec, plan)).values() for c in t["spec"]["containers"]]
    assert ("openai" in containers) == spec.serving.openai, "the OpenAI frontend gets env and mounts too"


def test_service_account_is_the_users_except_on_mpi_leaders() -> None:
    deployment = _templates(_workload(_spec()))["server"]["spec"]
    assert deployment["serviceAccountName"] == "llm-serving"
    assert deployment["automountServiceAccountToken"] is False, "the token stays unmounted unless the operator needs it"
    mpi = _templates(_workload(_spec(preset="llama-3.1-405b"), MULTI_NODE))
    assert mpi["leader"]["spec"]["serviceAccountName"] == LAUNCHER, "the launcher account may exec into the workers"
    assert mpi["worker"]["spec"]["serviceAccountName"] == "llm-serving"
    ray = _templates(_workload(_spec(backend="vllm", preset="llama-3.1-405b"), MULTI_NODE))
    assert {t["spec"]["serviceAccountName"] for t in ray.values()} == {"llm-serving"}


def test_no_template_changes_nothing() -> None:
    plain = _workload(_spec(template=None))
    assert plain == _workload(_spec(template={})), "an empty podTemplate renders the same pods"
    pod = _templates(plain)["server"]["spec"]
    assert "imagePullSecrets" not in pod and "runtimeClassName" not in pod
    assert pod["serviceAccountName"] == SERVING, "the backend's own account, never the namespace's default"


@pytest.mark.parametrize("case", ["deployment", "mpi", "ray"])
def test_without_a_named_account_the_pods_run_as_the_backend_s_own(case: str) -> None:
    """attack2-3: not `default` (cloud identities tied to it would be lent to the tenant's image). The account is a
    child: token off, owned by the backend, applied before the workload; a named account replaces it (pruned)."""
    preset, backend, plan = {"deployment": ("llama-3.1-8b", "tensorrtllm", _plan()),
                             "mpi": ("llama-3.1-405b", "tensorrtllm", MULTI_NODE),
                             "ray": ("llama-3.1-405b", "vllm", MULTI_NODE)}[case]
    spec = _spec(template={"labels": {"team": "search"}}, backend=backend, preset=preset)
    objects = desired_objects(REF, spec, plan, 2, SURGE)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    account = objects[kinds.index(("ServiceAccount", SERVING))]
    assert account["automountServiceAccountToken"] is False
    assert account["metadata"]["ownerReferences"] == [REF.owner_reference()]
    workload = next(o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))
    assert kinds.index(("ServiceAccount", SERVING)) < objects.index(workload)
    accounts = {role: t["spec"]["serviceAccountName"] for role, t in _templates(workload).items()}
    if case == "mpi":
        assert accounts == {"leader": LAUNCHER, "worker": SERVING}
    else:
        assert set(accounts.values()) == {SERVING}
    named = desired_objects(REF, _spec(backend=backend, preset=preset), plan, 2, SURGE)
    assert ("ServiceAccount", SERVING) not in [(o["kind"], o["metadata"]["name"]) for o in named]


def test_changing_the_template_rolls_the_pods() -> None:
    a = _templates(_workload(_spec()))["server"]
    b = _templates(_workload(_spec({**TEMPLATE, "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]})))["server"]
    assert a != b and a["metadata"]["labels"] == b["metadata"]["labels"]


# ---- conflicts: what the operator sets is refused, never overridden ----

@pytest.mark.parametrize("template,plan,names", [
    ({"env": [{"name": "GPUS_PER_POD", "value": "8"}]}, _plan(), "env sets GPUS_PER_POD"),
    ({"env": [{"name": "WORLD_SIZE", "value": "1"}]}, MULTI_NODE, "env sets WORLD_SIZE"),
    ({"volumes": [{"name": "models", "emptyDir": {}}]}, _plan(), "volumes sets models"),
    ({"volumes": [{"name": "launch", "emptyDir": {}}]}, MULTI_NODE, "volumes sets launch"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/models/"}]},
     _plan(), "volumeMounts sets /models/"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}]},
     _plan(), "volumeMounts sets /dev/shm"),
    # Labels the operator sets are refused by the schema too (RESERVED_KEYS); rendering refuses them as well, for a
    # spec that was never validated (built in code): the template's labels are set around validation here.
    ({"labels": {"app.kubernetes.io/instance": "other"}}, _plan(), "labels sets app.kubernetes.io/instance"),
    ({"labels": {"app.kubernetes.io/component": "worker"}}, MULTI_NODE, "labels sets app.kubernetes.io/component"),
])
def test_operator_fields_are_refused(template: dict[str, Any], plan: PlanStatus, names: str) -> None:
    labels = template.pop("labels", None)
    spec = _spec(template, preset="llama-3.1-405b" if plan.nodes_per_replica > 1 else "llama-3.1-8b")
    if labels:
        spec.serving.pod_template.labels = labels  # type: ignore[union-attr]
    with pytest.raises(PodTemplateConflictError) as raised:
        _workload(spec, plan)
    assert f"spec.serving.podTemplate.{names}" in str(raised.value)
    assert "rename or remove" in str(raised.value)
    assert raised.value.reason == cond.INVALID_POD_TEMPLATE


def _claim(claim: str, read_only: bool) -> dict[str, Any]:
    source = {"claimName": claim, **({"readOnly": True} if read_only else {})}
    return {"volumes": [{"name": "cache", "persistentVolumeClaim": source}],
            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}


def test_a_model_cache_claim_is_mounted_read_only_or_refused() -> None:
    uri_spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://org/name", "cache": {"claimName": "team-cache"}}},
        "serving": {"podTemplate": _claim("team-cache", False)}})
    for spec in (_spec(_claim("llmbackend-model-cache", False)), uri_spec):
        with pytest.raises(PodTemplateConflictError) as raised:
            _workload(spec)
        assert "mount a model cache claim" in str(raised.value) and "readOnly: true" in str(raised.value)
        assert raised.value.reason == cond.INVALID_POD_TEMPLATE
    mounted = _templates(_workload(_spec(_claim("llmbackend-model-cache", True))))["server"]["spec"]["volumes"]
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": "llmbackend-model-cache", "readOnly": True}} in mounted
    # Another claim is the admission policy's business (writable needs `create pods`), not a conflict.
    assert _workload(_spec(_claim("team-data", False)))


def test_a_conflict_is_a_condition_and_nothing_is_applied() -> None:
    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    spec = {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "llama"}}},
            "serving": {"podTemplate": {"env": [{"name": "GPUS_PER_POD", "value": "8"}]}}}
    obj = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "spec": spec, "status": {},
           "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 2}}
    decision = decide(Observed(obj, inventory.nodes()))
    found = {c["type"]: c for c in decision.conditions.to_list()}
    assert found["Degraded"]["status"] == "True" and found["Degraded"]["reason"] == cond.INVALID_POD_TEMPLATE
    assert "GPUS_PER_POD" in found["Degraded"]["message"]
    assert found["Available"]["status"] == "False"
    assert decision.apply == [] and decision.look_up == []


def test_a_stored_template_with_a_label_pods_are_selected_by_is_a_condition() -> None:
    """Issue 42: a backend stored before job-name was reserved is not served and says why (InvalidSpec)."""
    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    spec = {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "llama"}}},
            "serving": {"podTemplate": {"labels": {"job-name": "llmb-fetch-0123456789abcdef"}}}}
    obj = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "spec": spec, "status": {},
           "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 2}}
    decision = decide(Observed(obj, inventory.nodes()))
    found = {c["type"]: c for c in decision.conditions.to_list()}
    assert (found["Degraded"]["status"], found["Degraded"]["reason"]) == ("True", cond.INVALID_SPEC)
    assert "job-name" in found["Degraded"]["message"] and decision.apply == []


# ---- hostile input: the schema (pydantic here, CEL and structure in the API server) ----

@pytest.mark.parametrize("template,why", [
    ({"labels": {"llmbackend.dev/backend": "other"}}, "prefix the operator owns"),
    ({"annotations": {"llmbackend.dev/config-hash": "0"}}, "prefix the operator owns"),
    ({"labels": {"leaderworkerset.sigs.k8s.io/group-index": "0"}}, "prefix the operator owns"),
    # Issue 42: labels the operator or a workload controller selects pods by.
    ({"labels": {"job-name": "llmb-fetch-0123456789abcdef"}}, "selects pods by"),
    ({"labels": {"controller-uid": "u"}}, "selects pods by"),
    ({"labels": {"batch.kubernetes.io/job-name": "llmb-fetch-0123456789abcdef"}}, "prefix the operator owns"),
    ({"annotations": {"batch.kubernetes.io/job-tracking": ""}}, "prefix the operator owns"),
    ({"labels": {"app.kubernetes.io/managed-by": "llmbackend-operator"}}, "selects pods by"),
    ({"labels": {"pod-template-hash": "5d8f"}}, "selects pods by"),
    ({"labels": {"statefulset.kubernetes.io/pod-name": "llama-0"}}, "selects pods by"),
    ({"annotations": {"container.apparmor.security.beta.kubernetes.io/triton": "unconfined"}}, "security settings"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "Extra inputs"),
    ({"volumes": [{"name": "two", "emptyDir": {}, "configMap": {"name": "c"}}]}, "exactly one"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "y", "mountPath": "/y"}]},
     "must name a volume"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/a/../etc"}]}, "'..'"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/a", "subPath": "../.."}]},
     "'..'"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "relative"}]}, "pattern"),
    ({"volumes": [{"name": "s", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]}}]}, "'..'"),
    ({"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}, "not both"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "twice"),
    ({"env": [{"name": "A=B; rm -rf /", "value": "1"}]}, "pattern"),
    ({"envFrom": [{"prefix": "X_"}]}, "exactly one"),
    ({"serviceAccountName": "../default"}, "pattern"),
    ({"securityContext": {"privileged": True}}, "Extra inputs"),
])
def test_hostile_templates_are_rejected(template: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError) as raised:
        _spec(template)
    assert why in str(raised.value)


# ---- golden: the whole workload ----

@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    spec, plan = CASES[case]
    text = yaml.safe_dump(_workload(spec, plan), sort_keys=True, width=120)
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs from golden (UPDATE_GOLDEN=1 to regenerate, then review)"
