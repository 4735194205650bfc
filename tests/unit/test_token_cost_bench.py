"""benchmarks/token_cost_bench.py counts what it says: sends per streamed token (fewer than one once the IPC thread
is behind: the model coalesces a stream's waiting tokens), the model's threads apart from the stand-in engine's."""

from __future__ import annotations

import sys

from benchmark_support import load_benchmark


def test_waiting_tokens_are_coalesced_and_the_model_threads_are_measured(monkeypatch) -> None:
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.002")
    bench = load_benchmark("token_cost_bench")
    try:
        result = bench.run(streams=4, tokens=20)
    finally:
        for name in [m for m in sys.modules if m == "triton_python_backend_utils" or m.startswith("tensorrt_llm")]:
            sys.modules.pop(name, None)
    assert result["tokens"] == 80
    # 4 tokens per 2 ms engine step, one 2 ms round trip per send: the IPC thread is behind, tokens are coalesced
    assert 0 < result["send_per_token"] < 0.75, "a stream's waiting tokens go out as one response"
    assert result["calls_per_token"] >= result["send_per_token"]
    assert result["model_cpu_us_per_token"] >= 0 and result["tok_s"] > 0
    assert set(bench.MODEL_THREADS) == {"llmapi-loop", "triton-ipc", "triton-cancel"}
