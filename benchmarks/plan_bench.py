"""Planner benchmark: plan() latency and Inventory memory on a 5,000-node synthetic cluster.

    python benchmarks/plan_bench.py [--nodes 5000] [--repeat 50]

Nodes are copies of the e2e/topologies fixtures (DGX H100, HGX H200, A100,
H100 NVL, L40S, GB200 trays) with unique names. Every plan runs the performance-model
estimate for each candidate, under both objectives. Prints figures; no asserts.
Targets: p99 < 10 ms per plan, < 100 MB for the index.
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
from llmbackend.planning.placement import clear_cache
from llmbackend.planning.planner import plan

TOPOLOGIES = Path(__file__).resolve().parents[1] / "e2e" / "topologies"

# Mixtral with its expert counts, so MoE plans (EP, touched-expert reads) are timed too.
MIXTRAL_MOE = PRESETS["mixtral-8x7b"].model_copy(update=dict(
    num_experts=8, num_experts_per_token=2, active_parameter_count=12_900_000_000))
ARCHS = {**PRESETS, "mixtral-8x7b-moe": MIXTRAL_MOE}
CASES = [
    ("llama-3.1-8b", "bf16"),
    ("llama-3.1-70b", "bf16"),
    ("llama-3.1-70b", "fp8"),
    ("llama-3.1-405b", "fp8"),
    ("llama-3.1-405b", "bf16"),
    ("mixtral-8x7b", "int4_awq"),
    ("mixtral-8x7b-moe", "bf16"),
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
    print("per plan: cold = node grouping rebuilt (the first plan after a node change), warm = grouping reused "
          "(further backends on the same snapshot); wall and CPU time (the machine may be shared)")
    worst = {"cold": 0.0, "warm": 0.0}
    for preset, quant in CASES:
        for objective in ("latency", "throughput"):
            engine = EngineSpec(quantization=quant)
            row = []
            result = None
            for mode in ("cold", "warm"):
                wall, cpu = [], []
                for _ in range(args.repeat):
                    if mode == "cold":
                        clear_cache()
                    t0, c0 = time.perf_counter(), time.process_time()
                    result = plan(ARCHS[preset], engine, ParallelismSpec(objective=objective), nodes)
                    wall.append((time.perf_counter() - t0) * 1000)
                    cpu.append((time.process_time() - c0) * 1000)
                wall.sort()
                cpu.sort()
                p99 = wall[min(len(wall) - 1, int(0.99 * len(wall)))]
                cpu99 = cpu[min(len(cpu) - 1, int(0.99 * len(cpu)))]
                worst[mode] = max(worst[mode], p99)
                row.append(f"{mode} mean {statistics.mean(wall):5.2f} p99 {p99:5.2f} (cpu p99 {cpu99:5.2f}) ms")
            shape = (f"TP{result.tensor_parallel} x PP{result.pipeline_parallel}"
                     + (f" x EP{result.expert_parallel}" if result.expert_parallel else "")
                     + f" on {result.gpu_product}" if result.fits else result.reason)
            print(f"{preset:17s} {quant:8s} {objective:10s} {' | '.join(row)} -> {shape}")
    print(f"worst p99: cold {worst['cold']:.2f} ms, warm {worst['warm']:.2f} ms")


if __name__ == "__main__":
    main()
