"""How long a leaving replica may take to finish its requests, and the preStop that waits for it (pure).

A preStop hook waits until the pod's engine reports nothing in flight, up to the drain bound, while the
endpoints controller and the gateway stop sending it requests (the pod is terminating); then Triton gets SIGTERM
and ``--exit-timeout-secs`` (the same bound) lets it finish what is left. ``terminationGracePeriodSeconds``
covers both.

The bound: the longest request the backend accepts, ``maxSeqLen`` tokens at a slow per-token time, plus
queueing; capped; or ``spec.serving.drainSeconds``. It comes from the spec, not from observation: a bound
derived from live metrics would change the pod template, i.e. restart every replica, whenever it moved. The
engines' request-time histogram gives the observed p99, which the autoscaler compares with this bound and reports
(autoscaling/drain.py ``drain_warning``).
"""

from __future__ import annotations

import math

from ..api import engine_metrics as EM
from ..api.v1alpha1 import LLMBackendSpec

# Per-token time assumed for the longest request (slower than a 50 ms TPOT target: a full batch decodes slower).
DRAIN_SECONDS_PER_TOKEN = 0.06
DRAIN_QUEUE_MARGIN_S = 30
MIN_DRAIN_S = 60
MAX_DRAIN_S = 1800
# Endpoints and gateways need a moment to stop routing to a terminating pod before in-flight work is counted.
DEREGISTER_DELAY_S = 5
GRACE_MARGIN_S = 15


def drain_seconds(max_seq_len: int, override: int | None = None) -> int:
    """How long a leaving replica may take to finish its requests (preStop wait and Triton's exit timeout)."""
    if override is not None:
        return max(0, min(MAX_DRAIN_S, override))
    bound = math.ceil(max_seq_len * DRAIN_SECONDS_PER_TOKEN) + DRAIN_QUEUE_MARGIN_S
    return max(MIN_DRAIN_S, min(MAX_DRAIN_S, bound))


def backend_drain_seconds(spec: LLMBackendSpec) -> int:
    """The backend's drain bound: the preStop's wait, Triton's exit timeout and the models' finalize wait."""
    return drain_seconds(spec.engine.max_seq_len, spec.serving.drain_seconds)


def termination_grace_seconds(drain_s: int) -> int:
    """preStop (deregister + drain) then SIGTERM with Triton's exit timeout (drain) would need 2 x drain in the
    worst case; the preStop returns as soon as the engine is empty, so one drain plus margins is the bound."""
    return DEREGISTER_DELAY_S + drain_s + GRACE_MARGIN_S


def prestop_command(metrics_port: int, drain_s: int) -> list[str]:
    """preStop exec: wait for deregistration, then poll the engine's in-flight gauges on localhost until zero or
    ``drain_s``. Python (present in the serving images), no shell interpolation of values."""
    script = (
        "import time,urllib.request\n"
        f"time.sleep({DEREGISTER_DELAY_S})\n"
        f"end=time.time()+{drain_s}\n"
        "while time.time()<end:\n"
        " try:\n"
        f"  t=urllib.request.urlopen('http://127.0.0.1:{metrics_port}/metrics',timeout=2).read().decode()\n"
        f"  n=sum(float(l.rsplit(' ',1)[1]) for l in t.splitlines() if l.startswith('{EM.REQUEST_GAUGE}{{')"
        " and ('request_type=\"active\"' in l or 'request_type=\"waiting\"' in l))\n"
        " except Exception:\n"
        "  break\n"
        " if n<=0:\n"
        "  break\n"
        " time.sleep(1)\n"
    )
    return ["python3", "-c", script]
