"""Issue 42, third attacker pass (independent): what the operator would create from a tenant's spec.

Seat: a tenant who may only create, update, patch and delete LLMBackends in its namespace (no pods, no Secrets, no
`use` on any claim). Method: read docs/security.md ("Trust model", "Every field that names another object"),
docs/security-rbac.md, the admission policy and operator/llmbackend/render, then render specs such a tenant may
write (the admission policy lets them through: tests/e2e/test_refs_attack3_e2e.py checks that side on a real API
server) with the operator's own pure renderers, and look at what the children would carry: the ServiceAccount every
pod running a tenant-chosen image runs as, the labels and annotations on every child, the claims mounted and where.

Convention: a probe that holds asserts the claim; a probe that breaks one asserts the safe behaviour and is a strict
expected failure whose reason starts with FINDING and its severity.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from llmbackend.api.v1alpha1 import LLMBackendSpec, ModelSource, PlanStatus
from llmbackend.render import modelcache
from llmbackend.render.modelcache import DEFAULT_CACHE_CLAIM
from llmbackend.render.names import BackendRef, launcher_account_name, serving_account_name
from llmbackend.render.podtemplate import PodTemplateConflictError
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("chat", "team-b", "uid-chat")
SERVING, LAUNCHER = serving_account_name(REF), launcher_account_name(REF)
SURGE = RolloutStrategy("RollingUpdate", 1, 0)
ONE_NODE = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
TWO_NODES = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2,
                       memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
# Strings a tenant chooses, each marked so that it can be found wherever the operator copies it.
TENANT_IMAGE = "registry.example/zzimage:1"
TENANT_LAUNCHER = "registry.example/zzlauncher:1"


class PreconditionError(Exception):
    """The scene of a probe could not be set: an error, never the expected failure (the xfail marks take only
    AssertionError)."""


def precondition(ok: object, what: str) -> None:
    if not ok:
        raise PreconditionError(what)


def _spec(**fields: Any) -> LLMBackendSpec:
    base: dict[str, Any] = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://team-b/zzmodel"}}}
    base.update(fields)
    return LLMBackendSpec.model_validate(base)


def _objects(spec: LLMBackendSpec, plan: PlanStatus = ONE_NODE, **options: Any) -> list[dict[str, Any]]:
    return desired_objects(REF, spec, plan, 2, SURGE, **options)


def _pod_templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, template) of every pod template an object carries."""
    spec = obj.get("spec") or {}
    if "template" in spec and "spec" in (spec["template"] or {}):
        yield f"{obj['kind']} {obj['metadata']['name']}", spec["template"]
    lwt = spec.get("leaderWorkerTemplate") or {}
    for role in ("leaderTemplate", "workerTemplate"):
        if role in lwt:
            yield f"{obj['kind']} {obj['metadata']['name']} {role}", lwt[role]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


# ---- the namespace's model cache: what a uri source mounts ----

def _cache_mounts(spec: LLMBackendSpec) -> list[tuple[str, dict[str, Any]]]:
    """(container, mount) of every mount of the default cache claim in a container that runs the tenant's image."""
    found = []
    for obj in _objects(spec):
        for where, template in _pod_templates(obj):
            pod = template["spec"]
            cache_volumes = {v["name"] for v in pod.get("volumes", [])
                             if (v.get("persistentVolumeClaim") or {}).get("claimName") == DEFAULT_CACHE_CLAIM}
            for container in _containers(pod):
                if container["image"] != TENANT_IMAGE:
                    continue
                found += [(f"{where} {container['name']}", m) for m in container.get("volumeMounts", [])
                          if m["name"] in cache_volumes]
    return found


