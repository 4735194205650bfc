"""Report a node's NVLink domains as the annotation `llmbackend.dev/gpu-topology`.

GPU Feature Discovery does not label intra-node NVLink topology, so this small
agent (a DaemonSet on GPU nodes) reads it and annotates its own Node with
`{"nvlinkDomains": [[0,1,...], ...]}`: the connected components of the NVLink
graph; GPUs without NVLink are singleton domains.

Sources, first available: `--from-file` (a captured `nvidia-smi topo -m`),
NVML through `pynvml` (optional, imported lazily), `nvidia-smi topo -m`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

from .inventory import TOPOLOGY_ANNOTATION

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")


def _components(n: int, links: list[tuple[int, int]]) -> list[list[int]]:
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in links:
        parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def parse_topo_matrix(text: str) -> list[list[int]]:
    """NVLink domains from `nvidia-smi topo -m` output.

    The GPU columns come first in the header (then NICs, CPU/NUMA affinity);
    a cell `NV#` means # bonded NVLinks between the row and column GPU.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header: list[str] | None = None
    links: list[tuple[int, int]] = []
    rows: set[int] = set()
    for line in lines:
        if line.strip().startswith("Legend"):
            break
        tokens = line.split()
        if not tokens:
            continue
        if header is None:
            if _GPU.match(tokens[0]) and len(tokens) > 1 and _GPU.match(tokens[1]):
                header = []
                for tok in tokens:
                    if not _GPU.match(tok):
                        break
                    header.append(tok)
            elif tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1] not in ("X",):
                header = ["GPU0"]  # single-GPU machine: header "GPU0 CPU Affinity ..."
            continue
        m = _GPU.match(tokens[0])
        if not m:
            continue  # NIC rows
        row = int(m.group(1))
        rows.add(row)
        for col, cell in zip(header, tokens[1 : 1 + len(header)]):
            nv = _NV.match(cell)
            if nv and int(nv.group(1)) > 0:
                links.append((row, int(col[3:])))
    if header is None:
        raise ValueError("no GPU matrix found in nvidia-smi topo -m output")
    n = max([int(c[3:]) for c in header] + list(rows)) + 1
    return _components(n, links)


def domains_from_nvml() -> list[list[int]] | None:
    """NVLink domains from NVML; None when pynvml or the driver is unavailable."""
    try:
        import pynvml  # optional; not a dependency
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus = {}
        for i, h in enumerate(handles):
            bus_id = pynvml.nvmlDeviceGetPciInfo(h).busId
            bus[bus_id.decode() if isinstance(bus_id, bytes) else bus_id] = i
        links: list[tuple[int, int]] = []
        on_switch: list[int] = []
        for i, h in enumerate(handles):
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId
                except pynvml.NVMLError:
                    continue
                remote = remote.decode() if isinstance(remote, bytes) else remote
                if remote in bus:
                    links.append((i, bus[remote]))
                else:
                    on_switch.append(i)  # remote is an NVSwitch: all such GPUs share it
        links.extend((on_switch[0], j) for j in on_switch[1:])
        return _components(count, links)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def read_domains(from_file: str | None = None) -> list[list[int]]:
    if from_file:
        with open(from_file) as f:
            return parse_topo_matrix(f.read())
    domains = domains_from_nvml()
    if domains is not None:
        return domains
    out = subprocess.run(["nvidia-smi", "topo", "-m"], check=True, capture_output=True, text=True, timeout=60)
    return parse_topo_matrix(out.stdout)


def annotation_value(domains: list[list[int]]) -> str:
    return json.dumps({"nvlinkDomains": domains}, separators=(",", ":"))


def patch_node(node_name: str, value: str) -> bool:
    """Set the annotation on the Node when it differs; True when patched."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except Exception:  # noqa: BLE001 - running outside a pod
        config.load_kube_config()
    api = client.CoreV1Api()
    node = api.read_node(node_name)
    current = ((node.metadata and node.metadata.annotations) or {}).get(TOPOLOGY_ANNOTATION)
    if current == value:
        return False
    api.patch_node(node_name, {"metadata": {"annotations": {TOPOLOGY_ANNOTATION: value}}})
    return True


def run(args: argparse.Namespace) -> int:
    if not args.dry_run and not args.node_name:
        print("error: --node-name (or NODE_NAME) is required unless --dry-run", file=sys.stderr)
        return 1
    while True:
        try:
            value = annotation_value(read_domains(args.from_file))
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            print(f"error: cannot read GPU topology: {exc}", file=sys.stderr)
            if args.once:
                return 1
        else:
            if args.dry_run:
                print(value)
            elif patch_node(args.node_name, value):
                print(f"annotated node {args.node_name}: {value}", file=sys.stderr)
        if args.once:
            return 0
        time.sleep(args.interval)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "topology-reporter", help="annotate this node with its NVLink domains", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="Node to annotate (env NODE_NAME)")
    parser.add_argument("--once", action="store_true", help="report once and exit")
    parser.add_argument("--interval", type=float, default=300.0, help="seconds between reports")
    parser.add_argument("--from-file", help="a captured `nvidia-smi topo -m` output (testing)")
    parser.add_argument("--dry-run", action="store_true", help="print the annotation JSON instead of patching")
    parser.set_defaults(func=run)
