"""`llmbackend render`: the plan and every object the operator would create, from the controller's own functions."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from llmbackend.api import conditions as cond
from llmbackend.cli import main
from llmbackend.render.servingpod import config_map_files
from llmbackend.render.triton import render_model_repository

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "llama-3.1-8b-trtllm.yaml"
NODES = ROOT / "e2e" / "topologies" / "dgx-h100.yaml"


def _render(capsys, *extra: str) -> tuple[int, list[dict], str]:
    code = main(["render", "-f", str(SAMPLE), "--nodes", str(NODES), *extra])
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d] if out.strip() else []
    return code, docs, err


def test_yaml_output_holds_the_plan_and_every_object(capsys) -> None:
    code, docs, _ = _render(capsys)
    assert code == 0
    plan_doc, objects = docs[0], docs[1:]
    assert plan_doc["kind"] == "LLMBackend"
    plan = plan_doc["status"]["plan"]
    assert plan["tensorParallel"] >= 1 and plan["gpuProduct"]
    # the workload last, as applied
    assert [o["kind"] for o in objects] == ["ConfigMap", "ServiceAccount", "Service", "Deployment"]
    config_map = objects[0]
    spec = yaml.safe_load(SAMPLE.read_text())["spec"]
    from llmbackend.api.v1alpha1 import LLMBackendSpec

    expected = render_model_repository(LLMBackendSpec.model_validate(spec), "llama-3.1-8b",
                                       plan["tensorParallel"], plan["pipelineParallel"])
    assert config_map_files(config_map) == expected, "the model repository is the renderer's, unchanged"
    deployment = objects[3]
    gpus = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert int(gpus) == plan["gpusPerReplica"]


def test_directory_output_has_objects_plan_and_model_repository(capsys, tmp_path: Path) -> None:
    code, _, err = _render(capsys, "-o", str(tmp_path / "out"))
    assert code == 0, err
    out = tmp_path / "out"
    assert yaml.safe_load((out / "plan.yaml").read_text())["status"]["plan"]
    kinds = sorted(p.name.split("-")[0] for p in (out / "objects").iterdir())
    assert kinds == ["configmap", "deployment", "service", "serviceaccount"]
    repo = out / "model-repository" / "llama-3.1-8b"
    assert (repo / "config.pbtxt").is_file() and (repo / "1" / "model.yaml").is_file()
    assert (repo / "1" / "model.py").is_file()


def test_no_fit_exits_2_with_the_explanation(capsys, tmp_path: Path) -> None:
    big = yaml.safe_load(SAMPLE.read_text())
    big["spec"]["model"]["preset"] = "llama-3.1-405b"
    big["spec"]["parallelism"] = {"tensorParallel": 1}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    code = main(["render", "-f", str(path), "--nodes", str(NODES)])
    out, err = capsys.readouterr()
    assert code == 2 and not out.strip() and err.strip()


def test_bad_input_exits_1(capsys, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: llmbackend.dev/v1alpha1\nkind: LLMBackend\nspec: {model: {}}\n")
    assert main(["render", "-f", str(path), "--nodes", str(NODES)]) == 1
    assert "error:" in capsys.readouterr().err


def _applied_by_the_reconciler(manifest: dict, apis: frozenset[str]) -> list[dict]:
    """What the Reconciler applies on its first pass for this CR, on an in-memory API server with these APIs."""
    from devcluster.cli import topology_nodes
    from llmbackend.controller.decide import OPTIONAL_APIS
    from llmbackend.controller.fakekube import FakeKube
    from llmbackend.controller.kube import CREATE_ONLY_RESOURCE_VERSION
    from llmbackend.controller.reconcile import Reconciler, SharedState

    kube = FakeKube({"/".join(OPTIONAL_APIS[name]) for name in apis})
    state = SharedState()
    for node in topology_nodes("dgx-h100"):
        state.inventory.upsert(node)
    meta = manifest["metadata"]
    kube.objects[("LLMBackend", meta["namespace"], meta["name"])] = {
        **manifest, "metadata": {**meta, "resourceVersion": "1"}, "status": {}}
    sent: list[dict] = []

    def recording(send):
        def record(obj: dict) -> dict:
            if obj["kind"] != "Event":
                sent.append(copy.deepcopy(obj))
                if sent[-1]["metadata"].get("resourceVersion") == CREATE_ONLY_RESOURCE_VERSION:
                    del sent[-1]["metadata"]["resourceVersion"]  # a create's precondition, not part of the object
            return send(obj)
        return record

    kube.create, kube.apply = recording(kube.create), recording(kube.apply)  # type: ignore[method-assign]
    Reconciler(kube, state).reconcile((meta["namespace"], meta["name"]))
    return sent


@pytest.mark.parametrize("autoscaling, apis, flags", [
    (None, {"LeaderWorkerSet", "ScaledObject"}, []),
    ({"enabled": True, "mode": "hpa", "minReplicas": 2, "maxReplicas": 4},
     {"LeaderWorkerSet", "ScaledObject", "PrometheusRule"}, ["--prometheus-rules"]),
    ({"enabled": True, "mode": "keda", "minReplicas": 1, "maxReplicas": 3,
      "prometheus": {"url": "http://prometheus.monitoring:9090"}}, {"LeaderWorkerSet", "ScaledObject"}, []),
    ({"enabled": True, "minReplicas": 2, "maxReplicas": 4}, {"LeaderWorkerSet", "ScaledObject", "InferencePool"},
     ["--api", "InferencePool"]),
    ({"enabled": True, "minReplicas": 0, "maxReplicas": 2}, {"LeaderWorkerSet", "ScaledObject"}, []),
], ids=["fixed", "hpa", "keda", "operator-with-inference-pool", "scale-to-zero-with-activator"])
def test_render_is_what_the_reconciler_applies(capsys, tmp_path: Path, autoscaling, apis, flags, monkeypatch) -> None:
    from llmbackend.controller import egress
    monkeypatch.setattr(egress.settings, "prometheus_urls", ("http://prometheus.monitoring:9090",))  # the admin allows it
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"].update({"namespace": "serving", "uid": "00000000-0000-0000-0000-000000000000",
                                 "generation": 1})
    if autoscaling:
        manifest["spec"]["autoscaling"] = autoscaling
    path = tmp_path / "backend.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["render", "-f", str(path), "--nodes", str(NODES), *flags]) == 0
    rendered = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d][1:]
    applied = _applied_by_the_reconciler(manifest, frozenset(apis))
    assert rendered == applied, "render must print exactly what the operator's first pass applies"


def test_a_plan_needing_an_api_not_assumed_exits_2_with_the_reason(capsys, tmp_path: Path) -> None:
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["spec"]["model"]["preset"] = "llama-3.1-405b"
    manifest["spec"]["parallelism"] = {"tensorParallel": 8, "pipelineParallel": 2}
    path = tmp_path / "multinode.yaml"
    path.write_text(yaml.safe_dump(manifest))
    nodes = ROOT / "e2e" / "topologies" / "dgx-h100-x4.yaml"
    assert main(["render", "-f", str(path), "--nodes", str(nodes)]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert "LeaderWorkerSet" in kinds
    # the same plan where only ScaledObject is assumed: not LeaderWorkerSet -> not served, and why
    from llmbackend.controller.preview import preview
    from llmbackend.planning.cli import _load_yaml_docs, load_backend, node_dicts_from_docs
    from llmbackend.planning.inventory import parse_node

    gpu_nodes = [n for n in (parse_node(d) for d in node_dicts_from_docs(_load_yaml_docs(str(nodes)))) if n]
    result = preview(load_backend(str(path)), gpu_nodes, frozenset({"ScaledObject"}))
    assert not result.fits and not result.objects
    assert result.explanation.startswith(cond.LEADER_WORKER_SET_NOT_INSTALLED)
