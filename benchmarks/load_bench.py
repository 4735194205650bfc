"""Load benchmark of the operator on a real control plane (a script that prints figures, not a test).

    python benchmarks/load_bench.py [--backends 500] [--extra-nodes 70] [--dir /tmp/llmb-bench]

1. Dev cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok) with dgx-h100-x4 plus
   `--extra-nodes` generated DGX-H100-like nodes (8 GPUs each), the CRD, the operator as a subprocess.
2. Creates N single-GPU LLMBackends at once (threads); time until each is Planned=True and has its
   Deployment (p50/p99/max per CR, total); API requests per CR.
3. No-op resync: once the cluster is quiet, waits two resync periods (--resync-seconds 20) and counts
   writes (PATCH/POST/PUT/DELETE) the operator made meanwhile: must be 0.
4. Node churn: 1,000 label updates within a minute (an irrelevant label and nvidia.com/gfd.timestamp):
   writes stay ~0, the reconcile count barely moves.
Operator CPU time and peak RSS (VmHWM) at the end.

`--direct` measures the floor under any operator on this machine: no operator runs; the script makes, for each
backend, the writes an operator's first pass makes (the children the reconciler's own first pass renders, created
in its order with the backend as owner, one status write, one Event), `--workers` backends at a time (default 8,
as the operator's workers), and prints the time until every Deployment exists and the control plane's CPU meanwhile.

API requests are the operator's own count (metric llmbackend_api_requests_total{method,kind}, one
increment per HTTP request its REST client makes), so nothing of the controller-manager or of this
script is mixed in. Watch connections (long-lived streams) count once per watch request (method WATCH).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0:0] = [str(REPO / "operator"), str(REPO / "dev")]

from devcluster import cluster as devcluster  # noqa: E402
from devcluster.cli import install_crd, load_nodes, start_operator, topology_nodes  # noqa: E402
from devcluster.ports import free_port  # noqa: E402
from llmbackend.controller.kube import ApiError, Kube, load_configuration  # noqa: E402
from llmbackend.render.modelcache import DEFAULT_CACHE_CLAIM  # noqa: E402

WRITE_VERBS = {"PATCH", "POST", "PUT", "DELETE"}


def api_requests(port: int) -> dict[str, float]:
    """The operator's own count of its API requests, "METHOD kind" -> n (llmbackend_api_requests_total)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llmbackend_api_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            out[f"{labels['method']} {labels['kind']}"] = float(line.rsplit(" ", 1)[1])
    return out


def diff(after: dict, before: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before) if after.get(k, 0) - before.get(k, 0)}


def writes(requests: dict, include_events: bool = False) -> float:
    """Writes to objects; posting an Event is counted apart (it changes nothing the operator owns)."""
    return sum(n for key, n in requests.items()
               if key.split()[0] in WRITE_VERBS and (include_events or key.split()[1] != "events"))


def operator_metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("llmbackend_reconcile_total{") or line.startswith("llmbackend_reconcile_errors_total "):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def reconcile_seconds(port: int) -> tuple[float, float]:
    """(sum, count) of llmbackend_reconcile_duration_seconds: the wall time of the passes."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in values:
            if line.startswith(f"llmbackend_reconcile_duration_seconds_{part}"):
                values[part] += float(line.rsplit(" ", 1)[1])
    return values["sum"], values["count"]


def component_cpu(cluster) -> dict[str, float]:
    """CPU seconds of each control-plane process so far (where the wall time of a burst goes)."""
    out = {}
    for component in cluster.components:
        try:
            out[component.name] = proc_stats(component.pid)["cpu_s"]
        except (OSError, TypeError):
            pass
    return out


def reconciles(port: int) -> float:
    return sum(v for k, v in operator_metrics(port).items() if k.startswith("llmbackend_reconcile_total"))


def proc_stats(pid: int) -> dict[str, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    kb = lambda k: int(status[k].split()[0]) / 1024  # noqa: E731
    return {"cpu_s": cpu, "rss_mb": kb("VmRSS"), "peak_rss_mb": kb("VmHWM")}


def wait_operator_up(cluster, op, metrics_port: int, timeout_s: float = 60) -> None:
    """Until the operator's metrics endpoint answers (it exits with the log's tail if it never does)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            reconciles(metrics_port)
            return
        except OSError as exc:
            if time.monotonic() > deadline or op.poll() is not None:
                log = devcluster.log_tail(cluster.log_file("llmbackend-operator"))
                raise SystemExit("operator did not come up: " + log) from exc
            time.sleep(0.5)


