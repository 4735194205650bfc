"""The LLMBackend API (llmbackend.dev/v1alpha1).

These pydantic models are the single source of truth for the CRD schema:
`llmbackend crd` generates crds/llmbackend.yaml from them (see api/crdgen.py),
and a test fails when the committed YAML drifts.

Field names are camelCase on the wire (aliases) and snake_case in Python.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

GROUP = "llmbackend.dev"
VERSION = "v1alpha1"
KIND = "LLMBackend"
PLURAL = "llmbackends"
SINGULAR = "llmbackend"
SHORT_NAMES = ["llmb"]
CATEGORIES = ["llm"]

DEFAULT_TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3"
DEFAULT_VLLM_IMAGE = "nvcr.io/nvidia/tritonserver:25.10-vllm-python-py3"

# Kubernetes quantity strings ("8", "500m", "64Gi").
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# Values that end up in command lines or config.pbtxt: no quotes, shell or pbtxt metacharacters.
SAFE_PATH_PATTERN = r"^[A-Za-z0-9._/\-]+$"
SAFE_URI_PATTERN = r"^[a-z][a-z0-9+.\-]*://[A-Za-z0-9._~:/?#@!$&()*+,;=%\-]+$"
IMAGE_PATTERN = r"^[a-z0-9]+([._\-/:@][A-Za-z0-9]+)*$"
# Kubernetes label syntax (node selectors and tolerations end up in pod specs).
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


class _Model(BaseModel):
    """Base: camelCase aliases, reject unknown fields (the API server prunes them anyway)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def dump(self) -> dict[str, Any]:
        """Wire form: camelCase, no unset/None fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Quantization(str, Enum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8_WO = "int8_wo"
    INT4_AWQ = "int4_awq"


class KVCacheDtype(str, Enum):
    AUTO = "auto"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class Backend(str, Enum):
    TENSORRTLLM = "tensorrtllm"
    VLLM = "vllm"


class Objective(str, Enum):
    LATENCY = "latency"
    THROUGHPUT = "throughput"


class ModelArchitecture(_Model):
    """Transformer shape: what the planner needs to size weights and KV cache."""

    num_layers: int = Field(ge=1, le=1024, description="Number of transformer layers (pipeline stages split these).")
    hidden_size: int = Field(ge=64, le=131072, description="Model hidden size.")
    num_attention_heads: int = Field(ge=1, le=1024, description="Attention (query) heads; tensor parallelism must divide this.")
    num_key_value_heads: int = Field(ge=1, le=1024, description="Key/value heads (GQA). Equal to numAttentionHeads for MHA.")
    head_dim: int = Field(ge=8, le=1024, description="Dimension of one attention head.")
    vocab_size: int = Field(ge=1, le=4_000_000, description="Vocabulary size.")
    parameter_count: int = Field(
        ge=1_000_000, le=100_000_000_000_000,
        description="Total parameters (all experts for mixture-of-experts models).",
    )
    active_parameter_count: int | None = Field(
        default=None, ge=1_000_000, le=100_000_000_000_000,
        description="Parameters used per token (MoE: shared + active routed experts); defaults to parameterCount.",
    )
    num_experts: int | None = Field(default=None, ge=2, le=4096, description="MoE: routed experts per MoE layer.")
    num_experts_per_token: int | None = Field(default=None, ge=1, le=4096, description="MoE: routed experts active per token.")
    num_shared_experts: int | None = Field(default=None, ge=0, le=64, description="MoE: always-active shared experts per MoE layer.")
    kv_lora_rank: int | None = Field(
        default=None, ge=1, le=65536,
        description="MLA (DeepSeek-V2/V3): rank of the compressed KV latent; one latent per token per layer, replicated on every TP rank.",
    )
    qk_rope_head_dim: int | None = Field(default=None, ge=0, le=4096, description="MLA: decoupled RoPE key dimension cached beside the latent.")
    sliding_window: int | None = Field(default=None, ge=1, le=16_777_216, description="Sliding-window attention: tokens a windowed layer caches.")
    sliding_window_layers: int | None = Field(
        default=None, ge=0, le=1024,
        description="How many of numLayers use the sliding window (the rest attend to the full context); defaults to all when slidingWindow is set.",
    )
    tie_word_embeddings: bool | None = Field(default=None, description="Input embeddings and lm_head share one matrix.")
    weight_bytes: int | None = Field(
        default=None, ge=1, le=1_000_000_000_000_000,
        description="Exact weight bytes of the checkpoint (safetensors index metadata.total_size); overrides parameterCount x bytes per parameter.",
    )
    checkpoint_quantization: str | None = Field(
        default=None, max_length=63, pattern=r"^[a-z0-9_\-]+$",
        description="Quantization the checkpoint declares in its quantization_config (e.g. fp8, awq, gptq, mxfp4, compressed-tensors); empty for 16-bit checkpoints.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.numKeyValueHeads <= self.numAttentionHeads && self.numAttentionHeads % self.numKeyValueHeads == 0",
                    "message": "numKeyValueHeads must divide numAttentionHeads",
                }
            ]
        }
    )


class PVCSource(_Model):
    claim_name: str = Field(
        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="PersistentVolumeClaim in the same namespace holding weights, tokenizer and engines.",
    )
    path: str = Field(
        default="/", max_length=1024, pattern=SAFE_PATH_PATTERN,
        description="Directory inside the claim (mounted read-only at /models).",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "!self.path.contains('..')", "message": "path must not contain '..'"}
            ]
        }
    )

    @field_validator("path")
    @classmethod
    def _no_parent_segments(cls, value: str) -> str:
        if ".." in value:
            raise ValueError("path must not contain '..'")
        return value


# Model sources the download Job understands: hf://org/name[@revision] and s3://bucket[/prefix].
HF_URI_PATTERN = r"hf://[A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*(@[A-Za-z0-9._\-]+)?"
S3_URI_PATTERN = r"s3://[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9._~/\-]*)?"
MODEL_URI_PATTERN = rf"^({HF_URI_PATTERN}|{S3_URI_PATTERN})$"
DNS_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class SecretReference(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN, description="Secret in the backend's namespace.")


class ModelCacheSpec(_Model):
    """Where URI sources are downloaded to: a PersistentVolumeClaim shared by every backend that uses it."""

    claim_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_NAME_PATTERN,
        description="Cache claim in the backend's namespace (default llmbackend-model-cache; created when missing, never deleted with a backend).",
    )
    size: str | None = Field(
        default=None, pattern=QUANTITY_PATTERN,
        description="Size of a claim the operator creates (default: the checkpoint's size plus 10 %, at least 10Gi).",
    )
    storage_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_NAME_PATTERN, description="Storage class of a claim the operator creates.")


class ModelSource(_Model):
    """Where weights, tokenizer and (for tensorrtllm) engines come from: a PVC, or a URI downloaded once into a cache."""

    pvc: PVCSource | None = Field(default=None, description="Read weights/engines from a PersistentVolumeClaim.")
    uri: str | None = Field(
        default=None, max_length=2048, pattern=MODEL_URI_PATTERN,
        description=(
            "hf://org/name[@revision] (Hugging Face Hub; revision: branch, tag or commit, default main) or "
            "s3://bucket[/prefix] (any S3-compatible store): downloaded once into the model cache and mounted read-only."
        ),
    )
    secret_ref: SecretReference | None = Field(
        default=None,
        description=(
            "Credentials: for hf:// the key HF_TOKEN (gated or private repositories); for s3:// the keys "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (optional AWS_SESSION_TOKEN)."
        ),
    )
    endpoint: str | None = Field(
        default=None, max_length=2048, pattern=r"^https?://[A-Za-z0-9._:\-/]+$",
        description="s3://: endpoint of an S3-compatible store (default AWS); hf://: a Hub mirror (default https://huggingface.co).",
    )
    region: str | None = Field(default=None, max_length=64, pattern=r"^[a-z0-9\-]+$", description="s3://: signing region (default us-east-1).")
    cache: ModelCacheSpec | None = Field(default=None, description="Model cache for URI sources.")

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.pvc) != has(self.uri)", "message": "set exactly one of pvc or uri"},
                {"rule": "has(self.uri) || !(has(self.secretRef) || has(self.endpoint) || has(self.cache))",
                 "message": "secretRef, endpoint and cache apply to uri sources only"},
                {"rule": "!has(self.region) || (has(self.uri) && self.uri.startsWith('s3://'))",
                 "message": "region applies to s3:// sources only"},
                {"rule": "!has(self.uri) || !self.uri.matches('/[.]{1,2}(/|$)')", "message": "uri must not contain '.' or '..' segments"},
            ]
        }
    )

    @field_validator("uri")
    @classmethod
    def _no_parent_segments_in_uri(cls, value: str | None) -> str | None:
        if value is not None and any(seg in (".", "..") for seg in value.split("://", 1)[1].split("/")):
            raise ValueError("uri must not contain '.' or '..' segments")
        return value


class ModelSpec(_Model):
    """The model to serve: a preset from the built-in catalog or an explicit architecture."""

    preset: str | None = Field(
        default=None, max_length=63, pattern=r"^[a-z0-9][a-z0-9.\-]*$",
        description="Name of a built-in model (e.g. llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, mixtral-8x7b).",
    )
    architecture: ModelArchitecture | None = Field(
        default=None,
        description="Explicit architecture, for models not in the catalog. With neither preset nor architecture, a uri source's config.json and safetensors index are read instead.",
    )
    name: str | None = Field(
        default=None, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
        description="Display name of the model (defaults to the preset or the CR name).",
    )
    source: ModelSource | None = Field(default=None, description="Where weights and engines come from.")

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "!(has(self.preset) && has(self.architecture))", "message": "set exactly one of preset or architecture"},
                {
                    "rule": "has(self.preset) || has(self.architecture) || (has(self.source) && has(self.source.uri))",
                    "message": "set exactly one of preset or architecture, or leave both out with a source.uri: the architecture is then read from the checkpoint's config.json",
                },
            ]
        }
    )


class BatchSchedulerPolicy(str, Enum):
    MAX_UTILIZATION = "max_utilization"
    GUARANTEED_NO_EVICT = "guaranteed_no_evict"


class EngineSpec(_Model):
    """Inference engine and its build/runtime limits."""

    backend: Backend = Field(default=Backend.TENSORRTLLM, description="Triton backend: tensorrtllm or vllm.")
    quantization: Quantization = Field(default=Quantization.BF16, description="Weight precision.")
    kv_cache_dtype: KVCacheDtype = Field(
        default=KVCacheDtype.AUTO,
        description="KV cache precision; auto = fp8 when quantization is fp8, else 16-bit.",
    )
    max_batch_size: int = Field(default=64, ge=1, le=4096, description="Maximum requests batched in flight by the engine.")
    max_input_len: int = Field(default=2048, ge=1, le=1_048_576, description="Maximum prompt length in tokens.")
    max_seq_len: int = Field(default=4096, ge=2, le=1_048_576, description="Maximum prompt + output length in tokens.")
    max_num_tokens: int = Field(default=8192, ge=1, le=1_048_576, description="Maximum tokens per engine iteration.")
    kv_cache_free_gpu_mem_fraction: float = Field(
        default=0.9, ge=0.05, le=0.99,
        description="Fraction of GPU memory left after weights that the KV cache may take.",
    )
    batch_scheduler_policy: BatchSchedulerPolicy = Field(
        default=BatchSchedulerPolicy.MAX_UTILIZATION, description="In-flight batch scheduler policy."
    )
    enable_chunked_context: bool = Field(default=True, description="Split long prompts across iterations.")
    enable_kv_cache_reuse: bool = Field(default=False, description="Reuse KV blocks across requests sharing a prefix.")
    streaming: bool = Field(default=True, description="Decoupled (streaming) transaction policy.")
    image: str | None = Field(
        default=None, max_length=512, pattern=IMAGE_PATTERN,
        description="Serving image (defaults to the Triton TRT-LLM or vLLM image).",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.maxInputLen < self.maxSeqLen", "message": "maxInputLen must be less than maxSeqLen"}
            ]
        }
    )


class ParallelismSpec(_Model):
    """Sharding. Leave both empty for automatic planning from the cluster's GPUs."""

    tensor_parallel: int | None = Field(default=None, ge=1, le=64, description="Tensor-parallel size (GPUs sharing each layer).")
    pipeline_parallel: int | None = Field(default=None, ge=1, le=64, description="Pipeline-parallel size (stages of layers).")
    expert_parallel: int | None = Field(
        default=None, ge=1, le=512,
        description="MoE only: expert-parallel size (experts spread over this many of the TP ranks; must divide tensorParallel). Empty: planned.",
    )
    objective: Objective = Field(
        default=Objective.LATENCY,
        description="Tie-break between plans of equal GPU count: latency prefers wider TP, throughput prefers more replicas/PP.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.pipelineParallel) || has(self.tensorParallel)",
                    "message": "pipelineParallel requires tensorParallel",
                },
                {
                    "rule": "!has(self.tensorParallel) || !has(self.pipelineParallel) || self.tensorParallel * self.pipelineParallel <= 512",
                    "message": "tensorParallel x pipelineParallel must be at most 512 GPUs",
                },
            ]
        }
    )

    @property
    def is_auto(self) -> bool:
        return self.tensor_parallel is None


