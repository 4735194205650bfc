"""Fixtures for the model download tests: a Hub-shaped HTTP server and an S3-compatible server (moto)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from hubserver import HubServer, Repo  # noqa: E402

from devcluster.ports import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = (ROOT / "tests" / "fixtures" / "checkpoints" / "llama-3.1-8b" / "config.json").read_bytes()
MOTO_VENV = Path.home() / ".cache" / "llmbackend" / "moto-venv" / "bin" / "moto_server"


def safetensors(name: str, elements: int, seed: int) -> bytes:
    """A valid safetensors file holding one BF16 tensor of deterministic bytes."""
    header = json.dumps({name: {"dtype": "BF16", "shape": [elements], "data_offsets": [0, 2 * elements]}}).encode()
    header += b" " * (-len(header) % 8)
    data = bytes((i * 131 + seed) % 251 for i in range(2 * elements))
    return struct.pack("<Q", len(header)) + header + data


def checkpoint_files() -> dict[str, bytes]:
    shard1 = safetensors("model.layers.0.mlp.up_proj.weight", 600_000, 1)
    shard2 = safetensors("lm_head.weight", 300_000, 2)
    index = {"metadata": {"total_size": 2 * 900_000},
             "weight_map": {"model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    return {
        "config.json": CONFIG,
        "generation_config.json": b'{"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}\n',
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": shard1,
        "model-00002-of-00002.safetensors": shard2,
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}\n' * 50,
        "original/consolidated.00.pth": b"\0" * 4096,  # duplicate weights in another format: skipped
    }


@pytest.fixture
def hub():
    with HubServer() as server:
        files = checkpoint_files()
        server.repos["meta-llama/Llama-3.1-8B-Instruct"] = Repo(files=files, gated=True)
        server.repos["acme/tiny-llama"] = Repo(files=files, revisions=("main", "v1"),
                                               sha="fedcba9876543210fedcba9876543210fedcba98")
        server.repos["acme/no-config"] = Repo(files={k: v for k, v in files.items() if k != "config.json"})
        yield server


def run_fetch(*args: str, env: dict[str, str] | None = None, wait: bool = True):
    """The download program as its own process, like the Job runs it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_"))}
    full_env["PYTHONPATH"] = str(ROOT / "operator")
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "llmbackend.model_fetch", *args]
    if not wait:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3-compatible server on 127.0.0.1 (its own venv: botocore pins python-dateutil below 3,
    which the kubernetes client cannot use)."""
    binary = os.environ.get("LLMB_MOTO_SERVER") or (str(MOTO_VENV) if MOTO_VENV.exists() else shutil.which("moto_server"))
    if not binary:
        pytest.skip(f"moto server not installed: python3 -m venv {MOTO_VENV.parent.parent} && "
                    f"{MOTO_VENV.parent}/pip install 'moto[server]'")
    port = free_port()
    proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # until it answers (bounded: 30 s)
            try:
                urllib.request.urlopen(endpoint + "/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("moto_server exited at start")
                time.sleep(0.1)
        else:
            pytest.fail("moto_server did not answer within 30 s")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)
