"""Two operator replicas with --leader-elect: only the Lease holder acts; when it dies (SIGKILL, so
the Lease is not released) the standby takes over within the lease duration and reconciles."""

from __future__ import annotations

import time

from conftest import apply_manifest, available, backend_manifest, condition, wait_for

LEASE_SECONDS = 15  # LeaderElector default
RENEW_SECONDS = 5


def _holder(cluster, namespace, name):
    lease = cluster.kube.get("Lease", namespace, name)
    return (lease or {}).get("spec", {}).get("holderIdentity")


def test_only_the_leader_acts_and_the_standby_takes_over(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    lease = "llmbackend-ha-test"
    args = ("--leader-elect", "--lease-namespace", namespace, "--lease-name", lease)
    first = own_operator(*args, name="ha-op-a", env={"POD_NAME": "op-a"})
    wait_for(lambda: _holder(cluster, namespace, lease) == "op-a", timeout=30, what="op-a holds the Lease")
    second = own_operator(*args, name="ha-op-b", env={"POD_NAME": "op-b"})
    wait_for(lambda: "waiting to lead" in second.log_text(), timeout=30, what="op-b waiting")

    apply_manifest(cluster, backend_manifest("one", namespace))
    wait_for(lambda: available(cluster, namespace, "one"), timeout=60, what="one Available (reconciled by the leader)")
    # Several renewals later the standby still waits and has not started reconciling.
    time.sleep(RENEW_SECONDS * 2 + 1)
    assert _holder(cluster, namespace, lease) == "op-a"
    assert "leading as" not in second.log_text() and "kopf" not in second.log_text(), second.log_tail()
    assert "leading as op-a" in first.log_text()
    assert second.proc.poll() is None and first.proc.poll() is None
    transitions = cluster.kube.get("Lease", namespace, lease)["spec"].get("leaseTransitions", 0)

    # Kill the leader without releasing the Lease: the standby waits for it to expire, then leads.
    first.stop(kill=True)
    killed = time.monotonic()
    wait_for(lambda: _holder(cluster, namespace, lease) == "op-b", timeout=LEASE_SECONDS + RENEW_SECONDS + 10,
             interval=0.5, what=f"op-b takes over; log:\n{second.log_tail()}")
    took = time.monotonic() - killed
    assert took <= LEASE_SECONDS + RENEW_SECONDS + 5, f"takeover took {took:.1f}s"
    lease_obj = cluster.kube.get("Lease", namespace, lease)
    assert lease_obj["spec"]["leaseTransitions"] == transitions + 1

    # The new leader reconciles a new backend and a change to the old one.
    apply_manifest(cluster, backend_manifest("two", namespace))
    wait_for(lambda: available(cluster, namespace, "two"), timeout=90, what=f"two Available under op-b; log:\n{second.log_tail()}")
    cluster.kubectl("scale", "llmb", "one", "-n", namespace, "--replicas=2")
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "one")["spec"]["replicas"] == 2, timeout=60,
             what="one scaled by op-b")
    assert "leading as op-b" in second.log_text()
    obj = cluster.kube.get("LLMBackend", namespace, "two")
    assert condition(obj, "Planned")["status"] == "True"
