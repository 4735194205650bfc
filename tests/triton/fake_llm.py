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

Engine metrics. The operator's autoscaler reads the engine counters and gauges of
:mod:`llmbackend.api.engine_metrics` (what the operator's own serving models export), not
Triton's queue. This fake is an engine whose queue IS Triton's scheduler queue (one instance,
``capacity`` slots), so the advertised metrics port serves Triton's exposition plus, for the model:
engine queue/compute/finished counters equal to Triton's queue/compute/success counters (same
per-request quantities here: arrival -> batch start, batch start -> last token), and the gauges
``nv_trt_llm_request_metrics{request_type=active|scheduled|waiting|max}`` (sequences in the running
batch, counted by the infer function; requests queued = Triton's pending count - active; slots =
``capacity``) and ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}`` (active /
capacity). Triton itself serves metrics on a private port behind that exporter.

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
_ACTIVE = [0]  # sequences in the running batch
_ACTIVE_LOCK = threading.Lock()


def make_infer(token_delay_s: float):
    from pytriton.decorators import batch

    @batch
    def infer(tokens):
        # tokens: int32 [batch, 1]; the batch computes in parallel (in-flight batching)
        n = int(np.max(tokens)) if tokens.size else 1
        with _ACTIVE_LOCK:
            _ACTIVE[0] += len(tokens)
        try:
            time.sleep(max(0, n) * token_delay_s)
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE[0] -= len(tokens)
        return {"generated": np.asarray(tokens, dtype=np.int32)}

    return infer


def engine_metrics_text(triton_text: str, model: str, capacity: int, active: int) -> str:
    """The engine metrics of llmbackend.api.engine_metrics for ``model``, from Triton's counters and ``active``."""
    from prometheus_client.parser import text_string_to_metric_families

    from llmbackend.api import engine_metrics as EM

    totals = {EM.TRITON_QUEUE_METRIC: 0.0, EM.TRITON_COMPUTE_METRIC: 0.0, EM.TRITON_SUCCESS_METRIC: 0.0,
              EM.TRITON_PENDING_METRIC: 0.0}
    for fam in text_string_to_metric_families(triton_text):
        for sample in fam.samples:
            name = sample.name[:-6] if sample.name.endswith("_total") else sample.name
            if name in totals and sample.labels.get("model") == model:
                totals[name] += sample.value
    waiting = max(0.0, totals[EM.TRITON_PENDING_METRIC] - active)
    lab = f'model="{model}",version="1"'
    lines = []
    for metric, value in ((EM.ENGINE_QUEUE_METRIC, totals[EM.TRITON_QUEUE_METRIC]),
                          (EM.ENGINE_COMPUTE_METRIC, totals[EM.TRITON_COMPUTE_METRIC]),
                          (EM.ENGINE_REQUESTS_METRIC, totals[EM.TRITON_SUCCESS_METRIC]),
                          (EM.ENGINE_FAILURES_METRIC, 0.0)):
        lines += [f"# TYPE {metric} counter", f"{metric}{{{lab}}} {value:.0f}"]
    lines.append(f"# TYPE {EM.REQUEST_GAUGE} gauge")
    for kind, value in (("waiting", waiting), ("scheduled", active), ("active", active), ("max", capacity)):
        lines.append(f'{EM.REQUEST_GAUGE}{{{lab},request_type="{kind}"}} {value:g}')
    lines.append(f"# TYPE {EM.KV_GAUGE} gauge")
    lines.append(f'{EM.KV_GAUGE}{{{lab},kv_cache_block_type="fraction"}} {active / max(1, capacity):g}')
    return "\n".join(lines) + "\n"


def serve_engine_metrics(address: str, port: int, triton_metrics_url: str, model: str, capacity: int):
    """Serve Triton's exposition + the engine metrics on ``address:port`` (a daemon thread); returns the server."""
    import http.server
    import urllib.request

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            try:
                with urllib.request.urlopen(triton_metrics_url, timeout=2) as f:
                    text = f.read().decode()
                with _ACTIVE_LOCK:
                    active = _ACTIVE[0]
                body = (text.rstrip("\n") + "\n" + engine_metrics_text(text, model, capacity, active)).encode()
                code = 200
            except Exception as e:  # noqa: BLE001 - Triton not up yet: say so, like a real endpoint would
                body, code = f"triton metrics unavailable: {e}\n".encode(), 503
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(address: str, http_port: int, grpc_port: int, metrics_port: int, workspace: str,
          capacity: int = 2, token_delay_s: float = 0.01, model: str = MODEL,
          stop: threading.Event | None = None) -> None:
    import socket

    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    with socket.socket() as sock:  # Triton's own metrics port, private behind the engine-metrics exporter
        sock.bind((address, 0))
        triton_metrics_port = sock.getsockname()[1]
    exporter = serve_engine_metrics(address, metrics_port, f"http://{address}:{triton_metrics_port}/metrics", model, capacity)
    cfg = TritonConfig(
        http_address=address, http_port=http_port,
        grpc_address=address, grpc_port=grpc_port,
        metrics_address=address, metrics_port=triton_metrics_port,
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
    exporter.shutdown()


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