# Fixed (was a strict xfail): FINDING (medium): any hf:// or s3:// source mounted the WHOLE namespace cache claim
# read-only into pods running the tenant's image, so every other backend's copy (gated models downloaded with
# Secrets the tenant cannot read) was readable there. Serving pods now mount only their own copy (subPath).
def test_a_uri_source_mounts_only_its_own_copy_of_the_namespace_cache() -> None:
    """Tries: a backend whose source is any Hub repo (a tenant may name any) and looks at how much of the shared
    cache claim its pods see. Another team's gated model, downloaded there with that team's HF token, lives at
    `<its key>/...` of the same claim."""
    spec = _spec(engine={"image": TENANT_IMAGE})
    other = ModelSource.model_validate({"uri": "hf://team-a/zzgated", "secretRef": {"name": "team-a-hf"}})
    precondition(modelcache.cache_claim(other) == modelcache.cache_claim(spec.model.source) == DEFAULT_CACHE_CLAIM,
                 "both sources use the default cache claim")
    mounts = _cache_mounts(spec)
    precondition(mounts, "the tenant's serving containers mount the cache claim")
    others_copy = modelcache.ref_path(other)  # path of the other team's copy, relative to the claim's root
    for where, mount in mounts:
        sub_path = mount.get("subPath", "").strip("/")
        assert sub_path and not (others_copy + "/").startswith(sub_path + "/"), (
            f"{where} mounts {DEFAULT_CACHE_CLAIM}{'/' + sub_path if sub_path else ''} at {mount['mountPath']}: "
            f"the other team's copy {others_copy} is readable there")


# ---- labels and annotations: only podTemplate's maps choose a key ----

RICH = {
    "model": {"preset": "llama-3.1-405b", "name": "zzname", "source": {"uri": "hf://team-b/zzmodel",
                                                                      "secretRef": {"name": "zzsecret"}}},
    "engine": {"image": TENANT_IMAGE},
    "scheduling": {"nodeSelector": {"zznode.example/key": "zzval"},
                   "tolerations": [{"key": "zztaint.example/key", "operator": "Equal", "value": "zzv",
                                    "effect": "NoSchedule"}],
                   "multiNode": {"launcherImage": TENANT_LAUNCHER, "exclusiveTopology": "zztopo.example/rack",
                                 "queueName": "zzqueue"}},
    "serving": {"podTemplate": {
        "env": [{"name": "ZZ_ENV", "value": "zzenvvalue"}],
        "volumes": [{"name": "zzscratch", "emptyDir": {}}],
        "volumeMounts": [{"name": "zzscratch", "mountPath": "/zzscratch"}]}},
}
# Keys the operator (and the controllers it hands objects to) owns, and the spec fields whose values the docs say it
# copies into labels or annotations: the backend's name and the queue.
OPERATOR_KEY_PREFIXES = ("app.kubernetes.io/", "llmbackend.dev/", "leaderworkerset.sigs.k8s.io/")
DOCUMENTED_SPEC_KEYS = {"kueue.x-k8s.io/queue-name", "scheduling.volcano.sh/queue-name"}


