"""Pure parts of the operator's LLM API Triton model (render/models/trtllm_llmapi.py), loaded the way Triton loads it:
as a file, with `triton_python_backend_utils` provided by the server (a minimal stand-in module here)."""

from __future__ import annotations

import datetime
import importlib.util
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

from llmbackend.render import triton


@pytest.fixture(scope="module")
def model():
    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

        def as_numpy(self):
            return self.array

    def get_input_tensor_by_name(request, name):
        return request.get(name)

    pb_utils = types.ModuleType("triton_python_backend_utils")
    pb_utils.Tensor = Tensor
    pb_utils.get_input_tensor_by_name = get_input_tensor_by_name
    sys.modules["triton_python_backend_utils"] = pb_utils
    try:
        spec = importlib.util.spec_from_file_location("llmbackend_model_under_test", _write_model())
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["triton_python_backend_utils"]


def _write_model():
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "model.py"
    path.write_text(triton.llmapi_model_source())  # the exact text shipped in the ConfigMap
    return path


def _request(model, **values):
    tensors = {}
    for name, value in values.items():
        if isinstance(value, str):
            array = np.array([value.encode()], dtype=np.object_)
        elif isinstance(value, list):
            array = np.array([v.encode() for v in value], dtype=np.object_)
        else:
            array = np.array([value])
        tensors[name] = model.pb_utils.Tensor(name, array)
    return tensors


def test_parse_request_maps_tensors_to_sampling_params(model) -> None:
    parsed = model.parse_request(_request(model, text_input="hi there", max_tokens=7, temperature=0.5, top_p=0.9,
                                          top_k=3, seed=11, stop_words=["x", ""], stream=True,
                                          exclude_input_in_output=False, return_num_output_tokens=True))
    assert parsed["prompt"] == "hi there"
    assert parsed["sampling"] == {"max_tokens": 7, "temperature": 0.5, "top_p": pytest.approx(0.9), "top_k": 3,
                                  "seed": 11, "stop": ["x"], "return_perf_metrics": True}
    assert (parsed["stream"], parsed["exclude_input"], parsed["num_input"], parsed["num_output"]) == (
        True, False, False, True)
    assert model.parse_request(_request(model, text_input="hi"))["sampling"]["max_tokens"] == model._DEFAULT_MAX_TOKENS


@pytest.mark.parametrize("values, message", [
    ({}, "text_input is required"),
    ({"text_input": "hi", "max_tokens": 0}, "max_tokens must be at least 1"),
    ({"text_input": "hi", "temperature": -1.0}, "temperature"),
    ({"text_input": "hi", "top_p": 0.0}, "top_p"),
    ({"text_input": "hi", "top_k": -2}, "top_k"),
])
def test_parse_request_rejects_bad_input(model, values, message) -> None:
    with pytest.raises(model.BadRequest, match=message):
        model.parse_request(_request(model, **values))


def _output(arrival, scheduled, last):
    td = datetime.timedelta
    timing = SimpleNamespace(arrival_time=td(seconds=arrival), first_scheduled_time=td(seconds=scheduled),
                             first_token_time=td(seconds=scheduled), last_token_time=td(seconds=last))
    return SimpleNamespace(request_perf_metrics=SimpleNamespace(timing_metrics=timing))


def test_engine_times_are_queue_then_compute(model) -> None:
    queue, compute = model.engine_times_us(_output(100.0, 100.25, 101.0))
    assert queue == pytest.approx(250_000) and compute == pytest.approx(750_000)
    assert model.engine_times_us(_output(100.0, 0.0, 0.0)) is None, "never scheduled (cancelled while waiting)"
    assert model.engine_times_us(SimpleNamespace(request_perf_metrics=None)) is None


def test_gauges_from_iteration_stats(model) -> None:
    stats = {"numQueuedRequests": 3, "numActiveRequests": 4, "maxNumActiveRequests": 8,
             "inflightBatchingStats": {"numScheduledRequests": 4, "numPausedRequests": 1},
             "kvCacheStats": {"maxNumBlocks": 100, "freeNumBlocks": 75, "usedNumBlocks": 25}}
    requests, blocks = model.gauges_from_stats(stats)
    assert requests == {"waiting": 4.0, "scheduled": 4.0, "active": 4.0, "max": 8.0}
    assert blocks == {"used": 25.0, "free": 75.0, "max": 100.0, "fraction": 0.25}
    assert model.gauges_from_stats({})[1]["fraction"] == 0.0


@pytest.mark.parametrize("submitted, active, paused, waiting", [
    (6, 4, 0, 2.0),   # two submitted requests have no slot yet
    (6, 4, 1, 3.0),   # ... and one active request is paused (MAX_UTILIZATION set it aside for KV room)
    (3, 4, 2, 2.0),   # the engine may count a request this model already answered (cancelled): never negative
])
def test_waiting_counts_requests_without_a_slot_and_paused_ones(model, submitted, active, paused, waiting) -> None:
    record = {"numActiveRequests": active, "inflightBatchingStats": {"numPausedRequests": paused}}
    assert model.waiting_requests(submitted, record) == waiting


def test_attention_dp_stats_of_rank_0_stand_for_every_rank(model) -> None:
    """TensorRT-LLM 1.2.1 reports rank 0's iteration stats under attention DP: 1024 requests over 8 balanced ranks
    show 128 active; without scaling, 896 would read as waiting and the autoscaler would see a backlog."""
    record = {"numQueuedRequests": 0, "numActiveRequests": 128, "maxNumActiveRequests": 128,
              "inflightBatchingStats": {"numScheduledRequests": 128, "numPausedRequests": 0}}
    assert model.waiting_requests(1024, record) == 896.0  # read as one rank: a false backlog
    assert model.waiting_requests(1024, record, ranks=8) == 0.0
    assert model.waiting_requests(1100, record, ranks=8) == 76.0
    requests, _ = model.gauges_from_stats(record, ranks=8)
    assert requests["active"] == requests["scheduled"] == requests["max"] == 1024.0
