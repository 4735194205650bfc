"""LoRA adapters in the serving pods (pure): where each adapter is, the list the serving models re-read, the volumes.

Adding or removing an adapter restarts nothing. The list of servable adapters (name, engine id, path) is one key of
the backend's ConfigMap, ADAPTERS_KEY, left out of the config hash (so the pod template does not change) and mounted on
its own at ADAPTERS_DIR (not copied into the model repository like the other keys): the kubelet refreshes a mounted
ConfigMap in place (about a minute), and the Triton model and the OpenAI frontend re-read the file when it changes.
Both engines load an adapter's weights from its path when a request first names it (TensorRT-LLM:
tensorrt_llm/executor/request.py `LoRARequest`, passed to `LLM.generate_async(lora_request=...)`; vLLM:
vllm/lora/request.py `LoRARequest`, passed to `AsyncLLM.generate(lora_request=...)`), so a listed adapter is served
by the pods already running.

What does restart the pods (the pod template changes): turning LoRA on or off (spec.engine.lora, set by default while
spec.adapters lists one: an engine option), changing spec.engine.lora, the first adapter stored on a claim the
pods do not mount yet (a volume is added), and a downloaded (hf://, s3://) adapter turning Ready or leaving the list:
the pods mount each such adapter's own copy of the cache claim, never the whole claim (other backends' copies are
there; render/modelcache.copy_mount), so its mount comes and goes with it. Adapters kept on a claim already mounted
(pvc sources) come and go without one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import Any

from ..api.v1alpha1 import AdapterSpec, LLMBackendSpec
from . import modelcache

ADAPTERS_KEY = "llmbackend-adapters.json"  # ConfigMap key (not a model repository file; not in the config hash)
ADAPTERS_DIR = "/llmbackend-adapters"
ADAPTERS_FILE = f"{ADAPTERS_DIR}/adapters.json"
ADAPTERS_ENV = "LLMBACKEND_ADAPTERS_FILE"  # where the Triton model and the OpenAI frontend read the list
ADAPTERS_VOLUME = "lora-adapters"
CLAIMS_DIR = "/adapter-claims"  # adapters' own claims (pvc sources, another cache claim), read-only, one per claim
# TensorRT-LLM module names of every projection LoRA may target (tensorrt_llm/lora_helper.py
# get_default_trtllm_modules_to_hf_modules: attn_q/k/v q_proj/k_proj/v_proj, attn_dense o_proj, mlp_h_to_4h gate_proj,
# mlp_gate up_proj, mlp_4h_to_h down_proj). LoraConfig needs them when no lora_dir is given at start (adapters come
# later, per request), and the planner sizes the LoRA cache for all of them (planning/memory.lora_cache).
TRTLLM_TARGET_MODULES = ("attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_gate", "mlp_4h_to_h")


def lora_enabled(spec: LLMBackendSpec) -> bool:
    return spec.engine.lora is not None


def _claim_volume_name(claim: str) -> str:
    return "adapters-" + hashlib.sha256(claim.encode()).hexdigest()[:12]


def _base_cache_claim(spec: LLMBackendSpec) -> str | None:
    source = spec.model.source
    return modelcache.cache_claim(source) if source is not None and source.uri is not None else None


def _claim_of(adapter: AdapterSpec) -> str:
    source = adapter.source
    return source.pvc.claim_name if source.pvc is not None else modelcache.cache_claim(source)


def adapter_path(spec: LLMBackendSpec, adapter: AdapterSpec) -> str:
    """Where the serving pods read the adapter: its copy in the base model's cache mount, or under CLAIMS_DIR."""
    source = adapter.source
    if source.pvc is not None:
        return f"{CLAIMS_DIR}/{_claim_volume_name(source.pvc.claim_name)}/{source.pvc.path.strip('/')}".rstrip("/")
    if modelcache.cache_claim(source) == _base_cache_claim(spec):
        return modelcache.model_path(source)
    return f"{CLAIMS_DIR}/{_claim_volume_name(_claim_of(adapter))}/{modelcache.ref_path(source)}"


def adapter_id(name: str, path: str) -> int:
    """The engines' integer id of an adapter (lora_int_id): vLLM caches loaded adapters by it and wants it > 0
    (vllm/lora/request.py LoRARequest.__post_init__), TensorRT-LLM keys its LoRA cache by it. Derived from the name
    and the path, so another revision of an adapter (another path) is loaded afresh instead of served from the cache
    under the old id, and every pod of the backend agrees without coordination."""
    return int.from_bytes(hashlib.sha256(f"{name}\n{path}".encode()).digest()[:4], "big") % (2**31 - 1) + 1


