"""`llmbackend render` and `llmbackend plan`: every object the operator would create for an LLMBackend, and its
plan, offline.

    llmbackend render -f backend.yaml [--nodes nodes.yaml] [-o yaml|DIR] [--api KIND ...] [--checkpoint DIR]
    llmbackend plan -f backend.yaml [--nodes nodes.yaml] [-o json|text] [--checkpoint DIR]

A model with neither preset nor architecture is read as the operator reads it: the config.json (and safetensors
index) of its hf:// or s3:// source, over HTTPS (HF_TOKEN / AWS_* from the environment), or of `--checkpoint DIR`,
a local directory holding the checkpoint's config.json (needed offline, and for pvc sources).

The plan and the objects come from the reconciler's own pure `decide()`, called as on the first pass for a new CR
(no child exists yet): what you review here is what the controller applies, annotations included. The optional APIs
the cluster is assumed to serve are LeaderWorkerSet and KEDA's ScaledObject; `--api KIND` adds others (e.g.
PrometheusRule, InferencePool, ComputeDomain, Volcano, Kueue; `--prometheus-rules` is `--api PrometheusRule`). `-o yaml` (default) prints the plan (an LLMBackend with status.plan) and the objects as one
multi-document YAML; `-o DIR` writes `DIR/objects/<kind>-<name>.yaml`, `DIR/plan.yaml` and the model repository
the ConfigMap holds under `DIR/model-repository/` (for GitOps diffs). Without --nodes the Nodes are listed from the
current kubeconfig. Exit codes: 0 rendered, 2 not served (no plan fits, or an API the plan needs is not assumed;
the reason is printed), 1 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

from ..api import conditions as cond
from ..api.catalog import PRESETS, UnknownPresetError
from ..api.checkpoint import CheckpointError, architecture_from_config
from ..api.v1alpha1 import LLMBackend, PlanStatus
from ..model_fetch import FetchError, inspect_dir, read_checkpoint
from ..planning.cli import (
    InputError,
    _load_yaml_docs,
    load_backend,
    node_dicts_from_docs,
    nodes_from_cluster,
    positive_count,
)
from ..planning.cli import run as run_plan
from ..planning.inventory import GPUNode, parse_node
from ..render.servingpod import config_map_files
from .conditions import AVAILABLE, DEGRADED, PLANNED
from .decide import OPTIONAL_APIS, decide
from .passdata import Observed

PREVIEW_UID = "00000000-0000-0000-0000-000000000000"  # the API server assigns the real one
DEFAULT_APIS = frozenset({"LeaderWorkerSet", "ScaledObject"})
_MAX_PASSES = 3  # as the reconciler: one pass, then one more with the children it had to look up


@dataclasses.dataclass
class Preview:
    fits: bool
    explanation: str
    plan: PlanStatus | None
    objects: list[dict[str, Any]]


def preview(backend: LLMBackend, nodes: list[GPUNode], apis: frozenset[str] = DEFAULT_APIS) -> Preview:
    """The plan and objects the reconciler's first pass applies for this CR on these nodes, with these optional APIs
    served (``OPTIONAL_APIS`` names) and no child existing yet."""
    obj = backend.model_dump(by_alias=True, exclude_none=True, mode="json")
    obj.pop("status", None)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("name", "llmbackend")
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", PREVIEW_UID)
    meta.setdefault("generation", 1)
    children: dict[tuple[str, str], dict[str, Any] | None] = {}
    for _ in range(_MAX_PASSES):
        decision = decide(Observed(obj=obj, nodes=nodes, apis=apis, children=children))
        if not decision.look_up:
            break
        children.update({key: None for key in decision.look_up})  # nothing exists before the first pass
    conditions = decision.conditions
    plan = decision.status.plan
    planned = conditions.get(PLANNED) or {}
    if planned.get("reason") in (cond.INVALID_SPEC, cond.UNKNOWN_PRESET, cond.SOURCE_REQUIRED):
        raise ValueError(planned.get("message", ""))  # bad input, not a cluster that lacks room
    if not conditions.is_true(PLANNED):
        return Preview(False, planned.get("message", ""), None, [])
    if not decision.apply:  # planned but not served here, e.g. a multi-node plan without LeaderWorkerSet
        degraded = conditions.get(DEGRADED) or conditions.get(AVAILABLE) or {}
        return Preview(False, f"{degraded.get('reason', '')}: {degraded.get('message', '')}", plan, [])
    return Preview(True, plan.explanation if plan is not None else "", plan, decision.apply)


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


def with_architecture(backend: LLMBackend, checkpoint: str | None, env: dict[str, str] | None = None) -> LLMBackend:
    """The backend with spec.model.architecture read from `checkpoint` (a local checkpoint directory) or from its
    hf:// / s3:// source, when the spec has neither an architecture nor a catalog preset (as the operator does)."""
    model = backend.spec.model
    if model.architecture is not None or (model.preset is not None and not checkpoint):
        return backend  # an unknown preset stays an UnknownPreset error
    if checkpoint:
        found = inspect_dir(Path(checkpoint))
        if "architectureError" in found:
            raise InputError(f"--checkpoint {checkpoint}: {found['architectureError']}")
        architecture = found["architecture"]
    elif model.source and model.source.uri:
        try:
            info = read_checkpoint(model.source.uri, endpoint=model.source.endpoint, env=env)
            architecture = architecture_from_config(
                info.config, info.index, None if info.index else info.safetensors_bytes or None).dump()
        except FetchError as exc:
            raise InputError(f"cannot read the config.json of {model.source.uri}: {exc}; offline, pass --checkpoint "
                             "DIR (a directory holding the checkpoint's config.json)") from exc
        except CheckpointError as exc:
            raise InputError(f"{model.source.uri}: {exc}") from exc
    else:
        raise InputError("spec.model has neither preset nor architecture and its source is not a URI: pass "
                         "--checkpoint DIR (a directory holding the checkpoint's config.json), set spec.model.preset "
                         f"(`llmbackend presets`: {len(PRESETS)} models) or spec.model.architecture")
    doc = backend.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["model"]["architecture"] = architecture
    doc["spec"]["model"].pop("preset", None)  # the checkpoint's own shape wins over the catalog's
    return LLMBackend.model_validate(doc)


