"""Build the control-plane binaries (etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok)
from the Go module proxy, once, into a cache outside the repository.

The Go module in e2e/cluster/gotools pins the versions; the cache directory is keyed by a hash of
its go.mod/go.sum, so a version bump rebuilds and an unchanged module reuses the binaries.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # dev/devcluster/build.py
GOTOOLS_DIR = REPO_ROOT / "e2e" / "cluster" / "gotools"

# binary name -> Go main package
PACKAGES = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
}


class BuildError(RuntimeError):
    pass


def cache_root() -> Path:
    base = os.environ.get("LLMB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "llmbackend"
    )
    return Path(base)


# Static binaries; go.mod is resolved through the module proxy. GOCACHE/GOMODCACHE stay at Go's defaults (outside
# the repo) so rebuilds are incremental.
GO_BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"}


def find_go(needed_for: str, min_version: str = "1.26") -> str:
    """The Go toolchain, or a BuildError that says what it is needed for."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(f"the Go toolchain ('go') is not on PATH: it is needed once to build {needed_for} from the Go "
                         f"module proxy. Install Go >= {min_version} (https://go.dev/doc/install) and retry.")
    return go


def pinned_version(module_dir: Path, module: str) -> str:
    """The version of ``module`` that ``module_dir``/go.mod requires ('?' when it does not)."""
    for line in (module_dir / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == module:
            return parts[-1]
    return "?"


def module_cache_dir(module_dir: Path, name: str, version: str,
                     files: tuple[str, ...] = ("go.mod", "go.sum", "tools.go")) -> Path:
    """The cache directory of what is built from ``module_dir``, keyed by its ``files``: a version bump (or, for our
    own code, an edit) rebuilds, an unchanged module reuses the build."""
    digest = hashlib.sha256()
    for file in files:
        digest.update((module_dir / file).read_bytes())
    return cache_root() / "bin" / f"{name}-{version}-{digest.hexdigest()[:12]}"


def go_build_into(directory: Path, module_dir: Path, go: str, packages: list[str], what: str, *,
                  output: str | None = None, ldflags: str = "-s -w", finish=None, log=print) -> None:
    """``go build`` ``packages`` in ``module_dir`` into a staging directory beside ``directory`` (as ``output``, or
    under their own names), run ``finish(staging)`` to add what else belongs there, then rename the staging
    directory to ``directory``: a half-built cache is never used."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=directory.parent))
    log(f"building {what} into {directory} (first time only; several minutes) ...")
    started = time.monotonic()
    env = dict(os.environ, **GO_BUILD_ENV)
    target = str(staging / output) if output else str(staging) + "/"
    # -s -w strips the debug information at link time; -dwarf=false spares the compiler making it (about 15 % less
    # CPU: kube-scheduler from an empty cache, 224 s instead of 262 s of user time on this 2-core machine)
    cmd = [go, "build", "-trimpath", "-gcflags=all=-dwarf=false", f"-ldflags={ldflags}", "-o", target, *packages]
    try:
        proc = subprocess.run(cmd, cwd=module_dir, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise BuildError(f"go build failed (exit {proc.returncode}) in {module_dir}:\n{tail}")
        if finish is not None:
            finish(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if directory.exists():
        shutil.rmtree(directory)
    staging.rename(directory)
    log(f"built {what} in {time.monotonic() - started:.0f}s")


def module_versions() -> dict[str, str]:
    """Pinned versions read from go.mod (for names and notes)."""
    versions = {}
    for line in (GOTOOLS_DIR / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("k8s.io/kubernetes", "sigs.k8s.io/kwok", "go.etcd.io/etcd/server/v3"):
            versions[parts[0].split("/")[1] if "etcd" not in parts[0] else "etcd"] = parts[1]
    return {"kubernetes": versions.get("kubernetes", "?"), "etcd": versions.get("etcd", "?"), "kwok": versions.get("kwok", "?")}


def ldflags() -> str:
    """Strip symbols and stamp the Kubernetes version, as the release build does (`kubectl version`, /version)."""
    version = module_versions()["kubernetes"]
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.gitVersion={version}", f"-X {package}.gitMajor={major}",
                  f"-X {package}.gitMinor={minor}", f"-X {package}.gitTreeState=clean"]
    return " ".join(flags)


def bin_dir() -> Path:
    digest = hashlib.sha256(ldflags().encode())
    for name in ("go.mod", "go.sum", "tools.go"):
        digest.update((GOTOOLS_DIR / name).read_bytes())
    v = module_versions()
    return cache_root() / "bin" / f"k8s-{v['kubernetes']}-etcd-{v['etcd']}-kwok-{v['kwok']}-{digest.hexdigest()[:12]}"


def go_output_name(package: str) -> str:
    """`go build` names a binary after the last path element, skipping a major-version suffix."""
    parts = package.split("/")
    return parts[-2] if re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]


def binaries_present(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in PACKAGES)


# kwok's own stage definitions (node initialize + lease heartbeat, pod ready/complete/delete),
# read from the kwok module the binaries were built from.
KWOK_STAGES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
]
KWOK_STAGES_FILE = "kwok-stages.yaml"


def write_kwok_stages(directory: Path, go: str) -> None:
    proc = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"], cwd=GOTOOLS_DIR, capture_output=True, text=True
    )
    module_dir = Path(proc.stdout.strip())
    if proc.returncode != 0 or not module_dir.is_dir():
        raise BuildError(f"cannot locate the kwok module to read its stages: {proc.stderr.strip()}")
    documents = [(module_dir / stage).read_text() for stage in KWOK_STAGES]
    (directory / KWOK_STAGES_FILE).write_text("\n---\n".join(documents))


def ensure_binaries(log=print) -> Path:
    """Return the directory holding all binaries, building them first if needed."""
    directory = bin_dir()
    if binaries_present(directory) and (directory / KWOK_STAGES_FILE).exists():
        return directory
    go = find_go("kube-apiserver, etcd and kwok")
    if binaries_present(directory):
        write_kwok_stages(directory, go)
        return directory

    def finish(staging: Path) -> None:
        for name, package in PACKAGES.items():
            built = staging / go_output_name(package)
            if not built.exists():
                raise BuildError(f"go build did not produce {built.name} for {package}")
            built.rename(staging / name)
        write_kwok_stages(staging, go)

    go_build_into(directory, GOTOOLS_DIR, go, list(PACKAGES.values()), "control-plane binaries", ldflags=ldflags(),
                  finish=finish, log=log)
    return directory


LAUNCHER_DIR = REPO_ROOT / "launcher"
LLMB_EXEC = "llmb-exec"


def ensure_llmb_exec(log=print) -> Path:
    """The multi-node leaders' exec client (launcher/main.go; the Dockerfile builds the same into the operator image),
    built once per edit of its sources."""
    directory = module_cache_dir(LAUNCHER_DIR, LLMB_EXEC, "dev", files=("go.mod", "go.sum", "main.go"))
    binary = directory / LLMB_EXEC
    if os.access(binary, os.X_OK):
        return binary
    go_build_into(directory, LAUNCHER_DIR, find_go(LLMB_EXEC), ["."], LLMB_EXEC, output=LLMB_EXEC, log=log)
    return binary


if __name__ == "__main__":  # pragma: no cover
    try:
        print(ensure_binaries())
    except BuildError as exc:
        sys.exit(f"error: {exc}")
