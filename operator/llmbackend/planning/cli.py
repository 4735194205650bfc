"""`llmbackend plan`: plan an LLMBackend manifest against a set of Nodes.

    llmbackend plan -f backend.yaml --nodes nodes.yaml -o json|text

--nodes takes a v1 NodeList (`kubectl get nodes -o yaml`) or multi-document
Nodes; without it the Nodes are listed from the current kubeconfig.
Exit codes: 0 a plan fits, 2 no plan fits (the JSON is still printed),
1 bad input (one-line message on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..api.catalog import UnknownPresetError
from ..api.v1alpha1 import LLMBackend
from .inventory import parse_node
from .planner import plan_for_spec


class InputError(Exception):
    """Bad user input: reported as one line, exit code 1."""


def _load_yaml_docs(path: str) -> list[Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(f"{path}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc


def load_backend(path: str) -> LLMBackend:
    docs = [d for d in _load_yaml_docs(path) if isinstance(d, dict)]
    docs = [d for d in docs if d.get("kind") in (None, "LLMBackend")] or docs
    if not docs:
        raise InputError(f"{path}: no LLMBackend document found")
    try:
        return LLMBackend.model_validate(docs[0])
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(f"{path}: invalid LLMBackend at {loc}: {err.get('msg')}{more}") from exc


def node_dicts_from_docs(docs: list[Any]) -> list[dict]:
    """Nodes from NodeList/List documents or plain Node documents."""
    nodes: list[dict] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if "items" in doc:  # NodeList / List
            nodes.extend(i for i in doc.get("items") or [] if isinstance(i, dict) and i.get("kind", "Node") == "Node")
        elif doc.get("kind", "Node") == "Node":
            nodes.append(doc)
    return nodes


def nodes_from_cluster() -> list[dict]:
    """One list call against the current kubeconfig (or in-cluster config)."""
    try:
        from kubernetes import client, config

        try:
            config.load_kube_config()
        except Exception:  # noqa: BLE001 - fall back to in-cluster
            config.load_incluster_config()
        api = client.ApiClient()
        items = client.CoreV1Api(api).list_node().items
        return [api.sanitize_for_serialization(n) for n in items]
    except Exception as exc:  # noqa: BLE001 - any client/config failure is an input problem here
        raise InputError(f"cannot list nodes from the cluster: {exc.__class__.__name__}: {exc}".splitlines()[0]) from exc


def run(args: argparse.Namespace, backend: LLMBackend | None = None) -> int:
    """Plan an LLMBackend manifest against a set of Nodes (`llmbackend plan`, registered with `render` in
    controller/preview.py, which reads a checkpoint's architecture first when the spec has none).

    --nodes takes a v1 NodeList (`kubectl get nodes -o yaml`) or multi-document Nodes; without it the Nodes are
    listed from the current kubeconfig. Exit codes: 0 a plan fits, 2 no plan fits (the JSON is still printed),
    1 bad input (one-line message on stderr)."""
    try:
        backend = backend or load_backend(args.filename)
        raw = node_dicts_from_docs(_load_yaml_docs(args.nodes)) if args.nodes else nodes_from_cluster()
        nodes = [n for n in (parse_node(d) for d in raw) if n is not None]
        result = plan_for_spec(backend.spec, nodes)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except UnknownPresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output == "text":
        print(result.explanation)
    else:
        print(json.dumps(result.to_json(), indent=2))
    return 0 if result.fits else 2
