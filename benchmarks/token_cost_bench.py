#!/usr/bin/env python3
"""Per-token cost of the serving models at 1, 64 and 256 concurrent streams: Triton calls per generated token
and the model's own CPU per token, outside tritonserver.

Runs the model file the operator renders over the TensorRT-LLM CPU stand-in and the Python-backend stand-in
(dev/standins/pb_utils_standin.py) with --ipc-us per Triton call (default 0: the calls are counted, their cost in
tritonserver is not modelled). The stand-in engine gives every active request one token per --iteration-ms. CPU is
read per thread from /proc (utime + stime), so the model's threads (its engine loop `llmapi-loop`, `triton-ipc`,
`triton-cancel`) are counted apart from the stand-in engine's thread; all Python threads share one GIL, so the
model's CPU per token bounds the token rate one model process sustains: 1 / (CPU per token), before the cost of
the Triton calls themselves (calls per token x the cost of one round trip to the server process).

The vLLM model (--model vllm) runs over the vLLM stand-in, whose simulated engine steps on the model's own event
loop (real vLLM runs the engine core in another process): its "model CPU" includes the stand-in's step, so it is an
upper bound. --baseline REV also runs the model file as it was at git revision REV, interleaved with the current one
(repetition by repetition, same process), for before/after figures on a shared machine.

    .venv/bin/python benchmarks/token_cost_bench.py [--model llmapi|vllm] [--streams 1,64,256] [--tokens 200]
        [--iteration-ms 20] [--ipc-us 0] [--repeat 1] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev" / "standins"))
MODEL_THREADS = ("llmapi-loop", "triton-ipc", "triton-cancel")
# per model: (engine backend, source file of the model, the model's threads, the stand-in engine's thread)
MODELS = {
    "llmapi": ("tensorrtllm", "operator/llmbackend/render/models/trtllm_llmapi.py", MODEL_THREADS,
               "trtllm-standin-engine"),
    "vllm": ("vllm", "operator/llmbackend/render/models/vllm_engine.py",
             ("vllm-engine-loop", "triton-ipc", "triton-cancel"), None),
}
TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) of each live Python thread of this process, by thread name."""
    out: Counter[str] = Counter()
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        out[thread.name] += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    return dict(out)


def load_model(slots: int, model: str = "llmapi", source: str | None = None):
    import pb_utils_standin
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
    from llmbackend.render.names import BackendRef
    from llmbackend.render.servingpod import config_map_files
    from llmbackend.render.workloads import RolloutStrategy, desired_objects

    pb_utils = pb_utils_standin.install(sys.modules)
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": {"backend": MODELS[model][0], "maxBatchSize": slots, "maxSeqLen": 8192}})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    ref = BackendRef("bench", "default", "uid")
    config_map = next(o for o in desired_objects(ref, spec, plan, 1, RolloutStrategy("Recreate"))
                      if o["kind"] == "ConfigMap")
    repo = Path(tempfile.mkdtemp(prefix="token-cost-"))
    for rel, content in config_map_files(config_map).items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)
    name = next(p.parent.parent.name for p in repo.glob("*/1/model.py"))
    if source is not None:  # another revision of the model file
        (repo / name / "1" / "model.py").write_text(source)
    config = text_format.Parse((repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    spec_ = importlib.util.spec_from_file_location(f"bench_model_{model}_{slots}", repo / name / "1" / "model.py")
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
                      "model_repository": str(repo / name), "model_version": "1", "model_name": name})
    return model, pb_utils


def run(streams: int, tokens: int, model_kind: str = "llmapi", source: str | None = None) -> dict[str, float]:
    model, pb_utils = load_model(streams, model_kind, source)
    try:
        requests = []
        for i in range(streams):
            tensors = {"text_input": pb_utils.Tensor("text_input", np.array([f"stream {i} says hello".encode()],
                                                                            dtype=np.object_)),
                       "max_tokens": pb_utils.Tensor("max_tokens", np.array([tokens], dtype=np.int32)),
                       "stream": pb_utils.Tensor("stream", np.array([True], dtype=bool))}
            requests.append(pb_utils.InferenceRequest(tensors))
        pb_utils.CALLS.clear()
        before = thread_cpu_s()
        start = time.monotonic()
        model.execute(requests)
        for r in requests:
            if not r.sender.final.wait(600):
                raise RuntimeError("a request was never answered")
        wall = time.monotonic() - start
        after = thread_cpu_s()
        calls = Counter(call for call, _ in pb_utils.CALLS)
    finally:
        model.finalize()
    generated = streams * tokens
    _, _, threads, engine_thread = MODELS[model_kind]
    model_cpu = sum(after.get(t, 0.0) - before.get(t, 0.0) for t in threads)
    engine_cpu = after.get(engine_thread, 0.0) - before.get(engine_thread, 0.0) if engine_thread else float("nan")
    return {
        "streams": streams, "tokens": generated, "wall_s": wall, "tok_s": generated / wall,
        "calls_per_token": sum(calls.values()) / generated,
        **{f"{k}_per_token": v / generated for k, v in calls.items()},
        "model_cpu_us_per_token": model_cpu / generated * 1e6,
        "engine_cpu_us_per_token": engine_cpu / generated * 1e6,
    }


def _spread(values: list[float], fmt: str) -> str:
    """Median, and the range when there are several repetitions."""
    mid = format(statistics.median(values), fmt)
    return mid if len(values) == 1 else f"{mid} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="llmapi")
    parser.add_argument("--streams", default="1,64,256")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--iteration-ms", type=float, default=20.0)
    parser.add_argument("--ipc-us", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline", metavar="REV", help="also run the model file at this git revision, interleaved")
    args = parser.parse_args()
    os.environ["TRTLLM_STANDIN_ITERATION_S"] = os.environ["VLLM_STANDIN_STEP_S"] = str(args.iteration_ms / 1000)
    import pb_utils_standin

    pb_utils_standin.IPC_COST_S = args.ipc_us / 1e6
    variants: dict[str, str | None] = {}
    if args.baseline:
        variants[args.baseline] = subprocess.run(
            ["git", "show", f"{args.baseline}:{MODELS[args.model][1]}"], cwd=ROOT, check=True, capture_output=True,
            text=True).stdout
    variants["current"] = None
    print(f"{args.model} model; {args.tokens} tokens per stream, {args.iteration_ms:g} ms per engine iteration, "
          f"{args.ipc_us:g} us per Triton call; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; "
          f"median (range) of {args.repeat} interleaved repetition(s)")
    print("| streams | model file | tokens/s (engine ideal) | Triton calls per token | sends per token "
          "| is_cancelled per token | model CPU per token | tokens/s the model's CPU allows |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for streams in [int(s) for s in args.streams.split(",")]:
        results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for variant, source in variants.items():
                results[variant].append(run(streams, args.tokens, args.model, source))
        ideal = streams * 1000 / args.iteration_ms
        for variant, rs in results.items():
            cpu = [r["model_cpu_us_per_token"] for r in rs]
            print(f"| {streams} | {variant} | {_spread([r['tok_s'] for r in rs], ',.0f')} ({ideal:,.0f}) "
                  f"| {_spread([r['calls_per_token'] for r in rs], '.2f')} "
                  f"| {_spread([r.get('send_per_token', 0) for r in rs], '.2f')} "
                  f"| {_spread([r.get('is_cancelled_per_token', 0) for r in rs], '.3f')} "
                  f"| {_spread(cpu, ',.0f')} us | {_spread([1e6 / c if c else float('inf') for c in cpu], ',.0f')} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
