"""The operator's OpenAI frontend as the serving pod runs it: the file alone (`python3 FILE`), its own process,
bound to 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
from harness import _stop, wait_http  # noqa: E402


def local_args(container_args: list[str], triton_http: str, triton_metrics_url: str, tokenizer_dir: str,
               port: int) -> list[str]:
    """The rendered container's arguments with the pod's addresses replaced by this machine's."""
    replace = {"--port": str(port), "--triton-url": f"http://{triton_http}", "--metrics-url": triton_metrics_url,
               "--tokenizer-dir": tokenizer_dir}
    args = []
    for arg in container_args:
        key = arg.split("=", 1)[0]
        args.append(f"{key}={replace[key]}" if key in replace else arg)
    return ["--host=127.0.0.1", *args]


@contextlib.contextmanager
def run_frontend(program: str | os.PathLike, args: list[str], port: int, timeout_s: float = 30) -> Iterator[str]:
    """Run the shipped frontend file as its own process; yields its base URL (.../v1)."""
    log = tempfile.NamedTemporaryFile(prefix="openai-frontend-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, str(program), *args], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": ""})  # no operator package
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/health", timeout_s, proc)
        except Exception as exc:
            log.flush()
            raise RuntimeError("frontend did not start:\n" + Path(log.name).read_text(errors="replace")[-3000:]) from exc
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)
