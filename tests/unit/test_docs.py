"""Docs generated from code are current (docs/troubleshooting.md, docs/presets.md), every condition reason has a
row, `llmbackend presets` prints the catalog, hints name commands that exist, and `plan`/`render` read an hf://
source's architecture from `--checkpoint DIR` (offline) or say how when the Hub cannot be reached."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from devcluster import docsgen
from llmbackend.api import conditions
from llmbackend.api.catalog import FIXTURE_HUB_REPOS, PRESET_FIXTURES, PRESETS
from llmbackend.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "tests" / "fixtures" / "checkpoints"
NODES = ROOT / "e2e" / "topologies" / "dgx-h100.yaml"


def test_generated_docs_are_current():
    stale = [str(p.relative_to(ROOT)) for p, text in docsgen.generated().items() if p.read_text() != text]
    assert not stale, f"run `make docs`: {stale}"


def test_every_reason_constant_has_a_troubleshooting_row():
    doc = (ROOT / "docs" / "troubleshooting.md").read_text()
    rows = set(re.findall(r"^\| `([A-Za-z0-9]+)` \|", doc, re.M))
    reasons = {v for k, v in vars(conditions).items() if k.isupper() and isinstance(v, str)} - set(conditions.TYPES)
    assert reasons <= rows, reasons - rows
    from llmbackend.model_fetch import REASONS
    from llmbackend.planning import planner

    assert set(REASONS.values()) <= rows
    assert {planner.INSUFFICIENT_GPU_MEMORY, planner.NO_GPU_NODES, planner.EP_INVALID} <= rows


def test_a_new_reason_appears_after_regenerating(tmp_path, monkeypatch):
    fake = tmp_path / "operator" / "llmbackend"
    for rel, _ in docsgen.REASON_SOURCES + [("api/checkpoint.py", "")]:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text((docsgen.PACKAGE / rel).read_text())
    conditions_py = fake / "api" / "conditions.py"
    conditions_py.write_text(conditions_py.read_text() + '\nBRAND_NEW = "BrandNewReason"\n"""Degraded=True: a test."""\n')
    monkeypatch.setattr(docsgen, "PACKAGE", fake)
    assert "| `BrandNewReason` | Degraded | Degraded=True: a test. |" in docsgen.troubleshooting()


def test_presets_prints_every_preset(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert {line.split()[0] for line in out.splitlines()[1:]} == set(PRESETS)
    assert "hf://meta-llama/Llama-3.1-8B-Instruct" in out
    assert main(["presets", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["llama-3.1-8b"]["numLayers"] == 32


def test_hub_repos_match_the_fixture_sources():
    table = (CHECKPOINTS / "SOURCES.md").read_text()
    listed = dict(re.findall(r"^\| ([a-z0-9.\-]+) \| ([A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+) \|", table, re.M))
    assert listed == FIXTURE_HUB_REPOS
    assert set(PRESET_FIXTURES.values()) <= set(FIXTURE_HUB_REPOS)


def test_unknown_preset_hint_names_a_command_that_exists(capsys, tmp_path):
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    from llmbackend.controller import decide

    source = Path(decide.__file__).read_text()
    for hinted in re.findall(r"`llmbackend ([a-z-]+)", source + (ROOT / "operator/llmbackend/api/catalog.py").read_text()):
        assert hinted in commands, hinted
    manifest = tmp_path / "b.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                                        "metadata": {"name": "x"}, "spec": {"model": {"preset": "llama-9"}}}))
    assert main(["plan", "-f", str(manifest), "--nodes", str(NODES)]) == 1
    assert "`llmbackend presets`" in capsys.readouterr().err


def hf_backend(tmp_path: Path, uri: str = "hf://acme/private-llama", endpoint: str | None = None) -> Path:
    source = {"uri": uri, **({"endpoint": endpoint} if endpoint else {})}
    manifest = tmp_path / "hf-sample.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                                        "metadata": {"name": "chat", "namespace": "team-a"},
                                        "spec": {"model": {"source": source}}}))
    return manifest


def test_plan_and_render_read_an_hf_source_from_a_checkpoint_directory(capsys, tmp_path):
    manifest = hf_backend(tmp_path, endpoint="http://127.0.0.1:9")  # nothing listens: --checkpoint must not read it
    checkpoint = str(CHECKPOINTS / "llama-3.1-70b")
    assert main(["plan", "-f", str(manifest), "--nodes", str(NODES), "--checkpoint", checkpoint]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] and plan["gpusPerReplica"] >= 2  # 70B bf16 does not fit one H100
    assert main(["render", "-f", str(manifest), "--nodes", str(NODES), "--checkpoint", checkpoint]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs[0]["spec"]["model"]["architecture"]["numLayers"] == 80
    assert any(d["kind"] == "Deployment" for d in docs[1:])


def test_unreachable_hub_says_to_pass_a_checkpoint(capsys, tmp_path):
    manifest = hf_backend(tmp_path, endpoint="http://127.0.0.1:9")
    assert main(["plan", "-f", str(manifest), "--nodes", str(NODES)]) == 1
    err = capsys.readouterr().err
    assert "cannot read the config.json of hf://acme/private-llama" in err and "--checkpoint DIR" in err
    assert "None" not in err


@pytest.mark.parametrize("contents, expected", [
    ({}, "no config.json"),
    ({"config.json": '{"model_type": "no-such-arch"}'}, "model_type 'no-such-arch'"),
])
def test_bad_checkpoint_directory_is_one_clear_line(capsys, tmp_path, contents, expected):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    for name, text in contents.items():
        (directory / name).write_text(text)
    assert main(["plan", "-f", str(hf_backend(tmp_path)), "--nodes", str(NODES), "--checkpoint", str(directory)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --checkpoint") and expected in err and len(err.strip().splitlines()) == 1


def test_running_without_the_image_is_documented_with_commands_that_exist():
    """docs/install.md, the chart's README and NOTES say how to build the image and how to run the operator out of
    cluster; every flag their `llmbackend run` lines use is one `llmbackend run` takes."""
    root = Path(__file__).resolve().parents[2]
    install = (root / "docs" / "install.md").read_text()
    chart_readme = (root / "charts" / "llmbackend" / "README.md").read_text()
    notes = (root / "charts" / "llmbackend" / "templates" / "NOTES.txt").read_text()
    for text in (install, chart_readme):
        assert "docker build" in text and "kind load docker-image" in text
        assert "llmbackend run --kubeconfig" in text and "operator.replicas=0" in text
    assert "Dockerfile" in notes and "llmbackend run --kubeconfig" in notes
    run = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    known = {option for action in run._actions for option in action.option_strings}
    for line in re.findall(r"llmbackend run (--[^`\n]*)", install + chart_readme):
        flags = set(re.findall(r"(--[a-z-]+)", line))
        assert flags <= known, (line, flags - known)


def test_every_chart_value_the_image_and_out_of_cluster_docs_set_is_one_the_chart_has():
    """`--set operator.replicas=0`, `topologyReporter.enabled=false`, `image.repository`, ...: a misspelt key is
    silently ignored by Helm, so the user would get operator pods after all."""
    values = yaml.safe_load((ROOT / "charts" / "llmbackend" / "values.yaml").read_text())
    texts = [(ROOT / "docs" / "install.md").read_text(), (ROOT / "charts" / "llmbackend" / "README.md").read_text()]
    keys = {key for text in texts for key in re.findall(r"--set ([\w.]+)=", text)}
    assert {"operator.replicas", "topologyReporter.enabled", "image.repository", "image.tag"} <= keys, keys
    chart = yaml.safe_load((ROOT / "charts" / "llmbackend" / "Chart.yaml").read_text())
    tags = {tag for text in texts for tag in re.findall(r"ghcr\.io/llmbackend/operator:([\w.-]+)", text)}
    assert tags == {chart["appVersion"]}, f"the image tag the docs build and load is the chart's default: {tags}"
    for key in keys:
        node = values
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"--set {key}: values.yaml has no {part!r} there"
            node = node[part]
