"""The Helm chart (charts/llmbackend): its generated parts are current, it has one version with the package and
the image, `helm lint` passes, and `helm template` with default values renders the kustomize bundle
(manifests/default) modulo the chart's labels, so neither install drifts from the other."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from test_manifests import _render

import llmbackend
from devcluster import chart
from devcluster.helm import helm_path
from llmbackend.api.v1alpha1 import OPERATOR_IMAGE
from llmbackend.controller.egress import PROMETHEUS_QUERIES_ENV, Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "llmbackend"
NAMESPACE = "llmbackend-system"
HELM_ONLY_LABELS = {"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                    "helm.sh/chart"}


def test_generated_parts_are_current():
    stale = [str(p.relative_to(ROOT)) for p, text in chart.generated_files().items()
             if not p.exists() or p.read_text() != text]
    assert not stale, f"run `make chart`: {stale} out of date"


def test_one_version_for_package_chart_and_image():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == llmbackend.__version__
    assert OPERATOR_IMAGE.endswith(f":{llmbackend.__version__}")
    kustomization = yaml.safe_load((ROOT / "manifests" / "default" / "kustomization.yaml").read_text())
    assert kustomization["images"][0]["newTag"] == llmbackend.__version__
    assert 'dynamic = ["version"]' in (ROOT / "pyproject.toml").read_text()  # pip reads llmbackend.__version__


def _helm() -> str:
    path = helm_path()
    if not os.access(path, os.X_OK):
        pytest.skip("no helm: build it with `make tools` (python -m devcluster.helm)")
    return str(path)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([_helm(), *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HELM_CACHE_HOME="/tmp/llmb-helm-cache",
                                   HELM_CONFIG_HOME="/tmp/llmb-helm-config", HELM_DATA_HOME="/tmp/llmb-helm-data"))
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def template(*values: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = helm("template", "llmbackend", str(CHART), "--namespace", NAMESPACE, *values).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def test_helm_lint():
    out = helm("lint", "--strict", str(CHART)).stdout
    assert "0 chart(s) failed" in out
    helm("lint", "--strict", str(CHART), "--set", "monitoring.enabled=true", "--set", "grafanaDashboard.enabled=true")


def _without_chart_labels(doc: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    metadata = doc["metadata"]
    for key in HELM_ONLY_LABELS:
        metadata.get("labels", {}).pop(key, None)
    metadata.get("annotations", {}).pop("helm.sh/resource-policy", None)
    if not metadata.get("annotations"):
        metadata.pop("annotations", None)
    return doc


KUSTOMIZE_NAMESPACES_CLUSTER_SCOPED = [(kind, name) for name in ("llmbackend-tenant-references", "llmbackend-launcher-binding",
                                                                  "llmbackend-launcher-exec")
                                       for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]


def test_default_values_render_the_kustomize_bundle():
    bundle = {(d["kind"], d["metadata"]["name"]): d for d in _render(ROOT / "manifests" / "default")}
    for kind, name in KUSTOMIZE_NAMESPACES_CLUSTER_SCOPED:
        # kustomize's namespace transformer does not know these kinds are cluster-scoped; kubectl drops the field.
        assert bundle[(kind, name)]["metadata"].pop("namespace", None) in (None, NAMESPACE)
    rendered = template()
    # Helm does not create its own release namespace (`--create-namespace`); docs/install.md labels it restricted.
    bundle.pop(("Namespace", NAMESPACE))
    assert sorted(rendered) == sorted(bundle)
    for key, doc in rendered.items():
        assert _without_chart_labels(doc) == bundle[key], key
    crd = rendered[("CustomResourceDefinition", "llmbackends.llmbackend.dev")]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # uninstall keeps every backend


def test_values_reach_the_operator():
    rendered = template("--set", "image.repository=registry.example.com/llmb/operator", "--set", "image.tag=1.2.3",
                        "--set", "operator.logLevel=debug", "--set", "operator.watchNamespaces={team-a,team-b}",
                        "--set", "operator.replicas=3", "--set", "imagePullSecrets[0].name=regcred",
                        "--set", "topologyReporter.runtimeClassName=")
    dep = rendered[("Deployment", "llmbackend-operator")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert c["image"] == env["LLMBACKEND_DOWNLOADER_IMAGE"] == "registry.example.com/llmb/operator:1.2.3"
    assert c["args"] == ["run", "--leader-elect", "--metrics-addr=0.0.0.0:9090", "--health-addr=0.0.0.0:8081",
                         "--verbose", "--namespace=team-a", "--namespace=team-b"]
    assert dep["spec"]["replicas"] == 3 and pod["imagePullSecrets"] == [{"name": "regcred"}]
    reporter = rendered[("DaemonSet", "llmbackend-topology-reporter")]["spec"]["template"]["spec"]
    assert "runtimeClassName" not in reporter and reporter["containers"][0]["image"].endswith(":1.2.3")
    downloader = template("--set", "downloaderImage=mirror.example.com/fetch:9")[("Deployment", "llmbackend-operator")]
    (c,) = downloader["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in c["env"]}["LLMBACKEND_DOWNLOADER_IMAGE"] == "mirror.example.com/fetch:9"
    allowed = template("--set", "allowedModelEndpoints={http://minio.storage:9000}",
                       "--set", "allowedPrometheusUrls={http://prometheus.monitoring:9090,http://thanos:*}")
    (c,) = allowed[("Deployment", "llmbackend-operator")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LLMBACKEND_MODEL_ENDPOINTS"] == "http://minio.storage:9000"
    assert env["LLMBACKEND_PROMETHEUS_URLS"] == "http://prometheus.monitoring:9090 http://thanos:*"
    assert env["LLMBACKEND_PRIORITY_ACROSS_NAMESPACES"] == "false"  # a tenant's priority stays in its namespace
    across = template("--set", "priorityAcrossNamespaces=true")
    (c,) = across[("Deployment", "llmbackend-operator")]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in c["env"]}["LLMBACKEND_PRIORITY_ACROSS_NAMESPACES"] == "true"
    queue = 'sum(queue_size{namespace="{namespace}",pool="{backend}"})'
    named = template("--set-json", f"prometheusQueries={json.dumps({'gateway-queue': queue})}")
    (c,) = named[("Deployment", "llmbackend-operator")]["spec"]["template"]["spec"]["containers"]
    raw = {e["name"]: e.get("value") for e in c["env"]}[PROMETHEUS_QUERIES_ENV]
    with mock.patch.dict(os.environ, {PROMETHEUS_QUERIES_ENV: raw}):
        settings = Settings()
        settings.configure()
    assert settings.prometheus_queries == {"gateway-queue": queue}


def test_watch_namespaces_bind_the_operator_per_namespace_not_cluster_wide():
    rendered = template("--set", "operator.watchNamespaces={team-a,team-b}")
    assert ("ClusterRoleBinding", "llmbackend-operator") not in rendered
    bindings = [d for d in helm("template", "llmbackend", str(CHART), "--namespace", NAMESPACE, "--set",
                                "operator.watchNamespaces={team-a,team-b}").stdout.split("\n---")
                if "kind: RoleBinding" in d and "name: llmbackend-operator\n" in d and "kind: ClusterRole\n" in d]
    docs = [yaml.safe_load(d) for d in bindings]
    assert sorted(d["metadata"]["namespace"] for d in docs) == ["team-a", "team-b"]
    for doc in docs:
        assert doc["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "llmbackend-operator"}
        assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "llmbackend-operator", "namespace": NAMESPACE}]
    # Cluster-scoped reads (nodes, CRDs, namespaces) stay cluster-wide; the Lease Role stays in the release namespace.
    assert ("ClusterRoleBinding", "llmbackend-operator-cluster") in rendered
    assert ("ClusterRoleBinding", "llmbackend-operator") in template()


def test_optional_parts():
    rendered = template("--set", "monitoring.enabled=true", "--set", "grafanaDashboard.enabled=true",
                        "--set", "topologyReporter.enabled=false", "--set", "crds.install=false")
    monitor = rendered[("ServiceMonitor", "llmbackend-operator")]
    assert monitor["metadata"]["namespace"] == NAMESPACE
    dashboard = rendered[("ConfigMap", "llmbackend-grafana-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["llmbackend.json"]) == json.loads(
        (ROOT / "manifests" / "grafana" / "dashboard.json").read_text())
    assert not [k for k in rendered if "topology-reporter" in k[1]]
    assert ("CustomResourceDefinition", "llmbackends.llmbackend.dev") not in rendered


def test_the_out_of_cluster_install_has_no_operator_pods_but_everything_the_operator_needs():
    """docs/install.md ("When the operator image cannot be pulled"): with these values no pod pulls the image, and the
    CRD, the operator's RBAC and the admission policies are there for `llmbackend run --kubeconfig`."""
    rendered = template("--set", "operator.replicas=0", "--set", "topologyReporter.enabled=false")
    assert rendered[("Deployment", "llmbackend-operator")]["spec"]["replicas"] == 0
    assert not [k for k in rendered if k[0] in ("DaemonSet", "Pod", "Job") or "topology-reporter" in k[1]]
    assert {("CustomResourceDefinition", "llmbackends.llmbackend.dev"), ("ClusterRole", "llmbackend-operator"),
            ("ValidatingAdmissionPolicy", "llmbackend-tenant-references")} <= set(rendered)

