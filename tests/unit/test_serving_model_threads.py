"""The serving models' threads, outside tritonserver: each rendered model.py (LLM API, vLLM) with its engine stand-in
(dev/standins/tensorrt_llm, dev/standins/vllm) and a Python-backend stand-in (dev/standins/pb_utils_standin.py) whose calls are
blocking round trips, as in Triton. No call into Triton may run on the engine's event loop (it would stall every
request the loop drives), a request cancelled while it waits for a slot ends with CANCELLED, and every request gets
exactly one final response."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.names import BackendRef, model_name
from llmbackend.render.servingpod import config_map_files
from llmbackend.render.workloads import RolloutStrategy, desired_objects

STANDINS = Path(__file__).resolve().parents[2] / "dev" / "standins"
SLOTS = 2


ENGINES = {
    # backend -> (engine loop thread name, engine spec)
    "trtllm": ("llmapi-loop", {"maxBatchSize": SLOTS, "maxSeqLen": 8192}),
    "vllm": ("vllm-engine-loop", {"backend": "vllm", "maxBatchSize": SLOTS, "maxSeqLen": 512, "maxInputLen": 128}),
}


@pytest.fixture(params=sorted(ENGINES))
def served(request, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.setenv("TRTLLM_STANDIN_ITERATION_S", "0.01")
    monkeypatch.setenv("VLLM_STANDIN_STEP_S", "0.01")
    import pb_utils_standin

    pb_utils = pb_utils_standin.install(sys.modules)
    pb_utils.CALLS.clear()
    loop_thread, engine = ENGINES[request.param]
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": engine})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    ref = BackendRef("llama", "default", "uid-1")
    config_map = next(o for o in desired_objects(ref, spec, plan, 1, RolloutStrategy("Recreate"))
                      if o["kind"] == "ConfigMap")
    for rel, content in config_map_files(config_map).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(content)
    name = model_name(ref, spec)
    config = text_format.Parse((tmp_path / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    model_config = json_format.MessageToDict(config, preserving_proto_field_name=True)
    module_spec = importlib.util.spec_from_file_location("llmapi_model_under_test", tmp_path / name / "1" / "model.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(model_config), "model_repository": str(tmp_path / name),
                      "model_version": "1", "model_name": name})
    try:
        yield model, pb_utils, loop_thread
    finally:
        model.finalize()
        for name in [m for m in sys.modules if m == "triton_python_backend_utils" or m.split(".")[0] in (
                "tensorrt_llm", "vllm")]:
            sys.modules.pop(name, None)


def _request(pb_utils, prompt: str, max_tokens: int, stream: bool = False):
    tensors = {"text_input": pb_utils.Tensor("text_input", np.array([prompt.encode()], dtype=np.object_)),
               "max_tokens": pb_utils.Tensor("max_tokens", np.array([max_tokens], dtype=np.int32)),
               "stream": pb_utils.Tensor("stream", np.array([stream], dtype=bool))}
    return pb_utils.InferenceRequest(tensors)


def _wait(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_no_triton_call_runs_on_the_engine_loop_and_cancelled_waiting_requests_end(served) -> None:
    model, pb_utils, loop_thread = served
    busy = [_request(pb_utils, f"busy request {i}", 60, stream=True) for i in range(SLOTS)]
    waiting = _request(pb_utils, "waits for a slot", 4)
    model.execute([*busy, waiting])
    time.sleep(0.2)
    waiting.cancelled = True
    _wait(lambda: waiting.sender.final.is_set(), 5)
    assert all(not r.sender.final.is_set() for r in busy), "cancelled before a slot freed"
    _wait(lambda: all(r.sender.final.is_set() for r in busy))
    (response, _), = waiting.sender.responses
    assert response.error is not None and response.error.code() == pb_utils.TritonError.CANCELLED
    for r in busy:
        finals = [f for _, f in r.sender.responses if f & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL]
        assert len(finals) == 1 and len(r.sender.responses) > 2, "streamed, one final response"
    _wait(lambda: not model.in_flight)
    on_loop = [call for call, thread in pb_utils.CALLS if thread == loop_thread]
    assert on_loop == [], f"{len(on_loop)} Triton calls on the engine's event loop: {sorted(set(on_loop))}"
    assert {"send", "is_cancelled", "metric"} <= {call for call, _ in pb_utils.CALLS}
    assert loop_thread in {thread.name for thread in threading.enumerate()}, "the loop thread's name is checked"


def test_finalize_lets_requests_in_flight_finish_before_it_stops_the_engine(served) -> None:
    model, pb_utils, _ = served
    assert model.drain_s >= 60, "the rendered drain bound reaches the model (config.pbtxt drain_seconds)"
    requests = [_request(pb_utils, f"in flight {i}", 40, stream=True) for i in range(SLOTS)]
    model.execute(requests)
    _wait(lambda: all(len(r.sender.responses) >= 2 for r in requests))
    model.finalize()  # what Triton calls on an unload
    for r in requests:
        response, flags = r.sender.responses[-1]
        assert flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        assert response.error is None, response.error
        finish = {t.name(): t.as_numpy()[0] for t in response.output_tensors}["finish_reason"]
        assert finish == b"length"


def test_vllm_waiting_gauges_count_the_requests_the_scheduler_skipped(served) -> None:
    """vLLM's own vllm:num_requests_waiting is num_waiting_reqs + num_skipped_waiting_reqs (v1/metrics/loggers.py
    PrometheusStatLogger.record, 0.31.0): so are the model's waiting gauges."""
    model, _, _ = served
    names = type(model).initialize.__globals__
    if "TritonStatLogger" not in names:
        pytest.skip("the vLLM model's stat logger")
    from vllm.v1.metrics.stats import SchedulerStats

    logger = type("Bound", (names["TritonStatLogger"],), {"metrics": model.metrics, "ipc": model.ipc})(None)
    logger.record(SchedulerStats(num_running_reqs=1, num_waiting_reqs=2, num_skipped_waiting_reqs=3), None)
    _wait(lambda: model.metrics.waiting.value == 5, 5)
    assert model.metrics.requests["waiting"].value == 5


