"""The operator's autoscaler end to end: real control plane + kwok pods, a real Triton (pytriton fake
LLM on CPU) standing behind every pod's ``<podIP>:8002``, real load, optionally a real Prometheus.

The operator process scrapes what it would scrape in a cluster (``http://<podIP>:8002/metrics`` of the
backend's Ready pods, or Prometheus' recording rule), decides, and writes the Deployment's replicas;
kwok makes the new pods Ready, the forwarder makes their metrics endpoints answer.

The Triton behind the pods runs tests/triton/fake_llm.py, which exports the engine metrics the autoscaler reads
(llmbackend/api/engine_metrics.py) with real in-flight semantics. The operator's own LLM API model with its CPU
stand-in engine (branch i10) exports the same names; once merged, this test should serve that model instead.
"""

from __future__ import annotations

import importlib.util
import json
import time
import urllib.parse
import urllib.request

import pytest
from autoscale_support import PodForwards, Recorder, junk_metrics_server, prometheus_retarget
from conftest import apply_manifest, backend_manifest, wait_for
from harness import background_load, free_port, prometheus_binary, run_fake_llm_triton, run_prometheus

from llmbackend.autoscaling import decision as D
from llmbackend.render.hpa import prometheus_rule_group

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.triton,
    pytest.mark.skipif(importlib.util.find_spec("pytriton") is None,
                       reason="nvidia-pytriton is not installed (pip install nvidia-pytriton)"),
]

CAPACITY = 2             # the fake engine's batch
TOKENS = 10
TOKEN_DELAY = 0.01       # 100 ms per batch
HEAVY = 4 * CAPACITY     # closed-loop clients: well above what one replica serves without queueing
WINDOW = 10
SYNC = 2
DOWN_STABILIZATION = 10
TARGET = 1.0
TOLERANCE = 0.1
MAX_REPLICAS = 3


def autoscaling(**overrides):
    spec = {"enabled": True, "minReplicas": 1, "maxReplicas": MAX_REPLICAS, "targetRatio": TARGET,
            "tolerance": TOLERANCE, "windowSeconds": WINDOW, "syncPeriodSeconds": SYNC,
            "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": DOWN_STABILIZATION,
            "maxScaleUpStep": 4, "maxScaleDownStep": 1}
    spec.update(overrides)
    return spec


def vllm_backend(name, namespace, model, **auto):
    manifest = backend_manifest(name, namespace, engine={"backend": "vllm"}, autoscaling=autoscaling(**auto))
    manifest["spec"]["model"]["name"] = model  # vLLM: the served (and scraped) model is the model name
    return manifest


@pytest.fixture(scope="module")
def triton():
    with run_fake_llm_triton(capacity=CAPACITY, token_delay_s=TOKEN_DELAY) as ep:
        yield ep


def _kubeconfig(cluster) -> str:
    return str(cluster.cluster.kubeconfig)


def _events(cluster, namespace, name):
    events = cluster.kube.list("Event", namespace, field_selector=f"involvedObject.name={name}")
    return [e for e in events if e["involvedObject"].get("kind") == "LLMBackend"]


def _diag(rec: Recorder, operator, fw: PodForwards | None = None) -> str:
    extra = f"\nforwarded pods: {fw.pods}\nbind errors: {fw.bind_errors}" if fw else ""
    pods = rec.kube.list("Pod", rec.namespace, label_selector=f"llmbackend.dev/backend={rec.backend}")
    extra += "\npods: " + "; ".join(
        f"{p['metadata']['name']} ip={p['status'].get('podIP')} phase={p['status'].get('phase')} "
        f"deleting={bool(p['metadata'].get('deletionTimestamp'))} "
        f"ready={[(c['status'], c.get('reason'), c.get('lastTransitionTime')) for c in p['status'].get('conditions', []) if c['type'] == 'Ready']} "
        f"node={p['spec'].get('nodeName')}" for p in pods)
    extra += "\nmanagedFields: " + "; ".join(
        f"{m.get('manager')}/{m.get('operation')}/{m.get('subresource', '')}@{m.get('time')}"
        for p in pods for m in p["metadata"].get("managedFields", []))
    extra += "\nevents: " + "; ".join(f"{e['involvedObject'].get('kind')}/{e['involvedObject'].get('name')} {e['reason']}: {e.get('message', '')[:80]}"
                                      for e in rec.kube.list("Event", rec.namespace) + rec.kube.list("Event", "default"))
    extra += "\nnodes: " + "; ".join(
        f"{n['metadata']['name']} " + str([(c['status'], c.get('reason'), c.get('lastHeartbeatTime'))
                                          for c in n['status'].get('conditions', []) if c['type'] == 'Ready'])
        for n in rec.kube.list("Node"))
    return f"\n--- timeline ---\n{rec.timeline()}{extra}\n--- operator log ---\n{operator.log_tail(30)}"


