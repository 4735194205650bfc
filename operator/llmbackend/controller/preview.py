"""`llmbackend render`: every object the operator would create for an LLMBackend, offline.

    llmbackend render -f backend.yaml [--nodes nodes.yaml] [-o yaml|DIR] [--prometheus-rules]

The plan and the objects come from the functions the reconciler calls on its first pass for a new CR (plan_for_spec,
plan_status_from, replicas_capacity, choose_rollout_strategy, desired_objects): what you review here is what the
controller applies. `-o yaml` (default) prints the plan (an LLMBackend with status.plan) and the objects as one
multi-document YAML; `-o DIR` writes `DIR/objects/<kind>-<name>.yaml`, `DIR/plan.yaml` and the model repository
the ConfigMap holds under `DIR/model-repository/` (for GitOps diffs). Without --nodes the Nodes are listed from the
current kubeconfig. Exit codes: 0 rendered, 2 no plan fits (the plan explanation is printed), 1 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

from ..api.catalog import UnknownPresetError
from ..api.v1alpha1 import AutoscalingMode, LLMBackend, PlanStatus
from ..planning.cli import InputError, _load_yaml_docs, load_backend, node_dicts_from_docs, nodes_from_cluster
from ..planning.inventory import parse_node
from ..planning.planner import plan_for_spec, replicas_capacity
from ..render.workloads import BackendRef, choose_rollout_strategy, config_map_files, desired_objects, minimum_replicas
from .decide import plan_status_from, spec_hash

PREVIEW_UID = "00000000-0000-0000-0000-000000000000"  # the API server assigns the real one


@dataclasses.dataclass
class Preview:
    fits: bool
    explanation: str
    plan: PlanStatus | None
    objects: list[dict[str, Any]]


def preview(backend: LLMBackend, nodes: list[Any], prometheus_rules: bool = False) -> Preview:
    """The plan and desired objects for a new CR on these nodes (first reconcile: no live workload yet)."""
    meta = backend.metadata or {}
    ref = BackendRef(meta.get("name") or "llmbackend", meta.get("namespace") or "default", meta.get("uid") or PREVIEW_UID)
    spec = backend.spec
    fresh = plan_for_spec(spec, nodes)
    if not fresh.fits:
        return Preview(False, fresh.explanation, None, [])
    plan = plan_status_from(fresh, spec_hash(spec))
    capacity = replicas_capacity(fresh, nodes, spec.scheduling.node_selector,
                                 [t.dump() for t in spec.scheduling.tolerations or []])
    replicas = minimum_replicas(spec)
    strategy, _ = choose_rollout_strategy(replicas, capacity - replicas)
    hpa_mode = spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.HPA
    objects = desired_objects(ref, spec, plan, replicas, strategy, prometheus_rules and hpa_mode)
    return Preview(True, fresh.explanation, plan, objects)


def _plan_document(backend: LLMBackend, plan: PlanStatus) -> dict[str, Any]:
    doc = backend.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc.pop("status", None)
    doc["status"] = {"plan": plan.dump()}
    return doc


def write_directory(out: Path, backend: LLMBackend, result: Preview) -> list[Path]:
    assert result.plan is not None
    written = []
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.yaml").write_text(yaml.safe_dump(_plan_document(backend, result.plan), sort_keys=False))
    written.append(out / "plan.yaml")
    for obj in result.objects:
        path = out / "objects" / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
        if obj["kind"] == "ConfigMap":
            for rel, content in config_map_files(obj).items():
                target = out / "model-repository" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
                written.append(target)
    return written


def run(args: argparse.Namespace) -> int:
    try:
        backend = load_backend(args.filename)
        raw = node_dicts_from_docs(_load_yaml_docs(args.nodes)) if args.nodes else nodes_from_cluster()
        nodes = [n for n in (parse_node(d) for d in raw) if n is not None]
        result = preview(backend, nodes, args.prometheus_rules)
    except (InputError, UnknownPresetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not result.fits:
        print(result.explanation, file=sys.stderr)
        return 2
    assert result.plan is not None
    if args.output == "yaml":
        sys.stdout.write(yaml.safe_dump_all([_plan_document(backend, result.plan), *result.objects], sort_keys=False))
    else:
        written = write_directory(Path(args.output), backend, result)
        print(f"wrote {len(written)} files under {args.output}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render", help="print or write every object the operator would create for an LLMBackend",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-f", "--filename", required=True, help="LLMBackend manifest (YAML)")
    parser.add_argument("--nodes", help="Nodes YAML (NodeList or multi-document); default: the current cluster")
    parser.add_argument("-o", "--output", default="yaml", help="yaml (stdout, default) or a directory to write")
    parser.add_argument("--prometheus-rules", action="store_true",
                        help="autoscaling mode hpa: also render the PrometheusRule (the Prometheus Operator is installed)")
    parser.set_defaults(func=run)