def test_the_release_namespace_replaces_llmbackend_system():
    out = helm("template", "llmbackend", str(CHART), "--namespace", "ops", "--set", "monitoring.enabled=true").stdout
    assert NAMESPACE not in out
    binding = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ClusterRoleBinding"
                   and d["metadata"]["name"] == "llmbackend-operator")
    assert binding["subjects"][0]["namespace"] == "ops"


@pytest.mark.parametrize("values, error", [
    (["--set", "operator.leaderElection=false"], "needs operator.leaderElection"),
    (["--set", "operator.logLevel=trace"], "logLevel must be info or debug"),
])
def test_bad_values_fail_with_what_to_do(values, error):
    proc = helm("template", "llmbackend", str(CHART), *values, check=False)
    assert proc.returncode != 0 and error in proc.stderr


def test_a_new_rbac_file_in_the_kustomize_bundle_joins_the_chart(tmp_path, monkeypatch):
    import shutil

    manifests = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", manifests)
    (manifests / "default" / "launcher-rbac.yaml").write_text(yaml.safe_dump({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "llmbackend-leader-election", "namespace": NAMESPACE},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}]}))
    kustomization = manifests / "default" / "kustomization.yaml"
    doc = yaml.safe_load(kustomization.read_text())
    doc["resources"].append("launcher-rbac.yaml")
    kustomization.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(chart, "MANIFESTS", manifests)
    text = chart.generated_files()[CHART / "templates" / "launcher-rbac.yaml"]
    assert "namespace: {{ .Release.Namespace }}" in text and 'include "llmbackend.labels"' in text


def test_helm_package_names_the_package_version(tmp_path):
    helm("package", str(CHART), "-d", str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [f"llmbackend-{llmbackend.__version__}.tgz"]
