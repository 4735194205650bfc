"""Independent attacker pass (attack2) on the trust model for object references (docs/security.md, "Trust model"),
against the pure render functions: does every pod and Job the operator renders mount exactly what the admission
policy (manifests/default/admission-policy.yaml) saw and judged?

The seat is a tenant who may create, update, patch and delete LLMBackends in its namespace and nothing else (variants:
plus `view`, plus `get` on some Secrets, plus `use` on one claim). Probes that hold assert the claim plainly; probes
that break it assert the SAFE behaviour and are xfail(strict=True) with the finding and its severity. The e2e half
(the real API server with the shipped policy) is tests/e2e/test_refs_attack2_e2e.py.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import modelcache as mc
from llmbackend.render.multinode import LAUNCHER_RULES
from llmbackend.render.names import BackendRef, launcher_account_name
from llmbackend.render.podtemplate import PodTemplateConflictError
from llmbackend.render.workloads import RolloutStrategy, desired_objects

POLICY_VARIABLES = {v["name"]: v["expression"] for d in yaml.safe_load_all(
    (Path(__file__).resolve().parents[2] / "manifests/default/admission-policy.yaml").read_text())
    if d["kind"] == "ValidatingAdmissionPolicy" for v in d["spec"]["variables"]}

REF = BackendRef("llama", "team-a", "uid-1")
SURGE = RolloutStrategy("RollingUpdate", 1, 0)
DEFAULT_CACHE = mc.DEFAULT_CACHE_CLAIM
ONE_GPU = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                     memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
TWO_NODES = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2,
                       memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
TENANT_IMAGE = "registry.example/mallory/anything:1"


# ---- the policy's view of claims, read off manifests/default/admission-policy.yaml (one line per CEL term) ----

def policy_claims(spec: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(claims the policy judges as read-only: `use` or `create pods`; claims it judges as written: `create pods`).

    The namespace's default cache claim as a URI source's cache is what every author may name (the operator's own);
    it is in neither set, as in the policy.
    """
    source = (spec.get("model") or {}).get("source") or {}
    template = (spec.get("serving") or {}).get("podTemplate") or {}
    read_only: set[str] = set()
    written: set[str] = set()
    if "pvc" in source:
        read_only.add(source["pvc"]["claimName"])
    for adapter in spec.get("adapters") or []:
        if "pvc" in adapter["source"]:
            read_only.add(adapter["source"]["pvc"]["claimName"])
        claim = (adapter["source"].get("cache") or {}).get("claimName")
        if claim and claim != DEFAULT_CACHE:
            written.add(claim)
    for volume in template.get("volumes") or []:
        pvc = volume.get("persistentVolumeClaim")
        if pvc is None:
            continue
        (read_only if pvc.get("readOnly") is True else written).add(pvc["claimName"])
    claim = (source.get("cache") or {}).get("claimName", DEFAULT_CACHE)
    if claim != DEFAULT_CACHE:
        written.add(claim)
    return read_only, written


# ---- what the rendered pods and Jobs mount ----

