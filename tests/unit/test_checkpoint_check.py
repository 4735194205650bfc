"""The fail-fast checkpoint check (shipped in the ConfigMap, run as an init container), run as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmbackend.render import triton

LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}
MIXTRAL = {"model_type": "mixtral", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_local_experts": 8}


def checkpoint(root: Path, config: dict | None = LLAMA_8B, weights: str = "single", tokenizer: bool = True) -> Path:
    root.mkdir(parents=True)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    if weights == "single":
        (root / "model.safetensors").write_bytes(b"\0")
    elif weights in ("index", "index-missing"):
        shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        (root / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": 2}, "weight_map": {"a": shards[0], "b": shards[1]}}))
        for shard in shards[: 1 if weights == "index-missing" else 2]:
            (root / shard).write_bytes(b"\0")
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    return root


def run(tmp_path: Path, model_dir: Path, *args: str) -> tuple[int, str, str]:
    script = tmp_path / "check_checkpoint.py"
    script.write_text(triton.checkpoint_check_source())  # the exact text shipped in the ConfigMap
    log = tmp_path / "termination-log"
    proc = subprocess.run([sys.executable, "-I", str(script), "--model-dir", str(model_dir), *args,
                           "--source", "PersistentVolumeClaim models, path /llama", "--termination-log", str(log)],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("weights", ["single", "index"])
def test_good_checkpoint_passes(tmp_path: Path, weights: str) -> None:
    code, out, log = run(tmp_path, checkpoint(tmp_path / "m", weights=weights), "--tp", "4", "--pp", "2")
    assert code == 0 and "checkpoint OK" in out and "32 layers" in out
    assert log == ""


def test_moe_with_expert_parallel_passes(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, checkpoint(tmp_path / "m", MIXTRAL), "--tp", "4", "--pp", "1", "--ep", "4")
    assert code == 0, out


@pytest.mark.parametrize("make, args, expected", [
    (lambda p: checkpoint(p, config=None), ("--tp", "1", "--pp", "1"), "no config.json"),
    (lambda p: checkpoint(p, weights="none"), ("--tp", "1", "--pp", "1"), "no weights"),
    (lambda p: checkpoint(p, weights="index-missing"), ("--tp", "1", "--pp", "1"), "missing shard"),
    (lambda p: checkpoint(p, tokenizer=False), ("--tp", "1", "--pp", "1"), "no tokenizer files"),
    (lambda p: checkpoint(p), ("--tp", "3", "--pp", "1"), "does not divide the 32 attention heads"),
    (lambda p: checkpoint(p, {**LLAMA_8B, "num_attention_heads": 48, "num_key_value_heads": 8}),
     ("--tp", "12", "--pp", "1"), "KV heads"),
    (lambda p: checkpoint(p), ("--tp", "1", "--pp", "64"), "exceeds the 32 layers"),
    (lambda p: checkpoint(p, MIXTRAL), ("--tp", "4", "--pp", "1", "--ep", "3"), "must divide tensor parallelism"),
    (lambda p: checkpoint(p), ("--tp", "4", "--pp", "1", "--ep", "2"), "declares no experts"),
])
def test_bad_checkpoint_fails_with_a_message_naming_the_path_and_fix(tmp_path: Path, make, args, expected) -> None:
    model_dir = make(tmp_path / "m")
    code, _, log = run(tmp_path, model_dir, *args)
    assert code == 1
    assert expected in log
    assert str(model_dir) in log and "PersistentVolumeClaim models" in log


def test_missing_directory(tmp_path: Path) -> None:
    code, _, log = run(tmp_path, tmp_path / "absent", "--tp", "1", "--pp", "1")
    assert code == 1 and "is not a directory" in log


def test_failed_check_becomes_a_condition_reason_and_message() -> None:
    from llmbackend.api.conditions import CHECKPOINT_INVALID
    from llmbackend.controller.pods import checkpoint_check_failure

    message = "checkpoint check failed for /models (PersistentVolumeClaim models, path /llama):\n- no config.json"
    pod = {"metadata": {"name": "llama-0"}, "status": {"initContainerStatuses": [
        {"name": "check-checkpoint", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "message": message}}},
        {"name": "model-repository", "state": {"waiting": {"reason": "PodInitializing"}}},
    ]}}
    reason, text = checkpoint_check_failure(pod)
    assert reason == CHECKPOINT_INVALID and "no config.json" in text and "llama-0" in text
    passed = {"metadata": {"name": "p"}, "status": {"initContainerStatuses": [
        {"name": "check-checkpoint", "state": {"terminated": {"exitCode": 0}}}]}}
    assert checkpoint_check_failure(passed) is None
