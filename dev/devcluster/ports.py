"""Free TCP ports for the servers that tests, benchmarks and the local control plane start.

A port the kernel calls free now is handed to a server that binds it seconds later. In between, any outgoing
connection on the machine may get it as its source port: the kernel picks those from its ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), the same range a bind to port 0 draws from. CI saw it happen: mpirun's own
connections took the port a launch test had picked ("Address already in use"). A port below the ephemeral range is
never given out that way, so one that is free when picked can only be taken by another explicit bind. That is where
these ports come from.
"""

from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)  # Linux's default
LOWEST_PORT = 10000  # well clear of the registered services below it
_ATTEMPTS_PER_PORT = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            low, high = (int(v) for v in f.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now, below the ephemeral range where it leaves room."""
    low, _ = ephemeral_range()
    rng = random.SystemRandom()
    held: list[socket.socket] = []
    try:
        for _ in range(count * _ATTEMPTS_PER_PORT):
            if len(held) == count:
                break
            port = rng.randint(LOWEST_PORT, low - 1) if low - 1 > LOWEST_PORT else 0
            s = socket.socket()
            try:
                s.bind((host, port))  # no SO_REUSEADDR: a port with connections in TIME_WAIT is skipped too
            except OSError:
                s.close()
                continue
            held.append(s)
        while len(held) < count:  # no room below the range: the kernel's pick
            s = socket.socket()
            s.bind((host, 0))
            held.append(s)
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
