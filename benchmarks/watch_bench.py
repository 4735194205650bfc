"""Watch benchmark: the operator's memory and CPU do not follow the cluster's unrelated pods, and a no-op
resync reads nothing from the API server (a script that prints figures, not a test).

    python benchmarks/watch_bench.py [--pods 20000] [--backends 5] [--resync-seconds 5] [--periods 3]

1. Dev cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok; dgx-h100-x4), the CRD, the
   operator as a subprocess watching all namespaces; `--backends` LLMBackends until Available and quiet.
2. Operator RSS (VmRSS), peak RSS (VmHWM) and CPU time (/proc) with 0 unrelated pods, after an idle window.
3. `--pods` pods without any operator label, most in another namespace and a share (`--same-namespace-share`)
   in the backends' own namespace, created by a thread pool with bounded retries. They name a scheduler
   that does not exist, so they stay Pending and nothing works on them afterwards: no scheduler writes,
   no kwok status updates, and the pod garbage collector leaves them (it deletes pods bound to a node that
   does not exist, so binding them to a made-up node would remove them again).
4. Once the operator's CPU is flat again: RSS, peak RSS, CPU again. Target: RSS growth <= 10 MB.
5. No-op resync of `--periods` periods: the operator's reads (GET) and writes from its own count
   (llmbackend_api_requests_total); target 0 reads, 0 writes. "GET discovery" is counted apart: it asks
   whether an optional API that is absent here (LeaderWorkerSet, PrometheusRule, ComputeDomain, KEDA,
   InferencePool, ...) has been installed since. `Kube.has_api` keeps each answer 30 s, whoever asks (the
   watchers of optional kinds, or a reconcile), so it costs at most one GET per absent API per 30 s, however
   many backends and resyncs there are: it is on a clock, not a read of the resync
   (tests/e2e/test_watch_cache_e2e.py leaves it out the same way).

Every loop is bounded in count and time; a run that could not create every pod within `--create-timeout`
says how many it created and fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from load_bench import (
    ApiError,
    Kube,
    add_model_cache_volume,
    api_requests,
    backend,
    cond,
    devcluster,
    diff,
    free_port,
    install_crd,
    load_configuration,
    load_nodes,
    proc_stats,
    reconciles,
    start_operator,
    stop_operator,
    topology_nodes,
    wait_operator_up,
    writes,
)

BACKENDS_NS = "bench"
OTHER_NS = "unrelated"
DISCOVERY = "GET discovery"


def reads(requests: dict) -> dict:
    """GET requests (a LIST is a GET too), without the optional-CRD discovery check."""
    return {k: n for k, n in requests.items() if k.split()[0] == "GET" and k != DISCOVERY}


def unrelated_pod(name: str, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "unrelated", "bench": "watch"}},
            "spec": {"schedulerName": "no-such-scheduler", "automountServiceAccountToken": False,
                     "containers": [{"name": "app", "image": "registry.example.com/app:1",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def wait(what: str, check, timeout_s: float, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every_s)
    raise SystemExit(f"timed out after {timeout_s:.0f}s waiting for {what}")


def settle_cpu(pid: int, window_s: float, max_cpu_s: float, timeout_s: float) -> float:
    """Until the process used at most `max_cpu_s` of CPU in the last `window_s`; returns the seconds waited."""
    started = time.monotonic()
    last = proc_stats(pid)["cpu_s"]
    while time.monotonic() - started < timeout_s:
        time.sleep(window_s)
        now = proc_stats(pid)["cpu_s"]
        if now - last <= max_cpu_s:
            break
        last = now
    return time.monotonic() - started


def create_pods(kube: Kube, count: int, same_share: float, workers: int, timeout_s: float) -> tuple[int, float, Counter]:
    """Create `count` unrelated pods; returns (created, seconds, failures by status)."""
    in_same = int(count * same_share)
    specs = [(f"u{i:05d}", BACKENDS_NS if i < in_same else OTHER_NS) for i in range(count)]
    deadline = time.monotonic() + timeout_s
    failures: Counter = Counter()

    def create(spec: tuple[str, str]) -> bool:
        for attempt in range(5):
            if time.monotonic() > deadline:
                return False
            try:
                kube.create(unrelated_pod(*spec))
                return True
            except ApiError as exc:
                if exc.status == 409:
                    return True  # a retry after a timeout that had gone through
                failures[exc.status] += 1
                if exc.status not in (403, 429, 500, 503, 504):  # 403: the namespace's ServiceAccount is not there yet
                    return False
            except Exception as exc:  # noqa: BLE001 - a timeout or a reset connection: retried
                failures[type(exc).__name__] += 1
            time.sleep(0.2 * 2 ** attempt)
        return False

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        created = sum(pool.map(create, specs))
    return created, time.monotonic() - started, failures


def pod_count(kube: Kube) -> int:
    """Pods stored in the API server, all namespaces (remainingItemCount is only given without a selector)."""
    page = kube.request("GET", "/api/v1/pods", query={"limit": "1"})
    return len(page.get("items", [])) + int(page["metadata"].get("remainingItemCount") or 0)


def component_rss_mb(cluster, name: str) -> float:
    pid = next((c.pid for c in cluster.components if c.name == name), None)
    try:
        return proc_stats(pid)["rss_mb"] if pid else float("nan")
    except OSError:
        return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--same-namespace-share", type=float, default=0.25, help="share of the pods in the backends' namespace")
    ap.add_argument("--backends", type=int, default=5)
    ap.add_argument("--resync-seconds", type=float, default=5)
    ap.add_argument("--periods", type=int, default=3, help="resync periods of the no-op measurement")
    ap.add_argument("--idle-seconds", type=float, default=20, help="idle window before the baseline")
    ap.add_argument("--create-workers", type=int, default=16)
    ap.add_argument("--create-timeout", type=float, default=1200)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    directory = Path(args.dir or tempfile.mkdtemp(prefix="llmb-watch-bench-"))
    t = time.monotonic()
    cluster = devcluster.up(directory, devcluster.Ports.free(), log=lambda *a: None)
    print(f"cluster up in {time.monotonic() - t:.1f}s ({directory})")
    op = None
    try:
        kube = Kube(load_configuration(str(cluster.kubeconfig)), pool_size=max(32, args.create_workers))
        load_nodes(kube, topology_nodes("dgx-h100-x4"))
        install_crd(kube)
        for ns in (BACKENDS_NS, OTHER_NS):
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        add_model_cache_volume(kube, BACKENDS_NS)
        metrics_port = free_port()
        op = start_operator(cluster, ["--metrics-addr", f"127.0.0.1:{metrics_port}",
                                      "--resync-seconds", str(args.resync_seconds)])
        wait_operator_up(cluster, op, metrics_port)

        names = [f"w{i:02d}" for i in range(args.backends)]
        for name in names:
            kube.create(backend(name, BACKENDS_NS))
        def available() -> int:
            return sum((cond(o, "Available") or {}).get("status") == "True" for o in kube.list("LLMBackend", BACKENDS_NS))

        deadline = time.monotonic() + 180
        while available() < len(names):
            if time.monotonic() > deadline:
                for o in kube.list("LLMBackend", BACKENDS_NS):
                    print(o["metadata"]["name"], json.dumps((o.get("status") or {}).get("conditions"))[:600])
                raise SystemExit(f"not all {len(names)} LLMBackends Available within 180s")
            time.sleep(2)
        quiet = time.monotonic()
        last = writes(api_requests(metrics_port))
        while time.monotonic() - quiet < 10 and time.monotonic() - t < 600:  # 10 s without a write
            time.sleep(2)
            now = writes(api_requests(metrics_port))
            if now != last:
                last, quiet = now, time.monotonic()
        print(f"{len(names)} LLMBackends Available and quiet after {time.monotonic() - t:.0f}s")

        # ---- baseline: 0 unrelated pods ----
        before_idle = proc_stats(op.pid)
        time.sleep(args.idle_seconds)
        stats0 = proc_stats(op.pid)
        idle_cpu_rate = (stats0["cpu_s"] - before_idle["cpu_s"]) / args.idle_seconds
        api0 = {"kube-apiserver": component_rss_mb(cluster, "kube-apiserver"), "etcd": component_rss_mb(cluster, "etcd")}
        requests0 = api_requests(metrics_port)

        # ---- 20,000 unrelated pods ----
        wait("the namespaces' default ServiceAccounts", lambda: all(
            kube.get("ServiceAccount", ns, "default") for ns in (BACKENDS_NS, OTHER_NS)), timeout_s=60)
        created, create_s, failures = create_pods(kube, args.pods, args.same_namespace_share,
                                                  args.create_workers, args.create_timeout)
        during_create = proc_stats(op.pid)
        settle_s = settle_cpu(op.pid, window_s=10, max_cpu_s=0.1 + 10 * idle_cpu_rate, timeout_s=120)
        stats1 = proc_stats(op.pid)
        stored = pod_count(kube)
        requests1 = api_requests(metrics_port)
        api1 = {"kube-apiserver": component_rss_mb(cluster, "kube-apiserver"), "etcd": component_rss_mb(cluster, "etcd")}
        window_s = create_s + settle_s
        print(f"created {created}/{args.pods} unrelated pods in {create_s:.0f}s ({created / max(create_s, 1e-9):.0f}/s, "
              f"{args.create_workers} threads; retried errors {dict(failures)}); {stored} pods in the API server in all; "
              f"operator settled {settle_s:.0f}s later")
        print(f"operator requests meanwhile: {json.dumps(diff(requests1, requests0), sort_keys=True)}")

        # ---- no-op resync ----
        quiet_s = args.periods * args.resync_seconds + 1
        before_api, before_rec = api_requests(metrics_port), reconciles(metrics_port)
        time.sleep(quiet_s)
        resync_api = diff(api_requests(metrics_port), before_api)
        resync_rec = reconciles(metrics_port) - before_rec
        resync_reads, resync_writes = reads(resync_api), writes(resync_api, include_events=True)

        growth = stats1["rss_mb"] - stats0["rss_mb"]
        rows = [
            ("operator RSS (VmRSS)", f"{stats0['rss_mb']:.1f} MB", f"{stats1['rss_mb']:.1f} MB", f"{growth:+.1f} MB"),
            ("operator peak RSS (VmHWM)", f"{stats0['peak_rss_mb']:.1f} MB", f"{stats1['peak_rss_mb']:.1f} MB",
             f"{stats1['peak_rss_mb'] - stats0['peak_rss_mb']:+.1f} MB"),
            ("operator CPU time", f"{stats0['cpu_s']:.1f} s", f"{stats1['cpu_s']:.1f} s",
             (f"{stats1['cpu_s'] - stats0['cpu_s']:+.1f} s in {window_s:.0f} s (idle rate x window: "
              f"{idle_cpu_rate * window_s:.1f} s; during creation {during_create['cpu_s'] - stats0['cpu_s']:.1f} s)")),
            ("kube-apiserver RSS", f"{api0['kube-apiserver']:.0f} MB", f"{api1['kube-apiserver']:.0f} MB", ""),
            ("etcd RSS", f"{api0['etcd']:.0f} MB", f"{api1['etcd']:.0f} MB", ""),
        ]
        print(f"\n== operator with {len(names)} LLMBackends: 0 vs {created} unrelated pods "
              f"({int(args.pods * args.same_namespace_share)} of them in the backends' namespace)")
        print(f"   {'':<28}{'0 pods':>12}{f'{created} pods':>14}   change")
        for label, a, b, c in rows:
            print(f"   {label:<28}{a:>12}{b:>14}   {c}")
        print(f"\n== no-op resync: {args.periods} periods of {args.resync_seconds:g}s ({quiet_s:.0f}s): reconciles {resync_rec:.0f}, "
              f"reads {sum(resync_reads.values()):.0f} {json.dumps(resync_reads, sort_keys=True)}, "
              f"writes {resync_writes:.0f}; apart: {DISCOVERY} {resync_api.get(DISCOVERY, 0):.0f} "
              f"(whether absent optional APIs got installed: at most one GET per API per 30 s, not per resync)")
        ok = {
            f"all {args.pods} pods created": created == args.pods,
            "RSS growth <= 10 MB": growth <= 10,
            "0 reads on a no-op resync": not resync_reads,
            "0 writes on a no-op resync": resync_writes == 0,
            "the resync ran": resync_rec >= len(names) * max(1, args.periods - 1),
        }
        for target, met in ok.items():
            print(f"   {'ok  ' if met else 'MISS'} {target}")
        print(f"\n{'PASS' if all(ok.values()) else 'MISS'}: targets (RSS growth <= 10 MB with {args.pods} unrelated pods, "
              f"0 reads and 0 writes on a no-op resync)")
        return 0 if all(ok.values()) else 1
    finally:
        stop_operator(op)
        devcluster.stop(cluster)


if __name__ == "__main__":
    sys.exit(main())
