"""What every serving pod needs on a real cluster, for every sample in manifests/samples (rendered with
`llmbackend render`, the reconciler's own decide()): a writable HOME and engine caches (Triton images have no home
for uid 1000), CPU and memory requests (never BestEffort), and Triton's exit timeout on every pod that serves
(single-node servers and multi-node leaders)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_samples import CHECKPOINTS  # the fixture checkpoints of hf:// samples (offline)

from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.cli import main
from llmbackend.render import drain
from llmbackend.render.servingpod import SERVING_HOME, SERVING_UID, cache_env, serving_resources

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
NODES = ROOT / "e2e" / "topologies" / "dgx-h100-x4.yaml"
CACHE_VARIABLES = {"HOME", "XDG_CACHE_HOME", "HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"}


def _serving_pods(path: Path, tmp_path, capsys) -> tuple[dict, list[tuple[str, dict]]]:
    checkpoint = ["--checkpoint", str(CHECKPOINTS[path.name])] if path.name in CHECKPOINTS else []
    assert main(["render", "-f", str(path), "--nodes", str(NODES), "-o", "yaml", *checkpoint]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    pods = []
    for d in docs:
        if d["kind"] == "Deployment":
            pods.append(("server", d["spec"]["template"]["spec"]))
        elif d["kind"] == "LeaderWorkerSet":
            template = d["spec"]["leaderWorkerTemplate"]
            pods += [("leader", template["leaderTemplate"]["spec"]), ("worker", template["workerTemplate"]["spec"])]
    backend = next(d for d in docs if d["kind"] == "LLMBackend")
    return backend, pods


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_serving_pod_has_a_writable_home_requests_and_an_exit_timeout(path, tmp_path, capsys) -> None:
    backend, pods = _serving_pods(path, tmp_path, capsys)
    assert pods
    spec = LLMBackendSpec.model_validate(backend["spec"])
    drain_s = drain.drain_seconds(spec.engine.max_seq_len, spec.serving.drain_seconds)
    for role, pod in pods:
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert CACHE_VARIABLES <= set(env), (role, sorted(env))
        assert all(env[v].startswith(SERVING_HOME) for v in CACHE_VARIABLES)
        home = next(m for m in container["volumeMounts"] if m["mountPath"] == SERVING_HOME)
        volume = next(v for v in pod["volumes"] if v["name"] == home["name"])
        assert volume == {"name": home["name"], "emptyDir": {}}
        assert container["securityContext"]["runAsUser"] == SERVING_UID
        requests = container["resources"]["requests"]
        assert requests.get("cpu") and requests.get("memory"), f"{role}: BestEffort without CPU/memory requests"
        timeouts = [a for a in container.get("args", []) if a.startswith("--exit-timeout-secs=")]
        if role == "worker":
            assert timeouts == [], "workers run no tritonserver"
        else:
            assert timeouts == [f"--exit-timeout-secs={drain_s}"], f"{role}: {container.get('args')}"


def test_the_multinode_sample_has_a_leader_that_keeps_the_exit_timeout(tmp_path, capsys) -> None:
    _, pods = _serving_pods(ROOT / "manifests" / "samples" / "llama-3.1-405b-multinode.yaml", tmp_path, capsys)
    assert [role for role, _ in pods] == ["leader", "worker"]


def _spec(**scheduling) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "scheduling": scheduling})


@pytest.mark.parametrize("gpus, cpu, memory", [(1, "2", "18Gi"), (2, "4", "30Gi"), (8, "16", "102Gi")])
def test_default_requests_grow_with_the_gpus_and_set_no_limit(gpus, cpu, memory) -> None:
    resources = serving_resources(_spec(), gpus)
    assert resources["requests"] == {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}
    assert resources["limits"] == {"nvidia.com/gpu": str(gpus)}


def test_user_resources_are_request_and_limit() -> None:
    resources = serving_resources(_spec(resources={"cpu": "12", "memory": "200Gi"}), 2)
    assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": "2", "cpu": "12", "memory": "200Gi"}


def test_cache_env_is_all_under_home() -> None:
    env = {e["name"]: e["value"] for e in cache_env("/h")}
    assert env["HOME"] == "/h" and env["VLLM_CACHE_ROOT"] == "/h/.cache/vllm" and set(env) == CACHE_VARIABLES
