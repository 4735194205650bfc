"""The CPU stand-in vLLM engine (dev/standins/vllm): engine death and prompt validation as vLLM 0.31.0 reports them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "standins"))

from vllm import AsyncEngineArgs, SamplingParams  # noqa: E402
from vllm.exceptions import VLLMClientError  # noqa: E402
from vllm.v1.engine.async_llm import AsyncLLM  # noqa: E402
from vllm.v1.engine.exceptions import EngineDeadError  # noqa: E402


def test_a_killed_engine_fails_every_stream_in_flight_and_every_later_call(monkeypatch, tmp_path) -> None:
    kill = tmp_path / "kill"
    monkeypatch.setenv("VLLM_STANDIN_STEP_S", "0.01")
    monkeypatch.setenv("VLLM_STANDIN_KILL_FILE", str(kill))

    async def main():
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(max_num_seqs=2, max_model_len=512))
        await engine.check_health()
        seen: list[str] = []

        async def consume(request_id: str) -> None:
            async for out in engine.generate("a long answer", SamplingParams(max_tokens=400), request_id):
                if len(out.outputs[0].token_ids) == 2 and request_id == "r0":
                    kill.touch()
                seen.append(request_id)

        results = await asyncio.wait_for(asyncio.gather(consume("r0"), consume("r1"), return_exceptions=True), 5)
        errored = engine.errored
        with pytest.raises(EngineDeadError):
            await engine.check_health()
        with pytest.raises(EngineDeadError):
            async for _ in engine.generate("again", SamplingParams(max_tokens=2), "r2"):
                pass
        return results, errored

    results, errored = asyncio.run(main())
    assert [type(r) for r in results] == [EngineDeadError, EngineDeadError]
    assert errored


@pytest.mark.parametrize("words", [8, 9])
def test_a_prompt_that_leaves_no_room_is_a_client_error(words) -> None:
    """input_processor.py _validate_model_input (0.31.0): longer than max_model_len, or equal to it."""

    async def main():
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(max_num_seqs=2, max_model_len=8))
        async for _ in engine.generate(" ".join(["w"] * words), SamplingParams(max_tokens=1), "r"):
            pass

    with pytest.raises(VLLMClientError, match="maximum model length"):
        asyncio.run(main())