def load_with_architecture(args: argparse.Namespace) -> LLMBackend:
    return with_architecture(load_backend(args.filename), getattr(args, "checkpoint", None))


def run(args: argparse.Namespace) -> int:
    try:
        backend = load_with_architecture(args)
        raw = node_dicts_from_docs(_load_yaml_docs(args.nodes)) if args.nodes else nodes_from_cluster()
        nodes = [n for n in (parse_node(d) for d in raw) if n is not None]
        apis = DEFAULT_APIS | set(args.api or []) | ({"PrometheusRule"} if args.prometheus_rules else set())
        result = preview(backend, nodes, frozenset(apis))
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
    parser.add_argument("--api", action="append", choices=sorted(OPTIONAL_APIS), metavar="KIND",
                        help=f"an optional API the cluster serves, besides {', '.join(sorted(DEFAULT_APIS))} "
                             f"(repeatable; one of {', '.join(sorted(OPTIONAL_APIS))})")
    parser.add_argument("--prometheus-rules", action="store_true",
                        help="the same as --api PrometheusRule (mode hpa/keda also own their recording rule)")
    parser.add_argument("--checkpoint", metavar="DIR", help=CHECKPOINT_HELP)
    parser.set_defaults(func=run)

    plan = subparsers.add_parser(
        "plan", help="plan tensor/pipeline parallelism for an LLMBackend",
        description=run_plan.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plan.add_argument("-f", "--filename", required=True, help="LLMBackend manifest (YAML)")
    plan.add_argument("--nodes", help="Nodes YAML (NodeList or multi-document); default: the current cluster")
    plan.add_argument("-o", "--output", choices=["json", "text"], default="json")
    plan.add_argument("--checkpoint", metavar="DIR", help=CHECKPOINT_HELP)
    plan.add_argument("--isl", type=positive_count, help="input tokens per request for the estimates (default maxInputLen)")
    plan.add_argument("--osl", type=positive_count,
                      help="output tokens per request for the estimates (default maxSeqLen - maxInputLen)")
    plan.add_argument("--concurrency", type=positive_count,
                      help="requests in flight for the estimates (default: as many as maxBatchSize and the KV cache allow)")
    plan.set_defaults(func=lambda args: _plan(args))


CHECKPOINT_HELP = ("a local checkpoint directory (config.json, optional model.safetensors.index.json) to read the "
                   "architecture from instead of the source (offline, or a pvc source)")


def _plan(args: argparse.Namespace) -> int:
    try:
        backend = load_with_architecture(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return run_plan(args, backend)
