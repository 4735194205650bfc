"""The observed p99 request time against the drain bound (pure): the quantile of a histogram, the buckets read from
a metrics text, their window over pods, the warning and what decide() makes of it."""

from __future__ import annotations

import math

import pytest

from llmbackend.api import conditions as cond
from llmbackend.api import engine_metrics as em
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.autoscaling.drain import DRAIN_WARN_FRACTION, drain_warning
from llmbackend.autoscaling.ratio import (
    P99_MIN_REQUESTS,
    SIGNAL_ENGINE,
    TritonCounters,
    bucket_delta,
    histogram_quantile,
    parse_metrics_text,
    request_p99,
    window_ratio,
)
from llmbackend.controller.decide import Observed, ScaleDecision, decide
from llmbackend.render import drain
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects

INF = math.inf


@pytest.mark.parametrize("q, buckets, expected", [
    # no observations, no +Inf bucket, nothing at all: no quantile
    (0.99, [(1, 0), (INF, 0)], None),
    (0.99, [(1, 5), (2, 10)], None),
    (0.99, [], None),
    # one bucket besides +Inf: interpolated from 0 to its bound
    (0.5, [(10, 4), (INF, 4)], 5.0),
    (0.99, [(10, 100), (INF, 100)], 9.9),
    # interpolation inside the bucket that holds the rank (Prometheus' histogram_quantile)
    (0.5, [(1, 0), (2, 10), (4, 20), (INF, 20)], 2.0),
    (0.75, [(1, 0), (2, 10), (4, 20), (INF, 20)], 3.0),
    (0.99, [(1, 50), (2, 90), (4, 100), (INF, 100)], 3.8),
    # the rank in the +Inf bucket: the highest finite bound (a lower bound of the truth)
    (0.99, [(1, 50), (2, 90), (INF, 100)], 2.0),
    (0.99, [(INF, 100)], None),
    # unsorted input and a torn scrape (a lower count after a higher one) are handled
    (0.5, [(INF, 20), (2, 10), (1, 0), (4, 20)], 2.0),
    (0.5, [(1, 0), (2, 10), (4, 9), (INF, 20)], 2.0),
    # a first bucket at 0: everything at or below it is 0
    (0.5, [(0, 10), (1, 10), (INF, 10)], 0.0),
])
def test_histogram_quantile(q, buckets, expected):
    got = histogram_quantile(q, buckets)
    assert got == (None if expected is None else pytest.approx(expected)), (q, buckets)


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5])
def test_histogram_quantile_rejects_a_quantile_out_of_range(q):
    with pytest.raises(ValueError):
        histogram_quantile(q, [(1, 1), (INF, 1)])


def test_request_p99_needs_enough_requests():
    few = [(1, P99_MIN_REQUESTS - 1), (INF, P99_MIN_REQUESTS - 1)]
    enough = [(1, P99_MIN_REQUESTS), (INF, P99_MIN_REQUESTS)]
    assert request_p99(few) is None
    assert request_p99(enough) == pytest.approx(0.99)
    assert request_p99([]) is None


def _text(model: str = "llm", buckets: dict | None = None, versions: int = 1, extra: str = "") -> str:
    """Triton's exposition of the engine counters and the request-time histogram (as prometheus-cpp writes it)."""
    name = em.ENGINE_REQUEST_SECONDS_METRIC
    lines = [f"# TYPE {em.ENGINE_QUEUE_METRIC} counter", f"# TYPE {em.ENGINE_COMPUTE_METRIC} counter",
             f"# TYPE {em.ENGINE_REQUESTS_METRIC} counter"]
    for v in range(1, versions + 1):
        lines += [f'{em.ENGINE_QUEUE_METRIC}{{model="{model}",version="{v}"}} 1000',
                  f'{em.ENGINE_COMPUTE_METRIC}{{model="{model}",version="{v}"}} 2000',
                  f'{em.ENGINE_REQUESTS_METRIC}{{model="{model}",version="{v}"}} 3']
    if buckets is not None:
        lines.append(f"# TYPE {name} histogram")
        for v in range(1, versions + 1):
            for le, n in buckets.items():
                lines.append(f'{name}_bucket{{le="{le}",model="{model}",version="{v}"}} {n}')
            lines += [f'{name}_sum{{model="{model}",version="{v}"}} 1.5',
                      f'{name}_count{{model="{model}",version="{v}"}} {max(buckets.values())}']
    return "\n".join(lines) + "\n" + extra


