"""The scripts under benchmarks/ (not a package), imported from their paths for the unit tests that hold their rules."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@functools.cache
def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module, executed once per test process (registered under ``name``, so that pickling
    and dataclasses find it)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
