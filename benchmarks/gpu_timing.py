"""Timing of GPU work as an engine replays it: captured once in a CUDA graph, replayed, timed with CUDA events
(benchmarks/gemm_roofline.py and benchmarks/layer_kernels.py). On the CPU (their --dry runs) a plain loop."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def graph_seconds(fn: Callable[[], object], device: str, repeat: int = 1, warmup: int = 1,
                  replays: int = 10) -> float:
    """Seconds of one call of ``fn``: ``repeat`` calls captured in one graph, ``warmup`` replays, then the mean
    over ``replays`` timed replays (launch costs are not in it, as they are not in steps replayed from graphs)."""
    if device == "cpu":
        fn()
        start = time.perf_counter()
        for _ in range(repeat * replays):
            fn()
        return (time.perf_counter() - start) / (repeat * replays)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # the kernels' selection and workspaces, outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            fn()
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 1e3 / replays / repeat
