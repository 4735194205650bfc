"""The README's main command: `python -m devcluster demo` (what `make demo` runs) ends with an Available backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llmbackend.api.engine_metrics import ENGINE_QUEUE_METRIC, REQUEST_GAUGE

DEV = Path(__file__).resolve().parents[2] / "dev"  # the devcluster tool, as the Makefile runs it


def test_demo_reaches_available_and_down_stops_everything(tmp_path):
    directory = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(DEV), os.environ.get("PYTHONPATH")]))}
    run = lambda *args: subprocess.run([sys.executable, "-m", "devcluster", *args], capture_output=True,  # noqa: E731
                                       text=True, timeout=300, env=env)
    try:
        demo = run("demo", "--dir", str(directory), "--timeout", "90")
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "Available after" in demo.stdout
        assert "Planned      True   Fits" in demo.stdout
        # the kubectl get llmb -o wide row: serving, and why (columns READY STATUS REASON MODEL TPXPP AGE BACKEND ...)
        row = next(line.split() for line in demo.stdout.splitlines() if line.startswith("llama-3-1-8b "))
        assert row[1:5] == ["1/1", "Ready", "ReplicasReady", "llama-3.1-8b"] and "tensorrtllm" in row, row
        # ... and a real answer: a real tritonserver on the files the operator wrote into the ConfigMap
        assert "  reply:  'Triton serves this model" in demo.stdout, demo.stdout
        assert f'{ENGINE_QUEUE_METRIC}{{model="llama-3.1-8b"' in demo.stdout
        assert f'{REQUEST_GAUGE}{{' in demo.stdout
    finally:
        down = run("down", "--dir", str(directory))
    assert down.returncode == 0 and "stopped" in down.stdout
    assert run("status", "--dir", str(directory)).returncode == 1
