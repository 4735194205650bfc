"""LoRA adapters in the rendered objects (render/adapters.py): the list the pods re-read, its paths and ids, the
volumes, and that adding or removing an adapter on a mounted claim changes no pod template."""

from __future__ import annotations

import json
from typing import Any

import yaml

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import adapters as ad
from llmbackend.render import modelcache
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("llama", "serving", "uid-1")
PLAN = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                  memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
HF_BASE = {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}
PVC_BASE = {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "weights", "path": "/llama"}}}
SQL = {"name": "sql", "source": {"uri": "hf://acme/sql-lora@v1"}}
CHAT = {"name": "chat", "source": {"uri": "s3://loras/chat"}}
ON_PVC = {"name": "legal", "source": {"pvc": {"claimName": "loras", "path": "/legal"}}}


def spec(*adapters: dict[str, Any], model: dict[str, Any] = HF_BASE, **extra: Any) -> LLMBackendSpec:
    doc: dict[str, Any] = {"model": model, **extra}
    if adapters:
        doc["adapters"] = list(adapters)
    return LLMBackendSpec.model_validate(doc)


def objects(s: LLMBackendSpec, ready: set[str] | None = None) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in desired_objects(REF, s, PLAN, 1, RolloutStrategy("RollingUpdate", 1, 0),
                                                   ready_adapters=ready)}


def listed(s: LLMBackendSpec, ready: set[str] | None = None) -> list[dict[str, Any]]:
    return json.loads(objects(s, ready)["ConfigMap"]["data"][ad.ADAPTERS_KEY])["adapters"]


def test_adapters_in_the_base_models_cache_are_read_there():
    s = spec(SQL)
    path = ad.adapter_path(s, s.adapters[0])
    assert path == modelcache.model_path(s.adapters[0].source) == "/model-cache/hf/acme/sql-lora/refs/v1"


def test_adapters_on_other_claims_get_a_read_only_mount_each():
    s = spec(SQL, ON_PVC, model=PVC_BASE)  # the base is on a pvc: the cache claim is not mounted for it
    vols, mounts = ad.volumes(s, objects(s)["ConfigMap"])
    claims = sorted(v["persistentVolumeClaim"]["claimName"] for v in vols if "persistentVolumeClaim" in v)
    assert claims == ["llmbackend-model-cache", "loras"]
    assert all(m["readOnly"] for m in mounts)
    paths = {a.name: ad.adapter_path(s, a) for a in s.adapters or []}
    mounted = {m["mountPath"] for m in mounts}
    assert all(any(p == m or p.startswith(m + "/") for m in mounted) for p in paths.values())
    assert paths["legal"].endswith("/legal") and paths["sql"].endswith("/hf/acme/sql-lora/refs/v1")
    # of the cache claim only the adapter's own copy: its ref, which the kubelet resolves to the copy's folder
    cache = next(v["name"] for v in vols if v.get("persistentVolumeClaim", {}).get("claimName") == "llmbackend-model-cache")
    assert [(m["mountPath"], m.get("subPath")) for m in mounts if m["name"] == cache] == [
        (paths["sql"], "hf/acme/sql-lora/refs/v1")]


def test_ids_are_positive_stable_and_follow_the_path():
    a, b = ad.adapter_id("sql", "/p/1"), ad.adapter_id("sql", "/p/2")
    assert a == ad.adapter_id("sql", "/p/1") and a != b and 0 < a < 2**31 and 0 < b < 2**31
    assert ad.adapter_id("chat", "/p/1") != a


def test_the_list_has_the_ready_adapters_in_spec_order():
    s = spec(SQL, CHAT)
    assert [e["name"] for e in listed(s)] == ["sql", "chat"]
    assert [e["name"] for e in listed(s, {"chat"})] == ["chat"]
    assert listed(s, set()) == []
    entry = listed(s)[0]
    assert entry == {"name": "sql", "id": ad.adapter_id("sql", entry["path"]), "path": entry["path"]}


def test_no_list_and_no_lora_options_without_adapters():
    objs = objects(spec())
    assert ad.ADAPTERS_KEY not in objs["ConfigMap"]["data"]
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert all(v["name"] != ad.ADAPTERS_VOLUME for v in pod["volumes"])
    assert "lora_config" not in objs["ConfigMap"]["data"]["llama-3.1-8b__1__model.yaml"]


def test_the_engine_gets_its_lora_options_and_both_containers_the_list():
    objs = objects(spec(SQL, serving={"openai": True}))
    model_yaml = yaml.safe_load(objs["ConfigMap"]["data"]["llama-3.1-8b__1__model.yaml"])
    assert model_yaml["lora_config"] == {"lora_target_modules": list(ad.TRTLLM_TARGET_MODULES), "max_lora_rank": 64,
                                         "max_loras": 4, "max_cpu_loras": 8}
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == ad.ADAPTERS_VOLUME)
    assert volume["configMap"]["items"] == [{"key": ad.ADAPTERS_KEY, "path": "adapters.json"}]
    for container in pod["containers"]:  # triton and the OpenAI frontend
        assert ad.env() in container["env"], container["name"]
        assert {"name": ad.ADAPTERS_VOLUME, "mountPath": ad.ADAPTERS_DIR, "readOnly": True} in container["volumeMounts"]
    # mounted on its own, not copied into the model repository at start
    repo = next(v for v in pod["volumes"] if v["name"] == "model-config")
    assert ad.ADAPTERS_KEY not in {i["key"] for i in repo["configMap"]["items"]}


ON_PVC_TOO = {"name": "tax", "source": {"pvc": {"claimName": "loras", "path": "/tax"}}}


