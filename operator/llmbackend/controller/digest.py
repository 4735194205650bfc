"""Digests: of whole objects (the applied and template hashes) and of ConfigMap data, the form the watch caches keep
(pure; imported by the caches and by decide)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Marks summarized data (a "/" cannot occur in a real ConfigMap data key); its value names the form.
DATA_DIGEST_KEY = "llmbackend.dev/sha256"
_FORM = "per-key"


def object_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _digest(value: Any) -> str:
    return hashlib.sha256(str(value).encode()).hexdigest()[:32]


def summarize_data(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with each value of its ConfigMap ``data`` replaced by a digest. The watch caches keep ConfigMaps this way
    (a backend's model repository is ~50 KB that the reconciler only compares, never reads); ``_up_to_date`` compares
    desired ConfigMaps in the same form. Per key, so that a key someone else added is ignored (we compare the keys we
    write), as for an object read in full. Idempotent."""
    data = obj.get("data")
    if not isinstance(data, dict) or data.get(DATA_DIGEST_KEY) == _FORM:
        return obj
    return {**obj, "data": {DATA_DIGEST_KEY: _FORM, **{key: _digest(value) for key, value in data.items()}}}


def is_summarized(obj: dict[str, Any]) -> bool:
    return isinstance(obj.get("data"), dict) and obj["data"].get(DATA_DIGEST_KEY) == _FORM
