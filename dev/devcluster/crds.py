"""CRDs of other projects the operator renders objects for, taken from the Go modules that define them.

`go mod download -json MODULE@VERSION` fetches the module zip (it includes config/crd/bases/*.yaml) through the
Go module proxy; the one file needed is copied to ~/.cache/llmbackend/crds/ and reused from there. The tests
apply these CRDs to the local control plane and validate the rendered objects against them server-side.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

from .build import BuildError, cache_root

# kind -> (Go module, version, path of the CRD inside the module). The versions are the ones rendered for:
# the endpoint picker image (render/gateway.py EPP_IMAGE) and KEDA's keda.sh/v1alpha1 ScaledObject.
THIRD_PARTY_CRDS: dict[str, tuple[str, str, str]] = {
    "InferencePool": ("sigs.k8s.io/gateway-api-inference-extension", "v1.5.0",
                      "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"),
    "ScaledObject": ("github.com/kedacore/keda/v2", "v2.21.0", "config/crd/bases/keda.sh_scaledobjects.yaml"),
}
# The Prometheus Operator's CRDs (monitoring.coreos.com/v1): the PodMonitor the operator renders per backend and the
# ServiceMonitor and PrometheusRule of manifests/monitoring. Kept apart from THIRD_PARTY_CRDS: a served PrometheusRule
# changes what the operator renders for modes hpa and keda, which tests/e2e/test_gateway_keda.py does not expect.
_PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "v0.85.0")
MONITORING_CRDS: dict[str, tuple[str, str, str]] = {
    kind: (*_PROMETHEUS_OPERATOR, f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml")
    for kind, plural in (("PodMonitor", "podmonitors"), ("ServiceMonitor", "servicemonitors"),
                         ("PrometheusRule", "prometheusrules"))
}
GO_LOCK = "/tmp/llmb-go.lock"


def crd_file(kind: str) -> Path:
    """Path of the cached CRD for `kind`, downloading its module once."""
    module, version, inner = {**THIRD_PARTY_CRDS, **MONITORING_CRDS}[kind]
    target = cache_root() / "crds" / f"{module.replace('/', '_')}@{version}" / Path(inner).name
    if target.exists():
        return target
    if shutil.which("go") is None:
        raise BuildError(f"the {kind} CRD comes from the Go module {module}@{version}: install Go (https://go.dev/dl)")
    with open(GO_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one Go download at a time on a shared machine
        proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                              capture_output=True, text=True, timeout=900)
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise BuildError(f"go mod download {module}@{version} failed: {info.get('Error') or proc.stderr[-2000:]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copyfile(Path(info["Dir"]) / inner, tmp)
    tmp.replace(target)
    return target
