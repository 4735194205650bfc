"""The 0 -> 1 signal of a backend with the activator: how many requests its activator pods hold.

The activator (serving/activator.py) exports the gauge api/engine_metrics.ACTIVATOR_HELD_METRIC on its metrics port.
While the backend has no replica the autoscaler loop reads it from each Ready activator pod and passes the sum to
decide() as ``waiting_at_zero``. Errors read as None (no signal): the backend stays where it is, nothing raises.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

from ..api.engine_metrics import ACTIVATOR_HELD_METRIC
from . import http_get
from .sources import MAX_METRICS_BYTES, MAX_READS_PER_SCRAPE, metrics_address


def parse_held(text: str, name: str = ACTIVATOR_HELD_METRIC) -> float | None:
    """The gauge's value in Prometheus text (summed over label sets); None when absent or not a finite number."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest[:1] == "{":
            rest = rest[rest.find("}") + 1:] if "}" in rest else ""
        elif rest[:1] not in (" ", "\t"):
            continue  # another metric whose name starts with this one (e.g. ..._timed_out_total)
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if not math.isfinite(value) or value < 0:
            continue
        total, seen = total + value, True
    return total if seen else None


async def held_requests(addresses: Mapping[str, str], port: int, timeout_s: float = 2.0) -> float | None:
    """Sum of the held requests over the activator pods (`{pod: ip}`); None when no pod answered."""

    async def one(ip: str) -> float | None:
        body: list[bytes] = []

        def keep(chunk: bytes) -> bool:
            body.append(chunk)
            return True

        try:
            async with asyncio.timeout(timeout_s):  # as the engine scrape: that pod, every read counted, capped
                await http_get.get(*metrics_address(ip, port), "/metrics", keep,
                                   max_body=MAX_METRICS_BYTES, max_reads=MAX_READS_PER_SCRAPE)
        except Exception:  # noqa: BLE001 - an unreachable activator is "no signal", never a crash
            return None
        return parse_held(b"".join(body).decode(errors="replace"))

    values = [v for v in await asyncio.gather(*(one(ip) for ip in addresses.values())) if v is not None]
    return sum(values) if values else None