def _prom_series(url: str, namespace: str) -> dict[str, float]:
    """The recording rule's current per-pod values in ``namespace``."""
    q = urllib.parse.urlencode({"query": f'llmbackend:engine_queue_compute:ratio{{namespace="{namespace}"}}'})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:  # noqa: S310 - loopback
        result = json.load(r)["data"]["result"]
    return {s["metric"]["pod"]: float(s["value"][1]) for s in result}


def _unimodal(seq: list[int]) -> bool:
    """Non-decreasing, then non-increasing: no scale-up after a scale-down (no flapping)."""
    i = 0
    while i + 1 < len(seq) and seq[i + 1] >= seq[i]:
        i += 1
    return all(seq[j + 1] <= seq[j] for j in range(i, len(seq) - 1))


def _wait_scaled_up(rec, fw):
    """Wait for the operator to scale past one replica, then for every replica to be Ready and forwarded."""
    wait_for(lambda: (s := rec.latest())["replicas"] and s["replicas"] > 1, timeout=45, what="scale-up")
    t_up = rec.now()
    up = wait_for(lambda: (s := rec.latest())["ready"] == s["replicas"] > 1 and len(fw.pods) == s["replicas"] and s,
                  timeout=45, what="scaled-up pods Ready and forwarded")
    return t_up, up


