"""A slow Triton metrics endpoint costs one bounded timeout per scrape, never a stuck autoscaler."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time

from llmbackend.autoscaling.sources import TritonScraper


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        time.sleep(2)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"nv_inference_queue_duration_us{model=\"m\",version=\"1\"} 1\n")

    def log_message(self, *args):
        pass


def test_slow_endpoint_times_out_and_yields_no_reading():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"

    async def go():
        async with TritonScraper("m", timeout_s=0.3) as scraper:
            started = time.monotonic()
            failed = await scraper.scrape({"slow-pod": address})
            return failed, time.monotonic() - started, scraper.errors(), scraper.reading(60)

    try:
        failed, elapsed, errors, reading = asyncio.run(go())
    finally:
        server.shutdown()
    assert failed == 1 and "slow-pod" in errors
    assert elapsed < 1.5, "bounded by the per-request timeout, not the server"
    assert reading.ratio is None, "no data is not a zero ratio"
