"""devcluster.ports: the ports servers in tests are started on, out of reach of outgoing connections."""

from __future__ import annotations

import socket

from devcluster import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low, _ = ports.ephemeral_range()
    chosen = ports.free_ports(6)
    assert len(set(chosen)) == 6
    assert all(ports.LOWEST_PORT <= p < low for p in chosen), "outgoing connections never get these as source ports"
    for p in chosen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # free when handed out


def test_a_taken_port_is_never_handed_out(monkeypatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (busy + 1, 60999))
        monkeypatch.setattr(ports, "LOWEST_PORT", busy - 1)
        assert busy not in ports.free_ports(1), "the one other candidate is busy"


def test_without_room_below_the_range_the_kernel_picks(monkeypatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    p = ports.free_port()
    assert p >= 1024


def test_the_range_is_read_from_the_kernel_or_defaults(monkeypatch, tmp_path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(f))
    assert ports.ephemeral_range() == (40000, 50000)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(tmp_path / "absent"))
    assert ports.ephemeral_range() == ports.DEFAULT_EPHEMERAL_RANGE