def test_exit_server_signals_only_tritonserver_and_writes_only_the_kubelets_file(served, tmp_path, monkeypatch) -> None:
    """The dead-engine path in-process: the parent is not tritonserver, so nothing is signalled; the termination
    message goes only to a file the kubelet made, in a Kubernetes container."""
    model, _, _ = served
    names = type(model).initialize.__globals__
    log = tmp_path / "termination-log"
    monkeypatch.setitem(names, "TERMINATION_LOG", str(log))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert names["exit_server"]("boom") is False
    assert not log.exists(), "created a termination log outside Kubernetes"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert names["exit_server"]("boom") is False and not log.exists(), "the kubelet creates it, never the model"
    log.write_text("")
    assert names["exit_server"]("EngineDeadError: gone") is False
    assert log.read_text() == "EngineFailed: EngineDeadError: gone"


def test_a_health_check_that_hangs_is_an_engine_failure(served, monkeypatch) -> None:
    """TensorRT-LLM: surfacing a dead worker's error shuts the executor down, which may wait on the dead worker."""
    model, _, _ = served
    names = type(model).initialize.__globals__
    if "_health_problem" not in type(model).__dict__:
        pytest.skip("the LLM API model's executor check")
    monkeypatch.setitem(names, "HEALTH_TIMEOUT_S", 0.3)
    monkeypatch.setattr(model.llm._executor, "_handle_background_error", lambda: time.sleep(3))
    _wait(lambda: model.engine_error is not None, 5)
    assert "did not return within 0.3 s" in model.engine_error
    request = _request(names["pb_utils"], "after the death", 4)
    model.execute([request])
    (response, _), = request.sender.responses
    assert "engine failed" in response.error.message()


def test_a_request_the_engine_fails_is_an_internal_engine_error_the_frontend_can_tell_apart(served, monkeypatch) -> None:
    """Not the request's fault, not a dead engine: INTERNAL, counted as failed, and worded `engine error:` (Triton's
    HTTP endpoints answer every error with 400, so the OpenAI frontend reads the words to answer 500, not 400)."""
    model, pb_utils, _ = served

    def fail(*args, **kwargs):
        raise RuntimeError("a kernel failed")

    if hasattr(model, "llm"):
        monkeypatch.setattr(model.llm, "generate_async", fail)
    else:
        async def fail_stream(*args, **kwargs):
            fail()
            yield  # an async generator, as AsyncLLM.generate

        monkeypatch.setattr(model.engine, "generate", fail_stream)
    failed_before = model.metrics.failed.value
    request = _request(pb_utils, "fails in the engine", 4)
    model.execute([request])
    _wait(lambda: request.sender.final.is_set(), 5)
    (response, _), = request.sender.responses
    assert response.error.message().startswith("engine error:") and "a kernel failed" in response.error.message()
    assert response.error.code() == pb_utils.TritonError.INTERNAL
    _wait(lambda: model.metrics.failed.value == failed_before + 1, 5)
    assert model.engine_error is None, "one request's failure is not a dead engine"


