"""Build the Helm CLI (helm.sh/helm/v4) from the Go module proxy, once, into the same cache as the control plane,
for the chart tests (`helm lint`, `helm template`, install/upgrade/uninstall on the local control plane).

The module in e2e/cluster/helm pins the version; the cache directory is keyed by a hash of its go.mod/go.sum/tools.go,
so a version bump rebuilds and an unchanged module reuses the binary.
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

HELM_MODULE_DIR = REPO_ROOT / "e2e" / "cluster" / "helm"
PACKAGE = "helm.sh/helm/v4/cmd/helm"
BINARY = "helm"


def helm_version() -> str:
    for line in (HELM_MODULE_DIR / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "helm.sh/helm/v4":
            return parts[-1]
    return "?"


def helm_dir() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "tools.go"):
        digest.update((HELM_MODULE_DIR / name).read_bytes())
    return cache_root() / "bin" / f"helm-{helm_version()}-{digest.hexdigest()[:12]}"


def helm_path() -> Path:
    """Where the binary is (or will be) without building it: tests skip when it is absent."""
    return helm_dir() / BINARY


def ensure_helm(log=print) -> Path:
    """Return the path of the helm binary; build it once."""
    binary = helm_path()
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain ('go') is not on PATH: it is needed once to build Helm from the Go module "
                         "proxy. Install Go >= 1.26 and retry.")
    directory = binary.parent
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-helm-", dir=directory.parent))
    log(f"building Helm {helm_version()} into {directory} (first time only) ...")
    started = time.monotonic()
    # Helm's release build stamps its version the same way (internal/version.version); `helm version` shows it.
    stamp = f"-X helm.sh/helm/v4/internal/version.version={helm_version()}"
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    cmd = [go, "build", "-trimpath", f"-ldflags=-s -w {stamp}", "-o", str(staging / BINARY), PACKAGE]
    proc = subprocess.run(cmd, cwd=HELM_MODULE_DIR, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BuildError(f"go build failed (exit {proc.returncode}) in {HELM_MODULE_DIR}:\n{tail}")
    if directory.exists():
        shutil.rmtree(directory)
    staging.rename(directory)  # atomic: a half-built cache is never used
    log(f"built Helm in {time.monotonic() - started:.0f}s")
    return binary


if __name__ == "__main__":  # pragma: no cover
    try:
        print(ensure_helm())
    except BuildError as exc:
        sys.exit(f"error: {exc}")
