"""nvidia-smi topo -m parsing into NVLink domains, and the reporter command (dry run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmbackend.cli import main
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.topology_reporter import annotation_value, parse_topo_matrix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


@pytest.mark.parametrize(
    ("name", "domains"),
    [
        ("dgx-h100.txt", [list(range(8))]),
        ("a100-sxm.txt", [list(range(8))]),
        ("h100-nvl.txt", [[0, 1], [2, 3]]),
        ("l40s-pcie.txt", [[0], [1], [2], [3]]),
        ("nvlink-bridge-2gpu.txt", [[0, 1]]),
    ],
)
def test_parse_fixture(name, domains):
    assert parse_topo_matrix((FIXTURES / name).read_text()) == domains


def test_fixtures_are_real_format():
    text = (FIXTURES / "dgx-h100.txt").read_text()
    assert "\x1b[4m" in text and "CPU Affinity\tNUMA Affinity" in text and "Legend:" in text and "NIC Legend:" in text


def test_partial_nvlink_mesh_is_connected_components():
    text = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n" \
           "GPU0\t X \tNV2\tSYS\t0-7\t0\nGPU1\tNV2\t X \tNV1\t0-7\t0\nGPU2\tSYS\tNV1\t X \t0-7\t0\n"
    assert parse_topo_matrix(text) == [[0, 1, 2]]


def test_single_gpu():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n"
    assert parse_topo_matrix(text) == [[0]]


def test_garbage_raises():
    with pytest.raises(ValueError):
        parse_topo_matrix("No devices were found\n")


def test_annotation_round_trips_through_inventory():
    value = annotation_value(parse_topo_matrix((FIXTURES / "h100-nvl.txt").read_text()))
    node = parse_node({
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-NVL"},
                     "annotations": {"llmbackend.dev/gpu-topology": value}},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    })
    assert node.topology_source == "annotation" and node.nvlink_domains == ((0, 1), (2, 3))


def test_cli_dry_run(capsys):
    rc = main(["topology-reporter", "--once", "--dry-run", "--from-file", str(FIXTURES / "dgx-h100.txt")])
    assert rc == 0
    assert json.loads(capsys.readouterr().out) == {"nvlinkDomains": [list(range(8))]}


def test_cli_needs_node_name_without_dry_run(capsys, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    rc = main(["topology-reporter", "--once", "--node-name", "", "--from-file", str(FIXTURES / "l40s-pcie.txt")])
    assert rc == 1


def test_cli_bad_file(capsys):
    assert main(["topology-reporter", "--once", "--dry-run", "--from-file", "/nonexistent"]) == 1
    assert "cannot read GPU topology" in capsys.readouterr().err
