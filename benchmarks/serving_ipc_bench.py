#!/usr/bin/env python3
"""Serving-model IPC benchmark: where the LLM API model's calls into Triton run, and what they cost the engine.

Runs a serving model file (default: the one the operator renders) outside tritonserver, over the TensorRT-LLM CPU
stand-in and the Python-backend stand-in (dev/standins/pb_utils_standin.py), whose `send`, `is_cancelled` and metric
calls are blocking round trips of --ipc-ms each under one lock (a stated model of python_backend's IPC, not a
measurement of it). Prints, for --requests streaming requests over --slots engine slots: the Triton calls made, how
many of them ran on the engine's event loop, and the client-side time until every request was answered.

    .venv/bin/python benchmarks/serving_ipc_bench.py [--model-file PATH] [--requests 16] [--slots 4] [--tokens 40]

Compare against an older model with e.g.
`git show <commit>:operator/llmbackend/render/models/trtllm_llmapi.py > /tmp/old.py; ... --model-file /tmp/old.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev" / "standins"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-file", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--iteration-ms", type=float, default=10.0)
    parser.add_argument("--ipc-ms", type=float, default=2.0)
    args = parser.parse_args()
    os.environ["TRTLLM_STANDIN_ITERATION_S"] = str(args.iteration_ms / 1000)

    import pb_utils_standin
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
    from llmbackend.render.names import BackendRef, model_name
    from llmbackend.render.servingpod import config_map_files
    from llmbackend.render.workloads import RolloutStrategy, desired_objects

    pb_utils = pb_utils_standin.install(sys.modules)
    pb_utils.IPC_COST_S = args.ipc_ms / 1000
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": {"maxBatchSize": args.slots, "maxSeqLen": 8192}})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    ref = BackendRef("bench", "default", "uid")
    config_map = next(o for o in desired_objects(ref, spec, plan, 1, RolloutStrategy("Recreate")) if o["kind"] == "ConfigMap")
    repo = Path(tempfile.mkdtemp(prefix="ipc-bench-"))
    for rel, content in config_map_files(config_map).items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)
    name = model_name(ref, spec)
    model_file = args.model_file or repo / name / "1" / "model.py"
    config = text_format.Parse((repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    module_spec = importlib.util.spec_from_file_location("bench_model", model_file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
                      "model_repository": str(repo / name), "model_version": "1", "model_name": name})
    pb_utils.CALLS.clear()
    requests = []
    for i in range(args.requests):
        tensors = {"text_input": pb_utils.Tensor("text_input", np.array([f"request {i} says hello".encode()],
                                                                        dtype=np.object_)),
                   "max_tokens": pb_utils.Tensor("max_tokens", np.array([args.tokens], dtype=np.int32)),
                   "stream": pb_utils.Tensor("stream", np.array([True], dtype=bool))}
        requests.append(pb_utils.InferenceRequest(tensors))
    start = time.monotonic()
    model.execute(requests)
    for r in requests:
        if not r.sender.final.wait(300):
            print("a request was never answered")
            return 1
    took = time.monotonic() - start
    model.finalize()
    first = sorted(r.sender.sent_at[0] - start for r in requests)
    gaps = [b - a for r in requests for a, b in zip(r.sender.sent_at, r.sender.sent_at[1:])]
    calls = list(pb_utils.CALLS)
    on_loop = Counter(call for call, thread in calls if thread == "llmapi-loop")
    ideal = -(-args.requests // args.slots) * args.tokens * args.iteration_ms / 1000
    print(f"model: {model_file}")
    print(f"{args.requests} streaming requests x {args.tokens} tokens over {args.slots} slots, "
          f"{args.iteration_ms:g} ms per engine iteration, {args.ipc_ms:g} ms per Triton call")
    print(f"Triton calls: {len(calls)} ({dict(Counter(c for c, _ in calls))})")
    print(f"on the engine's event loop: {sum(on_loop.values())} ({dict(on_loop)})")
    print(f"all answered after {took:.2f} s (engine alone: {ideal:.2f} s)")
    print(f"first response: median {first[len(first) // 2]:.3f} s, max {first[-1]:.3f} s after submission; "
          f"responses per request {len(gaps) / len(requests) + 1:.1f}, largest gap between two {max(gaps):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