def stop_operator(op) -> None:
    if op is not None and op.poll() is None:
        op.terminate()
        try:
            op.wait(timeout=20)
        except Exception:  # noqa: BLE001
            op.kill()


def extra_nodes(count: int) -> list[dict]:
    template = topology_nodes("dgx-h100-x4")[0]
    nodes = []
    for i in range(count):
        node = copy.deepcopy(template)
        name = f"dgx-bench-{i:03d}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        nodes.append(node)
    return nodes


def backend(name: str, namespace: str) -> dict:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/llama-3.1-8b"}},
                     "parallelism": {"tensorParallel": 1}}}


def add_model_cache_volume(kube: Kube, namespace: str) -> None:
    """A volume pre-bound to the namespace's model cache claim (the dev cluster has no storage provisioner)."""
    kube.request("POST", "/api/v1/persistentvolumes", body={
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-model-cache"},
        "spec": {"capacity": {"storage": "10Ti"}, "accessModes": ["ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{namespace}-model-cache"},
                 "claimRef": {"namespace": namespace, "name": DEFAULT_CACHE_CLAIM}}})


def cond(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else float("nan")


def direct_burst(cluster, kube: Kube, nodes: list[dict], ns: str, count: int, workers: int = 8) -> int:
    """The writes of N first passes, made by this script with no decision in between: how long the control plane
    of this machine needs for them, whatever the operator does."""
    from llmbackend.api.v1alpha1 import LLMBackend
    from llmbackend.controller.preview import preview
    from llmbackend.planning.inventory import parse_node

    gpu_nodes = [n for n in (parse_node(node) for node in nodes) if n is not None]
    names = [f"b{i:04d}" for i in range(count)]
    rendered = {}
    for name in names:  # rendered before the clock starts: the operator's own CPU is not what this measures
        result = preview(LLMBackend.model_validate(backend(name, ns)), gpu_nodes)
        rendered[name] = (result.objects, result.plan.model_dump(by_alias=True, exclude_none=True, mode="json"))
    done: dict[str, float] = {}
    components0, t0 = component_cpu(cluster), time.monotonic()

    def first_pass(name: str) -> None:
        owner = kube.create(backend(name, ns))["metadata"]
        children, plan = rendered[name]
        for child in children:
            child = copy.deepcopy(child)
            for ref in child["metadata"].get("ownerReferences", []):
                if ref.get("kind") == "LLMBackend":
                    ref["uid"] = owner["uid"]
            try:
                kube.create_applied(child)
            except ApiError as exc:
                if exc.status != 409:  # the namespace's shared cache claim: made once
                    raise
        kube.patch_status("LLMBackend", ns, name, {"plan": plan, "conditions": [
            {"type": "Planned", "status": "True", "reason": "Planned", "message": "direct",
             "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]})
        kube.create({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{name}.", "namespace": ns},
                     "involvedObject": {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                                        "namespace": ns, "name": name, "uid": owner["uid"]},
                     "reason": "Planned", "message": "direct", "type": "Normal", "count": 1,
                     "source": {"component": "load-bench"}})
        done[name] = time.monotonic()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(first_pass, names))
    total = time.monotonic() - t0
    deployments = {d["metadata"]["name"] for d in kube.list("Deployment", ns)}
    components = diff(component_cpu(cluster), components0)
    latencies = [done[n] - t0 for n in names]
    print(f"\n== direct burst (no operator, {workers} at a time): {len(deployments & set(names))}/{count} Deployments "
          f"after {total:.1f}s (p50 {pct(latencies, 50):.1f}s); {sum(len(rendered[n][0]) for n in names) / count:.1f} "
          f"children + 1 status write + 1 Event per backend; control plane CPU meanwhile: "
          + ", ".join(f"{name} {cpu:.1f}s" for name, cpu in sorted(components.items(), key=lambda kv: -kv[1]))
          + f"; load average {os.getloadavg()[0]:.1f} at the end")
    return 0 if len(deployments & set(names)) == count else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", type=int, default=500)
    ap.add_argument("--extra-nodes", type=int, default=70)
    ap.add_argument("--resync-seconds", type=float, default=20)
    ap.add_argument("--workers", type=int, default=None, help="the operator's --workers (default: its own default)")
    ap.add_argument("--label-updates", type=int, default=1000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--burst-only", action="store_true", help="stop after the burst (to compare --workers quickly)")
    ap.add_argument("--direct", action="store_true",
                    help="no operator: the script makes a first pass's writes itself (the control plane's floor)")
    args = ap.parse_args()

    directory = Path(args.dir or tempfile.mkdtemp(prefix="llmb-bench-"))
    t = time.monotonic()
    cluster = devcluster.up(directory, devcluster.Ports.free(), log=lambda *a: None)
    print(f"cluster up in {time.monotonic() - t:.1f}s ({directory})")
    op = None
    try:
        kube = Kube(load_configuration(str(cluster.kubeconfig)), pool_size=32)
        nodes = topology_nodes("dgx-h100-x4") + extra_nodes(args.extra_nodes)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda n: load_nodes(kube, [n]), nodes))
        install_crd(kube)
        ns = "bench"
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        add_model_cache_volume(kube, ns)
        print(f"{len(nodes)} nodes ({8 * len(nodes)} GPUs), CRD installed")
        if args.direct:
            return direct_burst(cluster, kube, nodes, ns, args.backends, args.workers or 8)

        metrics_port = free_port()
        op = start_operator(cluster, ["--metrics-addr", f"127.0.0.1:{metrics_port}", "--resync-seconds",
                                      str(args.resync_seconds), *(["--workers", str(args.workers)] if args.workers else [])])
        wait_operator_up(cluster, op, metrics_port)
        time.sleep(3)  # the watches list nodes and backends, then watch
        base_api = api_requests(metrics_port)
        base_rec = reconciles(metrics_port)
        stats0 = proc_stats(op.pid)
        components0, passes0 = component_cpu(cluster), reconcile_seconds(metrics_port)

        # ---- burst: N backends at once ----
        names = [f"b{i:04d}" for i in range(args.backends)]
        created: dict[str, float] = {}
        t0 = time.monotonic()

        def create(name: str) -> None:
            kube.create(backend(name, ns))
            created[name] = time.monotonic()

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, names))
        print(f"created {len(names)} LLMBackends in {time.monotonic() - t0:.1f}s")
        done: dict[str, float] = {}
        deadline = t0 + 300
        while len(done) < len(names) and time.monotonic() < deadline:
            now = time.monotonic()
            deployments = {d["metadata"]["name"] for d in kube.list("Deployment", ns)}
            for obj in kube.list("LLMBackend", ns):
                name = obj["metadata"]["name"]
                planned = cond(obj, "Planned")
                if name not in done and planned and planned["status"] == "True" and name in deployments:
                    done[name] = now
            time.sleep(0.5)
        total = (max(done.values()) - t0) if done else float("nan")
        latencies = [done[n] - created[n] for n in done]
        burst_api = diff(api_requests(metrics_port), base_api)
        burst_rec = reconciles(metrics_port) - base_rec
        print(f"\n== burst: {len(done)}/{len(names)} Planned with a Deployment; total {total:.1f}s "
              f"(target <= 120s): per CR p50 {pct(latencies, 50):.1f}s p99 {pct(latencies, 99):.1f}s max {max(latencies, default=float('nan')):.1f}s")
        print(f"   operator API requests: {json.dumps(burst_api, sort_keys=True)} -> {sum(burst_api.values()) / len(names):.1f} per CR "
              f"({writes(burst_api) / len(names):.1f} writes per CR); reconciles {burst_rec:.0f} ({burst_rec / len(names):.1f} per CR)")
        print("   per CR by verb and kind: " + ", ".join(f"{key} {n / len(names):.2f}" for key, n in sorted(burst_api.items())))
        burst_cpu = proc_stats(op.pid)["cpu_s"] - stats0["cpu_s"]
        print(f"   operator CPU during the burst {burst_cpu:.1f}s: {1000 * burst_cpu / len(names):.0f} ms per new backend "
              f"(its passes and the watch events they cause)")
        components = diff(component_cpu(cluster), components0)
        passes = [a - b for a, b in zip(reconcile_seconds(metrics_port), passes0)]
        print(f"   a pass took {passes[0] / max(passes[1], 1):.2f}s of wall time on average ({passes[1]:.0f} passes, "
              f"{args.workers or 'default'} workers); control plane CPU during the burst: "
              + ", ".join(f"{name} {cpu:.1f}s" for name, cpu in sorted(components.items(), key=lambda kv: -kv[1]))
              + f"; load average {os.getloadavg()[0]:.1f} at the end")
        if args.burst_only:
            return 0 if len(done) == len(names) else 1

        # ---- settle: pods become ready, statuses get their last update ----
        t_settle = time.monotonic()
        last, quiet_since = writes(api_requests(metrics_port)), time.monotonic()
        available = 0
        while time.monotonic() - t_settle < 300:
            time.sleep(5)
            now_w = writes(api_requests(metrics_port))
            items = kube.list("LLMBackend", ns)
            available = sum(1 for o in items if (cond(o, "Available") or {}).get("status") == "True")
            if now_w != last:
                last, quiet_since = now_w, time.monotonic()
            elif time.monotonic() - quiet_since >= 15 and available == len(names):
                break
        print(f"\n== settle: {available}/{len(names)} Available after {time.monotonic() - t0:.1f}s from the burst")

        # ---- no-op resync ----
        quiet = 2 * args.resync_seconds + 5
        before_api, before_rec = api_requests(metrics_port), reconciles(metrics_port)
        before_cpu = proc_stats(op.pid)["cpu_s"]
        # CPU sampled each second (from /proc: nothing asked of the operator): the passes of a resync run in a burst
        # of about a second, so the median second is one without passes: the process's CPU between them (its watches
        # and loops), which the second figure leaves out.
        samples = [(time.monotonic(), before_cpu)]
        while time.monotonic() - samples[0][0] < quiet:
            time.sleep(1)
            samples.append((time.monotonic(), proc_stats(op.pid)["cpu_s"]))
        quiet_api = diff(api_requests(metrics_port), before_api)
        quiet_rec = reconciles(metrics_port) - before_rec
        quiet_cpu = samples[-1][1] - before_cpu
        idle = sorted((c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(samples, samples[1:]))
        idle_rate = idle[len(idle) // 2]
        passes_cpu = quiet_cpu - idle_rate * (samples[-1][0] - samples[0][0])
        print(f"\n== no-op resync ({quiet:.0f}s, resync every {args.resync_seconds:.0f}s): reconciles {quiet_rec:.0f}, "
              f"operator writes {writes(quiet_api):.0f} (target 0); requests {json.dumps(quiet_api, sort_keys=True)}; "
              f"CPU {quiet_cpu:.1f}s, {1000 * quiet_cpu / max(quiet_rec, 1):.1f} ms per no-op pass; without the "
              f"process's CPU between passes ({1000 * idle_rate:.0f} ms/s, the median of {len(idle)} seconds): "
              f"{1000 * passes_cpu / max(quiet_rec, 1):.1f} ms per no-op pass")

        # ---- node churn ----
        node_names = [n["metadata"]["name"] for n in nodes]
        before_api, before_rec = api_requests(metrics_port), reconciles(metrics_port)
        node_path = lambda n: kube._path("Node", None, n)  # noqa: E731
        failures = Counter()

        def touch(i: int) -> None:
            name = node_names[i % len(node_names)]
            labels = {"bench.example.com/irrelevant": str(i)} if i % 2 else {"nvidia.com/gfd.timestamp": str(1700000000 + i)}
            try:
                kube.request("PATCH", node_path(name), body={"metadata": {"labels": labels}},
                             content_type="application/merge-patch+json")
            except ApiError as exc:
                failures[exc.status] += 1

        t_churn = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            for i in range(args.label_updates):
                pool.submit(touch, i)
                time.sleep(max(0.0, (t_churn + (i + 1) * 50 / args.label_updates) - time.monotonic()))
        churn_s = time.monotonic() - t_churn
        time.sleep(10)
        churn_api = diff(api_requests(metrics_port), before_api)
        churn_rec = reconciles(metrics_port) - before_rec
        print(f"\n== node churn: {args.label_updates} label updates in {churn_s:.1f}s (failures {dict(failures)}): "
              f"reconciles {churn_rec:.0f} (a resync of {len(names)} every {args.resync_seconds:.0f}s included), "
              f"operator writes {writes(churn_api):.0f}; requests {json.dumps(churn_api, sort_keys=True)}")

        stats = proc_stats(op.pid)
        print(f"\n== operator process: CPU {stats['cpu_s']:.1f}s total ({stats['cpu_s'] - stats0['cpu_s']:.1f}s during the run), "
              f"RSS {stats['rss_mb']:.0f} MB, peak RSS {stats['peak_rss_mb']:.0f} MB (target < 300 MB)")
        errors = operator_metrics(metrics_port)
        print(f"   operator metrics: {json.dumps(errors, sort_keys=True)}")
        ok = (len(done) == len(names) and total <= 120 and writes(quiet_api) == 0 and stats["peak_rss_mb"] < 300)
        print(f"\n{'PASS' if ok else 'MISS'}: targets (all reconciled within 120s, 0 no-op writes, peak RSS < 300 MB)")
        return 0 if ok else 1
    finally:
        stop_operator(op)
        devcluster.stop(cluster)


if __name__ == "__main__":
    sys.exit(main())
