"""Request bodies of the serving programs (the OpenAI frontend, the activator): framing checked before a byte of the
body is read, size capped, and the bytes all bodies in flight hold bounded by one budget per process.

A body is read only after its framing is known to be sound: one Content-Length of ASCII digits (repeated values must
agree), or `Transfer-Encoding: chunked` alone, whose chunk-size lines are hex digits within a line limit. Anything
else is a BodyError with the status the client gets (RFC 9112 6.1-6.3: 400 for framing a server must not guess at,
413 over the cap, 501 for a transfer coding other than chunked). The memory limit of each program's container is
rendered from the same numbers (render/openai.py, render/activator.py: baseline + budget x bytes held per budget
byte), so that what the budget admits fits.

Standard library only: shipped next to the OpenAI frontend in the backend's ConfigMap, and run from the operator
image by the activator; neither imports anything else of the package.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from email.message import Message
from io import BufferedIOBase

MAX_LINE_BYTES = 1024         # a chunk-size line with its extensions, or a trailer line
MAX_FRAMING_BYTES = 64 * 1024  # all chunk-size lines, extensions and trailers of one body together
READ_PIECE_BYTES = 64 * 1024   # the body is copied in pieces this large: no second copy of a whole chunk
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
            sock.settimeout(None)


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
