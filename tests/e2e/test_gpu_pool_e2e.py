"""One GPU pool shared by priority (spec.autoscaling.priority, autoscaling/pool.py) on the real control plane: two
backends pinned to one 8-GPU node, each asking for the whole node through a schedule floor (kwok pods serve no
metrics, so the floor is what each one's autoscaler wants). The one of higher priority takes the other's replicas
above its minReplicas, and status.autoscaling on both says who holds what."""

from __future__ import annotations

from conftest import apply_manifest, backend_manifest, wait_for

NODE = "dgx-h100-3"  # 8 GPUs; one GPU per replica of the e2e model


def _backend(name, namespace, priority, floor):
    return backend_manifest(name, namespace, scheduling={"nodeSelector": {"kubernetes.io/hostname": NODE}},
                            autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": floor, "syncPeriodSeconds": 1,
                                         "priority": priority,
                                         "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *",
                                                       "desiredReplicas": floor}]})


def _replicas(cluster, namespace, name):
    return ((cluster.kube.get("Deployment", namespace, name) or {}).get("spec") or {}).get("replicas")


def _autoscaling(cluster, namespace, name):
    return ((cluster.kube.get("LLMBackend", namespace, name) or {}).get("status") or {}).get("autoscaling") or {}


def test_a_higher_priority_backend_takes_the_gpus_of_a_lower_one_and_both_say_so(cluster, operator, namespace):
    apply_manifest(cluster, _backend("batch", namespace, 0, 8))
    wait_for(lambda: _replicas(cluster, namespace, "batch") == 8, timeout=90, what="the batch backend on all 8 GPUs")
    assert _autoscaling(cluster, namespace, "batch").get("preemptedBy") is None

    apply_manifest(cluster, _backend("chat", namespace, 10, 8))
    # chat wants all 8 GPUs; batch keeps its minReplicas (1), so chat gets 7 and waits for the last one
    wait_for(lambda: (_replicas(cluster, namespace, "batch"), _replicas(cluster, namespace, "chat")) == (1, 7),
             timeout=90, what="batch down to its minReplicas, chat at 7")
    batch = wait_for(lambda: (a := _autoscaling(cluster, namespace, "batch")).get("preemptedBy") and a, timeout=30,
                     what="status.autoscaling.preemptedBy on batch")
    assert batch["preemptedBy"] == f"{namespace}/chat (priority 10): 7 replica(s)"
    assert batch["reason"] == "PreemptedBy"
    assert f"held by {namespace}/chat (priority 10): 7 GPU(s)" in batch["waitingForCapacity"]
    chat = wait_for(lambda: (a := _autoscaling(cluster, namespace, "chat")).get("waitingForCapacity") and a,
                    timeout=30, what="status.autoscaling.waitingForCapacity on chat")
    assert chat["waitingForCapacity"] == (f"1 replica(s), 1 GPU(s), of a pool of 8; held by {namespace}/batch "
                                          "(priority 0): 1 GPU(s)")
    assert chat["reason"] == "WaitingForCapacity" and chat.get("preemptedBy") is None

    # equal priorities never take each other's GPUs: at priority 0 too, chat keeps what it holds and batch gets none
    apply_manifest(cluster, _backend("chat", namespace, 0, 8))
    wait_for(lambda: "held by" in (_autoscaling(cluster, namespace, "chat").get("waitingForCapacity") or "")
             and _autoscaling(cluster, namespace, "chat").get("reason") == "WaitingForCapacity", timeout=30,
             what="chat waiting at equal priority")
    assert (_replicas(cluster, namespace, "batch"), _replicas(cluster, namespace, "chat")) == (1, 7)
    assert operator.proc.poll() is None, operator.log_tail()