def _maps(obj: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(where, which, map) of every label, annotation and selector map of an object and its pod templates."""
    name = f"{obj['kind']} {obj['metadata']['name']}"
    for which in ("labels", "annotations"):
        yield name, which, obj["metadata"].get(which) or {}
    selector = (obj.get("spec") or {}).get("selector")
    if isinstance(selector, dict):
        yield name, "selector", selector.get("matchLabels", selector)
    for where, template in _pod_templates(obj):
        for which in ("labels", "annotations"):
            yield where, f"pod {which}", (template.get("metadata") or {}).get(which) or {}


@pytest.mark.parametrize("gang", [None, "kueue", "volcano"])
def test_no_spec_string_but_the_name_and_queue_reaches_a_label_or_annotation(gang: str | None) -> None:
    """Tries: every free-text field a tenant sets without podTemplate.labels/annotations (model name, node selector,
    tolerations, topology key, env, volume names, images, the Secret's name), on a multi-node backend with each gang
    scheduler, and looks for it in every label, annotation and selector of every child and pod template."""
    spec = LLMBackendSpec.model_validate(RICH)
    objects = _objects(spec, TWO_NODES, gang_scheduler=gang)
    assert any(o["kind"] == "LeaderWorkerSet" for o in objects), "precondition: a multi-node backend"
    leaks = []
    for obj in objects:
        for where, which, labels in _maps(obj):
            for key, value in labels.items():
                documented = key.startswith(OPERATOR_KEY_PREFIXES) or key in DOCUMENTED_SPEC_KEYS
                # the LWS exclusive-topology annotation's value is a node label key (documented in NAMES_NO_OBJECT)
                topology = key == "leaderworkerset.sigs.k8s.io/exclusive-topology"
                if not documented or "zz" in key or ("zz" in str(value) and not topology
                                                     and key not in DOCUMENTED_SPEC_KEYS):
                    leaks.append(f"{where} {which} {key}={value}")
    assert leaks == []


# ---- ServiceAccounts: every pod that runs a tenant-chosen image ----

@pytest.mark.parametrize("case", ["single-node", "mpi", "ray"])
def test_every_pod_running_a_tenant_image_runs_as_the_backend_s_own_account_without_a_token(case: str) -> None:
    """Tries: engine.image and multiNode.launcherImage are the tenant's; looks at every pod template of every child
    (serving pods, activator, EPP, LWS leaders and workers) that runs either, and which account and token it gets."""
    preset, backend, plan = {"single-node": ("llama-3.1-8b", "tensorrtllm", ONE_NODE),
                             "mpi": ("llama-3.1-405b", "tensorrtllm", TWO_NODES),
                             "ray": ("llama-3.1-405b", "vllm", TWO_NODES)}[case]
    spec = _spec(model={"preset": preset, "source": {"uri": "hf://team-b/zzmodel"}},
                 engine={"backend": backend, "image": TENANT_IMAGE},
                 scheduling={"multiNode": {"launcherImage": TENANT_LAUNCHER}},
                 autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 2})
    seen = {}
    for obj in _objects(spec, plan, inference_pool=True):
        for where, template in _pod_templates(obj):
            pod = template["spec"]
            if not any(c["image"] in (TENANT_IMAGE, TENANT_LAUNCHER) for c in _containers(pod)):
                continue
            account = pod.get("serviceAccountName")
            seen[where] = account
            if account == LAUNCHER:  # an MPI leader: the one token, whose exec is bound to its own group
                assert case == "mpi" and "leaderTemplate" in where and pod["automountServiceAccountToken"] is True
            else:
                assert account == SERVING, where
                assert pod["automountServiceAccountToken"] is False, where
    assert seen, "precondition: some pod runs the tenant's image"
    accounts = [o for o in _objects(spec, plan) if o["kind"] == "ServiceAccount"]
    for account in accounts:
        assert account["automountServiceAccountToken"] is False
        assert account["metadata"]["ownerReferences"] == [REF.owner_reference()]


def test_a_named_account_never_displaces_the_launcher_nor_gets_a_token() -> None:
    """Tries: podTemplate.serviceAccountName on an MPI backend (after the tenant was allowed to act as it): does the
    named account replace the launcher on the leader (so the leader runs without exec rights but, worse, a named
    account gains the launcher's binding), or get its token mounted on the workers?"""
    spec = _spec(model={"preset": "llama-3.1-405b", "source": {"uri": "hf://team-b/zzmodel"}},
                 engine={"image": TENANT_IMAGE},
                 serving={"podTemplate": {"serviceAccountName": "team-b-runner"}})
    lws = next(o for o in _objects(spec, TWO_NODES) if o["kind"] == "LeaderWorkerSet")
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert leader["serviceAccountName"] == LAUNCHER
    assert worker["serviceAccountName"] == "team-b-runner" and worker["automountServiceAccountToken"] is False
    bindings = [o for o in _objects(spec, TWO_NODES) if o["kind"] == "RoleBinding"]
    assert [s["name"] for b in bindings for s in b["subjects"]] == [LAUNCHER]


# ---- mount paths: an alias of the operator's own mounts ----

ALIASES = ["/models/", "//models", "/./models", "/models/.", "/models//", "/model-cache/", "//model-cache/.",
           "/dev/shm/", "/./tmp", "/tmp//."]


@pytest.mark.parametrize("path", ALIASES)
def test_a_mount_path_that_resolves_to_an_operator_mount_is_refused(path: str) -> None:
    """Tries: a tenant volume mounted over one of the operator's mounts (the source claim at /models, the cache at
    /model-cache, /dev/shm, /tmp) through a spelling the kubelet resolves to the same directory."""
    spec = _spec(model={"preset": "llama-3.1-8b", "source": {"uri": "hf://team-b/zzmodel"}},
                 serving={"podTemplate": {"volumes": [{"name": "shadow", "emptyDir": {}}],
                                          "volumeMounts": [{"name": "shadow", "mountPath": path}]}})
    if path.rstrip("/.").lstrip("/.") in ("models", "models/"):  # /models is mounted for pvc sources only
        spec = _spec(model={"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "m", "path": "/x"}}},
                     serving=spec.serving.model_dump(by_alias=True, exclude_none=True))
    with pytest.raises(PodTemplateConflictError):
        _objects(spec)


# Fixed (was a strict xfail): FINDING (low): two podTemplate volumeMounts that resolve to one directory (/data and
# /data/) were accepted (mountPath compared as strings); PodTemplate now compares them as the kubelet resolves them.
def test_two_tenant_mounts_that_alias_each_other_are_refused() -> None:
    """Tries: two of the tenant's own volumes mounted at /data and /data/ (and //data): refused like an alias of an
    operator mount, or left to the container runtime?"""
    raised = False
    try:
        spec = _spec(serving={"podTemplate": {
            "volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
            "volumeMounts": [{"name": "a", "mountPath": "/data"}, {"name": "b", "mountPath": "/data/"}]}})
        _objects(spec)
    except (ValidationError, PodTemplateConflictError):
        raised = True
    assert raised


# ---- a gated model another backend downloaded, served without credentials ----

def _decide_with_cache(spec_dict: dict[str, Any], cache: Any) -> set[str]:
    """The kinds decide applies for a backend `chat` whose model cache step reported `cache`."""
    from devcluster.cli import topology_nodes
    from llmbackend.controller.decide import Observed, decide
    from llmbackend.planning.inventory import Inventory

    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    obj = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "status": {},
           "metadata": {"name": REF.name, "namespace": REF.namespace, "uid": REF.uid, "generation": 1},
           "spec": spec_dict}
    asked = decide(Observed(obj, inventory.nodes(), model_cache=cache))
    decision = decide(Observed(obj, inventory.nodes(), model_cache=cache,
                               children={k: None for k in asked.look_up}))
    return {o["kind"] for o in decision.apply}


# Fixed (was a strict xfail): FINDING (medium): a backend whose own download of a gated source was refused (401,
# no secretRef) still got its Deployment (a preset gives the architecture), whose pods loaded the copy another
# team's token had downloaded. The workload now waits for the backend's own download Job to finish.
def test_a_backend_whose_own_download_was_refused_does_not_serve_another_backend_s_copy() -> None:
    """Tries: the gated source after the owning team's backend downloaded it with its Secret; the tenant's backend
    names the same URI without one. The two share the cache key (precondition); the tenant's own download failed
    401. Does the operator still run pods that load the copy?"""
    from llmbackend.controller.modelcache import ModelCacheResult

    uri = "hf://meta-llama/Llama-3.1-8B-Instruct"
    owners = ModelSource.model_validate({"uri": uri, "secretRef": {"name": "team-a-hf"}})
    tenants = ModelSource.model_validate({"uri": uri})
    precondition(modelcache.ref_path(owners) == modelcache.ref_path(tenants), "one copy per source")
    precondition(modelcache.download_job_name(owners) != modelcache.download_job_name(tenants),
                 "the tenant's Job is its own (no token), as docs/security.md says")
    spec_dict = {"model": {"preset": "llama-3.1-8b", "source": {"uri": uri}}}
    spec = LLMBackendSpec.model_validate(spec_dict)
    refused = ModelCacheResult(spec, False, "SourceUnauthorized",
                               f"{uri}: meta-llama/Llama-3.1-8B-Instruct is gated, private or does not exist (401)",
                               {"phase": "Failed", "source": uri}, permanent=True)
    assert "Deployment" not in _decide_with_cache(spec_dict, refused)
