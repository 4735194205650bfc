"""The operator reads from label-filtered watch caches: health endpoints, zero reads on a no-op resync,
and unrelated pods never reach it."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request

from conftest import apply_manifest, available, backend_manifest, wait_for

from devcluster.ports import free_ports


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def _requests(port: int) -> dict[str, float]:
    """llmbackend_api_requests_total as {"METHOD kind": n}."""
    _, text = _http(f"http://127.0.0.1:{port}/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("llmbackend_api_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            out[f"{labels['method']} {labels['kind']}"] = float(line.rsplit(" ", 1)[1])
    return out


def _reconciles(port: int) -> float:
    _, text = _http(f"http://127.0.0.1:{port}/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("llmbackend_reconcile_total{"))


def test_noop_resync_reads_nothing_and_unrelated_pods_are_not_watched(exclusive_cluster, own_operator, namespace):
    cluster = exclusive_cluster
    health, metrics = free_ports(2)
    op = own_operator("--health-addr", f"127.0.0.1:{health}", "--metrics-addr", f"127.0.0.1:{metrics}",
                      "--resync-seconds", "2",
                      # Only this test's namespace: backends of earlier tests still terminating elsewhere
                      # would add their own requests to the counters.
                      "--namespace", namespace)
    # Before it starts (a standby waiting for the Lease) it is ready too; "ok" means started with synced caches.
    wait_for(lambda: _http(f"http://127.0.0.1:{health}/readyz") == (200, "ok\n"), timeout=30, what="/readyz ok")
    assert _http(f"http://127.0.0.1:{health}/healthz") == (200, "ok\n")
    assert _http(f"http://127.0.0.1:{health}/nothing")[0] == 404

    apply_manifest(cluster, backend_manifest("cached", namespace))
    wait_for(lambda: available(cluster, namespace, "cached"), timeout=60, what="Available")
    time.sleep(3)  # last status writes settle

    # Pods that are not the operator's: the API server never sends them to it.
    for i in range(20):
        cluster.kube.create({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": f"unrelated-{i}", "namespace": namespace, "labels": {"app": "other"}},
                             "spec": {"nodeName": "no-such-node", "containers": [{"name": "c", "image": "busybox"}]}})

    before, reconciles_before = _requests(metrics), _reconciles(metrics)
    time.sleep(7)  # three resync periods
    after, reconciles_after = _requests(metrics), _reconciles(metrics)
    assert reconciles_after - reconciles_before >= 2, "the periodic resync ran"
    # "GET discovery" is the 30-second check whether an optional CRD (LeaderWorkerSet, PrometheusRule) got
    # installed, made by the watchers whatever the resync does; every other read would be the reconciler's.
    reads = {k: after.get(k, 0) - before.get(k, 0) for k in after
             if k.startswith("GET ") and k != "GET discovery" and after.get(k, 0) != before.get(k, 0)}
    writes = {k: after.get(k, 0) - before.get(k, 0) for k in after
              if k.split()[0] in ("PATCH", "POST", "PUT", "DELETE") and after.get(k, 0) != before.get(k, 0)}
    assert reads == {}, f"a no-op resync read from the API server: {reads}\n{op.log_tail()}"
    assert writes == {}, f"a no-op resync wrote: {writes}"

    # The cache still follows changes: a manual scale is reverted without a GET of the Deployment.
    cluster.kubectl("-n", namespace, "scale", "deployment", "cached", "--replicas=3")
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "cached")["spec"]["replicas"] == 1, timeout=30,
             what="replicas restored by the operator")


def test_a_watch_the_server_ends_resumes_without_a_list(cluster, namespace, monkeypatch):
    """The API server ends every watch (timeoutSeconds); the next one starts from the last resourceVersion seen,
    misses nothing, and lists nothing (the production timeout is 5 min; 1 s here)."""
    import threading

    from llmbackend.controller import cache

    class Counting:
        def __init__(self, kube):
            self.kube, self.lists, self.watches = kube, 0, 0

        def __getattr__(self, name):
            return getattr(self.kube, name)

        def request(self, method, path, **kwargs):
            self.lists += 1
            return self.kube.request(method, path, **kwargs)

        def stream(self, path, timeout):
            self.watches += 1
            return self.kube.stream(path, timeout)

    def config_map(name: str, labels: dict[str, str]) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "data": {"v": "1"}}

    monkeypatch.setattr(cache, "WATCH_TIMEOUT_S", 1)
    ours = {"app.kubernetes.io/managed-by": cache.MANAGED_SELECTOR.split("=")[1]}
    cluster.kube.create(config_map("ours-a", ours))
    cluster.kube.create(config_map("theirs", {"app": "other"}))
    kube = Counting(cluster.kube)
    store = cache.Store([namespace])
    watcher = cache.Watcher(kube, "ConfigMap", store, cache.MANAGED_SELECTOR, namespace)  # type: ignore[arg-type]
    threading.Thread(target=watcher.run, daemon=True).start()
    try:
        wait_for(lambda: store.synced and store.get(namespace, "ours-a"), timeout=10, what="first list")
        wait_for(lambda: kube.watches >= 3, timeout=20, what="two watches ended by the server")
        cluster.kube.request("PATCH", cluster.kube._path("ConfigMap", namespace, "ours-a"), body={"data": {"v": "2"}},
                             content_type="application/merge-patch+json")
        cluster.kube.create(config_map("ours-b", ours))
        wait_for(lambda: (store.get(namespace, "ours-a") or {}).get("data") == {"v": "2"}, timeout=10, what="the update")
        wait_for(lambda: store.get(namespace, "ours-b"), timeout=10, what="the new object")
        wait_for(lambda: kube.watches >= 6, timeout=20, what="more watches after the events")
        assert kube.lists == 1, f"{kube.lists} lists for {kube.watches} watches"
        assert store.get(namespace, "theirs") is None
    finally:
        watcher.stop()
