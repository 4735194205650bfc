"""The local control plane is real: the API server answers, the scheduler places GPU pods on kwok nodes."""

from __future__ import annotations

from conftest import SESSION_TOPOLOGY, condition, wait_for


def _pod(name: str, namespace: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def test_api_server_answers_and_nodes_carry_gpus(cluster):
    version = cluster.kube.request("GET", "/version")
    assert version["gitVersion"].startswith("v1.")
    nodes = cluster.kube.list("Node")
    assert len(nodes) == 4, SESSION_TOPOLOGY
    for node in nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", "kwok keeps the simulated node Ready"


def test_pod_asking_for_8_gpus_lands_on_a_dgx_node_and_becomes_ready(cluster, namespace):
    cluster.kube.create(_pod("eight", namespace, 8))
    pod = wait_for(lambda: (p := cluster.kube.get("Pod", namespace, "eight"))
                   and condition(p, "Ready") and condition(p, "Ready")["status"] == "True" and p,
                   timeout=30, what="pod Ready")
    assert pod["spec"]["nodeName"].startswith("dgx-h100-")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"].startswith("127.0.1."), "kwok hands out loopback pod IPs"


def test_pod_asking_for_9_gpus_stays_pending_with_the_schedulers_reason(cluster, namespace):
    cluster.kube.create(_pod("nine", namespace, 9))
    scheduled = wait_for(lambda: condition(cluster.kube.get("Pod", namespace, "nine"), "PodScheduled"),
                         timeout=30, what="PodScheduled condition")
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in scheduled["message"]
    assert cluster.kube.get("Pod", namespace, "nine")["status"]["phase"] == "Pending"


def test_crd_from_crds_folder_is_established(cluster):
    out = cluster.kubectl("get", "crd", "llmbackends.llmbackend.dev", "-o",
                          "jsonpath={.status.conditions[?(@.type=='Established')].status}")
    assert out.stdout == "True"
    explain = cluster.kubectl("explain", "llmbackend.spec.engine.quantization")
    assert "fp8" in explain.stdout
