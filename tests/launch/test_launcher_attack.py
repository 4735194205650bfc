"""Independent attack on the multi-node launcher path below the API server (issue 42, attack 42b).

Seat: a tenant who may only create/update LLMBackends, and so controls a multi-node TensorRT-LLM leader's image,
its podTemplate (env, account, volumes), `scheduling.multiNode.launcherImage` and the backend's name; plus, for
llmb-exec, an API server (or something between) whose answers are hostile or broken. Method: written from the
code (launcher/main.go, render/multinode.py, render/scripts/leader-mpi.sh and kubexec.sh) and the docs before
reading the project's own tests of this path. The Go probes are launcher/attack_test.go (build tag `attack`, so
the project's own `go test` does not run them); each is run here and judged. The launch scripts run for real with
/bin/sh and a stand-in llmb-exec that records its argv. The rendering probes run the operator's pure renderers.

A probe that holds asserts the claim; one that breaks it asserts the safe behaviour and is a strict expected
failure whose reason starts with FINDING.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devcluster.build import GO_BUILD_ENV, LAUNCHER_DIR
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.multinode import LAUNCHER_DIR as LAUNCHER_MOUNT_DIR
from llmbackend.render.multinode import script_text
from llmbackend.render.names import BackendRef, launcher_account_name
from llmbackend.render.podtemplate import PodTemplateConflictError
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("big", "tenant", "uid-1")


# ---------- llmb-exec against a hostile server (launcher/attack_test.go) ----------


def _go_probe(name: str) -> subprocess.CompletedProcess:
    go = shutil.which("go")
    assert go, "the Go toolchain builds llmb-exec; it must be on PATH"
    env = dict(os.environ, **GO_BUILD_ENV)
    return subprocess.run([go, "test", "-tags", "attack", "-count=1", "-run", f"^{name}$", "."], cwd=LAUNCHER_DIR,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("probe", [
    # pod/namespace names with '/', '..', '?', '#', '%' stay one escaped path segment; the query is only llmb-exec's
    "TestAttackHostileNamesStayInTheirSegments",
    # a failure Status with exit code 0, 256, -256 or +0, 'success', two Status frames, {}, null, trailing junk or no
    # Status at all never yields exit 0
    "TestAttackExitCodeConfusion",
    # output then a TCP reset without a Status is 255, not 0
    "TestAttackCutStreamIsNoSuccess",
    # a 307 to another host does not carry the bearer token there
    "TestAttackRedirectDoesNotCarryTheToken",
    # Fixed (was a strict xfail): FINDING (low, robustness): after the exit Status llmb-exec kept reading until the
    # server closed, so an endpoint holding the connection open kept the launch waiting forever. It ends at a whole
    # Status now.
    "TestAttackStatusThenNoClose",
    # Fixed (was a strict xfail): FINDING (low, robustness): the Status channel was buffered without bound (64 MiB
    # streamed on it were read whole). It is bounded at 64 KiB, and a message at 1 MiB.
    "TestAttackHugeStatusIsBounded",
])
def test_llmb_exec_against_a_hostile_server(probe: str):
    """Tries: the llmb-exec probe named `probe` (docstring in launcher/attack_test.go)."""
    result = _go_probe(probe)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"--- PASS: {probe}" in result.stdout or "ok " in result.stdout


# ---------- the launch scripts with names and env a tenant controls ----------


@pytest.fixture
def recorder(tmp_path: Path) -> Path:
    """A stand-in llmb-exec: records its argv (one JSON line per call) and refuses, with a message full of shell."""
    script = tmp_path / "llmb-exec"
    script.write_text("#!/bin/sh\n"
                      f"python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \"$@\" >> {tmp_path}/calls\n"
                      "echo 'llmb-exec: ns/p: $(touch PWNED_BY_MESSAGE) `touch PWNED_BY_TICKS` (HTTP 403)' >&2\n"
                      "exit 255\n")
    script.chmod(0o755)
    return script


def _calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


HOSTILE_HOSTS = ["w-0-1;touch PWNED", "$(touch PWNED)", "`touch PWNED`", "w-0-1 -n kube-system", "w-0-1\ntouch PWNED",
                 "../../kube-system/pods/x"]


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_kubexec_passes_a_hostile_host_as_one_pod_argument(tmp_path: Path, recorder: Path, host: str):
    """Tries: shell in the host name mpirun hands to kubexec.sh (from the hostfile): it must be neither run nor
    split, and reach llmb-exec as one pod argument in the leader's own namespace and the serving container."""
    kubexec = tmp_path / "kubexec.sh"
    kubexec.write_text(script_text("kubexec.sh"))
    env = {"PATH": os.environ["PATH"], "POD_NAMESPACE": "tenant", "LLMB_EXEC": str(recorder)}
    subprocess.run(["/bin/sh", str(kubexec), host, "orted", "--arg", "x y"], cwd=tmp_path, env=env,
                   capture_output=True, text=True, timeout=30)
    assert not list(tmp_path.glob("PWNED*"))
    (call,) = _calls(tmp_path)
    assert call == ["-n", "tenant", "-c", "triton", host.split(".")[0], "--", "/bin/sh", "-c", "orted --arg x y"]