class MetricsSource(str, Enum):
    TRITON = "triton"
    PROMETHEUS = "prometheus"


class AutoscalingMode(str, Enum):
    OPERATOR = "operator"
    HPA = "hpa"


class PrometheusSource(_Model):
    url: str = Field(max_length=2048, pattern=r"^https?://[A-Za-z0-9._:\-/]+$", description="Prometheus base URL.")
    query: str | None = Field(
        default=None, max_length=4096,
        description="PromQL returning the ratio; defaults to the triton:queue_compute:ratio recording rule for this backend's pods.",
    )


class AutoscalingSpec(_Model):
    """Scale on Triton's queue-to-compute ratio (time in queue / time in compute)."""

    enabled: bool = Field(default=False, description="Turn autoscaling on; then the operator owns the workload's replicas.")
    mode: AutoscalingMode = Field(
        default=AutoscalingMode.OPERATOR,
        description="operator: built-in loop; hpa: render an autoscaling/v2 HPA on the custom metric instead.",
    )
    source: MetricsSource = Field(default=MetricsSource.TRITON, description="Where the ratio comes from.")
    prometheus: PrometheusSource | None = Field(default=None, description="Required when source is prometheus.")
    min_replicas: int = Field(default=1, ge=0, le=1000)
    max_replicas: int = Field(default=4, ge=1, le=1000)
    target_ratio: float = Field(default=1.0, gt=0, le=100, description="Target queue/compute ratio per replica.")
    tolerance: float = Field(default=0.1, ge=0, le=1, description="No scaling while |ratio/target - 1| is within this band.")
    window_seconds: int = Field(default=60, ge=5, le=3600, description="Window over which the ratio is computed.")
    sync_period_seconds: int = Field(default=15, ge=1, le=600, description="How often the ratio is evaluated.")
    scale_up_stabilization_seconds: int = Field(default=0, ge=0, le=3600)
    scale_down_stabilization_seconds: int = Field(default=300, ge=0, le=86400)
    max_scale_up_step: int = Field(default=4, ge=1, le=1000, description="Most replicas added in one decision.")
    max_scale_down_step: int = Field(default=1, ge=1, le=1000, description="Most replicas removed in one decision.")

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"},
                {"rule": "self.source != 'prometheus' || has(self.prometheus)", "message": "source prometheus requires prometheus.url"},
            ]
        }
    )


