"""Memory estimate: published figures and the documented model."""

from __future__ import annotations

import pytest

from llmbackend.api.catalog import PRESETS
from llmbackend.api.v1alpha1 import EngineSpec
from llmbackend.planning import memory

L8, L70, L405 = PRESETS["llama-3.1-8b"], PRESETS["llama-3.1-70b"], PRESETS["llama-3.1-405b"]


def test_llama70b_kv_per_token_bf16():
    assert memory.kv_bytes_per_token(L70, EngineSpec(), 1, 1) == 327_680


def test_kv_auto_fp8_halves():
    assert memory.kv_bytes_per_token(L70, EngineSpec(quantization="fp8"), 1, 1) == 163_840
    assert memory.kv_bytes_per_token(L70, EngineSpec(quantization="fp8", kv_cache_dtype="bf16"), 1, 1) == 327_680
    assert memory.kv_bytes_per_token(L70, EngineSpec(kv_cache_dtype="fp8"), 1, 1) == 163_840


def test_kv_stops_shrinking_past_kv_heads():
    e = EngineSpec()
    per = [memory.kv_bytes_per_token(L70, e, tp, 1) for tp in (1, 2, 4, 8, 16, 32)]
    assert per[:4] == [327_680, 163_840, 81_920, 40_960]
    assert per[4] == per[5] == per[3]  # 8 KV heads: replicated beyond TP8


def test_kv_pp_uses_largest_stage():
    e = EngineSpec()
    # 126 layers over 4 stages: largest stage has 32 layers.
    assert memory.kv_bytes_per_token(L405, e, 1, 4) == 2 * 32 * 8 * 128 * 2


@pytest.mark.parametrize(("quant", "bpp"), [("bf16", 2), ("fp16", 2), ("fp8", 1), ("int8_wo", 1), ("int4_awq", 0.515)])
def test_bytes_per_param(quant, bpp):
    assert memory.bytes_per_param(quant) == pytest.approx(bpp)


def test_weights_about_params_times_bytes():
    # Unsharded: all parameters on one GPU.
    assert memory.weight_bytes_per_gpu(L70, "bf16", 1, 1) == pytest.approx(2 * 70.6e9, rel=1e-6)
    assert memory.weight_bytes_per_gpu(L70, "bf16", 4, 1) == pytest.approx(2 * 70.6e9 / 4, rel=1e-6)
    # PP2: each stage carries half the layers plus one of embedding/lm_head = half.
    assert memory.weight_bytes_per_gpu(L70, "bf16", 1, 2) == pytest.approx(70.6e9, rel=1e-6)
    # PP3 on 80 layers: the largest stage has 27 layers plus one embedding matrix.
    embed = 128_256 * 8192
    expected = 2 * ((70.6e9 - 2 * embed) * 27 / 80 + embed)
    assert memory.weight_bytes_per_gpu(L70, "bf16", 1, 3) == pytest.approx(expected, rel=1e-6)


def test_breakdown_and_overhead():
    b1 = memory.estimate(L8, EngineSpec(), 1, 1)
    assert b1.total == b1.weights + b1.kv_cache + b1.activations + b1.overhead
    assert b1.overhead == memory.CUDA_CONTEXT_BYTES
    assert b1.kv_tokens == 64 * 4096
    b2 = memory.estimate(L8, EngineSpec(), 2, 1)
    assert b2.overhead == memory.CUDA_CONTEXT_BYTES + memory.NCCL_BYTES
    assert "weights" in b1.describe(10**11) and "usable" in b1.describe(10**11)
    assert set(b1.to_json()) == {"weightsBytes", "kvCacheBytes", "activationsBytes", "overheadBytes", "totalBytes"}


def test_seed_example_70b_16bit_about_140gb():
    assert memory.weight_bytes_per_gpu(L70, "bf16", 1, 1) / 1e9 == pytest.approx(141, abs=1.5)
    assert memory.weight_bytes_per_gpu(L70, "bf16", 4, 1) / 1e9 == pytest.approx(35, abs=1)


def test_usable_fraction():
    # Was a flat 90%; now the fixed runtime overhead is charged in the estimate and the reserve is per product.
    assert memory.usable_bytes(100) == 95
    assert memory.usable_bytes(1000, 0.04) == 960


# ---- quantized checkpoints, exact weights, MoE, MLA, sliding windows ----


def test_quantized_checkpoints_keep_embeddings_16bit():
    # REFERENCE: 8B fp8 ~9.1 GB, not 8.0; 8B int4 ~5.7 GB, not 4.1.
    assert memory.weight_bytes_per_gpu(L8, "fp8", 1, 1) / 1e9 == pytest.approx(9.1, abs=0.1)
    assert memory.weight_bytes_per_gpu(L8, "int4_awq", 1, 1) / 1e9 == pytest.approx(5.7, abs=0.15)
    tied = L8.model_copy(update={"tie_word_embeddings": True})
    assert memory.weight_bytes_per_gpu(L8, "fp8", 1, 1) - memory.weight_bytes_per_gpu(tied, "fp8", 1, 1) == pytest.approx(
        128_256 * 4096 * (2 - 1), rel=1e-6)  # one 16-bit matrix fewer, its parameters counted once at 1 byte


