"""CPU of the operator's scrape of one pod's /metrics (a script that prints figures, not a test).

    python benchmarks/scrape_bench.py [--scrapes 1000] [--pause 0.0] [--operator DIR]

Scenarios: an honest ~20 KiB Triton /metrics (Content-Length), and three hostile pods (a tenant's image) that send
one byte a write: header lines, a chunked body's size lines (with a 200-byte chunk extension each) and a body. The pod
is a child process, so the figure is the operator's side only: process CPU time (``time.process_time``) per scrape
of ``TritonScraper`` (2 s timeout, the controller's). ``--pause``: seconds the pod waits between the hostile bytes
(0: as fast as it can). ``--operator DIR``: measure another checkout's code (e.g. the aiohttp scrape before issue 48).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "tensorrt_llm"
HOSTILE = ("headers", "chunked", "body")


def triton_body() -> bytes:
    """~20 KiB shaped like a Triton pod's /metrics: per-model counters of an ensemble, engine gauges, GPU gauges."""
    lines = []
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count"):
        lines.append(f"# HELP {name} Cumulative {name}\n# TYPE {name} counter")
        lines += [f'{name}{{model="{m}",version="1"}} 123456'
                  for m in (MODEL, "preprocessing", "postprocessing", "ensemble", "tensorrt_llm_bls")]
    lines += [f'nv_trt_llm_request_metrics{{model="{MODEL}",request_type="active",version="1",x="{i}"}} 3'
              for i in range(120)]
    lines += [f'{name}{{gpu_uuid="GPU-0b2c8a3e-8f1e-4d7a-9c3e-{gpu:012d}"}} 12345.6' for gpu in range(8)
              for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                           "nv_gpu_power_usage", "nv_energy_consumption", "nv_gpu_power_limit")]
    body = ("\n".join(lines) + "\n").encode()
    while len(body) < 20 * 1024:
        body += b"# a comment line, as a Triton exposition's HELP and TYPE lines are\n"
    return body


def _pieces(mode: str, body: bytes):
    if mode == "normal":
        yield b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif mode == "headers":
        yield b"HTTP/1.1 200 OK\r\n"
        for i in range(10**9):
            yield from (bytes([b]) for b in f"X-Pad-{i}: {'a' * 100}\r\n".encode())
    elif mode == "chunked":
        yield b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        while True:
            yield from (bytes([b]) for b in b"1;" + b"x" * 200 + b"\r\n")
            yield b"#\r\n"
    else:
        yield b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
        while True:
            yield b"#"


def _pod(mode: str, pause: float, port_out) -> None:
    body = triton_body()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            for piece in _pieces(mode, body):
                if writer.transport.is_closing():
                    break
                writer.write(piece)
                await (asyncio.sleep(pause) if mode != "normal" else writer.drain())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_out.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def measure(mode: str, scrapes: int, pause: float) -> str:
    from llmbackend.autoscaling.sources import TritonScraper

    port_out: multiprocessing.Queue = multiprocessing.Queue()
    pod = multiprocessing.Process(target=_pod, args=(mode, pause, port_out), daemon=True)
    pod.start()
    address = f"127.0.0.1:{port_out.get()}"

    async def main() -> tuple[float, float, int, dict[str, str]]:
        async with TritonScraper(MODEL, signal="triton", timeout_s=2.0) as scraper:
            await scraper.scrape({"p": address})  # warm-up
            cpu, wall = time.process_time(), time.monotonic()
            for _ in range(scrapes):
                failed = await scraper.scrape({"p": address})
            return (time.process_time() - cpu) / scrapes, (time.monotonic() - wall) / scrapes, failed, scraper.errors()

    try:
        cpu, wall, failed, errors = asyncio.run(main())
    finally:
        pod.terminate()
    why = f", {next(iter(errors.values()))[:90]}" if failed else ""
    return f"{mode:8} {cpu * 1000:8.2f} ms CPU {wall * 1000:8.1f} ms wall a scrape (of {scrapes}), failed {failed}{why}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scrapes", type=int, default=1000, help="scrapes of the honest pod (hostile: 3)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between a hostile pod's bytes")
    parser.add_argument("--operator", type=Path, default=REPO / "operator", help="the llmbackend package's parent")
    args = parser.parse_args()
    sys.path.insert(0, str(args.operator))
    print(measure("normal", args.scrapes, 0.0))
    for mode in HOSTILE:
        print(measure(mode, 3, args.pause))


if __name__ == "__main__":
    main()
