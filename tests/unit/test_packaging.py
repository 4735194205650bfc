"""The operator package and its image carry the operator only: the dev cluster is a tool of this repository."""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import find_packages

from llmbackend.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def test_the_package_has_no_dev_cluster_code():
    packages = find_packages(str(REPO / "operator"))
    assert "llmbackend.controller" in packages  # the search looked at the right place
    assert not [p for p in packages if "devcluster" in p]


def test_the_image_copies_only_the_package_sources():
    copies = re.findall(r"^COPY (?!--from)(.+)$", (REPO / "Dockerfile").read_text(), re.M)
    # the package, and the sources of the leaders' exec client (launcher/, its own build stage)
    assert copies and all(src.split()[0] in ("pyproject.toml", "operator", "launcher/go.mod") for src in copies), copies
    assert all(s.startswith("launcher/") for s in next(c for c in copies if c.startswith("launcher/")).split()[:-1])


def test_the_cli_offers_operator_commands_only():
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    commands = set(subparsers.choices)
    assert {"run", "crd", "plan", "render", "hpa-rules"} <= commands
    assert not commands & {"dev-cluster", "demo"}
