"""Request heads and connections at the OpenAI frontend, the program as the serving pod runs it (the ConfigMap's
two files alone, its own process, the rendered container's arguments): the attacker's probe of the standard
library's limits (98 header lines of 65,000 bytes, stalled) is refused, stalled heads are closed within the
deadline, connections over the cap get 503 at once, a normal request is served meanwhile, and the peak memory stays
inside the rendered limit with every connection at its cap (docs/security.md, "Request heads and connections")."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "triton")]
from harness import http_get  # noqa: E402
from hostile_http import (  # noqa: E402
    CROWD_AT_ONCE_S,
    attack_head,
    head_lines,
    memory_kib,
    open_head,
    quantity_bytes,
    wait_all_closed,
)
from test_openai_bodies import HOST, frontend_process  # noqa: E402

from llmbackend.render import openai as rendered  # noqa: E402

LIMIT = quantity_bytes(rendered.MEMORY_LIMIT)
DEADLINE_S = rendered.HEADER_TIMEOUT_S
UNDER_CAP = head_lines(rendered.MAX_HEADER_BYTES - 1024)  # a head as large as the cap lets through
ATTACKERS = 170  # the report's: 170 stalled connections took the frontend from 23 to 1,065 MiB (limit 960Mi)
REQUEST_LINE = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"


def _models(port: int) -> int:
    status, _ = http_get(f"http://{HOST}:{port}/v1/models")
    return status


def test_oversized_and_stalled_heads_are_closed_within_the_deadline_while_requests_are_served(tmp_path):
    """Before: the attacker's stalled heads of 98 x 65,000 bytes were read whole and held forever."""
    stalled_count = 200
    with frontend_process(tmp_path) as (proc, port):
        since = time.monotonic()
        oversized = [attack_head(HOST, port) for _ in range(ATTACKERS)]
        stalled = [open_head(HOST, port, REQUEST_LINE, UNDER_CAP) for _ in range(stalled_count)]
        opened_s = time.monotonic() - since  # each head's deadline counts from its own connection
        assert _models(port) == 200  # served beside them
        closed = wait_all_closed(oversized + stalled, since, DEADLINE_S + 10)
        peak = memory_kib(proc.pid)["VmHWM"] << 10
    late = max(c.seconds for c in closed[ATTACKERS:])
    print(f"openai frontend: {ATTACKERS} oversized heads answered in "
          f"{max(c.seconds for c in closed[:ATTACKERS]):.1f}s, {stalled_count} stalled ones closed by {late:.1f}s; "
          f"peak {peak >> 20} MiB, rendered limit {LIMIT >> 20} MiB")
    assert all(c.status == 431 and c.seconds < CROWD_AT_ONCE_S for c in closed[:ATTACKERS]), closed[:ATTACKERS]
    assert all(c.status == 408 for c in closed[ATTACKERS:]), [c for c in closed[ATTACKERS:] if c.status != 408]
    assert DEADLINE_S - 1 <= late <= opened_s + DEADLINE_S + 3, f"stalled heads closed after {late:.1f}s"
    assert peak <= LIMIT, f"peak {peak >> 20} MiB over the rendered limit {LIMIT >> 20} MiB"


def test_connections_at_the_cap_stay_inside_the_rendered_limit_and_more_get_503_at_once(tmp_path):
    """MAX_CONNECTIONS heads at the cap, stalled: one more connection gets 503 with Retry-After at once (no thread
    for it), the peak stays under the rendered limit, and once the deadline has closed them requests are served."""
    with frontend_process(tmp_path) as (proc, port):
        since = time.monotonic()
        stalled = [open_head(HOST, port, REQUEST_LINE, UNDER_CAP) for _ in range(rendered.MAX_CONNECTIONS)]
        opened_s = time.monotonic() - since  # each head's deadline counts from its own connection
        time.sleep(1)  # every head read as far as it goes
        over = wait_all_closed([open_head(HOST, port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", b"", finish=True)
                                for _ in range(20)], time.monotonic(), 10)
        assert all(c.status == 503 and b"retry-after: 2" in c.head.lower() and c.seconds < CROWD_AT_ONCE_S for c in over), over
        closed = wait_all_closed(stalled, since, DEADLINE_S + 10)
        assert _models(port) == 200
        peak = memory_kib(proc.pid)["VmHWM"] << 10
    print(f"openai frontend: peak {peak >> 20} MiB with {rendered.MAX_CONNECTIONS} connections, heads of "
          f"{len(UNDER_CAP) >> 10} KiB; rendered limit {LIMIT >> 20} MiB")
    late = [c for c in closed if c.status != 408 or c.seconds > opened_s + DEADLINE_S + 3]
    assert not late, f"{len(late)} of {len(closed)} not closed with 408 by {opened_s + DEADLINE_S + 3:.1f}s: {late[:5]}"
    assert peak <= LIMIT, f"peak {peak >> 20} MiB over the rendered limit {LIMIT >> 20} MiB"