@pytest.mark.parametrize("engine_reason, answered", [
    ("repetition", "repetition"),  # a repetition detector stopped it (was mapped to "stop")
    ("abort", "abort"),            # aborted by the engine, not by the client (was answered as "cancelled")
    ("length", "length"),
    (None, "stop"),
])
def test_vllm_finish_reasons_pass_through_as_its_openai_layer_passes_them(served, monkeypatch, engine_reason,
                                                                          answered) -> None:
    """vLLM 0.31.0's OpenAI layer gives the client the engine's finish_reason as it is
    (entrypoints/openai/completion/serving.py); only "error" is a failure (next test)."""
    model, pb_utils, _ = served
    if hasattr(model, "llm"):
        pytest.skip("vLLM's finish reasons")
    from vllm.outputs import CompletionOutput, RequestOutput

    async def one_output(prompt, params, request_id, **kwargs):
        yield RequestOutput(request_id, prompt, [1, 2], None, [CompletionOutput(0, " a b", [3, 4],
                                                                                finish_reason=engine_reason)], True)

    monkeypatch.setattr(model.engine, "generate", one_output)
    request = _request(pb_utils, "two words", 4)
    model.execute([request])
    _wait(lambda: request.sender.final.is_set(), 5)
    (response, _), = request.sender.responses
    assert response.error is None, response.error
    assert {t.name(): t.as_numpy()[0] for t in response.output_tensors}["finish_reason"] == answered.encode()


def test_vllm_finish_reason_error_is_an_engine_error_not_an_answer(served, monkeypatch) -> None:
    model, pb_utils, _ = served
    if hasattr(model, "llm"):
        pytest.skip("vLLM's finish reasons")
    from vllm.outputs import CompletionOutput, RequestOutput

    async def failed(prompt, params, request_id, **kwargs):
        yield RequestOutput(request_id, prompt, [1], None, [CompletionOutput(0, "", [], finish_reason="error")], True)

    monkeypatch.setattr(model.engine, "generate", failed)
    request = _request(pb_utils, "fails", 4)
    model.execute([request])
    _wait(lambda: request.sender.final.is_set(), 5)
    (response, _), = request.sender.responses
    assert response.error.message().startswith("engine error:") and "finish_reason 'error'" in response.error.message()
    assert response.error.code() == pb_utils.TritonError.INTERNAL


def test_finalize_ends_what_outlives_the_drain_bound_with_an_error(served) -> None:
    """An unload (or a shutdown) while a request runs longer than the drain bound: it ends with an error response,
    never hangs and never ends as if complete."""
    model, pb_utils, _ = served
    model.drain_s = 0.3
    requests = [_request(pb_utils, f"long {i}", 400, stream=True) for i in range(SLOTS)]  # ~4 s each
    model.execute(requests)
    _wait(lambda: all(len(r.sender.responses) >= 2 for r in requests))
    started = time.monotonic()
    model.finalize()
    assert time.monotonic() - started < 15
    for r in requests:
        response, flags = r.sender.responses[-1]
        assert flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        assert response.error is not None and "the model is unloading" in response.error.message()
        finals = [f for _, f in r.sender.responses if f & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL]
        assert len(finals) == 1


def test_a_dead_engine_fails_the_models_readiness(served) -> None:
    """python_backend r26.03 and later ask the model's is_ready() on every readiness check (src/pb_stub.cc
    `Stub::ProcessUserModelReadinessRequest`): it must be a bool, True while the engine lives, False once it died."""
    model, _, _ = served
    assert model.is_ready() is True
    model._engine_failed("EngineDeadError: gone")
    assert model.is_ready() is False