def _pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for obj in objects:
        if obj["kind"] == "Deployment" or obj["kind"] == "Job":
            out.append((f"{obj['kind']} {obj['metadata']['name']}", obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "LeaderWorkerSet":
            lwt = obj["spec"]["leaderWorkerTemplate"]
            out.append(("LWS leader", lwt["leaderTemplate"]["spec"]))
            out.append(("LWS worker", lwt["workerTemplate"]["spec"]))
    return out


def mounted_claims(pod: dict[str, Any]) -> dict[str, bool]:
    """{claim: writable} of one pod: writable when the volume is not read-only and some mount of it is not either."""
    out: dict[str, bool] = {}
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    for volume in pod.get("volumes") or []:
        pvc = volume.get("persistentVolumeClaim")
        if pvc is None:
            continue
        mounts = [m for c in containers for m in c.get("volumeMounts", []) if m["name"] == volume["name"]]
        writable = pvc.get("readOnly") is not True and any(m.get("readOnly") is not True for m in mounts)
        out[pvc["claimName"]] = out.get(pvc["claimName"], False) or writable
    return out


def rendered(spec_dict: dict[str, Any], plan: PlanStatus) -> list[tuple[str, dict[str, Any]]]:
    """Every pod the operator renders for this spec: the workload's, and its download and inspector Jobs'."""
    spec = LLMBackendSpec.model_validate(spec_dict)
    objects = desired_objects(REF, spec, plan, 2, SURGE)
    source = spec.model.source
    assert source is not None
    if source.uri is not None:
        objects.append(mc.render_download_job(REF.namespace, source, "operator:1", 1000))
    if source.pvc is not None:
        objects.append(mc.render_inspect_job(REF.namespace, REF.name, source.pvc, "operator:1", 1000, {}, {}))
    for adapter in spec.adapters or []:
        if adapter.source.uri is not None:
            objects.append(mc.render_download_job(REF.namespace, adapter.source, "operator:1", 1000, adapter=True))
    return _pod_specs(objects)


def _spec(source: dict[str, Any], preset: str = "llama-3.1-8b", **extra: Any) -> dict[str, Any]:
    return {"model": {"preset": preset, "source": source}, "engine": {"image": TENANT_IMAGE}, **extra}


URI = {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}
ADAPTERS = [
    {"name": "a-pvc", "source": {"pvc": {"claimName": "adapter-claim", "path": "/a"}}},
    {"name": "a-uri", "source": {"uri": "hf://org/adapter-one"}},
    {"name": "a-named", "source": {"uri": "hf://org/adapter-two", "cache": {"claimName": "adapter-cache"}}},
]
TEMPLATE = {"volumes": [
    {"name": "shared", "persistentVolumeClaim": {"claimName": "shared", "readOnly": True}},
    {"name": "cache-ro", "persistentVolumeClaim": {"claimName": DEFAULT_CACHE, "readOnly": True}},
    {"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch-claim"}},
], "volumeMounts": [
    # the mount says writable, the volume read-only: the volume wins (the kubelet forces it)
    {"name": "shared", "mountPath": "/shared", "readOnly": False},
    {"name": "cache-ro", "mountPath": "/cache-again"},
    {"name": "scratch", "mountPath": "/scratch"},
]}
VARIANTS = {
    "pvc": _spec({"pvc": {"claimName": "weights", "path": "/llama"}}),
    "uri-default-cache": _spec(URI),
    "uri-named-cache": _spec({**URI, "cache": {"claimName": "team-cache"}}),
    "pvc-base-adapters": _spec({"pvc": {"claimName": "weights"}}, adapters=ADAPTERS),
    "uri-base-adapters": _spec(URI, adapters=ADAPTERS),
    "template-claims": _spec(URI, serving={"podTemplate": TEMPLATE}),
    "template-claims-pvc": _spec({"pvc": {"claimName": "weights"}}, serving={"podTemplate": TEMPLATE}, adapters=ADAPTERS),
}
PLANS = {"one-node": ("llama-3.1-8b", ONE_GPU), "mpi": ("llama-3.1-405b", TWO_NODES)}


@pytest.mark.parametrize("plan_name", sorted(PLANS))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_claim_a_rendered_pod_or_job_mounts_is_one_the_policy_judged(variant: str, plan_name: str) -> None:
    preset, plan = PLANS[plan_name]
    spec = copy.deepcopy(VARIANTS[variant])
    spec["model"]["preset"] = preset
    read_only, written = policy_claims(spec)
    caches = {DEFAULT_CACHE, (spec["model"]["source"].get("cache") or {}).get("claimName", DEFAULT_CACHE)}
    seen: set[str] = set()
    for where, pod in rendered(spec, plan):
        for claim, writable in mounted_claims(pod).items():
            seen.add(claim)
            if writable and where.startswith("Job"):  # the download Job writes its cache claim
                assert claim in written | {DEFAULT_CACHE}, f"{where} writes {claim}, which the policy never judged"
            elif writable:
                assert claim in written, f"{where} mounts {claim} writable; the policy judged it read-only or not at all"
                assert claim not in caches, f"{where} (a serving pod) writes the model cache {claim}"
            else:
                assert claim in read_only | written | {DEFAULT_CACHE}, f"{where} mounts {claim}, never judged"
    # and nothing the policy judged is dropped silently on the way (what was admitted is what is mounted)
    assert read_only | written <= seen


@pytest.mark.parametrize("plan_name", sorted(PLANS))
def test_a_read_only_claim_volume_stays_read_only_whatever_its_mount_says(plan_name: str) -> None:
    preset, plan = PLANS[plan_name]
    spec = copy.deepcopy(VARIANTS["template-claims"])
    spec["model"]["preset"] = preset
    for where, pod in rendered(spec, plan):
        for volume in pod["volumes"]:
            if volume["name"] == "shared":
                assert volume["persistentVolumeClaim"] == {"claimName": "shared", "readOnly": True}, where


@pytest.mark.parametrize("plan_name", sorted(PLANS))
def test_a_podtemplate_volume_cannot_take_the_name_or_path_of_any_operator_volume(plan_name: str) -> None:
    # Collision: a tenant volume named like an operator volume would replace it (e.g. `model-cache` pointing at
    # another claim, writable). Every name and mount path the operator renders, on every pod shape, is refused.
    preset, plan = PLANS[plan_name]
    base = _spec(URI, preset=preset, adapters=ADAPTERS[:2])
    names: set[str] = set()
    paths: set[str] = set()
    for _, pod in rendered(base, plan)[:2 if plan_name == "mpi" else 1]:
        names |= {v["name"] for v in pod["volumes"]}
        paths |= {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
    assert {"model-cache", "home", "tmp"} <= names
    for name in sorted(names):
        template = {"volumes": [{"name": name, "persistentVolumeClaim": {"claimName": "victim"}}]}
        with pytest.raises(PodTemplateConflictError, match=f"volumes sets {name}"):
            rendered({**base, "serving": {"podTemplate": template}}, plan)
    for path in sorted(paths):
        for alias in (path, path + "/"):
            template = {"volumes": [{"name": "mine", "emptyDir": {}}],
                        "volumeMounts": [{"name": "mine", "mountPath": alias}]}
            with pytest.raises(PodTemplateConflictError, match="volumeMounts sets"):
                rendered({**base, "serving": {"podTemplate": template}}, plan)


@pytest.mark.parametrize("name", ["HF_HUB_OFFLINE", "MODEL_PATH", "GPUS_PER_POD", "LLMBACKEND_ADAPTERS_FILE"])
def test_env_the_operator_sets_cannot_be_overridden_in_any_serving_container(name: str) -> None:
    spec = _spec(URI, adapters=ADAPTERS[1:2], serving={"podTemplate": {"env": [{"name": name, "value": "0"}]}})
    with pytest.raises(PodTemplateConflictError, match=f"env sets {name}"):
        rendered(spec, ONE_GPU)


def test_the_same_claim_as_source_and_as_a_writable_volume_is_judged_written() -> None:
    spec = _spec({"pvc": {"claimName": "weights"}}, serving={"podTemplate": {
        "volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": "weights"}}],
        "volumeMounts": [{"name": "w", "mountPath": "/w"}]}})
    read_only, written = policy_claims(spec)
    assert "weights" in written, "the writable use of the claim is what the policy judges (create pods)"
    deployment = rendered(spec, ONE_GPU)[0][1]
    assert mounted_claims(deployment) == {"weights": True}


