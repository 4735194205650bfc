"""Where the tritonserver stand-in (standins/tritonserver) answers: it binds a port the kernel picks and writes it
to $STANDIN_DIR/http-port. A port picked by the test and bound later could be taken in between by one of mpirun's
or Ray's own connections (seen in CI: "Address already in use", the group restarted)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

PORT_FILE = "http-port"


def standin_ready(standin_dir: Path) -> bool:
    """True once rank 0's stand-in answers /v2/health/ready."""
    try:
        port = int((standin_dir / PORT_FILE).read_text())
    except (OSError, ValueError):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False
