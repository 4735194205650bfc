"""What the attacks on the GPU pool (test_pool_attack*_e2e.py) share besides conftest's `tenant` and `victim`: a
backend whose schedule floor asks for a number of replicas on one node (kwok pods serve no metrics, so the floor is
what its autoscaler wants), and PriorityClasses made for one test."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import yaml
from conftest import ClusterHandle, backend_manifest, grant


def floor_backend(name: str, namespace: str, floor: int, node: str, *, min_replicas: int = 1,
                  max_replicas: int | None = None, priority: int | None = None, priority_class: str | None = None,
                  tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A backend on ``node`` whose schedule floor asks for ``floor`` replicas at every minute (maxReplicas: floor)."""
    scheduling: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": node}}
    if priority_class:
        scheduling["priorityClassName"] = priority_class
    if tolerations:
        scheduling["tolerations"] = tolerations
    auto: dict[str, Any] = {"enabled": True, "minReplicas": min_replicas, "maxReplicas": max_replicas or floor,
                            "syncPeriodSeconds": 1,
                            "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *", "desiredReplicas": floor}]}
    if priority is not None:
        auto["priority"] = priority
    return backend_manifest(name, namespace, scheduling=scheduling, autoscaling=auto)


@contextlib.contextmanager
def priority_classes(cluster: ClusterHandle, values: dict[str, int]) -> Iterator[dict[str, str]]:
    """A PriorityClass of each value, under a name of this test's (key -> name), deleted after."""
    suffix = uuid.uuid4().hex[:6]
    names = {key: f"llmb-{key}-{suffix}" for key in values}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": names[key]},
         "value": value} for key, value in values.items()]))
    try:
        yield names
    finally:
        cluster.kubectl("delete", "priorityclass", *names.values(), "--wait=false", check=False)


def grant_use(cluster: ClusterHandle, user: str, namespace: str, priority_class: str) -> None:
    """Let ``user`` name ``priority_class`` in ``namespace`` (the `use` verb the admission policy asks for)."""
    grant(cluster, user, namespace, "use-priority-class", [
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "resourceNames": [priority_class],
         "verbs": ["use"]}])
