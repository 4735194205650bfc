"""docs/monitoring.md's metrics reference is the one generated from the operator's registry and
api/engine_metrics.py (UPDATE_DOCS=1 rewrites it; review the diff)."""

from __future__ import annotations

import os
from pathlib import Path

from llmbackend.autoscaling.metrics import reference_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"
BEGIN, END = "<!-- metrics-reference:begin -->\n", "<!-- metrics-reference:end -->"


def test_metrics_reference_is_generated() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN)
    body, tail = rest.split(END)
    if os.environ.get("UPDATE_DOCS") == "1":
        DOC.write_text(head + BEGIN + reference_markdown() + END + tail)
        body = reference_markdown()
    assert body == reference_markdown(), "docs/monitoring.md's metrics reference drifted (UPDATE_DOCS=1 to regenerate)"


def test_every_exported_series_is_documented() -> None:
    from llmbackend.api.engine_metrics import SERVED_SERIES
    from llmbackend.autoscaling.metrics import operator_series

    reference = reference_markdown()
    for name in [n for n, *_ in operator_series()] + list(SERVED_SERIES):
        assert f"| `{name}` |" in reference, name
