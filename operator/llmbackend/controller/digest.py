"""ConfigMap data as one digest, the form the watch caches keep (pure; imported by the caches and by decide)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The key of the digest: a "/" cannot occur in a real ConfigMap data key.
DATA_DIGEST_KEY = "llmbackend.dev/sha256"


def summarize_data(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its ConfigMap ``data`` as one digest. The watch caches keep ConfigMaps this way (a backend's model
    repository is ~50 KB that the reconciler only compares, never reads); ``_up_to_date`` compares desired
    ConfigMaps in the same form. Idempotent."""
    data = obj.get("data")
    if not isinstance(data, dict) or set(data) == {DATA_DIGEST_KEY}:
        return obj
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {**obj, "data": {DATA_DIGEST_KEY: digest}}
