"""Optional APIs (CRDs that may come and go) are re-discovered after a request finds them gone, with one discovery
request per API at a time whatever the number of workers (issue 24: a deleted InferencePool CRD stayed "served" and
101 of 112 backends stayed Degraded until it was reinstalled; workers re-checked in parallel, ~3x the rate).
Against a small HTTP server speaking the API server's discovery and Status answers."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections import Counter

import pytest
from kubernetes import client as k8s_client

from llmbackend.controller import kube as kube_module
from llmbackend.controller.kube import ApiError, Kube

GROUP_VERSION, PLURAL = "inference.networking.k8s.io/v1", "inferencepools"


class FakeServer:
    def __init__(self) -> None:
        self.served = True
        self.plain_404 = False
        self.requests: Counter[str] = Counter()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                server.requests[f"GET {self.path}"] += 1
                if self.path == f"/apis/{GROUP_VERSION}":
                    time.sleep(0.2)  # long enough for every worker to arrive while one asks
                    if server.served:
                        self._answer(200, {"kind": "APIResourceList", "resources": [{"name": PLURAL}]})
                    else:
                        self._answer(404, {"kind": "Status", "reason": "NotFound", "details": {},
                                           "message": "the server could not find the requested resource"})
                    return
                self._answer(404, {"kind": "Status", "reason": "NotFound", "message": 'inferencepools "x" not found',
                                   "details": {"name": "x", "kind": PLURAL}})

            def do_PATCH(self) -> None:  # noqa: N802
                server.requests[f"PATCH {self.path}"] += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if server.plain_404:  # what kube-apiserver answers once a CRD's route is gone
                    data = b"404 page not found\n"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._answer(404, {"kind": "Status", "reason": "NotFound", "details": {},
                                   "message": "the server could not find the requested resource"})

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def discoveries(self) -> int:
        return self.requests[f"GET /apis/{GROUP_VERSION}"]


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.httpd.shutdown()


@pytest.fixture
def kube(server) -> Kube:
    configuration = k8s_client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.httpd.server_address[1]}"
    return Kube(configuration)


def _from_workers(kube: Kube, n: int = 8) -> list[bool]:
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(kube.has_api(GROUP_VERSION, PLURAL))) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_workers_asking_at_once_share_one_discovery(server, kube):
    assert _from_workers(kube) == [True] * 8
    assert server.discoveries == 1
    server.served = False
    kube._api_cache[f"{GROUP_VERSION}/{PLURAL}"] = (False, 0.0)  # an absence that has expired
    assert _from_workers(kube) == [False] * 8
    assert server.discoveries == 2


@pytest.mark.parametrize("plain_404", [False, True], ids=["status", "page-not-found"])
def test_a_served_api_found_gone_is_discovered_again(server, kube, monkeypatch, plain_404):
    monkeypatch.setattr(kube_module, "API_RECHECK_MIN_S", 0.0)
    server.plain_404 = plain_404
    assert kube.has_api(GROUP_VERSION, PLURAL)
    server.served = False  # the CRD is deleted
    with pytest.raises(ApiError):
        kube.apply({"apiVersion": GROUP_VERSION, "kind": "InferencePool", "metadata": {"name": "x", "namespace": "ns"}})
    assert not kube.has_api(GROUP_VERSION, PLURAL)
    assert server.discoveries == 2


def test_a_missing_object_is_not_a_missing_api(server, kube, monkeypatch):
    monkeypatch.setattr(kube_module, "API_RECHECK_MIN_S", 0.0)
    assert kube.has_api(GROUP_VERSION, PLURAL)
    assert kube.get("InferencePool", "ns", "x") is None  # 404 naming the object
    assert kube.has_api(GROUP_VERSION, PLURAL) and server.discoveries == 1


def test_found_gone_again_and_again_asks_at_most_once_per_interval(server, kube):
    assert kube.has_api(GROUP_VERSION, PLURAL)
    server.served = False
    for _ in range(5):
        with pytest.raises(ApiError):
            kube.apply({"apiVersion": GROUP_VERSION, "kind": "InferencePool", "metadata": {"name": "x", "namespace": "ns"}})
        kube.has_api(GROUP_VERSION, PLURAL)
    assert server.discoveries == 1, "discovery was answered less than API_RECHECK_MIN_S ago"
