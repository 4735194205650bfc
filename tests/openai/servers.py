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
from llmapi_support import REF  # noqa: E402

from llmbackend.api.v1alpha1 import PlanStatus  # noqa: E402
from llmbackend.render import openai as rendered_openai  # noqa: E402
from llmbackend.render.workloads import RolloutStrategy, desired_objects  # noqa: E402


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


def frontend_files(spec, workdir: Path) -> tuple[Path, list[str]]:
    """The frontend and its helper written as the pod mounts them, and the rendered container's arguments."""
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    objects = desired_objects(REF, spec, plan, 1, RolloutStrategy("Recreate"))
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == rendered_openai.VOLUME_NAME)
    for item in volume["configMap"]["items"]:
        (workdir / item["path"]).write_text(config_map["data"][item["key"]])
    container = next(c for c in pod["containers"] if c["name"] == rendered_openai.CONTAINER_NAME)
    return workdir / rendered_openai.FRONTEND_KEY, container["args"]
