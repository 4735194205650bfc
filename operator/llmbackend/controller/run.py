"""`llmbackend run`: the operator process.

kopf provides the event loop, signal handling and logging. The LLMBackends, Nodes, the operator's children and
serving pods are watched by `cache.WatchCaches` (children and pods with a label selector sent to the API server, so
unrelated objects never reach this process). Watch events only enqueue keys; a small
work queue (deduplicating, with per-key backoff) runs the level-triggered `Reconciler` in worker threads,
reading from the caches. The autoscaler loop and a periodic resync enqueue keys too. With
--leader-elect, only the holder of a coordination.k8s.io Lease runs at all. docs/controller.md says why.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import functools
import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import kopf

from ..api import conditions as cond
from ..api.v1alpha1 import GROUP, PLURAL
from ..autoscaling import activation, coldstart, metrics
from ..autoscaling.decision import MEMORY_GAP_S, ScalerState, burst_warning, decide, panic_window_s, schedule_hold
from ..autoscaling.drain import DELETION_COST_ANNOTATION, deletion_costs, removable, room_first
from ..autoscaling.holding import (
    SchedulerMemory,
    beyond_gpus,
    bound_gpus,
    bound_replicas,
    could_run_on,
    counted_waiting,
    gpus_held_by_node_priority,
    gpus_in_use,
    held_replicas,
    is_group_pod,
    made_by,
    pod_key,
    refused_beside_room,
    thin_waiting,
    unclaimed_bound,
    unclaimed_waiting,
    waiting_ages,
)
from ..autoscaling.pool import Claim, PoolState, Share, Unclaimed, runs, share, waiting_replicas
from ..autoscaling.quota import live_pod_gpus, quota_free, quota_replicas
from ..autoscaling.sources import PrometheusRatioSource, TritonScraper, pod_regex_for
from ..planning.podfit import gpus_held_by_node, pod_gpus
from ..render.names import BACKEND_LABEL, serving_pod_ready
from ..render.triton import METRICS_PORT
from . import egress, permissions
from .cache import API_SERVED, CachedKube, Store, WatchCaches
from .kube import Kube, load_configuration
from .leader import LEASE_NAME, LeaderElector
from .reconcile import Reconciler, ScaleDecision, SharedState

log = logging.getLogger("llmbackend.operator")

# Liveness: the event loop must tick, and a queue with work must finish a reconcile now and then.
LOOP_STALL_S = 60.0
EVALUATE_TIMEOUT_S = 30.0  # one backend's scrape and decision (scrapes time out after 2 s each)
QUEUE_STALL_S = 300.0
CACHE_SYNC_TIMEOUT_S = 120.0
STOP_WAIT_S = 10.0  # on shutdown, how long passes in flight may take to finish
# A failing backend is retried at 1, 2, 4 ... s, at most this far apart: long enough not to hammer a failing API
# server, short enough that a fix elsewhere (a quota raised, a CRD reinstalled) shows within a minute. A change of its
# spec or of one of its children starts the count again.
BACKOFF_MAX_S = 60.0
PRIORITY_CLASS_TTL_S = 60.0  # a PriorityClass's value is read again after this long (its value is immutable)
# (``priority_classes``' key for the value the Priority admission plugin gives a pod that names no class: no
# PriorityClass is named "")
GLOBAL_DEFAULT = ""


# Concurrent reconciles. A first pass is about 6 requests in a row and 25-30 ms of CPU (GIL-bound, one core): 8 keep
# that core busy while each request waits 20-30 ms for the API server, as on a quiet control plane. More do not make a
# burst of new backends faster: there the control plane is the bottleneck (load_bench.py: the API server's CPU per new
# backend is about 5 times the operator's), and more passes in flight only queue there (docs/controller.md, "Sizing").
DEFAULT_WORKERS = 8
# Idle connections the REST client keeps, beyond one per worker: the autoscaler loop, the model cache's cleanup and the
# leader Lease use it too. (The watches hold their own connections while they stream; the pool never blocks: a request
# that finds no idle connection opens one, which is then closed instead of kept.)
CLIENT_POOL_SPARE = 4


def backoff_delay(failures: int) -> float:
    return min(BACKOFF_MAX_S, 0.5 * 2 ** min(failures, 10))


class WorkQueue:
    """Deduplicating queue of keys: a key is never processed by two workers at once."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._pending: set[tuple[str, str]] = set()
        self._active: set[tuple[str, str]] = set()
        self._dirty: set[tuple[str, str]] = set()
        self.failures: Counter[tuple[str, str]] = Counter()

    def add(self, key: tuple[str, str]) -> None:
        if key in self._active:
            self._dirty.add(key)  # re-run once the current pass ends
        elif key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: tuple[str, str], delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    async def get(self) -> tuple[str, str]:
        key = await self._queue.get()
        self._pending.discard(key)
        self._active.add(key)
        return key

    def done(self, key: tuple[str, str]) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def __len__(self) -> int:
        return len(self._pending)


def _coverable(pod: dict[str, Any], loose: frozenset[tuple[str, str]], fits: Callable[[dict[str, Any]], bool],
               multi_node: bool, gpus_per_replica: int) -> bool:
    """Whether a backend's Pending pod may stand for one of its waiting replicas (``holding.counted_waiting``): not
    one ``thin_waiting`` set loose, one a node of its pool could hold, and a whole replica's pod (a multi-node
    group's members each ask a part, and are placed one by one: none stands for its group)."""
    if multi_node or pod_key(pod) in loose or not fits(pod):
        return False
    return pod_gpus(pod) >= gpus_per_replica


