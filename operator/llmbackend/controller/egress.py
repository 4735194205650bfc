"""Which outside endpoints backends may make the operator's parts talk to: the admin's allow-lists (operator
settings) and the pure check against them.

A tenant who may create LLMBackends chooses `source.endpoint` and `autoscaling.prometheus.url`. The operator
sends a Secret's credentials (source.secretRef) only to the default endpoints (the Hugging Face Hub, AWS S3)
and to the endpoints the admin listed (--model-endpoint, LLMBACKEND_MODEL_ENDPOINTS), and polls only the
Prometheus servers the admin listed (--prometheus-url, LLMBACKEND_PROMETHEUS_URLS). An entry is a URL; what
counts is its origin (scheme, host, port; `host:*` for any port). docs/security.md says why.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable

from ..model_fetch import HF_ENDPOINT

MODEL_ENDPOINTS_ENV = "LLMBACKEND_MODEL_ENDPOINTS"
PROMETHEUS_URLS_ENV = "LLMBACKEND_PROMETHEUS_URLS"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower().rstrip("."), port or _DEFAULT_PORTS[parts.scheme]


def allowed(url: str, allow_list: Iterable[str]) -> bool:
    """`url` has the origin of an entry of `allow_list` (an entry `scheme://host:*` allows any port of host)."""
    here = origin(url)
    if here is None:
        return False
    for entry in allow_list:
        any_port = entry.rstrip("/").endswith(":*")
        there = origin(entry.rstrip("/")[:-2] if any_port else entry)
        if there is not None and (there == here or (any_port and there[:2] == here[:2])):
            return True
    return False


def _from_env(name: str) -> tuple[str, ...]:
    return tuple(e for e in (os.environ.get(name) or "").replace(",", " ").split() if e)


class Settings:
    """The allow-lists of this operator process (run.py sets them from its flags; the environment otherwise)."""

    def __init__(self) -> None:
        self.model_endpoints: tuple[str, ...] = _from_env(MODEL_ENDPOINTS_ENV)
        self.prometheus_urls: tuple[str, ...] = _from_env(PROMETHEUS_URLS_ENV)

    def configure(self, model_endpoints: Iterable[str] | None = None, prometheus_urls: Iterable[str] | None = None) -> None:
        if model_endpoints is not None:
            self.model_endpoints = tuple(model_endpoints)
        if prometheus_urls is not None:
            self.prometheus_urls = tuple(prometheus_urls)

    def credentials_may_go_to(self, endpoint: str | None) -> bool:
        """A Secret's credentials may be sent to `endpoint` (None: the source's default endpoint)."""
        return endpoint is None or allowed(endpoint, (HF_ENDPOINT, *self.model_endpoints))

    def prometheus_allowed(self, url: str) -> bool:
        return allowed(url, self.prometheus_urls)


settings = Settings()
