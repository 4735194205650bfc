#!/usr/bin/env python3
"""The linear layers' roofline on a real GPU: how long Llama-shaped matrix products take against the tokens in a step.

The planner's performance model (operator/llmbackend/planning/perf_model.py) times a step's linear layers as
max(weights read / achievable HBM bandwidth, FLOPs / achievable compute). Its fitting data (TensorRT-LLM's
maximum-throughput tables) cannot say how sharp that corner is: with memory and compute time adding the fit is about
as good (docs/performance-model.md, variant 13). This script measures the corner on the hardware itself: each
linear layer of a decoder layer (qkv, o, gate_up, down) of Llama 3.1 8B (TP1) and 70B (TP1 and TP4 shards), in bf16
(torch.matmul) and fp8 e4m3 (torch._scaled_mm, per-tensor scales, bf16 out), at 1 to 8192 tokens a step.

Each point is one CUDA graph of LAYERS products with distinct weights (every layer's matrix is larger than the L2
cache, so weights stream from HBM as in a real step), replayed after a warm-up and timed with CUDA events: launch
costs are not in it, as they are not in steps replayed from graphs. fp8 products need a multiple of 16 rows
(torch's _scaled_mm); fewer tokens are padded to 16 and recorded with both counts.

Needs a CUDA GPU and PyTorch (run it on the device machine; it is not part of `make test`). It writes one JSON file
of raw timings; benchmarks/perf_calibrate.py --gemm reads it and fits the corner. Without a GPU it runs tiny shapes
on the CPU, to check the script itself (--dry).

    python benchmarks/gemm_roofline.py --out gemm.json [--dry]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from gpu_timing import graph_seconds

# (in K, out N) of each linear layer of one decoder layer, per GPU. qkv: query heads x 128 + 2 x KV heads x 128;
# gate_up: the two MLP projections fused, as the engines run them.
SHAPES = {
    "llama-3.1-8b TP1": {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)},
    "llama-3.1-70b TP1": {"qkv": (8192, 10240), "o": (8192, 8192), "gate_up": (8192, 57344), "down": (28672, 8192)},
    "llama-3.1-70b TP4": {"qkv": (8192, 2560), "o": (2048, 8192), "gate_up": (8192, 14336), "down": (7168, 8192)},
}
TOKENS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
LAYERS = 4      # distinct weight copies per graph
WARMUP = 3
REPLAYS = 10
FP8_ROWS = 16   # torch._scaled_mm: mat1's rows a multiple of 16


def product(dtype: str, x: torch.Tensor, w: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    if dtype == "bf16":
        return x @ w.t()
    return torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def weights(dtype: str, k: int, n: int, device: str, layers: int) -> list[torch.Tensor]:
    store = torch.float8_e4m3fn if dtype == "fp8" else torch.bfloat16
    return [(torch.randn(n, k, device=device, dtype=torch.bfloat16) * 0.02).to(store) for _ in range(layers)]


def time_point(dtype: str, ws: list[torch.Tensor], m: int, device: str) -> float:
    """Seconds of one product at m rows (mean over the replays, per layer)."""
    layers, k = len(ws), ws[0].shape[1]
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16).to(ws[0].dtype)
    one = torch.ones((), device=device, dtype=torch.float32)
    return graph_seconds(lambda: [product(dtype, x, w, one) for w in ws], device, warmup=WARMUP,
                         replays=REPLAYS) / layers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes (on the CPU when there is no GPU)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes, tokens, dtypes, layers = SHAPES, TOKENS, ("bf16", "fp8"), LAYERS
    if args.dry or device == "cpu":
        shapes = {"tiny": {"qkv": (256, 384), "down": (512, 256)}}
        tokens, layers = (1, 16, 64), 2
        dtypes = ("bf16", "fp8")
    points = []
    started = time.time()
    for model, layer in shapes.items():
        for dtype in dtypes:
            for name, (k, n) in layer.items():
                ws = weights(dtype, k, n, device, layers)
                for m in tokens:
                    rows = -(-m // FP8_ROWS) * FP8_ROWS if dtype == "fp8" else m
                    try:
                        seconds = time_point(dtype, ws, rows, device)
                    except RuntimeError as e:  # recorded, not fatal: the other points still count
                        print(f"{model} {dtype} {name} m={m}: {e}", flush=True)
                        continue
                    points.append({"model": model, "matrix": name, "dtype": dtype, "k": k, "n": n, "tokens": m,
                                   "rows_run": rows, "seconds": seconds})
                    print(f"{model:18s} {dtype} {name:8s} m={m:5d} ({rows:5d} run) {seconds * 1e6:10.1f} us",
                          flush=True)
                del ws
        write(args.out, device, layers, started, points)
    print(f"{len(points)} points in {time.time() - started:.1f} s -> {args.out}")
    return 0


def write(path: str, device: str, layers: int, started: float, points: list[dict]) -> None:
    """The timings so far (written after each model, so that a run cut short keeps what it measured)."""
    info = {"device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "cuda": torch.version.cuda, "layers": layers, "replays": REPLAYS,
            "warmup": WARMUP, "seconds_total": round(time.time() - started, 1),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(sm_count=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1))
    with open(path, "w") as f:
        json.dump({"info": info, "points": points}, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
