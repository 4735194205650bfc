"""The admin's allow-lists of outside endpoints (controller/egress.py): what counts is the origin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from llmbackend.controller import egress


@pytest.mark.parametrize("url,allow_list,want", [
    ("http://prometheus.monitoring:9090", ["http://prometheus.monitoring:9090"], True),
    ("http://prometheus.monitoring:9090/api/v1", ["http://prometheus.monitoring:9090/"], True),
    ("http://PROMETHEUS.monitoring:9090", ["http://prometheus.monitoring:9090"], True),
    ("https://huggingface.co/", ["https://huggingface.co:443"], True),
    ("http://prometheus.monitoring:9091", ["http://prometheus.monitoring:9090"], False),
    ("https://prometheus.monitoring:9090", ["http://prometheus.monitoring:9090"], False),
    ("http://prometheus.monitoring.evil:9090", ["http://prometheus.monitoring:9090"], False),
    ("http://user@prometheus.monitoring:9090@evil:80", ["http://prometheus.monitoring:9090"], False),
    ("http://127.0.0.1:41234", ["http://127.0.0.1:*"], True),
    ("http://127.0.0.2:41234", ["http://127.0.0.1:*"], False),
    ("http://127.0.0.1:41234", [], False),
    ("ftp://127.0.0.1", ["ftp://127.0.0.1"], False),
    ("http://x:notaport", ["http://x"], False),
])
def test_allowed(url, allow_list, want) -> None:
    assert egress.allowed(url, allow_list) is want


def test_settings_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(egress.MODEL_ENDPOINTS_ENV, "http://minio.storage:9000, https://hub.mirror")
    monkeypatch.setenv(egress.PROMETHEUS_URLS_ENV, "http://prometheus.monitoring:9090")
    settings = egress.Settings()
    assert settings.credentials_may_go_to("https://hub.mirror/") and settings.credentials_may_go_to(None)
    assert not settings.credentials_may_go_to("https://other.mirror")
    assert settings.prometheus_allowed("http://prometheus.monitoring:9090")
    settings.configure(prometheus_urls=[])
    assert not settings.prometheus_allowed("http://prometheus.monitoring:9090")


def test_keda_gets_no_scaled_object_for_a_prometheus_not_allowed() -> None:
    """mode keda: KEDA, not the operator, polls the URL; the operator renders no ScaledObject that names one the
    admin did not allow (an existing one is pruned: it is no longer desired)."""
    from test_decide import MODEL, NODES, backend, conditions, first_pass

    from llmbackend.api import conditions as cond
    from llmbackend.controller.decide import Observed, decide

    spec = {"model": MODEL, "autoscaling": {"enabled": True, "mode": "keda",
                                            "prometheus": {"url": "http://prometheus.monitoring:9090"}}}
    apis = frozenset({"ScaledObject", "PrometheusRule"})

    def wanted(urls):
        return {kind for kind, _ in decide(Observed(backend(spec), NODES, apis=apis, prometheus_urls=urls)).look_up}

    assert "ScaledObject" in wanted(("http://prometheus.monitoring:9090",))
    assert "ScaledObject" not in wanted(())
    refused = first_pass(spec, apis=apis, prometheus_urls=())
    assert conditions(refused)["Degraded"] == ("True", cond.PROMETHEUS_NOT_ALLOWED)
    assert "--prometheus-url" in refused.conditions.get("Degraded")["message"]
    assert all(child["kind"] != "ScaledObject" for child in refused.apply)


def test_only_the_cli_reads_a_source_and_the_operator_never_imports_it():
    """model_fetch.read_checkpoint calls the source's endpoint: only `llmbackend plan/render` (controller/preview.py,
    on a user's machine) may use it, and the operator process (controller/run.py) must not import that module."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "operator" / "llmbackend"
    callers = {p.relative_to(package).as_posix() for p in package.rglob("*.py")
               if "read_checkpoint" in p.read_text() and p.name != "model_fetch.py"}
    assert callers == {"controller/preview.py"}
    operator_imports = {node.module for node in ast.walk(ast.parse((package / "controller/run.py").read_text()))
                        if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(m.endswith("preview") for m in operator_imports)


def _crd_pattern(*path: str) -> re.Pattern[str]:
    """The pattern the API server holds a URL field to (the CRD generated from api/v1alpha1.py)."""
    crd = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds/llmbackend.yaml").read_text())
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for key in path:
        node = node["properties"][key]
    return re.compile(node["pattern"])


# Issue 42's held probes (a tenant's look-alikes of an allowed origin: userinfo, trailing dots, prefixes and suffixes,
# ports, IDN, encodings): each is refused by the CRD's pattern or is not allowed, so no Secret goes there and no
# query runs there. The trailing-dot spelling of an allowed host names that host and is allowed as it.
ADMIN_MIRROR = "http://minio.storage:9000"
MODEL_ENDPOINT_LOOK_ALIKES = [
    "https://huggingface.co.evil.example", "https://huggingface.co.evil.example.", "https://evilhuggingface.co",
    "https://huggingface.com", "https://hugging-face.co", "https://cdn-lfs.huggingface.co",
    "https://evil.example/huggingface.co", "https://huggingface.co@evil.example", "https://evil.example@huggingface.co",
    "https://huggingface.co\\@evil.example", "https://huggingface.co%2eevil.example", "https://huggingfаce.co",
    "https://xn--huggingfce-7ze.co", "https://huggingface.co:8443", "http://huggingface.co",
    "http://minio.storage:9000.evil.example", "http://minio.storage.evil:9000", "http://minio.storage",
    "https://minio.storage:9000", "http://minio.storage:9000@evil.example", "http://[::1]:9000",
    "http://2130706433:9000", "http://minio.storage:90000",
]
PROMETHEUS = "http://prometheus.monitoring:9090"
PROMETHEUS_LOOK_ALIKES = [
    "http://user@prometheus.monitoring:9090", "http://prometheus.monitoring:9090@evil:80",
    "http://prometheus.monitoring.evil:9090", "http://prometheus.monitoring.evil.:9090",
    "http://evil-prometheus.monitoring:9090", "http://prometheus.monitoring:9091", "http://prometheus.monitoring",
    "https://prometheus.monitoring:9090", "http://prometheus.xn--monitrng-lwa:9090", "http://prometheus.monitorıng:9090",
    "http://prometheus.monitoring:99999",
]


@pytest.mark.parametrize("endpoint", MODEL_ENDPOINT_LOOK_ALIKES)
def test_a_look_alike_model_endpoint_is_neither_admitted_nor_given_credentials(endpoint) -> None:
    admitted = _crd_pattern("model", "source", "endpoint").match(endpoint) is not None
    settings = egress.Settings()
    settings.configure(model_endpoints=[ADMIN_MIRROR], prometheus_urls=[])
    assert not (admitted and settings.credentials_may_go_to(endpoint))
    assert settings.credentials_may_go_to("https://huggingface.co.") and settings.credentials_may_go_to(ADMIN_MIRROR)


@pytest.mark.parametrize("url", PROMETHEUS_LOOK_ALIKES)
def test_a_look_alike_prometheus_url_is_neither_admitted_nor_polled(url) -> None:
    admitted = _crd_pattern("autoscaling", "prometheus", "url").match(url) is not None
    settings = egress.Settings()
    settings.configure(model_endpoints=[], prometheus_urls=[PROMETHEUS])
    assert not (admitted and settings.prometheus_allowed(url))
    assert settings.prometheus_allowed(PROMETHEUS + "/")
