"""Recovery without a restart (issue 24): an optional CRD deleted and reinstalled, and a key someone adds to a
backend's ConfigMap, on the real control plane with the operator as a process."""

from __future__ import annotations

import time

import yaml
from conftest import apply_manifest, available, backend_manifest, condition, wait_crd_established, wait_for
from test_watch_cache_e2e import _http, _reconciles, _requests

from devcluster.crds import crd_file
from devcluster.ports import free_ports

INFERENCE_POOL_CRD = "inferencepools.inference.networking.k8s.io"
OPENAI = {"openai": True}


def _install_inference_pool_crd(cluster) -> None:
    cluster.kube.apply(yaml.safe_load(crd_file("InferencePool").read_text()))
    wait_crd_established(cluster, INFERENCE_POOL_CRD)


def _stuck(cluster, namespace: str, names: list[str]) -> dict[str, list]:
    """Backends not Available, or Degraded because an API request failed: their conditions."""
    out = {}
    for name in names:
        obj = cluster.kube.get("LLMBackend", namespace, name)
        if not available(cluster, namespace, name) or (condition(obj, "Degraded") or {}).get("reason") == "ApiRequestFailed":
            out[name] = [(c["type"], c["status"], c["reason"], c["message"][:160])
                         for c in (obj.get("status") or {}).get("conditions") or []]
    return out


def test_an_optional_crd_deleted_and_reinstalled(exclusive_cluster, own_operator, namespace):
    """Deleted: backends drop the child of that kind and stay Available (the operator finds the API gone on its first
    404, not never); reinstalled: they get it back without a resync (the default 300 s) or a restart."""
    cluster = exclusive_cluster
    _install_inference_pool_crd(cluster)
    op = own_operator("--namespace", namespace)
    try:
        names = ["pool-a", "pool-b", "pool-c"]
        for name in names:
            apply_manifest(cluster, backend_manifest(name, namespace, serving=OPENAI))
        wait_for(lambda: all(cluster.kube.get("InferencePool", namespace, n) for n in names), timeout=90,
                 what=f"InferencePools\n{op.log_tail()}")

        cluster.kubectl("delete", "crd", INFERENCE_POOL_CRD, "--wait=true")
        names.append("pool-late")  # created while the operator still believes the CRD served: its write gets a 404
        apply_manifest(cluster, backend_manifest("pool-late", namespace, serving=OPENAI))
        wait_for(lambda: not _stuck(cluster, namespace, names), timeout=90,
                 what=f"backends Available without the CRD: {_stuck(cluster, namespace, names)}\n{op.log_tail()}")

        _install_inference_pool_crd(cluster)
        wait_for(lambda: all(cluster.kube.get("InferencePool", namespace, n) for n in names), timeout=120,
                 what=f"InferencePools back after the CRD returned\n{op.log_tail()}")
        assert not _stuck(cluster, namespace, names)
        assert op.proc.poll() is None, op.log_tail()
    finally:
        cluster.kubectl("delete", "crd", INFERENCE_POOL_CRD, "--wait=true", check=False)


def test_a_key_someone_adds_to_a_configmap_is_left_alone_and_resyncs_stay_write_free(exclusive_cluster, own_operator,
                                                                                      namespace):
    cluster = exclusive_cluster
    health, metrics = free_ports(2)
    op = own_operator("--health-addr", f"127.0.0.1:{health}", "--metrics-addr", f"127.0.0.1:{metrics}",
                      "--resync-seconds", "2", "--namespace", namespace)
    wait_for(lambda: _http(f"http://127.0.0.1:{health}/readyz") == (200, "ok\n"), timeout=30, what="/readyz ok")
    apply_manifest(cluster, backend_manifest("keys", namespace))
    wait_for(lambda: available(cluster, namespace, "keys"), timeout=60, what="Available")
    cluster.kubectl("-n", namespace, "patch", "configmap", "keys-model-repo", "--type", "merge",
                    "-p", '{"data": {"someone-elses-key": "theirs"}}')
    time.sleep(3)  # the pass the change triggers, and the last status writes, settle

    before, reconciles_before = _requests(metrics), _reconciles(metrics)
    time.sleep(7)  # three resync periods
    after, reconciles_after = _requests(metrics), _reconciles(metrics)
    assert reconciles_after - reconciles_before >= 2, "the periodic resync ran"
    writes = {k: after.get(k, 0) - before.get(k, 0) for k in after
              if k.split()[0] in ("PATCH", "POST", "PUT", "DELETE") and after.get(k, 0) != before.get(k, 0)}
    assert writes == {}, f"a no-op resync wrote: {writes}\n{op.log_tail()}"
    assert cluster.kube.get("ConfigMap", namespace, "keys-model-repo")["data"]["someone-elses-key"] == "theirs"
