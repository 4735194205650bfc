"""What a decision returns: the replicas, a reason (status.autoscaling.reason: the names below) and a message."""

from __future__ import annotations

from dataclasses import dataclass

from .engine import EngineView
from .state import ScalerState

SCALED_UP = "ScaledUp"
SCALED_DOWN = "ScaledDown"
WITHIN_TOLERANCE = "WithinTolerance"
AT_MAX_REPLICAS = "AtMaxReplicas"
AT_MIN_REPLICAS = "AtMinReplicas"
STABILIZING_SCALE_DOWN = "StabilizingScaleDown"
STABILIZING_SCALE_UP = "StabilizingScaleUp"
METRICS_UNAVAILABLE = "MetricsUnavailable"
STALE_METRICS = "StaleMetrics"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
ENGINE_SATURATED = "EngineSaturated"      # slots full / KV cache high for saturationSeconds: scaled up
FORECAST_LOAD = "ForecastLoad"            # scaled up for the load expected one cold start ahead
SCALED_FROM_ZERO = "ScaledFromZero"       # requests waiting while no replica exists
BURST_FLOOR = "BurstFloor"                # scaled up to the standing capacity the last bursts needed (burstMemorySeconds)
WAITING_TO_SCALE_TO_ZERO = "IdleBeforeScaleToZero"
PANIC = "Panic"                            # panic mode ordered or held the replicas (spec.autoscaling.panic)

REASONS = (
    SCALED_UP, SCALED_DOWN, WITHIN_TOLERANCE, AT_MAX_REPLICAS, AT_MIN_REPLICAS,
    STABILIZING_SCALE_DOWN, STABILIZING_SCALE_UP, METRICS_UNAVAILABLE, STALE_METRICS,
    INSUFFICIENT_CAPACITY, ENGINE_SATURATED, FORECAST_LOAD, SCALED_FROM_ZERO, WAITING_TO_SCALE_TO_ZERO, BURST_FLOOR,
    PANIC,
)


@dataclass(frozen=True)
class Decision:
    desired_replicas: int
    reason: str
    message: str
    state: ScalerState
    raw_recommendation: int | None = None  # before stabilization/limits; None without a reading
    engine: EngineView | None = None
    panic: str | None = None  # status.autoscaling.panic: set while panic mode holds, why and until when
