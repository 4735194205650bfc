"""llmb-exec's own tests (launcher/main_test.go: the exec protocol against a stand-in endpoint, exit codes, a cut
stream, a refusal's reason, no read of the pod), run with the Go toolchain as part of `make test`. The client against
the real API server is tests/e2e/test_launcher_admission.py."""

from __future__ import annotations

import os
import shutil
import subprocess

from devcluster.build import GO_BUILD_ENV, LAUNCHER_DIR


def test_llmb_exec_go_tests_pass():
    go = shutil.which("go")
    assert go, "the Go toolchain builds the control plane for the other tests too; it must be on PATH"
    env = dict(os.environ, **GO_BUILD_ENV)
    for command in ([go, "vet", "."], [go, "test", "-count=1", "."]):
        result = subprocess.run(command, cwd=LAUNCHER_DIR, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{' '.join(command[1:])}:\n{result.stdout}\n{result.stderr}"
