"""Build the Helm CLI (helm.sh/helm/v4) from the Go module proxy, once, into the same cache as the control plane,
for the chart tests (`helm lint`, `helm template`, install/upgrade/uninstall on the local control plane).

The module in e2e/cluster/helm pins the version; the cache directory is keyed by a hash of its go.mod/go.sum/tools.go,
so a version bump rebuilds and an unchanged module reuses the binary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .build import REPO_ROOT, BuildError, find_go, go_build_into, module_cache_dir, pinned_version

HELM_MODULE_DIR = REPO_ROOT / "e2e" / "cluster" / "helm"
PACKAGE = "helm.sh/helm/v4/cmd/helm"
BINARY = "helm"


def helm_version() -> str:
    return pinned_version(HELM_MODULE_DIR, "helm.sh/helm/v4")


def helm_path() -> Path:
    """Where the binary is (or will be) without building it: tests skip when it is absent."""
    return module_cache_dir(HELM_MODULE_DIR, "helm", helm_version()) / BINARY


def ensure_helm(log=print) -> Path:
    """Return the path of the helm binary; build it once."""
    binary = helm_path()
    if os.access(binary, os.X_OK):
        return binary
    go = find_go("Helm")
    # Helm's release build stamps its version the same way (internal/version.version); `helm version` shows it.
    stamp = f"-X helm.sh/helm/v4/internal/version.version={helm_version()}"
    go_build_into(binary.parent, HELM_MODULE_DIR, go, [PACKAGE], f"Helm {helm_version()}", output=BINARY,
                  ldflags=f"-s -w {stamp}", log=log)
    return binary


if __name__ == "__main__":  # pragma: no cover
    try:
        print(ensure_helm())
    except BuildError as exc:
        sys.exit(f"error: {exc}")
