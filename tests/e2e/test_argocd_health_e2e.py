"""What Argo CD shows for a backend, driven by the real operator on the local control plane.

A running backend is edited (with kubectl apply, as a GitOps sync does) to a spec that cannot be served;
the object the operator leaves is fed to Argo CD's own health evaluation (tests/argocd: util/lua +
gitops-engine, running manifests/argocd's check). It must settle as Degraded with the operator's reason,
never stay Progressing. A backend at zero replicas on purpose (autoscaled and idle, or replicas: 0) is Healthy, saying so.
Each test starts its own operator (a fresh discovery cache), so the LeaderWorkerSet case sees the API as absent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import apply_manifest, available, backend_manifest, condition, wait_for

from devcluster.lws import CRD_FILE as LWS_CRD_FILE
from devcluster.lws import ensure_lws

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "argocd"))
from argocd_health import ensure_binary, health  # noqa: E402

LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
HUGE = {"architecture": {"numLayers": 200, "hiddenSize": 32768, "numAttentionHeads": 256, "numKeyValueHeads": 16,
                         "headDim": 128, "vocabSize": 256000, "parameterCount": 9_000_000_000_000},
        "source": {"uri": "s3://models/huge"}}


@pytest.fixture(scope="module")
def argocd(exclusive_cluster):
    return ensure_binary()


@pytest.fixture
def operator_here(own_operator):
    return own_operator()


@pytest.fixture
def without_lws(exclusive_cluster):
    """The LeaderWorkerSet CRD absent for this test (another test may have installed it); restored after."""
    installed = exclusive_cluster.kube.get("CustomResourceDefinition", None, LWS_CRD) is not None
    if installed:
        exclusive_cluster.kubectl("delete", "crd", LWS_CRD, "--wait=true")
    yield
    if installed:
        exclusive_cluster.kubectl("apply", "--server-side", "-f", str(ensure_lws() / LWS_CRD_FILE))


def settled(cluster, namespace: str, name: str, argocd, want: str):
    """The backend once the operator has written status for its current generation and Argo CD says `want`."""
    def check():
        obj = cluster.kube.get("LLMBackend", namespace, name)
        if not obj or (obj.get("status") or {}).get("observedGeneration") != obj["metadata"]["generation"]:
            return None
        state = health(argocd, obj)
        return (obj, state) if state[0] == want else None
    return wait_for(check, timeout=60, what=f"Argo CD health {want} for the current generation")


def assert_four_current(obj) -> None:
    written = obj["status"]["conditions"]
    types = [c["type"] for c in written]
    # The four, then only what this pass wrote besides (ModelReady: these backends have a URI source).
    assert types[:4] == ["Planned", "Available", "Progressing", "Degraded"] and set(types[4:]) <= {"ModelReady"}, types
    assert {c["observedGeneration"] for c in written} == {obj["metadata"]["generation"]}


@pytest.mark.parametrize("edit, reason", [
    ({"model": HUGE}, "InsufficientGPUMemory"),
    ({"model": {"preset": "no-such-model", "source": {"uri": "s3://models/x"}}}, "UnknownPreset"),
    ({"model": {"preset": "llama-3.1-405b", "source": {"uri": "s3://models/llama-3.1-405b"}}}, "LeaderWorkerSetNotInstalled"),
], ids=["no-gpu-set-holds-the-model", "unknown-preset", "multi-node-without-leaderworkerset"])
def test_editing_a_running_backend_to_an_unservable_spec_is_degraded(
        exclusive_cluster, argocd, without_lws, operator_here, namespace, edit, reason):
    cluster = exclusive_cluster
    manifest = backend_manifest("edited", namespace)
    apply_manifest(cluster, manifest)
    wait_for(lambda: available(cluster, namespace, "edited"), timeout=60, what="Available=True")
    obj, (status, _) = settled(cluster, namespace, "edited", argocd, "Healthy")
    running = obj["metadata"]["generation"]

    manifest["spec"].update(edit)
    apply_manifest(cluster, manifest)
    obj, (status, message) = settled(cluster, namespace, "edited", argocd, "Degraded")
    assert obj["metadata"]["generation"] > running
    assert message.startswith(f"{reason}: "), message
    assert_four_current(obj)
    assert condition(obj, "Degraded")["reason"] == reason
    # what served the earlier spec is left alone
    deployment = cluster.kube.get("Deployment", namespace, "edited")
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    assert operator_here.proc.poll() is None, operator_here.log_tail()


@pytest.mark.parametrize("spec, want, reason", [
    ({"autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}}, "Healthy", "ScaledToZero"),
    ({"replicas": 0}, "Healthy", "ZeroReplicas"),
], ids=["autoscaled-idle-at-zero", "replicas-zero"])
def test_a_backend_at_zero_replicas_on_purpose_is_not_degraded(
        exclusive_cluster, argocd, operator_here, namespace, spec, want, reason):
    cluster = exclusive_cluster
    apply_manifest(cluster, backend_manifest("idle", namespace, **spec))
    obj, (status, message) = settled(cluster, namespace, "idle", argocd, want)
    assert message.startswith(f"{reason}: "), message
    assert_four_current(obj)
    assert condition(obj, "Degraded")["status"] == "False"
    # The status is written before the children (reconcile.py, "Status first"): on a loaded machine the Deployment
    # can come a moment after the status that settled() read.
    deployment = wait_for(lambda: cluster.kube.get("Deployment", namespace, "idle"), timeout=30, what="the Deployment")
    assert deployment["spec"]["replicas"] == 0