def test_parse_reads_the_buckets_of_its_model_summed_over_versions():
    text = _text(buckets={"0.5": 1, "1": 2, "+Inf": 3}, versions=2, extra=_text("other", {"0.5": 9, "+Inf": 9}))
    c = parse_metrics_text(text, "llm", SIGNAL_ENGINE)
    assert c is not None and c.success_count == 6
    assert c.request_buckets == ((0.5, 2.0), (1.0, 4.0), (INF, 6.0))


@pytest.mark.parametrize("text", [
    _text(),                                           # an older model: no histogram
    _text(buckets={"0.5": 1, "1": 2}),                 # no +Inf bucket: not a histogram to read
    _text(buckets={"0.5": 1, "soon": 2, "+Inf": 3}),   # a garbage bound is skipped, the rest is kept
])
def test_parse_without_a_usable_histogram_keeps_the_counters(text):
    c = parse_metrics_text(text, "llm", SIGNAL_ENGINE)
    assert c is not None and (c.queue_us, c.compute_infer_us, c.success_count) == (1000, 2000, 3)
    if "soon" in text:
        assert c.request_buckets == ((0.5, 1.0), (INF, 3.0))
    else:
        assert c.request_buckets is None


def test_triton_signal_ignores_the_engine_histogram():
    text = _text(buckets={"1": 1, "+Inf": 1}).replace(em.ENGINE_QUEUE_METRIC, em.TRITON_QUEUE_METRIC) \
        .replace(em.ENGINE_COMPUTE_METRIC, em.TRITON_COMPUTE_METRIC)
    c = parse_metrics_text(text, "llm")
    assert c is not None and c.request_buckets is None


def H(t: float, queue: float, *counts: float, bounds=(1.0, 10.0, INF)) -> tuple[float, TritonCounters]:
    """A sample at `t`: counters plus cumulative histogram counts for `bounds`."""
    return t, TritonCounters(queue, queue, counts[-1] if counts else 0,
                             request_buckets=tuple(zip(bounds, counts, strict=True)) if counts else None)


@pytest.mark.parametrize("samples, expected", [
    ([H(0, 1, 1, 2, 2), H(1, 2, 1, 5, 6)], {1.0: 0, 10.0: 3, INF: 4}),
    # a restart (counts went down): the new values count, like the counters
    ([H(0, 1, 5, 9, 9), H(1, 2, 1, 2, 2)], {1.0: 1, 10.0: 2, INF: 2}),
    # samples without the histogram are skipped; none at all: None
    ([H(0, 1, 1, 1, 1), H(1, 2), H(2, 3, 2, 3, 3), H(3, 4, 3, 3, 4)], {1.0: 1, 10.0: 0, INF: 1}),
    ([H(0, 1), H(1, 2)], None),
    # new bucket bounds (a new image): only the newest layout counts
    ([H(0, 1, 1, 1, 1), H(1, 2, 2, 2, 2), H(2, 3, 1, 1, bounds=(5.0, INF)), H(3, 4, 2, 3, bounds=(5.0, INF))],
     {5.0: 2, INF: 3}),
])
def test_bucket_delta(samples, expected):
    assert bucket_delta(samples) == expected


