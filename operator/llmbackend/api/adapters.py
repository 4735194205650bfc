"""LoRA adapters (spec.adapters): does an adapter's adapter_config.json fit the base model and spec.engine.lora?

Pure: the download Job reports the adapter_config.json it fetched (model_fetch, `--adapter`), the controller passes
it here with the spec and writes the answer into status.adapters. The rules are the engines' own, checked before a
request meets them (an adapter the engine refuses would fail every request that names it):
- rank: vLLM refuses r > max_lora_rank when it loads the adapter (vllm/lora/peft_helper.py
  `PEFTHelper.validate_legal`, 0.31.0); TensorRT-LLM sizes its LoRA cache for max_lora_rank
  (tensorrt_llm/lora_helper.py `LoraConfig`), so a larger adapter does not fit it either.
- DoRA and bias: vLLM refuses `use_dora` and `bias` other than "none" (same function); TensorRT-LLM's HF loader reads
  only the lora_A / lora_B weights, so such an adapter would be served wrong there.
- target modules: the projections both engines map (TensorRT-LLM: tensorrt_llm/lora_helper.py
  `get_default_trtllm_modules_to_hf_modules`); anything else (embed_tokens, lm_head, a model-specific name) is
  refused, since neither engine would apply it. Names the download report leaves out (a list over its bound, counted
  in MODULES_LEFT_OUT) are refused too: what cannot be verified never reads as fitting.
- base model: `base_model_name_or_path` against the base's Hub repository (hf:// source, or the preset's): a LoRA
  trained on another checkpoint loads without error and answers nonsense, so this is the check that matters most.
  A local path, or a base whose repository is not known (s3://, pvc), cannot be compared: the adapter is served,
  and the status message says it was not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import FIXTURE_HUB_REPOS
from .v1alpha1 import LLMBackendSpec, LoRASpec

# Reasons of status.adapters[].reason (phase Incompatible), and of the Degraded condition naming them.
ADAPTER_BASE_MISMATCH = "AdapterBaseModelMismatch"
"""An adapter's adapter_config.json names another base model (base_model_name_or_path) than the backend serves; it
is not served (status.adapters), the base model and the other adapters are."""
ADAPTER_RANK_TOO_HIGH = "AdapterRankAboveMaximum"
"""An adapter's rank (adapter_config.json r) is above spec.engine.lora.maxRank; it is not served."""
ADAPTER_MODULES_UNSUPPORTED = "AdapterTargetModulesUnsupported"
"""An adapter targets modules the engines do not apply LoRA to (embed_tokens, lm_head, ...); it is not served."""
ADAPTER_FEATURE_UNSUPPORTED = "AdapterFeatureUnsupported"
"""An adapter uses what the engines do not serve (DoRA, a bias, a PEFT type other than LoRA); it is not served."""
ADAPTER_CONFIG_INVALID = "AdapterConfigInvalid"
"""An adapter's adapter_config.json is not a PEFT LoRA configuration (no positive rank r, bad target_modules)."""
ADAPTER_COMPATIBLE = "AdapterCompatible"
"""status.adapters: the adapter fits the base model and spec.engine.lora; it is served."""

# Hugging Face module names both engines apply LoRA to (attention and MLP projections, fused forms, Mixtral-style
# experts), from tensorrt_llm/lora_helper.py get_default_trtllm_modules_to_hf_modules (the values).
SUPPORTED_TARGET_MODULES = frozenset({
    "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj",
    "gate_proj", "up_proj", "down_proj", "gate_up_proj",
    "w1", "w2", "w3",
})
# PEFT's shorthand for "every linear layer but the output head" (peft/tuners/tuners_utils.py): the projections above.
ALL_LINEAR = "all-linear"
# adapterConfig's own key (model_fetch.MODULES_LEFT_OUT, which writes it; api may not import the download program):
# how many distinct target_modules names did not fit the download report.
MODULES_LEFT_OUT = "targetModulesLeftOut"
# What the download program of operators before issue 46 reported for a target_modules list over 2 KiB: from a Job
# of such an operator still around after an upgrade, it says the list is unknown (it used to read as a regex).
LEGACY_TOO_LONG = "(too long to report)"


@dataclass(frozen=True)
class AdapterCheck:
    ok: bool
    reason: str
    message: str
    rank: int | None = None
    target_modules: tuple[str, ...] = ()


def base_repository(spec: LLMBackendSpec) -> str | None:
    """The Hub repository (org/name) of the base model, when it is known: an hf:// source, else the preset's."""
    source = spec.model.source
    if source is not None and source.uri is not None and source.uri.startswith("hf://"):
        return source.uri.removeprefix("hf://").split("@", 1)[0].strip("/")
    return FIXTURE_HUB_REPOS.get(spec.model.preset or "")


def _hub_id(value: str) -> str | None:
    """org/name when the value is a Hub id (not a local path, not a URL)."""
    value = value.strip()
    if value.startswith(("/", ".", "~")) or ("://" in value and not value.startswith("hf://")):
        return None
    value = value.removeprefix("hf://").split("@", 1)[0].rstrip("/")
    return value if value.count("/") == 1 else None


