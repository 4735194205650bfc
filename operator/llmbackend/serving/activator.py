"""Activator: receives a backend's HTTP requests while it has no serving replica, holds them, and forwards each one
once a replica accepts connections.

It runs as its own small pod (the operator image, `python -m llmbackend.serving.activator`) for backends with
`autoscaling.minReplicas: 0` in mode operator. While the backend is at zero the backend's Service selects this pod;
the operator reads the gauge of held requests on the metrics port and scales 0 -> 1; once a serving pod is Ready the
Service selects the serving pods again (render/activator.py). Each held request is forwarded, unchanged, to the
Service that selects only the serving pods (same port number), and the response is streamed back as it arrives
(server-sent events included). Standard library only: like the other programs under serving/ it imports nothing of
the package; the metric name comes in as an argument from api/engine_metrics.py.

Bounded: at most --max-held requests wait at once (more get 503 at once), each for at most --hold-timeout seconds
(then 503 with a body that says so). A client that disconnects while held stops being held. Bodies (http_body.py):
framing checked before reading (400/413/501), at most --max-body-bytes each, and at most --body-budget-bytes of
bodies held at once (more get 503 with Retry-After at once). Heads and connections (http_body.py too): at most
--max-header-bytes of request line and headers (431 beyond), read within --header-timeout seconds (408), and at most
--max-connections connections on the proxied ports together, --max-metrics-connections on the metrics port (more get
503 with Retry-After at once). The pod's memory limit covers all of it (render/activator.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import select
import socket
import sys
import threading
import time
from typing import Any

try:
    from . import http_body  # python -m llmbackend.serving.activator: the pod
except ImportError:  # the file run on its own: its sibling on sys.path
    import http_body  # type: ignore[no-redef]

log = logging.getLogger("activator")

# Headers of one hop only (RFC 9110 7.6.1): never forwarded; the activator frames its own responses.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "proxy-authenticate", "proxy-authorization"})
BODY_TIMEOUT_S = 60.0  # the whole body must arrive within this
RETRY_INTERVAL_S = 0.25
CONNECT_TIMEOUT_S = 2.0
# After the upstream accepted the request: the longest wait for the next bytes of its response (a long generation
# streams tokens; a non-streamed one may take minutes).
RESPONSE_TIMEOUT_S = 3600.0


class Held:
    """The requests waiting for an upstream right now: a bounded counter read by /metrics."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.timed_out = 0
        self.rejected = 0
        self.forwarded = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.count >= self.limit:
                self.rejected += 1
                return False
            self.count += 1
            return True

    def leave(self, outcome: str) -> None:
        with self._lock:
            self.count -= 1
            if outcome == "timeout":
                self.timed_out += 1
            elif outcome == "forwarded":
                self.forwarded += 1


class Activator:
    def __init__(self, upstream_host: str, hold_timeout_s: float, max_held: int, held_metric: str,
                 max_body_bytes: int, body_budget_bytes: int, max_connections: int = 1024) -> None:
        self.upstream_host = upstream_host
        self.hold_timeout_s = hold_timeout_s
        self.held = Held(max_held)
        self.max_body_bytes = max_body_bytes
        self.bodies = http_body.BodyBudget(body_budget_bytes)
        self.connections = http_body.Slots(max_connections)  # of the proxied ports together
        self.held_metric = held_metric
        self._probes: dict[int, tuple[float, bool]] = {}  # port -> (when, accepted)
        self._probe_lock = threading.Lock()

    def connect(self, port: int) -> http.client.HTTPConnection | None:
        """A connection to the serving replicas on `port`, or None while none accepts one."""
        conn = http.client.HTTPConnection(self.upstream_host, port, timeout=CONNECT_TIMEOUT_S)
        try:
            conn.connect()
        except OSError:
            conn.close()
            return None
        return conn

    def upstream_reachable(self, port: int) -> bool:
        conn = self.connect(port)
        if conn is None:
            return False
        conn.close()
        return True

    def upstream_up(self, port: int) -> bool:
        """upstream_reachable, probed at most once per RETRY_INTERVAL_S for all held requests together (a thousand
        held requests must not try a thousand connections every interval)."""
        with self._probe_lock:
            when, up = self._probes.get(port, (0.0, False))
            if time.monotonic() - when >= RETRY_INTERVAL_S:
                up = self.upstream_reachable(port)
                self._probes[port] = (time.monotonic(), up)
            return up

    def metrics_text(self) -> str:
        h = self.held
        name = self.held_metric
        return (f"# HELP {name} Requests the activator holds while no serving replica accepts connections.\n"
                f"# TYPE {name} gauge\n{name} {h.count}\n"
                f"# HELP {name}_timed_out_total Held requests answered 503 after the hold timeout.\n"
                f"# TYPE {name}_timed_out_total counter\n{name}_timed_out_total {h.timed_out}\n"
                f"# HELP {name}_rejected_total Requests answered 503 because the hold queue was full.\n"
                f"# TYPE {name}_rejected_total counter\n{name}_rejected_total {h.rejected}\n"
                f"# HELP {name}_forwarded_total Held requests forwarded once a replica accepted them.\n"
                f"# TYPE {name}_forwarded_total counter\n{name}_forwarded_total {h.forwarded}\n"
                f"# HELP {name}_body_bytes Bytes of request bodies reserved in the body budget now.\n"
                f"# TYPE {name}_body_bytes gauge\n{name}_body_bytes {self.bodies.used}\n"
                f"# HELP {name}_body_refused_total Requests answered 503 because the body budget was full.\n"
                f"# TYPE {name}_body_refused_total counter\n{name}_body_refused_total {self.bodies.refused}\n"
                f"# HELP {name}_connections Connections open on the proxied ports now (held requests among them).\n"
                f"# TYPE {name}_connections gauge\n{name}_connections {self.connections.open}\n"
                f"# HELP {name}_connections_refused_total Connections answered 503 because too many were open.\n"
                f"# TYPE {name}_connections_refused_total counter\n"
                f"{name}_connections_refused_total {self.connections.refused}\n")


