"""Hostile request framing sent on a raw socket, for the serving programs' HTTP servers (the OpenAI frontend, the
activator; serving/http_body.py), and the memory a process holds (from /proc)."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

STREAM_BYTES = 96 << 20  # what an attacker streams after a framing the server must refuse


def hostile_cases(cap: int) -> dict[str, tuple[str, bytes, int]]:
    """name -> (header lines after the request line, body bytes sent, the status the server must answer)."""
    chunked = "Transfer-Encoding: chunked"
    return {
        "content-length-negative": ("Content-Length: -1", b"{}", 400),
        "content-length-not-a-number": ("Content-Length: abc", b"{}", 400),
        "content-length-plus-sign": ("Content-Length: +2", b"{}", 400),
        "content-length-underscore": ("Content-Length: 1_0", b"{}", 400),
        "content-length-empty": ("Content-Length: ", b"{}", 400),
        "content-length-two-headers-disagree": ("Content-Length: 2\r\nContent-Length: 3", b"{}", 400),
        "content-length-list-disagrees": ("Content-Length: 2, 3", b"{}", 400),
        "content-length-thousand-digits": ("Content-Length: " + "9" * 1000, b"{}", 413),
        "content-length-over-the-cap": (f"Content-Length: {cap + 1}", b"{}", 413),
        "content-length-and-chunked": (f"{chunked}\r\nContent-Length: 2", b"2\r\n{}\r\n0\r\n\r\n", 400),
        "unknown-transfer-coding": ("Transfer-Encoding: gzip, chunked", b"2\r\n{}\r\n0\r\n\r\n", 501),
        "chunk-size-negative": (chunked, b"-1\r\n{}\r\n0\r\n\r\n", 400),
        "chunk-size-not-hex": (chunked, b"zz\r\n{}\r\n0\r\n\r\n", 400),
        "chunk-size-0x-prefix": (chunked, b"0x2\r\n{}\r\n0\r\n\r\n", 400),
        "chunk-size-empty": (chunked, b"\r\n{}\r\n0\r\n\r\n", 400),
        "chunk-size-twenty-hex-digits": (chunked, b"F" * 20 + b"\r\n{}\r\n0\r\n\r\n", 413),
        "chunk-size-over-the-cap": (chunked, f"{cap + 1:x}\r\n".encode() + b"{}", 413),
        "chunks-over-the-cap-together": (chunked, f"{cap:x}\r\n".encode() + b"x" * cap + b"\r\n1\r\nx\r\n0\r\n\r\n",
                                         413),
        "chunk-longer-than-its-size": (chunked, b"1\r\n{}\r\n0\r\n\r\n", 400),
        "chunk-extension-line-of-5000-bytes": (chunked, b"2;" + b"a" * 5000 + b"\r\n{}\r\n0\r\n\r\n", 400),
        "chunk-extensions-flood": (chunked, (b"1;" + b"e" * 1000 + b"\r\n{\r\n") * 200 + b"0\r\n\r\n", 400),
        "trailers-flood": (chunked, b"2\r\n{}\r\n0\r\n" + (b"X-T: " + b"t" * 1000 + b"\r\n") * 200 + b"\r\n", 400),
    }


@dataclasses.dataclass
class Answer:
    status: int | None
    head: bytes
    seconds: float
    closed: bool  # the server closed the connection after answering


def send_raw(host: str, port: int, path: str, headers: str, body: bytes, *, stream_after: int = 0,
             timeout_s: float = 10.0) -> Answer:
    """One request written as given; `stream_after` more bytes are streamed behind it from another thread (as an
    attacker would, whatever the server answers). The answer's status line and headers, and how long it took."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    started = time.monotonic()
    try:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n{headers}\r\n\r\n"
                     .encode())

        def write() -> None:
            try:
                sock.sendall(body)
                piece = b"x" * (1 << 20)
                for _ in range(stream_after >> 20):
                    sock.sendall(piece)
            except OSError:
                pass  # the server closed the connection: what it should do

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        data = b""
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
        seconds = time.monotonic() - started
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None
        closed = False
        try:
            sock.settimeout(5)
            while piece := sock.recv(65536):
                pass
            closed = True
        except OSError:
            closed = False
        return Answer(status, data.split(b"\r\n\r\n", 1)[0], seconds, closed)
    finally:
        sock.close()


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak) of a process, KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def quantity_bytes(quantity: str) -> int:
    """A memory limit as the renderer writes it ("224Mi")."""
    assert quantity.endswith("Mi"), quantity
    return int(quantity[:-2]) << 20


