"""A stand-in for `triton_python_backend_utils` (Triton's Python backend), for unit tests of the serving models
outside tritonserver. Install it with `install(sys.modules)` before loading a model file; tests against a real
tritonserver use the real module instead.

What it models of python_backend (r26.10): `InferenceResponseSender.send` (pb_response_sender.cc),
`InferenceRequest.is_cancelled` (pb_cancel.cc) and metric updates (pb_metric_reporter.cc) are blocking round trips
to the server process through shared memory, serialised by the stub's IPC channel: each call here takes
`IPC_COST_S` under one lock and records which thread made it (`CALLS`), so a test can see calls made on an engine's
event loop. Not modelled: tensors in shared memory, BLS, model config auto-completion.
"""

from __future__ import annotations

import threading
import time
import types
from typing import Any

import numpy as np

IPC_COST_S = 0.002
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
_ipc_lock = threading.Lock()
CALLS: list[tuple[str, str]] = []  # (call, thread name)


def _ipc(call: str) -> None:
    with _ipc_lock:
        CALLS.append((call, threading.current_thread().name))
        time.sleep(IPC_COST_S)


class TritonModelException(Exception):
    pass


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 0) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self.output_tensors, self.error = output_tensors or [], error

    def has_error(self) -> bool:
        return self.error is not None


class ResponseSender:
    def __init__(self) -> None:
        self.responses: list[tuple[InferenceResponse | None, int]] = []
        self.sent_at: list[float] = []  # time.monotonic() of each response, once its round trip completed
        self.final = threading.Event()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        _ipc("send")
        if self.final.is_set():
            raise TritonModelException("the final response has been sent already")
        self.responses.append((response, flags))
        self.sent_at.append(time.monotonic())
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.final.set()


class InferenceRequest:
    def __init__(self, tensors: dict[str, Tensor]) -> None:
        self.tensors = tensors
        self.sender = ResponseSender()
        self.cancelled = False

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def is_cancelled(self) -> bool:
        _ipc("is_cancelled")
        return self.cancelled


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return request.tensors.get(name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool((model_config.get("model_transaction_policy") or {}).get("decoupled"))


class _Metric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels, self.value, self.observations = labels, 0.0, []

    def increment(self, value: float) -> None:
        _ipc("metric")
        self.value += value

    def set(self, value: float) -> None:
        _ipc("metric")
        self.value = value

    def observe(self, value: float) -> None:
        _ipc("metric")
        self.observations.append(value)


class MetricFamily:
    COUNTER, GAUGE, HISTOGRAM = 0, 1, 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.kind, self.metrics = name, kind, []

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> _Metric:  # noqa: N802
        metric = _Metric(labels or {})
        self.metrics.append(metric)
        return metric


class Logger:
    @staticmethod
    def log_info(message: str) -> None:
        _ipc("log")

    @staticmethod
    def log_warn(message: str) -> None:
        _ipc("log")

    @staticmethod
    def log_error(message: str) -> None:
        _ipc("log")


def install(modules: dict[str, types.ModuleType]) -> types.ModuleType:
    """Register this module as `triton_python_backend_utils` in `modules` (sys.modules) and return it."""
    import sys

    module = sys.modules[__name__]
    modules["triton_python_backend_utils"] = module
    return module
