"""A small HTTP/1.1 GET client for a pod's /metrics: every read of the socket counted, every byte capped.

The pod runs a tenant's image, so its answer is hostile input. A general client (aiohttp) bounds what it hands on
(the body), not the work of reading what it does not: header lines or chunk framing dribbled one byte a TCP
segment each cost a recv and a parser run on the operator's shared event loop until the timeout. Here every read
(status line, headers, chunk framing, body) and every chunk of a chunked body count against ``max_reads``, and every
byte against a cap, so a hostile answer is abandoned after bounded work. Plain http, one request a connection (``Connection: close``), no redirect,
no content coding: what the operator's scrape needs, nothing more. The caller bounds the whole exchange in time
(``asyncio.timeout``).

Framing follows RFC 9112 (HTTP/1.1); anything odd is refused with a :class:`HttpGetError` that says what.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

READ_BYTES = 64 * 1024  # the most one read takes from the socket
MAX_HEADER_BYTES = 16 * 1024  # status line and header section together (a Triton pod's are ~100 bytes)
MAX_CHUNK_LINE = 1024  # a chunk-size line with its extensions (a chunked body's framing; ours are a few bytes)
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")


class HttpGetError(Exception):
    """The answer was refused (odd, too large, too many reads, truncated); the message says why."""


class _Answer:
    """The socket's bytes as they arrive, with the reads and bytes counted against their caps."""

    def __init__(self, reader: asyncio.StreamReader, max_reads: int, max_bytes: int) -> None:
        self.reader = reader
        self.buffer = bytearray()
        self.eof = False
        self.reads = 0
        self.received = 0
        self.max_reads = max_reads
        self.max_bytes = max_bytes

    def spend(self) -> None:
        """One unit of the work budget: a read of the socket, or a chunk of a chunked body (a chunk is as much work
        as a read, whatever its size: one-byte chunks sent at once arrive in few reads)."""
        if self.reads >= self.max_reads:
            raise HttpGetError(f"the answer arrived in more than {self.max_reads} reads and chunks ({self.received} "
                               "bytes so far): not read (a Triton pod's comes in a few)")
        self.reads += 1

    async def fill(self) -> None:
        """One read of the socket: the one place this client reads it."""
        self.spend()
        data = await read_socket(self.reader)
        self.received += len(data)
        if self.received > self.max_bytes:
            raise HttpGetError(f"the answer would exceed {_size(self.max_bytes)}: not read")
        if data:
            self.buffer += data
        else:
            self.eof = True

    async def line(self, limit: int, what: str, cap: int | None = None) -> bytes:
        """The next line without its end; at most ``limit`` bytes (of ``cap`` for the section it is in, said in the
        error). RFC 9112 §2.2: a line ends with CRLF, a bare LF is recognized too."""
        start = 0
        while (end := self.buffer.find(b"\n", start)) < 0:
            if len(self.buffer) > limit:
                raise HttpGetError(f"{what} longer than {limit if cap is None else cap} bytes")
            if self.eof:
                raise HttpGetError(f"the answer ended inside {what}")
            start = len(self.buffer)
            await self.fill()
        if end > limit:
            raise HttpGetError(f"{what} longer than {limit if cap is None else cap} bytes")
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    async def take(self, most: int) -> bytes:
        """Up to ``most`` bytes (at least one), reading once if none is buffered; b"" at the end of the answer."""
        if not self.buffer and not self.eof:
            await self.fill()
        data = bytes(self.buffer[:most])
        del self.buffer[:most]
        return data


async def read_socket(reader: asyncio.StreamReader) -> bytes:
    """Whatever the socket has (up to READ_BYTES), after waiting for some. Module level so that tests count reads."""
    return await reader.read(READ_BYTES)


def _content_length(value: bytes) -> int:
    # RFC 9112 §6.3 (5): a Content-Length that is not one decimal number is an unrecoverable error
    if not value or len(value) > 18 or not set(value) <= _DIGITS:
        raise HttpGetError(f"Content-Length {value[:40]!r} is not a number of bytes")
    return int(value)


async def get(host: str, port: int, path: str, on_body: Callable[[bytes], bool], *, max_body: int,
              max_reads: int, max_header: int = MAX_HEADER_BYTES) -> None:
    """GET ``http://host:port{path}`` and hand the body to ``on_body`` as it arrives (it returns False to stop
    reading). Raises HttpGetError when the answer is not a 200 with a plain body of at most ``max_body`` bytes in at
    most ``max_reads`` reads of the socket (all of it: status line, headers, framing and body) and chunks of a chunked
    body together, and OSError when the
    pod cannot be reached. A 3xx is an error: a redirect is never followed."""
    reader, writer = await asyncio.open_connection(host, port, limit=READ_BYTES)
    try:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        # no Accept-Encoding would accept any content coding (RFC 9110 §12.5.3): ask for identity
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: llmbackend-operator\r\n"
                     "Accept: text/plain\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n".encode("ascii"))
        await writer.drain()
        # all bytes: the header section, the body, as many again as the header section for chunk framing and
        # trailers, and one read more (so that a body past its own cap is refused as such first)
        answer = _Answer(reader, max_reads, max_header + max_body + max_header + READ_BYTES)
        headers = await _head(answer, max_header)
        await _body(answer, headers, on_body, max_body, max_header)
    finally:
        writer.transport.abort()  # nothing more to read or write; a hostile pod's unread bytes are dropped


