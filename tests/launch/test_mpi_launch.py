"""The rendered multi-node TensorRT-LLM launch, run for real: the leader script and kubexec.sh from the
rendered ConfigMap, the leader container's rendered env and argv, and Debian's Open MPI `mpirun`.

Only what needs a cluster or a GPU is a stand-in (tests/launch/standins/): `llmb-exec` (runs the command as a
local process "in" the named pod, or refuses as the API server does; the real client against a real API server is
tests/e2e/test_launcher_admission.py),
`trtllm-llmapi-launch` (rank 0 runs the server once every rank registered) and `tritonserver`
(answers /v2/health/ready). Every group runs on this machine, so every "pod" is local.
"""

from __future__ import annotations

import json
import os
import shutil
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
pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="Open MPI's mpirun is not installed: `make openmpi` installs Debian's openmpi-bin (as root)",
)


def _render(tp: int, pp: int, nodes: int, ep: int | None = None):
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
        "scheduling": {"multiNode": {"startupTimeoutSeconds": 120}},
    })
    plan = PlanStatus(tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep, gpus_per_replica=tp * pp,
                      nodes_per_replica=nodes, memory_per_gpu_bytes=1)
    objects = desired_objects(BackendRef("big", "serving", "uid"), spec, plan, 1, RolloutStrategy("Recreate"))
    by_kind = {o["kind"]: o for o in objects}
    leader = by_kind["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    return by_kind["ConfigMap"], leader


class Group:
    """One LWS group on this machine: the rendered leader process and a directory that is its "cluster"."""

    def __init__(self, tmp: Path, tp: int, pp: int, nodes: int, wait_seconds: int = 120):
        self.dir = tmp
        self.nodes = nodes
        for sub in ("pods", "ranks", "noexec", "launch"):
            (tmp / sub).mkdir(parents=True)
        config_map, self.container = _render(tp, pp, nodes)
        for key, text in config_map["data"].items():
            if key.startswith(LAUNCH_KEY_PREFIX):
                path = tmp / "launch" / key[len(LAUNCH_KEY_PREFIX):]
                path.write_text(text)
                path.chmod(0o755)
        env = {e["name"]: e["value"] for e in self.container["env"] if "value" in e}
        env.update({
            # What the pod gets from LeaderWorkerSet and the downward API.
            "LWS_LEADER_ADDRESS": "big-0.big.serving", "LWS_GROUP_SIZE": str(nodes), "LWS_WORKER_INDEX": "0",
            "POD_NAMESPACE": "serving",
            # Paths of this machine instead of the pod's mounts.
            "LLMB_EXEC": str(STANDINS / "llmb-exec"), "KUBEXEC": str(tmp / "launch" / "kubexec.sh"),
            "HOSTFILE": str(tmp / "hostfile"), "TERMINATION_LOG": str(tmp / "termination-log"),
            "LAUNCH_WAIT_SECONDS": str(wait_seconds), "LAUNCH_POLL_SECONDS": "0.2",
            "STANDIN_DIR": str(tmp),
            "PATH": f"{STANDINS}:{os.environ['PATH']}",
            # The test runs as root here; serving pods run as uid 1000 and need neither.
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo",
        })
        self.env = env
        self.log = open(tmp / "leader.log", "w+")
        self.proc: subprocess.Popen | None = None

    def worker_pods(self) -> list[str]:
        return [f"big-0-{i}" for i in range(1, self.nodes)]

    def set_pod(self, name: str, state: str = "Running/10.0.0.9") -> None:
        (self.dir / "pods" / name).write_text(state)

    def start(self) -> None:
        command = self.container["command"]
        assert command[0] == "/bin/sh" and command[1].startswith("/launch/")
        script = self.dir / "launch" / Path(command[1]).name
        self.proc = subprocess.Popen(["/bin/sh", str(script), *self.container["args"]], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def ranks(self) -> dict[int, dict]:
        return {int(p.name): json.loads(p.read_text()) for p in (self.dir / "ranks").iterdir() if not p.name.startswith(".")}

    def ready(self) -> bool:
        return standin_ready(self.dir)

    def output(self) -> str:
        self.log.flush()
        return (self.dir / "leader.log").read_text()

    def diagnose(self) -> str:
        """What a failure message needs beyond the leader's log: which ranks registered, what was exec'd,
        and every process of the leader's session (mpirun, its daemons, the ranks)."""
        lines = [self.output(), f"registered ranks: {sorted(self.ranks())}",
                 f"serving.json: {(self.dir / 'serving.json').exists()}"]
        exec_log = self.dir / "exec.log"
        lines.append("exec.log:\n" + (exec_log.read_text()[-2000:] if exec_log.exists() else "(none)"))
        if self.proc is not None:
            ps = subprocess.run(["ps", "-s", str(self.proc.pid), "-o", "pid,ppid,stat,etime,args"],
                                capture_output=True, text=True)
            lines.append("processes of the leader's session:\n" + ps.stdout[-4000:])
        return "\n".join(lines)

    def wait_until(self, predicate, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc is not None and self.proc.poll() is not None and not predicate():
                raise AssertionError(f"leader exited {self.proc.returncode} before {what}:\n{self.diagnose()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.diagnose()}")
            time.sleep(0.1)

    def wait_exit(self, timeout: float = 180) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"leader still running after {timeout}s:\n{self.output()}") from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        for record in self.ranks().values():  # ranks started through the stand-in exec live in other sessions
            try:
                os.kill(record["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.close()


@pytest.fixture
def group_factory(tmp_path):
    groups: list[Group] = []

    def make(tp: int, pp: int, nodes: int, **kw) -> Group:
        g = Group(tmp_path / f"g{len(groups)}", tp, pp, nodes, **kw)
        groups.append(g)
        return g

    yield make
    for g in groups:
        g.stop()


@pytest.mark.parametrize("tp,pp,nodes", [(2, 2, 2), (4, 1, 2), (2, 3, 3), (1, 3, 3)])
def test_every_rank_starts_and_rank0_serves_only_once_all_are_up(group_factory, tp, pp, nodes):
    g = group_factory(tp, pp, nodes)
    g.env.update(STANDIN_SLOW_RANK=str(tp * pp - 1), STANDIN_SLOW_SECONDS="1")  # the last worker rank is late
    g.start()
    g.wait_until(lambda: "waiting for" in g.output(), "the leader to wait for its workers")
    assert not g.ranks(), "no rank may start before every worker pod runs"
    for pod in g.worker_pods():
        g.set_pod(pod)
    g.wait_until(g.ready, "rank 0 to serve")

    ranks = g.ranks()
    world = tp * pp
    per_pod = world // nodes
    assert sorted(ranks) == list(range(world)) and all(r["size"] == world for r in ranks.values())
    expected_pods = ["leader"] * per_pod + [p for p in g.worker_pods() for _ in range(per_pod)]
    assert [ranks[r]["pod"] for r in range(world)] == expected_pods, "one rank per GPU, the leader's first"
    serving = json.loads((g.dir / "serving.json").read_text())
    assert serving["started"] >= max(r["registered"] for r in ranks.values()), "served before every rank was up"
    # the leader serves the rendered repository and keeps the rendered exit timeout (drain bound) after SIGTERM
    assert "--model-repository=/model-repository" in serving["argv"], serving
    assert any(a.startswith("--exit-timeout-secs=") for a in serving["argv"]), serving
    hostfile = (g.dir / "hostfile").read_text().splitlines()
    assert [line.split()[0] for line in hostfile[1:]] == g.worker_pods()
    assert all(line.endswith(f"slots={per_pod}") for line in hostfile)
    execs = (g.dir / "exec.log").read_text().splitlines()
    assert {line.split()[0] for line in execs} == set(g.worker_pods()), "ranks reach every worker through exec"


def test_a_lost_rank_fails_the_group_visibly(group_factory):
    g = group_factory(2, 2, 2)
    g.set_pod("big-0-1")
    g.start()
    g.wait_until(g.ready, "rank 0 to serve")
    victim = g.ranks()[3]
    assert victim["pod"] == "big-0-1"
    os.kill(victim["pid"], signal.SIGKILL)  # a worker rank dies (its GPU fell off, its pod was evicted, ...)

    assert g.wait_exit() != 0, "the leader container must fail so that LeaderWorkerSet recreates the group"
    message = (g.dir / "termination-log").read_text()
    assert message.startswith("RankLost:"), message
    assert "RankLost" in g.output() and not g.ready(), "rank 0 stopped serving with the group"
    for record in g.ranks().values():
        assert not Path(f"/proc/{record['pid']}").exists() or _zombie(record["pid"]), f"rank {record['rank']} left running"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_worker_that_never_runs_fails_the_leader_with_a_reason(group_factory):
    g = group_factory(2, 3, 3, wait_seconds=2)
    g.set_pod("big-0-1")
    g.set_pod("big-0-2", "Pending/")
    g.start()
    assert g.wait_exit() == 1
    message = (g.dir / "termination-log").read_text()
    assert message.startswith("WorkersNotReady:") and "big-0-2(pod big-0-2 does not have a host assigned (HTTP 400))" in message and "big-0-1" not in message, message
    assert not g.ranks() and not (g.dir / "hostfile").exists(), "mpirun must not start on a partial group"


def test_a_worker_that_refuses_exec_is_not_ready(group_factory):
    g = group_factory(2, 1, 2, wait_seconds=2)
    g.set_pod("big-0-1")
    (g.dir / "noexec" / "big-0-1").touch()  # e.g. the Role does not cover it yet
    g.start()
    assert g.wait_exit() == 1
    assert "big-0-1(pods \"big-0-1\" is forbidden" in (g.dir / "termination-log").read_text()
