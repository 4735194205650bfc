"""Every sample in manifests/samples is a valid LLMBackend and plans on four DGX H100 nodes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmbackend.api.v1alpha1 import LLMBackend
from llmbackend.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
NODES = ROOT / "e2e" / "topologies" / "dgx-h100-x4.yaml"
EXPECTED = {
    "llama-3.1-8b-trtllm.yaml",
    "llama-3.1-70b-autoscaled.yaml",
    "llama-3.1-405b-multinode.yaml",
    "mistral-7b-vllm.yaml",
    "custom-architecture.yaml",
    "llama-3.1-8b-hf.yaml",
}
# Samples with neither preset nor architecture are planned from a local copy of their config.json (offline).
CHECKPOINTS = {"llama-3.1-8b-hf.yaml": ROOT / "tests" / "fixtures" / "checkpoints" / "llama-3.1-8b"}


def _load(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1, f"{path.name}: one LLMBackend per sample"
    return docs[0]


def _plan(path: Path, capsys) -> tuple[int, dict]:
    checkpoint = ["--checkpoint", str(CHECKPOINTS[path.name])] if path.name in CHECKPOINTS else []
    rc = main(["plan", "-f", str(path), "--nodes", str(NODES), "-o", "json", *checkpoint])
    return rc, json.loads(capsys.readouterr().out)


def test_all_samples_present():
    assert EXPECTED <= {p.name for p in SAMPLES}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_validates(path):
    doc = _load(path)
    assert doc["apiVersion"] == "llmbackend.dev/v1alpha1" and doc["kind"] == "LLMBackend"
    assert doc["metadata"]["name"]
    backend = LLMBackend.model_validate(doc)
    spec = backend.spec
    # The CRD's CEL rules (x-kubernetes-validations) that pydantic does not enforce:
    assert spec.model.preset is None or spec.model.architecture is None, "at most one of preset/architecture"
    if spec.model.preset is None and spec.model.architecture is None:  # read from the source's config.json
        assert spec.model.source is not None and spec.model.source.uri and path.name in CHECKPOINTS
    if spec.model.source is not None:
        assert (spec.model.source.pvc is None) != (spec.model.source.uri is None), "exactly one of pvc/uri"
    assert spec.engine.max_input_len < spec.engine.max_seq_len
    assert spec.autoscaling.min_replicas <= spec.autoscaling.max_replicas
    if spec.parallelism.pipeline_parallel is not None:
        assert spec.parallelism.tensor_parallel is not None
    if spec.model.architecture is not None:
        a = spec.model.architecture
        assert a.num_key_value_heads <= a.num_attention_heads and a.num_attention_heads % a.num_key_value_heads == 0


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_plans_on_dgx_h100_x4(path, capsys):
    rc, plan = _plan(path, capsys)
    assert rc == 0, plan.get("explanation")
    assert plan["fits"] is True


def test_405b_is_tp8_pp2_across_two_nodes(capsys):
    rc, plan = _plan(ROOT / "manifests" / "samples" / "llama-3.1-405b-multinode.yaml", capsys)
    assert rc == 0
    assert (plan["tensorParallel"], plan["pipelineParallel"], plan["nodesPerReplica"]) == (8, 2, 2)


def test_samples_match_their_descriptions():
    docs = {p.name: LLMBackend.model_validate(_load(p)).spec for p in SAMPLES}
    s8 = docs["llama-3.1-8b-trtllm.yaml"]
    assert (s8.model.preset, s8.engine.backend, s8.engine.quantization) == ("llama-3.1-8b", "tensorrtllm", "bf16")
    assert s8.model.source.pvc.claim_name == "llm-models" and s8.replicas == 1
    s70 = docs["llama-3.1-70b-autoscaled.yaml"].autoscaling
    assert (s70.enabled, s70.min_replicas, s70.max_replicas, s70.target_ratio, s70.source) == (True, 1, 4, 1.0, "triton")
    s405 = docs["llama-3.1-405b-multinode.yaml"]
    assert s405.engine.quantization == "bf16" and s405.parallelism.is_auto
    assert docs["mistral-7b-vllm.yaml"].engine.backend == "vllm"
    assert docs["custom-architecture.yaml"].model.architecture is not None
    hf = docs["llama-3.1-8b-hf.yaml"].model
    assert hf.source.uri == "hf://meta-llama/Llama-3.1-8B-Instruct" and hf.preset is None and hf.architecture is None


def test_plan_cli_entry_point_exit_code():
    """The installed console command, as a user runs it (one sample is enough)."""
    sample = ROOT / "manifests" / "samples" / "llama-3.1-8b-trtllm.yaml"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from llmbackend.cli import main; sys.exit(main())",
         "plan", "-f", str(sample), "--nodes", str(NODES), "-o", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fits"] is True


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_sample_names_no_namespace_so_apply_n_puts_it_anywhere(path):
    # `kubectl apply -n team-a -f` fails on a manifest that says another namespace.
    assert "namespace" not in _load(path)["metadata"], f"{path.name}: no metadata.namespace"


def test_the_chart_notes_sample_and_the_readme_quick_start_create_two_backends():
    """A user who follows the README's Quick start and then the chart's NOTES ends with two backends."""
    notes = (ROOT / "charts" / "llmbackend" / "templates" / "NOTES.txt").read_text()
    (sample,) = re.findall(r"manifests/samples/([\w.-]+\.yaml)", notes)
    readme = (ROOT / "README.md").read_text()
    quick_start = yaml.safe_load(re.search(r"<<'YAML'\n(.*?)\nYAML\n", readme, re.S).group(1))
    assert "namespace" not in quick_start["metadata"]
    sample_name = _load(ROOT / "manifests" / "samples" / sample)["metadata"]["name"]
    assert sample_name != quick_start["metadata"]["name"], (sample, sample_name)
    assert sample_name in notes and quick_start["metadata"]["name"] in notes, "the NOTES say which is which"
    assert "-n <namespace>" in notes
