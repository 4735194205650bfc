"""Requests of the serving programs (the OpenAI frontend, the activator): heads and bodies bounded before they are
held. Heads (BoundedHandler, BoundedServer): the request line and headers together at most `max_header_bytes`
(each line at most MAX_HEADER_LINE_BYTES; 414/431 beyond, then close), read within `header_timeout_s` of the
connection's turn (408, or a silent close of an idle keep-alive connection), and at most `max_connections` connections
(a thread each) per process: more get 503 with Retry-After at once, without a thread. Bodies: framing checked before
a byte of the body is read, size capped, and the bytes all bodies in flight hold bounded by one budget per process.

A body is read only after its framing is known to be sound: one Content-Length of ASCII digits (repeated values must
agree), or `Transfer-Encoding: chunked` alone, whose chunk-size lines are hex digits within a line limit. Anything
else is a BodyError with the status the client gets (RFC 9112 6.1-6.3: 400 for framing a server must not guess at,
413 over the cap, 501 for a transfer coding other than chunked). The memory limit of each program's container is
rendered from the same numbers (render/openai.py, render/activator.py: baseline + budget x bytes held per budget
byte, plus connections x the memory one connection holds with its head at the cap), so that what is admitted fits.

Standard library only: shipped next to the OpenAI frontend in the backend's ConfigMap, and run from the operator
image by the activator; neither imports anything else of the package.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from typing import Any

MAX_LINE_BYTES = 1024         # a chunk-size line with its extensions, or a trailer line
MAX_FRAMING_BYTES = 64 * 1024  # all chunk-size lines, extensions and trailers of one body together
READ_PIECE_BYTES = 64 * 1024   # the body is copied in pieces this large: no second copy of a whole chunk
MAX_HEADER_LINE_BYTES = 8 * 1024  # the request line, or one header line (nginx's default buffer is as large)
CONNECTION_RETRY_AFTER_S = 2     # Retry-After of the 503 a connection over the cap gets
# Once a request is read, any later wait on the client's socket (a write the client does not read, mostly) is bounded
# by this: a client that stops reading a stream frees its connection, thread and upstream within it. Waiting for an
# upstream (the activator's held requests) is not a wait on this socket.
CLIENT_STALL_S = 30.0
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: int() would take "+5", "1_0", " 5" and other scripts' digits
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_MAX_DIGITS = 15  # more is over any cap (and never handed to int(), which is slow on thousands of digits)


class BodyError(Exception):
    """A request the server answers without reading (more of) its body; `retry_after`: seconds, for 503."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def declared_length(headers: Message, max_bytes: int) -> int | None:
    """The body's length from its headers: Content-Length, None for a chunked body, 0 for none; BodyError otherwise."""
    codings = [c.strip().lower() for v in headers.get_all("Transfer-Encoding") or [] for c in v.split(",") if c.strip()]
    lengths = [v.strip() for value in headers.get_all("Content-Length") or [] for v in value.split(",")]
    if codings:
        if lengths:  # two framings: a proxy in front may pick the other one (request smuggling)
            raise BodyError(400, "both Transfer-Encoding and Content-Length: send one")
        if codings != ["chunked"]:
            raise BodyError(501, f"transfer coding {', '.join(codings)} is not supported: send chunked or Content-Length")
        return None
    if not lengths:
        return 0
    if not all(_DIGITS.fullmatch(v) for v in lengths) or len(set(lengths)) > 1:
        raise BodyError(400, "Content-Length must be one non-negative decimal number")
    if len(lengths[0].lstrip("0")) > _MAX_DIGITS or int(lengths[0]) > max_bytes:
        raise BodyError(413, f"request body over {max_bytes} bytes")
    return int(lengths[0])


