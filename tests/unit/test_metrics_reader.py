"""The bounded /metrics reader (autoscaling/ratio.py MetricsReader): the same reading however the body is cut into
chunks, and what it drops."""

from __future__ import annotations

import random

import pytest
from cpu_probe import quiet_cpu_s

from llmbackend.api import engine_metrics as EM
from llmbackend.autoscaling import ratio as R

Q, C, N = EM.ENGINE_QUEUE_METRIC, EM.ENGINE_COMPUTE_METRIC, EM.ENGINE_REQUESTS_METRIC
BODY = (
    "# HELP x y\n# TYPE x counter\n"
    f'{Q}{{model="m",version="1"}} 30\n{Q}{{model="m",version="2"}} 12 1700000000000\n'
    f'{C}{{model="m",version="1"}} 40\n{N}_total{{model="m"}} 7\n{Q}{{model="other"}} 1000\n'
    f'{EM.REQUEST_GAUGE}{{model="m",request_type="active",version="1"}} 3\n'
    f'{EM.REQUEST_GAUGE}{{model="m",request_type="max",version="1"}} 8\n'
    f'{EM.KV_GAUGE}{{model="m",kv_cache_block_type="fraction"}} 0.25\n'
    f'{R._BUCKET_SAMPLE}{{model="m",le="1"}} 2\n{R._BUCKET_SAMPLE}{{model="m",le="+Inf"}} 7\n'
    "nv_gpu_utilization{gpu_uuid=\"GPU-1\"} 0.5\n"
    f'{EM.REQUEST_GAUGE}{{model="m",request_type="waiting"}} 4'  # no newline at the end
)


def _read(chunks: list[bytes]) -> R.TritonCounters | None:
    reader = R.MetricsReader("m", R.SIGNAL_ENGINE)
    for chunk in chunks:
        reader.feed(chunk)
    reader.finish()
    return reader.result()


def test_the_reading_is_the_same_however_the_body_is_cut() -> None:
    whole = R.parse_metrics_text(BODY, "m", R.SIGNAL_ENGINE)
    assert whole is not None
    assert (whole.queue_us, whole.compute_infer_us, whole.success_count) == (42, 40, 7)
    assert (whole.active, whole.slots, whole.trtllm_waiting, whole.kv_cache_fraction) == (3, 8, 4, 0.25)
    assert whole.request_buckets == ((1.0, 2.0), (float("inf"), 7.0))
    data = BODY.encode()
    assert _read([data[i:i + 1] for i in range(len(data))]) == whole  # byte by byte
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(data)), 5))
        assert _read([data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]) == whole


def test_a_line_longer_than_the_cap_is_dropped_across_chunks_and_the_next_one_read() -> None:
    long_line = f'{Q}{{model="m",x="' + "a" * (R.MAX_METRIC_LINE * 3) + '"} 1000\n'
    data = (long_line + f'{Q}{{model="m"}} 5\n{C}{{model="m"}} 6\n').encode()
    for size in (100, R.MAX_METRIC_LINE + 1, len(data)):
        counters = _read([data[i:i + size] for i in range(0, len(data), size)])
        assert counters is not None and counters.queue_us == 5


@pytest.mark.parametrize("line", [
    f'{Q}{{model="m",a="\\"x"}} 1000',                                              # an escape: not ours
    f'{Q}{{model="m",' + ",".join(f'l{i}="v"' for i in range(R.MAX_LABELS)) + "} 1000",  # too many labels
    f'{Q}{{model="m",a="' + "v" * (R.MAX_LABEL_VALUE + 1) + '"} 1000',                # too long a value
    f'{Q}{{model="m"}} 1000 1 2',                                                    # too many fields
    f'{Q}{{model="m"}} 1000 x',                                                      # a timestamp that is none
    f'{Q}{{model="m" 1000',                                                          # no closing brace
    f'{Q}{{model="m"x="y"}} 1000',                                                   # no comma
    f'{Q}{{model=m}} 1000',                                                          # no quotes
    f'{Q}{{model="m"}} NaN',
    f'{Q}{{model="m"}} 1e19',                                                        # past MAX_SAMPLE
])
def test_lines_the_reader_drops(line: str) -> None:
    counters = R.parse_metrics_text(f'{line}\n{Q}{{model="m"}} 5\n{C}{{model="m"}} 6\n', "m", R.SIGNAL_ENGINE)
    assert counters is not None and counters.queue_us == 5


def test_labels_in_any_order_with_blanks_and_a_brace_in_a_value() -> None:
    text = f'{Q} {{ version="1" , a="}}" ,model="m", }} 5\n{C}{{model="m"}} 6\n'
    counters = R.parse_metrics_text(text, "m", R.SIGNAL_ENGINE)
    assert counters is not None and counters.queue_us == 5


