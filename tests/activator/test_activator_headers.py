"""Request heads and connections at the activator, the program as its pod runs it (the file alone, its own process,
the rendered arguments): the attacker's probes of the standard library's limits (98 header lines of 65,000 bytes,
stalled or complete and held while no replica is up) are refused, stalled heads are closed within the deadline,
connections over the cap get 503 at once, and the peak memory stays inside the rendered limit with every held
request and connection at its cap (docs/security.md, "Request heads and connections")."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
from hostile_http import (  # noqa: E402
    CROWD_AT_ONCE_S,
    attack_head,
    head_lines,
    memory_kib,
    open_head,
    quantity_bytes,
    wait_all_closed,
)
from test_activator_bodies import activator_process  # noqa: E402
from test_activator_process import LISTEN, metric, post, upstream, wait_for  # noqa: E402

from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC as HELD  # noqa: E402
from llmbackend.render import activator as rendered  # noqa: E402

LIMIT = quantity_bytes(rendered.MEMORY_LIMIT)
DEADLINE_S = rendered.HEADER_TIMEOUT_S
UNDER_CAP = head_lines(rendered.MAX_HEADER_BYTES - 1024)  # a head as large as the cap lets through
ATTACKERS = 40  # the report's: 40 stalled connections took the activator from 22 to 268 MiB (limit 224Mi)
STALLED = 200


def test_oversized_and_stalled_heads_are_closed_within_the_deadline_while_requests_are_served():
    """Before: the attacker's 40 stalled heads of 98 x 65,000 bytes were read whole and held forever (268 MiB)."""
    with activator_process() as (proc, port, _), upstream(port):
        since = time.monotonic()
        oversized = [attack_head(LISTEN, port) for _ in range(ATTACKERS)]
        stalled = [open_head(LISTEN, port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", UNDER_CAP)
                   for _ in range(STALLED)]
        opened_s = time.monotonic() - since  # each head's deadline counts from its own connection
        status, body = post(port, "/v1/completions", b'{"prompt": "meanwhile"}')  # served beside them
        assert status == 200 and b"meanwhile" in body, body
        closed = wait_all_closed(oversized + stalled, since, DEADLINE_S + 10)
        peak = memory_kib(proc.pid)["VmHWM"] << 10
    late = max(c.seconds for c in closed[ATTACKERS:])
    print(f"activator: {ATTACKERS} oversized heads answered in {max(c.seconds for c in closed[:ATTACKERS]):.1f}s, "
          f"{STALLED} stalled ones closed by {late:.1f}s; peak {peak >> 20} MiB, rendered limit {LIMIT >> 20} MiB")
    assert all(c.status == 431 and c.seconds < CROWD_AT_ONCE_S for c in closed[:ATTACKERS]), closed[:ATTACKERS]
    assert all(c.status == 408 for c in closed[ATTACKERS:]), [c for c in closed[ATTACKERS:] if c.status != 408]
    assert DEADLINE_S - 1 <= late <= opened_s + DEADLINE_S + 3, f"stalled heads closed after {late:.1f}s"
    assert peak <= LIMIT, f"peak {peak >> 20} MiB over the rendered limit {LIMIT >> 20} MiB"


def test_held_requests_and_connections_at_their_caps_stay_inside_the_rendered_limit():
    """Before: 40 complete GETs with the attacker's headers, held while no replica was up, took 613 MiB (limit
    224Mi) and the body budget saw nothing. Now such a head is refused (431); MAX_HELD requests with heads at the cap
    are held and MAX_CONNECTIONS connections open, one more connection gets 503 with Retry-After at once, the peak
    stays under the rendered limit, and the held requests are forwarded once a replica comes, headers and all."""
    with activator_process() as (proc, port, metrics_url):  # no replica: complete requests are held
        since = time.monotonic()
        probes = wait_all_closed([attack_head(LISTEN, port, "GET", finish=True) for _ in range(ATTACKERS)], since, 20)
        assert all(c.status == 431 and c.seconds < CROWD_AT_ONCE_S for c in probes), probes
        held = [open_head(LISTEN, port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", UNDER_CAP, finish=True)
                for _ in range(rendered.MAX_HELD)]
        wait_for(lambda: metric(metrics_url, HELD) == rendered.MAX_HELD, "every request held", 120)
        stalled = [open_head(LISTEN, port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", UNDER_CAP)
                   for _ in range(rendered.MAX_CONNECTIONS - rendered.MAX_HELD)]
        wait_for(lambda: metric(metrics_url, f"{HELD}_connections") == rendered.MAX_CONNECTIONS, "the cap reached")
        since = time.monotonic()
        over = wait_all_closed([open_head(LISTEN, port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", b"", finish=True)
                                for _ in range(20)], since, 10)
        assert all(c.status == 503 and b"retry-after: 2" in c.head.lower() and c.seconds < CROWD_AT_ONCE_S for c in over), over
        assert metric(metrics_url, f"{HELD}_connections_refused_total") == 20
        peak = memory_kib(proc.pid)["VmHWM"] << 10
        with upstream(port):  # a replica comes: every held request is forwarded, its long headers with it
            wait_for(lambda: metric(metrics_url, f"{HELD}_forwarded_total") == rendered.MAX_HELD, "held forwarded", 120)
        peak = max(peak, memory_kib(proc.pid)["VmHWM"] << 10)
        for sock in held + stalled:
            sock.close()
    print(f"activator: peak {peak >> 20} MiB with {rendered.MAX_HELD} held requests and "
          f"{rendered.MAX_CONNECTIONS} connections, heads of {len(UNDER_CAP) >> 10} KiB; "
          f"rendered limit {LIMIT >> 20} MiB")
    assert peak <= LIMIT, f"peak {peak >> 20} MiB over the rendered limit {LIMIT >> 20} MiB"
