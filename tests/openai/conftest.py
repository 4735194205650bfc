"""Fixtures for the OpenAI endpoint tests: a real tritonserver and the frontend process."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config, items):
    missing = [m for m in ("pytriton", "openai", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        skip = pytest.mark.skip(reason=f"not installed: {', '.join(missing)} (pip install -e '.[test]')")
        for item in items:
            if "triton" in item.keywords:
                item.add_marker(skip)
