"""Inventory: parsing GFD-labelled Nodes, inference, fingerprints, matching, memory."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from llmbackend.planning.inventory import (
    TOPOLOGY_ANNOTATION,
    Inventory,
    gpu_fingerprint,
    infer_domains,
    node_matches,
    nvlink_bandwidth_gbps,
    parse_node,
)

TOPOLOGIES = Path(__file__).resolve().parents[2] / "e2e" / "topologies"


def load(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((TOPOLOGIES / f"{name}.yaml").read_text()) if d]


def test_dgx_h100_from_annotation():
    node = parse_node(load("dgx-h100")[0])
    assert node is not None
    assert node.name == "dgx-h100-0"
    assert node.gpu_count == 8
    assert node.product == "NVIDIA-H100-80GB-HBM3"
    assert node.memory_bytes == 81559 * 1024 * 1024
    assert node.family == "hopper"
    assert node.compute_capability == (9, 0)
    assert node.clique is None
    assert node.nvlink_domains == ((0, 1, 2, 3, 4, 5, 6, 7),)
    assert node.topology_source == "annotation"
    assert node.schedulable and node.taints == ()


def test_a100_without_annotation_is_inferred_nvswitch():
    node = parse_node(load("a100-40gb-sxm")[0])
    assert node.topology_source == "inferred"
    assert node.nvlink_domains == (tuple(range(8)),)
    assert node.compute_capability == (8, 0)


@pytest.mark.parametrize(
    ("name", "domains"),
    [("h100-nvl-pairs", ((0, 1), (2, 3))), ("l40s-pcie", ((0,), (1,), (2,), (3,))), ("hgx-h200", (tuple(range(8)),))],
)
def test_fixture_domains(name, domains):
    assert parse_node(load(name)[0]).nvlink_domains == domains


def test_gb200_clique():
    nodes = [parse_node(d) for d in load("gb200-nvl-clique")]
    assert {n.clique for n in nodes} == {"7f3c2a10-5e1b-4d2f-9c1e-2b8a4f6d0e11.1"}
    assert all(n.gpu_count == 4 for n in nodes)


@pytest.mark.parametrize(
    ("product", "count", "domains"),
    [
        ("NVIDIA-H100-80GB-HBM3", 8, (tuple(range(8)),)),
        ("NVIDIA-H200", 8, (tuple(range(8)),)),
        ("NVIDIA-B200", 8, (tuple(range(8)),)),
        ("NVIDIA-A100-SXM4-80GB", 8, (tuple(range(8)),)),
        ("NVIDIA-H100-NVL", 4, ((0, 1), (2, 3))),
        ("NVIDIA-A100-PCIE-40GB", 3, ((0, 1), (2,))),
        ("NVIDIA-H100-PCIe", 2, ((0,), (1,))),
        ("NVIDIA-L40S", 2, ((0,), (1,))),
        ("NVIDIA-L4", 1, ((0,),)),
        ("NVIDIA-A10G", 4, ((0,), (1,), (2,), (3,))),
        ("Tesla-T4", 1, ((0,),)),
        ("Mystery-GPU", 2, ((0,), (1,))),
    ],
)
def test_inference_table(product, count, domains):
    assert infer_domains(product, count) == domains


def test_bandwidth_table():
    assert nvlink_bandwidth_gbps("NVIDIA-H100-80GB-HBM3") == 900
    assert nvlink_bandwidth_gbps("NVIDIA-A100-SXM4-40GB") == 600
    assert nvlink_bandwidth_gbps("NVIDIA-L40S") == 32  # no NVLink: PCIe Gen4 x16 per direction (was a flat 64)


@pytest.mark.parametrize("bad", ["not json", '{"nvlinkDomains": 3}', '{"other": []}', '{"nvlinkDomains": [[0,1],[1,2]]}',
                                 '{"nvlinkDomains": [[]]}'])
def test_bad_annotation_falls_back_to_inference(bad):
    doc = load("dgx-h100")[0]
    doc["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = bad
    node = parse_node(doc)
    assert node.topology_source == "inferred"
    assert node.nvlink_domains == (tuple(range(8)),)
    assert "invalid" in node.topology_note


def test_non_gpu_node_is_none():
    assert parse_node({"metadata": {"name": "cpu-0", "labels": {"kubernetes.io/os": "linux"}},
                       "status": {"allocatable": {"cpu": "8"}}}) is None


def test_labelled_but_not_allocatable_counts_zero():
    doc = load("dgx-h100")[0]
    del doc["status"]["allocatable"]["nvidia.com/gpu"]
    node = parse_node(doc)
    assert node is not None and node.gpu_count == 0


def test_taints_and_cordon():
    doc = load("dgx-h100")[0]
    doc["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    node = parse_node(doc)
    assert not node.schedulable and not node.cordoned
    assert not node_matches(node, None, None)
    assert node_matches(node, None, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert node_matches(node, None, [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}])
    assert not node_matches(node, None, [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}])
    assert node_matches(node, None, [{"operator": "Exists"}])
    doc["spec"] = {"unschedulable": True}
    cordoned = parse_node(doc)
    assert cordoned.cordoned and not cordoned.schedulable
    assert not node_matches(cordoned, None, [{"operator": "Exists"}])
    doc["spec"] = {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}
    assert node_matches(parse_node(doc), None, None)


def test_node_selector():
    node = parse_node(load("dgx-h100")[0])
    assert node_matches(node, {"nvidia.com/gpu.family": "hopper"}, None)
    assert not node_matches(node, {"nvidia.com/gpu.family": "ampere"}, None)
    assert not node_matches(node, {"pool": "inference"}, None)


def test_fingerprint_ignores_heartbeats_and_gfd_timestamp():
    doc = load("dgx-h100")[0]
    base = gpu_fingerprint(parse_node(doc))
    noisy = copy.deepcopy(doc)
    noisy["metadata"]["labels"]["nvidia.com/gfd.timestamp"] = "1730000000"
    noisy["metadata"]["resourceVersion"] = "999"
    noisy["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z"}]
    assert gpu_fingerprint(parse_node(noisy)) == base
    relabelled = copy.deepcopy(doc)
    relabelled["metadata"]["labels"]["pool"] = "a"
    assert gpu_fingerprint(parse_node(relabelled)) != base


def test_inventory_upsert_remove():
    inv = Inventory()
    doc = load("dgx-h100")[0]
    assert inv.upsert(doc) is True
    assert inv.upsert(copy.deepcopy(doc)) is False
    changed = copy.deepcopy(doc)
    changed["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    assert inv.upsert(changed) is True
    assert inv.get("dgx-h100-0").gpu_count == 7
    assert len(inv) == 1 and "dgx-h100-0" in inv
    # A node that loses its GPUs leaves the index.
    gone = {"metadata": {"name": "dgx-h100-0"}, "status": {"allocatable": {}}}
    assert inv.upsert(gone) is True
    assert len(inv) == 0
    assert inv.remove("dgx-h100-0") is False


def test_inventory_memory_small():
    import tracemalloc

    template = load("dgx-h100")[0]
    tracemalloc.start()
    inv = Inventory()
    for i in range(1000):
        doc = copy.deepcopy(template)
        doc["metadata"]["name"] = f"n{i}"
        doc["metadata"]["labels"]["kubernetes.io/hostname"] = f"n{i}"
        inv.upsert(doc)
        del doc
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(inv) == 1000
    assert size < 5 * 1024 * 1024  # ~5 KB per node at most


# ---- product table and managed clouds (no GFD labels) ----

from llmbackend.planning.inventory import PRODUCTS, instance_type_gpus, product_info  # noqa: E402


def cloud(labels: dict, gpus: int = 8, taint: bool = False) -> dict:
    spec = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]} if taint else {}
    return {"metadata": {"name": "c-0", "labels": labels}, "spec": spec,
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


@pytest.mark.parametrize(
    ("product", "mem_mib", "cc", "hbm", "link"),
    [
        ("NVIDIA-H100-80GB-HBM3", 81_559, (9, 0), 3350, "NVLink4 900 GB/s"),
        ("NVIDIA-H100-PCIe", 81_559, (9, 0), 2000, "PCIe Gen5 x16 64 GB/s"),
        ("NVIDIA-H100-NVL", 95_830, (9, 0), 3900, "NVLink4 600 GB/s"),
        ("NVIDIA-H200", 143_771, (9, 0), 4800, "NVLink4 900 GB/s"),
        ("NVIDIA-B200", 183_359, (10, 0), 8000, "NVLink5 1800 GB/s"),
        ("NVIDIA-GB200", 189_471, (10, 0), 8000, "NVLink5 1800 GB/s"),
        ("NVIDIA-GB300", 284_208, (10, 3), 8000, "NVLink5 1800 GB/s"),
        ("NVIDIA-A100-SXM4-40GB", 40_960, (8, 0), 1555, "NVLink3 600 GB/s"),
        ("NVIDIA-A100-SXM4-80GB", 81_920, (8, 0), 2039, "NVLink3 600 GB/s"),
        ("NVIDIA-L40S", 46_068, (8, 9), 864, "PCIe Gen4 x16 32 GB/s"),
        ("NVIDIA-L4", 23_034, (8, 9), 300, "PCIe Gen4 x16 32 GB/s"),
        ("NVIDIA-A10G", 23_028, (8, 6), 600, "PCIe Gen4 x16 32 GB/s"),
    ],
)
def test_product_table(product, mem_mib, cc, hbm, link):
    info = product_info(product)
    assert (info.memory_mib, info.compute_capability, info.hbm_gbps) == (mem_mib, cc, hbm)
    assert info.link_text(True) == link
    assert 0.03 <= info.reserve_fraction <= 0.08


def test_every_product_has_bandwidth_and_a_smaller_reserve_on_big_parts():
    assert all(p.hbm_gbps > 0 and p.memory_mib > 0 for p in PRODUCTS)
    assert product_info("NVIDIA-H200").reserve_fraction < product_info("NVIDIA-H100-80GB-HBM3").reserve_fraction


@pytest.mark.parametrize(
    ("labels", "product", "count", "selector"),
    [
        ({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, "NVIDIA-H100-80GB-HBM3", 8,
         ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb")),
        ({"node.kubernetes.io/instance-type": "a3-highgpu-8g"}, "NVIDIA-H100-80GB-HBM3", 8,
         ("node.kubernetes.io/instance-type", "a3-highgpu-8g")),
        ({"node.kubernetes.io/instance-type": "p5.48xlarge"}, "NVIDIA-H100-80GB-HBM3", 8,
         ("node.kubernetes.io/instance-type", "p5.48xlarge")),
        ({"node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5"}, "NVIDIA-H100-80GB-HBM3", 8,
         ("node.kubernetes.io/instance-type", "Standard_ND96isr_H100_v5")),
        ({"karpenter.k8s.aws/instance-gpu-name": "l40s", "karpenter.k8s.aws/instance-gpu-count": "4",
          "karpenter.k8s.aws/instance-gpu-memory": "46068"}, "NVIDIA-L40S", 4,
         ("karpenter.k8s.aws/instance-gpu-name", "l40s")),
        ({"karpenter.k8s.aws/instance-gpu-name": "a100", "karpenter.k8s.aws/instance-gpu-memory": "81920"},
         "NVIDIA-A100-SXM4-80GB", 8, ("karpenter.k8s.aws/instance-gpu-name", "a100")),
        ({"node.kubernetes.io/instance-type": "g5.12xlarge"}, "NVIDIA-A10G", 4,
         ("node.kubernetes.io/instance-type", "g5.12xlarge")),
    ],
)
def test_managed_cloud_labels_without_gfd(labels, product, count, selector):
    node = parse_node(cloud(labels, gpus=count, taint=True))
    info = product_info(product)
    assert node.product == product and node.product_label == selector
    assert node.memory_bytes == (int(labels.get("karpenter.k8s.aws/instance-gpu-memory", 0)) or info.memory_mib) * 1024 * 1024
    assert node.compute_capability == info.compute_capability  # fp8 on H100 is no longer refused for CC 0.0
    expected = (tuple(range(count)),) if info.nvlink_shape == "all" else tuple((i,) for i in range(count))
    assert node.nvlink_domains == expected


def test_gfd_labels_win_over_cloud_labels():
    node = parse_node(cloud({"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771",
                             "node.kubernetes.io/instance-type": "p5.48xlarge"}))
    assert node.product == "NVIDIA-H200" and node.product_label == ("nvidia.com/gpu.product", "NVIDIA-H200")


def test_instance_type_table():
    assert instance_type_gpus("p4de.24xlarge") == ("NVIDIA-A100-SXM4-80GB", 8)
    assert instance_type_gpus("a2-ultragpu-4g") == ("NVIDIA-A100-SXM4-80GB", 4)
    assert instance_type_gpus("g6e.xlarge") == ("NVIDIA-L40S", 1)
    assert instance_type_gpus("m5.large") is None


def test_gpu_node_of_unknown_product_is_kept_with_no_memory():
    node = parse_node(cloud({"node.kubernetes.io/instance-type": "x9.mystery"}, gpus=2))
    assert node is not None and node.gpu_count == 2 and node.product == "" and node.memory_bytes == 0
