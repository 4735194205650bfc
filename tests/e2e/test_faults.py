"""Fault injection on the real control plane: operator SIGKILL mid-batch, apiserver/etcd restarts,
another client editing owned children, node label flicker / cordon / new capacity.

These tests run their own operator processes (killed and restarted at will). The session `operator`
fixture reconciles cluster-wide, so `exclusive_cluster` stops it for this module and starts it again
afterwards: exactly one operator acts at any time.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from conftest import apply_manifest, available, backend_manifest, condition, wait_for

from devcluster import cluster as devcluster
from devcluster.cli import topology_nodes

MANAGED_BY = "llmbackend-operator"


def all_available(cluster, namespace, names):
    items = {o["metadata"]["name"]: o for o in cluster.kube.list("LLMBackend", namespace)}
    missing = [n for n in names if not ((c := condition(items.get(n), "Available")) and c["status"] == "True"
                                        and c.get("observedGeneration") == items[n]["metadata"]["generation"])]
    return not missing or None


# ---- operator killed mid-batch ----


def test_operator_killed_mid_batch_converges_without_duplicates_or_orphans(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    names = [f"batch{i:02d}" for i in range(20)]
    first = own_operator("--workers", "2")
    # Wait until it serves (it lists nodes first), then create the batch at once.
    probe = backend_manifest("probe", namespace)
    cluster.kube.create(probe)
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "probe"), timeout=60, what="first operator serving")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: cluster.kube.create(backend_manifest(n, namespace)), names))
    # Kill it while the batch is partly reconciled.
    wait_for(lambda: len(cluster.kube.list("Deployment", namespace)) >= 3, timeout=60, interval=0.05,
             what="some of the batch reconciled")
    first.stop(kill=True)
    assert first.proc.returncode == -9
    partial = len(cluster.kube.list("Deployment", namespace)) - 1
    second = own_operator("--workers", "4")
    names.append("probe")
    wait_for(lambda: all_available(cluster, namespace, names), timeout=150, interval=1,
             what=f"all 21 Available after restart (killed with {partial}/20 Deployments); log:\n{second.log_tail()}")

    backends = {o["metadata"]["name"]: o for o in cluster.kube.list("LLMBackend", namespace)}
    uids = {o["metadata"]["uid"] for o in backends.values()}
    for kind, child_name in (("Deployment", "{}"), ("Service", "{}"), ("ConfigMap", "{}-model-repo")):
        children = [c for c in cluster.kube.list(kind, namespace)
                    if (c["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY]
        assert sorted(c["metadata"]["name"] for c in children) == sorted(child_name.format(n) for n in names), kind
        for child in children:
            owners = [o for o in child["metadata"].get("ownerReferences", []) if o.get("controller")]
            assert len(owners) == 1 and owners[0]["uid"] in uids, f"orphan {kind} {child['metadata']['name']}"
        if kind == "Deployment":
            # Created once and never re-rendered by the second operator.
            assert all(c["metadata"]["generation"] == 1 for c in children), [
                (c["metadata"]["name"], c["metadata"]["generation"]) for c in children if c["metadata"]["generation"] != 1]
    # One ReplicaSet and one pod per backend: nothing was created twice.
    assert len(cluster.kube.list("ReplicaSet", namespace)) == len(names)
    pods = [p for p in cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend")  # serving pods, not downloads
            if not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == len(names)
    for obj in backends.values():
        status = obj["status"]
        assert status["observedGeneration"] == obj["metadata"]["generation"]
        assert status["plan"]["tensorParallel"] == 1 and status["plan"]["inputHash"]
        assert condition(obj, "Planned")["status"] == "True" and condition(obj, "Degraded")["status"] == "False"
        assert status["readyReplicas"] == 1
    assert second.proc.poll() is None, second.log_tail()


# ---- control-plane restarts ----


def test_operator_survives_apiserver_and_etcd_restarts(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    op = own_operator()
    apply_manifest(cluster, backend_manifest("before", namespace))
    wait_for(lambda: available(cluster, namespace, "before"), timeout=60, what="before Available")

    for component, created in (("kube-apiserver", "after-apiserver"), ("etcd", "after-etcd")):
        devcluster.restart_component(cluster.cluster, component)
        if component == "etcd":
            # The apiserver reconnects to etcd on its own; wait until it serves again.
            wait_for(lambda: _serves(cluster), timeout=60, what="apiserver serving after the etcd restart")
        assert op.proc.poll() is None, f"operator exited after the {component} restart:\n{op.log_tail()}"
        # A CR created after the restart converges (the watch reconnected) ...
        wait_for(lambda created=created: cluster.kubectl("apply", "-f", "-", check=False,
                                         input=json.dumps(backend_manifest(created, namespace))).returncode == 0,
                 timeout=30, what=f"create {created}")
        wait_for(lambda created=created: available(cluster, namespace, created), timeout=120, interval=0.5,
                 what=f"{created} Available after the {component} restart; log:\n{op.log_tail()}")
        # ... and so does a change to one that existed before.
        replicas = 2 if component == "kube-apiserver" else 1
        cluster.kubectl("scale", "llmb", "before", "-n", namespace, f"--replicas={replicas}")
        wait_for(lambda replicas=replicas: (d := cluster.kube.get("Deployment", namespace, "before"))
                 and d["spec"]["replicas"] == replicas,
                 timeout=60, what=f"before scaled to {replicas} after the {component} restart")
    assert op.proc.poll() is None, op.log_tail()


def _serves(cluster) -> bool:
    try:
        cluster.kube.list("Namespace")
        return True
    except Exception:  # noqa: BLE001 - apiserver still reconnecting to etcd
        return False


# ---- another client edits owned children ----


def test_operator_restores_owned_fields_and_keeps_foreign_ones(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    own_operator("--resync-seconds", "5")
    apply_manifest(cluster, backend_manifest("drift", namespace))
    wait_for(lambda: available(cluster, namespace, "drift"), timeout=60, what="Available")
    deployment = cluster.kube.get("Deployment", namespace, "drift")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    config = cluster.kube.get("ConfigMap", namespace, "drift-model-repo")["data"]

    def kubectl_patch(kind, name, patch_type, patch):
        cluster.kubectl("patch", kind, name, "-n", namespace, f"--type={patch_type}", "--field-manager=intruder",
                        "-p", json.dumps(patch))

    # Replicas plus a foreign label and annotation in one edit.
    kubectl_patch("deployment", "drift", "merge", {"metadata": {"labels": {"team": "intruder"},
                                                                 "annotations": {"intruder.example.com/note": "keep"}},
                                                    "spec": {"replicas": 3}})
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "drift")["spec"]["replicas"] == 1, timeout=30,
             what="replicas restored to 1")
    # The image.
    kubectl_patch("deployment", "drift", "json",
                  [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.example.com/evil:1"}])
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "drift")["spec"]["template"]["spec"]["containers"][0]["image"] == image,
             timeout=30, what="image restored")
    live = cluster.kube.get("Deployment", namespace, "drift")
    assert live["metadata"]["labels"]["team"] == "intruder", "a label the operator does not own was clobbered"
    assert live["metadata"]["annotations"]["intruder.example.com/note"] == "keep"

    # ConfigMap data (not watched: restored by the resync) plus a foreign label.
    key = next(k for k in config if k.endswith("config.pbtxt"))
    kubectl_patch("configmap", "drift-model-repo", "merge",
                  {"metadata": {"labels": {"other": "yes"}}, "data": {key: "name: \"hijacked\"\n"}})
    # The patch went in (the operator may already be restoring the data: a reconcile woken by its own Deployment
    # write can read the ConfigMap right after the patch, so the edited data itself is not asserted here).
    patched = cluster.kube.get("ConfigMap", namespace, "drift-model-repo")
    assert patched["metadata"]["labels"]["other"] == "yes"
    assert "intruder" in {m["manager"] for m in patched["metadata"]["managedFields"]}
    wait_for(lambda: cluster.kube.get("ConfigMap", namespace, "drift-model-repo")["data"][key] == config[key],
             timeout=30, what="ConfigMap data restored")
    live_cm = cluster.kube.get("ConfigMap", namespace, "drift-model-repo")
    assert live_cm["metadata"]["labels"]["other"] == "yes"
    assert live_cm["data"] == config
    managers = {m["manager"] for m in live_cm["metadata"]["managedFields"]}
    assert {"llmbackend-operator", "intruder"} <= managers
    wait_for(lambda: available(cluster, namespace, "drift"), timeout=60, what="Available again")


# ---- nodes ----


def _node_patch(cluster, name: str, labels: dict[str, str | None]) -> None:
    cluster.kubectl("label", "node", name, "--overwrite",
                    *[f"{k}={v}" if v is not None else f"{k}-" for k, v in labels.items()])


def test_node_flicker_and_cordon_do_not_touch_running_replicas(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    own_operator("--resync-seconds", "5")
    apply_manifest(cluster, backend_manifest("steady", namespace))
    wait_for(lambda: available(cluster, namespace, "steady"), timeout=60, what="Available")
    before = cluster.kube.get("Deployment", namespace, "steady")
    backend_before = cluster.kube.get("LLMBackend", namespace, "steady")
    pods_before = {p["metadata"]["uid"] for p in cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend")}
    node = cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend")[0]["spec"]["nodeName"]
    nodes = [n["metadata"]["name"] for n in topology_nodes("dgx-h100-x4")]
    try:
        for i in range(10):
            for name in nodes:
                _node_patch(cluster, name, {"flicker.example.com/x": str(i % 2), "nvidia.com/gfd.timestamp": str(1700000000 + i)})
        # GPU labels flicker too (GFD relabelling): gone and back.
        _node_patch(cluster, node, {"nvidia.com/gpu.product": None})
        _node_patch(cluster, node, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
        cluster.kubectl("cordon", node)
        time.sleep(12)  # two resyncs and the node events
    finally:
        cluster.kubectl("uncordon", node)
        for name in nodes:
            _node_patch(cluster, name, {"flicker.example.com/x": None, "nvidia.com/gfd.timestamp": None})
    time.sleep(3)
    after = cluster.kube.get("Deployment", namespace, "steady")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "Deployment was rewritten"
    assert {p["metadata"]["uid"] for p in cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend")} == pods_before, "replicas were replaced"
    backend_after = cluster.kube.get("LLMBackend", namespace, "steady")
    assert backend_after["status"]["plan"] == backend_before["status"]["plan"]
    assert condition(backend_after, "Available")["status"] == "True"


def test_backend_waiting_for_capacity_is_planned_when_a_node_is_added(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    op = own_operator()
    pool = f"pool-{uuid.uuid4().hex[:6]}"
    manifest = backend_manifest("waiting", namespace, scheduling={"nodeSelector": {"pool.example.com/name": pool}})
    apply_manifest(cluster, manifest)
    obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "waiting")) and condition(o, "Planned") and o,
                   timeout=60, what="Planned condition")
    planned = condition(obj, "Planned")
    assert planned["status"] == "False", planned
    assert cluster.kube.get("Deployment", namespace, "waiting") is None

    node = copy.deepcopy(topology_nodes("dgx-h100-x4")[0])
    node_name = f"dgx-extra-{pool}"
    node["metadata"]["name"] = node_name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = node_name
    node["metadata"]["labels"]["pool.example.com/name"] = pool
    cluster.kube.create(node)
    try:
        obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "waiting"))
                       and (condition(o, "Planned") or {}).get("status") == "True" and o,
                       timeout=30, what=f"Planned=True after the node was added; log:\n{op.log_tail()}")
        assert obj["status"]["plan"]["gpuProduct"] == "NVIDIA-H100-80GB-HBM3"
        wait_for(lambda: available(cluster, namespace, "waiting"), timeout=60, what="Available on the new node")
        pod = cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend")[0]
        assert pod["spec"]["nodeName"] == node_name
    finally:
        cluster.kube.delete("Node", None, node_name)
