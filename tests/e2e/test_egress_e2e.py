"""What a tenant's URLs can make the operator do, on the real control plane (docs/security.md):

- endpoints that accept a connection and never answer (black holes) named by 8 backends do not delay an
  unrelated backend's reconcile: the operator process never calls a source's endpoint (the download Job does;
  kwok completes Job pods without running them, so any connection here would be the operator's);
- a Secret is not handed to a download Job for an endpoint the admin did not allow;
- an autoscaling.prometheus.url the admin did not allow is never polled.
"""

from __future__ import annotations

import socket
import threading
import time

import yaml
from conftest import apply_manifest, available, backend_manifest, condition, model_cache_volume, wait_for

from llmbackend.api import conditions as cond


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers; counts the connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read from nor written to

    def __enter__(self) -> BlackHole:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join(2)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def _time_to_available(cluster, namespace: str, name: str) -> float:
    start = time.monotonic()
    apply_manifest(cluster, backend_manifest(name, namespace))
    wait_for(lambda: available(cluster, namespace, name), timeout=180, interval=0.1, what=f"{name} Available=True")
    return time.monotonic() - start


def test_eight_black_hole_endpoints_do_not_delay_an_unrelated_backend(cluster, operator, namespace):
    # The probe: an hf:// source without preset made the operator GET <endpoint>/api/models/... on a reconcile
    # worker (up to 60 s each); with 8 such endpoints an unrelated backend took 118.7 s instead of 0.7 s.
    other = f"{namespace}-other"
    cluster.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(model_cache_volume(other)))
    try:
        before = _time_to_available(cluster, other, "before")
        with BlackHole() as hole:
            for i in range(8):
                apply_manifest(cluster, backend_manifest(f"hole{i}", namespace, model={"source": {
                    "uri": f"hf://acme/model-{i}", "endpoint": f"http://127.0.0.1:{hole.port}"}}))
            time.sleep(1)  # their reconciles are under way
            during = _time_to_available(cluster, other, "unrelated")
            wait_for(lambda: all((cluster.kube.get("LLMBackend", namespace, f"hole{i}") or {}).get("status")
                                 for i in range(8)), timeout=180, what="a first status on the 8 backends")
            connections = len(hole.accepted)
        print(f"\nunrelated backend Available in {during:.2f} s with 8 black-hole backends "
              f"({before:.2f} s before them); black-hole connections from the operator: {connections}")
        assert connections == 0, "the operator process called a tenant's endpoint"
    finally:
        cluster.kube.delete("Namespace", None, other)
        cluster.kubectl("delete", "pv", f"{other}-model-cache", "--wait=false", check=False)


def test_a_secret_is_not_given_to_a_download_for_an_endpoint_not_allowed(cluster, operator, namespace):
    cluster.kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=HF_TOKEN=hf_secret")
    with BlackHole() as hole:
        endpoint = f"http://127.0.0.1:{hole.port}"
        apply_manifest(cluster, backend_manifest("steal", namespace, model={"preset": "llama-3.1-8b", "source": {
            "uri": "hf://meta-llama/Llama-3.1-8B", "endpoint": endpoint, "secretRef": {"name": "hf-token"}}}))

        def refused():
            obj = cluster.kube.get("LLMBackend", namespace, "steal")
            found = condition(obj, "Degraded")
            return obj if found and found.get("reason") == cond.ENDPOINT_NOT_ALLOWED else None
        obj = wait_for(refused, timeout=60, what="Degraded=EndpointNotAllowed")
        assert endpoint in condition(obj, "Degraded")["message"]
        assert cluster.kube.list("Job", namespace) == [], "no Job that could read the Secret"
        assert hole.accepted == []


def test_a_prometheus_url_not_allowed_is_never_polled(cluster, operator, namespace):
    # The test operator allows http://127.0.0.1:* (its tests' Prometheus servers); localhost is another origin.
    with BlackHole() as hole:
        url = f"http://localhost:{hole.port}"
        apply_manifest(cluster, backend_manifest("prom", namespace, autoscaling={
            "enabled": True, "source": "prometheus", "prometheus": {"url": url}, "syncPeriodSeconds": 1}))

        def reason():
            obj = cluster.kube.get("LLMBackend", namespace, "prom") or {}
            auto = (obj.get("status") or {}).get("autoscaling") or {}
            return auto if auto.get("reason") == cond.PROMETHEUS_NOT_ALLOWED else None
        auto = wait_for(reason, timeout=60, what="status.autoscaling.reason PrometheusNotAllowed")
        assert url in auto["message"] and "--prometheus-url" in auto["message"]
        time.sleep(3)
        assert hole.accepted == []
