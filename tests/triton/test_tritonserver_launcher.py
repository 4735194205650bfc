"""The tritonserver launcher against the real binary: a model that imports a module from `extra_pythonpath`
serves an inference; a model that fails to load surfaces as TritonServerError with the log tail."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from devcluster.tritonserver import TritonServerError, available, run_tritonserver

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not available(), reason="nvidia-pytriton's tritonserver is not installed")]

CONFIG = textwrap.dedent("""\
    name: "{name}"
    backend: "python"
    max_batch_size: 0
    input [ {{ name: "x" data_type: TYPE_INT32 dims: [ 1 ] }} ]
    output [ {{ name: "y" data_type: TYPE_INT32 dims: [ 1 ] }} ]
    """)

MODEL = textwrap.dedent("""\
    import numpy as np
    import triton_python_backend_utils as pb_utils
    from launcher_helper import OFFSET  # only importable through extra_pythonpath

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", (x + OFFSET).astype(np.int32))]))
            return out
    """)


def _repo(root: Path, name: str, model_py: str) -> Path:
    (root / "repo" / name / "1").mkdir(parents=True)
    (root / "repo" / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    (root / "repo" / name / "1" / "model.py").write_text(model_py)
    return root / "repo"


def test_serves_a_model_importing_from_extra_pythonpath(tmp_path: Path) -> None:
    import tritonclient.http as httpclient

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "launcher_helper.py").write_text("OFFSET = 41\n")
    repo = _repo(tmp_path, "add", MODEL)
    with run_tritonserver(repo, extra_pythonpath=[lib]) as server:
        assert server.host == "127.0.0.1"
        client = httpclient.InferenceServerClient(server.http_url)
        x = httpclient.InferInput("x", [1], "INT32")
        x.set_data_from_numpy(np.array([1], dtype=np.int32))
        assert client.infer("add", [x]).as_numpy("y").tolist() == [42]
        client.close()
    # stopped: the port no longer answers
    with pytest.raises(ConnectionRefusedError):
        httpclient.InferenceServerClient(server.http_url).is_server_live()


def test_model_that_fails_to_load_raises_with_log_tail(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "broken", MODEL)  # launcher_helper is not on the path
    with pytest.raises(TritonServerError) as err:
        with run_tritonserver(repo, startup_timeout_s=60):
            pass
    assert "launcher_helper" in str(err.value)
