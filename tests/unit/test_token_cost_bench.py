"""benchmarks/token_cost_bench.py counts what it says: one send per streamed token, the model's threads apart from
the stand-in engine's."""

from __future__ import annotations

import sys

from benchmark_support import load_benchmark


def test_a_streamed_token_costs_one_send_and_the_model_threads_are_measured(monkeypatch) -> None:
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.002")
    bench = load_benchmark("token_cost_bench")
    try:
        result = bench.run(streams=4, tokens=20)
    finally:
        for name in [m for m in sys.modules if m == "triton_python_backend_utils" or m.startswith("tensorrt_llm")]:
            sys.modules.pop(name, None)
    assert result["tokens"] == 80
    assert result["send_per_token"] == 1.0, "stream_interval 1: every token is one response"
    assert result["calls_per_token"] >= 1.0
    assert result["model_cpu_us_per_token"] >= 0 and result["tok_s"] > 0
    assert set(bench.MODEL_THREADS) == {"llmapi-loop", "triton-ipc", "triton-cancel"}
