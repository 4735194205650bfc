"""Build the real LeaderWorkerSet controller manager (sigs.k8s.io/lws) from the Go module proxy, once,
into the same cache as the control plane, and lay out what the tests need to run it next to it:
its CRD and webhook configurations from the module's own config/.

The module in e2e/cluster/lws pins the version; the cache directory is keyed by a hash of its
go.mod/go.sum/tools.go, so a version bump rebuilds and an unchanged module reuses the binary.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .build import GO_BUILD_ENV, REPO_ROOT, BuildError, find_go, go_build_into, module_cache_dir, pinned_version
from .ports import free_ports

LWS_MODULE_DIR = REPO_ROOT / "e2e" / "cluster" / "lws"
PACKAGE = "sigs.k8s.io/lws/cmd"
BINARY = "lws-controller-manager"
CRD_FILE = "leaderworkerset-crd.yaml"
WEBHOOKS_FILE = "webhooks.yaml"
# Paths inside the lws module.
_MODULE_CRD = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
_MODULE_WEBHOOKS = "config/webhook/manifests.yaml"


def lws_version() -> str:
    return pinned_version(LWS_MODULE_DIR, "sigs.k8s.io/lws")


def lws_dir() -> Path:
    return module_cache_dir(LWS_MODULE_DIR, "lws", lws_version())


def _present(directory: Path) -> bool:
    return os.access(directory / BINARY, os.X_OK) and all((directory / f).exists() for f in (CRD_FILE, WEBHOOKS_FILE))


def ensure_lws(log=print) -> Path:
    """Return the directory holding the controller binary, its CRD and webhook manifests; build once."""
    directory = lws_dir()
    if _present(directory):
        return directory
    go = find_go("the LeaderWorkerSet controller", "1.25")

    def copy_manifests(staging: Path) -> None:
        found = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/lws"], cwd=LWS_MODULE_DIR,
                               env=dict(os.environ, **GO_BUILD_ENV), capture_output=True, text=True)
        module_dir = Path(found.stdout.strip())
        if found.returncode != 0 or not module_dir.is_dir():
            raise BuildError(f"cannot locate the lws module to read its CRD: {found.stderr.strip()}")
        shutil.copyfile(module_dir / _MODULE_CRD, staging / CRD_FILE)
        shutil.copyfile(module_dir / _MODULE_WEBHOOKS, staging / WEBHOOKS_FILE)

    go_build_into(directory, LWS_MODULE_DIR, go, [PACKAGE], f"the LeaderWorkerSet controller {lws_version()}",
                  output=BINARY, finish=copy_manifests, log=log)
    return directory


# ---------- running it against a local control plane ----------

WEBHOOK_PREFIX = "llmbackend-lws-"  # our copies of LWS's webhook configurations (cluster-scoped)
# LWS's kustomize patches narrow its pod webhooks to pods of LeaderWorkerSets; the same here.
_POD_OBJECT_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


def _serving_cert(directory: Path) -> bytes:
    """A self-signed serving certificate for 127.0.0.1 (the webhook server); returns the PEM (the CA bundle)."""
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=lws-webhook",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "tls.key", "-out", "tls.crt"],
        cwd=directory, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"openssl could not make the LWS webhook certificate: {proc.stderr.strip()[-300:]}")
    return (directory / "tls.crt").read_bytes()


def webhook_configurations(manifests: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """LWS's webhook configurations pointed at a webhook server on 127.0.0.1 (no Service routes here)."""
    docs = [d for d in yaml.safe_load_all(manifests) if d]
    for doc in docs:
        doc["metadata"]["name"] = WEBHOOK_PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
            if any("pods" in rule.get("resources", []) for rule in hook.get("rules", [])):
                hook["objectSelector"] = _POD_OBJECT_SELECTOR
    return docs


class LwsController:
    """The real LeaderWorkerSet controller manager as a local process against a test control plane:
    its CRD, its webhooks (served on 127.0.0.1 with a self-signed certificate, no cert rotation), no
    leader election. `stop()` removes the webhook configurations so the cluster works without it."""

    def __init__(self, kubeconfig: Path, directory: Path, kubectl: str):
        self.kubeconfig = kubeconfig
        self.directory = directory
        self.kubectl_path = kubectl
        self.proc: subprocess.Popen | None = None
        self.log_path = directory / "lws-controller.log"

    def kubectl(self, *args: str, input: str | None = None) -> str:
        proc = subprocess.run([self.kubectl_path, *args], input=input, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)))
        if proc.returncode != 0:
            raise BuildError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def start(self, timeout: float = 60) -> None:
        lws = ensure_lws()
        self.directory.mkdir(parents=True, exist_ok=True)
        webhook_port, metrics_port, health_port = free_ports(3)
        certs = self.directory / "certs"
        ca = _serving_cert(certs)
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        }
        (self.directory / "config.yaml").write_text(yaml.safe_dump(config))
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(lws / CRD_FILE))
        deadline = time.monotonic() + timeout
        while not self._api_served():  # the CRD is established once its group/version is served
            if time.monotonic() > deadline:
                raise BuildError("the LeaderWorkerSet CRD was not established in time")
            time.sleep(0.25)
        log = open(self.log_path, "ab")
        deadline = time.monotonic() + timeout
        self.proc = subprocess.Popen(
            [str(lws / BINARY), "--config", str(self.directory / "config.yaml"), "--kubeconfig", str(self.kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._serving(webhook_port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BuildError(f"the LWS controller did not start; last lines of {self.log_path}:\n"
                                 + "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:]))
            time.sleep(0.25)
        hooks = webhook_configurations((lws / WEBHOOKS_FILE).read_text(), webhook_port, ca)
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(hooks))

    def _api_served(self) -> bool:
        try:
            return '"leaderworkersets"' in self.kubectl("get", "--raw", "/apis/leaderworkerset.x-k8s.io/v1")
        except BuildError:
            return False

    @staticmethod
    def _serving(port: int) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", port)) == 0

    def stop(self) -> None:
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            name = f"{WEBHOOK_PREFIX}{kind.replace('webhookconfiguration', '')}-webhook-configuration"
            subprocess.run([self.kubectl_path, "delete", kind, name, "--ignore-not-found"], capture_output=True,
                           env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)), timeout=60)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":  # pragma: no cover
    try:
        print(ensure_lws())
    except BuildError as exc:
        sys.exit(f"error: {exc}")
