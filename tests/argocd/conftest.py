import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from argocd_health import ensure_binary  # noqa: E402


@pytest.fixture(scope="session")
def argocd_health_binary():
    """Argo CD's health evaluator, built from the Go module proxy once (cached in ~/.cache/llmbackend)."""
    return ensure_binary()
