"""CPU of a no-op reconcile pass, without a cluster (a script that prints figures, not a test).

    python benchmarks/noop_pass_bench.py [--backends 200] [--passes 5] [--profile 25]

The operator's own reconciler reads through `CachedKube` from watch-cache stores, as in `llmbackend run`; behind it an
in-memory API server (controller/fakekube.py) takes the writes. N single-GPU backends like load_bench.py's (an s3
source, so the model cache's claim and download Job too) get their first pass, then their children are made to look
as the cluster makes them (the Deployment rolled out, one Ready pod per backend, the download Job complete) and the
backends settle. Then every backend is reconciled `--passes` times more: the process CPU time per pass is the figure
(issue 47: at most 2 ms), and the writes must be 0. `--profile N` prints cProfile's top N functions of those passes.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0:0] = [str(REPO / "operator"), str(REPO / "dev")]

from devcluster.cli import topology_nodes  # noqa: E402
from llmbackend.controller.cache import WATCHED_KINDS, CachedKube, WatchCaches  # noqa: E402
from llmbackend.controller.fakekube import FakeKube  # noqa: E402
from llmbackend.controller.reconcile import Reconciler, SharedState  # noqa: E402
from llmbackend.controller.workloadstatus import TEMPLATE_HASH_ANNOTATION  # noqa: E402
from llmbackend.planning.inventory import Inventory  # noqa: E402

NAMESPACE = "bench"


def backend(name: str, uid: str) -> dict:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": 1},
            "spec": {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/llama-3.1-8b"}},
                     "parallelism": {"tensorParallel": 1}}}


def nodes(extra: int) -> list[dict]:
    template = topology_nodes("dgx-h100-x4")[0]
    out = topology_nodes("dgx-h100-x4")
    for i in range(extra):
        node = copy.deepcopy(template)
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = f"dgx-bench-{i:03d}"
        out.append(node)
    return out


class Cluster:
    """The fake API server, the watch caches (filled from it, not started) and the operator's reconciler."""

    def __init__(self, backends: int, extra_nodes: int) -> None:
        self.fake = FakeKube()
        self.caches = WatchCaches(self.fake)  # type: ignore[arg-type]  # the watchers are never started
        inventory = Inventory()
        self.node_objects = nodes(extra_nodes)
        for node in self.node_objects:
            inventory.upsert(node)
        self.caches.nodes.replace("", self.node_objects)
        self.state = SharedState(inventory=inventory, node_names=self.caches.nodes.names)
        self.kube = CachedKube(self.fake, self.caches, self.caches.backends)  # type: ignore[arg-type]
        self.reconciler = Reconciler(self.kube, self.state)
        self.keys = [(NAMESPACE, f"b{i:04d}") for i in range(backends)]
        for i, (_, name) in enumerate(self.keys):
            self.fake._stored(backend(name, f"backend-uid-{i}"))
        self.sync()

    def sync(self) -> None:
        """The stores as the watches would hold them: every object of the fake (the caches keep only the operator's)."""
        for kind in WATCHED_KINDS:
            self.caches.stores[kind].replace("", [o for (k, _, _), o in self.fake.objects.items() if k == kind])
        self.caches.backends.replace("", [o for (k, _, _), o in self.fake.objects.items() if k == "LLMBackend"])

    def served(self) -> None:
        """What the cluster does with the children: the Deployments roll out (a Ready pod each), the Job completes."""
        for (kind, namespace, name), obj in list(self.fake.objects.items()):
            if kind == "Job":
                self.fake._stored({**obj, "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}})
            if kind != "Deployment":
                continue
            replicas = obj["spec"]["replicas"]
            self.fake._stored({**obj, "metadata": {**obj["metadata"], "generation": 1},
                               "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                                          "readyReplicas": replicas, "availableReplicas": replicas}})
            template = obj["spec"]["template"]
            for r in range(replicas):
                self.fake._stored({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{r}", "namespace": namespace,
                                 "labels": dict(template["metadata"]["labels"]),
                                 "annotations": dict(template["metadata"].get("annotations") or {}),
                                 "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-rs", "uid": f"rs-{name}",
                                                      "controller": True}]},
                    "spec": {**copy.deepcopy(template["spec"]), "nodeName": self.node_objects[r % len(self.node_objects)]["metadata"]["name"]},
                    "status": {"phase": "Running", "podIP": "10.0.0.1",
                               "conditions": [{"type": "Ready", "status": "True"}]}})
            assert TEMPLATE_HASH_ANNOTATION in template["metadata"]["annotations"]
        self.sync()

    def pass_all(self) -> int:
        writes = 0
        for key in self.keys:
            writes += self.reconciler.reconcile(key).writes
        return writes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", type=int, default=200)
    ap.add_argument("--extra-nodes", type=int, default=30)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions (cumulative)")
    args = ap.parse_args()

    cluster = Cluster(args.backends, args.extra_nodes)
    t = time.process_time()
    first = cluster.pass_all()
    first_cpu = time.process_time() - t
    cluster.served()
    settle = [cluster.pass_all() for _ in range(3)]
    print(f"{args.backends} backends, {len(cluster.node_objects)} nodes: first pass {1000 * first_cpu / args.backends:.1f} ms "
          f"CPU per backend ({first} writes); settling passes wrote {settle}")
    profiler = cProfile.Profile() if args.profile else None
    writes, per_pass = 0, []
    for _ in range(args.passes):
        t = time.process_time()
        if profiler:
            profiler.enable()
        writes += cluster.pass_all()
        if profiler:
            profiler.disable()
        per_pass.append(1000 * (time.process_time() - t) / args.backends)
    per_pass.sort()
    print(f"no-op pass: {per_pass[len(per_pass) // 2]:.2f} ms CPU per backend (median of {args.passes} rounds; "
          f"min {per_pass[0]:.2f}, max {per_pass[-1]:.2f}); writes {writes} (target 0)")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
    return 0 if writes == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