class Toleration(_Model):
    key: str | None = Field(default=None, max_length=316, pattern=LABEL_KEY_PATTERN)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE_PATTERN)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class ResourceRequests(_Model):
    cpu: str | None = Field(default=None, pattern=QUANTITY_PATTERN, description="CPU request per pod (limit equals request).")
    memory: str | None = Field(default=None, pattern=QUANTITY_PATTERN, description="Memory request per pod (limit equals request).")


class SchedulingSpec(_Model):
    node_selector: dict[
        Annotated[str, Field(max_length=316, pattern=LABEL_KEY_PATTERN)],
        Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)],
    ] | None = Field(
        default=None, max_length=32, description="Extra node labels the serving pods require (also restricts planning)."
    )
    tolerations: list[Toleration] | None = Field(default=None, max_length=32)
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    resources: ResourceRequests | None = None


class LLMBackendSpec(_Model):
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec, json_schema_extra=lambda s: s.update(default=EngineSpec().dump()))
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec, json_schema_extra=lambda s: s.update(default=ParallelismSpec().dump()))
    replicas: int = Field(default=1, ge=0, le=1000, description="Replicas (model copies) when autoscaling is off.")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, json_schema_extra=lambda s: s.update(default=AutoscalingSpec().dump()))
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec, json_schema_extra=lambda s: s.update(default=SchedulingSpec().dump()))


