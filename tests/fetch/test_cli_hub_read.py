"""`llmbackend plan` of an hf:// source with neither preset nor architecture reads config.json from the Hub when it
is reachable (here the Hub-shaped server of tests/fetch), as the operator does before any download."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from llmbackend.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_plan_reads_config_json_from_the_hub(hub, tmp_path, capsys):
    manifest = tmp_path / "hf-sample.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "metadata": {"name": "chat"},
        "spec": {"model": {"source": {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}}}}))
    assert main(["plan", "-f", str(manifest), "--nodes", str(ROOT / "e2e/topologies/dgx-h100.yaml")]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] and plan["gpusPerReplica"] == 1  # the Llama-3.1-8B config the server holds
    assert main(["render", "-f", str(manifest), "--nodes", str(ROOT / "e2e/topologies/dgx-h100.yaml")]) == 0
    backend = next(yaml.safe_load_all(capsys.readouterr().out))
    assert backend["spec"]["model"]["architecture"]["numLayers"] == 32
