"""`make test` collects every test directory in one pytest run without packages (rootdir-relative basenames):
two test files with the same name in different directories stop the whole run at collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_file_names_are_unique_across_directories():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
