"""Shared fixtures for the real-Triton tests (marked ``triton``)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("pytriton") is None:
        skip = pytest.mark.skip(reason="nvidia-pytriton is not installed (pip install nvidia-pytriton)")
        for item in items:
            if "triton" in item.keywords:
                item.add_marker(skip)
