"""The CPU stand-in engine (dev/standins/tensorrt_llm): the LLM API subset the operator's model uses."""

from __future__ import annotations

import asyncio
import sys
import time
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


def test_follows_the_pinned_version() -> None:
    from llmbackend.api.engine_versions import TENSORRT_LLM_VERSION, VLLM_VERSION

    assert tensorrt_llm.FOLLOWS_TENSORRT_LLM == TENSORRT_LLM_VERSION
    assert TENSORRT_LLM_VERSION in tensorrt_llm.__doc__
    import vllm

    assert vllm.__version__ == VLLM_VERSION


def _drain(result):
    async def run():
        async for item in result:  # noqa: B007 - the last item carries the result
            pass
        return item.outputs[0]
    return run()


def test_requests_beyond_the_slots_wait_inside_the_engine_and_in_no_stats_field(llm) -> None:
    async def main():
        results = [llm.generate_async(f"prompt {i} a b", SamplingParams(max_tokens=4), streaming=i % 2 == 0)
                   for i in range(6)]
        return await asyncio.gather(*[_drain(r) for r in results])

    outputs = asyncio.run(main())
    assert all(o.finish_reason == "length" and len(o.token_ids) == 4 for o in outputs)
    waits = sorted((o.request_perf_metrics.timing_metrics.first_scheduled_time
                    - o.request_perf_metrics.timing_metrics.arrival_time) for o in outputs)
    assert waits[-1] > waits[1], "only 2 slots: later requests wait for a free one"
    stats = llm.get_stats(timeout=0.2)
    assert len(stats) >= 6, "one record per iteration with work (3 rounds of 4 tokens)"
    assert all(s["numActiveRequests"] <= 2 and s["maxNumActiveRequests"] == 2 for s in stats)
    # py_executor: numQueuedRequests is the intake queue, drained every iteration; 4 requests waited for a slot
    # during the first rounds and no record counts them.
    assert all(s["numQueuedRequests"] == 0 for s in stats)


def test_stats_iteration_ends_only_after_timeout_without_a_record(llm) -> None:
    async def main():
        result = llm.generate_async("a b c", SamplingParams(max_tokens=60))  # 60 iterations of 2 ms + sleeps
        seen, start = [], time.monotonic()
        async for record in llm.get_stats_async(timeout=0.3):
            seen.append((time.monotonic(), record))
        ended = time.monotonic()
        out = await _drain(result)
        again = [r async for r in llm.get_stats_async(timeout=0.3)]
        llm.generate_async("d e", SamplingParams(max_tokens=2))
        after_new_request = [r async for r in llm.get_stats_async(timeout=0.3)]
        return seen, start, ended, out, again, after_new_request

    seen, start, ended, out, again, after_new_request = asyncio.run(main())
    assert out.finish_reason == "length"
    assert len(seen) >= 50, "one record per iteration while the request runs: the loop does not end under load"
    assert all(isinstance(r, dict) for _, r in seen), "records are yielded as dicts (json.loads), as upstream"
    assert ended - seen[-1][0] >= 0.3, "the iteration ends only after `timeout` without a record"
    assert again == [], "a timed-out stats stream stays done until the next request"
    assert len(after_new_request) >= 1


def test_stats_before_the_first_request_print_a_warning_and_yield_nothing(llm, capsys) -> None:
    async def main():
        return [r async for r in llm.get_stats_async(timeout=0.1)]

    assert asyncio.run(main()) == []
    assert "Iteration statistics are not available yet" in capsys.readouterr().out


def test_a_streamed_item_stays_as_it_was_handed_out_while_the_engine_goes_on(llm) -> None:
    """Upstream the consumer's own loop applies each response (executor/result.py GenerationResult._aresult_step), so
    an item never changes under the reader. Before: the stand-in's engine thread wrote the item the consumer held, and
    a serving model that read output.text twice lost the token written between the reads (CI, under load: a streamed
    answer's two tool calls read as none)."""
    async def main():
        result = llm.generate_async("a b c d e f g h", SamplingParams(max_tokens=60), streaming=True)
        seen = []
        async for item in result:
            out = item.outputs[0]
            text, tokens = out.text, len(out.token_ids)
            await asyncio.sleep(0.02)  # ~10 engine iterations while the consumer holds the item
            seen.append((text == out.text and tokens == len(out.token_ids), out.text_diff))
        return seen, item.outputs[0].text

    seen, text = asyncio.run(main())
    assert len(seen) > 1 and all(same for same, _ in seen)
    assert "".join(diff for _, diff in seen) == text  # text_diff: what each item added, nothing lost or doubled


def test_abort_of_an_active_request_finishes_it_as_cancelled(llm) -> None:
    async def main():
        result = llm.generate_async("x y z", SamplingParams(max_tokens=100), streaming=True)
        async for item in result:  # noqa: B007 - the last item carries the result
            result.abort()
        return item.outputs[0]

    out = asyncio.run(main())
    assert out.finish_reason == "cancelled" and len(out.token_ids) < 100


