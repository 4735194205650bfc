"""The scrape's own HTTP/1.1 GET client (autoscaling/http_get.py) against a raw server that plays the pod byte by byte:
the three ways a body ends, truncated and oversize answers, slow headers, refused statuses and odd framing."""

from __future__ import annotations

import asyncio
import time

import pytest

from llmbackend.autoscaling import http_get
from llmbackend.autoscaling.http_get import HttpGetError

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"


async def _get(pieces: list[bytes], *, max_body: int = 1024, max_reads: int = 64, max_header: int = 1024,
               timeout_s: float = 2.0, pause: float = 0.0, stop_after: int | None = None) -> tuple[bytes, bytes]:
    """(the body the client handed on, the request the server saw): the server writes ``pieces`` one at a time and
    closes the connection."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        try:
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(pause)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    body: list[bytes] = []

    def on_body(chunk: bytes) -> bool:
        body.append(chunk)
        return stop_after is None or len(body) < stop_after

    async with server:
        async with asyncio.timeout(timeout_s):
            await http_get.get("127.0.0.1", server.sockets[0].getsockname()[1], "/metrics", on_body,
                               max_body=max_body, max_reads=max_reads, max_header=max_header)
    return b"".join(body), seen[0] if seen else b""


def get(pieces: list[bytes], **kw) -> tuple[bytes, bytes]:
    return asyncio.run(_get(pieces, **kw))


def refused(pieces: list[bytes], **kw) -> str:
    with pytest.raises(HttpGetError) as caught:
        get(pieces, **kw)
    return str(caught.value)


def test_the_request_is_one_plain_get_that_asks_for_no_coding_and_closes():
    _, request = get([OK + b"Content-Length: 0\r\n\r\n"])
    lines = request.split(b"\r\n")
    assert lines[0] == b"GET /metrics HTTP/1.1"
    assert b"Connection: close" in lines and b"Accept-Encoding: identity" in lines
    assert any(line.startswith(b"Host: 127.0.0.1:") for line in lines)


def test_a_content_length_body_is_read_to_its_length_in_any_cut():
    body = b"a 1\nb 2\n" * 20
    answer = OK + b"Content-Length: %d\r\n\r\n" % len(body) + body
    assert get([answer])[0] == body
    assert get([answer[i:i + 7] for i in range(0, len(answer), 7)])[0] == body
    # bytes past the length are not the body (nor a second answer)
    assert get([answer + b"HTTP/1.1 200 OK\r\n\r\nmore"])[0] == body


def test_a_chunked_body_with_extensions_and_trailers_is_read_whole():
    answer = (b"HTTP/1.1 200 OK\r\ntransfer-encoding:  Chunked \r\n\r\n"
              b"5;name=value;x=\"q;\"\r\nhello\r\n"
              b"1 \r\n \r\n"  # whitespace before the end of a chunk size (BWS)
              b"A\r\nworld 1234\r\n"
              b"0;last\r\nX-Trailer: 1\r\nOther: 2\r\n\r\n")
    assert get([answer])[0] == b"hello world 1234"
    assert get([bytes([b]) for b in answer], max_reads=1000)[0] == b"hello world 1234"


def test_bare_lf_line_ends_are_read():
    # RFC 9112 §2.2: a recipient may take a bare LF as a line end
    assert get([b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"])[0] == b"ok"


def test_a_body_without_length_is_read_to_the_close():
    assert get([OK + b"\r\n", b"first ", b"second"])[0] == b"first second"


@pytest.mark.parametrize("answer, expected", [
    (OK + b"Content-Length: 10\r\n\r\nshort", "5 bytes before its Content-Length"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhel", "inside a chunk"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "inside a chunk-size line"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: 1\r\n", "inside the trailer section"),
    (b"HTTP/1.1 200 OK\r\nContent-Len", "inside the header section"),
    (b"HTTP/1.1 20", "inside the status line"),
    (b"", "inside the status line"),
])
def test_a_truncated_answer_is_refused(answer, expected):
    assert expected in refused([answer])


def test_an_oversize_answer_is_refused_without_reading_it():
    # declared: refused before a byte of the body is read
    assert "exceed 1024 bytes" in refused([OK + b"Content-Length: 1025\r\n\r\n"])
    assert "exceed 1 MiB" in refused([OK + b"Content-Length: 99999999\r\n\r\n"], max_body=2**20)
    # sent: refused once past the cap, chunked or to the close
    assert "exceed 1024 bytes" in refused([OK + b"Transfer-Encoding: chunked\r\n\r\n", b"400\r\n" + b"a" * 1024 + b"\r\n",
                                           b"1\r\na\r\n0\r\n\r\n"])
    assert "exceed 1024 bytes" in refused([OK + b"\r\n"] + [b"a" * 100] * 11)
    # a header section past its cap, and a chunk-size line past its own
    assert "longer than 1024 bytes" in refused([OK + b"X-Pad: " + b"a" * 2000 + b"\r\n\r\n"])
    assert "longer than 1024 bytes" in refused([OK + b"X: 1\r\n" * 300 + b"\r\n"])
    assert "longer than" in refused([OK + b"Transfer-Encoding: chunked\r\n\r\n1;" + b"x" * 2000 + b"\r\n"])


def test_an_answer_in_too_many_reads_is_abandoned():
    body = b"x" * 20
    answer = OK + b"Content-Length: 20\r\n\r\n" + body
    assert get([answer[:10], answer[10:]], max_reads=2, pause=0.02)[0] == body  # exactly at the cap: read
    pieces = [answer[i:i + 4] for i in range(0, len(answer), 4)]
    assert "more than 5 reads" in refused(pieces, max_reads=5, pause=0.02)


def test_each_chunk_counts_against_the_read_budget_too():
    """One-byte chunks sent at once arrive in one read: each chunk is a read's worth of work (attack pass 9)."""
    head = OK + b"Transfer-Encoding: chunked\r\n\r\n"
    assert get([head + b"1\na\n" * 8 + b"0\r\n\r\n"], max_reads=10)[0] == b"a" * 8  # 1 read + 8 chunks: read
    assert "more than 10 reads and chunks" in refused([head + b"1\na\n" * 10 + b"0\r\n\r\n"], max_reads=10)