# ---- findings ----

QUEUE_AND_CLASS_KEYS = [
    pytest.param("labels", "kueue.x-k8s.io/queue-name", id="kueue-queue-label"),
    pytest.param("labels", "kueue.x-k8s.io/priority-class", id="kueue-workload-priority-class-label"),
    pytest.param("annotations", "sidecar.istio.io/userVolume", id="istio-user-volume-annotation"),
]


# Fixed (attack2-1): the serving pods carry what a pod author sets, so the admission policy asks `create pods` for
# any key of podTemplate.labels and annotations (podAuthorOnly); the API server half is the e2e probe.
@pytest.mark.parametrize("field,key", QUEUE_AND_CLASS_KEYS)
def test_a_podtemplate_label_cannot_name_a_queue_or_class_the_policy_never_judged(field: str, key: str) -> None:
    spec = _spec(URI, serving={"podTemplate": {field: {key: "gold"}}})
    deployment = next(o for o in desired_objects(REF, LLMBackendSpec.model_validate(spec), ONE_GPU, 1, SURGE)
                      if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["metadata"][field][key] == "gold", "a pod author's label reaches the pods"
    terms = [t for t in re.split(r"\n\s*\+", POLICY_VARIABLES["podAuthorOnly"]) if f"?podTemplate.?{field}." in t]
    assert terms, f"no podAuthorOnly term reads podTemplate.{field}: {key} would pass unjudged"
    assert all("filter(m, size(m) > 0)" in t and "startsWith" not in t for t in terms), "every key, not some"


# Fixed (was a strict xfail): FINDING attack2-2 (medium): a multi-node TensorRT-LLM leader runs the tenant's image with
# the launcher account's token mounted, and the launcher ClusterRole granted `get pods` on every pod of the namespace
# (kubectl exec reads the pod first). Leaders exec with llmb-exec (launcher/main.go), which reads no pod; the role
# holds pods/exec only.
def test_the_token_in_the_tenants_leader_image_reads_no_pod_but_its_own_workers() -> None:
    spec = LLMBackendSpec.model_validate(_spec(URI, preset="llama-3.1-405b"))
    lws = next(o for o in desired_objects(REF, spec, TWO_NODES, 1, SURGE) if o["kind"] == "LeaderWorkerSet")
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert leader["serviceAccountName"] == launcher_account_name(REF)
    assert leader["automountServiceAccountToken"] is True
    assert {c["image"] for c in leader["containers"]} == {TENANT_IMAGE}, "the token sits in the tenant's image"
    namespace_wide_reads = [r for r in LAUNCHER_RULES if "pods" in r["resources"] and "get" in r["verbs"]
                            and not r.get("resourceNames")]
    assert not namespace_wide_reads, f"the launcher role reads every pod of the namespace: {namespace_wide_reads}"


# FINDING attack2-3 (low), fixed: a backend without podTemplate.serviceAccountName ran the tenant's image as the
# namespace's `default` ServiceAccount, which the tenant may not act as (no create serviceaccounts/token). The API
# token was not mounted, but identities tied to the account outside it (GKE Workload Identity through the metadata
# server; Azure Workload Identity, whose webhook injects the account's token into pods labelled
# azure.workload.identity/use, a label podTemplate.labels may set) were lent to the tenant. The serving pods now run
# as the backend's own `<name>-serving` account (render/servingpod.render_serving_account).
@pytest.mark.parametrize("plan", ["one-node", "mpi"])
def test_a_backend_without_a_service_account_does_not_run_as_the_namespaces_default(plan: str) -> None:
    preset, plan_status = PLANS[plan]
    spec_dict = _spec(URI, preset, serving={"podTemplate": {"labels": {"azure.workload.identity/use": "true"}}})
    spec = LLMBackendSpec.model_validate(spec_dict)
    objects = desired_objects(REF, spec, plan_status, 2, SURGE)
    accounts = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceAccount"}
    pods = rendered(spec_dict, plan_status)
    for where, pod in pods:
        if where.startswith("Job"):
            # The operator's Jobs keep `default`: they run the operator's program (explicit credentials only, no
            # metadata server, no projected token), with labels the operator fixes, so no identity of the account
            # reaches anything the tenant chose to run (docs/security.md, "Trust model").
            assert pod["containers"][0]["image"] == "operator:1" and pod["automountServiceAccountToken"] is False
            continue
        account = pod.get("serviceAccountName", "default")
        assert account != "default", f"{where} runs as the default ServiceAccount"
        assert account in accounts and accounts[account]["automountServiceAccountToken"] is False, (where, account)
    assert any(where.startswith("Job") for where, _ in pods) and len(pods) > 1


# Fixed (attack2-6): mount paths are compared after normalising (render/podtemplate.py), so an alias of an operator
# mount path is refused as the path itself is.
@pytest.mark.parametrize("alias", ["/model-cache/.", "//model-cache", "/./model-cache", "///model-cache//",
                                   "/model-cache/./"])
def test_an_alias_of_an_operator_mount_path_is_refused(alias: str) -> None:
    spec = _spec(URI, serving={"podTemplate": {"volumes": [{"name": "mine", "emptyDir": {}}],
                                               "volumeMounts": [{"name": "mine", "mountPath": alias}]}})
    assert mc.CACHE_MOUNT == "/model-cache"
    try:
        rendered(spec, ONE_GPU)
    except PodTemplateConflictError:
        return
    raise AssertionError(f"{alias} is mounted over the operator's {mc.CACHE_MOUNT}")