class _Reader:
    """Reads the body off `rfile` within `deadline` (time.monotonic()), setting the socket's timeout to what is left."""

    def __init__(self, rfile: BufferedIOBase, sock: socket.socket | None, deadline: float) -> None:
        self.rfile, self.sock, self.deadline = rfile, sock, deadline

    def _time_left(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BodyError(408, "the request body did not arrive in time")
        if self.sock is not None:
            self.sock.settimeout(left)

    def exactly(self, n: int, into: bytearray) -> None:
        while n > 0:
            self._time_left()
            try:
                piece = self.rfile.read(min(n, READ_PIECE_BYTES))
            except TimeoutError:
                raise BodyError(408, "the request body did not arrive in time") from None
            if not piece:
                raise BodyError(400, "the connection ended inside the request body")
            into += piece
            n -= len(piece)

    def line(self) -> bytes:
        self._time_left()
        try:
            line = self.rfile.readline(MAX_LINE_BYTES + 1)
        except TimeoutError:
            raise BodyError(408, "the request body did not arrive in time") from None
        if not line.endswith(b"\n") or len(line) > MAX_LINE_BYTES:
            raise BodyError(400, f"a chunk line longer than {MAX_LINE_BYTES} bytes, or cut off")
        return line


def read_body(headers: Message, rfile: BufferedIOBase, max_bytes: int, timeout_s: float,
              sock: socket.socket | None = None) -> bytearray:
    """The whole body (checked with declared_length first), read within `timeout_s`; BodyError for bad framing."""
    length = declared_length(headers, max_bytes)
    reader = _Reader(rfile, sock, time.monotonic() + timeout_s)
    body = bytearray()
    try:
        if length is not None:
            reader.exactly(length, body)
            return body
        framing = 0
        while True:
            line = reader.line()
            framing += len(line)
            size = line.split(b";", 1)[0].strip(b" \t\r\n")  # chunk extensions are ignored (RFC 9112 7.1.1)
            if not _HEX.fullmatch(size):
                raise BodyError(400, f"bad chunk size {size[:20]!r}: hex digits expected")
            if len(size.lstrip(b"0")) > _MAX_DIGITS or len(body) + int(size, 16) > max_bytes:
                raise BodyError(413, f"request body over {max_bytes} bytes")
            n = int(size, 16)
            if n == 0:
                break
            reader.exactly(n, body)
            end = reader.line()
            if end not in (b"\r\n", b"\n"):
                raise BodyError(400, "chunk data longer than its size")
            framing += len(end)
            if framing > MAX_FRAMING_BYTES:
                raise BodyError(400, f"over {MAX_FRAMING_BYTES} bytes of chunk framing: send larger chunks")
        while (trailer := reader.line()) not in (b"\r\n", b"\n"):
            framing += len(trailer)
            if framing > MAX_FRAMING_BYTES:
                raise BodyError(400, f"over {MAX_FRAMING_BYTES} bytes of chunk framing and trailers")
        return body
    finally:
        if sock is not None:
            sock.settimeout(CLIENT_STALL_S)


def discard_rest(sock: socket.socket, max_bytes: int = 1 << 20, max_s: float = 2.0) -> None:
    """After answering a request whose body is not read: stop writing, then read and drop what the client still
    sends, for a little while, so that it reads the answer first (closing with unread data resets the connection,
    and a reset can drop the answer before the client sees it)."""
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline, dropped = time.monotonic() + max_s, 0
        while dropped < max_bytes and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                break
            dropped += len(data)
    except OSError:
        pass


class Reservation:
    """Bytes of a BodyBudget held by one request; shrink() once the body's real size is known."""

    def __init__(self, budget: BodyBudget, nbytes: int) -> None:
        self.budget, self.nbytes = budget, nbytes

    def shrink(self, nbytes: int) -> None:
        nbytes = min(nbytes, self.nbytes)
        self.budget._give_back(self.nbytes - nbytes)
        self.nbytes = nbytes

    def release(self) -> None:
        self.shrink(0)


class BodyBudget:
    """The bytes of request bodies (times what each body costs in memory) one process holds at once.

    A request reserves before reading its body; beyond the budget it waits up to `wait_s`, then gets 503 with
    Retry-After. The container's memory limit covers baseline + `limit_bytes` (render/): that is the bound by design.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.used = 0
        self.refused = 0
        self._cond = threading.Condition()

    def _give_back(self, nbytes: int) -> None:
        with self._cond:
            self.used -= nbytes
            self._cond.notify_all()

    @contextlib.contextmanager
    def reserve(self, nbytes: int, wait_s: float = 0.0, retry_after_s: int = 1) -> Iterator[Reservation]:
        if nbytes > self.limit:
            raise BodyError(413, f"request body too large for this server's memory budget ({self.limit} bytes)")
        with self._cond:
            if not self._cond.wait_for(lambda: self.used + nbytes <= self.limit, timeout=wait_s):
                self.refused += 1
                raise BodyError(503, "too many request bodies in flight; retry later", retry_after_s)
            self.used += nbytes
        reservation = Reservation(self, nbytes)
        try:
            yield reservation
        finally:
            reservation.release()


# ---- request heads and connections ----


def error_response(status: int, message: str, code: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 response with an OpenAI-style error body, closing the connection: for refusals made before
    a handler has parsed a request (the head, a connection over the cap)."""
    kind = "service_unavailable" if status >= 500 else "invalid_request_error"
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
    reasons = {408: "Request Timeout", 414: "URI Too Long", 431: "Request Header Fields Too Large",
               503: "Service Unavailable"}
    head = (f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    return head.encode() + b"\r\n" + body


class HeadError(Exception):
    """A request head refused before it is parsed; status None: close without an answer (nothing was sent)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def read_head(rfile: BufferedIOBase, sock: socket.socket, max_bytes: int, timeout_s: float) -> list[bytes] | None:
    """The request line and header lines of the next request, the blank line included, read within `timeout_s`
    (every wait for the client gets only the time left, so a trickle cannot stretch it) and at most `max_bytes`
    together; None when the client closed or stayed idle before sending a byte; HeadError otherwise."""
    deadline = time.monotonic() + timeout_s
    lines: list[bytes] = []
    line = bytearray()
    total = 0
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                data = rfile.peek(1)  # type: ignore[attr-defined]  # what is buffered, or one recv
            except TimeoutError:
                if total + len(line) == 0:
                    # An idle connection: closed silently, as a keep-alive timeout is (vLLM's OpenAI server closes
                    # idle connections after 5 s: uvicorn's timeout_keep_alive, vllm/entrypoints/openai/api_server.py).
                    return None
                raise HeadError(408, f"the request head did not arrive within {timeout_s:g}s") from None
            except OSError:
                return None  # reset by the client
            if not data:
                return None  # the client closed (inside the head: nothing to answer)
            end = data.find(b"\n")
            line += rfile.read(len(data) if end < 0 else end + 1)
            if len(line) > MAX_HEADER_LINE_BYTES:
                raise HeadError(431 if lines else 414, f"a request {'header' if lines else 'line'} longer than "
                                f"{MAX_HEADER_LINE_BYTES} bytes")
            if total + len(line) > max_bytes:
                raise HeadError(431, f"request headers over {max_bytes} bytes")
            if end < 0:
                continue
            total += len(line)
            if line.strip(b"\r\n"):
                lines.append(bytes(line))
            elif lines:
                lines.append(bytes(line))
                return lines
            line.clear()  # (an empty line before the request line is ignored: RFC 9112 2.2)
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(CLIENT_STALL_S)


class BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` at once (shared by the servers given the same `slots`);
    one more is answered 503 with Retry-After by the accepting thread and closed, without a thread of its own."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], slots: Slots,
                 max_header_bytes: int, header_timeout_s: float) -> None:
        self.slots, self.max_header_bytes, self.header_timeout_s = slots, max_header_bytes, header_timeout_s
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.take():
            refuse_connection(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.give_back()  # no thread started
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.give_back()


class Slots:
    """Connections open at once (one thread each): `open` now, `refused` since the start."""

    def __init__(self, limit: int) -> None:
        self.limit, self.open, self.refused = limit, 0, 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.open >= self.limit:
                self.refused += 1
                return False
            self.open += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.open -= 1


def add_head_arguments(ap: argparse.ArgumentParser, connections_help: str) -> None:
    """The head and connection limits both programs take from their renderer, which sizes the memory limit on them
    (the memory one connection holds is bounded by them)."""
    ap.add_argument("--max-header-bytes", type=int, required=True,
                    help="request line and headers of one request together, in bytes; more get 431")
    ap.add_argument("--header-timeout", type=float, required=True,
                    help="seconds for the request line and headers to arrive; then 408 and close")
    ap.add_argument("--max-connections", type=int, required=True, help=connections_help)


def refuse_connection(sock: socket.socket) -> None:
    """503 with Retry-After on a connection over the cap, without waiting for anything: the answer is small enough
    for the socket's buffer; what the client already sent is dropped first, so that closing sends FIN, not a reset
    that could drop the answer."""
    try:
        sock.setblocking(False)
        sock.send(error_response(503, "too many connections to this server; retry later", "busy",
                                 CONNECTION_RETRY_AFTER_S))
        for _ in range(16):
            if not sock.recv(65536):
                break
    except OSError:
        pass


class BoundedHandler(BaseHTTPRequestHandler):
    """BaseHTTPRequestHandler whose request head is read by read_head (within the server's header limits) before
    the standard library parses it: the standard library alone takes 100 lines of 64 KiB each, with no deadline."""

    server: BoundedServer

    def handle_one_request(self) -> None:
        # The standard library's handle_one_request (CPython 3.11 Lib/http/server.py), with its readline of the
        # request line replaced by read_head.
        try:
            head = read_head(self.rfile, self.connection, self.server.max_header_bytes, self.server.header_timeout_s)
        except HeadError as exc:
            self.close_connection = True
            if exc.status is not None:
                with contextlib.suppress(OSError):
                    self.connection.settimeout(5)
                    self.wfile.write(error_response(exc.status, exc.message, "request_head"))
                discard_rest(self.connection)
            return
        if head is None:
            self.close_connection = True
            return
        self.raw_requestline = head[0]
        rfile, self.rfile = self.rfile, io.BytesIO(b"".join(head[1:]))
        try:
            parsed = self.parse_request()  # the headers come from the head already read
        finally:
            self.rfile = rfile
        if not parsed:
            return  # an error was answered
        method = getattr(self, "do_" + self.command, None)
        try:
            if method is None:
                self.send_error(501, f"unsupported method ({self.command!r})")
                return
            method()
            self.wfile.flush()
        except TimeoutError as exc:
            self.log_error("request timed out: %r", exc)
            self.close_connection = True
