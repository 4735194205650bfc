"""spec.adapters: the API's rules and the pure check of an adapter's adapter_config.json against the base model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from llmbackend import model_fetch as mf
from llmbackend.api import adapters as ad
from llmbackend.api.v1alpha1 import LLMBackendSpec, LoRASpec

BASE = {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}


def spec(adapters: list[dict[str, Any]] | None = None, model: dict[str, Any] | None = None,
         lora: dict[str, Any] | None = None) -> LLMBackendSpec:
    doc: dict[str, Any] = {"model": model or BASE}
    if adapters is not None:
        doc["adapters"] = adapters
    if lora is not None:
        doc["engine"] = {"lora": lora}
    return LLMBackendSpec.model_validate(doc)


def adapter(name: str = "sql", uri: str = "hf://acme/sql-lora") -> dict[str, Any]:
    return {"name": name, "source": {"uri": uri}}


def peft(**overrides: Any) -> dict[str, Any]:
    """An adapter_config.json as PEFT writes it."""
    config = {"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "r": 16,
              "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "bias": "none",
              "use_dora": False}
    config.update(overrides)
    return config


# ---- the API ----

def test_adapters_turn_lora_on_with_the_defaults_and_an_explicit_setting_stays():
    assert spec().engine.lora is None
    assert spec([adapter()]).engine.lora == LoRASpec()
    assert spec([adapter()], lora={"maxRank": 128, "maxLoras": 2}).engine.lora == LoRASpec(max_rank=128, max_loras=2)
    assert spec([], lora={}).engine.lora == LoRASpec()  # kept on with no adapter: the first one needs no restart


@pytest.mark.parametrize("adapters, model, error", [
    ([adapter("sql"), adapter("sql", "hf://acme/other")], None, "unique"),
    ([adapter("llama-3.1-8b")], None, "base model's name"),
    ([adapter("mine")], {**BASE, "name": "mine"}, "base model's name"),
    ([adapter("bad name")], None, "pattern"),
    ([{"name": "x", "source": {"uri": "hf://a/b", "cache": {"storageClassName": "fast"}}}], None, "storageClassName"),
])
def test_bad_adapters_are_refused(adapters, model, error):
    with pytest.raises(ValidationError, match=error):
        spec(adapters, model)


def test_max_cpu_loras_holds_the_gpu_ones_and_ranks_are_the_engines():
    with pytest.raises(ValidationError, match="at least maxLoras"):
        LoRASpec(max_loras=8, max_cpu_loras=4)
    with pytest.raises(ValidationError):
        LoRASpec(max_rank=48)  # vLLM takes only its MaxLoRARanks


def _crd_spec() -> dict[str, Any]:
    crd = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds/llmbackend.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_the_crd_keys_adapters_by_name_and_refuses_the_base_name():
    schema = _crd_spec()
    adapters = schema["properties"]["adapters"]
    assert adapters["x-kubernetes-list-type"] == "map" and adapters["x-kubernetes-list-map-keys"] == ["name"]
    rules = " ".join(r["rule"] for r in schema["x-kubernetes-validations"])
    assert "a.name != self.model.name" in rules and "a.name != self.model.preset" in rules
    crd = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds/llmbackend.yaml").read_text())
    create, update = [r for r in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
                      if "adapters" in r["rule"]]  # the backend's own name, served without spec.model.name or a preset
    assert "a.name != self.metadata.name" in create["rule"] and create["optionalOldSelf"]
    assert "a.name != oldSelf.metadata.name" in update["rule"] and "optionalOldSelf" not in update  # updates only


def test_an_adapter_may_not_choose_a_storage_class():
    """docs/security.md: the admission policy does not check adapters' storage classes because the CRD refuses them."""
    rules = [r["rule"] for r in _crd_spec()["properties"]["adapters"]["items"]["x-kubernetes-validations"]]
    assert "!has(self.source.cache) || !has(self.source.cache.storageClassName)" in rules
    with pytest.raises(ValidationError, match="storageClassName"):
        spec([{"name": "x", "source": {"uri": "hf://a/b", "cache": {"storageClassName": "fast"}}}])


# ---- the check of adapter_config.json ----

def test_a_fitting_adapter_is_compatible():
    result = ad.check_adapter("sql", peft(), spec([adapter()]))
    assert result.ok and result.reason == ad.ADAPTER_COMPATIBLE and result.rank == 16
    assert "base model meta-llama/Llama-3.1-8B-Instruct" in result.message


