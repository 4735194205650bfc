"""Which outside endpoints backends may make the operator's parts talk to: the admin's allow-lists (operator
settings) and the pure check against them.

A tenant who may create LLMBackends chooses `source.endpoint` and `autoscaling.prometheus.url`. The operator
sends a Secret's credentials (source.secretRef) only to the default endpoints (the Hugging Face Hub, AWS S3)
and to the endpoints the admin listed (--model-endpoint, LLMBACKEND_MODEL_ENDPOINTS), and polls only the
Prometheus servers the admin listed (--prometheus-url, LLMBACKEND_PROMETHEUS_URLS). An entry is a URL; what
counts is its origin (scheme, host, port; `host:*` for any port). There it runs only queries it wrote: the ratio
from the backend's pods, and the activation queries the admin named (--prometheus-query NAME=TEMPLATE,
LLMBACKEND_PROMETHEUS_QUERIES) filled in with the backend's namespace and name. docs/security.md says why.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from ..api.v1alpha1 import PROMETHEUS_QUERY_NAME_PATTERN, PrometheusSource
from ..model_fetch import HF_ENDPOINT
from ..render import promql

MODEL_ENDPOINTS_ENV = "LLMBACKEND_MODEL_ENDPOINTS"
PROMETHEUS_URLS_ENV = "LLMBACKEND_PROMETHEUS_URLS"
PROMETHEUS_QUERIES_ENV = "LLMBACKEND_PROMETHEUS_QUERIES"  # a JSON object: {"NAME": "TEMPLATE", ...}
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


def prometheus_queries(entries: Mapping[str, str]) -> dict[str, str]:
    """The admin's named activation queries, checked: a name a backend can spell, a template whose placeholders
    sit inside double-quoted strings. ValueError (the operator does not start) names what to fix."""
    out = {}
    for name, template in entries.items():
        if not isinstance(name, str) or not re.match(PROMETHEUS_QUERY_NAME_PATTERN, name) or len(name) > 63:
            raise ValueError(f"prometheus query name {name!r}: lower-case letters, digits and '-' (a DNS label)")
        if not isinstance(template, str) or not template.strip():
            raise ValueError(f"prometheus query {name}: the template is empty")
        error = promql.template_error(template)
        if error:
            raise ValueError(f"prometheus query {name}: {error}; write e.g. "
                             'sum(my_queue{namespace="{namespace}",pool="{backend}"})')
        out[name] = template
    return out


def parse_query_flags(flags: Iterable[str]) -> dict[str, str]:
    """`NAME=TEMPLATE` flags as a mapping (ValueError on one without `=`)."""
    entries = {}
    for flag in flags:
        name, sep, template = flag.partition("=")
        if not sep:
            raise ValueError(f"--prometheus-query {flag!r}: write NAME=TEMPLATE")
        entries[name.strip()] = template
    return prometheus_queries(entries)


def _queries_from_env() -> dict[str, str]:
    raw = (os.environ.get(PROMETHEUS_QUERIES_ENV) or "").strip()
    if not raw:
        return {}
    entries = json.loads(raw)
    if not isinstance(entries, dict):
        raise ValueError(f"{PROMETHEUS_QUERIES_ENV}: a JSON object of NAME: TEMPLATE")
    return prometheus_queries(entries)


def query_refusal(prom: PrometheusSource, queries: Mapping[str, str]) -> str | None:
    """Why the operator runs no query for this spec (status.autoscaling's PrometheusQueryNotAllowed), or None.

    A stored backend may still carry the removed free-form fields (the CRD refuses them on create and edit): they are
    never run, and the backend waits until they are deleted rather than scale on a signal its author did not ask for.
    """
    removed = prom.removed_fields_set
    if removed:
        fields = " and ".join(f"autoscaling.prometheus.{f}" for f in removed)
        return (f"{fields}: PromQL written in a backend is no longer run on a shared Prometheus, so replicas are held; "
                "delete the field (the ratio query is built from this backend's pods; for scale from zero set "
                "activationQueryName to a query the cluster admin allows)")
    name = prom.activation_query_name
    if name is not None and name not in queries:
        known = ", ".join(sorted(queries)) or "none"
        return (f"autoscaling.prometheus.activationQueryName {name} is not a query the cluster admin allows "
                f"(allowed: {known}), so replicas are held; use one of them or ask the admin to add it "
                f"(operator flag --prometheus-query NAME=TEMPLATE, or {PROMETHEUS_QUERIES_ENV})")
    return None


class Settings:
    """The allow-lists of this operator process (run.py sets them from its flags; the environment otherwise)."""

    def __init__(self) -> None:
        self.model_endpoints: tuple[str, ...] = _from_env(MODEL_ENDPOINTS_ENV)
        self.prometheus_urls: tuple[str, ...] = _from_env(PROMETHEUS_URLS_ENV)
        self.prometheus_queries: dict[str, str] = {}  # configure() reads them: a bad one stops the start, not import

    def configure(self, model_endpoints: Iterable[str] | None = None, prometheus_urls: Iterable[str] | None = None,
                  prometheus_queries: Iterable[str] | None = None) -> None:
        """From the operator's flags; a list not given comes from its environment variable."""
        if model_endpoints is not None:
            self.model_endpoints = tuple(model_endpoints)
        if prometheus_urls is not None:
            self.prometheus_urls = tuple(prometheus_urls)
        self.prometheus_queries = (parse_query_flags(prometheus_queries) if prometheus_queries is not None
                                   else _queries_from_env())

    def credentials_may_go_to(self, endpoint: str | None) -> bool:
        """A Secret's credentials may be sent to `endpoint` (None: the source's default endpoint)."""
        return endpoint is None or allowed(endpoint, (HF_ENDPOINT, *self.model_endpoints))

    def prometheus_allowed(self, url: str) -> bool:
        return allowed(url, self.prometheus_urls)

    def activation_query(self, prom: PrometheusSource, namespace: str, backend: str) -> str | None:
        """The admin's template named by the spec, filled in for this backend; None without one (or one not allowed:
        query_refusal says so)."""
        template = self.prometheus_queries.get(prom.activation_query_name or "")
        return promql.fill(template, namespace, backend) if template else None


settings = Settings()