def test_abort_of_a_waiting_request_drops_it_without_a_response(monkeypatch) -> None:
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.01")
    llm = LLM(model="/models", max_batch_size=2, max_seq_len=512)

    async def main():
        running = [llm.generate_async(f"busy {i}", SamplingParams(max_tokens=400)) for i in range(2)]
        waiting = llm.generate_async("waits for a slot", SamplingParams(max_tokens=4))
        await asyncio.sleep(0.05)
        waiting.abort()
        pending = asyncio.ensure_future(_drain(waiting))
        await asyncio.sleep(0.5)
        for r in running:
            r.abort()
        finished = [await _drain(r) for r in running]
        await asyncio.sleep(0.1)
        hung = not pending.done()
        pending.cancel()
        return finished, hung, waiting

    try:
        finished, hung, waiting = asyncio.run(main())
    finally:
        llm.shutdown()
    assert [o.finish_reason for o in finished] == ["cancelled", "cancelled"]
    assert hung and not waiting.finished, "no response ever comes for a request aborted while it waited"
    assert waiting.outputs[0].token_ids == []


def test_arrival_is_stamped_at_the_call_only_with_llm_level_perf_metrics(monkeypatch) -> None:
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.002")
    engine = LLM(model="/models", max_batch_size=1, max_seq_len=128)  # no return_perf_metrics on the LLM
    try:
        async def main():
            results = [engine.generate_async(f"p {i}", SamplingParams(max_tokens=10, return_perf_metrics=True))
                       for i in range(2)]
            return [await _drain(r) for r in results]

        second = asyncio.run(main())[1].request_perf_metrics.timing_metrics
        assert second.first_scheduled_time == second.arrival_time, "stamped when it left the waiting queue"
    finally:
        engine.shutdown()


def test_rejects_what_the_real_llm_rejects(tmp_path) -> None:
    with pytest.raises(TypeError, match="unexpected"):
        LLM(model="/models", tensor_paralel_size=2)
    with pytest.raises(ValueError, match="config.json"):
        LLM(model=str(tmp_path))
    with pytest.raises(ValueError):
        SamplingParams(max_tokens=0)


def test_cuda_graph_config_is_validated_like_the_strict_upstream_model() -> None:
    from tensorrt_llm.llmapi import CudaGraphConfig

    engine = LLM(model="/models", cuda_graph_config={"enable_padding": True, "max_batch_size": 64})
    engine.shutdown()
    assert CudaGraphConfig(batch_sizes=[8, 1, 32]).max_batch_size == 32, "derived from batch_sizes"
    with pytest.raises(TypeError):
        LLM(model="/models", cuda_graph_config={"enable_paddding": True})  # a typo is an error, not ignored
    with pytest.raises(ValueError, match="non-negative"):
        LLM(model="/models", cuda_graph_config={"max_batch_size": -1})
    with pytest.raises(ValueError, match="incompatible"):
        CudaGraphConfig(batch_sizes=[1, 2], max_batch_size=4)
    with pytest.raises(TypeError):
        LLM(model="/models", cuda_graph_config="on")


def test_max_tokens_beyond_the_room_left_is_clamped(monkeypatch, capsys) -> None:
    """base_worker.py _deduce_max_tokens: more max_tokens than max_seq_len leaves after the prompt is clamped."""
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.001")
    llm = LLM(model="/models", max_batch_size=2, max_seq_len=16)
    try:
        out = llm.generate_async("one two three four", SamplingParams(max_tokens=100)).result(10)
    finally:
        llm.shutdown()
    assert (out.outputs[0].finish_reason, len(out.outputs[0].token_ids)) == ("length", 12)
    assert "using default_max_tokens instead" in capsys.readouterr().out


def test_a_prompt_that_fills_max_seq_len_fails_while_the_result_is_iterated() -> None:
    llm = LLM(model="/models", max_batch_size=2, max_seq_len=4)

    async def main():
        result = llm.generate_async("one two three four", SamplingParams(max_tokens=1))  # no error yet
        async for _ in result:
            pass

    try:
        with pytest.raises(RuntimeError, match="default_max_tokens") as caught:
            asyncio.run(main())
    finally:
        llm.shutdown()
    assert type(caught.value).__name__ == "RequestError"


def test_a_killed_executor_answers_nothing_more_and_surfaces_its_error_once(monkeypatch, tmp_path) -> None:
    """executor.py _handle_background_error / is_shutdown: requests in flight hear nothing; the next client call
    raises the worker's error and the executor is shut down from then on."""
    kill = tmp_path / "kill"
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.01")
    monkeypatch.setenv("TRTLLM_STANDIN_KILL_FILE", str(kill))
    llm = LLM(model="/models", max_batch_size=2, max_seq_len=512)

    async def main():
        result = llm.generate_async("a long answer", SamplingParams(max_tokens=400), streaming=True)
        stream = result.__aiter__()
        await stream.__anext__()
        kill.touch()
        waiting = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.5)
        # the step that was under way may still arrive; after it, nothing
        if waiting.done():
            waiting = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0.5)
        hung = not waiting.done()
        waiting.cancel()
        return hung

    try:
        assert asyncio.run(main()), "a dead worker sends nothing more"
        assert not llm._executor.is_shutdown()
        with pytest.raises(RuntimeError, match="executor worker died"):
            llm.generate_async("again", SamplingParams(max_tokens=2))
        assert llm._executor.is_shutdown()
    finally:
        llm.shutdown()