# ---- status ----


class Condition(_Model):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str
    observed_generation: int | None = None


class PlanStatus(_Model):
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int | None = Field(default=None, description="MoE: expert-parallel size inside the TP group (absent for dense models).")
    gpus_per_replica: int
    nodes_per_replica: int
    memory_per_gpu_bytes: int
    gpu_product: str | None = None
    topology_source: Literal["annotation", "inferred", "explicit"] | None = None
    explanation: str = Field(default="", max_length=8192)
    input_hash: str | None = Field(
        default=None, max_length=64,
        description="Hash of the spec fields this plan was made for; the plan is kept while they are unchanged.",
    )


class EndpointStatus(_Model):
    service: str
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002


class AutoscalingStatus(_Model):
    current_ratio: str | None = Field(default=None, description="Last measured queue/compute ratio (string, 3 decimals).")
    desired_replicas: int | None = None
    last_scale_time: str | None = None
    reason: str | None = None
    message: str | None = None


class ModelStatus(_Model):
    """Download of a URI source into the model cache."""

    phase: Literal["Resolving", "Downloading", "Ready", "Failed"] | None = None
    source: str | None = None
    resolved_revision: str | None = Field(default=None, description="Commit (hf://) or listing digest (s3://) the cache holds.")
    bytes_done: int | None = None
    bytes_total: int | None = None
    claim_name: str | None = None
    path: str | None = Field(default=None, description="Directory inside the cache claim.")


class LLMBackendStatus(_Model):
    observed_generation: int | None = None
    conditions: list[Condition] | None = None
    plan: PlanStatus | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    selector: str | None = Field(default=None, description="Label selector of the serving pods (scale subresource).")
    endpoint: EndpointStatus | None = None
    autoscaling: AutoscalingStatus | None = None
    rollout_strategy: Literal["RollingUpdate", "Recreate"] | None = None
    model_name: str | None = None
    backend: str | None = None
    model: ModelStatus | None = None


class LLMBackend(_Model):
    """A model served by Triton Inference Server with the TensorRT-LLM (or vLLM) backend."""

    api_version: Literal["llmbackend.dev/v1alpha1"] = "llmbackend.dev/v1alpha1"
    kind: Literal["LLMBackend"] = "LLMBackend"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LLMBackendSpec
    status: LLMBackendStatus | None = None

    model_config = ConfigDict(extra="ignore")