def _modules(raw: Any) -> tuple[str, ...] | None:
    """target_modules as a tuple of names; a string other than all-linear is a regular expression (PEFT), which
    names no module list to check: None. The marker an older download program put for a list it could not report
    is no regular expression: () (invalid), never None, which would let any module pass."""
    if raw == LEGACY_TOO_LONG:
        return ()
    if isinstance(raw, str):
        return tuple(sorted(SUPPORTED_TARGET_MODULES)) if raw == ALL_LINEAR else None
    if isinstance(raw, list) and all(isinstance(m, str) for m in raw):
        return tuple(raw)
    return ()


def check_adapter(name: str, config: Any, spec: LLMBackendSpec, lora: LoRASpec | None = None) -> AdapterCheck:
    """Whether the adapter `name` with this adapter_config.json (parsed JSON) can be served on spec's base model."""
    lora = lora or spec.engine.lora or LoRASpec()
    if not isinstance(config, dict):
        return AdapterCheck(False, ADAPTER_CONFIG_INVALID, f"adapter {name}: adapter_config.json is not a JSON object; "
                            "point its source at a PEFT LoRA adapter directory")
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        return AdapterCheck(False, ADAPTER_FEATURE_UNSUPPORTED, f"adapter {name}: peft_type {config.get('peft_type')!r} "
                            "is not LORA; the engines serve LoRA adapters only")
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        return AdapterCheck(False, ADAPTER_CONFIG_INVALID, f"adapter {name}: adapter_config.json has no positive "
                            f"integer rank r (found {rank!r})")
    modules = _modules(config.get("target_modules"))
    if config.get("target_modules") == LEGACY_TOO_LONG:
        return AdapterCheck(False, ADAPTER_CONFIG_INVALID, f"adapter {name}: the download Job's report left "
                            "target_modules out (an older operator's download program), so they cannot be checked; "
                            "delete the adapter's download Job (llmb-fetch-...) to have it downloaded and checked "
                            "again", rank)
    if modules == ():
        return AdapterCheck(False, ADAPTER_CONFIG_INVALID, f"adapter {name}: adapter_config.json target_modules is "
                            "neither a list of module names nor a string", rank)
    left_out = config.get(MODULES_LEFT_OUT)
    if left_out is not None and (not isinstance(left_out, int) or isinstance(left_out, bool) or left_out < 0):
        return AdapterCheck(False, ADAPTER_CONFIG_INVALID, f"adapter {name}: the download report's "
                            f"{MODULES_LEFT_OUT} is {left_out!r}, not a count; delete the adapter's download Job "
                            "(llmb-fetch-...) to have it checked again", rank)
    if rank > lora.max_rank:
        return AdapterCheck(False, ADAPTER_RANK_TOO_HIGH, f"adapter {name}: rank {rank} is above "
                            f"spec.engine.lora.maxRank {lora.max_rank}; raise maxRank to at least {rank} (the planner "
                            "then reserves more GPU memory for the LoRA cache) or use an adapter of a lower rank",
                            rank, modules or ())
    features = [f for f, bad in (("DoRA (use_dora)", bool(config.get("use_dora"))),
                                 (f"bias {config.get('bias')!r}", config.get("bias", "none") not in (None, "none")))
                if bad]
    if features:
        return AdapterCheck(False, ADAPTER_FEATURE_UNSUPPORTED, f"adapter {name}: {' and '.join(features)} is not "
                            "served by the engines (vLLM refuses it; TensorRT-LLM reads only lora_A/lora_B)", rank,
                            modules or ())
    unsupported = sorted(set(modules or ()) - SUPPORTED_TARGET_MODULES)
    left_out = config.get(MODULES_LEFT_OUT)
    if unsupported or left_out:
        # Names the report left out (model_fetch.inspect_adapter) cannot be checked, so they never read as fitting:
        # the supported names fit the report many times over, so a list that does not holds others.
        named = [", ".join(unsupported)] if unsupported else []
        more = [f"{left_out} {'more ' if named else ''}name(s) the download report leaves out (a list longer than "
                "the supported names could make)"] if left_out else []
        return AdapterCheck(False, ADAPTER_MODULES_UNSUPPORTED, f"adapter {name}: target_modules "
                            f"{' and '.join(named + more)} are not applied by the engines "
                            f"(they apply LoRA to {', '.join(sorted(SUPPORTED_TARGET_MODULES))}); train the adapter "
                            "on those modules only, or list them by name (or all-linear) in adapter_config.json",
                            rank, modules or ())
    declared = config.get("base_model_name_or_path")
    base = base_repository(spec)
    declared_id = _hub_id(declared) if isinstance(declared, str) and declared else None
    if base is not None and declared_id is not None and declared_id.lower() != base.lower():
        return AdapterCheck(False, ADAPTER_BASE_MISMATCH, f"adapter {name} was trained on {declared_id} "
                            f"(adapter_config.json base_model_name_or_path), but the base model is {base}; serve it "
                            "on a backend of that model, or use an adapter of this one", rank, modules or ())
    checked = ("base model " + base) if base is not None and declared_id is not None else (
        "base model not compared (" + ("no Hub id in base_model_name_or_path" if declared_id is None
                                       else "the base model's repository is not known") + ")")
    return AdapterCheck(True, ADAPTER_COMPATIBLE, f"adapter {name}: rank {rank} of at most {lora.max_rank}, {checked}",
                        rank, modules or ())
