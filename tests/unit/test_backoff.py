"""A failing backend's retries back off to at most BACKOFF_MAX_S apart, and start again from 1 s when its spec or one
of its children changes (issue 24: backoff counted every pass, reached 256 s after 42 s of failures, and recovery
then waited for the 300 s resync)."""

from __future__ import annotations

import asyncio
from collections import Counter

from kubernetes import client as k8s_client

from llmbackend.controller.kube import Kube
from llmbackend.controller.run import BACKOFF_MAX_S, Operator, WorkQueue, backoff_delay


def test_backoff_is_capped():
    delays = [backoff_delay(n) for n in range(1, 40)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert max(delays) == BACKOFF_MAX_S == 60.0


def _operator() -> Operator:
    configuration = k8s_client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # never contacted: nothing is started
    operator = Operator(Kube(configuration))
    operator.queue = WorkQueue.__new__(WorkQueue)  # its asyncio.Queue needs no loop for what is tested here
    operator.queue.failures = Counter()
    operator.queue.add = lambda key: None  # type: ignore[method-assign]
    return operator


def _priority_classes(monkeypatch, operator: Operator, classes: dict[str, int], reads: list[str] | None = None) -> None:
    """The operator's LIST of PriorityClasses answers ``classes`` (name -> value; each list counted in ``reads``);
    its other lists are answered as before."""
    other = operator.kube.list

    def listed(kind, namespace=None, **kw):
        if kind != "PriorityClass":
            return other(kind, namespace, **kw)
        if reads is not None:
            reads.append(kind)
        return [{"metadata": {"name": name}, "value": value} for name, value in classes.items()]
    monkeypatch.setattr(operator.kube, "list", listed)


def _backend(generation: int) -> dict:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": "b", "namespace": "ns", "generation": generation, "resourceVersion": str(generation)}}


def test_a_new_spec_resets_the_backoff_a_status_write_does_not():
    operator = _operator()
    key = ("ns", "b")
    operator.on_backend_event("ADDED", "ns", "b", _backend(1))
    operator.queue.failures[key] = 9
    operator.on_backend_event("MODIFIED", "ns", "b", _backend(1))  # status only: same generation
    assert operator.queue.failures[key] == 9
    operator.on_backend_event("MODIFIED", "ns", "b", _backend(2))
    assert key not in operator.queue.failures


def test_a_child_change_resets_the_backoff():
    operator = _operator()
    key = ("ns", "b")
    operator.queue.failures[key] = 9

    async def child_event() -> None:
        operator.loop = asyncio.get_running_loop()
        operator.on_child_event("Deployment", "MODIFIED",
                                {"metadata": {"namespace": "ns", "name": "b", "labels": {"llmbackend.dev/backend": "b"}}})
        await asyncio.sleep(0)

    asyncio.run(child_event())
    assert key not in operator.queue.failures
