"""Inventory: parsing GFD-labelled Nodes, inference, fingerprints, matching, memory."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from llmbackend.planning.inventory import (
    TOPOLOGY_ANNOTATION, Inventory, gpu_fingerprint, infer_domains, node_matches, nvlink_bandwidth_gbps, parse_node,
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