def test_the_consumer_may_stop_the_read():
    body, _ = get([OK + b"\r\n", b"a" * 10, b"b" * 10, b"c" * 10], pause=0.02, stop_after=1)
    assert body == b"a" * 10


def test_slow_headers_end_at_the_callers_timeout():
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        get([b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n"], pause=5.0, timeout_s=0.3)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("status", [b"HTTP/1.1 404 Not Found", b"HTTP/1.1 302 Found\r\nLocation: http://x/",
                                    b"HTTP/1.0 500 ", b"HTTP/1.1 100 Continue", b"HTTP/1.1 204"])
def test_a_status_other_than_200_is_refused(status):
    assert f"HTTP {status[9:12].decode()}" in refused([status + b"\r\nContent-Length: 0\r\n\r\n"])


@pytest.mark.parametrize("answer, expected", [
    (b"ICY 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (OK + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", "both Transfer-Encoding and Content-Length"),
    (OK + b"Transfer-Encoding: gzip, chunked\r\n\r\n", "only chunked"),
    (OK + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "only chunked"),
    (OK + b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\nxx", "Content-Encoding 'gzip'"),
    (OK + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\nxx", "more than once"),
    (OK + b"Content-Length: 2, 2\r\n\r\nxx", "not a number of bytes"),
    (OK + b"Content-Length: -1\r\n\r\n", "not a number of bytes"),
    (OK + b"Content-Length: +2\r\n\r\nxx", "not a number of bytes"),
    (OK + b"Content-Length: 0x2\r\n\r\nxx", "not a number of bytes"),
    (OK + b"Content-Length: \r\n\r\n", "not a number of bytes"),
    (OK + b"Content-Length : 2\r\n\r\nxx", "not a header field"),
    (OK + b"no colon\r\n\r\n", "not a header field"),
    (OK + b": no name\r\n\r\n", "not a header field"),
    (OK + b"X-A: 1\r\n folded\r\n\r\n", "obsolete line folding"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "not a chunk size"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n;ext\r\n", "not a chunk size"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n", "not a chunk size"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\n", "not a chunk size"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n123456789\r\n", "not a chunk size"),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", "chunk data longer than its size"),
])
def test_odd_framing_is_refused_with_what_is_odd(answer, expected):
    assert expected in refused([answer])


def test_a_pod_that_is_not_listening_raises_an_os_error():
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        await http_get.get("127.0.0.1", port, "/metrics", lambda chunk: True, max_body=10, max_reads=10)

    with pytest.raises(OSError):
        asyncio.run(main())


def test_the_activators_held_count_is_read_with_the_same_client(monkeypatch):
    """The operator's other read of a pod's /metrics (the activator's held requests, for 0 -> 1) goes through the
    same client: an honest pod is read; one that dribbles its headers is abandoned at the read cap, not read for the
    whole timeout."""
    from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC
    from llmbackend.autoscaling import activation

    honest = f"{ACTIVATOR_HELD_METRIC} 3\n".encode()
    reads = [0]
    read_socket = http_get.read_socket

    async def counted(reader: asyncio.StreamReader) -> bytes:
        reads[0] += 1
        return await read_socket(reader)

    monkeypatch.setattr(http_get, "read_socket", counted)
    monkeypatch.setattr(activation, "MAX_READS_PER_SCRAPE", 50)

    async def serve(dribble: bool) -> asyncio.Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            try:
                if dribble:
                    writer.write(b"HTTP/1.1 200 OK\r\n")
                    while not writer.is_closing():
                        writer.write(b"X")
                        await asyncio.sleep(0.001)
                writer.write(OK + b"Content-Length: %d\r\n\r\n" % len(honest) + honest)
                await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        return await asyncio.start_server(handle, "127.0.0.1", 0)

    async def main() -> tuple[float | None, float | None, float]:
        good, bad = await serve(False), await serve(True)
        async with good, bad:
            ok = await activation.held_requests({"a": "127.0.0.1"}, good.sockets[0].getsockname()[1])
            started = time.monotonic()
            hostile = await activation.held_requests({"b": "127.0.0.1"}, bad.sockets[0].getsockname()[1],
                                                     timeout_s=5.0)
            return ok, hostile, time.monotonic() - started

    ok, hostile, elapsed = asyncio.run(main())
    assert ok == 3
    assert hostile is None and elapsed < 4, elapsed
    assert reads[0] <= 2 + 50