def test_window_p99_sums_bucket_deltas_over_the_pods_used():
    # 30 requests: 24 under 1 s, 6 of 1-10 s, split over two pods; a third pod has no histogram (older image)
    pods = {
        "a": [H(0, 0, 0, 0, 0), H(5, 100, 12, 15, 15)],
        "b": [H(0, 0, 10, 10, 10), H(5, 100, 22, 25, 25)],
        "old": [H(0, 0), H(5, 100)],
    }
    r = window_ratio(pods, now=5, window_s=10, signal=SIGNAL_ENGINE)
    assert r.pods_used == 3 and r.request_hist_count == 30
    # rank 29.7 of 30 lies in (1, 10]: 1 + 9 x (29.7 - 24) / 6
    assert r.request_p99_s == pytest.approx(1 + 9 * 5.7 / 6)
    assert window_ratio({"a": pods["a"]}, now=5, window_s=10).request_p99_s is None, "15 requests: too few"
    plain = window_ratio({"old": pods["old"]}, now=5, window_s=10)
    assert plain.request_p99_s is None and plain.request_hist_count == 0 and plain.ratio == 1.0


@pytest.mark.parametrize("p99, bound, previous, previous_bound, warns", [
    (None, 276, None, None, False),          # nothing measured, nothing said
    (100.0, 276, None, None, False),         # under half the bound
    (138.0, 276, None, None, False),         # exactly half: still fine
    (150.0, 276, None, None, True),
    (100.0, 276, "old warning", 276, False),  # a measured p99 under the threshold clears it
    (None, 276, "old warning", 276, True),    # a quiet window keeps it
    (None, 600, "old warning", 276, False),   # ... unless the bound changed since
    (1000.0, drain.MAX_DRAIN_S, None, None, True),
])
def test_drain_warning(p99, bound, previous, previous_bound, warns):
    got = drain_warning(p99, bound, previous, previous_bound)
    assert (got is not None) == warns
    if got is not None and p99 is not None:
        assert f"{p99:.1f}s" in got and f"{bound}s" in got, got
        if bound < drain.MAX_DRAIN_S:
            suggested = int(got.rsplit("at least ", 1)[1].split()[0])
            assert p99 <= DRAIN_WARN_FRACTION * suggested <= DRAIN_WARN_FRACTION * drain.MAX_DRAIN_S, got
            assert "spec.serving.drainSeconds" in got
        else:
            assert "maxSeqLen" in got
    if previous is not None and got is not None and p99 is None:
        assert got == previous


MODEL = {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "llama"}}}


def _autoscaled(p99: float | None, status: dict | None = None, drain_seconds: int | None = None):
    from test_decide import NODES, backend, first_pass, served, settle

    autoscaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 4}
    spec = {"model": MODEL, "engine": {"maxSeqLen": 4096}, "autoscaling": autoscaling}
    if drain_seconds is not None:
        spec["serving"] = {"drainSeconds": drain_seconds}
    live = served(first_pass(spec), ready=1)
    scale = ScaleDecision(1, "WithinTolerance", "steady", "1.000", None, {"signal": "engine"}, p99)
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    if status is not None:  # the same pass on a backend whose status already says something
        decision = decide(Observed(backend(spec, status), NODES, children=live, scale_decision=scale, hpas=[]))
    return decision


def test_status_shows_the_p99_and_the_bound_and_warns_once():
    bound = drain.drain_seconds(4096)
    quiet = _autoscaled(12.34)
    auto = quiet.status.autoscaling
    assert (auto.request_p99_seconds, auto.drain_seconds, auto.drain_warning) == ("12.3", bound, None)
    assert not [e for e in quiet.events if e[1] == cond.DRAIN_BOUND_SHORT]

    slow = _autoscaled(bound * 0.8)
    warning = slow.status.autoscaling.drain_warning
    assert warning is not None
    assert [(t, r) for t, r, _ in slow.events if r == cond.DRAIN_BOUND_SHORT] == [("Warning", cond.DRAIN_BOUND_SHORT)]
    # already warned: the status keeps saying it, no second event
    again = _autoscaled(bound * 0.8, status={"autoscaling": {"drainWarning": warning, "drainSeconds": bound}})
    assert again.status.autoscaling.drain_warning is not None
    assert not [e for e in again.events if e[1] == cond.DRAIN_BOUND_SHORT]
    # a window with too few requests keeps the warning; no p99 is shown
    unmeasured = _autoscaled(None, status={"autoscaling": {"drainWarning": warning, "drainSeconds": bound}})
    assert unmeasured.status.autoscaling.drain_warning == warning
    assert unmeasured.status.autoscaling.request_p99_seconds is None


