"""A slow Triton metrics endpoint costs one bounded timeout per scrape, never a stuck autoscaler."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time

from llmbackend.autoscaling.sources import MAX_METRICS_BYTES, TritonScraper


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


class _Hostile(http.server.BaseHTTPRequestHandler):
    """A serving pod running a tenant's image: /metrics redirects the operator elsewhere, or answers without end."""

    elsewhere_hits: list[str] = []  # noqa: RUF012 - shared by the two servers of one test
    target = ""

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/internal"):
            _Hostile.elsewhere_hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            return
        if self.server.mode == "redirect":  # type: ignore[attr-defined]
            self.send_response(302)
            self.send_header("Location", f"http://{_Hostile.target}/internal/admin?op=delete")
            self.end_headers()
            return
        self.send_response(200)
        if self.server.mode == "huge-declared":  # type: ignore[attr-defined]
            self.send_header("Content-Length", str(600 * 2**20))
        self.end_headers()
        line = b"# " + b"a" * (2**20 - 3) + b"\n"
        try:
            for _ in range(600):  # 600 MiB, unless the reader stops first
                self.wfile.write(line)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def _serve(mode: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.mode = mode  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def _scrape(address: str) -> tuple[int, dict[str, str]]:
    async def go():
        async with TritonScraper("m", timeout_s=5) as scraper:
            return await scraper.scrape({"tenant-pod": address}), scraper.errors()

    return asyncio.run(go())


def test_a_pods_redirect_is_not_followed():
    """The operator scrapes the pod it found, and nothing a pod's answer points it to (issue 42's attacker: a 302 to
    an internal service got a GET from the operator every sync)."""
    elsewhere, elsewhere_address = _serve("ok")
    pod, address = _serve("redirect")
    _Hostile.target, _Hostile.elsewhere_hits = elsewhere_address, []
    try:
        failed, errors = _scrape(address)
    finally:
        pod.shutdown()
        elsewhere.shutdown()
    assert failed == 1 and "HTTP 302" in errors["tenant-pod"]
    assert _Hostile.elsewhere_hits == []


def test_endless_metrics_are_cut_at_the_cap_not_held():
    for mode in ("huge-streamed", "huge-declared"):
        pod, address = _serve(mode)
        started = time.monotonic()
        try:
            failed, errors = _scrape(address)
        finally:
            pod.shutdown()
        assert failed == 1 and f"exceed {MAX_METRICS_BYTES // 2**20} MiB" in errors["tenant-pod"], (mode, errors)
        assert time.monotonic() - started < 4, "stopped at the cap, not at the timeout"