def adapters_document(spec: LLMBackendSpec, ready: Collection[str] | None = None) -> dict[str, Any]:
    """The list the serving pods read: the adapters of spec.adapters in `ready` (None: all of them), in spec order."""
    entries = []
    for adapter in spec.adapters or []:
        if ready is not None and adapter.name not in ready:
            continue
        path = adapter_path(spec, adapter)
        entries.append({"name": adapter.name, "id": adapter_id(adapter.name, path), "path": path})
    return {"adapters": entries}


def config_map_data(spec: LLMBackendSpec, ready: Collection[str] | None = None) -> dict[str, str]:
    """The ConfigMap entry of the list (none while LoRA is off)."""
    if not lora_enabled(spec):
        return {}
    return {ADAPTERS_KEY: json.dumps(adapters_document(spec, ready), indent=1, sort_keys=True) + "\n"}


def listed(config_map: dict[str, Any]) -> set[str]:
    """The adapters the ConfigMap's list names (the Ready ones): what the pods may read."""
    text = (config_map.get("data") or {}).get(ADAPTERS_KEY)
    return {a["name"] for a in json.loads(text)["adapters"]} if text else set()


def volumes(spec: LLMBackendSpec, config_map: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) the serving containers need for the adapters: the list; each pvc adapter's claim, whole
    (naming it needs `use` on it); and of a downloaded adapter only its own copy in the cache claim, once it is
    listed (Ready: its own download Job, with its own Secret or none, finished, so the copy is there and the
    kubelet has a link to resolve), never the rest of that claim."""
    if not lora_enabled(spec):
        return [], []
    vols: list[dict[str, Any]] = [{"name": ADAPTERS_VOLUME, "configMap": {
        "name": config_map["metadata"]["name"], "items": [{"key": ADAPTERS_KEY, "path": "adapters.json"}]}}]
    mounts: list[dict[str, Any]] = [{"name": ADAPTERS_VOLUME, "mountPath": ADAPTERS_DIR, "readOnly": True}]
    base_claim, ready = _base_cache_claim(spec), listed(config_map)
    whole = {a.source.pvc.claim_name for a in spec.adapters or [] if a.source.pvc is not None}
    # A copy on a claim mounted whole for a pvc adapter is read there (adapter_path), except in the base model's
    # cache claim, whose copies are read at CACHE_MOUNT.
    copies = [a for a in spec.adapters or [] if a.source.uri is not None and a.name in ready
              and (modelcache.cache_claim(a.source) not in whole or modelcache.cache_claim(a.source) == base_claim)]
    claims = sorted(whole | ({modelcache.cache_claim(a.source) for a in copies} - {base_claim}))
    for claim in claims:
        name = _claim_volume_name(claim)
        vols.append({"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        if claim in whole:
            mounts.append({"name": name, "mountPath": f"{CLAIMS_DIR}/{name}", "readOnly": True})
    base = spec.model.source
    seen = {modelcache.model_path(base)} if base is not None and base.uri is not None else set()
    for adapter in copies:
        claim = modelcache.cache_claim(adapter.source)
        volume, root = ((modelcache.SERVING_VOLUME, modelcache.CACHE_MOUNT) if claim == base_claim
                        else (_claim_volume_name(claim), f"{CLAIMS_DIR}/{_claim_volume_name(claim)}"))
        mount = modelcache.copy_mount(adapter.source, volume, root)
        if mount["mountPath"] not in seen:  # one source named twice (or the base model's own) is mounted once
            seen.add(mount["mountPath"])
            mounts.append(mount)
    return vols, mounts


def env() -> dict[str, str]:
    return {"name": ADAPTERS_ENV, "value": ADAPTERS_FILE}


def llmapi_lora_args(spec: LLMBackendSpec) -> dict[str, Any]:
    """TensorRT-LLM `LLM()` arguments: lora_config (TorchLlmArgs.lora_config, a tensorrt_llm/lora_helper.py
    LoraConfig). No lora_dir: adapters are named per request, so the target modules are given instead."""
    lora = spec.engine.lora
    if lora is None:
        return {}
    return {"lora_config": {"lora_target_modules": list(TRTLLM_TARGET_MODULES), "max_lora_rank": lora.max_rank,
                            "max_loras": lora.max_loras, "max_cpu_loras": lora.max_cpu_loras}}


def vllm_lora_args(spec: LLMBackendSpec) -> dict[str, Any]:
    """vLLM AsyncEngineArgs: enable_lora, max_lora_rank, max_loras, max_cpu_loras (vllm/engine/arg_utils.py, 0.31.0)."""
    lora = spec.engine.lora
    if lora is None:
        return {}
    return {"enable_lora": True, "max_lora_rank": lora.max_rank, "max_loras": lora.max_loras,
            "max_cpu_loras": lora.max_cpu_loras}
