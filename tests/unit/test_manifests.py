"""The install bundle (manifests/default) renders with a real kubectl and is production-shaped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llmbackend.api.v1alpha1 import OPERATOR_IMAGE
from llmbackend.render import modelcache as mc

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "manifests" / "default"


def _kubectl() -> str | None:
    try:
        from devcluster.build import bin_dir

        candidate = bin_dir() / "kubectl"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    except Exception:  # noqa: BLE001 - dev cluster tooling not available
        pass
    return shutil.which("kubectl")


def _render(directory: Path) -> list[dict]:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl (build it with the dev cluster tooling)")
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def bundle() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in _render(DEFAULT)}


def test_bundle_installs_everything(bundle):
    for key in [
        ("CustomResourceDefinition", "llmbackends.llmbackend.dev"),
        ("Namespace", "llmbackend-system"),
        ("ServiceAccount", "llmbackend-operator"),
        ("ClusterRole", "llmbackend-operator"),
        ("ClusterRoleBinding", "llmbackend-operator"),
        ("Deployment", "llmbackend-operator"),
        ("Service", "llmbackend-operator-metrics"),
        ("ServiceAccount", "llmbackend-topology-reporter"),
        ("ClusterRole", "llmbackend-topology-reporter"),
        ("ClusterRoleBinding", "llmbackend-topology-reporter"),
        ("DaemonSet", "llmbackend-topology-reporter"),
    ]:
        assert key in bundle, key
    for (kind, _), doc in bundle.items():
        if kind not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "llmbackend-system", doc["metadata"]


def _restricted(pod: dict, container: dict) -> None:
    psc, sc = pod["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 65532
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not sc.get("privileged")
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert all("hostPath" not in v for v in pod.get("volumes", []))


def test_operator_deployment(bundle):
    dep = bundle[("Deployment", "llmbackend-operator")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert dep["spec"]["replicas"] == 2
    assert c["image"] == "ghcr.io/llmbackend/operator:0.1.0"
    assert c["args"] == ["run", "--leader-elect", "--metrics-addr=0.0.0.0:9090", "--health-addr=0.0.0.0:8081"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    # The model Jobs run the operator's own image, the one the code defaults to.
    assert c["image"] == OPERATOR_IMAGE == mc.DEFAULT_DOWNLOADER_IMAGE
    assert {e["name"]: e.get("value") for e in c["env"]}[mc.DOWNLOADER_IMAGE_ENV] == c["image"]
    _restricted(pod, c)
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"]["path"] == path
        port = c[probe]["httpGet"]["port"]
        named = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert named.get(port, port) == 8081
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    assert pod["serviceAccountName"] == "llmbackend-operator" and pod["automountServiceAccountToken"] is True
    assert pod["topologySpreadConstraints"] and pod["affinity"]["podAntiAffinity"]
    svc = bundle[("Service", "llmbackend-operator-metrics")]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["port"] == 9090


def test_an_overlay_that_renames_the_image_moves_the_model_jobs_with_it(tmp_path):
    # What the kustomization's comment tells overlay authors: repeat its `replacements:` block.
    base = yaml.safe_load((DEFAULT / "kustomization.yaml").read_text())
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(DEFAULT, overlay)],
        "images": [{"name": "ghcr.io/llmbackend/operator", "newName": "registry.example.com/llmb/operator", "newTag": "1.2.3"}],
        "replacements": base["replacements"],
    }))
    dep = next(d for d in _render(overlay) if d["kind"] == "Deployment" and d["metadata"]["name"] == "llmbackend-operator")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert c["image"] == env[mc.DOWNLOADER_IMAGE_ENV] == "registry.example.com/llmb/operator:1.2.3"


def test_topology_reporter_daemonset(bundle):
    ds = bundle[("DaemonSet", "llmbackend-topology-reporter")]
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["topology-reporter", "--interval", "300"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["serviceAccountName"] == "llmbackend-topology-reporter"
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in str(c.get("resources", {}))  # takes no GPU from the scheduler
    _restricted(pod, c)


def test_monitoring_and_grafana_render():
    kinds = {d["kind"] for d in _render(ROOT / "manifests" / "monitoring")}
    assert kinds == {"ServiceMonitor", "PrometheusRule"}
    (cm,) = _render(ROOT / "manifests" / "grafana")
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
