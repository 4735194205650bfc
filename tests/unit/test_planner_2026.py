"""Plans for 2026's models (issue 45): sliding-window KV sized by window, NVFP4/MXFP4, attention data parallelism
with wide expert parallelism."""

from __future__ import annotations

import json
from pathlib import Path

from llmbackend.api.checkpoint import architecture_from_config
from llmbackend.api.v1alpha1 import EngineSpec, ParallelismSpec
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.memory import GIB
from llmbackend.planning.planner import plan

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "tests" / "fixtures" / "checkpoints"


def checkpoint(name: str) -> dict:
    return json.loads((CHECKPOINTS / name / "config.json").read_text())


def gfd_node(name: str, product: str, gpus: int) -> dict:
    """A GFD-labelled node with only the product label (memory and capability from the product table)."""
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def nodes(product: str, gpus: int, count: int = 1):
    return [parse_node(gfd_node(f"n{i}", product, gpus)) for i in range(count)]


# ---- sliding-window layers sized as windows ----

def test_gemma3_27b_at_128k_plans_tp1_on_one_h100() -> None:
    """52 of Gemma 3's 62 layers attend to a 1,024-token window: one 128k sequence caches ~10 GiB, not 62 GiB, so
    the bf16 model (~50 GiB) and one full-length sequence fit one H100."""
    gemma = architecture_from_config(checkpoint("gemma-3-27b"))
    engine = EngineSpec(max_seq_len=131072, max_input_len=130000, max_batch_size=1)
    p = plan(gemma, engine, ParallelismSpec(), nodes("NVIDIA-H100-80GB-HBM3", 1))
    assert p.fits, p.explanation
    assert (p.tensor_parallel, p.pipeline_parallel, p.gpus_per_replica) == (1, 1, 1)
    assert p.breakdown is not None and 10 * GIB <= p.breakdown.kv_cache < 11 * GIB
    # Charged as full attention on every layer, the same sequence would not fit one GPU.
    full = gemma.model_copy(update={"sliding_window": None, "sliding_window_layers": None})
    assert not plan(full, engine, ParallelismSpec(), nodes("NVIDIA-H100-80GB-HBM3", 1)).fits