def test_direct_scrape_scales_up_under_load_and_back_down(cluster, operator, namespace, triton):
    name = "auto"
    with PodForwards(_kubeconfig(cluster), namespace, name, (triton.host, triton.metrics_port)) as fw, \
            Recorder(_kubeconfig(cluster), namespace, name) as rec:
        apply_manifest(cluster, vllm_backend(name, namespace, triton.model))

        # Idle: one Ready pod, measured ratio 0 (NoTraffic is a real reading), held at minReplicas.
        idle = wait_for(lambda: (s := rec.latest())["ready"] == 1 and s["autoscaling"].get("currentRatio") is not None and s,
                        timeout=60, what="first ratio from the scraped pod")
        assert idle["replicas"] == 1 and float(idle["autoscaling"]["currentRatio"]) < TARGET, _diag(rec, operator, fw)
        assert idle["autoscaling"]["reason"] in (D.AT_MIN_REPLICAS, D.WITHIN_TOLERANCE), _diag(rec, operator, fw)

        t_load = rec.now()
        with background_load(triton.http_url, triton.model, HEAVY, tokens=TOKENS) as res:
            try:
                # The new kwok pods become Ready and their :8002 answers (same Triton behind them).
                t_up, up = _wait_scaled_up(rec, fw)
            except AssertionError as exc:
                raise AssertionError(f"{exc}{_diag(rec, operator, fw)}") from None
            time.sleep(2 * SYNC)  # a few decisions with every replica Ready, still under load
        t_stop = rec.now()
        assert res.errors == 0 and res.ok > 0, res.last_error

        try:
            wait_for(lambda: (s := rec.latest())["replicas"] == 1 and s["ready"] == 1, timeout=90, what="scale back to 1")
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_diag(rec, operator, fw)}") from None
        time.sleep(2 * SYNC)  # and it stays there
        final = rec.latest()
        # before each scale-down the operator set every Ready pod's deletion cost from its engine's in-flight work
        survivors = [p for p in rec.kube.list("Pod", namespace, label_selector=f"llmbackend.dev/backend={name}")
                     if not p["metadata"].get("deletionTimestamp")]
        costs = [(p["metadata"].get("annotations") or {}).get("controller.kubernetes.io/pod-deletion-cost") for p in survivors]

    timeline = _diag(rec, operator, fw)
    print(timeline)
    ratios = [r for s in rec.samples if t_load <= s["t"] <= t_stop + WINDOW
              for r in [s["autoscaling"].get("currentRatio")] if r is not None]
    peak = max(float(r) for r in ratios)
    seq = rec.replica_sequence()
    t_first_down = rec.first_time(lambda s: s["replicas"] is not None and s["replicas"] < max(seq), after=t_stop)
    t_min = rec.first_time(lambda s: s["replicas"] == 1, after=t_stop)
    print(f"peak ratio {peak:.2f}; scale-up {t_up - t_load:.1f}s after load start; replicas {seq}; "
          f"first scale-down {t_first_down - t_stop:.1f}s, back to 1 {t_min - t_stop:.1f}s after load stop; "
          f"load: {res.ok} ok, {res.errors} errors")

    assert peak > TARGET * (1 + TOLERANCE), timeline
    assert up["autoscaling"]["reason"] in (D.SCALED_UP, D.ENGINE_SATURATED, D.FORECAST_LOAD, D.AT_MAX_REPLICAS,
                                           D.STABILIZING_SCALE_UP, D.WITHIN_TOLERANCE), timeline
    # the engine's counters and gauges drive it; the cold start is learned from the (kwok) pods
    assert up["autoscaling"]["signal"] == "engine" and "/" in up["autoscaling"]["inFlight"], up
    assert "learned from" in final["autoscaling"]["coldStartSource"], final
    assert costs and all(c is not None and c.isdigit() for c in costs), costs
    assert max(seq) <= MAX_REPLICAS
    assert seq[0] == 1 and seq[-1] == 1 and max(seq) > 1, seq
    assert _unimodal(seq), f"replicas flapped: {seq}{timeline}"
    # Scale-down waits for the stabilization window after the last high recommendation, which is at
    # the earliest when the load stopped (the window keeps loaded samples for WINDOW seconds more).
    assert t_first_down - t_stop >= DOWN_STABILIZATION - 1, timeline
    assert final["replicas"] == 1 and final["autoscaling"]["reason"] in (D.AT_MIN_REPLICAS, D.SCALED_DOWN), timeline
    assert final["autoscaling"].get("lastScaleTime"), final
    assert float(final["autoscaling"]["currentRatio"]) < TARGET

    events = _events(cluster, namespace, name)
    ups = [e for e in events if e["reason"] == "ScaledUp"]
    downs = [e for e in events if e["reason"] == "ScaledDown"]
    rises = sum(1 for a, b in zip(seq, seq[1:]) if b > a)
    falls = sum(1 for a, b in zip(seq, seq[1:]) if b < a)
    assert len(ups) == rises and len(downs) == falls, (
        [(e["reason"], e["message"]) for e in events], seq)
    assert "ratio" in ups[0]["message"] and "-> " in ups[0]["message"], ups[0]["message"]
    assert operator.proc.poll() is None, operator.log_tail()


@pytest.mark.skipif(prometheus_binary() is None,
                    reason="prometheus binary not found: apt-get install -y --no-install-recommends prometheus (Debian)")
