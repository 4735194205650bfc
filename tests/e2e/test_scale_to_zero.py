"""Scale to zero and back, end to end: real control plane + kwok pods, the real activator program at the activator
pod's IP, a real Triton (the operator's LLM API model, CPU stand-in engine) at each serving pod's IP.

kwok runs no process and there is no kube-proxy here, so the test plays both: the activator program runs with the
rendered container's arguments on its pod's IP, and `ServiceProxy` stands for the `<name>-serving` Service's
ClusterIP (a loopback address that accepts connections only while a serving pod's Triton is ready, forwarding to it,
as kube-proxy rejects connections to a Service with no ready endpoint). The request is sent to the activator pod's
IP, as the backend's Service would send it at zero.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from autoscale_support import PodTritons, Recorder
from conftest import apply_manifest, backend_manifest, wait_for
from harness import Forwarder, _stop, http_get, wait_http

from devcluster.tritonserver import available as tritonserver_available
from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC
from llmbackend.autoscaling import decision as D
from llmbackend.render import activator as ra
from llmbackend.render import triton as rt
from llmbackend.render.names import BackendRef, activator_selector, label_selector, selector_for
from llmbackend.serving import activator as program

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.triton,
    pytest.mark.skipif(not tritonserver_available(),
                       reason="nvidia-pytriton's tritonserver is not installed (pip install nvidia-pytriton)"),
]

SERVICE_IP = "127.0.3.1"  # the `<name>-serving` Service's stand-in ClusterIP (kwok pods use 127.0.1.0/24)
IDLE_S = 10
SYNC = 2


class ServiceProxy:
    """kube-proxy for one Service: ``SERVICE_IP:port`` -> a ready endpoint's ``ip:port``; no listener while none."""

    def __init__(self, host: str, ports: list[int], endpoints: Callable[[], dict[str, str]]) -> None:
        self.host, self.ports, self.endpoints = host, ports, endpoints
        self.forwarders: list[Forwarder] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="service-proxy", daemon=True)

    def __enter__(self) -> ServiceProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._close()

    def _close(self) -> None:
        for f in self.forwarders:
            f.close()
        self.forwarders = []

    def _run(self) -> None:
        while not self._stop.is_set():
            ips = sorted(address.split(":")[0] for address in self.endpoints().values())
            if ips and not self.forwarders:
                self.forwarders = [Forwarder(self.host, port, ips[0], port) for port in self.ports]
            elif ips:
                for f in self.forwarders:
                    f.target = (ips[0], f.target[1])
            elif self.forwarders:
                self._close()
            self._stop.wait(0.2)


@contextlib.contextmanager
def pod_activator(kube, namespace: str, backend: str, upstream: str) -> Iterator[str]:
    """The activator program on its kwok pod's IP with the pod's rendered arguments (upstream: the stand-in)."""
    selector = label_selector(activator_selector(BackendRef(backend, namespace, "")))
    pod = wait_for(lambda: next((p for p in kube.list("Pod", namespace, label_selector=selector)
                                 if (p.get("status") or {}).get("podIP")), None), timeout=60, what="the activator pod")
    (container,) = pod["spec"]["containers"]
    assert container["command"][-1] == "llmbackend.serving.activator"
    ip = pod["status"]["podIP"]
    args = [re.sub(r"^--upstream=.*", f"--upstream={upstream}", a) for a in container["args"]]
    log = tempfile.NamedTemporaryFile(prefix="activator-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, program.__file__, f"--host={ip}", *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PYTHONPATH": ""})
    try:
        wait_http(f"http://{ip}:{rt.METRICS_PORT}/readyz", 20, proc)
        yield ip
    finally:
        _stop(proc)
        log.close()
        os.unlink(log.name)


def held(ip: str) -> float:
    _, body = http_get(f"http://{ip}:{rt.METRICS_PORT}/metrics")
    return float(re.search(rf"^{ACTIVATOR_HELD_METRIC} (\S+)$", body.decode(), re.M).group(1))