def _client_gone(sock: socket.socket) -> bool:
    """The client closed its side while we hold its request (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class ProxyHandler(http_body.BoundedHandler):
    protocol_version = "HTTP/1.1"
    server: ProxyServer

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:
        self._proxy()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _error(self, status: int, message: str, code: str = "no_replica", retry_after: int | None = 30) -> None:
        kind = "service_unavailable" if status >= 500 else "invalid_request_error"
        body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(body)

    def _proxy(self) -> None:
        activator = self.server.activator
        try:
            length = http_body.declared_length(self.headers, activator.max_body_bytes)
            # A chunked body may be as large as the cap: reserve that, give back the rest once it is read.
            with activator.bodies.reserve(activator.max_body_bytes if length is None else length,
                                          retry_after_s=5) as reservation:
                self._hold_and_forward(reservation)
        except http_body.BodyError as exc:
            # Nothing more is read from this connection: what follows the refused framing is not a request.
            self.close_connection = True
            self._error(exc.status, exc.message, "request_body" if exc.status < 500 else "busy", exc.retry_after)
            http_body.discard_rest(self.connection)

    def _hold_and_forward(self, reservation: http_body.Reservation) -> None:
        """Read the body, hold it until a replica accepts a connection, forward it, relay the answer. Only this frame
        references the body, so it is freed when the budget is given back."""
        activator = self.server.activator
        body = http_body.read_body(self.headers, self.rfile, activator.max_body_bytes, BODY_TIMEOUT_S, self.connection)
        reservation.shrink(len(body))
        port = self.server.upstream_port
        deadline = time.monotonic() + activator.hold_timeout_s
        held, outcome = False, "gone"
        try:
            while True:
                conn = activator.connect(port) if not held or activator.upstream_up(port) else None
                if conn is not None:
                    try:
                        resp = self._send(conn, body)
                    except OSError as exc:
                        # Closed before any answer (a replica still starting, its accept queue full): not served,
                        # so hold it again (sent again: an inference request changes nothing).
                        log.info("upstream closed %s %s before answering (%s); holding it", self.command, self.path, exc)
                        conn.close()
                    else:
                        reservation.release()  # the replica has the body: it no longer counts against the budget
                        del body
                        if held:
                            outcome, held = "forwarded", False
                            activator.held.leave(outcome)
                        try:
                            self._relay(resp)
                        finally:
                            conn.close()
                        return
                if not held:  # no replica: hold
                    if not activator.held.enter():
                        self._error(503, f"no serving replica, and {activator.held.limit} requests are already "
                                         "waiting; retry later")
                        return
                    held = True
                if time.monotonic() >= deadline:
                    outcome = "timeout"
                    self._error(503, f"no serving replica became ready within {activator.hold_timeout_s:g}s "
                                     "(the backend is scaling from zero, or cannot start: see its status)")
                    return
                if _client_gone(self.connection):
                    self.close_connection = True
                    return
                time.sleep(RETRY_INTERVAL_S)
        finally:
            if held:
                activator.held.leave(outcome)

    def _send(self, conn: http.client.HTTPConnection, body: bytearray) -> http.client.HTTPResponse:
        """Send the request; the response's status and headers. OSError: nothing was answered."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"}
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        if conn.sock is not None:
            conn.sock.settimeout(RESPONSE_TIMEOUT_S)
        return conn.getresponse()

    def _relay(self, resp: http.client.HTTPResponse) -> None:
        length = resp.getheader("Content-Length")
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        chunked = length is None and self.command != "HEAD" and resp.status not in (204, 304)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif length is not None:
            self.send_header("Content-Length", length)
        if resp.getheader("Connection", "").lower() == "close" and length is None and not chunked:
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        try:
            while True:
                data = resp.read1(65536)  # what has arrived: server-sent events go out as they come
                if not data:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except OSError:
            self.close_connection = True  # either side went away mid-response


