"""Planner benchmark: plan() latency and Inventory memory on a 5,000-node synthetic cluster.

    python benchmarks/plan_bench.py [--nodes 5000] [--repeat 50]

Nodes are copies of the e2e/topologies fixtures (DGX H100, HGX H200, A100,
H100 NVL, L40S, GB200 trays) with unique names. Prints figures; no asserts.
Targets: < 10 ms per plan, < 100 MB for the index.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import tracemalloc
from pathlib import Path

import yaml

from llmbackend.api.catalog import PRESETS
from llmbackend.api.v1alpha1 import EngineSpec, ParallelismSpec
from llmbackend.planning.inventory import Inventory
from llmbackend.planning.planner import plan

TOPOLOGIES = Path(__file__).resolve().parents[1] / "e2e" / "topologies"

CASES = [
    ("llama-3.1-8b", "bf16"),
    ("llama-3.1-70b", "bf16"),
    ("llama-3.1-70b", "fp8"),
    ("llama-3.1-405b", "fp8"),
    ("llama-3.1-405b", "bf16"),
    ("mixtral-8x7b", "int4_awq"),
]


def templates() -> list[dict]:
    out = []
    for path in sorted(TOPOLOGIES.glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


def synthetic_nodes(n: int):
    base = templates()
    for i in range(n):
        doc = copy.deepcopy(base[i % len(base)])
        name = f"{doc['metadata']['name']}-{i}"
        doc["metadata"]["name"] = name
        doc["metadata"]["labels"]["kubernetes.io/hostname"] = name
        yield doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    inventory = Inventory()
    for doc in synthetic_nodes(args.nodes):
        inventory.upsert(doc)
        del doc
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"inventory: {len(inventory)} nodes, {(after - before) / 1e6:.1f} MB (tracemalloc), "
          f"{(after - before) / len(inventory):.0f} B/node")

    nodes = inventory.nodes()
    for preset, quant in CASES:
        engine = EngineSpec(quantization=quant)
        times = []
        result = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = plan(PRESETS[preset], engine, ParallelismSpec(), nodes)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        shape = (f"TP{result.tensor_parallel} x PP{result.pipeline_parallel} on {result.gpu_product}"
                 if result.fits else result.reason)
        print(f"{preset:16s} {quant:8s} mean {statistics.mean(times):6.2f} ms  p99 {p99:6.2f} ms  -> {shape}")


if __name__ == "__main__":
    main()
