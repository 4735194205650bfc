"""Planner: published sizing practice on the e2e node fixtures, rules and reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmbackend.api.catalog import PRESETS
from llmbackend.api.v1alpha1 import EngineSpec, LLMBackendSpec, ModelArchitecture, ParallelismSpec
from llmbackend.planning import planner
from llmbackend.planning.capacity import replicas_capacity
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.planner import plan, plan_for_spec

TOPOLOGIES = Path(__file__).resolve().parents[2] / "e2e" / "topologies"
L8, L70, L405 = PRESETS["llama-3.1-8b"], PRESETS["llama-3.1-70b"], PRESETS["llama-3.1-405b"]


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((TOPOLOGIES / f"{name}.yaml").read_text()) if d]


def nodes(*names: str):
    return [parse_node(d) for name in names for d in docs(name)]


def auto(arch, topo, objective="latency", **engine):
    return plan(arch, EngineSpec(**engine), ParallelismSpec(objective=objective), nodes(*topo.split("+")))


def thr(arch, topo, **engine):
    return auto(arch, topo, "throughput", **engine)


def explicit(arch, topo, tp, pp=None, **engine):
    return plan(arch, EngineSpec(**engine), ParallelismSpec(tensor_parallel=tp, pipeline_parallel=pp),
                nodes(*topo.split("+")))


# ---- published practice (default engine: maxBatchSize 64 x maxSeqLen 4096) ----
# The objective used to change nothing (latency took the throughput shape). Since the roofline,
# latency widens TP as NVIDIA's NIM latency profiles do: these tests name the objective they check;
# the published-profile table is tests/unit/test_planner_published.py.


def test_llama8b_bf16_tp1_throughput_tp2_latency_on_h100():
    p = thr(L8, "dgx-h100")
    assert (p.fits, p.tensor_parallel, p.pipeline_parallel, p.gpus_per_replica) == (True, 1, 1, 1)
    assert p.reason == "Fits" and p.topology_source == "annotation"
    assert p.gpu_product == "NVIDIA-H100-80GB-HBM3"
    lat = auto(L8, "dgx-h100")
    assert (lat.tensor_parallel, lat.gpus_per_replica) == (2, 2)
    assert lat.estimate.time_per_output_token_ms < p.estimate.time_per_output_token_ms
    assert "Latency: TP1 -> TP2" in lat.explanation and "3.35 TB/s" in lat.explanation


def test_llama70b_bf16_tp4_on_dgx_h100():
    p = thr(L70, "dgx-h100")
    assert (p.tensor_parallel, p.pipeline_parallel, p.nodes_per_replica) == (4, 1, 1)
    assert "dgx-h100-0 GPUs 0-7 (NVSwitch)" in p.domain
    assert "Rejected: TP2 x PP1" in p.explanation
    assert auto(L70, "dgx-h100").tensor_parallel == 8  # latency: twice the throughput TP


def test_llama70b_bf16_smaller_batch_still_tp4():
    p = thr(L70, "dgx-h100", max_batch_size=16)
    assert (p.tensor_parallel, p.pipeline_parallel) == (4, 1)


def test_llama70b_fp8_tp2_on_h100_tp1_on_h200():
    assert thr(L70, "dgx-h100", quantization="fp8").tensor_parallel == 2
    h200 = thr(L70, "hgx-h200", quantization="fp8")
    assert (h200.tensor_parallel, h200.gpu_product) == (1, "NVIDIA-H200")


def test_mixed_cluster_throughput_prefers_fewest_gpus_product_latency_the_fastest():
    p = thr(L70, "dgx-h100+hgx-h200", quantization="fp8")
    assert (p.gpu_product, p.tensor_parallel) == ("NVIDIA-H200", 1)
    lat = auto(L70, "dgx-h100+hgx-h200", quantization="fp8")
    # H100 TP4 (4 x 3.35 TB/s) reads the weights faster than H200 TP2 (2 x 4.8 TB/s).
    assert (lat.gpu_product, lat.tensor_parallel) == ("NVIDIA-H100-80GB-HBM3", 4)


def test_llama405b_fp8_tp8_on_dgx_h100():
    p = auto(L405, "dgx-h100", quantization="fp8")
    assert (p.tensor_parallel, p.pipeline_parallel, p.gpus_per_replica) == (8, 1, 8)


def test_llama405b_bf16_tp8_pp2_on_two_dgx():
    p = auto(L405, "dgx-h100-x4")
    assert (p.fits, p.tensor_parallel, p.pipeline_parallel) == (True, 8, 2)
    assert (p.gpus_per_replica, p.nodes_per_replica, p.gpus_per_node) == (16, 2, 8)
    assert len(p.nodes) == 2 and p.stages_per_node == 1
    assert "across nodes" in p.explanation


def test_too_large_model_reports_largest_domain_and_required_memory():
    p = auto(L405, "dgx-h100")
    assert not p.fits and p.reason == "InsufficientGPUMemory"
    assert p.largest_domain_gpus == 8
    assert p.required_memory_bytes > 800 * 10**9
    assert p.memory_per_gpu_bytes > p.required_memory_bytes // 8 // 2
    j = p.to_json()
    assert j["fits"] is False and j["largestDomainGpus"] == 8 and j["requiredMemoryBytes"] == p.required_memory_bytes


def test_fp8_on_a100_rejected():
    p = auto(L70, "a100-40gb-sxm", quantization="fp8")
    assert not p.fits and p.reason == "QuantizationUnsupported"
    e = explicit(L70, "a100-40gb-sxm", 8, quantization="fp8")
    assert not e.fits and e.reason == "QuantizationUnsupported"
    # Mixed cluster: fp8 goes to the H100 node, A100 mentioned as not usable.
    m = auto(L70, "a100-40gb-sxm+dgx-h100", quantization="fp8")
    assert m.fits and m.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert "A100" in m.explanation


def test_int4_fine_on_a100():
    p = auto(L70, "a100-40gb-sxm", quantization="int4_awq")
    assert p.fits and p.topology_source == "inferred"


def test_a100_inferred_topology_tp8():
    p = auto(L70, "a100-40gb-sxm")
    assert (p.tensor_parallel, p.topology_source) == (8, "inferred")


def test_l40s_70b_default_does_not_fit_singleton_domains():
    p = auto(L70, "l40s-pcie")
    assert not p.fits and p.reason == "InsufficientGPUMemory"
    assert p.largest_domain_gpus == 1


def test_l40s_70b_small_batch_tp_over_pcie_not_pp():
    # Was TP1 x PP4 (TP banned outside NVLink); NVIDIA ships TP4 engines for L40S: TP over PCIe
    # is preferred to pipeline stages over PCIe, with a note naming the link.
    p = auto(L70, "l40s-pcie", max_batch_size=8)
    assert p.fits and (p.tensor_parallel, p.pipeline_parallel, p.nodes_per_replica) == (4, 1, 1)
    assert p.tp_over_pcie and "PCIe Gen4 x16 32 GB/s" in p.explanation and "Note: tensor parallel over PCIe" in p.explanation
    assert "Warning" not in p.explanation


def test_l40s_explicit_tp_over_pcie_honoured():
    # Was refused (TensorParallelExceedsNVLinkDomain); explicit TP is honoured whenever memory fits.
    p = explicit(L8, "l40s-pcie", 2)
    assert p.fits and p.tp_over_pcie and p.tensor_parallel == 2
    assert explicit(L8, "l40s-pcie", 8).reason == "TensorParallelExceedsNVLinkDomain"  # wider than the node


def test_h100_nvl_pairs_tp4_over_pcie_before_pp():
    # Was TP2 x PP2 (a stage per NVLink pair, PCIe between stages); TP over PCIe now wins over PP over PCIe.
    p = auto(L70, "h100-nvl-pairs")
    assert (p.tensor_parallel, p.pipeline_parallel, p.nodes_per_replica) == (4, 1, 1) and p.tp_over_pcie
    e = explicit(L70, "h100-nvl-pairs", 2, 2)
    assert e.fits and (e.tensor_parallel, e.pipeline_parallel) == (2, 2) and not e.tp_over_pcie


def test_gb200_tp_spans_trays_of_clique():
    p = thr(L405, "gb200-nvl-clique")
    assert (p.tensor_parallel, p.pipeline_parallel) == (8, 1)
    assert "NVLink5 1800 GB/s (multi-node clique)" in p.explanation
    assert auto(L405, "gb200-nvl-clique").tensor_parallel == 16  # latency: the whole clique
    assert p.nodes_per_replica == 2 and p.gpus_per_node == 4 and p.spans_clique
    assert "clique" in p.domain
    e = explicit(L405, "gb200-nvl-clique", 16)
    assert e.fits and e.nodes_per_replica == 4


def test_gb200_without_clique_label_cannot_span():
    ds = docs("gb200-nvl-clique")
    for d in ds:
        del d["metadata"]["labels"]["nvidia.com/gpu.clique"]
    p = plan(L405, EngineSpec(), ParallelismSpec(tensor_parallel=8), [parse_node(d) for d in ds])
    assert p.reason == "TensorParallelExceedsNVLinkDomain"


# ---- explicit parallelism ----


def test_explicit_valid_accepted():
    p = explicit(L70, "dgx-h100", 8)
    assert p.fits and p.explicit and (p.tensor_parallel, p.pipeline_parallel) == (8, 1)
    assert "(explicit)" in p.explanation


@pytest.mark.parametrize(
    ("tp", "pp", "reason"),
    [
        (3, None, "TensorParallelDoesNotDivideHeads"),
        (2, None, "InsufficientGPUMemory"),
        (16, None, "TensorParallelExceedsNVLinkDomain"),
        (8, 2, "InsufficientGPUs"),
    ],
)
def test_explicit_invalid_reasons(tp, pp, reason):
    p = explicit(L70, "dgx-h100", tp, pp)
    assert not p.fits and p.reason == reason
    assert p.tensor_parallel == tp and p.pipeline_parallel == (pp or 1)


def test_explicit_pp_exceeds_layers():
    p = explicit(L8, "dgx-h100-x4", 1, 33)
    assert not p.fits and p.reason == "PipelineParallelExceedsLayers"


def test_tp_vs_kv_heads_rule():
    arch = ModelArchitecture(num_layers=8, hidden_size=1024, num_attention_heads=24, num_key_value_heads=8,
                             head_dim=64, vocab_size=1000, parameter_count=100_000_000)
    assert planner.tp_rule_violation(arch, 4) is None
    assert planner.tp_rule_violation(arch, 3) == "TensorParallelIncompatibleWithKVHeads"
    assert planner.tp_rule_violation(arch, 24) is None  # multiple of 8 KV heads, divides 24
    assert planner.tp_rule_violation(arch, 12) == "TensorParallelIncompatibleWithKVHeads"
    assert planner.tp_rule_violation(arch, 5) == "TensorParallelDoesNotDivideHeads"
    p = plan(arch, EngineSpec(), ParallelismSpec(tensor_parallel=3), nodes("dgx-h100"))
    assert p.reason == "TensorParallelIncompatibleWithKVHeads"


# ---- eligibility ----


def test_no_gpu_nodes():
    assert plan(L8, EngineSpec(), ParallelismSpec(), []).reason == "NoGPUNodes"


def test_node_selector_and_taints_restrict():
    assert auto(L8, "dgx-h100").fits
    p = plan(L8, EngineSpec(), ParallelismSpec(), nodes("dgx-h100"), node_selector={"pool": "x"})
    assert p.reason == "NoSchedulableGPUNodes"
    d = docs("dgx-h100")[0]
    d["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    tainted = [parse_node(d)]
    # GKE's nvidia.com/gpu taint no longer excludes the node: serving pods always tolerate it.
    assert plan(L8, EngineSpec(), ParallelismSpec(), tainted).fits
    d["spec"] = {"taints": [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]}
    other = [parse_node(d)]
    assert plan(L8, EngineSpec(), ParallelismSpec(), other).reason == "NoSchedulableGPUNodes"
    tol = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    assert plan(L8, EngineSpec(), ParallelismSpec(), other, tolerations=tol).fits


def test_allocatable_caps_capacity():
    d = docs("dgx-h100")[0]
    d["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    p = plan(L405, EngineSpec(quantization="fp8"), ParallelismSpec(), [parse_node(d)])
    assert not p.fits


def test_objective_reported():
    p = plan(L8, EngineSpec(), ParallelismSpec(objective="throughput"), nodes("dgx-h100"))
    assert p.objective == "throughput" and p.to_json()["objective"] == "throughput"


# ---- outputs ----


def test_to_json_contract_and_status():
    p = thr(L70, "dgx-h100")
    j = p.to_json()
    for key in ("fits", "tensorParallel", "pipelineParallel", "gpusPerReplica", "nodesPerReplica",
                "memoryPerGpuBytes", "topologySource", "reason", "explanation", "gpuProduct", "domain"):
        assert key in j
    assert j["memoryPerGpuBytes"] == p.breakdown.total
    s = p.to_status()
    assert s["tensorParallel"] == 4 and s["topologySource"] == "annotation"
    assert s["objective"] == "throughput" and s["hbmBandwidthGbps"] == 3350
    assert s["interconnect"] == "NVLink4 900 GB/s" and s["achievableConcurrency"] == 64
    assert 0 < s["timePerOutputTokenMs"] == j["timePerOutputTokenMs"] and s["tokensPerSecond"] > 0
    assert s["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert "expertParallel" not in s


def test_explanation_lists_breakdown_and_domain():
    text = auto(L70, "dgx-h100").explanation
    assert "TP4 x PP1" in text and "weights" in text and "KV cache" in text and "usable" in text
    assert "Domain:" in text


def test_plan_for_spec_uses_preset_and_scheduling():
    spec = LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-70b"},
                                          "scheduling": {"nodeSelector": {"nvidia.com/gpu.family": "hopper"}}})
    assert plan_for_spec(spec, nodes("dgx-h100")).tensor_parallel == 8  # latency default


def test_replicas_capacity():
    assert replicas_capacity(thr(L70, "dgx-h100-x4"), nodes("dgx-h100-x4")) == 8
    assert replicas_capacity(auto(L70, "dgx-h100-x4"), nodes("dgx-h100-x4")) == 4  # latency TP8
    assert replicas_capacity(auto(L405, "dgx-h100-x4"), nodes("dgx-h100-x4")) == 2
    assert replicas_capacity(thr(L8, "l40s-pcie"), nodes("l40s-pcie")) == 2  # TP2 over PCIe (was PP2)
    assert replicas_capacity(thr(L8, "l40s-pcie", max_batch_size=16), nodes("l40s-pcie")) == 4
    assert replicas_capacity(thr(L405, "gb200-nvl-clique"), nodes("gb200-nvl-clique")) == 2
    assert replicas_capacity(auto(L405, "dgx-h100"), nodes("dgx-h100")) == 0


# ---- managed clouds, unknown products, EP, stranded GPUs ----

MIXTRAL_MOE = PRESETS["mixtral-8x7b"].model_copy(update={"num_experts": 8, "num_experts_per_token": 2,
                                                         "active_parameter_count": 12_900_000_000})


def gke_node(name="gke-0", labels=None, gpus=8):
    return parse_node({"metadata": {"name": name, "labels": labels or {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}},
                       "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
                       "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}})


def test_gke_node_without_gfd_plans_fp8_and_selects_by_accelerator_label():
    p = plan(L70, EngineSpec(quantization="fp8"), ParallelismSpec(objective="throughput"), [gke_node()])
    assert p.fits and (p.tensor_parallel, p.gpu_product) == (2, "NVIDIA-H100-80GB-HBM3")
    assert dict(p.node_selector) == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def test_unknown_product_named_plainly():
    mystery = gke_node("odd-0", {"node.kubernetes.io/instance-type": "x9.mystery"}, gpus=4)
    p = plan(L8, EngineSpec(), ParallelismSpec(), [mystery])
    assert not p.fits and p.reason == "UnknownGPUProduct"
    assert "odd-0" in p.explanation and "unknown product" in p.explanation
    assert "0.0 GiB" not in p.explanation
    # Next to known nodes it is named as not used.
    q = plan(L8, EngineSpec(), ParallelismSpec(), [mystery] + nodes("dgx-h100"))
    assert q.fits and "Not used: odd-0" in q.explanation


def test_expert_parallel_in_plan_status_and_validated():
    p = explicit(MIXTRAL_MOE, "dgx-h100", 4)
    assert p.fits and p.expert_parallel == 4 and p.to_status()["expertParallel"] == 4
    e = plan(MIXTRAL_MOE, EngineSpec(), ParallelismSpec(tensor_parallel=4, expert_parallel=2), nodes("dgx-h100"))
    assert e.fits and e.expert_parallel == 2 and "moe_tensor_parallel_size 2" in e.explanation
    bad = plan(MIXTRAL_MOE, EngineSpec(), ParallelismSpec(tensor_parallel=4, expert_parallel=3), nodes("dgx-h100"))
    assert not bad.fits and bad.reason == "ExpertParallelInvalid" and "1, 2, 4" in bad.explanation
    dense = plan(L8, EngineSpec(), ParallelismSpec(tensor_parallel=2, expert_parallel=2), nodes("dgx-h100"))
    assert dense.reason == "ExpertParallelInvalid"
    # vLLM: --enable-expert-parallel spans the TP group, so EP is 1 or TP.
    assert planner.valid_expert_parallel(MIXTRAL_MOE, EngineSpec(backend="vllm"), 4) == [1, 4]
    assert planner.valid_expert_parallel(MIXTRAL_MOE, EngineSpec(), 4) == [1, 2, 4]
    assert planner.valid_expert_parallel(L8, EngineSpec(), 4) == []


def test_no_odd_pp_that_strands_gpus_when_an_even_split_exists():
    # 5 heads: TP is 1 or 5, so a 4 x L40S node can only pipeline. The memory needs 3 stages; TP1 x PP3 would
    # leave the fourth GPU idle, so the plan takes the even split TP1 x PP4 on the same node.
    arch = ModelArchitecture(num_layers=40, hidden_size=5120, num_attention_heads=5, num_key_value_heads=5,
                             head_dim=1024, vocab_size=32_000, parameter_count=110_000_000_000)
    engine = EngineSpec(quantization="fp8", max_batch_size=2, max_seq_len=1024, max_input_len=512)
    three = planner.estimate(arch, engine, 1, 3)
    assert planner.fit(three, nodes("l40s-pcie")[0].memory_bytes, engine, 0.05).fits  # PP3 would fit memory
    p = plan(arch, engine, ParallelismSpec(), nodes("l40s-pcie"))
    assert p.fits and (p.tensor_parallel, p.pipeline_parallel, p.nodes_per_replica) == (1, 4, 1)
    odd = plan(arch, engine, ParallelismSpec(tensor_parallel=1, pipeline_parallel=3), nodes("l40s-pcie"))
    assert odd.fits  # explicit shapes are honoured when they fit


# ---- vLLM plans fit into vLLM's own fraction of total memory ----


@pytest.mark.parametrize(("utilization", "fits_tp1"), [(0.9, True), (0.3, False)])
def test_vllm_plan_uses_gpu_memory_utilization(utilization, fits_tp1):
    """Llama-3.1-8B bf16 (~16 GB weights + KV for 64 x 4096 tokens) fits one H100 at 0.9 of 80 GB, not at 0.3."""
    p = thr(L8, "dgx-h100", backend="vllm", vllm={"gpu_memory_utilization": utilization})
    assert p.fits
    assert (p.tensor_parallel * p.pipeline_parallel == 1) is fits_tp1
    # the TensorRT-LLM KV fraction does not change a vLLM plan
    q = thr(L8, "dgx-h100", backend="vllm", vllm={"gpu_memory_utilization": utilization},
            kv_cache_free_gpu_mem_fraction=0.1)
    assert (q.tensor_parallel, q.pipeline_parallel) == (p.tensor_parallel, p.pipeline_parallel)
