"""A schedule floor (spec.autoscaling.schedule[]) on the real control plane: the operator's loop raises the workload to
the floor while no metrics come (kwok pods serve none) and says which entry holds it in status.autoscaling; panic mode
on without a panic reading stays off (status.autoscaling.panic absent)."""

from __future__ import annotations

from conftest import apply_manifest, backend_manifest, wait_for


def test_a_schedule_floor_raises_the_replicas_and_status_says_which_entry(cluster, operator, namespace):
    # a start every minute and an end once a year (Berlin time): the floor holds but in the year's first minute
    apply_manifest(cluster, backend_manifest("floored", namespace, autoscaling={
        "enabled": True, "minReplicas": 1, "maxReplicas": 3, "syncPeriodSeconds": 1, "panic": {"enabled": True},
        "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *", "timeZone": "Europe/Berlin", "desiredReplicas": 2}]}))

    def floored():
        obj = cluster.kube.get("LLMBackend", namespace, "floored") or {}
        auto = (obj.get("status") or {}).get("autoscaling") or {}
        return auto if "holds minReplicas at 2" in (auto.get("scheduleFloor") or "") else None
    auto = wait_for(floored, timeout=90, what="status.autoscaling.scheduleFloor")
    assert auto["scheduleFloor"].startswith("schedule[0] (* * * * * to 0 0 1 1 *, Europe/Berlin)")
    assert "panic" not in auto
    wait_for(lambda: ((cluster.kube.get("Deployment", namespace, "floored") or {}).get("spec") or {}).get("replicas")
             == 2, timeout=60, what="the Deployment at the floor of 2")
    assert operator.proc.poll() is None, operator.log_tail()
