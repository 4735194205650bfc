"""Real processes for the OpenAI tests: tritonserver (nvidia-pytriton's binary) serving a model repository
from disk, and the operator's OpenAI frontend as the serving pod runs it (the file alone, `python3 FILE`).
Everything binds to 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
from harness import _stop, free_port, wait_http  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FRONTEND = ROOT / "operator" / "llmbackend" / "serving" / "openai_frontend.py"


@contextlib.contextmanager
def run_tritonserver(repository: str | os.PathLike, model: str, timeout_s: float = 120) -> Iterator[tuple[str, str]]:
    """Serve `repository` with the tritonserver bundled in nvidia-pytriton; yields (HTTP base URL, metrics URL)."""
    import pytriton

    pkg = Path(pytriton.__file__).parent / "tritonserver"
    tmp = Path(tempfile.mkdtemp(prefix="triton-openai-"))
    backends = tmp / "backends" / "python"
    backends.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy(pkg / "backends" / "python" / name, backends / name)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    shutil.copy(pkg / "python_backend_stubs" / version / "triton_python_backend_stub", backends)
    http, grpc, metrics = free_port(), free_port(), free_port()
    env = dict(os.environ)
    libs = str(Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libs, env.get("LD_LIBRARY_PATH")) if p)
    env["PATH"] = os.pathsep.join((sysconfig.get_path("scripts"), env.get("PATH", "")))  # the stub runs this venv's python3
    log = open(tmp / "triton.log", "wb")
    proc = subprocess.Popen(
        [str(pkg / "bin" / "tritonserver"), f"--model-repository={repository}", f"--backend-directory={tmp / 'backends'}",
         "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc}",
         "--metrics-address=127.0.0.1", f"--metrics-port={metrics}", "--allow-gpu-metrics=false",
         "--exit-timeout-secs=2", "--log-verbose=0"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=tmp,
    )
    url = f"http://127.0.0.1:{http}"
    try:
        try:
            wait_http(f"{url}/v2/models/{model}/ready", timeout_s, proc)
        except Exception:
            log.flush()
            raise RuntimeError("tritonserver did not serve the model:\n" + (tmp / "triton.log").read_text(errors="replace")[-4000:])
        yield url, f"http://127.0.0.1:{metrics}/metrics"
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def run_frontend(triton_url: str, model: str, tokenizer_dir: str | None, metrics_url: str | None = None,
                 timeout_s: float = 30) -> Iterator[str]:
    """The OpenAI frontend as its own process; yields its base URL (.../v1)."""
    port = free_port()
    args = [sys.executable, str(FRONTEND), "--host", "127.0.0.1", "--port", str(port), "--triton-url", triton_url,
            "--model", model]
    if tokenizer_dir:
        args += ["--tokenizer-dir", str(tokenizer_dir)]
    if metrics_url:
        args += ["--metrics-url", metrics_url]
    log = tempfile.NamedTemporaryFile(prefix="openai-frontend-", suffix=".log", delete=False)
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": ""})  # proves it runs without the operator's package
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/health", timeout_s, proc)
        except Exception:
            log.flush()
            raise RuntimeError("frontend did not start:\n" + Path(log.name).read_text(errors="replace")[-3000:])
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)
