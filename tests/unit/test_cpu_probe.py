"""The CPU probes' yardstick (cpu_probe.quiet_cpu_s): a slow machine scales a reading down, never the code's own work."""

from __future__ import annotations

import cpu_probe
import pytest

_REFERENCE = cpu_probe._reference  # the work measured, kept apart from the yardstick a test swaps


def _work(times: int) -> None:
    for _ in range(times):
        _REFERENCE()


def test_work_reads_in_proportion_to_itself():
    """Ten references' worth of work reads as several times one: the yardstick does not hide a cost that grows."""
    one, ten = cpu_probe.quiet_cpu_s(lambda: _work(1)), cpu_probe.quiet_cpu_s(lambda: _work(10))
    assert ten > 5 * one, (one, ten)


def test_a_slower_reference_scales_the_reading_down_and_a_faster_one_never_up(monkeypatch: pytest.MonkeyPatch):
    """The machine reads as 3x slower (the reference takes 3x its quiet time): the same work reads a third. A machine
    faster than the quiet figure reads the code's own CPU."""
    monkeypatch.setattr(cpu_probe, "REFERENCE_QUIET_S", 1e-9)  # every machine "slower": scaled to (almost) nothing
    assert cpu_probe.quiet_cpu_s(lambda: _work(3)) < 1e-3
    monkeypatch.setattr(cpu_probe, "REFERENCE_QUIET_S", 1e3)  # every machine "faster": never scaled up
    plain = cpu_probe.quiet_cpu_s(lambda: _work(3))
    assert plain < 1.0  # ~36 ms of work: not multiplied by how much faster than the figure this machine reads
    monkeypatch.setattr(cpu_probe, "REFERENCE_QUIET_S", min(cpu_probe._cpu_s(_REFERENCE) for _ in range(3)))
    monkeypatch.setattr(cpu_probe, "_reference", lambda: _work(3))  # the yardstick now takes 3x its quiet time
    slowed = cpu_probe.quiet_cpu_s(lambda: _work(3))
    assert slowed < 0.7 * plain, (plain, slowed)