def test_exact_weight_bytes_used_when_they_describe_the_served_weights():
    exact = L8.model_copy(update={"weight_bytes": 9_080_000_000, "checkpoint_quantization": "fp8"})
    assert memory.weight_bytes_per_gpu(exact, "fp8", 1, 1) == 9_080_000_000
    assert memory.weight_bytes_per_gpu(exact, "fp8", 2, 1) == 4_540_000_000
    # A 16-bit checkpoint served as fp8 (quantized on load): its byte count does not describe the served weights.
    sixteen = L8.model_copy(update={"weight_bytes": 16_060_000_000})
    assert memory.weight_bytes_per_gpu(sixteen, "bf16", 1, 1) == 16_060_000_000
    assert memory.weight_bytes_per_gpu(sixteen, "fp8", 1, 1) == memory.weight_bytes_per_gpu(L8, "fp8", 1, 1)


def test_moe_all_experts_resident_and_ep_does_not_change_per_gpu_memory():
    moe = PRESETS["mixtral-8x7b"].model_copy(update={"num_experts": 8, "num_experts_per_token": 2,
                                                     "active_parameter_count": 12_900_000_000})
    # All 46.7B parameters resident (not the 12.9B active), 1/tp of them per GPU whatever the EP split.
    assert memory.weight_bytes_per_gpu(moe, "bf16", 1, 1) == pytest.approx(2 * 46.7e9, rel=1e-6)
    assert memory.weight_bytes_per_gpu(moe, "bf16", 4, 1) == pytest.approx(2 * 46.7e9 / 4, rel=1e-6)


def test_mla_latent_is_not_split_by_tp():
    r1 = PRESETS["llama-3.1-8b"].model_copy(update={"num_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64})
    e = EngineSpec(kv_cache_dtype="fp8")
    per = [memory.kv_bytes_per_token(r1, e, tp, 1) for tp in (1, 2, 8)]
    assert per == [61 * 576] * 3  # one 576-element latent per token and layer, replicated on every TP rank
    assert memory.kv_bytes_per_token(r1, e, 1, 2) == 31 * 576


def test_sliding_window_layers_cache_only_the_window():
    gemma = PRESETS["llama-3.1-8b"].model_copy(update={"num_layers": 48, "sliding_window": 1024,
                                                       "sliding_window_layers": 40})
    e = EngineSpec()
    per_layer = 2 * 8 * 128 * 2
    assert memory.kv_bytes_per_sequence(gemma, e, 1, 1, 8192) == per_layer * (8 * 8192 + 40 * 1024)
    assert memory.kv_bytes_per_sequence(gemma, e, 1, 1, 512) == per_layer * 48 * 512  # shorter than the window
    every = gemma.model_copy(update={"sliding_window_layers": None})  # all layers windowed (Mistral)
    assert memory.kv_bytes_per_sequence(every, e, 1, 1, 8192) == per_layer * 48 * 1024


# ---- the fit: reserve, kvCacheFreeGpuMemFraction, vLLM's total fraction, KV sizing knob ----


def test_fit_uses_free_fraction_after_weights():
    mem = memory.estimate(L70, EngineSpec(), 4, 1)
    gpu = 80 * memory.GIB
    f = memory.fit(mem, gpu, EngineSpec(), 0.05)
    assert f.usable == int(gpu * 0.95)
    assert f.kv_capacity == int((f.usable - mem.non_kv) * 0.9)
    assert f.fits and f.concurrency == 64
    # A smaller free fraction leaves less KV room: below the worst-case need the shard no longer fits.
    need_fraction = mem.kv_cache / (f.usable - mem.non_kv)
    tight = EngineSpec(kv_cache_free_gpu_mem_fraction=round(need_fraction - 0.02, 2))
    assert not memory.fit(memory.estimate(L70, tight, 4, 1), gpu, tight, 0.05).fits


def test_fit_with_a_total_memory_fraction_plugs_in_for_vllm():
    mem = memory.estimate(L70, EngineSpec(), 4, 1)
    gpu = 80 * memory.GIB
    f = memory.fit(mem, gpu, EngineSpec(), total_fraction=0.9)
    assert f.usable == int(gpu * 0.9) and f.kv_capacity == f.usable - mem.non_kv
    assert not memory.fit(mem, gpu, EngineSpec(), total_fraction=0.5).fits


def test_kv_sizing_knob_min_sequences_and_concurrency():
    worst = EngineSpec(max_batch_size=256)
    knob = EngineSpec(max_batch_size=256, kv_cache_min_sequences=16)
    w, k = memory.estimate(L70, worst, 4, 1), memory.estimate(L70, knob, 4, 1)
    assert w.kv_cache == 16 * k.kv_cache and k.sequences == 16 and k.kv_tokens == 16 * 4096
    gpu = 80 * memory.GIB
    assert not memory.fit(w, gpu, worst, 0.05).fits  # 256 x 4096 tokens do not fit
    f = memory.fit(k, gpu, knob, 0.05)
    assert f.fits and 16 <= f.concurrency < 256 and f.concurrency == f.kv_capacity // k.kv_per_sequence


def test_vllm_total_fraction_is_its_gpu_memory_utilization():
    vllm = EngineSpec(backend="vllm", vllm={"gpu_memory_utilization": 0.6})
    assert memory.total_memory_fraction(vllm) == 0.6
    assert memory.total_memory_fraction(EngineSpec(kv_cache_free_gpu_mem_fraction=0.6)) is None  # TensorRT-LLM
