"""A pytriton model that behaves like an LLM server for the autoscaler's purposes.

Capacity model: ONE model instance with Triton's dynamic batcher,
``max_batch_size = capacity`` and ``max_queue_delay_microseconds = 0``: the
instance runs one "batch" at a time (like an engine's decode loop over at most
``capacity`` sequences); a batch of requests for ``n`` tokens computes for
``n × token_delay_s`` whatever its size (``time.sleep``: releases the GIL, costs
no CPU). Requests that arrive while the instance is busy wait in Triton's queue,
which is exactly what ``nv_inference_queue_duration_us`` measures; beyond
``capacity`` concurrent requests they wait whole service times.

Why not several instances with ``batching=False`` (one request per instance):
pytriton 0.7's instances 1..N wait only 1 s for instance 0's handshake socket
and on a loaded 2-core machine model loading fails with
``TimeoutError: ... <model>-config.sock`` (seen here). One instance is robust.

Measured on the 2-core CPU machine (closed loop, 10 tokens × 10 ms):
see tests/triton/test_real_triton_ratio.py; concurrency <= capacity gives a
ratio well below 1, concurrency = 3 × capacity well above 1.

Run as a script (the harness does, in a subprocess)::

    python tests/triton/fake_llm.py --address 127.0.0.1 --http-port P --grpc-port P --metrics-port P \
        --workspace DIR [--capacity 2] [--token-delay 0.01] [--model llm]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time

import numpy as np

MODEL = "llm"


def make_infer(token_delay_s: float):
    from pytriton.decorators import batch

    @batch
    def infer(tokens):
        # tokens: int32 [batch, 1]; the batch computes in parallel (in-flight batching)
        n = int(np.max(tokens)) if tokens.size else 1
        time.sleep(max(0, n) * token_delay_s)
        return {"generated": np.asarray(tokens, dtype=np.int32)}

    return infer


def serve(address: str, http_port: int, grpc_port: int, metrics_port: int, workspace: str,
          capacity: int = 2, token_delay_s: float = 0.01, model: str = MODEL,
          stop: threading.Event | None = None) -> None:
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    cfg = TritonConfig(
        http_address=address, http_port=http_port,
        grpc_address=address, grpc_port=grpc_port,
        metrics_address=address, metrics_port=metrics_port,
        allow_gpu_metrics=False, allow_cpu_metrics=False,
        metrics_interval_ms=200, exit_timeout_secs=2,
    )
    # Leave "statistics" open (PyTriton 0.7 restricts it by default: 403 without a token).
    security = TritonSecurityConfig(restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"])
    with Triton(config=cfg, workspace=workspace, security_config=security) as triton:
        triton.bind(
            model_name=model,
            infer_func=make_infer(token_delay_s),
            inputs=[Tensor(name="tokens", dtype=np.int32, shape=(1,))],
            outputs=[Tensor(name="generated", dtype=np.int32, shape=(1,))],
            config=ModelConfig(
                batching=True, max_batch_size=capacity,
                batcher=DynamicBatcher(max_queue_delay_microseconds=0),
            ),
            strict=False,
        )
        triton.run()
        ev = stop or threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: ev.set())
        signal.signal(signal.SIGINT, lambda *_: ev.set())
        ev.wait()


def main() -> None:
    # The Python backend stub bundled with pytriton 0.7 embeds a libpython older than
    # this venv's 3.11.7 stdlib: the tensor store's multiprocessing manager fails with
    # "'_thread.RLock' object has no attribute '_recursion_count'" (seen here).
    # Base64 serialization over the sockets avoids it (and is plenty for tiny tensors).
    os.environ.setdefault("PYTRITON_NO_TENSORSTORE", "1")
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--capacity", type=int, default=2)
    ap.add_argument("--token-delay", type=float, default=0.01)
    ap.add_argument("--model", default=MODEL)
    a = ap.parse_args()
    if not a.address.startswith("127."):
        raise SystemExit("fake_llm binds to 127.0.0.0/8 only")
    logging.basicConfig(level=logging.WARNING)
    serve(a.address, a.http_port, a.grpc_port, a.metrics_port, a.workspace, a.capacity, a.token_delay, a.model)


if __name__ == "__main__":
    main()
