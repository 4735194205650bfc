"""`llmbackend render`: the plan and every object the operator would create, from the controller's own functions."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmbackend.cli import main
from llmbackend.render.triton import render_model_repository
from llmbackend.render.workloads import config_map_files

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
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment", "Service"]
    config_map = objects[0]
    spec = yaml.safe_load(SAMPLE.read_text())["spec"]
    from llmbackend.api.v1alpha1 import LLMBackendSpec

    expected = render_model_repository(LLMBackendSpec.model_validate(spec), "llama-3.1-8b",
                                       plan["tensorParallel"], plan["pipelineParallel"])
    assert config_map_files(config_map) == expected, "the model repository is the renderer's, unchanged"
    deployment = objects[1]
    gpus = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert int(gpus) == plan["gpusPerReplica"]


def test_directory_output_has_objects_plan_and_model_repository(capsys, tmp_path: Path) -> None:
    code, _, err = _render(capsys, "-o", str(tmp_path / "out"))
    assert code == 0, err
    out = tmp_path / "out"
    assert yaml.safe_load((out / "plan.yaml").read_text())["status"]["plan"]
    kinds = sorted(p.name.split("-")[0] for p in (out / "objects").iterdir())
    assert kinds == ["configmap", "deployment", "service"]
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
