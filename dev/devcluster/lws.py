"""Build the real LeaderWorkerSet controller manager (sigs.k8s.io/lws) from the Go module proxy, once,
into the same cache as the control plane, and lay out what the tests need to run it next to it:
its CRD and webhook configurations from the module's own config/.

The module in e2e/cluster/lws pins the version; the cache directory is keyed by a hash of its
go.mod/go.sum/tools.go, so a version bump rebuilds and an unchanged module reuses the binary.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from .build import REPO_ROOT, BuildError, cache_root

LWS_MODULE_DIR = REPO_ROOT / "e2e" / "cluster" / "lws"
PACKAGE = "sigs.k8s.io/lws/cmd"
BINARY = "lws-controller-manager"
CRD_FILE = "leaderworkerset-crd.yaml"
WEBHOOKS_FILE = "webhooks.yaml"
# Paths inside the lws module.
_MODULE_CRD = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
_MODULE_WEBHOOKS = "config/webhook/manifests.yaml"


def lws_version() -> str:
    for line in (LWS_MODULE_DIR / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "sigs.k8s.io/lws":
            return parts[-1]
    return "?"


def lws_dir() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "tools.go"):
        digest.update((LWS_MODULE_DIR / name).read_bytes())
    return cache_root() / "bin" / f"lws-{lws_version()}-{digest.hexdigest()[:12]}"


def _present(directory: Path) -> bool:
    return os.access(directory / BINARY, os.X_OK) and all((directory / f).exists() for f in (CRD_FILE, WEBHOOKS_FILE))


def ensure_lws(log=print) -> Path:
    """Return the directory holding the controller binary, its CRD and webhook manifests; build once."""
    directory = lws_dir()
    if _present(directory):
        return directory
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain ('go') is not on PATH: it is needed once to build the LeaderWorkerSet "
                         "controller from the Go module proxy. Install Go >= 1.25 and retry.")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-lws-", dir=directory.parent))
    log(f"building the LeaderWorkerSet controller {lws_version()} into {directory} (first time only) ...")
    started = time.monotonic()
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    cmd = [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(staging / BINARY), PACKAGE]
    proc = subprocess.run(cmd, cwd=LWS_MODULE_DIR, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BuildError(f"go build failed (exit {proc.returncode}) in {LWS_MODULE_DIR}:\n{tail}")
    found = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/lws"], cwd=LWS_MODULE_DIR, env=env,
                           capture_output=True, text=True)
    module_dir = Path(found.stdout.strip())
    if found.returncode != 0 or not module_dir.is_dir():
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(f"cannot locate the lws module to read its CRD: {found.stderr.strip()}")
    shutil.copyfile(module_dir / _MODULE_CRD, staging / CRD_FILE)
    shutil.copyfile(module_dir / _MODULE_WEBHOOKS, staging / WEBHOOKS_FILE)
    if directory.exists():
        shutil.rmtree(directory)
    staging.rename(directory)  # atomic: a half-built cache is never used
    log(f"built the LeaderWorkerSet controller in {time.monotonic() - started:.0f}s")
    return directory


# ---------- running it against a local control plane ----------

WEBHOOK_PREFIX = "llmbackend-lws-"  # our copies of LWS's webhook configurations (cluster-scoped)
# LWS's kustomize patches narrow its pod webhooks to pods of LeaderWorkerSets; the same here.
_POD_OBJECT_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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
        webhook_port, metrics_port, health_port = _free_ports(3)
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