def stream_generate(address: str, model: str, result: dict) -> None:
    """A streamed generate request (server-sent events) through the activator; records status, events, times."""
    result["sent"] = time.monotonic()
    conn = http.client.HTTPConnection(*address.split(":"), timeout=300)
    try:
        body = json.dumps({"text_input": "what happens at zero replicas", "max_tokens": 8})
        conn.request("POST", f"/v2/models/{model}/generate_stream", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        result["status"] = resp.status
        result["events"] = [line for line in resp.read().decode().splitlines() if line.startswith("data:")]
    except Exception as exc:  # noqa: BLE001 - reported by the assertions
        result["error"] = repr(exc)
    finally:
        result["done"] = time.monotonic()
        conn.close()


def service_selector(kube, namespace: str, name: str) -> dict:
    return (kube.get("Service", namespace, name) or {}).get("spec", {}).get("selector") or {}


def test_scales_from_zero_for_a_held_request_and_back_to_zero_when_idle(cluster, operator, namespace):
    name = "zero"
    ref = BackendRef(name, namespace, "")
    kubeconfig = str(cluster.cluster.kubeconfig)
    apply_manifest(cluster, backend_manifest(name, namespace, engine={"backend": "tensorrtllm", "maxBatchSize": 2},
                                             autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 1,
                                                          "scaleToZeroAfterSeconds": IDLE_S, "syncPeriodSeconds": SYNC,
                                                          "scaleDownStabilizationSeconds": 5,
                                                          "windowSeconds": 10, "targetUtilization": 1.0}))
    kube = cluster.kube
    # A new backend with minReplicas 0 starts at zero, its Service on the activator.
    wait_for(lambda: (kube.get("Deployment", namespace, name) or {}).get("spec", {}).get("replicas") == 0,
             timeout=120, what="the serving Deployment at 0 replicas")
    wait_for(lambda: service_selector(kube, namespace, name) == activator_selector(ref), what="Service on the activator")
    assert service_selector(kube, namespace, ra.serving_service_name(name)) == selector_for(ref)

    with Recorder(kubeconfig, namespace, name) as rec, PodTritons(kubeconfig, namespace, name, 0.05) as tritons, \
            ServiceProxy(SERVICE_IP, [rt.HTTP_PORT], tritons.endpoints), \
            pod_activator(kube, namespace, name, SERVICE_IP) as activator_ip:
        result: dict = {}
        client = threading.Thread(target=stream_generate, args=(f"{activator_ip}:{rt.HTTP_PORT}", "llama-3.1-8b", result))
        client.start()
        try:
            wait_for(lambda: held(activator_ip) == 1, what="the request held by the activator")
            t_held = rec.now()
            up = wait_for(lambda: (s := rec.latest())["replicas"] == 1 and s, timeout=60, what="0 -> 1")
            t_up = rec.now()
            client.join(240)
            assert not client.is_alive(), "the held request did not finish"
            t_served = rec.now()
            wait_for(lambda: service_selector(kube, namespace, name) == selector_for(ref), timeout=30,
                     what="the Service back on the serving pods")
            wait_for(lambda: rec.latest()["replicas"] == 0, timeout=IDLE_S + 60, what="back to 0 when idle")
            t_zero = rec.now()
            wait_for(lambda: service_selector(kube, namespace, name) == activator_selector(ref), timeout=30,
                     what="the Service on the activator again")
            after = held(activator_ip)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nrequest: {result}\ntritons: {tritons.endpoints()} {tritons.errors}\n"
                                 f"statuses: {[s['autoscaling'].get('reason') for s in rec.samples][-20:]}\n"
                                 f"operator log:\n{operator.log_tail(30)}") from None

    print(f"0 -> 1: replicas written {t_up - t_held:.1f}s after the request was held; the held request was served "
          f"{t_served - t_held:.1f}s after it was held (kwok pod, real tritonserver start with the CPU stand-in); "
          f"back to 0 {t_zero - t_served:.1f}s after it finished (scaleToZeroAfterSeconds {IDLE_S})")
    assert result.get("status") == 200, result
    assert result["events"] and result["events"][-1].startswith("data:"), result
    assert any("text_output" in e for e in result["events"]), result
    assert up["autoscaling"]["reason"] == D.SCALED_FROM_ZERO or any(
        s["autoscaling"].get("reason") == D.SCALED_FROM_ZERO for s in rec.samples), rec.samples[-5:]
    assert after == 0
    events = [e for e in kube.list("Event", namespace, field_selector=f"involvedObject.name={name}")
              if e["involvedObject"].get("kind") == "LLMBackend"]
    ups = [e["message"] for e in events if e["reason"] == "ScaledUp"]
    assert any("0 -> 1" in m and D.SCALED_FROM_ZERO in m for m in ups), [(e["reason"], e["message"]) for e in events]
    assert any(e["reason"] == "ScaledDown" and "1 -> 0" in e["message"] for e in events)
    assert operator.proc.poll() is None, operator.log_tail()
    assert not tritons.errors, tritons.errors
