"""The README's first 60 lines take a user from nothing to a query, with facts the code agrees with: the backend it
applies renders a Service of that name with the OpenAI port the client uses, and the model name it queries is the one
status.modelName reports. It keeps the two promised commands."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from llmbackend.api.v1alpha1 import LLMBackend
from llmbackend.controller.decide import Observed, decide
from llmbackend.controller.preview import preview
from llmbackend.planning.cli import _load_yaml_docs, node_dicts_from_docs
from llmbackend.planning.inventory import parse_node
from llmbackend.render import openai

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FIRST_60 = "\n".join(README.splitlines()[:60])


def test_first_60_lines_go_from_install_to_a_query():
    order = ["helm install llmbackend charts/llmbackend", "kind: LLMBackend", "kubectl port-forward",
             "from openai import OpenAI", "client.chat.completions.create("]
    positions = [FIRST_60.find(s) for s in order]
    assert -1 not in positions and positions == sorted(positions), dict(zip(order, positions))
    for prerequisite in ("Kubernetes ≥", "GPU Operator", "ReadWriteMany", "LeaderWorkerSet", "KEDA",
                         "prometheus-adapter", "Inference Extension"):
        assert prerequisite in FIRST_60, prerequisite


def test_the_quick_start_backend_has_the_service_port_and_model_name_the_client_uses():
    manifest = yaml.safe_load(re.search(r"<<'YAML'\n(.*?)\nYAML\n", FIRST_60, re.S).group(1))
    forward = re.search(r"kubectl port-forward svc/([a-z0-9-]+) (\d+):(\d+)", FIRST_60)
    base_url = re.search(r'base_url="http://localhost:(\d+)/v1"', FIRST_60).group(1)
    model = re.search(r'create\(model="([^"]+)"', FIRST_60).group(1)

    nodes = [n for n in (parse_node(d) for d in node_dicts_from_docs(
        _load_yaml_docs(str(ROOT / "e2e/topologies/dgx-h100.yaml")))) if n]
    result = preview(LLMBackend.model_validate(manifest), nodes)
    services = {o["metadata"]["name"]: o for o in result.objects if o["kind"] == "Service"}
    assert forward.group(1) == manifest["metadata"]["name"] in services
    ports = {p["name"]: p["port"] for p in services[forward.group(1)]["spec"]["ports"]}
    assert int(forward.group(3)) == ports[openai.PORT_NAME] == openai.OPENAI_PORT and forward.group(2) == base_url
    obj = LLMBackend.model_validate(manifest).model_dump(by_alias=True, exclude_none=True, mode="json")
    obj["metadata"].update(namespace="default", uid="u", generation=1)
    assert decide(Observed(obj=obj, nodes=nodes, apis=frozenset(), children={})).status.model_name == model


def test_the_two_commands_and_the_test_count_line_stay():
    assert "make demo" in README and "make test" in README
    assert re.search(r"`make test` with the binaries cached\s+takes about \d+ min: [\d,]+ tests in [\d,]+ s", README)
