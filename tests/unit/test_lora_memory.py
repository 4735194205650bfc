"""The LoRA cache in the memory budget (planning/memory.lora_cache) and in the planner's explanation."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmbackend.api.catalog import PRESETS
from llmbackend.api.v1alpha1 import EngineSpec, LLMBackendSpec, LoRASpec
from llmbackend.planning import memory
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.planner import plan_for_spec

L8 = PRESETS["llama-3.1-8b"]
TOPOLOGY = Path(__file__).resolve().parents[2] / "e2e" / "topologies" / "dgx-h100.yaml"


def test_no_lora_cache_while_lora_is_off():
    assert memory.lora_cache(L8, EngineSpec()) is None
    assert memory.estimate(L8, EngineSpec()).lora is None


def test_the_mlp_width_is_read_from_the_parameter_count():
    assert memory.mlp_width(L8) == 14336  # Llama-3.1-8B's config.json intermediate_size


def test_one_adapter_of_rank_64_on_llama_8b_is_what_peft_writes():
    # r x (in + out) for q, k, v, o, gate, up, down, 32 layers, 2 bytes: PEFT's adapter_model.safetensors of a rank-64
    # all-projection LoRA of Llama-3.1-8B holds 167,772,160 parameters.
    cache = memory.lora_cache(L8, EngineSpec(lora=LoRASpec(max_rank=64, max_loras=4, max_cpu_loras=8)))
    assert cache is not None
    assert cache.per_adapter == 167_772_160 * 2 == cache.per_adapter_gpu
    assert cache.gpu_bytes == 4 * cache.per_adapter and cache.host_bytes == 8 * cache.per_adapter


def test_the_cache_grows_with_rank_and_adapters_and_is_split_over_tp_and_pp():
    small = memory.lora_cache(L8, EngineSpec(lora=LoRASpec(max_rank=16, max_loras=1)))
    big = memory.lora_cache(L8, EngineSpec(lora=LoRASpec(max_rank=64, max_loras=4)))
    assert small and big and big.gpu_bytes == 16 * small.gpu_bytes
    engine = EngineSpec(lora=LoRASpec())
    one, tp8, pp2 = (memory.lora_cache(L8, engine, tp, pp) for tp, pp in ((1, 1), (8, 1), (1, 2)))
    assert one and tp8 and pp2
    assert one.per_adapter_gpu / 8 < tp8.per_adapter_gpu < one.per_adapter_gpu / 2  # one side of each pair is split
    assert pp2.per_adapter_gpu == one.per_adapter_gpu // 2 and tp8.per_adapter == one.per_adapter


def test_the_lora_cache_takes_from_the_kv_cache_and_is_in_the_total():
    plain, lora = memory.estimate(L8, EngineSpec()), memory.estimate(L8, EngineSpec(lora=LoRASpec()))
    assert lora.total - plain.total == lora.non_kv - plain.non_kv == lora.lora_gpu > 0
    gpu = 80 * 1024**3
    assert memory.fit(lora, gpu, EngineSpec()).kv_capacity < memory.fit(plain, gpu, EngineSpec()).kv_capacity
    assert lora.to_json()["loraCacheBytes"] == lora.lora_gpu and "loraCacheBytes" not in plain.to_json()


def test_the_planners_explanation_names_the_lora_cache_when_adapters_are_set():
    nodes = [parse_node(d) for d in yaml.safe_load_all(TOPOLOGY.read_text()) if d]
    base = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}}
    without = plan_for_spec(LLMBackendSpec.model_validate(base), nodes)
    with_adapters = plan_for_spec(LLMBackendSpec.model_validate(
        {**base, "adapters": [{"name": "sql", "source": {"uri": "hf://acme/sql-lora"}}]}), nodes)
    assert without.fits and with_adapters.fits
    assert "LoRA" not in without.explanation
    tp = with_adapters.tensor_parallel
    cache = memory.lora_cache(L8, LLMBackendSpec.model_validate(
        {**base, "adapters": [{"name": "sql", "source": {"uri": "hf://acme/sql-lora"}}]}).engine, tp, 1)
    assert cache is not None
    assert (f"+ LoRA cache {memory.fmt_gib(cache.gpu_bytes)} (4 adapters of rank 64; 8 in host memory, 2.5 GiB) ="
            in with_adapters.explanation)
