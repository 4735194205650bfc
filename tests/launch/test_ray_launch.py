"""The rendered multi-node vLLM launch, run for real as processes: leader-ray.sh and worker-ray.sh from the
rendered ConfigMap with the rendered env and argv. Ray itself (CLI and Python package) and tritonserver
are stand-ins (tests/launch/standins/), because Ray is not installed here; the scripts' waiting,
ordering and failure reporting are what runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from standin_http import standin_ready

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.multinode import LAUNCH_KEY_PREFIX
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects

STANDINS = Path(__file__).parent / "standins"


def _render(tp: int, pp: int, nodes: int):
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-70b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "engine": {"backend": "vllm"},
    })
    plan = PlanStatus(tensor_parallel=tp, pipeline_parallel=pp, gpus_per_replica=tp * pp, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=1)
    objects = {o["kind"]: o for o in desired_objects(BackendRef("v", "serving", "uid"), spec, plan, 1,
                                                     RolloutStrategy("Recreate"))}
    template = objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    return (objects["ConfigMap"], template["leaderTemplate"]["spec"]["containers"][0],
            template["workerTemplate"]["spec"]["containers"][0])


class RayGroup:
    def __init__(self, tmp: Path, tp: int, pp: int, nodes: int, wait_seconds: int = 120):
        self.dir = tmp
        self.nodes = nodes
        (tmp / "launch").mkdir(parents=True)
        config_map, self.leader, self.worker = _render(tp, pp, nodes)
        for key, text in config_map["data"].items():
            if key.startswith(LAUNCH_KEY_PREFIX):
                (tmp / "launch" / key[len(LAUNCH_KEY_PREFIX):]).write_text(text)
        self.procs: list[subprocess.Popen] = []
        self.base = {
            "LWS_LEADER_ADDRESS": "localhost", "LWS_GROUP_SIZE": str(nodes), "POD_NAMESPACE": "serving",
            "LAUNCH_WAIT_SECONDS": str(wait_seconds), "LAUNCH_POLL_SECONDS": "0.2",
            "STANDIN_DIR": str(tmp),
            "PATH": f"{STANDINS}:{os.environ['PATH']}", "PYTHONPATH": str(STANDINS / "raypkg"),
        }

    def _run(self, container: dict, name: str, extra: dict[str, str]) -> subprocess.Popen:
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env.update(self.base, TERMINATION_LOG=str(self.dir / f"{name}.termination-log"), **extra)
        script = self.dir / "launch" / Path(container["command"][1]).name
        proc = subprocess.Popen(["/bin/sh", str(script), *container["args"]], env=env, start_new_session=True,
                                stdout=open(self.dir / f"{name}.log", "w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def leader_proc(self) -> subprocess.Popen:
        return self._run(self.leader, "leader", {"LWS_WORKER_INDEX": "0"})

    def worker_proc(self, index: int) -> subprocess.Popen:
        return self._run(self.worker, f"worker{index}", {"LWS_WORKER_INDEX": str(index)})

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text()

    def ready(self) -> bool:
        return standin_ready(self.dir)

    def wait_until(self, predicate, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.log('leader')}")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        served = self.dir / "serving.json"
        if served.exists():
            try:
                os.kill(json.loads(served.read_text())["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def ray_group(tmp_path):
    groups: list[RayGroup] = []

    def make(*args, **kw) -> RayGroup:
        g = RayGroup(tmp_path / f"g{len(groups)}", *args, **kw)
        groups.append(g)
        return g

    yield make
    for g in groups:
        g.stop()


def _nodes(g: RayGroup) -> dict[str, int]:
    root = g.dir / "ray" / "nodes"
    return {p.name: int(p.read_text()) for p in root.iterdir()} if root.exists() else {}


@pytest.mark.parametrize("tp,pp,nodes", [(8, 2, 2), (4, 3, 3)])
def test_leader_serves_once_every_worker_joined_its_ray_head(ray_group, tp, pp, nodes):
    g = ray_group(tp, pp, nodes)
    g.leader_proc()
    g.wait_until(lambda: "Ray cluster: 1/" in g.log("leader"), "the leader to wait for its Ray workers")
    assert not g.ready() and not (g.dir / "serving.json").exists()
    for i in range(1, nodes):
        g.worker_proc(i)
    g.wait_until(g.ready, "the server after every worker joined")
    served = json.loads((g.dir / "serving.json").read_text())
    # the leader serves the rendered repository and keeps the rendered exit timeout (drain bound) after SIGTERM
    assert "--model-repository=/model-repository" in served["argv"], served
    assert any(a.startswith("--exit-timeout-secs=") for a in served["argv"]), served
    per_pod = tp * pp // nodes
    assert sorted(_nodes(g).values()) == [per_pod] * nodes, "every pod joined with its GPUs"
    addresses = {p.read_text().strip() for p in (g.dir / "ray").glob("address-*")}
    assert addresses == {"localhost:6379"}, "workers join $LWS_LEADER_ADDRESS on Ray's port"


def test_a_worker_that_never_joins_fails_the_leader_with_a_reason(ray_group):
    g = ray_group(8, 2, 2, wait_seconds=2)
    leader = g.leader_proc()
    assert leader.wait(timeout=60) == 1
    message = (g.dir / "leader.termination-log").read_text()
    assert message.startswith("WorkersNotReady:") and "1/2 nodes" in message, message
    assert not (g.dir / "serving.json").exists() and not (g.dir / "ray" / "head-up").exists(), "head stopped"


def test_a_worker_keeps_trying_until_the_head_listens(ray_group):
    g = ray_group(8, 2, 2)
    g.worker_proc(1)  # LeaderCreated: a worker may start before the head
    time.sleep(1)
    assert not _nodes(g)
    g.leader_proc()
    g.wait_until(g.ready, "the server once the early worker joined", timeout=90)