class ProxyServer(http_body.BoundedServer):
    def __init__(self, address: tuple[str, int], activator: Activator, upstream_port: int, max_header_bytes: int,
                 header_timeout_s: float) -> None:
        self.activator = activator
        self.upstream_port = upstream_port
        super().__init__(address, ProxyHandler, activator.connections, max_header_bytes, header_timeout_s)


class MetricsHandler(http_body.BoundedHandler):
    server: MetricsServer

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:
        activator = self.server.activator
        if self.path == "/metrics":
            status, ctype, text = 200, "text/plain; version=0.0.4", activator.metrics_text()
        elif self.path in ("/healthz", "/readyz"):
            # Ready as soon as it can hold requests: the operator decides when the Service selects this pod.
            status, ctype, text = 200, "text/plain", "ok\n"
        elif self.path == "/upstream":
            up = {str(p): activator.upstream_reachable(p) for p in self.server.upstream_ports}
            status, ctype, text = 200, "application/json", json.dumps(up) + "\n"
        else:
            status, ctype, text = 404, "text/plain", "not found\n"
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class MetricsServer(http_body.BoundedServer):
    def __init__(self, address: tuple[str, int], activator: Activator, upstream_ports: list[int],
                 max_connections: int, max_header_bytes: int, header_timeout_s: float) -> None:
        self.activator = activator
        self.upstream_ports = upstream_ports
        super().__init__(address, MetricsHandler, http_body.Slots(max_connections), max_header_bytes,
                         header_timeout_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the pod's ports; tests pass a loopback IP
    ap.add_argument("--port", type=int, action="append", required=True,
                    help="a port to receive requests on, forwarded to the same port of --upstream (repeatable)")
    ap.add_argument("--upstream", required=True, help="host of the Service that selects only the serving pods")
    ap.add_argument("--metrics-port", type=int, required=True, help="/metrics, /readyz, /healthz, /upstream")
    ap.add_argument("--held-metric", required=True, help="name of the gauge of held requests")
    ap.add_argument("--hold-timeout", type=float, default=600.0, help="seconds a request waits for a replica")
    ap.add_argument("--max-held", type=int, default=1000, help="requests held at once; more get 503")
    # The body limits come from the renderer (render/activator.py), which sizes the pod's memory limit on them.
    ap.add_argument("--max-body-bytes", type=int, required=True, help="largest request body; larger get 413")
    ap.add_argument("--body-budget-bytes", type=int, required=True,
                    help="request bodies held at once, in bytes; beyond it 503 with Retry-After")
    http_body.add_head_arguments(ap, "connections on the proxied ports at once (held requests among them); more get 503")
    ap.add_argument("--max-metrics-connections", type=int, required=True,
                    help="connections on the metrics port at once; more get 503")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.body_budget_bytes < args.max_body_bytes:
        ap.error("--body-budget-bytes must hold at least one body of --max-body-bytes")
    if args.max_connections < args.max_held:
        ap.error("--max-connections must leave room for --max-held held requests")
    activator = Activator(args.upstream, args.hold_timeout, args.max_held, args.held_metric, args.max_body_bytes,
                          args.body_budget_bytes, args.max_connections)
    servers: list[http_body.BoundedServer] = [
        ProxyServer((args.host, p), activator, p, args.max_header_bytes, args.header_timeout) for p in args.port]
    servers.append(MetricsServer((args.host, args.metrics_port), activator, args.port, args.max_metrics_connections,
                                 args.max_header_bytes, args.header_timeout))
    for srv in servers[:-1]:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    log.info("holding requests on %s:%s for %s; metrics on :%d", args.host, args.port, args.upstream, args.metrics_port)
    try:
        servers[-1].serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
