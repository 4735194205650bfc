"""Status conditions of an LLMBackend: the four types every reconcile pass writes, and every reason.

Each pass writes all four types for the current generation (kstatus and Argo CD read a condition only for
the generation it was observed at); types not listed here are dropped. manifests/argocd/.../health.lua
maps them to Argo CD health states and README "Argo CD" documents the mapping.

Progress or failure (controller/conditions.py applies it; health.lua reads it the same way): waiting on the
operator's own work or on the cluster's (a download, an inspection, a cleanup, pods starting, nodes being
added) is Progressing=True with Degraded=False and Normal events, for at most spec.serving.progressDeadlineSeconds;
a failure that needs a person, or a wait past that deadline, is Degraded=True with a Warning event whose
message names what to change.
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
BACKEND_NAME_AMBIGUOUS = "BackendNameAmbiguous"
"""The plan spans several nodes, and the backend's name (stored before the CRD refused such names) ends with
'-' and digits: its LeaderWorkerSet's pods could be another backend's group. Recreate it under another name."""
GROUP_NAME_TAKEN = "GroupNameTaken"
"""A multi-node group this backend would add has a name (its leader pod, its workers' StatefulSet or a worker pod)
that an object of someone else holds in the namespace; that group and the ones after it are not created. Rename
the backend or lower replicas."""
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
ENGINE_FAILED = "EngineFailed"
"""A serving pod's inference engine died; its model ended the requests in flight and stopped the server, so the
container restarts (the message quotes the engine's error from the container's termination message)."""
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
"""spec.serving.podTemplate sets a label, annotation, env name, volume name or mount path the operator sets itself, or mounts a model cache claim writable."""
ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
"""ModelReady: source.secretRef with a source.endpoint the operator's admin did not allow; the credentials are not sent."""
PROMETHEUS_NOT_ALLOWED = "PrometheusNotAllowed"
"""autoscaling.prometheus.url is not one the operator's admin allowed: the operator does not poll it (mode operator:
status.autoscaling.reason) and renders no ScaledObject for KEDA to poll (mode keda: Degraded)."""
PROMETHEUS_QUERY_NOT_ALLOWED = "PrometheusQueryNotAllowed"
"""autoscaling.prometheus names a query the operator will not run: a removed free-form PromQL field (query,
activationQuery) of a stored backend, or an activationQueryName the admin did not define. Nothing is queried;
replicas stay (mode operator: status.autoscaling.reason; mode keda: Degraded, no ScaledObject)."""

# ---- event reasons (no condition) ----

SOURCE_REQUIRED = "SourceRequired"
"""spec.model.source is missing: the serving pods would have no weights to load."""
WAITING_FOR_NODES = "WaitingForNodes"
"""Progressing=True: serving pods wait for the scheduler (nodes being added, GPUs being freed), within the deadline."""
SERVING_CLAIM_NOT_FOUND = "ClaimNotFound"
"""A serving pod mounts a PersistentVolumeClaim that does not exist."""
SERVING_CLAIM_NOT_BOUND = "ClaimNotBound"
"""A serving pod mounts a PersistentVolumeClaim that no volume is bound to (past the deadline)."""
# ModelReady reasons of a download or inspection that does not move (controller/modelcache.py detects them).
NO_STORAGE_CLASS = "NoStorageClass"
"""The cache claim has no StorageClass (none given, no default in the cluster) and no volume is bound to it: the
download and the serving pods that mount it wait."""
CACHE_CLAIM_NOT_BOUND = "CacheClaimNotBound"
"""The claim of a download or inspection is not bound (the StorageClass may not provision ReadWriteMany)."""
FETCH_POD_UNSCHEDULABLE = "FetchPodUnschedulable"
"""The download or inspector pod cannot be scheduled (the scheduler's words are quoted)."""
FETCH_POD_NOT_CREATED = "FetchPodNotCreated"
"""The download or inspector Job has no pod (a ResourceQuota or LimitRange, an admission webhook)."""
DOWNLOADER_IMAGE_PULL_FAILED = "DownloaderImagePullFailed"
"""The download or inspector pod's image (the operator's own) cannot be pulled."""
WAITING_FOR_OWN_DOWNLOAD = "WaitingForOwnDownload"
"""Available=False: the serving pods of a hf:// or s3:// source are created once this backend's own download Job
(its own secretRef, or none) has finished; a copy another backend downloaded is never served before that."""
DOWNLOAD_STALLED = "DownloadStalled"
"""The download made no progress in bytes for spec.serving.progressDeadlineSeconds."""
CACHE_SIZE_UNKNOWN = "CacheSizeUnknown"
"""The cache claim would be created, but neither the checkpoint's index nor source.cache.size gives its size."""
RUNNER_UP_RUNNABLE = "RunnerUpRunnable"
"""Planned=True: the plan's pods cannot be placed on the GPUs free now, but a runner-up's could (the message names it)."""
RUNNABLE_PLAN_CHOSEN = "RunnablePlanChosen"
"""Planned=True: spec.planning.placement preferRunnable took the runner-up that fits the GPUs free now."""
DOWNLOAD_CANCELLED = "DownloadCancelled"
"""Normal event: no backend names a source any more; its download was stopped and its copy is cleaned up."""

DRAIN_BOUND_SHORT = "DrainBoundShort"
"""Warning event: the observed p99 request time exceeds half the drain bound; a leaving replica may cut requests."""

AUTOSCALER_CHURN = "AutoscalerChurn"
"""Warning event: pods were deleted before they turned Ready repeatedly within the last hour (cold starts wasted)."""

BURSTS_OVER_HEADROOM = "BurstsOverHeadroom"
"""Warning event: a recent burst rose well over what learnedHeadroomMax keeps standing and queued; the burst floor now
stands for such bursts (burstFloor auto), or the message says what to set."""

PREEMPTED_BY = "PreemptedBy"
"""Normal event and status.autoscaling.reason: a backend of higher priority on the same GPUs took replicas above
minReplicas (spec.autoscaling.priority); they drained first. status.autoscaling.preemptedBy names it."""

WAITING_FOR_CAPACITY = "WaitingForCapacity"
"""Normal event and status.autoscaling.reason: the backend wants GPUs of its pool that no backend of lower priority
can give up; status.autoscaling.waitingForCapacity names who holds them. A Warning event when no node of the pool
could hold its pods, or its namespace's ResourceQuota on GPUs admits fewer replicas (their demand is not claimed:
waitingForCapacity says why and what to change)."""