def test_an_adapter_of_another_base_is_refused_with_both_names():
    result = ad.check_adapter("sql", peft(base_model_name_or_path="Qwen/Qwen3-32B"), spec([adapter()]))
    assert not result.ok and result.reason == ad.ADAPTER_BASE_MISMATCH
    assert "Qwen/Qwen3-32B" in result.message and "meta-llama/Llama-3.1-8B-Instruct" in result.message


def test_the_base_comes_from_the_hf_source_revision_and_case_aside():
    s = spec([adapter()], model={"preset": "llama-3.1-8b", "source": {"uri": "hf://Acme/Tuned-8B@v2"}})
    assert ad.check_adapter("sql", peft(base_model_name_or_path="acme/tuned-8b"), s).ok
    assert not ad.check_adapter("sql", peft(), s).ok  # the preset's repository is not this source's


def test_a_base_that_cannot_be_compared_is_served_and_says_so():
    pvc = spec([adapter()], model={"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "weights"}}})
    assert ad.check_adapter("sql", peft(), pvc).ok  # the preset names the repository
    s3 = spec([adapter()], model={"architecture": None, "source": {"uri": "s3://bucket/llama"}})
    result = ad.check_adapter("sql", peft(), s3)
    assert result.ok and "not compared" in result.message
    local = ad.check_adapter("sql", peft(base_model_name_or_path="/data/llama"), spec([adapter()]))
    assert local.ok and "no Hub id" in local.message


@pytest.mark.parametrize("rank, max_rank, ok", [(16, 64, True), (64, 64, True), (128, 64, False), (8, 8, True),
                                                (16, 8, False)])
def test_the_rank_is_at_most_the_configured_maximum(rank, max_rank, ok):
    result = ad.check_adapter("sql", peft(r=rank), spec([adapter()], lora={"maxRank": max_rank}))
    assert result.ok is ok
    if not ok:
        assert result.reason == ad.ADAPTER_RANK_TOO_HIGH and f"rank {rank}" in result.message
        assert f"maxRank {max_rank}" in result.message


@pytest.mark.parametrize("overrides, reason", [
    ({"target_modules": ["q_proj", "embed_tokens", "lm_head"]}, ad.ADAPTER_MODULES_UNSUPPORTED),
    ({"use_dora": True}, ad.ADAPTER_FEATURE_UNSUPPORTED),
    ({"bias": "all"}, ad.ADAPTER_FEATURE_UNSUPPORTED),
    ({"peft_type": "PROMPT_TUNING"}, ad.ADAPTER_FEATURE_UNSUPPORTED),
    ({"r": 0}, ad.ADAPTER_CONFIG_INVALID),
    ({"r": "16"}, ad.ADAPTER_CONFIG_INVALID),
    ({"r": True}, ad.ADAPTER_CONFIG_INVALID),
    ({"target_modules": 7}, ad.ADAPTER_CONFIG_INVALID),
])
def test_what_the_engines_refuse_is_refused(overrides, reason):
    result = ad.check_adapter("sql", peft(**overrides), spec([adapter()]))
    assert not result.ok and result.reason == reason


@pytest.mark.parametrize("config", [None, [], "r=16", 3])
def test_a_config_that_is_not_an_object_is_invalid(config):
    assert ad.check_adapter("sql", config, spec([adapter()])).reason == ad.ADAPTER_CONFIG_INVALID


def test_all_linear_and_regular_expressions_are_accepted():
    assert ad.check_adapter("sql", peft(target_modules="all-linear"), spec([adapter()])).ok
    assert ad.check_adapter("sql", peft(target_modules=r".*\.(q|v)_proj"), spec([adapter()])).ok


# ---- the download program's report of adapter_config.json is bounded, and what it leaves out never fits ----
# (issue 46: an independent attacker pass on spec.adapters)

def _reported(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """What the download program reports of this adapter_config.json (model_fetch.inspect_adapter)."""
    (tmp_path / mf.ADAPTER_CONFIG).write_text(json.dumps(config))
    return mf.inspect_adapter(tmp_path)


def _checked(found: dict[str, Any]) -> ad.AdapterCheck:
    """As the controller passes the report to the check (controller/adapters.adapter_status)."""
    config = found["adapterConfig"] if "adapterConfig" in found else found["adapterConfigError"]
    return ad.check_adapter("sql", config, spec([adapter()]))


def test_a_target_modules_list_too_long_to_report_never_reads_as_fitting(tmp_path):
    """F1: a list over 2 KiB was reported as the string "(too long to report)", which the check read as a PEFT regular
    expression: embed_tokens, lm_head and the rest passed. Now the report names what fits and counts the rest."""
    modules = ["q_proj", "v_proj", "embed_tokens", "lm_head"] + [f"model.layers.{i}.mlp.custom_proj" for i in range(200)]
    found = _reported(tmp_path, peft(target_modules=modules))
    assert len(json.dumps(found)) < 2048
    result = _checked(found)
    assert not result.ok and result.reason == ad.ADAPTER_MODULES_UNSUPPORTED, result
    assert "embed_tokens" in result.message and "more name(s)" in result.message


def test_a_long_list_of_supported_names_is_reported_by_its_distinct_names_and_fits(tmp_path):
    found = _reported(tmp_path, peft(target_modules=["q_proj", "v_proj"] * 2000))
    assert found["adapterConfig"]["target_modules"] == ["q_proj", "v_proj"]
    assert ad.MODULES_LEFT_OUT not in found["adapterConfig"] and _checked(found).ok


def test_the_marker_of_an_older_download_program_is_not_a_regular_expression():
    """A Job of an operator before issue 46, still around after an upgrade, may hold the old marker."""
    result = ad.check_adapter("sql", peft(target_modules=ad.LEGACY_TOO_LONG), spec([adapter()]))
    assert not result.ok and result.reason == ad.ADAPTER_CONFIG_INVALID and "delete" in result.message
    bad_count = ad.check_adapter("sql", {**peft(), ad.MODULES_LEFT_OUT: "many"}, spec([adapter()]))
    assert not bad_count.ok and bad_count.reason == ad.ADAPTER_CONFIG_INVALID
    assert ad.MODULES_LEFT_OUT == mf.MODULES_LEFT_OUT  # one key, written by the program, read by the check


@pytest.mark.parametrize("field, value", [
    ("use_dora", list(range(3000))),  # F2: overflowed the 4 KiB report: served unchecked
    ("use_dora", "yes"),
    ("bias", ["none"] * 3000),
    ("peft_type", "L" * 5000),
    ("base_model_name_or_path", "x" * 10000),
    ("base_model_name_or_path", "\u00e9" * 200),  # 200 characters, 1,200 bytes as JSON
    ("r", 10 ** 4000),
    ("r", 16.5),
    ("target_modules", ["q_proj", "p" * 5000]),
    ("target_modules", "(" * 5000),
    ("target_modules", [["q_proj"]]),
], ids=["dora-list", "dora-str", "bias-list", "peft-type-long", "base-long", "base-escaped", "r-huge", "r-float",
        "module-long", "regex-long", "module-not-str"])
def test_a_field_of_a_wrong_type_or_size_is_an_invalid_config_with_its_name(tmp_path, field, value):
    found = _reported(tmp_path, peft(**{field: value}))
    assert "adapterConfig" not in found and field in found["adapterConfigError"], found
    assert len(json.dumps(found)) < 1024
    result = _checked(found)
    assert not result.ok and result.reason == ad.ADAPTER_CONFIG_INVALID


def test_the_largest_report_the_bounds_allow_fits_the_termination_message(tmp_path):
    """Every field at its bound, in characters JSON escapes six-fold: the report the kubelet keeps is whole JSON."""
    config = {"peft_type": "\u00e9" * 10, "bias": "\u00e9" * 10, "base_model_name_or_path": "\u00e9" * 85, "r": -(2**31) + 1,
              "use_dora": False, "target_modules": [f"\u00e9{i:04d}" + "\u00e9" * 40 for i in range(500)]}
    found = _reported(tmp_path, config)
    assert found["adapterConfig"][ad.MODULES_LEFT_OUT] > 0
    state = {"phase": "Ready", "reason": "ModelCached", "message": "m\u00e9" * 3000, "resolvedRevision": "0" * 40,
             "path": "hf/" + "p" * 250 + "/" + "0" * 40, "bytesTotal": 10**12, "exitCode": 0, **found}
    mf._termination(str(tmp_path / "termination"), state)
    text = (tmp_path / "termination").read_text()
    assert len(text.encode()) <= mf.TERMINATION_LIMIT
    assert json.loads(text)["adapterConfig"] == found["adapterConfig"]
