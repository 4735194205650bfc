"""No tenant-written PromQL runs on a shared Prometheus (docs/security.md, "Queries on a shared Prometheus"), on the
real control plane with a tenant identity (a user bound only to LLMBackends in its namespace, kubectl --as), the
operator as a real process and Debian's prometheus, whose own query log lists every query it ran.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import backend_manifest, wait_for

from devcluster.cli import CRD_FILE, install_crd
from llmbackend.api import conditions as cond

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
from harness import prometheus_binary, run_prometheus  # noqa: E402

pytestmark = pytest.mark.skipif(prometheus_binary() is None,
                                reason="prometheus binary not found: apt-get install -y prometheus (Debian)")

TENANT = "tenant-bob"
STOLEN = 'sum(kube_secret_info{namespace="finance"})'  # what the attacker asked the operator to run
WAITING = 'sum(gateway_queue_size{namespace="{namespace}",pool="{backend}"})'  # the admin's named template


def grant_tenant(cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "llmbackend-editor", "namespace": namespace},
         "rules": [{"apiGroups": ["llmbackend.dev"], "resources": ["llmbackends"],
                    "verbs": ["get", "list", "create", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "llmbackend-editor", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llmbackend-editor"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]}]))


def as_tenant(cluster, manifest: dict):
    return cluster.kubectl("apply", "--as", TENANT, "-f", "-", input=yaml.safe_dump(manifest), check=False)


def logged_queries(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["params"]["query"] for line in path.read_text().splitlines() if line.strip()]


def autoscaling_status(cluster, namespace: str, name: str) -> dict:
    obj = cluster.kube.get("LLMBackend", namespace, name) or {}
    return (obj.get("status") or {}).get("autoscaling") or {}


def crd_without_query_rules() -> dict:
    """The CRD as it was before the free-form fields were refused: how a backend written then is stored now."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    old = copy.deepcopy(crd)
    for version in old["spec"]["versions"]:
        auto = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["autoscaling"]
        auto["properties"]["prometheus"].pop("x-kubernetes-validations", None)
    return old


def test_a_tenants_promql_is_never_run_only_the_operators(cluster, own_operator, namespace, tmp_path):
    operator = own_operator("--prometheus-query", f"waiting={WAITING}")
    grant_tenant(cluster, namespace)
    query_log = tmp_path / "queries.log"
    with run_prometheus([], query_log=query_log) as prom:
        def backend(name, **prometheus):
            return backend_manifest(name, namespace, autoscaling={
                "enabled": True, "minReplicas": 0, "source": "prometheus", "syncPeriodSeconds": 1,
                "prometheus": {"url": prom.url, **prometheus}})

        # 1. The API server refuses the free-form fields from the tenant, on create.
        for field in ("query", "activationQuery"):
            refused = as_tenant(cluster, backend(f"steal-{field.lower()}", **{field: STOLEN}))
            assert refused.returncode != 0 and "is removed" in refused.stderr, (field, refused.stdout, refused.stderr)

        # 2. A backend stored before the upgrade (written under the old CRD) still has them: it is held with a reason
        # and what to do, and its queries are never run.
        cluster.kube.apply(crd_without_query_rules())
        stored = backend("stored", query=STOLEN, activationQuery=STOLEN)
        wait_for(lambda: as_tenant(cluster, stored).returncode == 0, timeout=20, what="the old CRD accepting the query")
        install_crd(cluster.kube)
        edited = copy.deepcopy(stored)
        edited["spec"]["autoscaling"]["prometheus"]["query"] = STOLEN + " * 2"
        wait_for(lambda: "is removed" in as_tenant(cluster, edited).stderr, timeout=20,
                 what="the new CRD refusing an edit of the query")
        # ...an edit elsewhere passes (the API server ratchets the rule for the unchanged stored field)
        elsewhere = copy.deepcopy(stored)
        elsewhere["spec"]["autoscaling"]["maxReplicas"] = 3
        accepted = as_tenant(cluster, elsewhere)
        assert accepted.returncode == 0, accepted.stderr

        # 3. A name the admin did not define is refused too; the admin's named query runs, filled in.
        assert as_tenant(cluster, backend("unknown", activationQueryName="finance-secrets")).returncode == 0
        assert as_tenant(cluster, backend("named", activationQueryName="waiting")).returncode == 0

        held = wait_for(lambda: (a := autoscaling_status(cluster, namespace, "stored")).get("reason")
                        == cond.PROMETHEUS_QUERY_NOT_ALLOWED and a, timeout=60,
                        what="status.autoscaling.reason PrometheusQueryNotAllowed on the stored backend")
        assert "autoscaling.prometheus.query and autoscaling.prometheus.activationQuery" in held["message"]
        assert "delete the field" in held["message"] and "currentRatio" not in held
        unknown = wait_for(lambda: (a := autoscaling_status(cluster, namespace, "unknown")).get("reason")
                           == cond.PROMETHEUS_QUERY_NOT_ALLOWED and a, timeout=60,
                           what="PrometheusQueryNotAllowed for an activationQueryName the admin did not define")
        assert "finance-secrets" in unknown["message"] and "waiting" in unknown["message"]

        filled = WAITING.replace("{namespace}", namespace).replace("{backend}", "named")
        wait_for(lambda: filled in logged_queries(query_log), timeout=60,
                 what=f"the admin's query, filled in, in Prometheus' query log ({logged_queries(query_log)[-5:]})")
        time.sleep(3)  # a few more sync periods of every backend
        queries = logged_queries(query_log)

    assert operator.proc.poll() is None, operator.log_tail()
    assert queries, "Prometheus logged no query"
    assert not [q for q in queries if "kube_secret_info" in q or "finance" in q], queries
    ratio = f'llmbackend:engine_queue_compute:ratio{{namespace="{namespace}",pod=~"^$"}}'
    # Only what the operator wrote: the ratio of the backend's own pods (none at zero) and the admin's template.
    assert set(queries) <= {filled, ratio, f"timestamp({ratio})"}, sorted(set(queries))