def test_adding_or_removing_an_adapter_on_a_mounted_claim_changes_no_pod_template():
    one, two = spec(ON_PVC, ON_PVC_TOO), spec(ON_PVC)
    first, second = objects(one), objects(two)
    assert first["ConfigMap"]["data"][ad.ADAPTERS_KEY] != second["ConfigMap"]["data"][ad.ADAPTERS_KEY]
    assert first["Deployment"]["spec"]["template"] == second["Deployment"]["spec"]["template"]
    assert objects(one, {"legal"})["Deployment"]["spec"]["template"] == first["Deployment"]["spec"]["template"]


def _cache_mounts(objs: dict[str, dict[str, Any]]) -> list[tuple[str, str | None]]:
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    cache = {v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v
             and v["persistentVolumeClaim"]["claimName"] == modelcache.DEFAULT_CACHE_CLAIM}
    return sorted({(m["mountPath"], m.get("subPath")) for c in pod["initContainers"] + pod["containers"]
                   for m in c.get("volumeMounts", []) if m["name"] in cache})


def test_a_downloaded_adapter_mounts_only_its_own_copy_once_it_is_ready():
    """Issue 42 (attack 3): the pods see of the namespace's cache claim only the base model's copy and each Ready
    adapter's, never the claim's root (other backends' copies are there); an adapter not Ready yet (its own download
    has not finished) is neither listed nor mounted, so its mount comes with it (a restart)."""
    s = spec(SQL, CHAT)
    base = modelcache.ref_path(s.model.source)  # type: ignore[arg-type]
    only_sql = _cache_mounts(objects(s, {"sql"}))
    assert only_sql == sorted([(f"/model-cache/{base}", base),
                               ("/model-cache/hf/acme/sql-lora/refs/v1", "hf/acme/sql-lora/refs/v1")])
    both = _cache_mounts(objects(s, {"sql", "chat"}))
    assert ("/model-cache/s3/loras/chat/refs/latest", "s3/loras/chat/refs/latest") in both and len(both) == 3
    assert _cache_mounts(objects(s, set())) == [(f"/model-cache/{base}", base)]


def test_turning_lora_on_or_a_new_claim_restarts_the_pods():
    plain, lora = objects(spec()), objects(spec(SQL))
    assert plain["Deployment"]["spec"]["template"] != lora["Deployment"]["spec"]["template"]
    on_pvc = objects(spec(SQL, ON_PVC))
    assert on_pvc["Deployment"]["spec"]["template"] != lora["Deployment"]["spec"]["template"]


# ---- the download machinery: one Job per adapter source, kept while a backend names it ----

def _backend(s: LLMBackendSpec) -> dict[str, Any]:
    return {"metadata": {"name": "llama", "namespace": "serving"}, "spec": s.dump()}


def test_an_adapter_is_downloaded_by_its_own_job_with_the_adapter_check():
    s = spec(SQL)
    assert s.adapters is not None
    source = s.adapters[0].source
    job = modelcache.render_download_job("serving", source, "img", 1000, adapter=True)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--adapter" in args and args[args.index("--source") + 1] == "hf://acme/sql-lora@v1"
    assert job["metadata"]["name"] == modelcache.download_job_name(source, adapter=True)
    assert modelcache.download_job_name(source, adapter=True) != modelcache.download_job_name(source)
    assert "--adapter" not in modelcache.render_download_job("serving", source, "img", 1000)["spec"]["template"][
        "spec"]["containers"][0]["args"]


def test_the_cleanup_keeps_what_a_backends_adapters_name_and_removes_a_dropped_adapter():
    with_sql, without = spec(SQL, CHAT), spec(CHAT)
    assert with_sql.adapters is not None
    sql_source = with_sql.adapters[0].source
    jobs = [modelcache.render_download_job("serving", a.source, "img", 1000, adapter=True) for a in with_sql.adapters]
    jobs.append(modelcache.render_download_job("serving", with_sql.model.source, "img", 1000))  # type: ignore[arg-type]
    for job in jobs:
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert modelcache.cache_cleanups([_backend(with_sql)], jobs, []) == []
    (cleanup,) = modelcache.cache_cleanups([_backend(without)], jobs, [])
    assert cleanup.stale_jobs == (modelcache.download_job_name(sql_source, adapter=True),)
    assert modelcache.ref_path(sql_source) not in cleanup.keep
    assert modelcache.ref_path(without.adapters[0].source) in cleanup.keep  # type: ignore[index]
    assert modelcache.ref_path(without.model.source) in cleanup.keep  # type: ignore[arg-type]


# ---- the Gateway API Inference Extension ----

def test_the_endpoint_picker_scores_lora_affinity_on_the_lora_gauge_while_lora_is_on():
    from llmbackend.api import engine_metrics as em
    from llmbackend.render import gateway

    for backend in ("tensorrtllm", "vllm"):
        on = gateway.epp_config(spec(SQL, engine={"backend": backend}))
        assert {"type": "lora-affinity-scorer"} in on["plugins"]
        assert {"pluginRef": "lora-affinity-scorer", "weight": 1} in on["schedulingProfiles"][0]["plugins"]
        extractor = next(p for p in on["plugins"] if p["type"] == "core-metrics-extractor")
        assert extractor["parameters"]["engineConfigs"][0]["loraSpec"] == em.LORA_INFO_GAUGE
        off = gateway.epp_config(spec(engine={"backend": backend}))
        assert all(p["type"] != "lora-affinity-scorer" for p in off["plugins"])
        assert next(p for p in off["plugins"] if p["type"] == "core-metrics-extractor")["parameters"][
            "engineConfigs"][0]["loraSpec"] == ""
