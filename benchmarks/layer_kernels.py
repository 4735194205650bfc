#!/usr/bin/env python3
"""What a decoder layer costs on a real GPU beyond its matrix products, against the tokens in a step.

The planner's performance model (operator/llmbackend/planning/perf_model.py) charges each layer of a step a fixed
cost on top of the roofline of its matrix products, attention and all-reduces; fitted on TensorRT-LLM's
maximum-throughput tables it is 153 us a layer. benchmarks/gemm_roofline.py measures the products; this script
measures the rest of a Llama decoder layer's kernels with stock PyTorch, each replayed from a CUDA graph (no
launches in it, as in steps an engine replays from graphs): two RMSNorms, rotary embedding of q and k, decode
attention (one query token per sequence against CONTEXT tokens of KV, torch's scaled_dot_product_attention with
grouped KV heads), SiLU x up, two residual adds, and the fp8 quantization of the four products' inputs. Stock
kernels fuse less than an engine's, so these are upper bounds on what a fused engine spends on the same work.

It also times one whole bf16 decoder layer over a prompt of m tokens (causal attention) run eagerly, as an engine
runs a step it does not replay from a graph (TensorRT-LLM's PyTorch backend graphs batches of decode requests
only), against the same layer replayed from a graph: the difference is what launching it from Python costs.

Needs a CUDA GPU and PyTorch (the device machine; not part of `make test`); --dry runs tiny shapes on the CPU.

    python benchmarks/layer_kernels.py --out layer.json [--dry]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from gpu_timing import graph_seconds

# hidden, query heads, KV heads, MLP width (per GPU), head dim 128
SHAPES = {
    "llama-3.1-8b TP1": (4096, 32, 8, 14336),
    "llama-3.1-70b TP4": (8192, 16, 2, 7168),
}
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
CONTEXT = 1024       # KV tokens each decoding sequence attends to
ATTN_MAX_SEQS = 1024  # decode attention beyond this many sequences is not run (KV memory); the others are
HEAD = 128
STEP_MAX_TOKENS = 8192  # the whole-layer step (eager and graphed) up to this many prompt tokens
REPEAT = 8           # the kernel sequence is captured this many times in one graph
REPLAYS = 10


def timed(fn, device: str) -> float:
    """Seconds of one call of ``fn`` (mean over REPEAT x REPLAYS, from a CUDA graph on a GPU)."""
    return graph_seconds(fn, device, repeat=REPEAT, replays=REPLAYS)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def measure(hidden: int, heads: int, kv_heads: int, mlp: int, m: int, device: str, context: int) -> dict:
    bf = torch.bfloat16
    x = torch.randn(m, hidden, device=device, dtype=bf)
    res = torch.randn(m, hidden, device=device, dtype=bf)
    w = torch.ones(hidden, device=device, dtype=bf)
    q = torch.randn(m, heads, HEAD, device=device, dtype=bf)
    k = torch.randn(m, kv_heads, HEAD, device=device, dtype=bf)
    cos = torch.randn(m, 1, HEAD, device=device, dtype=bf)
    sin = torch.randn(m, 1, HEAD, device=device, dtype=bf)
    gate_up = torch.randn(m, 2 * mlp, device=device, dtype=bf)
    a = torch.randn(m, mlp, device=device, dtype=bf)
    out = {
        "rmsnorm_x2": 2 * timed(lambda: F.rms_norm(x, (hidden,), w, 1e-5), device),
        "rope_qk": timed(lambda: (rotate(q, cos, sin), rotate(k, cos, sin)), device),
        "silu_mul": timed(lambda: F.silu(gate_up[:, :mlp]) * gate_up[:, mlp:], device),
        "residual_add_x2": 2 * timed(lambda: x + res, device),
        # inputs of qkv, o, gate_up (hidden wide) and down (mlp wide) in fp8
        "fp8_quant_x4": 3 * timed(lambda: x.to(torch.float8_e4m3fn), device)
        + timed(lambda: a.to(torch.float8_e4m3fn), device),
    }
    if m <= ATTN_MAX_SEQS:
        qa = torch.randn(m, heads, 1, HEAD, device=device, dtype=bf)
        kc = torch.randn(m, kv_heads, context, HEAD, device=device, dtype=bf)
        vc = torch.randn(m, kv_heads, context, HEAD, device=device, dtype=bf)
        out["decode_attention"] = timed(lambda: F.scaled_dot_product_attention(qa, kc, vc, enable_gqa=True), device)
        out["decode_attention_kv_bytes"] = 2 * m * kv_heads * context * HEAD * 2
    return out


def layer_step(hidden: int, heads: int, kv_heads: int, mlp: int, m: int, device: str) -> dict:
    """Seconds of one bf16 decoder layer over an m-token prompt: run eagerly (wall clock, synchronized) and
    replayed from a graph."""
    bf = torch.bfloat16
    wqkv = torch.randn((heads + 2 * kv_heads) * HEAD, hidden, device=device, dtype=bf) * 0.02
    wo = torch.randn(hidden, heads * HEAD, device=device, dtype=bf) * 0.02
    wgu = torch.randn(2 * mlp, hidden, device=device, dtype=bf) * 0.02
    wd = torch.randn(hidden, mlp, device=device, dtype=bf) * 0.02
    norm = torch.ones(hidden, device=device, dtype=bf)
    cos = torch.randn(1, m, 1, HEAD, device=device, dtype=bf)
    sin = torch.randn(1, m, 1, HEAD, device=device, dtype=bf)
    x0 = torch.randn(m, hidden, device=device, dtype=bf)

    def layer() -> torch.Tensor:
        h = F.rms_norm(x0, (hidden,), norm, 1e-5)
        qkv = h @ wqkv.t()
        q, k, v = qkv.split([heads * HEAD, kv_heads * HEAD, kv_heads * HEAD], dim=-1)
        q = rotate(q.view(1, m, heads, HEAD), cos, sin).transpose(1, 2)
        k = rotate(k.view(1, m, kv_heads, HEAD), cos, sin).transpose(1, 2)
        v = v.view(1, m, kv_heads, HEAD).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x0 + a.transpose(1, 2).reshape(m, heads * HEAD) @ wo.t()
        h = F.rms_norm(x, (hidden,), norm, 1e-5)
        gu = h @ wgu.t()
        return x + (F.silu(gu[:, :mlp]) * gu[:, mlp:]) @ wd.t()

    graph_s = timed(layer, device)
    for _ in range(3):
        layer()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(REPEAT * REPLAYS):
        layer()
    if device == "cuda":
        torch.cuda.synchronize()
    return {"layer_graph": graph_s, "layer_eager": (time.perf_counter() - start) / (REPEAT * REPLAYS)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes (on the CPU when there is no GPU)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes, tokens, context = SHAPES, TOKENS, CONTEXT
    if args.dry or device == "cpu":
        shapes, tokens, context = {"tiny": (256, 4, 2, 512)}, (1, 16), 64
    started = time.time()
    points = []
    for model, (hidden, heads, kv_heads, mlp) in shapes.items():
        for m in tokens:
            try:
                costs = measure(hidden, heads, kv_heads, mlp, m, device, context)
            except RuntimeError as e:  # recorded, not fatal
                print(f"{model} m={m}: {e}", flush=True)
                continue
            if m <= STEP_MAX_TOKENS:
                costs.update(layer_step(hidden, heads, kv_heads, mlp, m, device))
            points.append({"model": model, "tokens": m, "context": context, **costs})
            print(f"{model:18s} m={m:5d} " + " ".join(f"{k} {v * 1e6:.1f}us" for k, v in costs.items()
                                                       if not k.endswith("bytes")), flush=True)
    info = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
            "repeat": REPEAT, "replays": REPLAYS, "seconds_total": round(time.time() - started, 1),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}
    with open(args.out, "w") as f:
        json.dump({"info": info, "points": points}, f, indent=1)
    print(f"{len(points)} points in {info['seconds_total']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