# No spaces: pod names have none, and the script word-splits its worker list on purpose.
HOSTILE_LEADER = "big-0$(touch${IFS}PWNED_BY_ADDRESS)`touch${IFS}PWNED_BY_TICK`;touch${IFS}PWNED|x"


def test_leader_script_runs_no_shell_from_names_or_refusals(tmp_path: Path, recorder: Path):
    """Tries: shell in LWS_LEADER_ADDRESS (the pod names the leader derives) and in llmb-exec's refusal message
    (the API server's words, which echo the pod name) while the leader waits for its workers and fails."""
    leader = tmp_path / "leader-mpi.sh"
    leader.write_text(script_text("leader-mpi.sh"))
    env = {"PATH": os.environ["PATH"], "POD_NAMESPACE": "tenant", "LLMB_EXEC": str(recorder),
           "LWS_LEADER_ADDRESS": f"{HOSTILE_LEADER}.big.tenant",
           "LWS_GROUP_SIZE": "2", "GPUS_PER_POD": "1", "WORLD_SIZE": "2", "HOSTFILE": str(tmp_path / "hostfile"),
           "LAUNCH_WAIT_SECONDS": "0", "LAUNCH_POLL_SECONDS": "0", "TERMINATION_LOG": str(tmp_path / "termination")}
    result = subprocess.run(["/bin/sh", str(leader), "serve"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert not list(tmp_path.glob("PWNED*"))
    assert "WorkersNotReady" in (tmp_path / "termination").read_text()
    calls = _calls(tmp_path)
    assert calls and all(call[4] == f"{HOSTILE_LEADER}-1" for call in calls)


# ---------- what the operator renders for the leader and its workers ----------


def _spec(**multi_node) -> dict:
    return {"model": {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
            "engine": {"backend": "tensorrtllm", "image": "tenant/trtllm:1"},
            "scheduling": {"multiNode": multi_node} if multi_node else {}}


def _group(spec: dict) -> tuple[dict, dict]:
    plan = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2,
                      memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
    objects = desired_objects(REF, LLMBackendSpec.model_validate(spec), plan, 1, RolloutStrategy("Recreate"))
    (lws,) = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    return template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]


def test_workers_never_hold_a_token_even_as_the_launcher_account():
    """Tries: podTemplate.serviceAccountName naming the backend's own launcher account, so that the workers (named
    `<leader>-<index>`) would carry an exec token too. The workers may run as that account, but must mount no
    token; and the leader keeps the launcher account whatever the template names."""
    spec = _spec()
    spec["serving"] = {"podTemplate": {"serviceAccountName": launcher_account_name(REF)}}
    leader, worker = _group(spec)
    assert worker.get("automountServiceAccountToken") is False
    assert not any("projected" in v or "secret" in v for v in worker["volumes"])
    spec["serving"] = {"podTemplate": {"serviceAccountName": "namespace-admin"}}
    leader, _ = _group(spec)
    assert leader["serviceAccountName"] == launcher_account_name(REF)


def test_the_tenant_s_launcher_image_runs_with_the_serving_container_s_limits():
    """Tries: `scheduling.multiNode.launcherImage`, which any tenant sets: the init container that runs it must get
    no more than the serving container (same securityContext), only the launcher volume, and a fixed command."""
    leader, worker = _group(_spec(launcherImage="tenant/anything:1"))
    (init,) = [c for c in leader["initContainers"] if c["name"] == "launcher"]
    (triton,) = [c for c in leader["containers"] if c["name"] == "triton"]
    assert init["image"] == "tenant/anything:1"
    assert init["securityContext"] == triton["securityContext"]
    assert triton["securityContext"].get("privileged") is not True
    assert [m["mountPath"] for m in init["volumeMounts"]] == [LAUNCHER_MOUNT_DIR]
    assert init["command"] == ["cp", "/opt/llmbackend/bin/llmb-exec", f"{LAUNCHER_MOUNT_DIR}/llmb-exec"]
    assert "launcher" not in {c["name"] for c in worker.get("initContainers", [])}
    assert not worker.get("serviceAccountName", "").endswith("-launcher")


@pytest.mark.parametrize("name", ["LLMB_EXEC", "KUBEXEC", "LAUNCH_CONTAINER", "POD_NAMESPACE", "HOSTFILE"])
def test_podtemplate_env_cannot_redirect_the_launcher(name: str):
    """Tries: podTemplate.env overriding what the leader script execs with (the client, the rsh agent, the target
    container, the namespace): refused as a conflict rather than silently shadowing the operator's value."""
    spec = _spec()
    spec["serving"] = {"podTemplate": {"env": [{"name": name, "value": "/tmp/evil"}]}}
    with pytest.raises(PodTemplateConflictError):
        _group(spec)