# ---- request heads (serving/http_body.py read_head, BoundedServer) ----

ATTACK_LINES, ATTACK_LINE_BYTES = 98, 65000  # what the standard library alone accepted: 100 lines of 64 KiB


def head_lines(total_bytes: int, line_bytes: int = 4000) -> bytes:
    """Header lines `X-A: aaa...` of `line_bytes` each, about `total_bytes` together (no blank line after them)."""
    line = b"X-A: " + b"a" * (line_bytes - 7) + b"\r\n"
    return line * max(1, total_bytes // len(line))


def open_head(host: str, port: int, request_line: bytes, lines: bytes, *, finish: bool = False) -> socket.socket:
    """A connection that has sent a request line and header lines; with `finish`, the blank line too (a complete
    request without a body), otherwise the head stalls there. Sent from a thread: a server that stops reading
    (or closes) must not block the test."""
    sock = socket.create_connection((host, port), timeout=30)

    def write() -> None:
        try:
            sock.sendall(request_line + lines + (b"\r\n" if finish else b""))
        except OSError:
            pass  # the server answered and closed: what it should do

    threading.Thread(target=write, daemon=True).start()
    return sock


def attack_head(host: str, port: int, method: str = "POST", *, finish: bool = False) -> socket.socket:
    """The attacker's head: ATTACK_LINES lines of ATTACK_LINE_BYTES."""
    line = b"X-A: " + b"a" * ATTACK_LINE_BYTES + b"\r\n"
    return open_head(host, port, f"{method} /v1/completions HTTP/1.1\r\nHost: x\r\n".encode(), line * ATTACK_LINES,
                     finish=finish)


# An answer "at once" for a crowd of connections opened together and timed from one start: well before the servers'
# 10 s header deadline (render/openai.py and render/activator.py HEADER_TIMEOUT_S), so it cannot be the deadline's
# answer, with room for a machine that runs test files side by side (`make test` does).
CROWD_AT_ONCE_S = 5.0


@dataclasses.dataclass
class Closed:
    status: int | None  # the status of what the server answered before closing, None for nothing
    seconds: float      # from `since` to the close
    head: bytes


def wait_closed(sock: socket.socket, since: float, timeout_s: float) -> Closed:
    """Read until the server closes the connection (or `timeout_s` passes: then seconds is inf)."""
    data = b""
    sock.settimeout(max(0.1, since + timeout_s - time.monotonic()))
    try:
        while piece := sock.recv(65536):
            data += piece
            sock.settimeout(max(0.1, since + timeout_s - time.monotonic()))
        seconds = time.monotonic() - since
    except TimeoutError:
        seconds = float("inf")
    except OSError:  # reset after the answer: closed too
        seconds = time.monotonic() - since
    finally:
        sock.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None
    return Closed(status, seconds, data.split(b"\r\n\r\n", 1)[0])


def wait_all_closed(socks: list[socket.socket], since: float, timeout_s: float) -> list[Closed]:
    """wait_closed on every connection at once (each from its own thread)."""
    out: list[Closed | None] = [None] * len(socks)

    def one(i: int) -> None:
        out[i] = wait_closed(socks[i], since, timeout_s)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(socks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 10)
    return [c if c is not None else Closed(None, float("inf"), b"") for c in out]

