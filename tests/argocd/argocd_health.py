"""Argo CD's own health evaluation (util/lua + gitops-engine health) as a small binary, for the tests.

e2e/argocd-health pins argo-cd; the binary is built once from the Go module proxy into
~/.cache/llmbackend/bin/argocd-health-<argo-cd version>-<hash of the module's files>, like the control
plane (dev/devcluster/build.py), under a lock shared with the other Go builds.
`python tests/argocd/argocd_health.py` builds it (make tools) and prints its path.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE_DIR = REPO_ROOT / "e2e" / "argocd-health"
CUSTOMIZATION_DIR = REPO_ROOT / "manifests" / "argocd" / "llmbackend.dev" / "LLMBackend"
ARGOCD_CM = REPO_ROOT / "manifests" / "argocd" / "argocd-cm-patch.yaml"
GO_LOCK = os.environ.get("LLMB_GO_LOCK", "/tmp/llmb-go.lock")
BINARY = "argocd-health"


class BuildError(RuntimeError):
    pass


def cache_root() -> Path:
    base = os.environ.get("LLMB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "llmbackend")
    return Path(base)


def argocd_version() -> str:
    for line in (MODULE_DIR / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == "github.com/argoproj/argo-cd/v3":
            return parts[1]
    raise BuildError(f"{MODULE_DIR}/go.mod does not require github.com/argoproj/argo-cd/v3")


def binary_path() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((MODULE_DIR / name).read_bytes())
    return cache_root() / "bin" / f"argocd-health-argo-cd-{argocd_version()}-{digest.hexdigest()[:12]}" / BINARY


def ensure_binary(log=print) -> Path:
    """Path of the built binary, building it first (a few minutes the first time) if needed."""
    target = binary_path()
    if os.access(target, os.X_OK):
        return target
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain ('go') is not on PATH: install Go >= 1.26 to build Argo CD's health "
                         "evaluator from the Go module proxy")
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    with open(GO_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one Go build at a time; another process may have built it meanwhile
        if os.access(target, os.X_OK):
            return target
        staging = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent.parent))
        log(f"building Argo CD's health evaluator (argo-cd {argocd_version()}) into {target.parent} ...")
        started = time.monotonic()
        env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
        proc = subprocess.run([go, "build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags=-s -w", "-o", str(staging / BINARY), "."],
                              cwd=MODULE_DIR, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise BuildError(f"go build failed (exit {proc.returncode}) in {MODULE_DIR}:\n{tail}")
        if target.parent.exists():
            shutil.rmtree(target.parent)
        staging.rename(target.parent)  # atomic: a half-built binary is never used
        log(f"built in {time.monotonic() - started:.0f}s")
    return target


def run_test_cases(binary: Path, directory: Path = CUSTOMIZATION_DIR, argocd_cm: Path = ARGOCD_CM) -> list[dict[str, Any]]:
    """Every case of directory/health_test.yaml, evaluated by Argo CD's code (one dict per case)."""
    proc = subprocess.run([str(binary), "-tests", str(directory), "-argocd-cm", str(argocd_cm)],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise AssertionError(f"argocd-health exited {proc.returncode}: {proc.stderr}")
    return [json.loads(line) for line in proc.stdout.splitlines()]


def health(binary: Path, obj: dict[str, Any], argocd_cm: Path = ARGOCD_CM) -> tuple[str, str]:
    """(status, message) Argo CD's application controller computes for a live object."""
    proc = subprocess.run([str(binary), "-argocd-cm", str(argocd_cm), "-"], input=yaml.safe_dump(obj),
                          capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout.splitlines()[0]) if proc.stdout.strip() else {}
    if proc.returncode != 0 or not result.get("ok"):
        raise AssertionError(f"argocd-health exited {proc.returncode}: {result.get('error') or proc.stderr}")
    return result["controller"]["status"], result["controller"].get("message", "")


if __name__ == "__main__":  # pragma: no cover
    try:
        print(ensure_binary(log=lambda m: print(m, file=sys.stderr)))
    except BuildError as exc:
        sys.exit(f"error: {exc}")
