"""The `llmbackend` command: the operator and its tools (run, crd, presets, plan, render, hpa-rules, topology reporter).

The local dev cluster and the demo are a tool of this repository, not of the operator: `python -m devcluster`
(dev/devcluster)."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each subcommand lives in its own module, exposing `register(subparsers)`;
# the registered parser sets `func(args) -> int`.
SUBCOMMAND_MODULES = [
    "llmbackend.api.crdgen",
    "llmbackend.api.presets_cli",
    "llmbackend.controller.run",
    "llmbackend.planning.topology_reporter",
    "llmbackend.render.cli",
    "llmbackend.controller.preview",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmbackend", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