async def _head(answer: _Answer, max_header: int) -> dict[bytes, list[bytes]]:
    """The status line and header section: {lower-case name: [values]}; a non-200 status raises."""
    status = await answer.line(max_header, "the status line")
    # RFC 9112 §4: status-line = HTTP-version SP status-code SP [ reason-phrase ]
    version, _, rest = status.partition(b" ")
    code = rest[:3]
    if not (len(version) == 8 and version.startswith(b"HTTP/1.") and version[7] in _DIGITS) or len(code) != 3 or not set(code) <= _DIGITS or rest[3:4] not in (b"", b" "):
        raise HttpGetError(f"not an HTTP/1.x status line: {status[:80]!r}")
    if code != b"200":
        raise HttpGetError(f"HTTP {code.decode()}")
    headers: dict[bytes, list[bytes]] = {}
    used = len(status)
    while line := await answer.line(max_header - used, "the header section", max_header):
        used += len(line) + 2
        if line[:1] in (b" ", b"\t"):
            raise HttpGetError("obsolete line folding in the header section")  # RFC 9112 §5.2: may be refused
        name, colon, value = line.partition(b":")
        # RFC 9112 §5.1: no whitespace between the field name and the colon
        if not colon or not name or name != name.strip(b" \t"):
            raise HttpGetError(f"not a header field: {line[:80]!r}")
        headers.setdefault(name.lower(), []).append(value.strip(b" \t"))
    return headers


async def _body(answer: _Answer, headers: dict[bytes, list[bytes]], on_body: Callable[[bytes], bool],
                max_body: int, max_header: int) -> None:
    coding = b",".join(headers.get(b"content-encoding", [])).strip().lower()
    if coding not in (b"", b"identity"):
        raise HttpGetError(f"Content-Encoding {coding[:40].decode(errors='replace')!r}, not asked for")
    transfer = headers.get(b"transfer-encoding")
    lengths = headers.get(b"content-length")
    if transfer is not None and lengths is not None:
        # RFC 9112 §6.3 (3): both are a sign of request smuggling or response splitting; refused
        raise HttpGetError("both Transfer-Encoding and Content-Length")
    if transfer is not None:
        codings = [c.strip().lower() for c in b",".join(transfer).split(b",")]
        if codings != [b"chunked"]:
            raise HttpGetError(f"Transfer-Encoding {b','.join(codings)[:40].decode(errors='replace')!r}: "
                               "only chunked is read")
        await _chunked(answer, on_body, max_body, max_header)
        return
    if lengths is not None:
        if len(lengths) != 1:
            raise HttpGetError("Content-Length given more than once")
        await _sized(answer, _content_length(lengths[0]), on_body, max_body)
        return
    await _sized(answer, None, on_body, max_body)  # RFC 9112 §6.3 (8): the body ends when the connection closes


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def _too_large(max_body: int) -> HttpGetError:
    return HttpGetError(f"the body would exceed {_size(max_body)}: not read")


async def _sized(answer: _Answer, length: int | None, on_body: Callable[[bytes], bool], max_body: int) -> None:
    """A body of ``length`` bytes (RFC 9112 §6.3 (6)), or up to the close of the connection when None."""
    if length is not None and length > max_body:
        raise _too_large(max_body)
    left, size = length, 0
    while left is None or left > 0:
        data = await answer.take(READ_BYTES if left is None else left)
        if not data:
            if left is None:
                return
            raise HttpGetError(f"the answer ended {left} bytes before its Content-Length")
        size += len(data)
        if size > max_body:
            raise _too_large(max_body)
        if left is not None:
            left -= len(data)
        if not on_body(data):
            return


async def _chunked(answer: _Answer, on_body: Callable[[bytes], bool], max_body: int, max_trailer: int) -> None:
    """RFC 9112 §7.1: chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF, ended by a chunk of size 0 and the
    trailer section (§7.1.2, at most ``max_trailer`` bytes), read and dropped."""
    size = 0
    while True:
        line = await answer.line(MAX_CHUNK_LINE, "a chunk-size line")
        digits = line.split(b";", 1)[0].strip(b" \t")  # §7.1.1: extensions (after ";") are ignored
        if not digits or len(digits) > 8 or not set(digits) <= _HEX:
            raise HttpGetError(f"not a chunk size: {line[:40]!r}")
        chunk = int(digits, 16)
        if chunk == 0:
            break
        answer.spend()
        size += chunk
        if size > max_body:
            raise _too_large(max_body)
        while chunk:
            data = await answer.take(chunk)
            if not data:
                raise HttpGetError("the answer ended inside a chunk")
            chunk -= len(data)
            if not on_body(data):
                return
        if await answer.line(2, "the end of a chunk"):
            raise HttpGetError("chunk data longer than its size")
    used = 0
    while trailer := await answer.line(max_trailer - used, "the trailer section", max_trailer):
        used += len(trailer) + 2
