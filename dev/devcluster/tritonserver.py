"""Start the real `tritonserver` binary that nvidia-pytriton ships, directly on a model repository directory.

Used by the demo and the real-Triton tests: no PyTriton API, just the stock server process serving the files the
operator renders, bound to 127.0.0.1. The Python backend is assembled in a fresh temporary directory from the
wheel's `backends/python` files plus the stub built for this interpreter's Python version; the stub runs model.py
with the `python3` first on PATH (a throwaway venv over this interpreter), so this environment's packages, plus
`extra_pythonpath` (e.g. the CPU stand-in `tensorrt_llm`), are importable by the model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import platform
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from .ports import free_ports


class TritonServerError(RuntimeError):
    """tritonserver is missing, exited, or did not become ready; the message carries the log tail."""


@dataclasses.dataclass(frozen=True)
class TritonServer:
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    pid: int

    @property
    def http_url(self) -> str:
        """host:port, as tritonclient.http expects."""
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def log_tail(self, n_lines: int = 25) -> str:
        """The server's error lines, then its last lines (the boxed status tables left out)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        lines = [ln for ln in lines if ln.strip() and not ln.startswith(("|", "+-"))]
        errors = [ln[:2000] for ln in lines if ln[:1] == "E" and ln[1:2].isdigit()]
        return "\n".join([*errors[-10:], "...", *lines[-n_lines:]])


@dataclasses.dataclass(frozen=True)
class _Dist:
    binary: Path
    python_backend: Path   # libtriton_python.so + triton_python_backend_utils.py
    stub: Path             # triton_python_backend_stub for this Python version
    libs: Path             # nvidia_pytriton.libs (the stub and server link against these)


def _find_dist() -> _Dist:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonServerError("nvidia-pytriton is not installed: pip install nvidia-pytriton (it ships tritonserver)")
    pkg = Path(next(iter(spec.submodule_search_locations)))
    dist = pkg / "tritonserver"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = _Dist(
        binary=dist / "bin" / "tritonserver",
        python_backend=dist / "backends" / "python",
        stub=dist / "python_backend_stubs" / version / "triton_python_backend_stub",
        libs=pkg.parent / "nvidia_pytriton.libs",
    )
    for path in (found.binary, found.python_backend, found.stub, found.libs):
        if not path.exists():
            raise TritonServerError(f"{path} missing from the nvidia-pytriton install (Python {version} supported?)")
    return found


def available() -> bool:
    """True when the tritonserver binary and a Python backend stub for this interpreter are installed."""
    try:
        _find_dist()
    except TritonServerError:
        return False
    return True


def _assemble_backends(dist: _Dist, into: Path) -> Path:
    backends = into / "backends"
    python = backends / "python"
    python.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(dist.python_backend / name, python / name)
    shutil.copy2(dist.stub, python / "triton_python_backend_stub")
    return backends


def _python_overlay(into: Path, extra_pythonpath: Sequence[str | os.PathLike]) -> Path:
    """A venv (pyvenv.cfg + python3 link) whose .pth puts `extra_pythonpath` first, then this environment's
    site-packages (processed with their own .pth files). Returns its bin directory."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    bin_dir = into / "bin"
    site_dir = into / "lib" / f"python{version}" / "site-packages"
    bin_dir.mkdir(parents=True)
    site_dir.mkdir(parents=True)
    (into / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {platform.python_version()}\n")
    for name in ("python3", f"python{version}", "python"):
        (bin_dir / name).symlink_to(sys.executable)
    extra = [str(Path(p).resolve()) for p in extra_pythonpath]
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    # A .pth line starting with "import" is executed (at module level, no comprehensions: exec() with separate
    # locals): the only way to prepend; plain lines are appended.
    (site_dir / "_llmbackend_overlay.pth").write_text(
        f"import site, sys; list(map(site.addsitedir, {ours!r})); sys.path[0:0] = {extra!r}\n")
    return bin_dir


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:  # noqa: S310 - loopback only
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    # The server runs in its own session (we started it so): kill what is left of its group, its Python stubs
    # included. A stub can outlive a server that exited on its own (e.g. a test sent it SIGTERM).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def run_tritonserver(
    model_repository: str | os.PathLike,
    *,
    host: str = "127.0.0.1",
    http_port: int = 0,
    grpc_port: int = 0,
    metrics_port: int = 0,
    extra_pythonpath: Sequence[str | os.PathLike] = (),
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    startup_timeout_s: float = 120.0,
    stop_grace_s: float = 15.0,
    log_path: str | os.PathLike | None = None,
) -> Iterator[TritonServer]:
    """Run tritonserver on `model_repository` until the block exits; yield once every model is ready.

    Ports 0 are replaced by free ones. Raises TritonServerError with the log tail when the server exits or is not
    ready within `startup_timeout_s`. The server, and the Python stubs it started, are stopped on exit.
    """
    if not host.startswith("127."):
        raise ValueError(f"{host}: tritonserver is bound to 127.0.0.0/8 only here")
    repo = Path(model_repository)
    if not repo.is_dir():
        raise TritonServerError(f"model repository {repo} is not a directory")
    dist = _find_dist()
    # One call for the missing ports: it holds each until all are picked, so the three are distinct.
    picked = iter(free_ports(sum(1 for p in (http_port, grpc_port, metrics_port) if not p), host))
    ports = [p or next(picked) for p in (http_port, grpc_port, metrics_port)]
    work = Path(tempfile.mkdtemp(prefix="tritonserver-"))
    log_file = Path(log_path) if log_path else work / "tritonserver.log"
    backends = _assemble_backends(dist, work)

    child_env = dict(os.environ if env is None else env)
    child_env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(dist.libs), child_env.get("LD_LIBRARY_PATH", "")) if p)
    # The stub embeds the python3 found first on PATH and ignores PYTHONPATH: put first on PATH a throwaway venv
    # over this interpreter whose site-packages adds `extra_pythonpath` and this environment's packages.
    overlay = _python_overlay(work / "python", extra_pythonpath)
    child_env["PATH"] = os.pathsep.join(p for p in (str(overlay), child_env.get("PATH", "")) if p)

    cmd = [
        str(dist.binary),
        f"--model-repository={repo.resolve()}",
        f"--backend-directory={backends}",
        f"--cache-directory={work / 'caches'}",
        f"--http-address={host}", f"--http-port={ports[0]}",
        f"--grpc-address={host}", f"--grpc-port={ports[1]}",
        f"--metrics-address={host}", f"--metrics-port={ports[2]}",
        "--allow-gpu-metrics=false",
        "--exit-timeout-secs=5",
        *extra_args,
    ]
    log = open(log_file, "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
    server = TritonServer(host, ports[0], ports[1], ports[2], log_file, proc.pid)
    try:
        deadline = time.monotonic() + startup_timeout_s
        ready = f"http://{server.http_url}/v2/health/ready"
        while not (_http_ok(ready) and _http_ok(server.metrics_url)):
            if proc.poll() is not None:
                log.flush()
                raise TritonServerError(
                    f"tritonserver exited with code {proc.returncode} while loading {repo}; log tail:\n"
                    f"{server.log_tail()}")
            if time.monotonic() > deadline:
                log.flush()
                raise TritonServerError(
                    f"tritonserver not ready on {server.http_url} after {startup_timeout_s:.0f}s; log tail:\n"
                    f"{server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        _stop(proc, stop_grace_s)
        log.close()
        shutil.rmtree(work, ignore_errors=True)  # the log stays when log_path points elsewhere
