"""Status conditions of an LLMBackend: the four types every reconcile pass writes, and every reason.

Each pass writes all four types for the current generation (kstatus and Argo CD read a condition only for
the generation it was observed at); types not listed here are dropped. manifests/argocd/.../health.lua
maps them to Argo CD health states and README "Argo CD" documents the mapping.
"""

from __future__ import annotations

PLANNED = "Planned"
"""True when a parallelism plan for the current spec fits the cluster's GPUs."""
AVAILABLE = "Available"
"""True when the desired replicas serve the current spec (as a Deployment's: also True at 0 replicas)."""
PROGRESSING = "Progressing"
"""True while a rollout or scale change is in flight."""
DEGRADED = "Degraded"
"""True when the current spec cannot be served as asked without a change by someone."""
TYPES = (PLANNED, AVAILABLE, PROGRESSING, DEGRADED)

# ---- reasons (a condition message always says what to do next) ----

FITS = "Fits"
"""Planned=True: the plan in status.plan fits (planner reasons for Planned=False live in planning/planner.py)."""
INVALID_SPEC = "InvalidSpec"
"""The spec fails validation (a field out of range, a wrong type); nothing changes until it is fixed."""
UNKNOWN_PRESET = "UnknownPreset"
"""spec.model.preset names no catalog entry and no architecture is given."""
NOT_PLANNED = "NotPlanned"
"""Available/Progressing when there is no plan for the current spec (Planned=False says why)."""
LEADER_WORKER_SET_NOT_INSTALLED = "LeaderWorkerSetNotInstalled"
"""The plan spans several nodes per replica and the LeaderWorkerSet API is not served here."""
RESOURCE_EXISTS = "ResourceExists"
"""An object with a child's name exists and this backend does not control it; it is left unchanged (never adopted)."""
API_REQUEST_FAILED = "ApiRequestFailed"
"""The API server refused or failed a request of this pass (quota, admission webhook, RBAC, outage)."""
REPLICAS_READY = "ReplicasReady"
"""Available=True: every desired replica is ready on the current spec."""
REPLICAS_NOT_READY = "ReplicasNotReady"
"""Available=False: some desired replicas are not ready yet, or not on the current spec."""
SCALED_TO_ZERO = "ScaledToZero"
"""Available=True: autoscaling with minReplicas 0 scaled an idle backend to 0 replicas (nothing is served)."""
ZERO_REPLICAS = "ZeroReplicas"
"""Available=True: spec.replicas is 0 with autoscaling off (nothing is served, on purpose)."""
ROLLING_OUT = "RollingOut"
"""Progressing=True: pods of the current spec are being created or replaced."""
ROLLOUT_COMPLETE = "RolloutComplete"
"""Progressing=False: the workload matches the current spec and replica count."""
AS_EXPECTED = "AsExpected"
"""Degraded=False."""
INSUFFICIENT_GPUS = "InsufficientGPUs"
"""More replicas are asked for than the matching nodes hold."""
UNSCHEDULABLE = "Unschedulable"
"""The scheduler cannot place a serving pod (its message is quoted)."""
IMAGE_PULL_FAILED = "ImagePullFailed"
"""A serving container image cannot be pulled."""
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
"""A serving container keeps exiting."""
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
"""A serving container cannot be created from its configuration (a missing Secret or ConfigMap key)."""
PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
"""The Deployment reports its progress deadline passed."""
CONFLICTING_HPA = "ConflictingHorizontalPodAutoscaler"
"""Another HorizontalPodAutoscaler scales the workload; the operator stopped writing its replicas."""
CHECKPOINT_INVALID = "CheckpointInvalid"
"""The serving pod's checkpoint check (init container) failed: its message names the path and what is wrong."""
KEDA_NOT_INSTALLED = "KEDANotInstalled"
"""autoscaling.mode keda and KEDA's ScaledObject CRD is not served here."""
COMPUTE_DOMAIN_NOT_INSTALLED = "ComputeDomainNotInstalled"
"""Tensor parallelism spans nodes of a multi-node NVLink clique and NVIDIA's ComputeDomain API is not served here."""
INVALID_POD_TEMPLATE = "InvalidPodTemplate"
"""spec.serving.podTemplate sets a label, annotation, env name, volume name or mount path the operator sets itself."""
ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
"""ModelReady: source.secretRef with a source.endpoint the operator's admin did not allow; the credentials are not sent."""
PROMETHEUS_NOT_ALLOWED = "PrometheusNotAllowed"
"""autoscaling.prometheus.url is not one the operator's admin allowed: the operator does not poll it (mode operator:
status.autoscaling.reason) and renders no ScaledObject for KEDA to poll (mode keda: Degraded)."""

# ---- event reasons (no condition) ----

DRAIN_BOUND_SHORT = "DrainBoundShort"
"""Warning event: the observed p99 request time exceeds half the drain bound; a leaving replica may cut requests."""

AUTOSCALER_CHURN = "AutoscalerChurn"
"""Warning event: pods were deleted before they turned Ready repeatedly within the last hour (cold starts wasted)."""
