"""What an OpenAI client sees when the serving pod fails under its request: the operator's frontend in front of a
real tritonserver serving each rendered model with its CPU stand-in engine (as tests/openai/test_openai_endpoint.py).

- The engine dies mid-request (the stand-in's kill switch): a 5xx the client may retry elsewhere (503: this replica
  restarts), never a 400 that blames the request.
- tritonserver gives up on a request at shutdown (SIGTERM, `--exit-timeout-secs` shorter than the request): its
  stream ends without a final response. That is an error, never a short answer that says finish_reason "stop".
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from devcluster.tritonserver import available, run_tritonserver
from llmbackend.api import engine_metrics as em

# No conftest.py here: tests/e2e's tests import theirs as `conftest`, and a second one would shadow it.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "triton")]
from harness import free_port  # noqa: E402
from llmapi_support import STANDINS, backend_spec, metric, metrics, rendered_repository  # noqa: E402
from servers import frontend_files, local_args, run_frontend  # noqa: E402

openai = pytest.importorskip("openai", reason="pip install -e '.[test]' (the official openai client)")
pytest.importorskip("jinja2", reason="pip install -e '.[test]' (chat templates)")

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

HERE = Path(__file__).resolve().parent
MODEL = "llama-3.1-8b"
TOKENIZER = HERE / "tokenizer"
CONTEXT = 600
STEP_S = 0.05       # both stand-ins: a token per running request every 50 ms
LONG_TOKENS = 400   # ~20 s of decode: still running when the engine dies or Triton gives up
EXIT_TIMEOUT_S = 3
ENGINES = {
    # backend -> (env knob of its stand-in's step time, of its kill switch)
    "tensorrtllm": ("TRTLLM_STANDIN_ITERATION_S", "TRTLLM_STANDIN_KILL_FILE"),
    "vllm": ("VLLM_STANDIN_STEP_S", "VLLM_STANDIN_KILL_FILE"),
}


class Stack:
    """A tritonserver and the frontend in front of it, for one engine; `kill()` kills the engine, `stop()` sends
    tritonserver SIGTERM."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend, self.workdir = backend, workdir
        self.kill_file = workdir / "kill"

    def __enter__(self) -> Stack:
        spec = backend_spec(4, maxSeqLen=CONTEXT, maxInputLen=CONTEXT - 1, backend=self.backend)
        self.name, repo = rendered_repository(spec, self.workdir / "repo")
        program, container_args = frontend_files(spec, self.workdir)
        step, kill = ENGINES[self.backend]
        env = dict(os.environ, **{step: str(STEP_S), kill: str(self.kill_file)})
        self._triton = run_tritonserver(repo, extra_pythonpath=[STANDINS], env=env, startup_timeout_s=120,
                                        extra_args=[f"--exit-timeout-secs={EXIT_TIMEOUT_S}"])
        self.server = self._triton.__enter__()
        port = free_port()
        self._frontend = run_frontend(program, local_args(container_args, self.server.http_url,
                                                          self.server.metrics_url, str(TOKENIZER), port), port)
        self.client = openai.OpenAI(base_url=self._frontend.__enter__(), api_key="unused", max_retries=0, timeout=60)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._frontend.__exit__(None, None, None)
        self._triton.__exit__(None, None, None)

    def wait_in_engine(self, timeout_s: float = 30) -> None:
        """Until the engine decodes a request."""
        gauge = (dict(name=em.REQUEST_GAUGE, request_type="active") if self.backend == "tensorrtllm"
                 else dict(name=em.VLLM_RUNNING_GAUGE))
        name = gauge.pop("name")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if metric(metrics(self.server), name, self.name, **gauge) >= 1:
                    return
            except KeyError:
                pass  # not exported before the first update
            assert time.monotonic() < deadline, "the request never reached the engine"
            time.sleep(0.1)

    def kill(self) -> None:
        self.kill_file.touch()

    def stop(self) -> None:
        os.kill(self.server.pid, signal.SIGTERM)


def _in_background(call) -> dict[str, Any]:
    """call() on a thread; the dict gets its result or exception and 'thread'."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = call()
        except Exception as exc:  # noqa: BLE001 - what the client raised is the result here
            out["error"] = exc

    out["thread"] = threading.Thread(target=run, daemon=True)
    out["thread"].start()
    return out


def _stream_chunks(stack: Stack) -> list[Any]:
    return list(stack.client.completions.create(model=MODEL, prompt="tell me a long story", max_tokens=LONG_TOKENS,
                                                stream=True))


def _complete(stack: Stack) -> Any:
    return stack.client.completions.create(model=MODEL, prompt="tell me a long story", max_tokens=LONG_TOKENS)


def _decoding(stack: Stack) -> tuple[dict[str, Any], dict[str, Any]]:
    """A plain and a streamed completion, both decoding in the engine."""
    plain = _in_background(lambda: _complete(stack))
    streamed = _in_background(lambda: _stream_chunks(stack))
    stack.wait_in_engine()
    time.sleep(0.5)  # both requests decode
    return plain, streamed


def _ended(out: dict[str, Any], within_s: float) -> None:
    out["thread"].join(within_s)
    assert not out["thread"].is_alive(), "the client still waits"


@pytest.mark.parametrize("backend", sorted(ENGINES))
def test_a_dead_engine_is_a_server_error_the_client_may_retry(backend, tmp_path) -> None:
    with Stack(backend, tmp_path) as stack:
        plain, streamed = _decoding(stack)
        stack.kill()
        _ended(plain, 15)
        _ended(streamed, 15)
    error = plain.get("error")
    assert isinstance(error, openai.APIStatusError), plain
    assert error.status_code == 503, (error.status_code, error.body)
    assert "engine failed" in str(error.body)
    # streamed: the 200 is sent with the first token; the failure comes as OpenAI's error event, a server error
    error = streamed.get("error")
    assert isinstance(error, openai.APIError) and not isinstance(error, openai.APIStatusError), streamed
    assert (error.body or {}).get("type") == "server_error", error.body


@pytest.mark.parametrize("backend", sorted(ENGINES))
def test_a_request_triton_gives_up_at_shutdown_is_an_error_not_a_short_answer(backend, tmp_path) -> None:
    with Stack(backend, tmp_path) as stack:
        plain, streamed = _decoding(stack)
        stack.stop()  # the kubelet's SIGTERM; Triton waits EXIT_TIMEOUT_S, the requests need ~20 s
        _ended(plain, EXIT_TIMEOUT_S + 15)
        _ended(streamed, EXIT_TIMEOUT_S + 15)
    assert "result" not in plain, f"a cut answer was served as complete: {plain['result']}"
    error = plain.get("error")
    assert isinstance(error, openai.APIStatusError) and error.status_code >= 500, plain
    assert "result" not in streamed, "the stream ended without a finish_reason and without an error: " + str(
        [c.choices[0].finish_reason for c in streamed["result"]][-3:])
    error = streamed.get("error")
    assert isinstance(error, openai.APIError) and (error.body or {}).get("type") == "server_error", streamed
