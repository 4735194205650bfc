"""The Helm chart on the real control plane: `helm install` (the operator's pods created, scheduled and Ready under
kwok), a sample served by an operator that holds exactly the chart's RBAC (a process with the chart's
ServiceAccount token), `kubectl llmb get` as a kubectl plugin, `helm upgrade` with a value change rolling the
operator, and `helm uninstall` leaving only what docs/upgrade.md says stays. A new user who follows the README's
Quick start and then the NOTES `helm install` printed ends with two backends, the first not rewritten.

Its own control plane: the session cluster's CRD was applied without Helm, which `helm install` refuses to adopt."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, ClusterHandle, available, condition, model_cache_volume, wait_for

from devcluster import cluster as devcluster
from devcluster.build import bin_dir
from devcluster.cli import load_nodes, start_operator, topology_nodes
from devcluster.helm import helm_path

RELEASE, NAMESPACE = "llmbackend", "llmbackend-system"
CHART = REPO_ROOT / "charts" / "llmbackend"
OPERATOR = "app.kubernetes.io/name=llmbackend-operator"


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory):
    if not os.access(helm_path(), os.X_OK):
        pytest.skip("no helm: build it with `make tools` (python -m devcluster.helm)")
    c = devcluster.up(tmp_path_factory.mktemp("helm-cluster"), devcluster.Ports.free(), tied_to_parent=True)
    try:
        handle = ClusterHandle(c)
        load_nodes(handle.kube, topology_nodes("dgx-h100"))
        # The GPU Operator's RuntimeClass, which the topology reporter's pods name.
        handle.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}))
        yield handle
    finally:
        devcluster.stop(c)


def helm(handle: ClusterHandle, *args: str, tmp: Path) -> str:
    env = dict(os.environ, KUBECONFIG=str(handle.cluster.kubeconfig), HELM_CACHE_HOME=str(tmp / "cache"),
               HELM_CONFIG_HOME=str(tmp / "config"), HELM_DATA_HOME=str(tmp / "data"))
    proc = subprocess.run([str(helm_path()), *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def operator_pods(handle: ClusterHandle) -> list[dict]:
    return handle.kube.list("Pod", NAMESPACE, label_selector=OPERATOR)


def all_ready(handle: ClusterHandle, count: int, must_have_arg: str | None = None) -> list[dict] | None:
    pods = [p for p in operator_pods(handle) if not p["metadata"].get("deletionTimestamp")]
    if len(pods) != count:
        return None
    for pod in pods:
        args = pod["spec"]["containers"][0]["args"]
        if not pod["spec"].get("nodeName") or (condition(pod, "Ready") or {}).get("status") != "True":
            return None
        if must_have_arg and must_have_arg not in args:
            return None
    return pods


def service_account_kubeconfig(handle: ClusterHandle, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount: the operator then has exactly its RBAC."""
    token = handle.kubectl("create", "token", "llmbackend-operator", "-n", NAMESPACE, "--duration=1h").stdout.strip()
    config = yaml.safe_load(handle.cluster.kubeconfig.read_text())
    config["users"] = [{"name": "dev-admin", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(config))
    return path


def quick_start_commands(readme: str) -> str:
    """The README Quick start's commands that create objects (its Secret and its LLMBackend): not the clone, the
    install (this test's own), the 30-minute wait or the port-forward."""
    block = re.search(r"## Quick start\n.*?```sh\n(.*?)```", readme, re.S).group(1)
    secret = next(line for line in block.splitlines() if line.startswith("kubectl create secret"))
    backend = re.search(r"^kubectl apply -f - <<'YAML'\n.*?\nYAML$", block, re.S | re.M).group(0)
    return f"{secret}\n{backend}\n"


def notes_commands(notes: str, namespace: str, secret_there: bool) -> list[str]:
    """The first-backend commands of the NOTES `helm install` printed, for `namespace`, as a user types them: the
    sample from this checkout instead of the release tag's URL; the Secret's line skipped where the NOTES say to."""
    paragraph = notes[notes.index("A first backend"):]
    commands = re.findall(r"^  (kubectl (?:create secret|apply|llmb get) .*)$", paragraph, re.M)[:3]
    assert commands[0].startswith("kubectl create secret") and "skip the first line" in paragraph, notes
    if secret_there:
        commands = commands[1:]
    local = [re.sub(r"https://raw\.githubusercontent\.com/llmbackend/llmbackend/v[^/\s]+/(\S+)",
                    lambda m: str(REPO_ROOT / m.group(1)), c).replace("<namespace>", namespace) for c in commands]
    assert all("raw.githubusercontent" not in c and (REPO_ROOT / "manifests/samples").as_posix() in c
               for c in local if c.startswith("kubectl apply")), local
    return local


def run_as_user(script: str, env: dict[str, str]) -> str:
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{script}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_install_serve_upgrade_uninstall(own_cluster, tmp_path):
    handle = own_cluster
    helm(handle, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--wait", "--timeout", "180s",
         tmp=tmp_path)
    notes = helm(handle, "get", "notes", RELEASE, "-n", NAMESPACE, tmp=tmp_path)
    crd = handle.kube.get("CustomResourceDefinition", None, "llmbackends.llmbackend.dev")
    assert crd and {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    # The operator's pods are admitted: created from the chart's Deployment, scheduled, Ready (kwok runs no
    # containers); the topology reporter has one pod on the GPU node.
    first = wait_for(lambda: all_ready(handle, 2), timeout=60, what="2 operator pods Ready")
    assert all(p["spec"]["serviceAccountName"] == "llmbackend-operator" for p in first)
    reporters = handle.kube.list("Pod", NAMESPACE, label_selector="app.kubernetes.io/name=llmbackend-topology-reporter")
    assert [p["spec"]["nodeName"] for p in reporters] == ["dgx-h100-0"]

    # A backend served by an operator with the chart's permissions and nothing more.
    handle.kubectl("create", "namespace", "team-a")
    handle.kubectl("apply", "-f", "-", input=yaml.safe_dump(model_cache_volume("team-a")))
    operator = start_operator(handle.cluster, ["--kubeconfig", str(service_account_kubeconfig(handle, tmp_path / "sa")),
                                               "--leader-elect", "--lease-namespace", NAMESPACE], name="helm-operator")
    try:
        sample = yaml.safe_load((REPO_ROOT / "manifests/samples/llama-3.1-8b-trtllm.yaml").read_text())
        sample["metadata"]["namespace"] = "team-a"
        sample["spec"]["model"]["source"] = {"uri": "s3://models/llama-3.1-8b"}
        handle.kubectl("apply", "-f", "-", input=yaml.safe_dump(sample))
        name = sample["metadata"]["name"]
        obj = wait_for(lambda: available(handle, "team-a", name), timeout=120,
                       what=f"Available=True (operator log: {handle.cluster.log_file('helm-operator')})")
        assert obj["status"]["endpoint"]["service"] == f"{name}.team-a.svc" and obj["status"]["endpoint"]["openaiPort"] == 9000

        # `kubectl llmb get`: the real kubectl finds the plugin (kubectl-llmb, from `pip install`) on PATH.
        plugin_dir = tmp_path / "plugins"
        plugin_dir.mkdir()
        plugin = shutil.which("kubectl-llmb", path=str(Path(sys.executable).parent))
        assert plugin, "kubectl-llmb is not installed next to this Python (pip install .)"
        (plugin_dir / "kubectl-llmb").symlink_to(plugin)
        env = dict(os.environ, KUBECONFIG=str(handle.cluster.kubeconfig),
                   PATH=f"{plugin_dir}:{bin_dir()}:{os.environ['PATH']}")
        listed = subprocess.run(["kubectl", "llmb", "get", "-n", "team-a"], env=env, capture_output=True, text=True,
                                timeout=60)
        assert listed.returncode == 0, listed.stderr
        header, row = listed.stdout.splitlines()
        assert header.split()[:5] == ["NAME", "STATUS", "READY", "MODEL", "OPENAI"]
        assert row.split()[:5] == [name, "Ready", "1/1", obj["status"]["modelName"],
                                   f"http://{name}.team-a.svc:9000/v1"]

        # A new user: the README's Quick start, then the NOTES' first backend in the same namespace (the current
        # context's, default) and in another one. Two backends where they met, the Quick start's not rewritten.
        run_as_user(quick_start_commands((REPO_ROOT / "README.md").read_text()), env)
        readme_backend = handle.kube.get("LLMBackend", "default", "llama-3-1-8b")
        handle.kubectl("create", "namespace", "team-b")
        for namespace, secret_there in (("default", True), ("team-b", False)):
            listed = run_as_user("\n".join(notes_commands(notes, namespace, secret_there)), env)
        backends = {(b["metadata"]["namespace"], b["metadata"]["name"]): b
                    for b in handle.kube.list("LLMBackend") if b["metadata"]["namespace"] != "team-a"}
        assert sorted(backends) == [("default", "llama-3-1-8b"), ("default", "llama-3-1-8b-hf"),
                                    ("team-b", "llama-3-1-8b-hf")], sorted(backends)
        kept = backends[("default", "llama-3-1-8b")]
        assert (kept["metadata"]["uid"], kept["metadata"]["generation"], kept["spec"]) == (
            readme_backend["metadata"]["uid"], 1, readme_backend["spec"]), "the Quick start's backend was rewritten"
        assert kept["spec"]["model"]["preset"] == "llama-3.1-8b"
        table = listed[listed.index("NAMESPACE "):].splitlines()[1:]  # after what the create and apply printed
        assert sorted(tuple(row.split()[:2]) for row in table if not row.startswith("team-a ")) == sorted(backends), \
            f"`kubectl llmb get -A` as the NOTES say:\n{listed}"
        # READY as kubectl get llmb prints it, for the backends not planned yet (0/1, not 0/0), and --help lists get.
        header = listed[listed.index("NAMESPACE "):].splitlines()[0]
        at, to = header.index("READY"), header.index("MODEL")  # columns are padded: STATUS may be two words
        plugin_ready = {tuple(row.split()[:2]): row[at:to].strip() for row in table}
        columns = handle.kubectl("get", "llmb", "-A", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,"
                                 "READY:.status.ready", "--no-headers").stdout.splitlines()
        assert {(ns, n): ready for ns, n, ready in (c.split() for c in columns)} == plugin_ready, (columns, listed)
        for field in ("spec.planning", "spec.scheduling", "spec.autoscaling.minReplicas"):
            explained = run_as_user(f"kubectl explain llmbackend.{field}", env)
            description = explained.split("DESCRIPTION:")[1].split("FIELDS:")[0].strip()
            assert description and "<empty>" not in description, f"kubectl explain llmbackend.{field}:\n{explained}"
        usage = run_as_user("kubectl llmb --help", env)
        assert usage.startswith("usage: kubectl llmb {get,") and "\n  get " in usage, usage
        for namespace, backend in backends:
            handle.kubectl("delete", "llmb", backend, "-n", namespace, "--wait=true", "--timeout=60s")
    finally:
        operator.terminate()
        operator.wait(timeout=30)

    # A value change rolls the operator: new pods with --verbose replace the old ones.
    helm(handle, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--set", "operator.logLevel=debug", "--wait",
         "--timeout", "180s", tmp=tmp_path)
    rolled = wait_for(lambda: all_ready(handle, 2, must_have_arg="--verbose"), timeout=120,
                      what="the operator rolled to --verbose")
    assert not {p["metadata"]["uid"] for p in rolled} & {p["metadata"]["uid"] for p in first}
    assert "Upgrade complete" in helm(handle, "history", RELEASE, "-n", NAMESPACE, tmp=tmp_path)

    # What docs/upgrade.md says uninstall removes: the three policies it names and the launcher ClusterRole, which
    # the backends' launcher RoleBindings go on naming.
    installed = handle.kubectl("get", "validatingadmissionpolicies", "-o", "name").stdout.split()
    assert {f"validatingadmissionpolicy.admissionregistration.k8s.io/llmbackend-{policy}" for policy in (
        "tenant-references", "launcher-binding", "launcher-exec")} <= set(installed), installed
    handle.kubectl("get", "clusterrole", "llmbackend-launcher")  # fails when it is not there
    helm(handle, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "180s", tmp=tmp_path)
    wait_for(lambda: not operator_pods(handle), timeout=60, what="the operator's pods gone")
    # What docs/upgrade.md says stays: the CRD (helm.sh/resource-policy: keep) and with it every LLMBackend and
    # what it serves; the namespace Helm created and the leader Lease in it. Nothing else of the chart.
    assert handle.kube.get("CustomResourceDefinition", None, "llmbackends.llmbackend.dev")
    assert available(handle, "team-a", name) and handle.kube.get("Deployment", "team-a", name)
    left = handle.kubectl("get", "all,serviceaccounts,configmaps,secrets,roles,rolebindings,leases", "-n", NAMESPACE,
                          "-o", "name").stdout.split()
    assert sorted(left) == ["configmap/kube-root-ca.crt", "lease.coordination.k8s.io/llmbackend-operator",
                            "serviceaccount/default"], left
    cluster_wide = handle.kubectl("get", "clusterroles,clusterrolebindings", "-o", "name").stdout.split()
    assert not [n for n in cluster_wide if "llmbackend" in n], cluster_wide
    policies = handle.kubectl("get", "validatingadmissionpolicies,validatingadmissionpolicybindings",
                              "-o", "name").stdout.split()
    assert not [n for n in policies if "llmbackend" in n], f"docs/upgrade.md: the admission policies go: {policies}"

    # Removing everything, in the order docs/upgrade.md gives: the backends first (the garbage collector deletes
    # what they own while it can still resolve their kind), then the CRD.
    handle.kubectl("delete", "llmbackends", "--all", "-n", "team-a", "--wait=true", "--timeout=60s")
    wait_for(lambda: handle.kube.get("Deployment", "team-a", name) is None, timeout=90,
             what="the backend's Deployment garbage-collected")
    handle.kubectl("delete", "crd", "llmbackends.llmbackend.dev", "--wait=true", "--timeout=60s")
    assert handle.kube.get("CustomResourceDefinition", None, "llmbackends.llmbackend.dev") is None
