"""Bad setup of the local control plane gets a clear message, never a hang."""

from __future__ import annotations

import socket

import pytest

from devcluster import build, cluster


def test_port_already_taken_is_named(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = cluster.Ports.free()
        ports.apiserver = taken.getsockname()[1]
        with pytest.raises(cluster.ClusterError, match=rf"apiserver={ports.apiserver}.*already in use|already in use.*apiserver={ports.apiserver}"):
            cluster.up(tmp_path, ports, log=lambda *a: None)


def test_a_second_dev_cluster_gets_free_ports_and_says_which(monkeypatch):
    # The usual ports stand in as ports free now: the real ones may be a demo's that a test beside this one (make test
    # runs files side by side) starts or stops while this runs.
    monkeypatch.setattr(cluster.Ports.__init__, "__defaults__", tuple(vars(cluster.Ports.free()).values()))
    usual = cluster.Ports()
    told: list[str] = []
    taken = socket.socket()
    taken.bind(("127.0.0.1", usual.apiserver))
    taken.listen()
    try:
        chosen = cluster._default_or_free_ports(told.append)
    finally:
        taken.close()
    assert chosen.apiserver != usual.apiserver
    assert len(set(vars(chosen).values())) == 6
    assert told and f"apiserver={usual.apiserver}" in told[0] and f"apiserver={chosen.apiserver}" in told[0]


def test_a_lone_dev_cluster_keeps_the_usual_ports(monkeypatch):
    monkeypatch.setattr(cluster, "_port_taken", lambda port: False)
    told: list[str] = []
    assert cluster._default_or_free_ports(told.append) == cluster.Ports()
    assert told == []


def test_missing_go_toolchain_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMB_CACHE_DIR", str(tmp_path))  # no cached binaries there
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match="Go toolchain"):
        build.ensure_binaries(log=lambda *a: None)


def test_component_that_exits_shows_its_log_tail(tmp_path):
    c = cluster.Cluster(tmp_path)
    (tmp_path / "logs").mkdir()
    component = cluster.Component("broken", ["sh", "-c", "echo 'flag provided but not defined: -x'; exit 3"],
                                  "http://127.0.0.1:9/healthz")
    c.components = [component]
    with pytest.raises(cluster.ClusterError, match=r"broken exited with code 3(.|\n)*flag provided but not defined"):
        cluster._start(c, component)


def test_component_that_never_gets_ready_times_out_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "READY_TIMEOUT_S", 1.5)
    c = cluster.Cluster(tmp_path)
    (tmp_path / "logs").mkdir()
    component = cluster.Component("sleepy", ["sh", "-c", "echo waiting for etcd; sleep 30"], "http://127.0.0.1:9/healthz")
    c.components = [component]
    with pytest.raises(cluster.ClusterError, match=r"sleepy did not become ready within 1.5s(.|\n)*waiting for etcd"):
        cluster._start(c, component)
    cluster.stop(c)


def test_go_output_names():
    assert build.go_output_name("go.etcd.io/etcd/server/v3") == "server"
    assert build.go_output_name("k8s.io/kubernetes/cmd/kube-apiserver") == "kube-apiserver"


def _tiny_module(root, main: str):
    root.mkdir()
    (root / "go.mod").write_text("module example.com/tiny\n\ngo 1.22\n")
    (root / "main.go").write_text(main)
    return root


@pytest.mark.skipif(build.shutil.which("go") is None, reason="needs the Go toolchain")
def test_go_build_into_leaves_no_half_built_cache(tmp_path):
    """The one build step of the control plane, LWS and Helm: a failed build or a failed finishing step leaves
    neither the cache directory nor its staging directory; a good one lands whole."""
    go = build.find_go("a test module")
    quiet = lambda *a: None  # noqa: E731
    target = tmp_path / "cache" / "tiny-v0"
    broken = _tiny_module(tmp_path / "broken", "package main\nfunc main() { undefined() }\n")
    with pytest.raises(build.BuildError, match=r"go build failed(.|\n)*undefined"):
        build.go_build_into(target, broken, go, ["."], "tiny", output="tiny", log=quiet)
    assert list((tmp_path / "cache").iterdir()) == []

    good = _tiny_module(tmp_path / "good", "package main\nfunc main() {}\n")

    def failing_finish(staging):
        assert (staging / "tiny").exists()
        raise build.BuildError("the module has no CRD")

    with pytest.raises(build.BuildError, match="no CRD"):
        build.go_build_into(target, good, go, ["."], "tiny", output="tiny", finish=failing_finish, log=quiet)
    assert list((tmp_path / "cache").iterdir()) == []

    build.go_build_into(target, good, go, ["."], "tiny", output="tiny",
                        finish=lambda staging: (staging / "extra.yaml").write_text("kind: X\n"), log=quiet)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["tiny-v0"]
    assert sorted(p.name for p in target.iterdir()) == ["extra.yaml", "tiny"]
