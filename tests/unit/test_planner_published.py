"""Published plans: NVIDIA's NIM latency/throughput profiles and TensorRT-LLM's performance docs, reproduced.

Each case is one row of docs/planner.md's "Published plans" table (checked below); the nodes are GFD-labelled
fixtures or managed-cloud nodes without GFD (instance-type / accelerator labels only), built here.
Architectures not in the catalog (MoE with expert counts, MLA) are built in this file from the models'
config.json figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from llmbackend.api.catalog import PRESETS
from llmbackend.api.v1alpha1 import EngineSpec, ModelArchitecture, ParallelismSpec
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.planner import plan

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = ROOT / "e2e" / "topologies"

L8, L70, L405 = PRESETS["llama-3.1-8b"], PRESETS["llama-3.1-70b"], PRESETS["llama-3.1-405b"]
MIXTRAL = PRESETS["mixtral-8x7b"].model_copy(update=dict(
    num_experts=8, num_experts_per_token=2, active_parameter_count=12_900_000_000))
QWEN3_235B = ModelArchitecture(  # Qwen/Qwen3-235B-A22B config.json
    num_layers=94, hidden_size=4096, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
    vocab_size=151_936, parameter_count=235_000_000_000, active_parameter_count=22_000_000_000,
    num_experts=128, num_experts_per_token=8,
)
DEEPSEEK_R1 = ModelArchitecture(  # deepseek-ai/DeepSeek-R1 config.json (MLA, 256 routed + 1 shared expert)
    num_layers=61, hidden_size=7168, num_attention_heads=128, num_key_value_heads=128, head_dim=128,
    vocab_size=129_280, parameter_count=671_000_000_000, active_parameter_count=37_000_000_000,
    num_experts=256, num_experts_per_token=8, num_shared_experts=1, kv_lora_rank=512, qk_rope_head_dim=64,
    checkpoint_quantization="fp8",
)
GPT_OSS_120B = ModelArchitecture(  # openai/gpt-oss-120b config.json: 128 experts, top-4, every other layer windowed
    num_layers=36, hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
    vocab_size=201_088, parameter_count=116_830_000_000, active_parameter_count=5_130_000_000,
    num_experts=128, num_experts_per_token=4, sliding_window=128, sliding_window_layers=18,
)
# 4-bit checkpoints: NVFP4 (ModelOpt, Blackwell) and MXFP4 (gpt-oss), fp8 KV cache as the published runs chose.
NVFP4 = {"quantization": "nvfp4", "kv_cache_dtype": "fp8"}
MXFP4 = {"quantization": "mxfp4", "kv_cache_dtype": "fp8"}


def fixture(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((TOPOLOGIES / f"{name}.yaml").read_text()) if d]


def cloud_node(name: str, gpus: int, labels: dict[str, str], taint: bool = True) -> dict:
    """A managed-cloud GPU node without GPU Feature Discovery: only the cloud's labels, GKE's taint."""
    spec = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]} if taint else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": spec, "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}}}


def gfd_node(name: str, product: str, gpus: int) -> dict:
    """A GFD-labelled node with only the product label (memory and capability from the product table)."""
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


NODES = {
    "dgx-h100": lambda: fixture("dgx-h100"),
    "hgx-h200": lambda: fixture("hgx-h200"),
    "dgx-h100-x4": lambda: fixture("dgx-h100-x4"),
    "l40s-pcie": lambda: fixture("l40s-pcie"),
    "gb200-nvl-clique": lambda: fixture("gb200-nvl-clique"),
    "p4de.24xlarge": lambda: [cloud_node("p4de-0", 8, {"node.kubernetes.io/instance-type": "p4de.24xlarge"})],
    "p5.48xlarge": lambda: [cloud_node("p5-0", 8, {"node.kubernetes.io/instance-type": "p5.48xlarge",
                                                   "karpenter.k8s.aws/instance-gpu-name": "h100"})],
    "a3-ultragpu-8g": lambda: [cloud_node("a3u-0", 8, {"cloud.google.com/gke-accelerator": "nvidia-h200-141gb",
                                                       "node.kubernetes.io/instance-type": "a3-ultragpu-8g"})],
    "a4-highgpu-8g": lambda: [cloud_node("a4-0", 8, {"cloud.google.com/gke-accelerator": "nvidia-b200",
                                                     "node.kubernetes.io/instance-type": "a4-highgpu-8g"})],
    "g5.12xlarge": lambda: [cloud_node("g5-0", 4, {"node.kubernetes.io/instance-type": "g5.12xlarge"})],
    "g5.48xlarge": lambda: [cloud_node("g5-0", 8, {"node.kubernetes.io/instance-type": "g5.48xlarge"})],
    "Standard_ND96isr_H100_v5": lambda: [cloud_node("nd-0", 8, {"node.kubernetes.io/instance-type":
                                                                "Standard_ND96isr_H100_v5"})],
}


@dataclass(frozen=True)
class Case:
    id: str
    arch: ModelArchitecture
    nodes: str
    objective: str
    expect: str  # "TP8 x PP1" or "TP8 x PP1 x EP8"
    product: str
    engine: dict = field(default_factory=dict)
    source: str = ""


NIM = "NIM profile"
PERF = "TensorRT-LLM perf overview"
PERF_OLD = "TensorRT-LLM perf overview (earlier releases)"
A10G_8B = {"max_batch_size": 32, "kv_cache_min_sequences": 16}  # 24 GB cards: smaller batches
CASES = [
    Case("1", L8, "dgx-h100", "throughput", "TP1 x PP1", "NVIDIA-H100-80GB-HBM3", source=NIM),
    Case("2", L8, "dgx-h100", "latency", "TP2 x PP1", "NVIDIA-H100-80GB-HBM3", source=NIM),
    Case("3", L70, "dgx-h100", "throughput", "TP4 x PP1", "NVIDIA-H100-80GB-HBM3", source=NIM),
    Case("4", L70, "dgx-h100", "latency", "TP8 x PP1", "NVIDIA-H100-80GB-HBM3", source=NIM),
    Case("5", L70, "hgx-h200", "throughput", "TP1 x PP1", "NVIDIA-H200", {"quantization": "fp8"}, source=NIM),
    Case("6", L70, "hgx-h200", "latency", "TP2 x PP1", "NVIDIA-H200", {"quantization": "fp8"}, source=NIM),
    Case("7", L70, "p4de.24xlarge", "latency", "TP8 x PP1", "NVIDIA-A100-SXM4-80GB", source=NIM),
    Case("8", MIXTRAL, "dgx-h100", "throughput", "TP2 x PP1 x EP2", "NVIDIA-H100-80GB-HBM3", source=NIM),
    Case("9", MIXTRAL, "dgx-h100", "latency", "TP4 x PP1 x EP4", "NVIDIA-H100-80GB-HBM3", source=NIM),
    Case("10", L70, "l40s-pcie", "throughput", "TP4 x PP1", "NVIDIA-L40S", {"quantization": "fp8"}, source=NIM),
    Case("11", L8, "g5.12xlarge", "throughput", "TP2 x PP1", "NVIDIA-A10G", A10G_8B, source=NIM),
    Case("12", L8, "g5.12xlarge", "latency", "TP4 x PP1", "NVIDIA-A10G", A10G_8B, source=NIM),
    Case("13", L70, "g5.48xlarge", "throughput", "TP8 x PP1", "NVIDIA-A10G", {"kv_cache_min_sequences": 8}, source=NIM),
    Case("14", MIXTRAL, "g5.48xlarge", "throughput", "TP8 x PP1 x EP8", "NVIDIA-A10G", source=NIM),
    Case("15", L8, "dgx-h100", "throughput", "TP1 x PP1", "NVIDIA-H100-80GB-HBM3", {"quantization": "fp8"}, source=PERF_OLD),
    Case("16", L8, "hgx-h200", "throughput", "TP1 x PP1", "NVIDIA-H200", {"quantization": "fp8"}, source=PERF_OLD),
    Case("17", L70, "dgx-h100", "throughput", "TP2 x PP1", "NVIDIA-H100-80GB-HBM3", {"quantization": "fp8"}, source=PERF),
    Case("18", L405, "dgx-h100", "throughput", "TP8 x PP1", "NVIDIA-H100-80GB-HBM3", {"quantization": "fp8"}, source=PERF_OLD),
    Case("19", L405, "a3-ultragpu-8g", "latency", "TP8 x PP1", "NVIDIA-H200", {"quantization": "fp8"}, source=PERF_OLD),
    Case("20", L405, "dgx-h100-x4", "throughput", "TP8 x PP2", "NVIDIA-H100-80GB-HBM3",
         source="TensorRT-LLM sharding guide"),
    Case("21", QWEN3_235B, "p5.48xlarge", "latency", "TP8 x PP1 x EP8", "NVIDIA-H100-80GB-HBM3",
         {"quantization": "fp8"}, source=PERF + " (H100 DEP8)"),
    Case("22", DEEPSEEK_R1, "hgx-h200", "throughput", "TP8 x PP1 x EP8", "NVIDIA-H200", {"quantization": "fp8"},
         source=PERF + " (H200 DEP8)"),
    Case("23", L70, "a4-highgpu-8g", "throughput", "TP1 x PP1", "NVIDIA-B200", NVFP4, source=PERF + " (B200 TP1 FP4)"),
    Case("24", L70, "gb200-nvl-clique", "throughput", "TP1 x PP1", "NVIDIA-GB200", NVFP4,
         source=PERF + " (GB200 TP1 FP4)"),
    Case("25", L405, "gb200-nvl-clique", "throughput", "TP8 x PP1", "NVIDIA-GB200",
         source="TensorRT-LLM sharding guide (TP over multi-node NVLink)"),
    Case("26", GPT_OSS_120B, "hgx-h200", "throughput", "TP1 x PP1 x EP1", "NVIDIA-H200", MXFP4,
         source=PERF + " (H200 TP1)"),
    Case("27", L70, "Standard_ND96isr_H100_v5", "throughput", "TP4 x PP1", "NVIDIA-H100-80GB-HBM3", source=NIM),
]


def run(case: Case):
    nodes = [parse_node(d) for d in NODES[case.nodes]()]
    return plan(case.arch, EngineSpec(**case.engine), ParallelismSpec(objective=case.objective), nodes)


def shape(p) -> str:
    return f"TP{p.tensor_parallel} x PP{p.pipeline_parallel}" + (f" x EP{p.expert_parallel}" if p.expert_parallel else "")


# Published plans the planner no longer reproduces, and why (the README row keeps the published shape).
NOT_REPRODUCED = {
    "21": "NVIDIA's H100 DEP8 (attention data parallelism + EP8) is a max-throughput run at high concurrency; at this "
          "table's workload (64 requests of 2048/2048, latency objective) the model keeps TP attention (attention DP "
          "is the runner-up), and for one request's time TP8 cuts only ~5% from TP4 x EP4 (< 15%)",
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.id}-{c.nodes}-{c.objective}")
def test_published_plan(case: Case, request):
    if case.id in NOT_REPRODUCED:
        request.applymarker(pytest.mark.xfail(strict=True, reason=NOT_REPRODUCED[case.id]))
    p = run(case)
    assert p.fits, p.explanation
    assert (shape(p), p.gpu_product) == (case.expect, case.product), p.explanation
    # Every explanation names the bandwidth and compute figures it used, and says it is an estimate.
    e = p.estimate
    assert e is not None and f"HBM {e.hbm_gbps / 1000:g} TB/s" in p.explanation
    assert f"{e.tflops:,.0f} TFLOPS" in p.explanation and "an estimate, not a promise" in p.explanation
    if p.gpus_per_replica > 1:
        assert e.tp_link in p.explanation and "GB/s" in e.tp_link


def test_table_has_the_required_kinds_of_rows():
    assert len(CASES) >= 20
    products = {c.product for c in CASES}
    assert {"NVIDIA-H200", "NVIDIA-B200", "NVIDIA-GB200", "NVIDIA-L40S", "NVIDIA-A10G"} <= products
    assert any("EP" in c.expect for c in CASES)


def test_readme_table_matches():
    readme = (ROOT / "docs" / "planner.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    for case in CASES:
        assert case.id in rows, f"docs/planner.md published-plans row {case.id} missing"
        assert f"**{case.expect}**" in rows[case.id], rows[case.id]


def test_pcie_rows_say_tp_over_pcie():
    for case in (c for c in CASES if c.product in ("NVIDIA-L40S", "NVIDIA-A10G")):
        p = run(case)
        assert p.tp_over_pcie and "PCIe Gen" in p.explanation and "Note: tensor parallel over PCIe" in p.explanation


def test_moe_rows_report_ep_in_status():
    p = run(CASES[20])  # Qwen3-235B-A22B fp8 on p5.48xlarge (EP4 or EP8: see NOT_REPRODUCED)
    s = p.to_status()
    ep = p.expert_parallel
    assert ep in (4, 8) and s["expertParallel"] == ep
    assert f"moe_expert_parallel_size {ep} x moe_tensor_parallel_size 1" in p.explanation
    # EKS node without GFD: selected by its instance type, its GPU taint tolerated, fp8 allowed (CC 9.0 from the table).
    assert s["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "h100"}


def test_managed_cloud_plan_renders_pods_that_land_there():
    """GKE node without GFD: the plan's status selects the accelerator label and the pods tolerate the GPU taint."""
    from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
    from llmbackend.render.names import BackendRef
    from llmbackend.render.workloads import RolloutStrategy, desired_objects

    node = cloud_node("gke-a3-0", 8, {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                                      "node.kubernetes.io/instance-type": "a3-highgpu-8g"})
    p = plan(L70, EngineSpec(quantization="fp8"), ParallelismSpec(), [parse_node(node)])
    assert p.fits and p.gpu_product == "NVIDIA-H100-80GB-HBM3"
    status = PlanStatus.model_validate(p.to_status())
    spec = LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-70b", "source": {"uri": "s3://m/x"}},
                                          "engine": {"quantization": "fp8"}})
    objects = desired_objects(BackendRef("b", "ns", "uid"), spec, status, 1, RolloutStrategy("RollingUpdate", 1, 0))
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    labels = node["metadata"]["labels"]
    taints = node["spec"]["taints"]
    assert all(labels.get(k) == v for k, v in pod["nodeSelector"].items())
    assert all(any(t.get("key") == taint["key"] and t.get("operator") == "Exists" for t in pod["tolerations"])
               for taint in taints)
