"""`llmbackend hpa-rules`: the PrometheusRule and the prometheus-adapter rule that `autoscaling.mode: hpa` needs."""

from __future__ import annotations

import sys
from typing import Any

import yaml

from ..planning.cli import load_backend
from .hpa import render_adapter_rule, render_prometheus_rule
from .names import BackendRef, labels_for, metrics_model


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hpa-rules",
        help="print the PrometheusRule and the prometheus-adapter rule that `autoscaling.mode: hpa` needs",
        description="For clusters without the Prometheus Operator: load the recording rule into Prometheus and the "
                    "adapter rule into prometheus-adapter's config yourself.",
    )
    parser.add_argument("-f", "--filename", required=True, help="LLMBackend manifest (YAML)")
    parser.set_defaults(func=_print_rules)


def _print_rules(args: Any) -> int:
    try:
        backend = load_backend(args.filename)
    except Exception as exc:  # noqa: BLE001 - one clear line for any bad input
        print(f"error: {exc}", file=sys.stderr)
        return 1
    meta = backend.metadata
    ref = BackendRef(meta.get("name", "llmbackend"), meta.get("namespace", "default"), "")
    rule = render_prometheus_rule(ref.name, ref.namespace, metrics_model(ref, backend.spec), labels_for(ref),
                                  window_seconds=backend.spec.autoscaling.window_seconds)
    adapter = {"rules": [render_adapter_rule()]}
    sys.stdout.write("# PrometheusRule (or put spec.groups into a Prometheus rule file)\n")
    sys.stdout.write(yaml.safe_dump(rule, sort_keys=False))
    sys.stdout.write("---\n# prometheus-adapter config: add to its rules\n")
    sys.stdout.write(yaml.safe_dump(adapter, sort_keys=False))
    return 0
