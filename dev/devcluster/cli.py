"""`python -m devcluster up|down|status|load-nodes` and `python -m devcluster demo` (with dev/ on the Python path;
`make demo` and `make down` run them). A tool of this repository, not part of the operator package."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .build import REPO_ROOT, BuildError
from .cluster import Cluster, ClusterError, _die_with_parent, default_dir, down, load, up

TOPOLOGIES_DIR = REPO_ROOT / "e2e" / "topologies"
CRD_FILE = REPO_ROOT / "crds" / "llmbackend.yaml"
DEMO_SAMPLE = REPO_ROOT / "manifests" / "samples" / "llama-3.1-8b-trtllm.yaml"
MODELS_PVC = REPO_ROOT / "e2e" / "fixtures" / "models-pvc.yaml"


def topology_nodes(name: str) -> list[dict[str, Any]]:
    path = Path(name) if name.endswith((".yaml", ".yml")) else TOPOLOGIES_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in TOPOLOGIES_DIR.glob("*.yaml")))
        raise ClusterError(f"unknown topology {name!r}; known: {known}")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kube_for(cluster: Cluster):
    from llmbackend.controller.kube import Kube, load_configuration

    return Kube(load_configuration(str(cluster.kubeconfig)))


def load_nodes(kube, nodes: list[dict[str, Any]]) -> list[str]:
    """Create the simulated nodes (kwok picks them up by their annotation); existing ones are kept."""
    from llmbackend.controller.kube import ApiError

    names = []
    for node in nodes:
        try:
            kube.create(node)
        except ApiError as exc:
            if exc.status != 409:
                raise
        names.append(node["metadata"]["name"])
    return names


def install_crd(kube, timeout_s: float = 30) -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    kube.apply(crd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = kube.get("CustomResourceDefinition", None, crd["metadata"]["name"])
        conditions = {c["type"]: c["status"] for c in ((live or {}).get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            return
        time.sleep(0.2)
    raise ClusterError(f"CRD {crd['metadata']['name']} not Established within {timeout_s}s")


def start_operator(cluster: Cluster, extra_args: list[str] | None = None, name: str = "llmbackend-operator",
                   env: dict[str, str] | None = None) -> subprocess.Popen:
    """Run `llmbackend run` against the cluster in the background, logging to logs/<name>.log."""
    log = open(cluster.log_file(name), "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "llmbackend.cli", "run", "--kubeconfig", str(cluster.kubeconfig),
         "--metrics-addr", "127.0.0.1:0", "--health-addr", "", *(extra_args or [])],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=_die_with_parent if cluster.tied_to_parent else None, env={**os.environ, **(env or {})},
    )


def _kubectl(cluster: Cluster) -> str:
    from .build import bin_dir

    return str(bin_dir() / "kubectl")


def demo(args) -> int:
    directory = Path(args.dir)
    started = time.monotonic()
    cluster = up(directory)
    kube = kube_for(cluster)
    nodes = load_nodes(kube, topology_nodes(args.topology))
    print(f"nodes ({args.topology}): {', '.join(nodes)}")
    install_crd(kube)
    record = json.loads(cluster.pid_file.read_text())
    old_pid = record["pids"].get("llmbackend-operator")
    if not (old_pid and _pid_alive(old_pid)):
        operator = start_operator(cluster)
        record["pids"]["llmbackend-operator"] = operator.pid
        cluster.pid_file.write_text(json.dumps(record))
        print(f"operator started (pid {operator.pid}), log: {cluster.log_file('llmbackend-operator')}")
    kubectl = _kubectl(cluster)
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    sample = Path(args.sample)
    subprocess.run([kubectl, "apply", "-f", str(MODELS_PVC)], env=env, check=True)  # the samples' model store
    subprocess.run([kubectl, "apply", "-f", str(sample)], env=env, check=True)
    name = yaml.safe_load(sample.read_text())["metadata"]["name"]
    namespace = yaml.safe_load(sample.read_text())["metadata"].get("namespace", "default")
    deadline = time.monotonic() + args.timeout
    available = False
    while time.monotonic() < deadline:
        obj = kube.get("LLMBackend", namespace, name) or {}
        conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        if conditions.get("Available", {}).get("status") == "True" or conditions.get("Planned", {}).get("status") == "False":
            available = conditions.get("Available", {}).get("status") == "True"
            break
        time.sleep(0.5)
    subprocess.run([kubectl, "get", "llmb", "-n", namespace, "-o", "wide"], env=env)
    print()
    subprocess.run([kubectl, "get", "deploy,svc,pdb,pods", "-n", namespace, "-l", f"llmbackend.dev/backend={name}"], env=env)
    obj = kube.get("LLMBackend", namespace, name) or {}
    print("\nplan:\n" + obj.get("status", {}).get("plan", {}).get("explanation", "(none)"))
    print("\nconditions:")
    for cond in obj.get("status", {}).get("conditions", []):
        message = (cond.get("message") or "").strip().splitlines()
        print(f"  {cond['type']:<12} {cond['status']:<6} {cond['reason']}: {message[0][:160] if message else ''}")
    print(f"\n{'Available' if available else 'NOT available'} after {time.monotonic() - started:.1f}s.")
    answered = False
    if available:
        from .answer import real_answer

        answered = real_answer(kube, namespace, obj, directory / "demo-triton")
    print(f"Try: export KUBECONFIG={cluster.kubeconfig}; {kubectl} get llmb -o wide")
    print("Stop everything: make down (python -m devcluster down)")
    return 0 if available and answered else 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    for action, help_text in [
        ("up", "start a local control plane (etcd, kube-apiserver, scheduler, kwok) on 127.0.0.1"),
        ("down", "stop it and discard its state"),
        ("status", "print its processes (exit 1 when none runs)"),
        ("load-nodes", "create the simulated GPU nodes of a topology"),
    ]:
        sub = actions.add_parser(action, help=help_text)
        sub.add_argument("--dir", default=str(default_dir()), help="state directory (kubeconfig, logs, etcd data)")
        sub.add_argument("--topology", default="dgx-h100",
                         help="node fixture for load-nodes (name in e2e/topologies or a file)")
        sub.set_defaults(func=dev_cluster)

    demo_parser = actions.add_parser(
        "demo", help="dev cluster + GPU nodes + CRD + operator + a sample LLMBackend, then print its status")
    demo_parser.add_argument("--dir", default=str(default_dir()))
    demo_parser.add_argument("--topology", default="dgx-h100")
    demo_parser.add_argument("--sample", default=str(DEMO_SAMPLE))
    demo_parser.add_argument("--timeout", type=float, default=120)
    demo_parser.set_defaults(func=lambda args: _guard(demo, args))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def dev_cluster(args) -> int:
    return _guard(_dev_cluster, args)


def _dev_cluster(args) -> int:
    directory = Path(args.dir)
    if args.action == "up":
        cluster = up(directory)
        print(f"export KUBECONFIG={cluster.kubeconfig}")
    elif args.action == "down":
        down(directory)
    elif args.action == "status":
        cluster = load(directory)
        if cluster is None:
            print("not running")
            return 1
        print(json.dumps(json.loads(cluster.pid_file.read_text()), indent=2))
    elif args.action == "load-nodes":
        cluster = load(directory)
        if cluster is None:
            raise ClusterError("no dev cluster running; run `python -m devcluster up` first")
        print("\n".join(load_nodes(kube_for(cluster), topology_nodes(args.topology))))
    return 0


def _guard(fn, args) -> int:
    try:
        return fn(args)
    except (ClusterError, BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
