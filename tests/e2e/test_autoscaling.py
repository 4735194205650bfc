"""The operator's autoscaler end to end: real control plane + kwok pods, a real Triton serving the operator's own
LLM API model on every pod's IP, real load, optionally a real Prometheus.

The operator process scrapes what it would scrape in a cluster (``http://<podIP>:8002/metrics`` of the backend's
Ready pods, or Prometheus' recording rule), decides, and writes the Deployment's replicas; kwok makes the new pods
Ready. Behind each pod (autoscale_support.PodTritons) the real `tritonserver` loads the model repository of the
backend's ConfigMap, exactly what the pod mounts (render/models/trtllm_llmapi.py as model.py, model.yaml,
config.pbtxt), with the CPU stand-in `tensorrt_llm` (dev/standins: SLOTS slots, ITERATION_S per decode step):
the engine queue/compute counters and slot gauges the operator reads are the model's own. The load goes through
the serving pods as a gateway spreads it, and every request is counted. kwok deletes pods at once and runs no
preStop, so PodTritons does the kubelet's part on a removed pod: out of the endpoints at once, then the pod's
rendered preStop (wait until the engine has nothing in flight), then SIGTERM to that Triton.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import pytest
from autoscale_support import (
    PodForwards,
    PodTritons,
    Recorder,
    junk_metrics_server,
    prometheus_retarget,
    serve_repository,
    write_model_repository,
)
from conftest import apply_manifest, backend_manifest, wait_for
from harness import EndpointLoad, free_port, prometheus_binary, run_prometheus

from devcluster.tritonserver import available as tritonserver_available
from llmbackend.autoscaling import decision as D
from llmbackend.render.hpa import prometheus_rule_group

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.triton,
    pytest.mark.skipif(not tritonserver_available(),
                       reason="nvidia-pytriton's tritonserver is not installed (pip install nvidia-pytriton)"),
]

SLOTS = 2                # the stand-in engine's in-flight batch (engine.maxBatchSize)
ITERATION_S = 0.05       # one decode step of the stand-in
TOKENS = 8               # per request: ~0.4 s in a slot
MAX_REPLICAS = 3
# Closed-loop clients: at one replica 6x its slots (requests wait in the engine); at MAX_REPLICAS each replica has
# its slots full and as many waiting, a ratio ~1 (no scale-down while the load lasts).
HEAVY = 2 * MAX_REPLICAS * SLOTS
# After the step down: one client pausing between requests, about a tenth of one replica's slots busy.
LIGHT = 1
THINK_S = 2.0
WINDOW = 10
SYNC = 2
DOWN_STABILIZATION = 10
TARGET = 1.0
TOLERANCE = 0.1
# Fill the slots up to the last: with SLOTS=2, the default (0.8, with the square-root spare) would keep two replicas
# for one request in flight.
TARGET_UTILIZATION = 1.0


def autoscaling(**overrides):
    spec = {"enabled": True, "minReplicas": 1, "maxReplicas": MAX_REPLICAS, "targetRatio": TARGET,
            "tolerance": TOLERANCE, "windowSeconds": WINDOW, "syncPeriodSeconds": SYNC,
            "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": DOWN_STABILIZATION,
            "maxScaleUpStep": 4, "maxScaleDownStep": 1, "targetUtilization": TARGET_UTILIZATION}
    spec.update(overrides)
    return spec


def llmapi_backend(name, namespace, **auto):
    """The default engine: tensorrtllm through the LLM API model, SLOTS in-flight requests per replica."""
    return backend_manifest(name, namespace, engine={"backend": "tensorrtllm", "maxBatchSize": SLOTS},
                            autoscaling=autoscaling(**auto))


def _kubeconfig(cluster) -> str:
    return str(cluster.cluster.kubeconfig)


def _events(cluster, namespace, name):
    events = cluster.kube.list("Event", namespace, field_selector=f"involvedObject.name={name}")
    return [e for e in events if e["involvedObject"].get("kind") == "LLMBackend"]


def _diag(rec: Recorder, operator, fw: PodForwards | None = None, tritons: PodTritons | None = None,
          load: EndpointLoad | None = None) -> str:
    extra = f"\nforwarded pods: {fw.pods}\nbind errors: {fw.bind_errors}" if fw else ""
    if tritons is not None:
        extra += (f"\nserving endpoints: {tritons.endpoints()}\ndrains: {tritons.drains}"
                  f"\ntriton start errors: {tritons.errors}")
        for pod in sorted(tritons.started | set(tritons.errors)):
            extra += f"\n--- triton log of {pod} ---\n{tritons.log_tail(pod)}"
    if load is not None:
        c = load.counts
        extra += f"\nload: {c.sent} sent, {c.ok} ok, {c.failed} failed, by pod {dict(c.by_pod)}; errors {c.errors[:5]}"
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


def _wait_scaled_up(rec, tritons, timeout=60):
    """Wait for the operator to scale past one replica, then for every replica to be Ready and serving."""
    wait_for(lambda: (s := rec.latest())["replicas"] and s["replicas"] > 1, timeout=timeout, what="scale-up")
    t_up = rec.now()
    # a new pod serves once its Triton has loaded the model (the readiness probe); kwok marks it Ready at once
    up = wait_for(lambda: (s := rec.latest())["ready"] == s["replicas"] > 1 and len(tritons.endpoints()) == s["replicas"]
                  and s, timeout=180, what="scaled-up pods Ready and serving")
    return t_up, up


def _serving(rec, name, namespace, operator, cluster, **auto):
    """Apply the backend; wait for its first pod to serve and for a first ratio read from it."""
    apply_manifest(cluster, llmapi_backend(name, namespace, **auto))
    return wait_for(lambda: (s := rec.latest())["ready"] >= 1 and s["autoscaling"].get("currentRatio") is not None and s,
                    timeout=180, what="first ratio from the pod's Triton")


def test_scales_up_under_a_load_step_and_back_down_with_no_failed_request(cluster, operator, namespace):
    name = "auto"
    with Recorder(_kubeconfig(cluster), namespace, name) as rec, \
            PodTritons(_kubeconfig(cluster), namespace, name, ITERATION_S) as tritons:
        try:
            idle = _serving(rec, name, namespace, operator, cluster)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_diag(rec, operator, tritons=tritons)}") from None
        # Idle: one Ready pod, measured ratio 0 (NoTraffic is a real reading), held at minReplicas.
        assert idle["replicas"] == 1 and float(idle["autoscaling"]["currentRatio"]) < TARGET, _diag(rec, operator, tritons=tritons)
        assert idle["autoscaling"]["reason"] in (D.AT_MIN_REPLICAS, D.WITHIN_TOLERANCE), _diag(rec, operator, tritons=tritons)

        load = EndpointLoad(tritons.endpoints, tritons.model, HEAVY, TOKENS, max_s=400)
        tritons.outstanding = load.outstanding
        t_load = rec.now()
        with load:
            try:
                t_up, up = _wait_scaled_up(rec, tritons)
                time.sleep(2 * SYNC)  # a few decisions with every replica serving, still under the load
                # The step down: a trickle goes on through every pod while the operator scales in, so a leaving
                # replica may hold a request; none may fail.
                load.active, load.think_s = LIGHT, THINK_S
                t_stop = rec.now()
                wait_for(lambda: (s := rec.latest())["replicas"] == 1 and s["ready"] == 1
                         and len(tritons.endpoints()) == 1, timeout=120, what="scale back to 1")
                time.sleep(2 * SYNC)  # and it stays there
                wait_for(lambda: len(tritons.drains) == max(rec.replica_sequence()) - 1, timeout=120,
                         what="the removed replicas drained")
            except AssertionError as exc:
                raise AssertionError(f"{exc}{_diag(rec, operator, tritons=tritons, load=load)}") from None
        final = rec.latest()
        # before each scale-down the operator set every Ready pod's deletion cost from its engine's in-flight work
        survivors = [p for p in rec.kube.list("Pod", namespace, label_selector=f"llmbackend.dev/backend={name}")
                     if not p["metadata"].get("deletionTimestamp")]
        costs = [(p["metadata"].get("annotations") or {}).get("controller.kubernetes.io/pod-deletion-cost") for p in survivors]
        exit_timeouts = {a for p in survivors for a in p["spec"]["containers"][0].get("args", [])
                         if a.startswith("--exit-timeout-secs=")}
        timeline = _diag(rec, operator, tritons=tritons, load=load)

    print(timeline)
    counts = load.counts
    ratios = [r for s in rec.samples if t_load <= s["t"] <= t_stop + WINDOW
              for r in [s["autoscaling"].get("currentRatio")] if r is not None]
    peak = max(float(r) for r in ratios)
    seq = rec.replica_sequence()
    # the scaler may still add a replica just after the step down (its window holds loaded samples), so the first
    # scale-down is the first drop below the peak once the peak is reached
    t_peak = rec.first_time(lambda s: s["replicas"] == max(seq))
    t_first_down = rec.first_time(lambda s: s["replicas"] is not None and s["replicas"] < max(seq),
                                  after=max(t_stop, t_peak))
    t_min = rec.first_time(lambda s: s["replicas"] == 1, after=t_stop)
    print(f"peak ratio {peak:.2f}; scale-up {t_up - t_load:.1f}s after the load step; replicas {seq}; "
          f"first scale-down {t_first_down - t_stop:.1f}s, back to 1 {t_min - t_stop:.1f}s after the step down; "
          f"load: {counts.sent} requests, {counts.ok} ok, {counts.failed} failed, by pod {dict(counts.by_pod)}; "
          f"drains (pod, requests in flight when it left the endpoints, preStop s, rc): "
          f"{[(d.pod, d.in_flight_at_deregistration, round(d.prestop_s, 1), d.prestop_rc) for d in tritons.drains]}")

    # Every request of the load completed: none failed, none was cut by a scale-down.
    assert counts.failed == 0 and counts.ok == counts.sent > 0, counts.errors[:10]
    assert load.in_flight() == 0
    # the load went through every replica, so the removed ones served requests
    assert len(counts.by_pod) == max(seq), dict(counts.by_pod)
    # every removed replica ran its rendered preStop, which returned once its engine had nothing in flight
    assert all(d.prestop_rc == 0 for d in tritons.drains), tritons.drains
    assert not tritons.errors, tritons.errors
    assert peak > TARGET * (1 + TOLERANCE), timeline
    assert up["autoscaling"]["reason"] in (D.SCALED_UP, D.ENGINE_SATURATED, D.FORECAST_LOAD, D.AT_MAX_REPLICAS,
                                           D.STABILIZING_SCALE_UP, D.WITHIN_TOLERANCE), timeline
    # the engine's counters and gauges drive it; the cold start is learned from the (kwok) pods
    assert up["autoscaling"]["signal"] == "engine" and "/" in up["autoscaling"]["inFlight"], up
    assert "learned from" in final["autoscaling"]["coldStartSource"], final
    assert costs and all(c is not None and c.lstrip("-").isdigit() for c in costs), costs
    assert max(seq) <= MAX_REPLICAS
    assert seq[0] == 1 and seq[-1] == 1 and max(seq) > 1, seq
    assert _unimodal(seq), f"replicas flapped: {seq}{timeline}"
    # Scale-down waits for the stabilization window after the last high recommendation, which is at
    # the earliest when the load stepped down (the window keeps loaded samples for WINDOW seconds more).
    assert t_first_down - t_stop >= DOWN_STABILIZATION - 1, timeline
    assert final["replicas"] == 1 and final["autoscaling"]["reason"] in (D.AT_MIN_REPLICAS, D.SCALED_DOWN,
                                                                        D.WITHIN_TOLERANCE), timeline
    assert final["autoscaling"].get("lastScaleTime"), final
    assert float(final["autoscaling"]["currentRatio"]) < TARGET

    events = _events(cluster, namespace, name)
    ups = [e for e in events if e["reason"] == "ScaledUp"]
    downs = [e for e in events if e["reason"] == "ScaledDown"]
    rises = sum(1 for a, b in zip(seq, seq[1:]) if b > a)
    falls = sum(1 for a, b in zip(seq, seq[1:]) if b < a)
    assert len(ups) == rises and len(downs) == falls, (
        [(e["reason"], e["message"]) for e in events], seq)
    assert "-> " in ups[0]["message"], ups[0]["message"]
    # The engines' request-time histogram reaches the status: a p99 while loaded, beside the drain bound the pods
    # were rendered with; sub-second requests are far from it, so no DrainBoundShort warning.
    p99s = [float(p) for s in rec.samples if t_load <= s["t"] <= t_stop
            for p in [s["autoscaling"].get("requestP99Seconds")] if p is not None]
    bounds = {s["autoscaling"].get("drainSeconds") for s in rec.samples if s["autoscaling"]}
    print(f"status p99 request time under load: {min(p99s, default=0):.1f}-{max(p99s, default=0):.1f}s; "
          f"drain bound {bounds}")
    assert p99s, timeline
    assert len(bounds) == 1 and exit_timeouts == {f"--exit-timeout-secs={b}" for b in bounds}, (bounds, exit_timeouts)
    assert max(p99s) <= 0.5 * bounds.pop()
    assert not [e for e in events if e["reason"] == "DrainBoundShort"]
    assert all(s["autoscaling"].get("drainWarning") is None for s in rec.samples)
    assert operator.proc.poll() is None, operator.log_tail()


def test_an_operator_restart_resumes_what_the_scaler_learned(cluster, operator, namespace):
    """status.autoscaling.memory goes through the real API server (the CRD's schema keeps it, the status subresource
    takes it) and a restarted operator resumes it: a backend watched for an hour is sized at learnedUtilization at
    once, not as a new one for 30 minutes."""
    name = "auto-memory"
    with Recorder(_kubeconfig(cluster), namespace, name) as rec, \
            PodTritons(_kubeconfig(cluster), namespace, name, ITERATION_S) as tritons:
        try:
            _serving(rec, name, namespace, operator, cluster, targetUtilization=0.5, learnedUtilization=1.0)
            young = wait_for(lambda: (s := rec.latest())["autoscaling"].get("memory")
                             and s["autoscaling"].get("utilization") and s, timeout=60, what="the scaler's memory")
            # as if this operator had watched the backend for an hour: stopped, its memory edited, started again
            operator.stop()
            now = time.time()
            memory = {**young["autoscaling"]["memory"], "watchingSince": _rfc3339(now - 3600),
                      "lastSeen": _rfc3339(now // D.PEAK_BUCKET_S * D.PEAK_BUCKET_S),
                      "bursts": [{"start": _rfc3339(now // D.PEAK_BUCKET_S * D.PEAK_BUCKET_S), "headroom": 1.25}],
                      "rises": f"{now // D.PEAK_BUCKET_S * D.PEAK_BUCKET_S:.0f}:1.5"}
            cluster.kube.patch_status("LLMBackend", namespace, name, {"autoscaling": {"memory": memory}})
            t_restart = rec.now()
            operator.start()
            resumed = wait_for(lambda: (s := rec.latest())["t"] > t_restart and s["autoscaling"].get("reason")
                               not in (None, "AwaitingMetrics") and s["autoscaling"].get("utilization") == "1" and s,
                               timeout=120, what="a decision of the restarted operator at the learned utilization")
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_diag(rec, operator, tritons=tritons)}") from None
        timeline = _diag(rec, operator, tritons=tritons)
    # before the restart: a new scaler, at targetUtilization, its memory in status as the API server stored it
    assert young["autoscaling"]["utilization"] == "0.5", timeline
    assert {"watchingSince", "lastSeen", "loads", "rates"} <= set(young["autoscaling"]["memory"]), timeline
    # after it: the memory resumed (the hour it was watched, its burst) and kept in the new operator's own writes
    auto = resumed["autoscaling"]
    assert "learned over" in auto["message"] and "headroom x1.25" in auto["message"], timeline
    assert auto["burstHeadroom"] == "1.25" and auto["memory"]["watchingSince"] == memory["watchingSince"], timeline
    assert auto["burstRise"] == "1.50" and ":1.5" in auto["memory"]["rises"], timeline
    # the status stayed through the restart: no pass of the new operator wrote the memory away before it was read
    assert all(s["autoscaling"].get("memory") for s in rec.samples if s["t"] > t_restart), timeline
    assert f"{namespace}/{name}: resumed the memory in status" in operator.log_text(), timeline
    assert operator.proc.poll() is None, operator.log_tail()


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@pytest.mark.skipif(prometheus_binary() is None,
                    reason="prometheus binary not found: apt-get install -y --no-install-recommends prometheus (Debian)")
def test_prometheus_source_scales_up_under_load(cluster, operator, namespace, tmp_path):
    name = "auto-prom"
    model = "llama-3.1-8b"  # the served model (the preset's name): the label the recording rule selects
    rules = tmp_path / "rules.yml"
    rules.write_text(json.dumps({"groups": [prometheus_rule_group(name, model, window_seconds=WINDOW, interval_seconds=1)]}))
    with run_prometheus([], [rules]) as prom, \
            Recorder(_kubeconfig(cluster), namespace, name) as rec, \
            PodTritons(_kubeconfig(cluster), namespace, name, ITERATION_S,
                       on_change=lambda pods: prometheus_retarget(prom.config_path, prom.url, namespace, pods)) as tritons:
        try:
            idle = _serving(rec, name, namespace, operator, cluster, source="prometheus", prometheus={"url": prom.url})
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_diag(rec, operator, tritons=tritons)}") from None
        assert tritons.model == model
        assert idle["replicas"] == 1 and float(idle["autoscaling"]["currentRatio"]) < TARGET, _diag(rec, operator, tritons=tritons)
        # The operator's reading is Prometheus' recording rule for this namespace's pod.
        series = _prom_series(prom.url, namespace)
        assert set(series) == set(tritons.endpoints()) and all(v < TARGET for v in series.values()), series

        t_load = rec.now()
        with EndpointLoad(tritons.endpoints, model, HEAVY, TOKENS, max_s=300) as load:
            try:
                t_up, up = _wait_scaled_up(rec, tritons)
                # Prometheus now has a series per pod (new targets added by reload) and the
                # operator's reading covers every Ready pod.
                # (the operator may have scaled further since: count the replicas it asks for now)
                wait_for(lambda: (n := rec.latest()["replicas"]) == len(tritons.endpoints())
                         and len(_prom_series(prom.url, namespace)) == n
                         and f"{n} pod(s)" in rec.latest()["autoscaling"].get("message", ""),
                         timeout=60, what="a series for every pod")
                loaded = _prom_series(prom.url, namespace)
            except AssertionError as exc:
                with urllib.request.urlopen(f"{prom.url}/api/v1/targets", timeout=5) as r:  # noqa: S310 - loopback
                    targets = [(t["labels"].get("pod"), t["health"], t.get("lastError"))
                               for t in json.load(r)["data"]["activeTargets"]]
                raise AssertionError(f"{exc}\nseries {_prom_series(prom.url, namespace)}\nprometheus targets {targets}"
                                     f"{_diag(rec, operator, tritons=tritons, load=load)}") from None
        assert load.counts.failed == 0 and load.counts.ok > 0, load.counts.errors[:10]
        timeline = _diag(rec, operator, tritons=tritons, load=load)

    print(timeline)
    ratios = [float(s["autoscaling"]["currentRatio"]) for s in rec.samples
              if s["t"] >= t_load and s["autoscaling"].get("currentRatio") is not None]
    seq = rec.replica_sequence()
    print(f"prometheus: peak ratio {max(ratios):.2f}; scale-up {t_up - t_load:.1f}s after load start; replicas {seq}; "
          f"per-pod series under load {loaded}")
    # the first pod's series carries the load that triggered the scale-up (new pods may still be warming up)
    assert max(loaded.values()) > TARGET, loaded
    assert max(ratios) > TARGET * (1 + TOLERANCE), timeline
    assert seq[0] == 1 and 1 < max(seq) <= MAX_REPLICAS and seq == sorted(seq), timeline
    assert any(e["reason"] == "ScaledUp" for e in _events(cluster, namespace, name))
    assert operator.proc.poll() is None, operator.log_tail()


def test_garbage_or_missing_metrics_keep_replicas_and_report_it(cluster, operator, namespace, tmp_path):
    name = "auto-stale"
    apply_manifest(cluster, llmapi_backend(name, namespace, minReplicas=2))
    # One real Triton on the backend's ConfigMap stands behind both pods' :8002 (the ratio is invariant to
    # duplicated counters), so the test can swap it for garbage.
    model = wait_for(lambda: _repository_or_none(cluster, namespace, name, tmp_path / "repo"), timeout=60,
                     what="the backend's ConfigMap")
    with serve_repository(tmp_path / "repo", iteration_s=ITERATION_S, log_path=tmp_path / "triton.log") as server, \
            PodForwards(_kubeconfig(cluster), namespace, name, (server.host, server.metrics_port)) as fw, \
            Recorder(_kubeconfig(cluster), namespace, name) as rec, junk_metrics_server() as junk:
        assert model
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


def _repository_or_none(cluster, namespace, name, into):
    try:
        return write_model_repository(cluster.kube, namespace, name, into)
    except LookupError:
        return None
