"""The PromQL the operator writes (render/promql.py) and what it refuses to run (controller/egress.py): no query a
tenant writes reaches a Prometheus; label values the operator fills in cannot leave their string."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import PrometheusSource
from llmbackend.controller import egress
from llmbackend.render import promql
from llmbackend.render.hpa import default_query
from llmbackend.render.keda import trigger_query

HOSTILE = ['a"b', "a\\b", "a\nb", "a}b", '"}) or vector(1) or x{y="', "\\", 'a\\"}', "\r\t\x00\x7f\x85\u2028", "é✓😀", ""]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_label_value_stays_inside_its_string(value):
    escaped = promql.string(value)
    assert escaped.isprintable()
    # PromQL's double-quoted strings take Go's escapes, of which JSON's are a subset: the value reads back whole.
    assert json.loads(f'"{escaped}"') == value
    # No unescaped quote: the string ends where the operator closes it.
    unescaped_quotes = [i for i, c in enumerate(escaped) if c == '"' and (len(escaped[:i]) - len(escaped[:i].rstrip("\\"))) % 2 == 0]
    assert unescaped_quotes == []


@pytest.mark.parametrize("value", HOSTILE)
def test_the_ratio_and_keda_queries_quote_the_namespace(value):
    query = default_query(value, "p-[0-9]+")
    assert query.startswith('llmbackend:engine_queue_compute:ratio{namespace="' + promql.string(value) + '",pod=~"')
    assert promql.string(value) in trigger_query(value, "Deployment", "llama")


def test_promtool_parses_what_the_operator_writes(tmp_path):
    """The real PromQL parser (Debian's promtool) reads every query with a hostile value as one selector."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found: apt-get install -y prometheus (Debian)")
    template = 'sum(queue{namespace="{namespace}",pool="{backend}"})'
    exprs = [default_query(v, "p-[0-9]+") for v in HOSTILE] + [promql.fill(template, v, v) for v in HOSTILE]
    rules = {"groups": [{"name": "g", "rules": [{"record": f"r{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("template,error", [
    ('sum(q{namespace="{namespace}",pool="{backend}"})', None),
    ('sum(q{pool=~"{backend}-.*"}) or on() vector(0)', None),
    ('sum(q{namespace="x"}) / {namespace}', "outside a double-quoted string"),
    ("sum(q{namespace='{namespace}'})", "double quotes"),
    ("sum(q{namespace=`{namespace}`})", "double quotes"),
    ('sum(q{namespace="{namespace}})', "unterminated"),
    ('sum(q{a="\\"",b={backend}})', "outside a double-quoted string"),
])
def test_a_template_fills_placeholders_only_inside_strings(template, error):
    found = promql.template_error(template)
    assert (found is None) if error is None else (error in found)


def test_fill_replaces_only_the_two_placeholders():
    template = 'sum(q{namespace="{namespace}",pool="{backend}",x="{other}"}) by (pool)'
    assert promql.fill(template, 'team"a', "llama\n") == 'sum(q{namespace="team\\"a",pool="llama\\n",x="{other}"}) by (pool)'


def test_the_admins_queries_are_checked_when_the_operator_starts(monkeypatch):
    good = 'sum(q{namespace="{namespace}"})'
    assert egress.parse_query_flags([f"gateway-queue={good}"]) == {"gateway-queue": good}
    for flags, message in ((["no-equals"], "NAME=TEMPLATE"), ([f"Bad_Name={good}"], "DNS label"),
                           (["q=sum(x) / {namespace}"], "outside"), (["q= "], "empty")):
        with pytest.raises(ValueError, match=message):
            egress.parse_query_flags(flags)
    monkeypatch.setenv(egress.PROMETHEUS_QUERIES_ENV, json.dumps({"gateway-queue": good}))
    settings = egress.Settings()
    settings.configure()
    assert settings.prometheus_queries == {"gateway-queue": good}
    monkeypatch.setenv(egress.PROMETHEUS_QUERIES_ENV, '["not", "an object"]')
    with pytest.raises(ValueError, match="JSON object"):
        settings.configure()


def test_the_activation_query_is_the_admins_template_filled_in():
    settings = egress.Settings()
    settings.configure(prometheus_queries=['gateway-queue=sum(q{namespace="{namespace}",pool="{backend}"})'])
    prom = PrometheusSource(url="http://prometheus:9090", activation_query_name="gateway-queue")
    assert settings.activation_query(prom, "team-a", "llama") == 'sum(q{namespace="team-a",pool="llama"})'
    assert egress.query_refusal(prom, settings.prometheus_queries) is None
    assert settings.activation_query(PrometheusSource(url="http://prometheus:9090"), "team-a", "llama") is None


def test_a_tenants_promql_is_refused_with_what_to_do():
    allowed = {"gateway-queue": 'sum(q{namespace="{namespace}"})'}
    # A backend stored before the fields were removed still parses (the operator must not crash on it)...
    stored = PrometheusSource.model_validate({"url": "http://prometheus:9090",
                                              "query": 'sum(kube_secret_info{namespace="finance"})',
                                              "activationQuery": "vector(1)"})
    message = egress.query_refusal(stored, allowed)
    assert message is not None
    assert "autoscaling.prometheus.query and autoscaling.prometheus.activationQuery" in message
    assert "delete the field" in message and "activationQueryName" in message
    unknown = PrometheusSource(url="http://prometheus:9090", activation_query_name="finance-secrets")
    message = egress.query_refusal(unknown, allowed)
    assert message is not None and "finance-secrets" in message and "gateway-queue" in message
    assert "--prometheus-query" in message
    assert egress.query_refusal(PrometheusSource(url="http://prometheus:9090"), {}) is None


def test_the_crd_refuses_the_removed_fields_and_ratchets_stored_ones():
    from llmbackend.api.crdgen import crd

    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    prometheus = schema["properties"]["spec"]["properties"]["autoscaling"]["properties"]["prometheus"]
    rules = {r["rule"] for r in prometheus["x-kubernetes-validations"]}
    assert rules == {"!has(self.query)", "!has(self.activationQuery)"}
    # Without oldSelf: the API server ratchets them (a stored object's unchanged field passes an edit elsewhere).
    assert not any("oldSelf" in r for r in rules)
    assert prometheus["properties"]["activationQueryName"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def test_keda_gets_no_scaled_object_for_a_stored_tenant_query():
    """mode keda renders the operator's own trigger query; a stored backend with a removed query field gets the same
    reason as in mode operator, and nothing is handed to KEDA."""
    from test_decide import MODEL, NODES, backend, conditions, first_pass

    from llmbackend.controller.decide import Observed, decide

    url = "http://prometheus.monitoring:9090"
    apis = frozenset({"ScaledObject", "PrometheusRule"})
    spec = {"model": MODEL, "autoscaling": {"enabled": True, "mode": "keda", "prometheus": {
        "url": url, "query": 'sum(kube_secret_info{namespace="finance"})'}}}
    refused = first_pass(spec, apis=apis, prometheus_urls=(url,))
    assert conditions(refused)["Degraded"] == ("True", cond.PROMETHEUS_QUERY_NOT_ALLOWED)
    assert "delete the field" in refused.conditions.get("Degraded")["message"]
    assert all(child["kind"] != "ScaledObject" for child in refused.apply)
    assert "ScaledObject" not in {k for k, _ in decide(Observed(backend(spec), NODES, apis=apis,
                                                                prometheus_urls=(url,))).look_up}
    del spec["autoscaling"]["prometheus"]["query"]
    assert "ScaledObject" in {k for k, _ in decide(Observed(backend(spec), NODES, apis=apis,
                                                            prometheus_urls=(url,))).look_up}
