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
    faster than the quiet figure reads the code's own CPU. On a fixed clock (CI read this on the real one beside 5
    workers: a quiet figure taken at one load and references run at another made the third 0.85 of the work)."""
    work = object()

    def cpu_s(fn):
        return {cpu_probe._reference: reference_s}.get(fn, 0.030)
    monkeypatch.setattr(cpu_probe, "_cpu_s", cpu_s)
    monkeypatch.setattr(cpu_probe, "REFERENCE_QUIET_S", 0.012)
    reference_s = 3 * 0.012  # 3x slower: the work reads a third
    assert cpu_probe.quiet_cpu_s(work) == pytest.approx(0.010)
    reference_s = 0.012 / 2  # faster than the figure: the work's own CPU, never scaled up
    assert cpu_probe.quiet_cpu_s(work) == pytest.approx(0.030)
    # and on the real clock, a yardstick that takes far longer than its quiet figure scales to (almost) nothing
    monkeypatch.undo()
    monkeypatch.setattr(cpu_probe, "REFERENCE_QUIET_S", 1e-9)
    assert cpu_probe.quiet_cpu_s(lambda: _work(3)) < 1e-3