def test_more_bucket_bounds_than_a_histogram_has_is_no_histogram_and_holds_no_more() -> None:
    lines = [f'{Q}{{model="m"}} 1', f'{C}{{model="m"}} 1', f'{R._BUCKET_SAMPLE}{{model="m",le="+Inf"}} 1']
    lines += [f'{R._BUCKET_SAMPLE}{{model="m",le="{i}"}} {i}' for i in range(R.MAX_BUCKETS * 3)]
    reader = R.MetricsReader("m", R.SIGNAL_ENGINE)
    reader.feed(("\n".join(lines) + "\n").encode())
    assert reader.buckets is None
    counters = reader.result()
    assert counters is not None and counters.request_buckets is None and counters.queue_us == 1


def test_a_scrape_holds_a_chunk_of_the_body_not_the_body() -> None:
    """Six pods answer a body at the cap made only of lines the reader takes (200 labels each, dropped at the 9th):
    what the scrapes hold at once (traced peak; the bodies the server sends are allocated before) stays under 8 MiB
    (2.0 MiB measured, server side included), whatever the body: chunks and sums, not bodies (the whole-body parse
    before grew the process by ~115 MiB for these six)."""
    import asyncio
    import tracemalloc

    from aiohttp import web

    from llmbackend.autoscaling.sources import MAX_METRICS_BYTES, TritonScraper

    line = EM.REQUEST_GAUGE + "{" + ",".join(f'l{i}="{i}"' for i in range(200)) + "} 1\n"
    body = (line * (MAX_METRICS_BYTES // len(line))).encode()

    async def main() -> tuple[int, int]:
        async def metrics(request: web.Request) -> web.Response:
            return web.Response(body=body, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        address = f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            async with TritonScraper("m", timeout_s=30) as scraper:
                await scraper.scrape({"warm": address})
                tracemalloc.start()
                failed = await scraper.scrape({f"pod-{i}": address for i in range(6)})
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            return failed, peak
        finally:
            await runner.cleanup()

    failed, peak = asyncio.run(main())
    assert failed == 6  # no engine counters: a failure, after the whole body was read
    assert peak < 8 * 2**20, f"traced peak {peak / 2**20:.1f} MiB for 6 scrapes of {len(body) / 2**20:.1f} MiB"


G = EM.REQUEST_GAUGE
MIB = 2**20


@pytest.mark.parametrize("line", [
    f'{G}{{request_type="active"}} 1\n',                                       # ordinary
    "\n",                                                                      # a line start per byte
    f'{G}{{a="' + '\\"' * 1000 + '"} 1\n',                                     # escaped quotes
    G + "{" + ",".join(f'l{i}="{i}"' for i in range(200)) + "} 1\n",           # too many labels
    G + "{" + ",".join(f'l{i}="{i}"' for i in range(R.MAX_LABELS)) + "} 1\n",  # as many as allowed
    " " * 1990 + f"{G} 1\n",                                                   # leading blanks
    G + "{" + "," * 1990 + "} 1\n",                                            # separators only
    G + " " * 1990 + "{} 1\n",                                                 # blanks before the labels
    G + "{} " + " " * 1990 + "1\n",                                            # blanks before the value
    G + "{" + ",".join(f'l{i}  =  "{"v" * 240}"  ' for i in range(R.MAX_LABELS)) + "} 1\n",  # long values
], ids=["ordinary", "newlines", "escaped-quotes", "many-labels", "max-labels", "leading-blanks", "commas",
        "blanks-before-labels", "blanks-before-value", "long-values"])
def test_no_line_shape_makes_a_body_at_the_cap_cost_more_than_a_tenth_of_a_second(line: str) -> None:
    """Each step of the reader is a C-level pass over a line, and it looks at most MAX_METRIC_LINES lines: a body of
    1 MiB (the scraper's cap) of any of these shapes costs 5-24 ms of CPU (Python loops over a line's blanks and
    separators cost up to 63 ms; prometheus_client's parser 0.4-0.55 s)."""

    body = (line * (MIB // len(line))).encode()
    def read() -> None:
        reader = R.MetricsReader("m", R.SIGNAL_ENGINE)
        for at in range(0, len(body), 64 * 1024):
            if not reader.feed(body[at:at + 64 * 1024]):
                break
        reader.finish()
    best = quiet_cpu_s(read)
    assert best < 0.1, f"{best:.2f} s of CPU for 1 MiB of {line[:40]!r}"
