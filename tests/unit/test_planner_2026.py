"""Plans for 2026's models (issue 45): sliding-window KV sized by window, NVFP4/MXFP4, attention data parallelism
with wide expert parallelism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmbackend.api.checkpoint import architecture_from_config
from llmbackend.api.v1alpha1 import EngineSpec, ParallelismSpec
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.memory import GIB
from llmbackend.planning.planner import plan

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "tests" / "fixtures" / "checkpoints"


def checkpoint(name: str) -> dict:
    return json.loads((CHECKPOINTS / name / "config.json").read_text())


def gfd_node(name: str, product: str, gpus: int) -> dict:
    """A GFD-labelled node with only the product label (memory and capability from the product table)."""
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def nodes(product: str, gpus: int, count: int = 1):
    return [parse_node(gfd_node(f"n{i}", product, gpus)) for i in range(count)]


# ---- sliding-window layers sized as windows ----

def test_gemma3_27b_at_128k_plans_tp1_on_one_h100() -> None:
    """52 of Gemma 3's 62 layers attend to a 1,024-token window: one 128k sequence caches ~10 GiB, not 62 GiB, so
    the bf16 model (~50 GiB) and one full-length sequence fit one H100."""
    gemma = architecture_from_config(checkpoint("gemma-3-27b"))
    engine = EngineSpec(max_seq_len=131072, max_input_len=130000, max_batch_size=1)
    p = plan(gemma, engine, ParallelismSpec(), nodes("NVIDIA-H100-80GB-HBM3", 1))
    assert p.fits, p.explanation
    assert (p.tensor_parallel, p.pipeline_parallel, p.gpus_per_replica) == (1, 1, 1)
    assert p.breakdown is not None and 10 * GIB <= p.breakdown.kv_cache < 11 * GIB
    # Charged as full attention on every layer, the same sequence would not fit one GPU.
    full = gemma.model_copy(update={"sliding_window": None, "sliding_window_layers": None})
    assert not plan(full, engine, ParallelismSpec(), nodes("NVIDIA-H100-80GB-HBM3", 1)).fits


# ---- NVFP4 / MXFP4 ----

def test_fp4_weight_bytes_and_kv_choice() -> None:
    from llmbackend.api.catalog import PRESETS
    from llmbackend.planning import memory

    assert memory.bytes_per_param("nvfp4") == 0.5625  # e2m1 + one fp8 scale per 16 values
    assert memory.bytes_per_param("mxfp4") == 0.53125  # e2m1 + one e8m0 scale per 32 values
    l70 = PRESETS["llama-3.1-70b"]
    # 16-bit KV unless fp8 is chosen: the fp4 quantization does not imply an fp8 KV cache.
    assert memory.kv_dtype_name(EngineSpec(quantization="nvfp4")) == "bf16"
    assert memory.kv_bytes_per_token(l70, EngineSpec(quantization="nvfp4", kv_cache_dtype="fp8")) == 163_840
    assert memory.kv_bytes_per_token(l70, EngineSpec(quantization="nvfp4")) == 327_680


def test_checkpoint_declared_fp4_is_read_from_config() -> None:
    base = checkpoint("llama-3.1-8b")
    modelopt = base | {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                               "kv_cache_quant_algo": "FP8", "group_size": 16}}
    assert architecture_from_config(modelopt).checkpoint_quantization == "nvfp4"
    fp8 = base | {"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}
    assert architecture_from_config(fp8).checkpoint_quantization == "fp8"
    # hf_quant_config.json's block (model_fetch merges it in as quantization_config): no quant_method.
    merged = base | {"quantization_config": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}
    assert architecture_from_config(merged).checkpoint_quantization == "nvfp4"
    assert architecture_from_config(checkpoint("gpt-oss-120b")).checkpoint_quantization == "mxfp4"


def test_nvfp4_refused_before_blackwell_with_the_reason() -> None:
    from llmbackend.api.catalog import PRESETS

    l70 = PRESETS["llama-3.1-70b"]
    p = plan(l70, EngineSpec(quantization="nvfp4"), ParallelismSpec(), nodes("NVIDIA-H200", 8))
    assert not p.fits and p.reason == "QuantizationUnsupported"
    assert "nvfp4 needs compute capability 10.0+" in p.explanation and "Blackwell" in p.explanation
    assert "NVIDIA-H200 is 9.0" in p.explanation
    b200 = plan(l70, EngineSpec(quantization="nvfp4"), ParallelismSpec(objective="throughput"),
                nodes("NVIDIA-B200", 8))
    assert b200.fits and b200.tensor_parallel == 1 and b200.estimate is not None
    assert b200.estimate.precision == "fp4" and "9,000 TFLOPS fp4" in b200.explanation
    # MXFP4 (gpt-oss) runs on Hopper weight-only: 16-bit math there, fp4 math on Blackwell.
    oss = architecture_from_config(checkpoint("gpt-oss-120b"))
    hopper = plan(oss, EngineSpec(quantization="mxfp4"), ParallelismSpec(objective="throughput"),
                  nodes("NVIDIA-H200", 8))
    assert hopper.fits and hopper.estimate is not None and hopper.estimate.precision == "16bit"
    blackwell = plan(oss, EngineSpec(quantization="mxfp4"), ParallelismSpec(objective="throughput"),
                     nodes("NVIDIA-B200", 8))
    assert blackwell.fits and blackwell.estimate is not None and blackwell.estimate.precision == "fp4"


def deepseek_spec(engine: dict, checkpoint_quantization: str = "nvfp4"):
    from llmbackend.api.catalog import PRESETS
    from llmbackend.api.v1alpha1 import LLMBackendSpec

    arch = PRESETS["deepseek-r1"].model_copy(update={"checkpoint_quantization": checkpoint_quantization}).dump()
    return LLMBackendSpec.model_validate({"model": {"architecture": arch, "source": {"uri": "hf://nvidia/DeepSeek-R1-FP4"}},
                                          "engine": engine})


def test_nvfp4_deepseek_r1_on_8x_b200_plans_and_renders_for_both_engines() -> None:
    import yaml
    from test_engine_conformance import config_problems, llm_yaml_problems, surface

    from llmbackend.planning.planner import plan_for_spec
    from llmbackend.render.triton import render_model_repository

    engine = {"quantization": "nvfp4", "kvCacheDtype": "fp8", "maxBatchSize": 384, "maxInputLen": 1024,
              "maxSeqLen": 3072}
    s = deepseek_spec(engine)
    p = plan_for_spec(s, nodes("NVIDIA-B200", 8))
    assert p.fits and p.gpu_product == "NVIDIA-B200", p.explanation
    assert p.estimate is not None and p.estimate.precision == "fp4" and "TFLOPS fp4" in p.explanation
    assert p.breakdown is not None and p.breakdown.kv_dtype == "fp8"
    files = render_model_repository(s, "m", p.tensor_parallel, p.pipeline_parallel, p.expert_parallel)
    args = yaml.safe_load(files["m/1/model.yaml"])
    assert "dtype" not in args  # the weights' format is the checkpoint's (quantization_config)
    assert args["kv_cache_config"]["dtype"] == "fp8"
    assert llm_yaml_problems(args, surface("tensorrt_llm")) == []
    vs = deepseek_spec({**engine, "backend": "vllm"})
    vfiles = render_model_repository(vs, "m", p.tensor_parallel, p.pipeline_parallel, p.expert_parallel)
    vargs = json.loads(vfiles["m/1/model.json"])
    assert "quantization" not in vargs and vargs["kv_cache_dtype"] == "fp8"
    assert config_problems(vargs, set(surface("vllm")["classes"]["vllm.engine.arg_utils:AsyncEngineArgs"]["fields"]),
                           "AsyncEngineArgs") == []


def test_fp4_from_a_checkpoint_that_is_not_fp4_is_a_clear_error() -> None:
    import pytest

    from llmbackend.render.triton import render_model_repository
    from llmbackend.render.vllm_backend import EngineConfigError

    for backend in ("tensorrtllm", "vllm"):
        s = deepseek_spec({"quantization": "nvfp4", "backend": backend}, checkpoint_quantization="fp8")
        with pytest.raises(EngineConfigError) as err:
            render_model_repository(s, "m", 8, 1, 8)
        assert err.value.reason == "QuantizationMismatch" and "nvfp4" in str(err.value)


# ---- attention data parallelism with wide EP ----

def deepseek_fp8_1024(**extra) -> EngineSpec:
    """TensorRT-LLM's DeepSeek-R1 H200 max-throughput run (docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_
    TensorRT-LLM.md): 1K in / 2K out, 1024 concurrent requests, max_num_tokens 1151, KV fraction 0.8."""
    return EngineSpec(quantization="fp8", max_batch_size=1024, max_input_len=1024, max_seq_len=3072,
                      max_num_tokens=1151, kv_cache_free_gpu_mem_fraction=0.8, **extra)


def plan_deepseek(engine: EngineSpec, concurrency: int | None = 1024, **parallelism):
    from llmbackend.api.catalog import PRESETS
    from llmbackend.planning.perf_model import Workload

    workload = Workload(1024, 2048, concurrency) if concurrency else None
    return plan(PRESETS["deepseek-r1"], engine, ParallelismSpec(**parallelism), nodes("NVIDIA-H200", 8),
                workload=workload)


def test_deepseek_r1_fp8_8x_h200_at_1024_requests_plans_attention_dp_with_ep8() -> None:
    p = plan_deepseek(deepseek_fp8_1024())
    assert p.fits, p.explanation
    assert (p.tensor_parallel, p.expert_parallel, p.attention_dp) == (8, 8, True), p.explanation
    assert p.estimate is not None and p.estimate.concurrency == 1024
    # Each GPU's KV cache holds its 128 of the 1024 sequences, at MLA's full latent size (61 x 576 fp8 bytes a token).
    assert p.breakdown is not None and p.breakdown.kv_per_sequence == 61 * 576 * 3072
    assert p.breakdown.kv_cache == 128 * 61 * 576 * 3072 and p.breakdown.kv_tokens == 128 * 3072
    status = p.to_status()
    assert status["attentionDataParallel"] is True and status["expertParallel"] == 8
    assert "Layout: attention data parallel x8 with EP8" in p.explanation
    # Plain TP8 copies every sequence's latent to all 8 GPUs: the worst case does not fit, and it is named.
    assert "TP8 attention does not fit" in p.explanation


def test_the_runner_up_layout_and_why_are_in_the_explanation() -> None:
    # Sized for one sequence, both layouts fit memory; the workload decides: TP8 holds ~430 of the 1024.
    p = plan_deepseek(deepseek_fp8_1024(kv_cache_min_sequences=1), objective="throughput")
    assert p.attention_dp and p.estimate is not None and p.estimate.concurrency == 1024
    layout = next(line for line in p.explanation.splitlines() if line.startswith("Layout:"))
    assert "chosen for throughput per GPU at 1024/2048 tokens and 1,024 requests" in layout
    runner_up = layout.split("Runner-up: ")[1]
    assert runner_up.startswith("TP8 attention: its KV cache holds ")
    held = int(runner_up.split("holds ")[1].split(" ")[0].replace(",", ""))
    assert 300 < held < 600  # the issue's ~215 was bf16-sized; fp8 MLA latents at 3072 tokens: ~430


def test_low_load_keeps_tensor_parallel_attention() -> None:
    """NVIDIA's min-latency DeepSeek runs are TP8 without attention DP: one request is faster with its attention
    split over 8 GPUs than on one."""
    p = plan_deepseek(EngineSpec(quantization="fp8", max_batch_size=8, max_input_len=1024, max_seq_len=3072),
                      concurrency=1, tensor_parallel=8)
    assert p.fits and not p.attention_dp and p.expert_parallel == 8, p.explanation
    assert "Runner-up: attention data parallel x8" in p.explanation


def test_attention_dp_is_for_moe_models_and_can_be_switched_off() -> None:
    from llmbackend.api.catalog import PRESETS

    dense = plan(PRESETS["llama-3.1-70b"], EngineSpec(), ParallelismSpec(attention_data_parallel=True),
                 nodes("NVIDIA-H200", 8))
    assert not dense.fits and dense.reason == "AttentionDataParallelInvalid" and "numExperts" in dense.explanation
    off = plan_deepseek(deepseek_fp8_1024(kv_cache_min_sequences=1), attention_data_parallel=False)
    assert off.fits and not off.attention_dp and off.estimate is not None and off.estimate.concurrency < 1024
    worst = plan_deepseek(deepseek_fp8_1024(), attention_data_parallel=False)
    # Without it the worst case (1024 x 3072 tokens of latents on every GPU) needs pipeline stages.
    assert worst.fits and not worst.attention_dp and worst.pipeline_parallel > 1


def test_attention_dp_renders_for_both_engines_at_the_pinned_versions() -> None:
    import yaml
    from test_engine_conformance import config_problems, llm_yaml_problems, surface

    from llmbackend.api.v1alpha1 import PlanStatus
    from llmbackend.render.triton import render_model_repository

    p = plan_deepseek(deepseek_fp8_1024())
    status = PlanStatus.model_validate(p.to_status())
    engine = {"quantization": "fp8", "maxBatchSize": 1024, "maxInputLen": 1024, "maxSeqLen": 3072}
    s = deepseek_spec(engine, checkpoint_quantization="fp8")
    files = render_model_repository(s, "m", status.tensor_parallel, status.pipeline_parallel, status.expert_parallel,
                                    attention_dp=bool(status.attention_data_parallel))
    args = yaml.safe_load(files["m/1/model.yaml"])
    assert (args["tensor_parallel_size"], args["moe_expert_parallel_size"], args["enable_attention_dp"]) == (8, 8, True)
    assert args["max_batch_size"] == 128 and args["cuda_graph_config"]["max_batch_size"] == 128  # per rank
    assert llm_yaml_problems(args, surface("tensorrt_llm")) == []
    vs = deepseek_spec({**engine, "backend": "vllm"}, checkpoint_quantization="fp8")
    vfiles = render_model_repository(vs, "m", 8, 1, 8, attention_dp=True)
    v = json.loads(vfiles["m/1/model.json"])
    assert (v["tensor_parallel_size"], v["data_parallel_size"], v["enable_expert_parallel"], v["max_num_seqs"]) == (
        1, 8, True, 128)
    assert config_problems(v, set(surface("vllm")["classes"]["vllm.engine.arg_utils:AsyncEngineArgs"]["fields"]),
                           "AsyncEngineArgs") == []
    # Tensor parallel attention with EP: vLLM's expert parallel flag, no data parallel ranks.
    tp = json.loads(render_model_repository(vs, "m", 8, 1, 8)["m/1/model.json"])
    assert tp["enable_expert_parallel"] is True and "data_parallel_size" not in tp and tp["max_num_seqs"] == 1024


def test_vllm_gets_attention_dp_only_when_asked() -> None:
    from llmbackend.api.catalog import PRESETS
    from llmbackend.planning.perf_model import Workload

    engine = deepseek_fp8_1024(kv_cache_min_sequences=1).model_copy(update={"backend": "vllm"})
    ds, h200 = PRESETS["deepseek-r1"], nodes("NVIDIA-H200", 8)
    auto = plan(ds, engine, ParallelismSpec(objective="throughput"), h200, workload=Workload(1024, 2048, 1024))
    assert auto.fits and not auto.attention_dp
    asked = plan(ds, engine, ParallelismSpec(objective="throughput", attention_data_parallel=True), h200,
                 workload=Workload(1024, 2048, 1024))
    assert asked.fits and asked.attention_dp and asked.tensor_parallel == 8


def test_deepseek_guide_rows_attention_dp_holds_the_published_concurrency() -> None:
    """TensorRT-LLM's DeepSeek-R1 max-throughput runs (8 x H200 fp8 at 1024 requests, 8 x B200 NVFP4 at 3072), as
    benchmarks/perf_calibrate.py prints them: attention DP holds every request the run kept in flight, TP8 attention a
    fifth of them; the throughput estimate is on the high side (not fitted; see the xfail below)."""
    from benchmark_support import load_benchmark

    cal = load_benchmark("perf_calibrate")
    rows = cal.deepseek_guide()
    for row, adp, predicted, held in rows:
        concurrency, published = row[7], row[-1]
        if adp:
            assert held >= concurrency and 1.0 < predicted / published < 1.6, (row, predicted)
        else:
            assert held < concurrency / 4 and predicted / published < 0.55, (row, predicted)  # about half (0.51, 0.50)


def test_deepseek_guide_rows_within_30_percent() -> None:
    import pytest
    from benchmark_support import load_benchmark

    cal = load_benchmark("perf_calibrate")
    errors = [predicted / row[-1] - 1 for row, adp, predicted, _ in cal.deepseek_guide() if adp]
    if not all(abs(e) <= 0.30 for e in errors):
        pytest.xfail(f"attention DP estimates {', '.join(f'{e:+.0%}' for e in errors)} of the published H200/B200 "
                     "figures: expert load imbalance across EP ranks and rank-to-rank imbalance are not modelled")
    raise AssertionError("the attention DP rows are now within 30 %: drop this xfail")


# ---- speculative decoding ----

# vLLM's SpeculativeConfig keys this project writes (vllm/config/speculative.py: method, num_speculative_tokens, model);
# model.json's speculative_config itself is an AsyncEngineArgs field of the pinned surface.
VLLM_SPECULATIVE_KEYS = {"method", "num_speculative_tokens", "model"}
TRTLLM_DECODING_CLASSES = {"MTP": "MTPDecodingConfig", "Eagle": "EagleDecodingConfig",
                           "DraftTarget": "DraftTargetDecodingConfig"}


def trtllm_speculative_problems(config: dict) -> list[str]:
    from test_engine_conformance import surface

    cls = TRTLLM_DECODING_CLASSES.get(config.get("decoding_type", ""))
    if cls is None:
        return [f"unknown decoding_type {config.get('decoding_type')!r}"]
    fields = set(surface("tensorrt_llm")["classes"][f"tensorrt_llm.llmapi.llm_args:{cls}"]["fields"])
    return [f"{cls} has no {k!r}" for k in sorted(config) if k != "decoding_type" and k not in fields]


_R1_ENGINE = {"quantization": "fp8", "maxBatchSize": 1, "maxInputLen": 1024, "maxSeqLen": 3072}
_R1_MTP = {**_R1_ENGINE, "speculative": {"method": "mtp", "draftTokens": 3}}


def _deepseek_batch_1_rates() -> dict[str, float]:
    from llmbackend.planning.perf_model import Workload

    rates = {}
    for name, e in (("plain", _R1_ENGINE), ("mtp", _R1_MTP)):
        s = deepseek_spec(e, checkpoint_quantization="fp8")
        p = plan(architecture_of(s), s.engine, ParallelismSpec(tensor_parallel=8), nodes("NVIDIA-H200", 8),
                 workload=Workload(1024, 2048, 1))
        assert p.fits and p.estimate is not None, p.explanation
        rates[name] = p.estimate.tokens_per_second
        if name == "mtp":
            assert "Speculative decoding: mtp, 3 draft token(s) a step, each accepted with probability 0.7 (the " \
                   "default" in p.explanation and "~2.53 output tokens a step" in p.explanation
    return rates


@pytest.mark.xfail(strict=True, reason="a layer's fixed cost is measured on dense Llama layers (78 us on an H200, "
                   "issue 45 item 4); DeepSeek-R1's MoE + MLA layers at batch 1 spend more (routing, grouped expert "
                   "GEMMs, more kernels a layer), which nothing measured gives yet: 156 tokens/s predicted without "
                   "MTP vs the guide's 90 (with the former fitted 153 us: 91). The step reads only the shared part "
                   "and 8 of 256 experts (5.5 % of the weights a GPU holds), so the rest of the gap is per-layer cost")
def test_mtp_deepseek_r1_batch_1_rates_are_the_guides() -> None:
    rates = _deepseek_batch_1_rates()
    assert abs(rates["plain"] / 90 - 1) < 0.2 and abs(rates["mtp"] / 158 - 1) < 0.3, rates


def test_mtp_deepseek_r1_batch_1_time_per_token_and_render() -> None:
    """TensorRT-LLM's DeepSeek-R1 H200 min-latency run: TP8, batch 1, 1K/2K tokens, MTP with 3 next-token layers:
    158 output tokens/s (90 without MTP, the same guide's figure for plain decoding; Best_perf_practice_on_DeepSeek-
    R1_in_TensorRT-LLM.md)."""
    import yaml
    from test_engine_conformance import llm_yaml_problems, surface

    from llmbackend.render.triton import render_model_repository

    rates = _deepseek_batch_1_rates()
    assert 1.5 < rates["mtp"] / rates["plain"] < 2.5, rates  # ~2.53 tokens a step, less the drafter's passes
    s = deepseek_spec(_R1_MTP, checkpoint_quantization="fp8")
    args = yaml.safe_load(render_model_repository(s, "m", 8, 1, 8)["m/1/model.yaml"])
    assert args["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    assert llm_yaml_problems(args, surface("tensorrt_llm")) == [] and trtllm_speculative_problems(
        args["speculative_config"]) == []
    vs = deepseek_spec({**_R1_MTP, "backend": "vllm"}, checkpoint_quantization="fp8")
    v = json.loads(render_model_repository(vs, "m", 8, 1, 8)["m/1/model.json"])
    assert v["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert "speculative_config" in surface("vllm")["classes"]["vllm.engine.arg_utils:AsyncEngineArgs"]["fields"]


def architecture_of(spec):
    from llmbackend.api.catalog import resolve_architecture

    return resolve_architecture(spec.model)


def test_eagle3_and_draft_model_size_the_draft_and_render_its_path() -> None:
    import yaml

    from llmbackend.api.catalog import PRESETS
    from llmbackend.api.v1alpha1 import LLMBackendSpec
    from llmbackend.planning import memory
    from llmbackend.render.triton import render_model_repository

    l8 = PRESETS["llama-3.1-8b"]
    plain = memory.estimate(l8, EngineSpec(), 1, 1)
    eagle = memory.estimate(l8, EngineSpec(speculative={"method": "eagle3", "draftPath": "eagle3"}), 1, 1)
    # One 16-bit decoder layer (~0.22B) + the 3h->h fusion (~0.05B) + its lm_head (~0.53B): ~1.6 GB more weights,
    # and one more layer of KV per token.
    assert 1.4e9 < eagle.weights - plain.weights < 1.8e9
    assert eagle.kv_per_sequence == plain.kv_per_sequence * 33 // 32
    draft = memory.estimate(l8, EngineSpec(speculative={"method": "draft_model", "draftPath": "draft",
                                                        "draftParameterCount": 1_000_000_000}), 1, 1)
    assert draft.weights - plain.weights == 2_000_000_000
    for method, extra in (("eagle3", {}), ("draft_model", {"draftParameterCount": 1_000_000_000})):
        for backend in ("tensorrtllm", "vllm"):
            s = LLMBackendSpec.model_validate({
                "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "w", "path": "/llama"}}},
                "engine": {"backend": backend, "speculative": {"method": method, "draftPath": "draft-head", **extra}}})
            files = render_model_repository(s, "m", 1, 1)
            if backend == "tensorrtllm":
                cfg = yaml.safe_load(files["m/1/model.yaml"])["speculative_config"]
                assert cfg["speculative_model_dir"].endswith("/draft-head") and cfg["max_draft_len"] == 3
                assert trtllm_speculative_problems(cfg) == []
            else:
                cfg = json.loads(files["m/1/model.json"])["speculative_config"]
                assert cfg["method"] == method and cfg["model"].endswith("/draft-head")
                assert set(cfg) <= VLLM_SPECULATIVE_KEYS


def test_speculative_bad_input_is_refused_with_a_reason() -> None:
    import pytest
    from pydantic import ValidationError

    from llmbackend.api.catalog import PRESETS

    for bad in ({"method": "eagle3"}, {"method": "mtp", "draftPath": "x"}, {"method": "eagle3", "draftPath": "../etc"},
                {"method": "eagle3", "draftPath": "/abs"}, {"method": "draft_model", "draftPath": "d"},
                {"method": "mtp", "draftTokens": 0}, {"method": "mtp", "acceptanceRate": 1.5}):
        with pytest.raises(ValidationError):
            EngineSpec.model_validate({"speculative": bad})
    p = plan(PRESETS["llama-3.1-8b"], EngineSpec(speculative={"method": "mtp"}), ParallelismSpec(),
             nodes("NVIDIA-H100-80GB-HBM3", 8))
    assert not p.fits and p.reason == "SpeculativeDecodingInvalid" and "eagle3" in p.explanation


def test_speculation_helps_at_low_load_and_the_estimate_says_its_acceptance() -> None:
    from llmbackend.api.catalog import PRESETS
    from llmbackend.planning.perf_model import Workload

    l70 = PRESETS["llama-3.1-70b"]
    spec = {"method": "eagle3", "draftPath": "eagle3"}
    h100 = nodes("NVIDIA-H100-80GB-HBM3", 8)

    def tpot(engine: EngineSpec, concurrency: int) -> float:
        p = plan(l70, engine, ParallelismSpec(tensor_parallel=4), h100, workload=Workload(1000, 1000, concurrency))
        assert p.estimate is not None
        return p.estimate.time_per_output_token_ms

    base = EngineSpec(quantization="fp8", max_batch_size=256)
    low = EngineSpec(quantization="fp8", max_batch_size=256, speculative=spec)
    worse = EngineSpec(quantization="fp8", max_batch_size=256, speculative={**spec, "acceptanceRate": 0.2})
    assert tpot(low, 1) < 0.7 * tpot(base, 1)  # ~2.1 tokens a step at 0.6 acceptance, for a little more work
    assert tpot(worse, 1) > tpot(low, 1)
    # Compute-bound at high load, verifying 4 tokens per sequence costs more than it gains.
    assert tpot(low, 256) / tpot(base, 256) > tpot(low, 1) / tpot(base, 1)


def test_the_operator_renders_the_planned_attention_dp_into_the_model_config() -> None:
    """status.plan -> the ConfigMap the pods load: the layout the planner chose is the one the engine runs."""
    import yaml

    from llmbackend.api.v1alpha1 import PlanStatus
    from llmbackend.render.names import BackendRef
    from llmbackend.render.workloads import RolloutStrategy, desired_objects

    p = plan_deepseek(deepseek_fp8_1024())
    status = PlanStatus.model_validate({**p.to_status(), "inputHash": "x"})
    spec = deepseek_spec({"quantization": "fp8", "maxBatchSize": 1024, "maxInputLen": 1024, "maxSeqLen": 3072},
                         checkpoint_quantization="fp8")
    objects = desired_objects(BackendRef("b", "ns", "uid"), spec, status, 1, RolloutStrategy("RollingUpdate", 1, 0))
    data = next(o for o in objects if o["kind"] == "ConfigMap" and any(k.endswith("model.yaml") for k in o["data"]))
    args = yaml.safe_load(next(v for k, v in data["data"].items() if k.endswith("model.yaml")))
    assert args["enable_attention_dp"] is True and args["moe_expert_parallel_size"] == 8
    assert args["tensor_parallel_size"] == 8 and args["max_batch_size"] == 128


def test_wide_ep_over_a_multi_node_nvlink_clique() -> None:
    """GB200 trays of 4 GPUs in one NVLink clique: at 4,096 requests an NVFP4 DeepSeek-R1 spreads attention DP and EP8
    over two trays (TensorRT-LLM's wide EP runs over the NVLink domain; the pods need the clique's IMEX channel)."""
    import yaml

    from llmbackend.api.catalog import PRESETS
    from llmbackend.planning.perf_model import Workload

    topology = ROOT / "e2e" / "topologies" / "gb200-nvl-clique.yaml"
    clique = [parse_node(d) for d in yaml.safe_load_all(topology.read_text()) if d]
    ds = PRESETS["deepseek-r1"].model_copy(update={"checkpoint_quantization": "nvfp4"})
    engine = EngineSpec(quantization="nvfp4", kv_cache_dtype="fp8", max_batch_size=4096, max_input_len=1024,
                        max_seq_len=3072, max_num_tokens=2048, kv_cache_min_sequences=1)
    p = plan(ds, engine, ParallelismSpec(), clique, workload=Workload(1024, 2048, 4096))
    assert p.fits and p.attention_dp and (p.tensor_parallel, p.expert_parallel) == (8, 8), p.explanation
    assert p.spans_clique and p.nodes_per_replica == 2 and p.estimate is not None and p.estimate.concurrency == 4096


def test_mtp_layer_counted_once_when_the_checkpoint_size_is_known() -> None:
    from llmbackend.api.catalog import PRESETS
    from llmbackend.planning import memory

    ds = PRESETS["deepseek-r1"]
    mtp = EngineSpec(quantization="fp8", speculative={"method": "mtp"})
    # Sized from parameters (which leave the MTP layer out): the layer is added, ~11 GB over 8 GPUs.
    added = memory.estimate(ds, mtp, 8, 1).weights - memory.estimate(ds, EngineSpec(quantization="fp8"), 8, 1).weights
    assert 1.2e9 < added < 1.6e9
    # weightBytes is the checkpoint's total_size, which holds the MTP layer already.
    exact = ds.model_copy(update={"weight_bytes": 688_600_000_000})
    assert memory.estimate(exact, mtp, 8, 1).weights == memory.estimate(exact, EngineSpec(quantization="fp8"), 8, 1).weights
