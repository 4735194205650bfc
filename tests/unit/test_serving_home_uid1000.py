"""The serving container's rendered cache environment, used by a real process running as the serving uid (1000).

What this proves: every cache variable the pod spec sets points into the `home` emptyDir, and a uid-1000 process
with exactly that environment can create and write each cache directory when the volume has an emptyDir's
permissions (kubelet creates emptyDirs world-writable, 0777), while the Triton image's default HOME for that user
does not exist (triton-inference-server/server#7015). What it does not prove: that a given engine version reads
these variables (vLLM: VLLM_CACHE_ROOT and XDG_CACHE_HOME in vllm/envs.py; Hugging Face: HF_HOME; Triton-lang:
TRITON_CACHE_DIR) - docs/engines.md lists the sources - nor anything about a real kubelet or container runtime.
Needs root (to drop to uid 1000); skipped otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.names import BackendRef
from llmbackend.render.servingpod import SERVING_HOME, SERVING_UID
from llmbackend.render.workloads import RolloutStrategy, desired_objects

# The system interpreter: uid 1000 cannot reach one under root's home (a pyenv or venv there).
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as uid 1000")

WRITE_CACHES = r"""
import os, sys
names = sys.argv[1:]
for name in names:
    path = os.path.join(os.environ[name], "llmbackend-probe") if name != "HOME" else os.path.join(
        os.environ["HOME"], ".probe")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(name)
print("wrote", len(names), "as uid", os.getuid())
"""


def _rendered_env() -> dict[str, str]:
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": {"backend": "vllm"}})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    deployment = next(o for o in desired_objects(BackendRef("m", "default", "uid"), spec, plan, 1,
                                                 RolloutStrategy("Recreate")) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _run_as_serving_uid(env: dict[str, str], names: list[str]) -> subprocess.CompletedProcess:
    def drop() -> None:
        os.setgid(SERVING_UID)
        os.setuid(SERVING_UID)

    return subprocess.run([PYTHON, "-c", WRITE_CACHES, *names], env=env, preexec_fn=drop,  # noqa: S603
                          capture_output=True, text=True, timeout=60, cwd="/")


@pytest.fixture
def node_dir():
    """A root-owned 0755 directory that uid 1000 can traverse (pytest's tmp_path parents are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="llmb-uid1000-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_uid_1000_writes_every_cache_under_the_rendered_home(node_dir) -> None:
    volume = node_dir / "home-emptydir"
    volume.mkdir()
    os.chmod(volume, 0o777)  # as kubelet creates an emptyDir
    rendered = _rendered_env()
    cache_vars = [n for n, v in rendered.items() if v == SERVING_HOME or v.startswith(SERVING_HOME + "/")]
    assert set(cache_vars) >= {"HOME", "XDG_CACHE_HOME", "HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"}
    # the pod mounts the emptyDir at SERVING_HOME; here it is mounted at `volume`
    env = {"PATH": os.environ["PATH"], **{n: v.replace(SERVING_HOME, str(volume), 1) for n, v in rendered.items()}}
    done = _run_as_serving_uid(env, cache_vars)
    assert done.returncode == 0, done.stderr
    assert f"as uid {SERVING_UID}" in done.stdout
    for name in cache_vars:
        target = env[name]
        probe = os.path.join(target, ".probe" if name == "HOME" else "llmbackend-probe")
        assert os.stat(probe).st_uid == SERVING_UID, name


def test_without_the_rendered_env_the_image_home_is_not_writable(node_dir) -> None:
    # What the Triton image gives uid 1000: HOME=/home/triton-server, absent under a root-owned /home.
    (node_dir / "home").mkdir(mode=0o755)
    missing_home = node_dir / "home" / "triton-server"
    done = _run_as_serving_uid({"PATH": os.environ["PATH"], "HOME": str(missing_home),
                                "XDG_CACHE_HOME": str(missing_home / ".cache")}, ["XDG_CACHE_HOME"])
    assert done.returncode != 0 and "Permission denied" in done.stderr