class Operator:
    def __init__(self, kube: Kube, workers: int = DEFAULT_WORKERS, resync_seconds: float = 300, namespaces: list[str] | None = None):
        self.state = SharedState()
        self.caches = WatchCaches(kube, namespaces, on_event=self.on_child_event)
        self.backends: Store = self.caches.backends
        self.kube = CachedKube(kube, self.caches, self.backends)
        self.state.node_names = self.caches.nodes.names
        self.reconciler = Reconciler(self.kube, self.state)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = False
        self.heartbeat = time.monotonic()
        self.last_progress = time.monotonic()
        self.queue: WorkQueue | None = None
        self.workers = workers
        self.resync_seconds = resync_seconds
        self.known: set[tuple[str, str]] = set()
        self.generations: dict[tuple[str, str], int | None] = {}  # the last spec generation seen per backend
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reconcile")
        self.tasks: list[asyncio.Task] = []
        self.scalers: dict[tuple[str, str], dict[str, Any]] = {}
        # A shared GPU pool (autoscaling/pool.py): each backend's decision before the pool's cap, the pool's memory,
        # the PriorityClass values read (name -> (value or None, when read)), and the admin's opt-in.
        self.uncapped: dict[tuple[str, str], ScaleDecision] = {}
        self.pool_state = PoolState()
        self.shares: dict[tuple[str, str], Share] = {}
        # backend -> the AutoscaleTarget for which the API server said its Deployment does not exist (_held)
        self.absent_deployments: dict[tuple[str, str], Any] = {}
        self.priority_classes: dict[str, tuple[int | None, float]] = {}
        self.global_default_class: str | None = None  # the name of the class with globalDefault: true, as last read
        self.priority_across_namespaces = False
        self.pool_stale = False  # an evaluation ended since the pools were last shared
        self.scheduler_memory = SchedulerMemory()  # the pool pass's reading of the scheduler's silence
        # backend -> its Pending replica pods the scheduler leaves beside room this pass (holding.refused_beside_room)
        self.refused_replicas: dict[tuple[str, str], int] = {}
        self.free_by_node: dict[str, int] | None = None  # this pass's GPUs free on the pools' nodes, where read
        # this pass's cuts' ledger: GPUs free by node and replicas each taker lacks, as the rooms made spend them
        self.room_ledger: tuple[dict[str, int], dict[tuple[str, str], int]] | None = None
        self.pool_running: dict[tuple[str, str], int] = {}  # this pass's replicas running by claim, where read
        self.elector: LeaderElector | None = None  # with --leader-elect: released on a clean shutdown

    # ---- event intake (on the event loop; the watch threads hand their events over) ----

    def enqueue(self, key: tuple[str, str]) -> None:
        if self.queue is not None:
            self.queue.add(key)

    def on_backend_event(self, event_type: str, namespace: str, name: str, body: dict[str, Any] | None = None) -> None:
        """An LLMBackend event (its watcher has updated the store already). DELETED also comes from a re-list that
        no longer has the backend (deleted while the watch was down)."""
        key = (namespace, name)
        if body is not None and event_type != "DELETED":
            generation = (body.get("metadata") or {}).get("generation")
            if self.generations.get(key) != generation:  # a new spec: whatever failed may work now
                self.generations[key] = generation
                self.reset_backoff(key)
        if event_type == "DELETED":
            self.forget(key)
            self.enqueue(key)  # the reconcile of a gone backend cleans up model cache copies no one uses
            return
        self.known.add(key)
        self.enqueue(key)

    def forget(self, key: tuple[str, str]) -> None:
        """A backend that is gone: nothing of it is kept, retried or scaled."""
        self.known.discard(key)
        self.generations.pop(key, None)
        self.reset_backoff(key)
        self.reconciler.forget(key)
        scaler = self.scalers.pop(key, None)
        if scaler is not None:
            asyncio.get_running_loop().create_task(_close_scaler(scaler))
        metrics.forget_backend(*key)

    def on_child_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        """From a watch thread: a node changes the inventory; a child or pod wakes the backend that owns it."""
        if self.loop is None:
            return
        if kind == "Node":
            self.loop.call_soon_threadsafe(self.on_node_event, event_type, obj)
            return
        if kind == "LLMBackend" and event_type != API_SERVED:
            meta = obj.get("metadata") or {}
            self.loop.call_soon_threadsafe(self.on_backend_event, event_type, meta.get("namespace", ""),
                                           meta.get("name", ""), obj)
            return
        if event_type == API_SERVED:  # a CRD (re)installed: backends that would own one of its kind look again
            self.loop.call_soon_threadsafe(self.on_api_served)
            return
        owner = (obj.get("metadata", {}).get("labels") or {}).get(BACKEND_LABEL)
        if owner:
            self.loop.call_soon_threadsafe(self.on_child_changed, (obj["metadata"].get("namespace", ""), owner))

    def on_api_served(self) -> None:
        for key in self.known:
            self.reset_backoff(key)
            self.enqueue(key)

    def on_child_changed(self, key: tuple[str, str]) -> None:
        self.reset_backoff(key)
        self.enqueue(key)

    def reset_backoff(self, key: tuple[str, str]) -> None:
        if self.queue is not None:
            self.queue.failures.pop(key, None)

    # ---- health ----

    def live(self) -> tuple[bool, str]:
        if not self.started:
            return True, "waiting to lead"
        now = time.monotonic()
        if now - self.heartbeat > LOOP_STALL_S:
            return False, f"event loop stalled for {now - self.heartbeat:.0f}s"
        if self.queue is not None and len(self.queue) and now - self.last_progress > QUEUE_STALL_S:
            return False, f"{len(self.queue)} keys queued and no reconcile finished for {now - self.last_progress:.0f}s"
        # a loop of the operator (workers, resync, autoscaling) that ended with an error: only a restart brings it back
        failed = [t for t in self.tasks if t.done() and not t.cancelled() and t.exception() is not None]
        if failed:
            return False, f"{len(failed)} of the operator's loops ended: {failed[0].exception()!r}"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if not self.started:
            return True, "standby: waiting for the leader Lease"
        if self.caches.crd_missing():
            return False, (f"the {PLURAL}.{GROUP} CRD is not served (deleted, or not installed yet): waiting for it; "
                           "apply crds/ (or the chart) again")
        if not self.caches.synced:
            return False, "watch caches not synced: " + ", ".join(self.caches.unsynced())
        return True, "ok"

    def on_node_event(self, event_type: str, body: dict[str, Any]) -> None:
        name = body.get("metadata", {}).get("name", "")
        with self.state.lock:
            if event_type == "DELETED":
                self.state.lost_nodes.add(name)
            else:
                self.state.lost_nodes.discard(name)
        if event_type == "DELETED":
            # Its pods are served no more: their backends' status says so now. The others look again too: a kept
            # plan's explanation may name it (node deletions are rare; the passes read from the caches).
            for key in self.backends_on_node(name) | self.known:
                self.enqueue(key)
        changed = self.state.inventory.remove(name) if event_type == "DELETED" else self.state.inventory.upsert(body)
        if not changed:
            return  # heartbeats and unrelated label changes do not re-render anything
        with self.state.lock:
            # Only backends waiting for GPUs or sizing their autoscaling need another look; running plans are kept.
            keys = set(self.state.waiting_for_capacity) | set(self.state.autoscale_targets)
        for key in keys:
            self.enqueue(key)

    def backends_on_node(self, node: str) -> set[tuple[str, str]]:
        """The backends with a pod bound to this node (from the pod cache)."""
        keys = set()
        for pod in self.caches.stores["Pod"].list(None, None):
            owner = (pod["metadata"].get("labels") or {}).get(BACKEND_LABEL)
            if owner and (pod.get("spec") or {}).get("nodeName") == node:
                keys.add((pod["metadata"].get("namespace", ""), owner))
        return keys

    # ---- loops ----

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.caches.start()
        self.queue = WorkQueue()
        for key in self.known:
            self.queue.add(key)
        self.tasks = [asyncio.create_task(self._begin()), asyncio.create_task(self._heartbeat_loop())]
        self.started = True

    async def _begin(self) -> None:
        """Reconcile once the caches hold the first lists: plans and capacity need the whole node inventory."""
        assert self.loop is not None
        if not await self.loop.run_in_executor(None, self.caches.wait_synced, CACHE_SYNC_TIMEOUT_S):
            log.warning("watch caches not synced after %.0fs (%s); reconciling with reads from the API server",
                        CACHE_SYNC_TIMEOUT_S, ", ".join(self.caches.unsynced()))
        self.tasks += [asyncio.create_task(self._worker(i)) for i in range(self.workers)]
        self.tasks.append(asyncio.create_task(self._resync_loop()))
        self.tasks.append(asyncio.create_task(self._autoscale_loop()))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for scaler in self.scalers.values():
            await _close_scaler(scaler)
        self.caches.stop()
        # Passes in flight finish (briefly) before the Lease is released: the next leader must not race their writes.
        finishing = asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self.executor.shutdown, wait=True, cancel_futures=True))
        try:
            await asyncio.wait_for(finishing, STOP_WAIT_S)
        except TimeoutError:
            log.warning("reconciles still running after %.0fs; stopping anyway", STOP_WAIT_S)

    async def _worker(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        assert self.queue is not None
        while True:
            key = await self.queue.get()
            started = time.monotonic()
            try:
                outcome = await loop.run_in_executor(self.executor, self.reconciler.reconcile, key)
                self.queue.failures.pop(key, None)
                metrics.observe_reconcile("success", time.monotonic() - started)
                if outcome.gone and self.backends.get(*key) is None:  # gone, whatever the store said: no retry
                    self.forget(key)
                elif outcome.gone:  # replaced under its name (the store has the new one now): serve that one
                    self.enqueue(key)
                if outcome.requeue_after:
                    self.queue.add_after(key, outcome.requeue_after)
            except Exception as exc:  # noqa: BLE001 - any failure is retried with backoff, never crashes
                failures = self.queue.failures[key] = self.queue.failures[key] + 1
                delay = backoff_delay(failures)
                metrics.observe_reconcile("error", time.monotonic() - started)
                log.warning("reconcile %s/%s failed (attempt %d, retry in %.1fs): %s", *key, failures, delay, exc)
                self.queue.add_after(key, delay)
            finally:
                self.last_progress = time.monotonic()
                self.queue.done(key)

    async def _heartbeat_loop(self) -> None:
        while True:
            self.heartbeat = time.monotonic()
            await asyncio.sleep(1)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            for key in list(self.known):
                self.enqueue(key)

    async def _autoscale_loop(self) -> None:
        """Every second: start the evaluation of each backend whose sync period is due, each on its own task, then
        share the GPU pools from every backend's latest decision (this round's, for those that end within it). A
        backend's slow evaluation (its pods' /metrics are its image's) delays its own next one only: one still running
        is not started again (its last decision stands), and EVALUATE_TIMEOUT_S cancels it (read and parse stop with
        it, and the log says so)."""
        loop = asyncio.get_running_loop()
        tick = loop.time()
        try:
            while True:
                tick = max(tick + 1, loop.time())  # a round a second (a long pool pass delays the next, no burst)
                await asyncio.sleep(tick - loop.time())
                with self.state.lock:
                    targets = dict(self.state.autoscale_targets)
                for key in list(self.scalers):
                    if key not in targets:
                        await self._drop_scaler(key)
                now = time.time()
                started = []
                for key, target in targets.items():
                    scaler = self.scalers.get(key)
                    if scaler is None or scaler["kind"] != target.spec.source or scaler.get("model") != target.scrape_model:
                        if scaler is not None:
                            await self._drop_scaler(key)
                        try:
                            scaler = self.scalers[key] = self._new_scaler(target)
                        except Exception as exc:  # noqa: BLE001 - one backend's scaler never stops this loop for all
                            log.warning("autoscaling %s/%s: the scaler did not start (%s); trying again", *key, exc)
                            continue
                    running = scaler.get("task")
                    if running is not None and not running.done():
                        continue  # still evaluating: its last decision stands (a timeout ends it, and says so)
                    if now >= scaler["next"] - 0.5:  # due at the round nearest its time (rounds are 1 s apart)
                        scaler["next"] = now + target.spec.sync_period_seconds
                        scaler["task"] = asyncio.create_task(self._evaluate_in_time(key, target, scaler))
                        started.append(scaler["task"])
                if started:  # those that end before the next round are shared in this one
                    await asyncio.wait(started, timeout=max(0.0, tick + 1 - loop.time()))
                if self.pool_stale:
                    self.pool_stale = False
                    try:
                        await self._share_pools(targets)
                    except Exception:  # noqa: BLE001 - one backend's data never stops scaling for every namespace
                        log.exception("autoscaling: the GPU pool share failed this round; the last shares stay")
        finally:
            running = [t for s in self.scalers.values() if (t := s.get("task")) is not None and not t.done()]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _evaluate_in_time(self, key: tuple[str, str], target, scaler: dict[str, Any]) -> None:
        """One backend's evaluation, bounded by EVALUATE_TIMEOUT_S; its end marks the pools to share again."""
        try:
            await asyncio.wait_for(self._evaluate(key, target, scaler), EVALUATE_TIMEOUT_S)
        except TimeoutError:
            log.warning("autoscaling %s/%s: the evaluation took more than %.0fs and was stopped; its last decision "
                        "stands (a pod's /metrics slow to answer? see status.autoscaling and the scrape errors)",
                        *key, EVALUATE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - one backend's failure never stops another's scaling
            log.warning("autoscaling %s/%s: no decision this round (%s); its last one stands", *key, exc)
        finally:
            self.pool_stale = True

    async def _drop_scaler(self, key: tuple[str, str]) -> None:
        """Stop a backend's scaler: its evaluation in flight, then its clients."""
        scaler = self.scalers.pop(key)
        task = scaler.get("task")
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await _close_scaler(scaler)

    def _new_scaler(self, target) -> dict[str, Any]:
        source: PrometheusRatioSource | TritonScraper | None
        if target.spec.source == "prometheus" and not egress.settings.prometheus_allowed(target.spec.prometheus.url):
            source = None  # a URL the admin did not allow is never called (_evaluate says so in status)
        elif target.spec.source == "prometheus":
            source = PrometheusRatioSource(target.spec.prometheus.url)
        else:
            source = TritonScraper(target.scrape_model, namespace=target.namespace)
        try:
            state = ScalerState.resumed(target.memory, time.time())
        except Exception as exc:  # noqa: BLE001 - status is not only ours to write: a memory that breaks is no memory
            log.warning("autoscaling %s/%s: the memory in status is ignored (%s)", target.namespace, target.name, exc)
            state = ScalerState()
        if state.since is not None:
            log.info("autoscaling %s/%s: resumed the memory in status (watching since %s)", target.namespace,
                     target.name, target.memory["watchingSince"])
        elif target.memory:
            log.info("autoscaling %s/%s: a new scaler; the memory in status is unreadable or was last seen more than "
                     "%.0fs ago (lastSeen %s)", target.namespace, target.name, MEMORY_GAP_S,
                     target.memory.get("lastSeen"))
        return {"kind": target.spec.source, "model": target.scrape_model, "source": source, "state": state,
                "next": 0.0, "cold_starts": {}}

    async def _evaluate(self, key: tuple[str, str], target, scaler: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        prom = target.spec.prometheus
        # the pods the pool judges this backend by, read before anything can hold or fail the decision: a backend
        # whose decision is held still holds GPUs of its pool, and the pool must see which of them run
        listing: Exception | None = None
        try:
            pods = await loop.run_in_executor(
                self.executor, lambda: self.kube.list("Pod", target.namespace, label_selector=target.selector))
        except Exception as exc:  # noqa: BLE001 - raised below, unless the decision is held anyway
            pods, listing = [], exc
        scaler["pods"] = None if listing else pods  # not known: the pool judges its pool as before pods were read
        if prom is not None and not egress.settings.prometheus_allowed(prom.url):
            self._hold(key, target, cond.PROMETHEUS_NOT_ALLOWED, (
                f"autoscaling.prometheus.url {prom.url} is not a Prometheus this operator may call, so replicas stay "
                f"at {target.current_replicas}; ask the cluster admin to allow it (operator flag --prometheus-url, or "
                f"{egress.PROMETHEUS_URLS_ENV}), or use autoscaling.source triton"))
            return
        refusal = egress.query_refusal(prom, egress.settings.prometheus_queries) if prom is not None else None
        if refusal is not None:
            self._hold(key, target, cond.PROMETHEUS_QUERY_NOT_ALLOWED, refusal)
            return
        if listing is not None:
            raise listing
        ready = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods if _pod_ready(p)}
        scaler["cold_starts"] = coldstart.observe(scaler["cold_starts"], pods)
        scaler["starting"], scaler["churn"] = coldstart.track_churn(
            scaler.get("starting", {}), scaler.get("churn", []), pods, time.time())
        cold_s, cold_from = coldstart.estimate(scaler["cold_starts"].values(), target.spec.cold_start_seconds)
        if target.spec.source == "prometheus":
            reading = await scaler["source"].reading(target.namespace, pod_regex_for(names=sorted(ready)) if ready else "^$")
        else:
            failed = await scaler["source"].scrape(ready)
            if failed:
                metrics.scrape_error(target.namespace, target.name, failed)
            reading = scaler["source"].reading(target.spec.window_seconds)
        panic_reading = None
        if target.spec.panic is not None and target.spec.panic.enabled and isinstance(scaler["source"], TritonScraper):
            # the same scrapes over the short panic window (with a Prometheus source the recording rule's window is
            # the only one: panic mode then never engages; docs/autoscaling.md)
            panic_reading = scaler["source"].reading(panic_window_s(target.spec))
        waiting = None
        activation_query = egress.settings.activation_query(prom, *key) if prom is not None else None
        if target.current_replicas == 0 and prom is not None and activation_query:
            # No replica, no engine metrics: the requests held in front of the backend decide 0 -> 1.
            scaler.setdefault("activation", PrometheusRatioSource(prom.url))
            waiting = await scaler["activation"].waiting(activation_query)
        if target.current_replicas == 0 and target.activator_selector:
            # The activator holds the requests that arrive at zero; its gauge wakes the backend.
            held = await self._held_at_activator(target, scaler)
            if held is not None:
                waiting = max(waiting or 0.0, held)
        try:
            decision = decide(
                scaler["state"], reading, target.spec, target.current_replicas, time.time(),
                schedulable_max=target.capacity_replicas, gpus_per_replica=target.gpus_per_replica,
                max_batch_size=target.max_batch_size, cold_start_s=cold_s, waiting_at_zero=waiting,
                starting_ages=coldstart.starting_ages(pods, time.time()), panic_reading=panic_reading,
            )
        except Exception:
            log.exception("autoscaling %s/%s: no decision this round (its last one stands)", *key)
            raise
        scaler["state"] = decision.state
        pool_share = self.shares.get(key)  # a lower-priority backend's replicas go for another's: drained first too
        if pool_share is None and target.pool:
            # not shared yet (new, or the operator restarted): no growth before _share_pools caps it, so a backend
            # joining a full pool never creates pods it is about to lose
            pool_share = Share(min(decision.desired_replicas, target.current_replicas))
        desired = decision.desired_replicas if pool_share is None else min(decision.desired_replicas, pool_share.replicas)
        pool_cut = pool_share is not None and pool_share.replicas < min(decision.desired_replicas,
                                                                         target.current_replicas)
        if desired < target.current_replicas and pods and not pool_cut:
            # the least busy pods go first; whatever the source, a pool cut's spent room-first mark goes back to 0.
            # (A cut the pool makes is the pool pass's to order: the pods that make a taker's room first; rewritten
            # here before the replicas are, the marks were gone when the ReplicaSet read them, attack pass 74
            # finding 5)
            source = scaler["source"]
            await loop.run_in_executor(self.executor, self._set_deletion_costs, target.namespace, pods,
                                       source.in_flight_by_pod() if isinstance(source, TritonScraper) else {})
        ratio = reading.formatted() if reading.ratio is not None else None
        extra: dict[str, Any] = {"signal": reading.signal, "coldStartSeconds": round(cold_s), "coldStartSource": cold_from}
        if decision.engine is not None:
            extra["inFlight"] = f"{decision.engine.in_flight:g}/{decision.engine.slots_per_replica * (reading.pods_used or 0):g}"
            extra["forecastInFlight"] = f"{decision.engine.forecast:.1f}"
            extra["burstHeadroom"] = f"{decision.engine.headroom:.2f}"
            extra["burstRise"] = f"{decision.engine.rise:.2f}"
            extra["utilization"] = f"{decision.engine.utilization_in_use(target.spec.target_utilization):g}"
            extra["load"] = f"{decision.engine.load:.1f}"
            extra["readyReplicas"] = decision.engine.ready
            extra["startingReplicas"] = decision.engine.starting
        extra["memory"] = decision.state.memory(time.time())  # what an operator restart resumes
        extra["podsDeletedBeforeReady"] = len(scaler["churn"])
        extra["churnWarning"] = coldstart.churn_warning(len(scaler["churn"]))
        extra["burstWarning"] = burst_warning(decision.state, target.spec, time.time())
        extra["panic"] = decision.panic
        hold = schedule_hold(target.spec, time.time())
        extra["scheduleFloor"] = hold.status(target.spec) if hold is not None else None
        metrics.set_backend(target.namespace, target.name, ratio=reading.ratio, desired=decision.desired_replicas,
                            replicas=target.current_replicas, signal=reading.signal)
        # capped by the backend's last share of its GPU pool; _share_pools publishes it again with this round's
        self.uncapped[key] = ScaleDecision(decision.desired_replicas, decision.reason, decision.message, ratio,
                                           decision.state.last_scale_time_rfc3339(), extra, reading.request_p99_s,
                                           decision.state.recent())
        self._publish(key, target, capped(self.uncapped[key], pool_share))

    def _publish(self, key: tuple[str, str], target, new: ScaleDecision) -> None:
        """Hand a decision to the reconciler (it writes the replicas and status.autoscaling) when it changed."""
        with self.state.lock:
            old = self.state.decisions.get(key)
            self.state.decisions[key] = new
        if old != new:
            if new.desired_replicas != target.current_replicas:
                log.info("autoscaling %s/%s: %d -> %d (%s: %s)", *key, target.current_replicas,
                         new.desired_replicas, new.reason, new.message)
            self.enqueue(key)

    async def _share_pools(self, targets: dict[tuple[str, str], Any]) -> None:
        """Cap each backend's decision at its share of the GPUs it shares with others (autoscaling/pool.py), then
        publish it: the reconciler writes the replicas and status.autoscaling."""
        for key in [k for k in self.uncapped if k not in targets]:
            del self.uncapped[key]
        for key in [k for k, t in self.absent_deployments.items() if targets.get(k) is not t]:
            del self.absent_deployments[key]
        loop = asyncio.get_running_loop()
        claims = []
        in_use = {t.priority_class for t in targets.values() if t.pool and t.priority_class} | {GLOBAL_DEFAULT}
        for name in [n for n in self.priority_classes if n not in in_use]:
            del self.priority_classes[name]  # a class no backend runs with any more (names are the tenants')
        await self._read_priority_classes(in_use)
        quotas: dict[str, list[dict[str, Any]] | None] = {}  # namespace -> its ResourceQuotas, read once a pass
        inventory = self.state.inventory.nodes()
        # a backend -> whether one of its Pending pods may stand for its waiting replica (``counted_waiting``)
        coverable: dict[tuple[str, str], Callable[[dict[str, Any]], bool]] = {}
        # (a pool's nodes, the pod shape of its backend's replicas) -> the fit, cached
        fits_in: dict[tuple[frozenset[str] | None, str], Callable[[dict[str, Any]], bool]] = {}
        for key, target in targets.items():
            if not target.pool:
                continue
            like = None if target.multi_node else target.replica_pod_spec
            fit_key = (target.pool_nodes, json.dumps(like, sort_keys=True, default=str) if like else "")
            if fit_key not in fits_in:
                fits_in[fit_key] = could_run_on(
                    None if target.pool_nodes is None else [n for n in inventory if n.name in target.pool_nodes], like)
            fits = fits_in[fit_key]
            # every backend of a pool claims: one whose decision is held (or not made yet) keeps its replicas, which
            # hold GPUs and may wait for them as any other's. Its decision is not the pool's to cap, so none of them
            # is the pool's to give away either: they are its floor
            capped_here = key in self.uncapped
            wanted = self.uncapped[key].desired_replicas if capped_here else target.current_replicas
            floor = target.spec.min_replicas if capped_here else max(target.spec.min_replicas, target.current_replicas)
            # the class's value is the pods' priority for the kube-scheduler, which counts across namespaces
            # (no class: the global default's, as the Priority admission plugin gives its pods; none: 0)
            class_value = self.priority_classes[target.priority_class or GLOBAL_DEFAULT][0]
            # (and the class its pods get at admission, which a ResourceQuota's PriorityClass scope selects: attack
            # pass 46 finding 2)
            pod_class = target.priority_class or self.global_default_class
            cluster_wide = target.priority is None and class_value is not None
            pods = await self._pool_pods(key, target, (self.scalers.get(key) or {}).get("pods"))
            # of its replicas, those whose pods run (bound to nodes of the pool): the pool reads from them which pods
            # wait for GPUs, not from the ranks. Not known while its pods are not read
            running = bound_replicas(target.current_replicas, pods, target.pool_nodes, target.gpus_per_replica > 0,
                                     target.multi_node, workload_made=target.name)
            # no more whole replicas than the GPUs its bound pods hold make; those the cap takes off are bound, not
            # waiting: they hold no replica's GPUs (their pods' count beside the claims: holding.unclaimed_bound)
            thin, beyond = 0, 0
            if target.gpus_per_replica > 0:
                on_nodes = bound_gpus(pods, target.pool_nodes, True, target.name)
                thin = max(0, running - on_nodes // target.gpus_per_replica)
                running -= thin
                # (its own pods beyond the replicas counted running, of its pod priority and above: in
                # ``bound_unclaimed``, but no room they take from it)
                beyond = beyond_gpus(pods, target.pool_nodes, target.name, running * target.gpus_per_replica,
                                     class_value or 0)
            bound = running if pods is not None else None
            if target.unplaceable:
                # pods no node of the pool could hold (the reconciler judged the rendered pod: planning/podfit.py)
                # claim nothing: the backend keeps those of its replicas whose pods are bound, and takes no GPUs
                held: int | None = running
            else:
                # replicas whose pods can never hold a GPU (a quota or the API server refused them, or they cannot be
                # placed for another reason) are nobody's GPUs: from the pods of its last evaluation and its
                # Deployment's conditions
                held = await self._held(key, target, pods, fits)
            if held is not None and thin:
                # (read as waiting they would hold GPUs step 1 finds room for, and cut another backend: attack pass
                # 47 finding 1)
                held = max(0, held - thin)
            # its waiting replicas: those whose pods wait whole, and those not created yet; a Pending pod thinner
            # than a replica (a group part bound) waits as a pod no claim covers, at its own GPUs
            whole, thinner, loose = thin_waiting(pods, target.gpus_per_replica, target.multi_node, target.name, fits)
            if held is not None and bound is not None and (waiting := max(0, held - bound)):
                held -= waiting - min(waiting, whole + max(0, waiting - whole - thinner))
            # when its oldest Pending pod was created (none yet: its replicas' pods are the newest): older Pending
            # pods no claim covers of its pod priority are placed first (attack pass 39 finding 2)
            ages = () if pods is None else waiting_ages(pods, target.name)
            pending_since = None if pods is None else (ages[0] if ages else time.time())
            coverable[key] = functools.partial(_coverable, loose=loose, fits=fits, multi_node=target.multi_node,
                                               gpus_per_replica=target.gpus_per_replica)
            if key[0] not in quotas:
                quotas[key[0]] = await self._quotas(key[0])
            # what the namespace's quota on GPUs admits caps its claim (not known: the quotas unread). Its pods not
            # read yet (a new backend, an evaluation still running) count as none: the cap is then too low, which
            # only delays growth (a quota cap never cuts replicas), where no cap let it drain another namespace
            # for pods the quota would refuse (seen in a side-by-side test run)
            namespace_quotas = quotas[key[0]]
            known = bool(namespace_quotas)
            pods_known = pods if pods is not None else []
            quota = (quota_replicas(namespace_quotas or [], pods_known, target.gpus_per_replica, pod_class)
                     if known else None)
            claims.append(Claim(namespace=key[0], name=key[1], pool=(target.pool,), pool_gpus=target.pool_gpus,
                                priority=(class_value or 0) if cluster_wide else (target.priority or 0),
                                current=target.current_replicas, wanted=wanted,
                                min_replicas=floor, gpus_per_replica=target.gpus_per_replica,
                                cluster_wide=cluster_wide, class_priority=class_value, held=held,
                                unplaceable=target.unplaceable, quota=quota,
                                quota_free=quota_free(namespace_quotas or [], pod_class) if known else (),
                                quota_own_gpus=live_pod_gpus(pods_known) if known else 0, bound=bound,
                                pending_since=pending_since, waiting_since=ages, beyond_gpus=beyond))
        unclaimed, gpus_held, others_bound = await self._unclaimed(targets, claims, coverable)
        # a Pending replica pod the scheduler leaves beside GPUs free for it holds no waiting replica of its claim
        # (holding.refused_beside_room): it waits as a pod no claim covers
        claims = [dataclasses.replace(c, held=max(c.bound or 0, c.held - n))
                  if (n := self.refused_replicas.get(c.key, 0)) and c.held is not None else c for c in claims]
        self.shares, self.pool_state = share(claims, time.time(), self.pool_state, self.priority_across_namespaces,
                                             unclaimed, gpus_held, others_bound)
        if log.isEnabledFor(logging.DEBUG):  # (what a pass read and granted: --verbose)
            log.debug("pool pass: %s", "; ".join(
                f"{c.namespace}/{c.name} p{c.priority} current {c.current} wanted {c.wanted} held {c.held} "
                f"bound {c.bound} -> {s.replicas if (s := self.shares.get(c.key)) else None}" for c in claims))
        for key, uncapped in list(self.uncapped.items()):
            if key not in targets:
                continue  # its evaluation ended during this pass, after its backend went: dropped next round
            new, target = capped(uncapped, self.shares.get(key)), targets[key]
            scaler = self.scalers.get(key) or {}
            if new.desired_replicas < target.current_replicas and scaler.get("pods"):
                # replicas given up for another backend: those on a node where the GPUs they free make room for the
                # replica they go for first, then the least busy pods (deletion cost), as any scale-down's, from
                # the pods and in-flight counts of this backend's last evaluation. Any scale-down: the evaluation
                # judged a pool cut by the last pass's share, which may have ended since (attack pass 75 finding 5)
                source = scaler.get("source")
                in_flight = source.in_flight_by_pod() if isinstance(source, TritonScraper) else {}
                first = (await self._room_first(key, target, targets, scaler["pods"], in_flight)
                         if new.desired_replicas < min(uncapped.desired_replicas, target.current_replicas) else {})
                await loop.run_in_executor(self.executor, self._set_deletion_costs, target.namespace,
                                           scaler["pods"], in_flight, first)
            self._publish(key, target, new)

    async def _unclaimed(self, targets: dict[tuple[str, str], Any], claims: list[Claim],
                         coverable: dict[tuple[str, str], Callable[[dict[str, Any]], bool]] | None = None) -> tuple[
            dict[tuple[str, ...], list[Unclaimed]] | None, dict[tuple[str, ...], int] | None,
            dict[tuple[str, ...], dict[int, int]] | None]:
        """Of each shared pool (a cut needs two backends), the Pending GPU pods no claim covers
        (autoscaling/holding.py unclaimed_waiting), which take the GPUs a cut frees as a claim's pods would, one
        cluster-wide list a pass; and the GPUs pods bound to its nodes hold (gpus_in_use), every pod's, listed only
        while a claim of a pool whose nodes are known has replicas that wait (step 2 of the share hands them the
        GPUs no pod holds), and of those the GPUs of pods no claim of the pool covers by pod priority (step 1 places
        a Pending replica beside them: holding.unclaimed_bound). A claim's Pending pods count as its own only as far
        as its waiting replicas go and ``coverable`` admits them (holding.counted_waiting: a surge pod, a thinner
        one, a group's member wait as pods no claim covers); with the bound pods read, each Pending pod says whether
        a node it could run on has its GPUs free (Unclaimed.fits_free). Not readable (an operator confined to some
        namespaces, an API server that fails): None, the pool shares without them, and the log says so."""
        self.refused_replicas = {}  # (this pass's: a pass that cannot read the pods turns none down)
        self.free_by_node, self.room_ledger = None, None
        self.pool_running = {c.key: c.bound for c in claims if c.bound is not None}
        memory = self.scheduler_memory
        memory.begin()
        sizes = Counter(c.pool for c in claims)
        shared = {c.pool for c in claims if sizes[c.pool] > 1}
        if not shared:
            return None, None, None
        inventory = self.state.inventory.nodes()
        pools: dict[tuple[str, ...], list[Any] | None] = {}
        for target in targets.values():
            pool = (target.pool,)
            if pool in shared and pool not in pools:
                pools[pool] = (None if target.pool_nodes is None
                               else [n for n in inventory if n.name in target.pool_nodes])
        claimed = {key: target for key, target in targets.items() if (target.pool,) in shared}

        def claim_key(pod: dict[str, Any]) -> tuple[str, str] | None:
            """The claimed backend whose replica the pod is (its labels name it and its workload made it)."""
            meta = pod.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str((meta.get("labels") or {}).get(BACKEND_LABEL)))
            target = claimed.get(key)
            return key if target is not None and made_by(pod, target.name) else None

        loop = asyncio.get_running_loop()
        listed_at = time.time()
        try:
            pending = await loop.run_in_executor(self.executor, functools.partial(
                self.kube.list, "Pod", None, field_selector="spec.nodeName=,status.phase=Pending"))
        except Exception as exc:  # noqa: BLE001 - not known: the pool shares from the claims alone, as before
            log.warning("Pending pods not listed across namespaces for the GPU pool share (%s): a cut may free GPUs "
                        "that a pod no backend claims then takes", exc)
            return None, None, None
        memory.note_pending(pending, listed_at)
        turned_down: set[tuple[str, str]] = set()  # claims' Pending pods the scheduler leaves beside room

        def may_cover(key: tuple[str, str], pod: dict[str, Any]) -> bool:
            """Whether a claim's Pending pod may stand for one of its waiting replicas (``coverable``)."""
            return pod_key(pod) not in turned_down and (coverable or {}).get(key, lambda pod: True)(pod)

        # a claim's replicas wait: its share may hand them idle GPUs, once what runs beside the claims is known
        nodes_of = {pool: {n.name for n in nodes} for pool, nodes in pools.items() if nodes is not None
                    and any(c.pool == pool and c.bound is not None and waiting_replicas(c) > 0 for c in claims)}
        bound: list[dict[str, Any]] | None = None
        if nodes_of:
            try:
                bound = await loop.run_in_executor(self.executor, functools.partial(
                    self.kube.list, "Pod", None,
                    field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"))
            except Exception as exc:  # noqa: BLE001 - not known: step 2 counts no GPU as idle, as before
                log.warning("pods bound to the GPU pools' nodes not listed (%s): the share counts no GPU as idle", exc)
        now = time.time()
        refused = memory.settled(now)
        beside_room: list[tuple[str, str]] = []  # (namespace, node) where claims' Pending pods land beside room
        if bound is not None:
            held_on = gpus_held_by_node(bound)
            free = _free_gpus((n for nodes in pools.values() for n in nodes or ()), held_on)
            memory.note_free(free, now)
            self.free_by_node = free
            # a claim's Pending pod the scheduler leaves beside GPUs free for it stands for no replica: it fails a
            # filter the pool does not model (attack pass 60: listing them one by one left a host port, another pod's
            # CPU, a volume's zone); it waits as a pod no claim covers
            for pod in pending:
                key = claim_key(pod)
                if key is None or not may_cover(key, pod) or pod_gpus(pod) <= 0:
                    continue
                no, rooms = refused_beside_room(pod, pools.get((claimed[key].pool,)) or [], free, memory.free_since,
                                                refused, memory.unjudged)
                beside_room.extend((key[0], node) for node in rooms)
                if no:
                    turned_down.add(pod_key(pod))
                    self.refused_replicas[key] = self.refused_replicas.get(key, 0) + 1
        # of a claim's Pending pods, those its waiting replicas cover (not read: all); the rest no claim covers
        covered = counted_waiting(pending, claim_key, {c.key: waiting_replicas(c) * max(0, c.gpus_per_replica)
                                                       for c in claims if c.bound is not None}, may_cover)

        def claimed_in(pod: dict[str, Any]) -> tuple[str, ...] | None:
            """The pool whose claim counts the pod: its backend's, when the pod is one of the replicas it counts."""
            key = claim_key(pod)
            return (claimed[key].pool,) if key is not None and pod_key(pod) in covered else None

        if bound is None:
            return unclaimed_waiting(pending, pools, claimed_in), None, None
        # the GPUs each node's pods hold by pod priority: whether a Pending pod could land where GPUs are free of
        # pods it could not preempt (``Unclaimed.fits_free``), less the nodes where the scheduler has left it Pending
        # beside such GPUs for longer than it takes to place a pod
        # a node's room for a namespace's Pending pods leaves out the GPUs that namespace's own bound pods hold: a pod
        # of its own run there for a pass restarted the clock before its next pod was judged (attack pass 58)
        own: dict[tuple[str, str], int] = {}
        for pod in bound:
            if node_name := (pod.get("spec") or {}).get("nodeName"):
                own[(str(node_name), pod_key(pod)[0])] = own.get((str(node_name), pod_key(pod)[0]), 0) + pod_gpus(pod)
        waiting_in = {pod_key(pod)[0] for pod in pending}
        memory.note_room({(n.name, ns): max(0, n.gpu_count - held_on.get(n.name, 0) + own.get((n.name, ns), 0))
                          for nodes in pools.values() for n in nodes or () for ns in waiting_in}, now)
        waiting = unclaimed_waiting(pending, pools, claimed_in, gpus_held_by_node_priority(bound), refused,
                                    memory.room_since, memory.unjudged)
        memory.note_landed(refused, waiting, now, beside_room)
        # what each claim counts running (whole replicas; not read: all its pods')
        counted = {c.key: runs(c) * max(0, c.gpus_per_replica) for c in claims if c.bound is not None}

        def claim_of(pool: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[str, str] | None]:
            """``claim_key`` for the claims of ``pool`` only."""
            def key(pod: dict[str, Any]) -> tuple[str, str] | None:
                found = claim_key(pod)
                return found if found is not None and (claimed[found].pool,) == pool else None
            return key
        return (waiting, {pool: gpus_in_use(bound, names) for pool, names in nodes_of.items()},
                {pool: unclaimed_bound(bound, names, claim_of(pool), counted) for pool, names in nodes_of.items()})

    async def _pool_pods(self, key: tuple[str, str], target,
                         pods: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        """The pods whose GPUs count for a backend: those of its last evaluation (the serving pods), and for a
        multi-node backend (its plan's, not a label a pod carries) every pod of its groups (the evaluation lists the
        leaders only; the watch cache answers). None: not known."""
        if not target.multi_node or pods is None:
            return pods
        loop = asyncio.get_running_loop()
        try:
            listed = await loop.run_in_executor(
                self.executor, lambda: self.kube.list("Pod", key[0], label_selector=f"{BACKEND_LABEL}={key[1]}"))
        except Exception as exc:  # noqa: BLE001 - not known: its replicas count as held, as before pods were read
            log.debug("pods of %s/%s not listed for its pool share: %s", *key, exc)
            return None
        return [p for p in listed if is_group_pod(p)]

    async def _held(self, key: tuple[str, str], target, pods: list[dict[str, Any]] | None,
                    fits: Callable[[dict[str, Any]], bool] | None = None) -> int | None:
        """Of a backend's replicas, those that hold GPUs of its pool (autoscaling/holding.py held_replicas); None: not
        known (its Deployment could not be read). A multi-node backend's groups are its pods (it has no Deployment).
        No live read per sync: a Deployment the synced watch cache does not have is absent (the API server refused
        it, or it was deleted: the reconciler's next pass says why); before the caches sync, one the API server said
        was absent stays absent for this target, until the reconciler's next pass hands the loop a new one."""
        needs_gpus = target.gpus_per_replica > 0
        if target.multi_node:
            return held_replicas(target.current_replicas, pods, None, target.pool_nodes, needs_gpus,
                                 workload_made=target.name, fits=fits)
        store = self.caches.stores.get("Deployment")
        if store is not None and store.synced:
            deployment = store.get(*key)
        elif self.absent_deployments.get(key) is target:
            deployment = None
        else:
            loop = asyncio.get_running_loop()
            try:
                deployment = await loop.run_in_executor(self.executor, self.kube.get, "Deployment", key[0], key[1])
            except Exception as exc:  # noqa: BLE001 - not known: its replicas count as held, as before pods were read
                log.debug("Deployment %s/%s not read for its pool share: %s", *key, exc)
                return None
            if deployment is None:
                self.absent_deployments[key] = target
        return held_replicas(target.current_replicas, pods, deployment, target.pool_nodes, needs_gpus, grouped=False,
                             workload_made=target.name, fits=fits)

    async def _quotas(self, namespace: str) -> list[dict[str, Any]] | None:
        """The ResourceQuotas of a namespace, read live (their status.used moves with every pod the API server
        admits); None: not readable (no cap: the pool shares as before, and says so in the log)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, self.kube.list, "ResourceQuota", namespace)
        except Exception as exc:  # noqa: BLE001 - the quota only narrows a claim: without it the pool shares as before
            log.warning("ResourceQuotas of %s not readable for the GPU pool share (%s): its backends' claims are not "
                        "capped by them", namespace, exc)
            return None

    async def _read_priority_classes(self, names: set[str]) -> None:
        """The values of the PriorityClasses ``names`` (``self.priority_classes``) not read within
        PRIORITY_CLASS_TTL_S, with one LIST: the classes are the admin's (few), the names the tenants' (any number),
        so a pool pass makes one request however many names its backends give. A class the LIST does not have counts
        as none (priority 0), read again after the TTL as one that is. A LIST that fails changes no value read
        before (a PriorityClass's value is immutable: only a LIST that succeeds can say the class is gone); a name
        never read counts as none until a LIST succeeds; the log says so. ``GLOBAL_DEFAULT`` reads the value of the
        class with ``globalDefault: true`` (several: the smallest), which pods that name no class get at admission
        (attack pass 45 finding 2: such a backend counted at 0, and a tenant's class below the default outranked it)."""
        now = time.monotonic()
        stale = {n for n in names if now - self.priority_classes.get(n, (None, -math.inf))[1] >= PRIORITY_CLASS_TTL_S}
        if not stale:
            return
        loop = asyncio.get_running_loop()
        values: dict[str, int | None] = {}
        default_class: str | None = None
        try:
            for obj in await loop.run_in_executor(self.executor, self.kube.list, "PriorityClass", None):
                raw = obj.get("value")
                value = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
                values[str((obj.get("metadata") or {}).get("name"))] = value
                if obj.get("globalDefault") is True and value is not None:
                    # several: the smallest value is the default (scheduling.k8s.io/v1 PriorityClass.globalDefault)
                    default = values.get(GLOBAL_DEFAULT)
                    if default is None or value < default:
                        values[GLOBAL_DEFAULT] = value
                        default_class = str((obj.get("metadata") or {}).get("name"))
        except Exception as exc:  # noqa: BLE001 - the values read before stand; the rest count as 0 (said in the log)
            kept = sum(1 for n in stale if self.priority_classes.get(n, (None, 0.0))[0] is not None)
            log.warning("PriorityClasses not readable (%s): the values of %d class(es) read before stand; backends "
                        "that run with a class never read count as priority 0 until a list succeeds (tried again in "
                        "%.0fs)", exc, kept, PRIORITY_CLASS_TTL_S)
            for name in stale:
                self.priority_classes[name] = (self.priority_classes.get(name, (None, now))[0], now)
            return
        for name in stale:
            self.priority_classes[name] = (values.get(name), now)
        if GLOBAL_DEFAULT in stale:  # its name with its value, from one LIST (attack pass 48 finding 3)
            self.global_default_class = default_class

    def _hold(self, key: tuple[str, str], target, reason: str, message: str) -> None:
        """A decision that keeps the replicas where they are, with why in status.autoscaling."""
        self.uncapped.pop(key, None)
        new = ScaleDecision(target.current_replicas, reason, message, None, None)
        with self.state.lock:
            old = self.state.decisions.get(key)
            self.state.decisions[key] = new
        if old != new:
            self.enqueue(key)

    async def _held_at_activator(self, target, scaler: dict[str, Any]) -> float | None:
        loop = asyncio.get_running_loop()
        pods = await loop.run_in_executor(
            self.executor, lambda: self.kube.list("Pod", target.namespace, label_selector=target.activator_selector))
        ready = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods if _pod_ready(p)}
        if not ready:
            return None
        return await activation.held_requests(ready, METRICS_PORT)

    async def _room_first(self, key: tuple[str, str], target: Any, targets: dict[tuple[str, str], Any],
                          pods: list[dict[str, Any]], busy: dict[str, float] | None = None) -> dict[str, int]:
        """Of a backend's pods, those a cut for other backends' replicas removes first: on a node the replica may run
        on, where they make its room (drain.room_first), for each backend it gives replicas up to, as many rooms as
        that one still has replicas not running and no room there already takes (pass 74 finding 2, pass 75 finding
        1), no more pods than the cut less those the ReplicaSet removes before it reads a cost (pass 75 finding 3:
        their GPUs count as freed). The pass's GPUs free by node (as it read them, or listed now) and the
        replicas each taker still lacks are one ledger the pass's cuts spend, so no node's free GPUs count twice
        (victims are still planned one at a time: the first may take a room the next would have made, pass 74
        finding 4, open). Not read, or a taker's nodes not known: none first for it, the ReplicaSet's own order."""
        if target.multi_node:
            return {}  # (a LeaderWorkerSet removes its highest group index: it reads no deletion cost)
        given = self.pool_state.preempted.get(key) or {}
        takers = [(k, t) for k in given
                  if (t := targets.get(k)) is not None and t.gpus_per_replica > 0 and t.pool_nodes is not None]
        if not takers or target.pool_nodes is None:
            return {}
        if self.free_by_node is None:
            try:
                bound = await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(
                    self.kube.list, "Pod", None,
                    field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"))
            except Exception as exc:  # noqa: BLE001 - the order is best effort; the scale-down proceeds
                log.warning("pods bound to the GPU pools' nodes not listed (%s): a cut removes pods in the "
                            "ReplicaSet's own order", exc)
                return {}
            self.free_by_node = _free_gpus(self.state.inventory.nodes(), gpus_held_by_node(bound))
        if self.room_ledger is None:
            self.room_ledger = (dict(self.free_by_node), {})
        free, lacking = self.room_ledger
        share_ = self.shares.get(key)
        cut = None if share_ is None else max(0, target.current_replicas - share_.replicas)
        first: dict[str, int] = {}
        ahead, held = removable(pods)
        if cut is not None and len(ahead) >= cut:
            return {}  # (the ReplicaSet takes the whole cut from them before it reads a cost)
        for _, node, gpus in ahead:  # (they go first whatever their costs: their GPUs make rooms too)
            if node in free:
                free[node] += gpus
        limit = None if cut is None else cut - len(ahead)
        # the largest replicas first: a small one planned first may take the only room a large one has (attack pass
        # 75 finding 2; the order of ``preempted`` is the takers' turns, which a tenant's backends play)
        for taker_key, taker in sorted(takers, key=lambda kt: -kt[1].gpus_per_replica):
            if taker_key not in lacking:
                # its replicas not running yet (running not read: those its victims gave it)
                running, taker_share = self.pool_running.get(taker_key), self.shares.get(taker_key)
                lacking[taker_key] = (sum(g.get(taker_key, 0) for g in self.pool_state.preempted.values())
                                      if running is None or taker_share is None
                                      else max(0, taker_share.replicas - running))
            if lacking[taker_key] <= 0 or given[taker_key] <= 0:
                continue
            nodes = {n: gpus for n, gpus in free.items() if n in target.pool_nodes and n in taker.pool_nodes}
            rooms = room_first([p for p in held if p[0] not in first], nodes, taker.gpus_per_replica, busy,
                               replicas=lacking[taker_key], taking=given[taker_key],
                               limit=None if limit is None else limit - len(first),
                               start=max(first.values(), default=0) + 1)
            first.update(rooms.first)
            free.update(rooms.free)
            lacking[taker_key] -= rooms.placed
        return first

    def _set_deletion_costs(self, namespace: str, pods: list[dict[str, Any]], in_flight: dict[str, float],
                            first: dict[str, int] | None = None) -> None:
        """Before a scale-down: the pods that make room for the replica a pool cut is for (``first``), then those
        with the least in-flight work get the lowest deletion cost (go first)."""
        current = {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(DELETION_COST_ANNOTATION)
                   for p in pods}
        for pod, cost in deletion_costs({k: v for k, v in in_flight.items() if k in current}, current,
                                        {k: v for k, v in (first or {}).items() if k in current}).items():
            try:
                self.kube.annotate("Pod", namespace, pod, {DELETION_COST_ANNOTATION: cost})
            except Exception as exc:  # noqa: BLE001 - ordering is best effort; the scale-down proceeds
                log.warning("pod-deletion-cost on %s/%s: %s", namespace, pod, exc)


def _free_gpus(nodes: Iterable[Any], held_on: dict[str, int]) -> dict[str, int]:
    """Node -> its GPUs the bound pods (``held_on``: node -> GPUs they hold) leave free."""
    return {n.name: max(0, n.gpu_count - held_on.get(n.name, 0)) for n in nodes}


permissions.require("", "pods", "patch")  # pod-deletion-cost before a scale-down
permissions.require("scheduling.k8s.io", "priorityclasses", "list", scope=permissions.CLUSTER)  # a backend's priority (autoscaling/pool.py)
permissions.require("", "resourcequotas", "list")  # what a namespace's GPU quota admits (autoscaling/quota.py quota_replicas)


def capped(decision: ScaleDecision, share_: Share | None) -> ScaleDecision:
    """The autoscaler's decision within the backend's share of its GPU pool (None: no pool, unchanged), with
    status.autoscaling.preemptedBy / waitingForCapacity and the reason when the share is what holds it."""
    if share_ is None:
        return decision
    extra = {**decision.extra, "preemptedBy": share_.preempted_by, "waitingForCapacity": share_.waiting_for_capacity}
    desired, reason, message = decision.desired_replicas, decision.reason, decision.message
    if share_.replicas < desired:
        desired = share_.replicas
        reason = cond.PREEMPTED_BY if share_.preempted_by else cond.WAITING_FOR_CAPACITY
        message = (f"{message}; capped at {desired} by the GPU pool shared by priority: "
                   + (f"preempted by {share_.preempted_by}" if share_.preempted_by else
                      str(share_.waiting_for_capacity) if share_.unplaceable else
                      f"waiting for {share_.waiting_for_capacity}"))
    if share_.took:
        message = f"{message}; {share_.took}"
    return dataclasses.replace(decision, desired_replicas=desired, reason=reason, message=message, extra=extra)


def _pod_ready(pod: dict[str, Any]) -> bool:
    """Ready, not terminating, and with an IP to scrape."""
    return bool(pod.get("status", {}).get("podIP")) and serving_pod_ready(pod)


async def _close_scaler(scaler: dict[str, Any]) -> None:
    """Close the metrics source of a scaler and the client it opened for 0 -> 1 (Prometheus)."""
    for source in (scaler["source"], scaler.get("activation")):
        if source is not None:
            await source.close()


def build_registry(operator: Operator) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 60
        # The handlers below are event handlers only: kopf keeps no progress or diff-base state,
        # so it writes no annotations or finalizers on the user's objects.
        await operator.start()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        # The same credentials as the REST client (re-read on 401, so rotated tokens are picked up).
        config = operator.kube.configuration
        header = config.get_api_key_with_prefix("BearerToken", alias="authorization")
        scheme, _sep, token = (header or "").partition(" ")
        return kopf.ConnectionInfo(
            server=config.host, ca_path=config.ssl_ca_cert, insecure=not config.verify_ssl,
            certificate_path=config.cert_file, private_key_path=config.key_file,
            scheme=scheme or None, token=token or None,
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await operator.stop()
        if operator.elector is not None:  # after the workers stopped: the next leader starts at once
            await asyncio.get_running_loop().run_in_executor(None, operator.elector.release)

    # No kopf resource handler: the LLMBackends are watched by cache.WatchCaches (see the module docstring).
    return registry


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run the operator")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="kubeconfig (default: in-cluster, then KUBECONFIG)")
    parser.add_argument("--namespace", action="append", default=[],
                        help="serve only these namespaces (repeatable; default all). RBAC: bind ClusterRole llmbackend-operator "
                        "with a RoleBinding in each instead of the ClusterRoleBinding (manifests/namespaced)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help=f"concurrent reconciles (default {DEFAULT_WORKERS}; the REST client keeps as many connections "
                             f"plus {CLIENT_POOL_SPARE})")
    parser.add_argument("--resync-seconds", type=float, default=300, help="periodic full resync")
    parser.add_argument("--metrics-addr", default="127.0.0.1:9090", help="host:port of the Prometheus metrics endpoint ('' = off)")
    parser.add_argument("--health-addr", default="127.0.0.1:8081", help="host:port of /healthz (liveness) and /readyz ('' = off)")
    parser.add_argument("--leader-elect", action="store_true", help="run only while holding the leader Lease")
    parser.add_argument("--lease-name", default=LEASE_NAME, help="the Role in manifests/default/rbac.yaml allows only this name")
    parser.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    parser.add_argument("--model-endpoint", action="append", default=None, metavar="URL",
                        help="a source.endpoint (besides the Hugging Face Hub and AWS S3) that a source's Secret may be "
                             f"sent to (repeatable; default: ${egress.MODEL_ENDPOINTS_ENV}, space or comma separated)")
    parser.add_argument("--prometheus-url", action="append", default=None, metavar="URL",
                        help="a Prometheus that autoscaling.prometheus.url may name, for the operator to poll "
                             f"(repeatable; default: ${egress.PROMETHEUS_URLS_ENV}; none: prometheus sources are refused)")
    parser.add_argument("--prometheus-query", action="append", default=None, metavar="NAME=TEMPLATE",
                        help="a query autoscaling.prometheus.activationQueryName may name; {namespace} and {backend} "
                             "inside its double-quoted label values are filled in, escaped (repeatable; default: "
                             f"${egress.PROMETHEUS_QUERIES_ENV}, a JSON object NAME: TEMPLATE)")
    parser.add_argument("--priority-across-namespaces", action="store_true",
                        default=os.environ.get("LLMBACKEND_PRIORITY_ACROSS_NAMESPACES", "") == "true",
                        help="compare spec.autoscaling.priority of backends in different namespaces that share GPUs "
                             "(default: only within a namespace; PriorityClass values are compared across them)")
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("kopf.objects", "kopf.activities.probe", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        egress.settings.configure(args.model_endpoint, args.prometheus_url, args.prometheus_query)
    except ValueError as exc:  # the admin's configuration: say what to fix and do not start
        log.error("%s", exc)
        return 2
    kube = Kube(load_configuration(args.kubeconfig), pool_size=args.workers + CLIENT_POOL_SPARE)
    operator = Operator(kube, workers=args.workers, resync_seconds=args.resync_seconds, namespaces=args.namespace)
    operator.priority_across_namespaces = args.priority_across_namespaces
    # Health and metrics answer from the start: a standby replica waiting for the Lease is live and ready.
    if args.health_addr:
        serve_health(args.health_addr, operator)
    if args.metrics_addr:
        host, _, port = args.metrics_addr.rpartition(":")
        metrics.start_metrics_server(int(port), host or "0.0.0.0")
    if args.leader_elect:
        elector = operator.elector = LeaderElector(kube, args.lease_name, args.lease_namespace)
        elector.acquire()  # blocks until this replica leads; exits the process when leadership is lost
    kopf.run(
        registry=build_registry(operator),
        standalone=True,  # leader election above replaces kopf's peering
        clusterwide=not args.namespace,
        namespaces=args.namespace,
    )
    return 0


def serve_health(address: str, operator: Operator) -> None:
    """GET /healthz: live (the event loop ticks, queued work gets done); GET /readyz: the watch caches are synced.

    A standby replica (waiting for the Lease) is live and ready, so a rolling update of the operator can finish.
    """
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            path = self.path.split("?")[0]
            check = {"/healthz": operator.live, "/livez": operator.live, "/readyz": operator.ready}.get(path)
            if check is None:
                ok, message = False, "not found"
                self.send_response(404)
            else:
                ok, message = check()
                self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(message.encode() + b"\n")

        def log_message(self, *args: Any) -> None:
            pass

    host, _, port = address.rpartition(":")
    server = http.server.ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