def test_prometheus_source_scales_up_under_load(cluster, operator, namespace, triton, tmp_path):
    name = "auto-prom"
    rules = tmp_path / "rules.yml"
    rules.write_text(json.dumps({"groups": [prometheus_rule_group(name, triton.model, window_seconds=WINDOW, interval_seconds=1)]}))
    with run_prometheus([], [rules]) as prom, \
            PodForwards(_kubeconfig(cluster), namespace, name, (triton.host, triton.metrics_port),
                        on_change=lambda pods: prometheus_retarget(prom.config_path, prom.url, namespace, pods)) as fw, \
            Recorder(_kubeconfig(cluster), namespace, name) as rec:
        apply_manifest(cluster, vllm_backend(name, namespace, triton.model, source="prometheus",
                                             prometheus={"url": prom.url}))
        try:
            idle = wait_for(lambda: (s := rec.latest())["ready"] == 1 and s["autoscaling"].get("currentRatio") is not None and s,
                            timeout=60, what="first ratio from Prometheus")
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_diag(rec, operator, fw)}") from None
        assert idle["replicas"] == 1 and float(idle["autoscaling"]["currentRatio"]) < TARGET, _diag(rec, operator, fw)
        # The operator's reading is Prometheus' recording rule for this namespace's pod.
        series = _prom_series(prom.url, namespace)
        assert set(series) == set(fw.pods) and all(v < TARGET for v in series.values()), series

        t_load = rec.now()
        with background_load(triton.http_url, triton.model, HEAVY, tokens=TOKENS) as res:
            try:
                t_up, up = _wait_scaled_up(rec, fw)
                # Prometheus now has a series per pod (new targets added by reload) and the
                # operator's reading covers every Ready pod.
                # (against the latest replica count: the operator may take a second step meanwhile)
                wait_for(lambda: len(_prom_series(prom.url, namespace)) == (s := rec.latest())["replicas"] == s["ready"]
                         and f"{s['replicas']} pod(s)" in s["autoscaling"].get("message", ""),
                         timeout=30, what="a series for every pod")
                loaded = _prom_series(prom.url, namespace)
            except AssertionError as exc:
                raise AssertionError(f"{exc}{_diag(rec, operator, fw)}") from None
        assert res.errors == 0 and res.ok > 0, res.last_error

    timeline = _diag(rec, operator, fw)
    print(timeline)
    ratios = [float(s["autoscaling"]["currentRatio"]) for s in rec.samples
              if s["t"] >= t_load and s["autoscaling"].get("currentRatio") is not None]
    seq = rec.replica_sequence()
    print(f"prometheus: peak ratio {max(ratios):.2f}; scale-up {t_up - t_load:.1f}s after load start; replicas {seq}; "
          f"per-pod series under load {loaded}")
    assert all(v > TARGET for v in loaded.values()), loaded
    assert max(ratios) > TARGET * (1 + TOLERANCE), timeline
    assert seq[0] == 1 and 1 < max(seq) <= MAX_REPLICAS and seq == sorted(seq), timeline
    assert any(e["reason"] == "ScaledUp" for e in _events(cluster, namespace, name))
    assert operator.proc.poll() is None, operator.log_tail()


def test_garbage_or_missing_metrics_keep_replicas_and_report_it(cluster, operator, namespace, triton):
    name = "auto-stale"
    with PodForwards(_kubeconfig(cluster), namespace, name, (triton.host, triton.metrics_port)) as fw, \
            Recorder(_kubeconfig(cluster), namespace, name) as rec, junk_metrics_server() as junk:
        apply_manifest(cluster, vllm_backend(name, namespace, triton.model, minReplicas=2))
        try:
            wait_for(lambda: (s := rec.latest())["ready"] == 2 and s["autoscaling"].get("currentRatio") is not None,
                     timeout=60, what="2 Ready pods with a measured ratio")
            # The pods' endpoints start answering garbage (HTTP 200, not Prometheus text).
            fw.target = junk
            t_junk = rec.now()
            stale = wait_for(lambda: (s := rec.latest())["autoscaling"].get("reason") == D.STALE_METRICS and s,
                             timeout=WINDOW + 20, what="StaleMetrics once the window has no good sample")
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_diag(rec, operator, fw)}") from None
        t_stale = rec.now()
        assert stale["replicas"] == 2

        # The floor drops to 1: without a reading the operator must not act on it (keeps 2).
        cluster.kubectl("patch", "llmb", name, "-n", namespace, "--type=merge", "-p",
                        json.dumps({"spec": {"autoscaling": {"minReplicas": 1}}}))
        t_patch = rec.now()
        time.sleep(3 * SYNC)
        # Then nothing listens behind the pods at all (connection closed at once).
        fw.target = ("127.0.0.1", free_port())
        time.sleep(3 * SYNC)
        after = [s for s in rec.samples if s["t"] >= t_patch]
        final = rec.latest()

    timeline = _diag(rec, operator, fw)
    print(timeline)
    print(f"garbage served from {t_junk:.1f}s; StaleMetrics at {t_stale:.1f}s ({t_stale - t_junk:.1f}s later)")
    assert {s["replicas"] for s in after} == {2}, timeline
    assert {s["autoscaling"].get("reason") for s in after} <= {D.STALE_METRICS, D.METRICS_UNAVAILABLE}, timeline
    assert final["autoscaling"]["desiredReplicas"] == 2
    assert "keeping 2 replicas" in final["autoscaling"]["message"], final
    assert not [e for e in _events(cluster, namespace, name) if e["reason"] in ("ScaledUp", "ScaledDown")]
    assert operator.proc.poll() is None, operator.log_tail()
    # Without a reading there is no ratio to show: the last good value must not linger next to StaleMetrics.
    assert "currentRatio" not in stale["autoscaling"], stale["autoscaling"]
