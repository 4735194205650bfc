"""`llmbackend plan`: the JSON contract, exit codes and input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llmbackend.cli import main

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "e2e" / "topologies"


def manifest(tmp_path: Path, spec: dict, name: str = "b.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                                    "metadata": {"name": "m"}, "spec": spec}))
    return str(path)


def run(capsys, *argv):
    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_fits_json(tmp_path, capsys):
    spec = {"model": {"preset": "llama-3.1-70b"}, "parallelism": {"objective": "throughput"}}
    rc, out, _ = run(capsys, "-f", manifest(tmp_path, spec), "--nodes", str(TOPO / "dgx-h100.yaml"))
    assert rc == 0
    doc = json.loads(out)
    assert doc["fits"] is True and doc["reason"] == "Fits"
    assert (doc["tensorParallel"], doc["pipelineParallel"], doc["gpusPerReplica"], doc["nodesPerReplica"]) == (4, 1, 4, 1)
    assert doc["hbmBandwidthGbps"] == 3350 and doc["interconnect"] == "NVLink4 900 GB/s"
    assert doc["timePerOutputTokenMs"] > 0 and doc["tokensPerSecond"] > 0 and doc["achievableConcurrency"] == 64
    assert doc["topologySource"] == "annotation" and doc["memoryPerGpuBytes"] > 0
    assert doc["gpuProduct"] == "NVIDIA-H100-80GB-HBM3" and "explanation" in doc and "domain" in doc


def test_multi_node_and_nodelist(tmp_path, capsys):
    items = [d for d in yaml.safe_load_all((TOPO / "dgx-h100-x4.yaml").read_text()) if d]
    nodelist = tmp_path / "nodes.yaml"
    nodelist.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    rc, out, _ = run(capsys, "-f", manifest(tmp_path, {"model": {"preset": "llama-3.1-405b"}}), "--nodes", str(nodelist))
    doc = json.loads(out)
    assert rc == 0 and (doc["tensorParallel"], doc["pipelineParallel"], doc["nodesPerReplica"]) == (8, 2, 2)


def test_inferred_topology(tmp_path, capsys):
    rc, out, _ = run(capsys, "-f", manifest(tmp_path, {"model": {"preset": "llama-3.1-8b"}}),
                     "--nodes", str(TOPO / "a100-40gb-sxm.yaml"))
    assert rc == 0 and json.loads(out)["topologySource"] == "inferred"


def test_does_not_fit_exit_2(tmp_path, capsys):
    rc, out, _ = run(capsys, "-f", manifest(tmp_path, {"model": {"preset": "llama-3.1-405b"}}),
                     "--nodes", str(TOPO / "dgx-h100.yaml"))
    doc = json.loads(out)
    assert rc == 2 and doc["fits"] is False and doc["reason"] == "InsufficientGPUMemory"


def test_explicit_invalid_exit_2(tmp_path, capsys):
    spec = {"model": {"preset": "llama-3.1-70b"}, "parallelism": {"tensorParallel": 3}}
    rc, out, _ = run(capsys, "-f", manifest(tmp_path, spec), "--nodes", str(TOPO / "dgx-h100.yaml"))
    assert rc == 2 and json.loads(out)["reason"] == "TensorParallelDoesNotDivideHeads"


def test_text_output(tmp_path, capsys):
    rc, out, _ = run(capsys, "-f", manifest(tmp_path, {"model": {"preset": "llama-3.1-70b"}}),
                     "--nodes", str(TOPO / "dgx-h100.yaml"), "-o", "text")
    # Latency default: TP8, twice the throughput TP (the objective used to change nothing).
    assert rc == 0 and out.startswith("Plan: TP8 x PP1")
    assert "Estimate (performance model" in out and "an estimate, not a promise" in out
    assert "HBM 3.35 TB/s" in out and "989 TFLOPS 16-bit" in out and "NVLink4 900 GB/s" in out
    assert "for 2048 input / 2048 output tokens" in out  # the spec's limits: maxInputLen, maxSeqLen - maxInputLen


def test_workload_flags_answer_what_the_plan_does_for_my_traffic(tmp_path, capsys):
    """8B fp8 on one H100: long prompts with short answers make fewer output tokens/s than the reverse (NVIDIA's
    perf-overview: 3,450 vs 22,714 tokens/s at 2048/128 vs 128/2048)."""
    spec = {"model": {"preset": "llama-3.1-8b"}, "engine": {"quantization": "fp8"},
            "parallelism": {"objective": "throughput"}}
    path = manifest(tmp_path, spec)
    docs = {}
    for isl, osl in ((2048, 128), (128, 2048)):
        rc, out, _ = run(capsys, "-f", path, "--nodes", str(TOPO / "dgx-h100.yaml"), "--isl", str(isl),
                         "--osl", str(osl), "--concurrency", "32")
        assert rc == 0
        docs[isl, osl] = json.loads(out)
    long_prompt, long_answer = docs[2048, 128], docs[128, 2048]
    assert long_prompt["tokensPerSecond"] < 0.75 * long_answer["tokensPerSecond"]
    assert long_prompt["timeToFirstTokenMs"] > long_answer["timeToFirstTokenMs"]
    assert (long_prompt["estimateInputTokens"], long_prompt["estimateOutputTokens"]) == (2048, 128)
    assert long_prompt["achievableConcurrency"] == 32
    assert "estimate for 2048 input / 128 output tokens at 32 request(s) in flight" in long_prompt["estimate"]
    rc, out, _ = run(capsys, "-f", path, "--nodes", str(TOPO / "dgx-h100.yaml"), "--isl", "8000", "-o", "text")
    assert rc == 0 and "exceed maxInputLen 2048 / maxSeqLen 4096: the engine would reject them" in out
    with pytest.raises(SystemExit) as exc:  # argparse rejects it: usage and exit 2
        run(capsys, "-f", path, "--nodes", str(TOPO / "dgx-h100.yaml"), "--isl", "0")
    assert exc.value.code == 2 and "--isl: 0 is out of range" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"model": {"preset": "llama-9"}}, "unknown model preset"),
        ({"model": {"preset": "llama-3.1-8b"}, "engine": {"quantization": "int3"}}, "spec.engine.quantization"),
        ({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"tensorParallel": 0}}, "spec.parallelism.tensorParallel"),
    ],
)
def test_bad_spec_exit_1(tmp_path, capsys, spec, needle):
    rc, out, err = run(capsys, "-f", manifest(tmp_path, spec), "--nodes", str(TOPO / "dgx-h100.yaml"))
    assert rc == 1 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_missing_file_and_bad_yaml(tmp_path, capsys):
    rc, _, err = run(capsys, "-f", str(tmp_path / "nope.yaml"), "--nodes", str(TOPO / "dgx-h100.yaml"))
    assert rc == 1 and "cannot read" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    rc, _, err = run(capsys, "-f", str(bad), "--nodes", str(TOPO / "dgx-h100.yaml"))
    assert rc == 1 and "invalid YAML" in err
    rc, _, err = run(capsys, "-f", manifest(tmp_path, {"model": {"preset": "llama-3.1-8b"}}), "--nodes", str(bad))
    assert rc == 1 and "invalid YAML" in err