def test_the_drain_override_is_the_bound_in_status_and_in_the_pod():
    decision = _autoscaled(100.0, drain_seconds=900)
    assert decision.status.autoscaling.drain_seconds == 900 and decision.status.autoscaling.drain_warning is None
    spec = LLMBackendSpec.model_validate({"model": MODEL, "serving": {"drainSeconds": 900}})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=40 << 30)
    objs = {o["kind"]: o for o in desired_objects(BackendRef("b", "ns", "u"), spec, plan, 1, RolloutStrategy("Recreate"))}
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert "--exit-timeout-secs=900" in pod["containers"][0]["args"]
    assert pod["terminationGracePeriodSeconds"] == drain.termination_grace_seconds(900)


def test_churn_shows_in_status_and_warns_once():
    from test_decide import NODES, backend, first_pass, served, settle

    from llmbackend.autoscaling import coldstart

    autoscaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 4}
    spec = {"model": MODEL, "engine": {"maxSeqLen": 4096}, "autoscaling": autoscaling}
    live = served(first_pass(spec), ready=1)
    warning = coldstart.churn_warning(4)
    extra = {"signal": "engine", "load": "12.0", "readyReplicas": 1, "startingReplicas": 2, "utilization": "0.8",
             "podsDeletedBeforeReady": 4, "churnWarning": warning}
    scale = ScaleDecision(3, "ForecastLoad", "steady", "1.000", None, extra, None)
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    auto = decision.status.autoscaling
    assert (auto.load, auto.ready_replicas, auto.starting_replicas, auto.pods_deleted_before_ready) == ("12.0", 1, 2, 4)
    assert auto.utilization == "0.8"
    assert [(t, r) for t, r, _ in decision.events if r == cond.AUTOSCALER_CHURN] == [("Warning", cond.AUTOSCALER_CHURN)]
    again = decide(Observed(backend(spec, {"autoscaling": {"churnWarning": warning}}), NODES, children=live,
                            scale_decision=scale, hpas=[]))
    assert not [e for e in again.events if e[1] == cond.AUTOSCALER_CHURN]


def test_a_burst_over_the_learned_headroom_shows_in_status_and_warns_once():
    from test_decide import NODES, backend, first_pass, served, settle

    from llmbackend.api.v1alpha1 import AutoscalingSpec
    from llmbackend.autoscaling import decision as D

    spec = {"model": MODEL, "engine": {"maxSeqLen": 4096},
            "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 8}}
    live = served(first_pass(spec), ready=1)
    warning = D.burst_warning(D.ScalerState(surprises=[(0.0, 6.8)], queued_at=0.0, floor_since=30.0),
                              AutoscalingSpec(enabled=True, max_replicas=8), 60.0)
    scale = ScaleDecision(3, "ForecastLoad", "steady", "1.000", None, {"signal": "engine", "burstWarning": warning}, None)
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    assert decision.status.autoscaling.burst_warning == warning and "x6.8" in warning
    assert [(t, r) for t, r, _ in decision.events if r == cond.BURSTS_OVER_HEADROOM] == [("Warning", cond.BURSTS_OVER_HEADROOM)]
    again = decide(Observed(backend(spec, {"autoscaling": {"burstWarning": warning}}), NODES, children=live,
                            scale_decision=scale, hpas=[]))
    assert again.status.autoscaling.burst_warning == warning
    assert not [e for e in again.events if e[1] == cond.BURSTS_OVER_HEADROOM]
    # an operator restart: the passes before its first decision keep the warning (with the memory it comes from), so
    # the next decision does not post the event again
    status = {"autoscaling": {"burstWarning": warning, "memory": {"watchingSince": "2026-12-04T10:00:00Z",
                                                                  "lastSeen": "2026-12-04T11:00:00Z"}}}
    restarted = decide(Observed(backend(spec, status), NODES, children=live, scale_decision=None, hpas=[]))
    assert restarted.status.autoscaling.burst_warning == warning
    assert not [e for e in restarted.events if e[1] == cond.BURSTS_OVER_HEADROOM]
