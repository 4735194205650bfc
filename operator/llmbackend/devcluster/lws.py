"""Build the real LeaderWorkerSet controller manager (sigs.k8s.io/lws) from the Go module proxy, once,
into the same cache as the control plane, and lay out what the tests need to run it next to it:
its CRD and webhook configurations from the module's own config/.

The module in e2e/cluster/lws pins the version; the cache directory is keyed by a hash of its
go.mod/go.sum/tools.go, so a version bump rebuilds and an unchanged module reuses the binary.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


if __name__ == "__main__":  # pragma: no cover
    try:
        print(ensure_lws())
    except BuildError as exc:
        sys.exit(f"error: {exc}")
