"""Cold start learned from the backend's own pods (pure)."""

from __future__ import annotations

from llmbackend.autoscaling import coldstart


def pod(name, created, ready_at=None, status="True", uid=None):
    conds = [] if ready_at is None else [{"type": "Ready", "status": status, "lastTransitionTime": ready_at}]
    return {"metadata": {"name": name, "uid": uid or name, "creationTimestamp": created}, "status": {"conditions": conds}}


def test_pod_cold_start_is_creation_to_ready():
    assert coldstart.pod_cold_start(pod("a", "2026-01-01T10:00:00Z", "2026-01-01T10:04:00Z")) == 240
    assert coldstart.pod_cold_start(pod("a", "2026-01-01T10:00:00Z")) is None            # not Ready yet
    assert coldstart.pod_cold_start(pod("a", "2026-01-01T10:00:00Z", "2026-01-01T10:04:00Z", "False")) is None
    assert coldstart.pod_cold_start(pod("a", "garbage", "2026-01-01T10:04:00Z")) is None
    assert coldstart.pod_cold_start(pod("a", "2026-01-01T10:00:00Z", "2026-01-01T09:00:00Z")) is None  # clock skew


def test_observe_keeps_the_first_observation_per_pod_and_estimate_takes_the_median():
    seen = coldstart.observe({}, [pod("a", "2026-01-01T10:00:00Z", "2026-01-01T10:03:00Z"),
                                  pod("b", "2026-01-01T10:00:00Z", "2026-01-01T10:05:00Z"),
                                  pod("c", "2026-01-01T10:00:00Z")])
    assert seen == {"a": 180, "b": 300}
    # a later readiness flap of "a" does not replace its cold start
    seen = coldstart.observe(seen, [pod("a", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"),
                                    pod("c", "2026-01-01T10:00:00Z", "2026-01-01T10:04:00Z")])
    assert seen == {"a": 180, "b": 300, "c": 240}
    assert coldstart.estimate(seen.values()) == (240, "learned from 3 pod(s)")
    assert coldstart.estimate([], 90) == (90, "spec.autoscaling.coldStartSeconds")
    assert coldstart.estimate([])[0] == coldstart.DEFAULT_COLD_START_S
    many = coldstart.observe({}, [pod(f"p{i}", "2026-01-01T10:00:00Z", "2026-01-01T10:01:00Z") for i in range(40)])
    assert len(many) == coldstart.MAX_OBSERVATIONS


def _pod(uid, ready):
    cond = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": {"uid": uid, "name": uid}, "status": {"conditions": cond}}


def test_churn_counts_pods_deleted_before_ready():
    starting, deleted = coldstart.track_churn({}, [], [_pod("a", True), _pod("b", False), _pod("c", False)], 0.0)
    assert set(starting) == {"b", "c"} and deleted == []
    # b turned Ready, c was deleted while starting
    starting, deleted = coldstart.track_churn(starting, deleted, [_pod("a", True), _pod("b", True)], 15.0)
    assert starting == {} and deleted == [15.0]
    assert coldstart.churn_warning(len(deleted)) is None
    # deletions older than the window are forgotten; CHURN_WARN recent ones warn
    _, deleted = coldstart.track_churn({"x": 0.0, "y": 0.0, "z": 0.0}, deleted, [], 15.0 + coldstart.CHURN_WINDOW_S + 1)
    assert len(deleted) == 3 and "deleted before they turned Ready" in (coldstart.churn_warning(len(deleted)) or "")


def test_starting_ages_are_the_not_ready_pods_ages():
    t0 = coldstart.epoch_seconds("2026-01-01T10:00:00Z")
    assert t0 is not None
    pods = [pod("ready", "2026-01-01T10:00:00Z", "2026-01-01T10:04:00Z"),
            pod("young", "2026-01-01T10:09:00Z"),
            pod("old", "2026-01-01T10:02:00Z", "2026-01-01T10:02:30Z", "False"),  # Ready condition False
            pod("garbage", "not a time")]
    going = pod("going", "2026-01-01T10:01:00Z")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T10:09:30Z"
    assert sorted(coldstart.starting_ages(pods + [going], t0 + 600)) == [60.0, 480.0]
    assert coldstart.starting_ages([], t0) == []
