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
