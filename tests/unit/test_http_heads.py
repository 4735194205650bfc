"""read_head (serving/http_body.py) on a socket pair: the bounds on a request head, fast and exact. The real
programs under attack are tests/activator/test_activator_headers.py and tests/openai/test_openai_headers.py."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from llmbackend.serving import http_body


def _read(sent: bytes, max_bytes: int = 1024, timeout_s: float = 2.0, trickle_s: float = 0.0,
          close: bool = False) -> tuple[list[bytes] | None | http_body.HeadError, float]:
    server, client = socket.socketpair()
    rfile = server.makefile("rb")

    def send() -> None:
        try:
            for i in range(0, len(sent), 1 if trickle_s else len(sent) or 1):
                client.sendall(sent[i:i + 1] if trickle_s else sent)
                time.sleep(trickle_s)
            if close:
                client.close()
        except OSError:
            pass

    threading.Thread(target=send, daemon=True).start()
    started = time.monotonic()
    try:
        result: list[bytes] | None | http_body.HeadError = http_body.read_head(rfile, server, max_bytes, timeout_s)
    except http_body.HeadError as exc:
        result = exc
    seconds = time.monotonic() - started
    server.close()
    client.close()
    return result, seconds


def test_a_whole_head_is_returned_and_what_follows_stays_unread():
    server, client = socket.socketpair()
    rfile = server.makefile("rb")
    client.sendall(b"\r\nPOST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    assert http_body.read_head(rfile, server, 1024, 2) == [b"POST / HTTP/1.1\r\n", b"Host: x\r\n",
                                                           b"Content-Length: 2\r\n", b"\r\n"]
    assert rfile.read(2) == b"{}"  # the body is left for read_body
    assert server.gettimeout() == http_body.CLIENT_STALL_S  # later waits on the client are bounded, not endless


@pytest.mark.parametrize("sent, status", [
    (b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * 2000 + b"\r\n\r\n", 431),  # over the total
    (b"GET /" + b"a" * (http_body.MAX_HEADER_LINE_BYTES + 10) + b" HTTP/1.1\r\n\r\n", 414),  # a request line too long
    (b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * (http_body.MAX_HEADER_LINE_BYTES + 10), 431),  # a header line too long
])
def test_a_head_over_its_bounds_is_refused_without_reading_on(sent, status):
    max_bytes = 1024 if status == 431 and len(sent) < http_body.MAX_HEADER_LINE_BYTES else 64 << 10
    result, seconds = _read(sent, max_bytes=max_bytes)
    assert isinstance(result, http_body.HeadError) and result.status == status, result
    assert seconds < 1


def test_a_trickle_cannot_stretch_the_deadline():
    """One byte every 0.2 s never lets a single wait time out; the deadline counts from the start all the same."""
    result, seconds = _read(b"GET / HTTP/1.1\r\nX-A: " + b"a" * 100, timeout_s=1.0, trickle_s=0.2)
    assert isinstance(result, http_body.HeadError) and result.status == 408, result
    assert 0.9 <= seconds < 1.5


@pytest.mark.parametrize("close", [False, True])
def test_a_connection_that_sent_nothing_is_closed_without_an_answer(close):
    result, seconds = _read(b"", timeout_s=0.5, close=close)
    assert result is None
    assert seconds < 1


def test_a_head_cut_off_by_the_client_gets_no_answer():
    result, _ = _read(b"GET / HTTP/1.1\r\nHost:", close=True)
    assert result is None


def test_a_client_that_stops_reading_frees_its_connection_within_the_stall_bound(monkeypatch):
    """Second attacker pass (issue 42): after the head, the client's socket had no timeout, so a streaming client
    that never read held its connection, thread and upstream forever (4 of 4 slots still held after 80 s). Now a
    write the client does not take within CLIENT_STALL_S ends the request and frees the slot."""
    monkeypatch.setattr(http_body, "CLIENT_STALL_S", 1.0)
    ended: list[str] = []

    class Streamer(http_body.BoundedHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                while True:  # an endless stream; the client reads none of it
                    self.wfile.write(b"data: " + b"x" * 65536 + b"\n\n")
            except OSError as exc:
                ended.append(type(exc).__name__)
                raise

        def log_message(self, *args):
            pass

    slots = http_body.Slots(4)
    server = http_body.BoundedServer(("127.0.0.1", 0), Streamer, slots, 8192, 5.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = socket.create_connection(server.server_address)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (ended and slots.open == 0):
            time.sleep(0.2)
        assert ended == ["TimeoutError"], "the stalled write ended by the stall bound"
        assert slots.open == 0, "the connection's slot is free again"
    finally:
        client.close()
        server.shutdown()
        server.server_close()
