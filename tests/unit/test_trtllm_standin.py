"""The CPU stand-in engine (dev/standins/tensorrt_llm): the LLM API subset the operator's model uses."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "standins"))

import tensorrt_llm  # noqa: E402
from tensorrt_llm import LLM, SamplingParams  # noqa: E402
from tensorrt_llm.llmapi import KvCacheConfig  # noqa: E402


@pytest.fixture
def llm(monkeypatch):
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.002")
    engine = LLM(model="/models", max_batch_size=2, max_seq_len=128, return_perf_metrics=True,
                 enable_iter_perf_stats=True, kv_cache_config=KvCacheConfig(free_gpu_memory_fraction=0.5))
    yield engine
    engine.shutdown()


def test_names_the_version_it_follows() -> None:
    assert tensorrt_llm.FOLLOWS_TENSORRT_LLM in tensorrt_llm.__doc__


def test_requests_beyond_the_slots_wait_inside_the_engine(llm) -> None:
    async def one(i: int):
        result = llm.generate_async(f"prompt {i} a b", SamplingParams(max_tokens=4), streaming=i % 2 == 0)
        async for item in result:  # noqa: B007 - the last item carries the result
            pass
        return item.outputs[0]

    async def main():
        return await asyncio.gather(*[one(i) for i in range(6)])

    outputs = asyncio.run(main())
    assert all(o.finish_reason == "length" and len(o.token_ids) == 4 for o in outputs)
    waits = sorted((o.request_perf_metrics.timing_metrics.first_scheduled_time
                    - o.request_perf_metrics.timing_metrics.arrival_time) for o in outputs)
    assert waits[-1] > waits[1], "only 2 slots: later requests wait for a free one"
    stats = llm.get_stats()
    assert max(s["numQueuedRequests"] for s in stats) > 0
    assert all(s["numActiveRequests"] <= 2 and s["maxNumActiveRequests"] == 2 for s in stats)


def test_abort_finishes_as_cancelled(llm) -> None:
    async def main():
        result = llm.generate_async("x y z", SamplingParams(max_tokens=100), streaming=True)
        async for item in result:  # noqa: B007 - the last item carries the result
            result.abort()
        return item.outputs[0]

    out = asyncio.run(main())
    assert out.finish_reason == "cancelled" and len(out.token_ids) < 100


def test_rejects_what_the_real_llm_rejects(tmp_path) -> None:
    with pytest.raises(TypeError, match="unexpected"):
        LLM(model="/models", tensor_paralel_size=2)
    with pytest.raises(ValueError, match="config.json"):
        LLM(model=str(tmp_path))
    with pytest.raises(ValueError):
        SamplingParams(max_tokens=0)
