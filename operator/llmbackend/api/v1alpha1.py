"""The LLMBackend API (llmbackend.dev/v1alpha1).

These pydantic models are the single source of truth for the CRD schema:
`llmbackend crd` generates crds/llmbackend.yaml from them (see api/crdgen.py),
and a test fails when the committed YAML drifts.

Field names are camelCase on the wire (aliases) and snake_case in Python.
"""

from __future__ import annotations

import posixpath
import re
from enum import Enum
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .. import __version__
from . import cron

GROUP = "llmbackend.dev"
VERSION = "v1alpha1"
KIND = "LLMBackend"
PLURAL = "llmbackends"
SINGULAR = "llmbackend"
SHORT_NAMES = ["llmb"]
CATEGORIES = ["llm"]
# Children are named <backend name><suffix> (suffix "" for the main ones). A backend's name may not end with one of
# these (the CRD's CEL rule), so two backends' children never share a name: `x` and `x-epp` would both own
# Deployment x-epp. No suffix ends with another (tests/unit/test_child_names.py), which makes the rule sufficient.
EPP_SUFFIX = "-epp"
ACTIVATOR_SUFFIX = "-activator"
SERVING_SUFFIX = "-serving"
MODEL_REPO_SUFFIX = "-model-repo"
LAUNCHER_SUFFIX = "-launcher"
CHILD_NAME_SUFFIXES = (EPP_SUFFIX, ACTIVATOR_SUFFIX, SERVING_SUFFIX, MODEL_REPO_SUFFIX, LAUNCHER_SUFFIX)
# A multi-node backend's LeaderWorkerSet is named as the backend, and LWS names what it creates from that name:
# StatefulSets <name> and <name>-<group>, pods <name>-<group> (leaders) and <name>-<group>-<index> (workers). So a
# name ending in -<digits> could be another backend's group (`llama-0` is `llama`'s group 0): the CRD refuses such
# names for new backends; one stored before the rule is served on one node but refused a LeaderWorkerSet
# (BackendNameAmbiguous). Children of allowed names never collide: tests/unit/test_child_names.py.
GROUP_INDEX_NAME_PATTERN = r"-[0-9]+$"


def name_ends_with_group_index(name: str) -> bool:
    """The name could be another backend's LeaderWorkerSet group (`<backend>-<group>`)."""
    return re.search(GROUP_INDEX_NAME_PATTERN, name) is not None

# The one place the default serving images are set: NGC Triton release <yy.mm> with TensorRT-LLM (LLM API) or vLLM.
TRITON_RELEASE = "26.10"
DEFAULT_TRITON_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-trtllm-python-py3"
DEFAULT_VLLM_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-vllm-python-py3"
# The operator's own image (the one place its default is set; manifests/default pins the same tag). It ships
# kubectl, which multi-node leaders use to start ranks in workers, and model_fetch, which the model Jobs run.
OPERATOR_IMAGE = f"ghcr.io/llmbackend/operator:{__version__}"
DEFAULT_LAUNCHER_IMAGE = OPERATOR_IMAGE
LAUNCHER_EXEC = "/opt/llmbackend/bin/llmb-exec"  # launcher/main.go, built into the operator image

# Kubernetes quantity strings ("8", "500m", "64Gi"), at most 64 characters: no node has 10^60 of anything, and a
# longer number is past what planning/quantity.py reads (or Python turns into text).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
QUANTITY_MAX_LENGTH = 64
# Values that end up in command lines or config.pbtxt: no quotes, shell or pbtxt metacharacters.
SAFE_PATH_PATTERN = r"^[A-Za-z0-9._/\-]+$"
SAFE_URI_PATTERN = r"^[a-z][a-z0-9+.\-]*://[A-Za-z0-9._~:/?#@!$&()*+,;=%\-]+$"
IMAGE_PATTERN = r"^[a-z0-9]+([._\-/:@][A-Za-z0-9]+)*$"
# Kubernetes label syntax (node selectors and tolerations end up in pod specs): a qualified name, whose name part
# (after the optional prefix/) has at most 63 characters (k8s.io/apimachinery pkg/util/validation/validation.go
# IsQualifiedName, which the API server applies to the pod template's label keys, node selector and toleration keys).
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
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
    # 4-bit floating point, read from a checkpoint quantized ahead (neither engine quantizes to fp4 at load):
    # NVFP4 (NVIDIA ModelOpt: e2m1 values, one fp8 scale per 16) computes on Blackwell's FP4 tensor cores and is
    # refused on older GPUs; MXFP4 (OCP microscaling: one e8m0 scale per 32; gpt-oss) computes in fp4 on Blackwell
    # and runs weight-only (16-bit math) elsewhere.
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"


class KVCacheDtype(str, Enum):
    AUTO = "auto"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class Backend(str, Enum):
    TENSORRTLLM = "tensorrtllm"
    VLLM = "vllm"


class EngineFormat(str, Enum):
    """How the tensorrtllm backend runs the model."""

    LLMAPI = "llmapi"  # TensorRT-LLM's LLM API loads the Hugging Face checkpoint (current images; no engine build)
    ENGINE = "engine"  # legacy: prebuilt TensorRT engines + the C++ inflight batcher ensemble (older images only)


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
        description="PersistentVolumeClaim in the same namespace holding weights, tokenizer and engines (its author may create pods there, or an admin granted use on it by name: docs/security.md).",
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
# org, name, bucket and revision become directories of the model cache: no "..", no leading or trailing "." (git
# ref-name rules for the revision, which is a branch, a tag or a 40-hex commit). model_fetch.parse_uri checks the same.
_NAME_PART = r"[A-Za-z0-9][A-Za-z0-9_\-]*([.][A-Za-z0-9_\-]+)*"  # model_fetch.REPO_PART: org, name, bucket
HF_URI_PATTERN = rf"hf://{_NAME_PART}/{_NAME_PART}(@[A-Za-z0-9_\-]+([.][A-Za-z0-9_\-]+)*)?"
S3_URI_PATTERN = rf"s3://{_NAME_PART}(/[A-Za-z0-9._~\-]{{1,255}})*/?"  # no empty prefix segment
MODEL_URI_PATTERN = rf"^({HF_URI_PATTERN}|{S3_URI_PATTERN})$"
DNS_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class SecretReference(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN, description="Secret in the backend's namespace.")


class ModelCacheSpec(_Model):
    """Where URI sources are downloaded to: a PersistentVolumeClaim shared by every backend that uses it."""

    claim_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_NAME_PATTERN,
        description="Cache claim in the backend's namespace (default llmbackend-model-cache; created when missing, never deleted with a backend). The download Job writes into it: naming another claim needs the right to create pods in the namespace (docs/security.md).",
    )
    size: str | None = Field(
        default=None, max_length=QUANTITY_MAX_LENGTH, pattern=QUANTITY_PATTERN,
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
                {"rule": "!has(self.uri) || !self.uri.startsWith('hf://') || !self.uri.endsWith('.lock')",
                 "message": "the revision of an hf:// uri must not end with '.lock' (git ref-name rules)"},
            ]
        }
    )

    @field_validator("uri")
    @classmethod
    def _no_parent_segments_in_uri(cls, value: str | None) -> str | None:
        if value is not None and any(seg in (".", "..") for seg in value.split("://", 1)[1].split("/")):
            raise ValueError("uri must not contain '.' or '..' segments")
        if value is not None and value.startswith("hf://") and value.endswith(".lock"):
            raise ValueError("the revision of an hf:// uri must not end with '.lock' (git ref-name rules)")
        return value


SOURCE_REQUIRED_MESSAGE = (
    "set spec.model.source: the serving pods load the weights from it, as source.pvc (claimName and path of a "
    "PersistentVolumeClaim holding the checkpoint) or source.uri (hf://org/name or s3://bucket/prefix, downloaded "
    "once into the model cache); with neither preset nor architecture the architecture is read from its config.json"
)


class ModelSpec(_Model):
    """The model to serve: a preset from the built-in catalog or an explicit architecture."""

    preset: str | None = Field(
        default=None, max_length=63, pattern=r"^[a-z0-9][a-z0-9.\-]*$",
        description="Name of a built-in model (e.g. llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, mixtral-8x7b).",
    )
    architecture: ModelArchitecture | None = Field(
        default=None,
        description="Explicit architecture, for models not in the catalog. With neither preset nor architecture, the source's config.json and safetensors index are read instead (a pvc source through a small inspector Job).",
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
                    "rule": "has(self.source)",
                    "message": SOURCE_REQUIRED_MESSAGE,
                },
            ]
        }
    )


class BatchSchedulerPolicy(str, Enum):
    MAX_UTILIZATION = "max_utilization"
    GUARANTEED_NO_EVICT = "guaranteed_no_evict"


class VLLMEngineSpec(_Model):
    """Settings that only the vllm backend reads."""

    gpu_memory_utilization: float = Field(
        default=0.9, ge=0.05, le=0.99,
        description="vLLM's gpu_memory_utilization: fraction of each GPU's TOTAL memory vLLM may use for weights, "
                    "activations and KV cache together (not TensorRT-LLM's kvCacheFreeGpuMemFraction, which is a "
                    "fraction of the memory left after weights). The planner fits vLLM plans into this fraction.",
    )


class SpeculativeMethod(str, Enum):
    MTP = "mtp"  # the checkpoint's own multi-token-prediction layer (DeepSeek-V3/R1)
    EAGLE3 = "eagle3"  # an EAGLE-3 draft head trained for the model
    DRAFT_MODEL = "draft_model"  # a smaller model of the same tokenizer


# Per draft token acceptance the estimate assumes when the spec gives none. MTP: DeepSeek-V3's report gives 85-90 %
# for the first MTP token; later tokens of a chain are accepted less often, 0.7 across 3 keeps the chain's mean
# accepted length near the ~2.5 NVIDIA's MTP3 posts report. EAGLE-3 and draft models depend on the data and the draft:
# 0.6 and 0.5 are middling figures, not measurements. Set acceptanceRate from your own engine's metrics.
DEFAULT_ACCEPTANCE = {SpeculativeMethod.MTP: 0.7, SpeculativeMethod.EAGLE3: 0.6, SpeculativeMethod.DRAFT_MODEL: 0.5}


class SpeculativeSpec(_Model):
    """Speculative decoding: a cheap drafter proposes draftTokens tokens, the model verifies them in one step."""

    method: SpeculativeMethod = Field(
        description="mtp: the checkpoint's multi-token-prediction layer (DeepSeek-V3/R1-class, MLA models); eagle3: an "
                    "EAGLE-3 draft head; draft_model: a smaller model with the same tokenizer.")
    draft_tokens: int = Field(default=3, ge=1, le=8, description="Tokens drafted a step (MTP: num_nextn_predict_layers).")
    acceptance_rate: float | None = Field(
        default=None, ge=0.0, le=0.99,
        description="Estimate only: the chance each drafted token is accepted. Empty: mtp 0.7, eagle3 0.6, "
                    "draft_model 0.5 (middling figures; measure yours).")
    draft_path: str | None = Field(
        default=None, max_length=256, pattern=SAFE_PATH_PATTERN,
        description="eagle3/draft_model: the draft's Hugging Face checkpoint directory, relative to the model's "
                    "(it comes with the model's source, e.g. a subdirectory of the same claim or repository copy).")
    draft_parameter_count: int | None = Field(
        default=None, ge=1_000_000, le=1_000_000_000_000,
        description="eagle3/draft_model: the draft's parameters (its 16-bit weights are sized per GPU). Empty: an "
                    "EAGLE-3 head is sized as one decoder layer of the model plus its lm_head; draft_model needs it.")

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.method == 'mtp' ? !has(self.draftPath) : has(self.draftPath)",
                 "message": "draftPath is required for eagle3 and draft_model, and not taken by mtp"},
                {"rule": "self.method != 'draft_model' || has(self.draftParameterCount)",
                 "message": "draft_model needs draftParameterCount"},
                {"rule": "!has(self.draftPath) || !self.draftPath.contains('..')",
                 "message": "draftPath must not contain '..'"},
            ]
        }
    )

    @field_validator("draft_path")
    @classmethod
    def _no_parent_segments(cls, value: str | None) -> str | None:
        if value is not None and (".." in value or value.startswith("/")):
            raise ValueError("draftPath must be relative to the model's directory, without '..'")
        return value

    @model_validator(mode="after")
    def _draft_source(self) -> SpeculativeSpec:
        if (self.method == SpeculativeMethod.MTP) == (self.draft_path is not None):
            raise ValueError("draftPath is required for eagle3 and draft_model, and not taken by mtp")
        if self.method == SpeculativeMethod.DRAFT_MODEL and self.draft_parameter_count is None:
            raise ValueError("draft_model needs draftParameterCount")
        return self

    @property
    def acceptance(self) -> float:
        return self.acceptance_rate if self.acceptance_rate is not None else DEFAULT_ACCEPTANCE[
            SpeculativeMethod(self.method)]

# vLLM takes only these ranks (vllm/config/lora.py MaxLoRARanks at 0.31.0); TensorRT-LLM's LoraConfig.max_lora_rank
# takes any int. One list for both engines: a backend can switch engines without an invalid rank.
LoRARank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]
DEFAULT_MAX_LORA_RANK: LoRARank = 64  # TensorRT-LLM's LoraConfig default (tensorrt_llm/lora_helper.py)
DEFAULT_MAX_LORAS = 4
DEFAULT_MAX_CPU_LORAS = 8


class LoRASpec(_Model):
    """LoRA adapter serving in the engine (spec.adapters). Defaults apply when adapters are set and this is not; set
    it to keep LoRA on while no adapter is listed (the first adapter then needs no restart)."""

    max_rank: LoRARank = Field(
        default=DEFAULT_MAX_LORA_RANK,
        description="Largest adapter rank (adapter_config.json r) the engine serves: TensorRT-LLM's and vLLM's "
                    "max_lora_rank. An adapter of a higher rank is refused (status.adapters, AdaptersReady).",
    )
    max_loras: int = Field(
        default=DEFAULT_MAX_LORAS, ge=1, le=256,
        description="Adapters in GPU memory at once (max_loras): the planner reserves max_loras x the weights of an "
                    "adapter of maxRank on every GPU.",
    )
    max_cpu_loras: int = Field(
        default=DEFAULT_MAX_CPU_LORAS, ge=1, le=4096,
        description="Adapters kept in host memory (max_cpu_loras, at least maxLoras); others are read again from "
                    "the volume when asked for.",
    )

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self.maxCpuLoras >= self.maxLoras", "message": "maxCpuLoras must be at least maxLoras"}]})

    @model_validator(mode="after")
    def _cpu_holds_gpu(self) -> LoRASpec:
        if self.max_cpu_loras < self.max_loras:
            raise ValueError("maxCpuLoras must be at least maxLoras")
        return self


class EngineSpec(_Model):
    """Inference engine and its build/runtime limits."""

    backend: Backend = Field(default=Backend.TENSORRTLLM, description="Triton backend: tensorrtllm or vllm.")
    format: EngineFormat = Field(
        default=EngineFormat.LLMAPI,
        description="tensorrtllm only. llmapi: the operator's Python model runs TensorRT-LLM's LLM API on the Hugging "
        "Face checkpoint at /models (current images, no engine build). engine: legacy prebuilt TensorRT engines "
        "served by the inflight-batcher ensemble; only for images that still ship that backend.",
    )
    quantization: Quantization = Field(
        default=Quantization.BF16,
        description="Weight precision. nvfp4 and mxfp4 need a checkpoint quantized ahead (ModelOpt NVFP4, gpt-oss "
                    "MXFP4); nvfp4 runs only on Blackwell (compute capability 10.0+), mxfp4 computes in fp4 on "
                    "Blackwell and weight-only elsewhere.",
    )
    kv_cache_dtype: KVCacheDtype = Field(
        default=KVCacheDtype.AUTO,
        description="KV cache precision; auto = fp8 when quantization is fp8, else 16-bit (with nvfp4/mxfp4 an fp8 "
                    "KV cache is an explicit choice: set fp8).",
    )
    max_batch_size: int = Field(default=64, ge=1, le=4096, description="Maximum requests batched in flight by the engine.")
    max_input_len: int = Field(default=2048, ge=1, le=1_048_576, description="Maximum prompt length in tokens.")
    max_seq_len: int = Field(default=4096, ge=2, le=1_048_576, description="Maximum prompt + output length in tokens.")
    max_num_tokens: int = Field(default=8192, ge=1, le=1_048_576, description="Maximum tokens per engine iteration.")
    kv_cache_free_gpu_mem_fraction: float = Field(
        default=0.9, ge=0.05, le=0.99,
        description="TensorRT-LLM: fraction of the GPU memory left free after weights (and activations) that the KV cache takes; the planner sizes with it. vLLM backends use vllm.gpuMemoryUtilization instead.",
    )
    kv_cache_min_sequences: int | None = Field(
        default=None, ge=1, le=65536,
        description="KV sizing: the KV cache must hold at least this many full-length (maxSeqLen) sequences; the engine batches as many as fit, up to maxBatchSize (status.plan.achievableConcurrency). Empty: worst case, maxBatchSize x maxSeqLen.",
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
    speculative: SpeculativeSpec | None = Field(
        default=None,
        description="Speculative decoding (MTP, EAGLE-3 or a draft model): fewer steps per output token at low load, "
                    "more work per step; the planner sizes the draft's memory and estimates the effect.",
    )
    vllm: VLLMEngineSpec = Field(
        default_factory=VLLMEngineSpec, description="vllm backend only: vLLM's own engine settings.",
        json_schema_extra=lambda s: s.update(default=VLLMEngineSpec().dump()),
    )
    lora: LoRASpec | None = Field(
        default=None,
        description="LoRA adapter serving (docs/adapters.md). Empty: on with the defaults while spec.adapters lists "
                    "one, off otherwise.",
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
    attention_data_parallel: bool | None = Field(
        default=None,
        description="MoE only: attention data parallelism over the tensorParallel GPUs (TensorRT-LLM enable_attention_dp; "
                    "vLLM data parallel attention with expert parallel): each GPU attends for its own requests and holds "
                    "only their KV cache (attention weights replicated, routed experts spread by EP); maxBatchSize "
                    "stays the replica's total. Pays off with many concurrent requests and MLA (DeepSeek), whose KV "
                    "tensor parallelism copies to every GPU. Empty: planned from memory, KV capacity and the workload; "
                    "false: never.",
    )
    objective: Objective = Field(
        default=Objective.LATENCY,
        description="latency: widen TP (up to 2x the throughput plan) while the estimated time of one request (time to first token + output tokens x time per output token) drops by 15% or more a step; throughput: most estimated output tokens/s per GPU (fewest GPUs per token/s).",
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
    KEDA = "keda"


# Names of the admin's named Prometheus queries (operator flag --prometheus-query NAME=TEMPLATE).
PROMETHEUS_QUERY_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class PrometheusSource(_Model):
    """A Prometheus the admin allowed. The operator writes every query it runs there: the ratio from this backend's
    own pods, and the activation query from a template the admin named; nothing a tenant writes is run."""

    url: str = Field(max_length=2048, pattern=r"^https?://[A-Za-z0-9._:\-/]+$", description="Prometheus base URL.")
    activation_query_name: str | None = Field(
        default=None, max_length=63, pattern=PROMETHEUS_QUERY_NAME_PATTERN,
        description="With minReplicas 0: the name of a query the cluster admin allows (operator flag "
                    "--prometheus-query NAME=TEMPLATE, chart value prometheusQueries), filled in by the operator "
                    "with this backend's namespace and name, returning the requests waiting for this backend while "
                    "it has no replica (e.g. the gateway's flow-control queue for its pool); above 0 it scales 0 -> 1.",
    )
    query: str | None = Field(
        default=None, max_length=4096,
        description="Removed: a tenant's PromQL is not run (the operator builds the ratio query from this backend's "
                    "pods). Refused on create and edit; a stored backend that has it is held with "
                    "status.autoscaling.reason PrometheusQueryNotAllowed until it is removed.",
    )
    activation_query: str | None = Field(
        default=None, max_length=4096,
        description="Removed: use activationQueryName. Refused on create and edit; a stored backend that has it is "
                    "held with status.autoscaling.reason PrometheusQueryNotAllowed until it is removed.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            # Without oldSelf, so the API server ratchets them: a stored backend with the field may still be edited
            # elsewhere; only setting or changing it is refused.
            "x-kubernetes-validations": [
                {"rule": "!has(self.query)",
                 "message": "prometheus.query is removed: the operator builds the ratio query from this backend's "
                            "pods; delete the field"},
                {"rule": "!has(self.activationQuery)",
                 "message": "prometheus.activationQuery is removed: set activationQueryName to a query the cluster "
                            "admin allows (operator flag --prometheus-query)"},
            ]
        }
    )

    @property
    def removed_fields_set(self) -> list[str]:
        """The removed free-form query fields this (stored) spec still has."""
        return [name for name, value in (("query", self.query), ("activationQuery", self.activation_query)) if value]


_DAILY_TIME = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


def schedule_cron(value: str) -> str:
    """A schedule's start or end as a cron expression: HH:MM (the older form, daily) is "MM HH * * *"."""
    daily = _DAILY_TIME.match(value)
    return f"{int(daily.group(2))} {int(daily.group(1))} * * *" if daily else value


class ScheduleFloor(_Model):
    """A minimum replica count between a start and an end (known peaks: scale before they start), as KEDA's cron
    scaler takes them: two cron expressions in an IANA time zone."""

    start: str = Field(
        max_length=100, pattern=r"^[0-9A-Za-z*/,: -]+$",
        description="When the floor begins: a 5-field cron expression (minute hour day-of-month month day-of-week), "
                    "e.g. \"0 8 * * 1-5\", in timeZone; or HH:MM (daily, the older form).")
    end: str = Field(
        max_length=100, pattern=r"^[0-9A-Za-z*/,: -]+$",
        description="When the floor ends (the first end after a start): as start. HH:MM before start wraps midnight.")
    time_zone: str = Field(
        default="UTC", max_length=64, pattern=r"^[A-Za-z0-9_+/-]+$",
        description="IANA time zone of start and end (e.g. Europe/Berlin); daylight saving time is followed.")
    desired_replicas: int | None = Field(
        default=None, ge=0, le=1000,
        description="The floor: at least this many replicas between start and end (KEDA's desiredReplicas; never "
                    "above maxReplicas). Overlapping entries: the largest.")
    min_replicas: int | None = Field(default=None, ge=0, le=1000, description="Older name of desiredReplicas.")

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.desiredReplicas) != has(self.minReplicas)",
                 "message": "set desiredReplicas (minReplicas is its older name), not both"},
                {"rule": "self.start != self.end", "message": "start and end must differ (as KEDA's cron scaler says)"},
            ]
        }
    )

    @model_validator(mode="after")
    def _check(self) -> ScheduleFloor:
        if (self.desired_replicas is None) == (self.min_replicas is None):
            raise ValueError("schedule: set desiredReplicas (minReplicas is its older name), not both")
        if self.start == self.end:
            raise ValueError("schedule: start and end must differ")
        # the matcher validates what the pattern cannot (fields, ranges, zone names)
        cron.parse(schedule_cron(self.start))
        cron.parse(schedule_cron(self.end))
        cron.zone(self.time_zone)
        return self

    @property
    def floor(self) -> int:
        """desiredReplicas, or its older name."""
        return self.desired_replicas if self.desired_replicas is not None else (self.min_replicas or 0)


class PanicSpec(_Model):
    """Knative's panic mode (the KPA's, pkg/autoscaler/scaling/autoscaler.go): a short panic window beside the
    metrics window; when the replicas its load needs reach thresholdPercentage of the ready ones, scale up at once to
    them and scale down not at all until the load has stayed under the threshold for a whole windowSeconds."""

    enabled: bool = Field(default=False, description="Turn panic mode on (off by default).")
    window_percentage: float = Field(
        default=10.0, ge=1, le=100,
        description="The panic window as a percentage of windowSeconds (Knative's panic-window-percentage, default "
                    "10), at least one and a half sync periods (the pods are scraped once a sync period).")
    threshold_percentage: float = Field(
        default=200.0, ge=110, le=1000,
        description="Enter panic when the replicas the panic window's load needs are this percentage of the ready "
                    "replicas or more (Knative's panic-threshold-percentage, default 200).")


OPERATOR_SCALE_DOWN_WINDOW_S = 60
HPA_SCALE_DOWN_WINDOW_S = 300  # Kubernetes' default for the HPA


# spec.autoscaling.learnedHeadroomMax's largest value: standing capacity of 4x the forecast is a static fleet's cost;
# taller bursts are served by a floor (the burst floor, minReplicas, schedules)
LEARNED_HEADROOM_MAX_LIMIT = 4.0


class AutoscalingSpec(_Model):
    """Scale on the engine's queue-to-compute ratio (time in the engine's queue / time in compute), with
    saturation as a trigger and the load forecast one cold start ahead."""

    enabled: bool = Field(default=False, description="Turn autoscaling on; then the operator owns the workload's replicas.")
    mode: AutoscalingMode = Field(
        default=AutoscalingMode.OPERATOR,
        description="operator: built-in loop; hpa: render an autoscaling/v2 HPA on the custom metric instead; "
                    "keda: render a KEDA ScaledObject with a Prometheus trigger on the same recording rule.",
    )
    source: MetricsSource = Field(default=MetricsSource.TRITON, description="Where the ratio comes from.")
    prometheus: PrometheusSource | None = Field(default=None, description="Required when source is prometheus.")
    min_replicas: int = Field(
        default=1, ge=0, le=1000,
        description="Fewest replicas, whatever the load. 0 (mode operator) scales to zero after scaleToZeroAfterSeconds "
                    "idle; mode hpa raises 0 to 1, mode keda scales from zero on its own trigger.")
    max_replicas: int = Field(default=4, ge=1, le=1000, description="Most replicas, whatever the load.")
    target_ratio: float = Field(default=1.0, gt=0, le=100, description="Target queue/compute ratio per replica.")
    tolerance: float = Field(default=0.1, ge=0, le=1, description="No scaling while |ratio/target - 1| is within this band.")
    window_seconds: int = Field(default=60, ge=5, le=3600, description="Window over which the ratio is computed.")
    sync_period_seconds: int = Field(default=15, ge=1, le=600, description="How often the ratio is evaluated.")
    scale_up_stabilization_seconds: int = Field(
        default=0, ge=0, le=3600,
        description="Scale up at most to the lowest recommendation of this many seconds (0: at once), as the HPA's "
                    "scaleUp stabilizationWindowSeconds.")
    scale_down_stabilization_seconds: int | None = Field(
        default=None, ge=0, le=86400,
        description="Scale down at most to the highest recommendation of this many seconds. Default: 60 in mode "
                    "operator (its scale-down already keeps the replicas the measured load needs; chosen on the "
                    "tuning traces of benchmarks/autoscale_bench.py), 300 in modes hpa and keda (the HPA's default: "
                    "the ratio alone does not say how many replicas the load needs).",
    )
    max_scale_up_step: int = Field(default=4, ge=1, le=1000, description="Most replicas added in one decision.")
    max_scale_down_step: int = Field(default=1, ge=1, le=1000, description="Most replicas removed in one decision.")
    target_utilization: float = Field(
        default=0.7, gt=0, le=1,
        description="Share of the engine's batch slots to fill: R = load (forecast one cold start ahead, times the "
                    "learned headroom) / (targetUtilization x slots per replica), plus square-root spare capacity "
                    "(a multiple of sqrt(R): what arrives within a cold start, relatively larger for small "
                    "backends). Once the scaler has watched its traffic for 30 minutes, learnedUtilization applies "
                    "when it is higher. Chosen with learnedHeadroomMax and that multiple on the tuning traces of "
                    "benchmarks/autoscale_bench.py; see docs/autoscaling.md.",
    )
    saturation_seconds: int = Field(
        default=10, ge=0, le=600,
        description="Slots full or KV cache above kvCacheThreshold for this long scales up, whatever the ratio says.",
    )
    kv_cache_threshold: float = Field(default=0.95, gt=0, le=1, description="KV-cache block fraction that counts as saturated.")
    forecast: bool = Field(default=True, description="Scale for the load expected one cold start ahead (robust level and trend of the last cold start: bursts shorter than a cold start order nothing).")
    cold_start_seconds: int | None = Field(
        default=None, ge=0, le=7200,
        description="Time from pod creation to Ready; default: learned from this backend's own pods.",
    )
    burst_memory_seconds: int = Field(
        default=0, ge=0, le=86400,
        description="Keep standing, for this long after a burst, the replicas its peak load needed (the peak of the "
                    "last cold start's loads, at targetUtilization), so that the next burst shorter than a cold start "
                    "is absorbed instead of queued; 0 (default): only as burstFloor says. Costs GPU-hours between "
                    "bursts.",
    )
    burst_floor: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: once a burst rose over 1.25 x learnedHeadroomMax of its forecast and requests queued over "
                    "targetRatio (Warning event BurstsOverHeadroom), keep the replicas the peak loads of the last 30 "
                    "minutes needed standing, until no such burst is remembered (as burstMemorySeconds 1800 would, "
                    "for those bursts only); off: never (bursts over the cap then wait for a cold start). Needs the "
                    "learned headroom (learnedHeadroomMax > 1); burstMemorySeconds, when set, stands instead.",
    )
    learned_headroom_max: float = Field(
        default=2.0, ge=1, le=LEARNED_HEADROOM_MAX_LIMIT,
        description="Learn the spare capacity from the load's own bursts: each forecast is checked one cold start "
                    "later against the arrivals seen, and the largest shortfall of the last 30 minutes (at most this "
                    "factor) multiplies the forecast (status.autoscaling.burstHeadroom), and the median load times "
                    "the largest rise of a burst over it (at most this factor; status.autoscaling.burstRise) stays "
                    "standing: smooth traffic runs the engines near targetUtilization, bursty traffic keeps what its "
                    "recent bursts needed. 1: off "
                    "(every backend keeps only targetUtilization's and the square-root spare); see "
                    "docs/autoscaling.md.",
    )
    learned_utilization: float = Field(
        default=0.8, ge=0, le=1,
        description="Once the scaler has watched its traffic for a whole memory of the learned headroom (30 minutes), "
                    "the learned headroom stands for the bursts it saw: replicas are sized at this share of the batch "
                    "slots (never below targetUtilization) with less square-root spare, times the learned headroom. "
                    "Until then (a new backend; an operator restart resumes status.autoscaling.memory) "
                    "targetUtilization and the larger spare stand for bursts not seen yet. 0: off. Needs "
                    "learnedHeadroomMax > 1. Chosen on the tuning traces of benchmarks/autoscale_bench.py; see "
                    "docs/autoscaling.md.",
    )
    scale_to_zero_after_seconds: int = Field(
        default=900, ge=0, le=86400,
        description="With minReplicas 0: idle (nothing in flight, no request finished) this long before the last replica goes.",
    )
    hold_timeout_seconds: int = Field(
        default=600, ge=1, le=3600,
        description="With minReplicas 0 (mode operator): how long the activator holds a request while no replica is "
                    "ready before answering 503. Cover the backend's cold start (a large engine loads for minutes).",
    )
    schedule: list[ScheduleFloor] | None = Field(
        default=None, max_length=16,
        description="Minimum-replica floors between cron start and end times in a time zone (KEDA's cron scaler); "
                    "status.autoscaling.scheduleFloor says which one holds. Mode keda: rendered as KEDA cron "
                    "triggers; mode hpa: not applied.")
    priority: int | None = Field(
        default=None, ge=-1_000_000, le=1_000_000,
        description="Mode operator: this backend's claim on GPUs it shares with other backends (the same nodes). "
                    "When a backend needs GPUs that are not free, backends of lower priority above their minReplicas "
                    "give theirs up (drained first); equal priorities never take each other's. Compared only with "
                    "backends of this namespace unless the cluster admin allows it across namespaces (operator flag "
                    "--priority-across-namespaces), and only among pods of one PriorityClass value: a higher class "
                    "always comes first, as the kube-scheduler places it. Unset: the value of spec.scheduling.priorityClassName's "
                    "PriorityClass (compared across namespaces, as the scheduler does), else the cluster's global "
                    "default PriorityClass's, else 0. "
                    "status.autoscaling.preemptedBy and waitingForCapacity say who holds the GPUs.")
    panic: PanicSpec | None = Field(
        default=None,
        description="Knative's panic mode (mode operator, source triton): scale up at once on a short window's "
                    "load, no scale-down while it lasts (off by default); status.autoscaling.panic says when it is on "
                    "and why.")

    @property
    def scale_down_window(self) -> int:
        """scaleDownStabilizationSeconds, or the default of this mode (see its description)."""
        if self.scale_down_stabilization_seconds is not None:
            return self.scale_down_stabilization_seconds
        return OPERATOR_SCALE_DOWN_WINDOW_S if self.mode == AutoscalingMode.OPERATOR else HPA_SCALE_DOWN_WINDOW_S

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"},
                {"rule": "self.source != 'prometheus' || has(self.prometheus)", "message": "source prometheus requires prometheus.url"},
                {"rule": "self.mode != 'keda' || has(self.prometheus)",
                 "message": "mode keda requires prometheus.url (the Prometheus KEDA queries)"},
            ]
        }
    )

    @model_validator(mode="after")
    def _keda_needs_prometheus(self) -> AutoscalingSpec:
        if self.mode == AutoscalingMode.KEDA and self.prometheus is None:
            raise ValueError("mode keda requires prometheus.url (the Prometheus KEDA queries)")
        return self


# What the API server refuses in a pod's toleration besides its key's and value's syntax (k8s.io/kubernetes
# pkg/apis/core/validation/validation.go ValidateTolerations, v1.36): refused here, so that a backend whose Deployment
# could never be created is refused at create/update instead of admitted (and claiming GPUs of its pool).
_TOLERATION_RULES: list[tuple[str, str, Any]] = [
    ("(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
     "operator must be Exists when key is empty (which tolerates every taint)",
     lambda t: bool(t.key) or t.operator == "Exists"),
    ("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
     "value must be empty when operator is Exists",
     lambda t: t.operator != "Exists" or not t.value),
    ("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
     "tolerationSeconds needs effect NoExecute",
     lambda t: t.toleration_seconds is None or t.effect == "NoExecute"),
]


class Toleration(_Model):
    key: str | None = Field(default=None, max_length=316, pattern=LABEL_KEY_PATTERN)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE_PATTERN)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": rule, "message": message} for rule, message, _ in _TOLERATION_RULES]})

    @model_validator(mode="after")
    def _as_the_api_server_allows(self) -> Toleration:
        for _, message, holds in _TOLERATION_RULES:
            if not holds(self):
                raise ValueError(message)
        return self


class ResourceRequests(_Model):
    cpu: str | None = Field(default=None, max_length=QUANTITY_MAX_LENGTH, pattern=QUANTITY_PATTERN,
                            description="CPU request per pod (limit equals request).")
    memory: str | None = Field(default=None, max_length=QUANTITY_MAX_LENGTH, pattern=QUANTITY_PATTERN,
                               description="Memory request per pod (limit equals request).")


class MultiNodeSpec(_Model):
    """How a replica that spans nodes (one LeaderWorkerSet group) starts and is placed."""

    launcher_image: str | None = Field(
        default=None, max_length=512, pattern=IMAGE_PATTERN,
        description=f"Image holding llmb-exec at {LAUNCHER_EXEC} (an exec client that needs no right to read pods), "
                    "copied into TensorRT-LLM leaders to start MPI ranks in the workers through the pods' exec "
                    "subresource (defaults to the operator image).",
    )
    startup_timeout_seconds: int = Field(
        default=900, ge=30, le=7200,
        description="How long a leader waits for every worker of its group before it fails (the group is then recreated).",
    )
    exclusive_topology: str | None = Field(
        default=None, max_length=316, pattern=LABEL_KEY_PATTERN,
        description="Node label key of a topology domain (rack, block) that each group occupies alone (LeaderWorkerSet "
                    "exclusive placement). Defaults to nvidia.com/gpu.clique when tensor parallelism spans an NVLink clique.",
    )
    allow_cross_node_nvlink_without_compute_domain: bool = Field(
        default=False,
        description="Run tensor parallelism over a multi-node NVLink clique (GB200/GB300) although no ComputeDomain "
                    "(NVIDIA DRA driver) is served, e.g. when IMEX channels are provisioned outside Kubernetes.",
    )
    gang_scheduler: Literal["auto", "kueue", "volcano", "none"] = Field(
        default="auto",
        description="Who admits and schedules each group whole. auto: Volcano when its PodGroup CRD is served (the pods "
                    "use schedulerName volcano; LeaderWorkerSet, configured with gangSchedulingManagement volcano, creates "
                    "one PodGroup per group), else Kueue when its CRDs are served and queueName is set.",
    )
    queue_name: str | None = Field(
        default=None, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Queue that admits each group whole: a Kueue LocalQueue (label kueue.x-k8s.io/queue-name on the "
                    "LeaderWorkerSet) or a Volcano queue (annotation scheduling.volcano.sh/queue-name).",
    )


class SchedulingSpec(_Model):
    """Where the serving pods may run and how they are scheduled. The planner plans only on the nodes these allow,
    and the pods get them besides what the plan chooses (the GPU product's node label, a toleration of the
    nvidia.com/gpu taint)."""

    node_selector: dict[
        Annotated[str, Field(max_length=316, pattern=LABEL_KEY_PATTERN)],
        Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)],
    ] | None = Field(
        default=None, max_length=32, description="Extra node labels the serving pods require (also restricts planning)."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=32,
        description="Taints of the GPU nodes the serving pods tolerate (also restricts planning to the nodes they "
                    "tolerate); the nvidia.com/gpu taint is always tolerated.")
    priority_class_name: str | None = Field(
        default=None, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="PriorityClass of the serving pods (an existing one; it decides who is preempted for whom).")
    resources: ResourceRequests | None = Field(
        default=None, description="CPU and memory of each serving pod, both request and limit, instead of the "
                                  "operator's default requests (2 CPUs per GPU; 8 GiB, 8 GiB per GPU and /dev/shm).")
    multi_node: MultiNodeSpec | None = Field(default=None, description="Replicas that span nodes (LeaderWorkerSet groups).")


# ---- serving pod passthrough (spec.serving.podTemplate) ----
# The operator's own label and annotation prefixes: the serving pods' selector, hashes and LeaderWorkerSet's group
# bookkeeping live under them, so a podTemplate may not set keys there (render/podtemplate.py also refuses any other
# key, env name, volume name or mount path the operator itself sets on a pod).
RESERVED_KEY_PREFIXES = (f"{GROUP}/", "leaderworkerset.sigs.k8s.io/", "batch.kubernetes.io/")
# Labels the operator, the Job, ReplicaSet and StatefulSet controllers set on pods and select them by (issue 42: a
# serving pod labelled job-name=<download Job> was taken for that Job's pod). Reserved in podTemplate as keys; the
# operator also reads reports only from pods a Job controls by uid (render/modelcache.job_pods).
RESERVED_KEYS = ("job-name", "controller-uid", "pod-template-hash", "controller-revision-hash",
                 "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
                 "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
                 "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of")
# Annotations that loosen a container's confinement (AppArmor's and the pre-1.27 seccomp keys): the pods' security
# settings are the operator's, so a podTemplate may not set them.
SECURITY_ANNOTATION_PREFIXES = ("container.apparmor.security.beta.kubernetes.io/", "seccomp.security.alpha.kubernetes.io/")
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Absolute path without '..' segments or characters that need quoting.
MOUNT_PATH_PATTERN = r"^/[A-Za-z0-9._\-/]*$"
RELATIVE_PATH_PATTERN = r"^[A-Za-z0-9._\-][A-Za-z0-9._\-/]*$"
_NO_DOTDOT: dict[str, Any] = {"rule": "!self.matches('(^|/)[.][.](/|$)')", "message": "must not contain '..' segments"}


def _exactly_one(*fields: str) -> dict[str, Any]:
    """CEL rule: exactly one of these (camelCase) fields is set."""
    listed = ", ".join(f"has(self.{f})" for f in fields)
    return {"rule": f"[{listed}].filter(x, x).size() == 1", "message": f"set exactly one of {', '.join(fields)}"}


def _check_exactly_one(model: BaseModel, *fields: str) -> None:
    """The Python side of _exactly_one (snake_case attribute names)."""
    if sum(getattr(model, f) is not None for f in fields) != 1:
        raise ValueError("set exactly one of " + ", ".join(to_camel(f) for f in fields))


def _no_dotdot(value: str | None) -> str | None:
    if value is not None and ".." in value.split("/"):
        raise ValueError("must not contain '..' segments")
    return value


def _reserved_keys(value: dict[str, str] | None) -> dict[str, str] | None:
    for key in value or {}:
        if key.startswith(RESERVED_KEY_PREFIXES):
            raise ValueError(f"key {key} is under a prefix the operator owns ({', '.join(RESERVED_KEY_PREFIXES)})")
        if key in RESERVED_KEYS:
            raise ValueError(f"key {key} is one the operator or a workload controller sets and selects pods by")
    return value


_RESERVED_KEYS_RULE: dict[str, Any] = {
    "rule": "self.all(k, " + " && ".join(f"!k.startsWith('{p}')" for p in RESERVED_KEY_PREFIXES)
            + " && !(k in [" + ", ".join(f"'{k}'" for k in RESERVED_KEYS) + "]))",
    "message": "keys under " + ", ".join(RESERVED_KEY_PREFIXES) + " and the keys " + ", ".join(RESERVED_KEYS)
               + " are the operator's and its workload controllers' (they select pods by them)",
}
_SECURITY_ANNOTATIONS_RULE: dict[str, Any] = {
    "rule": "self.all(k, " + " && ".join(f"!k.startsWith('{p}')" for p in SECURITY_ANNOTATION_PREFIXES) + ")",
    "message": "the pods' security settings are the operator's: no keys under " + " or ".join(SECURITY_ANNOTATION_PREFIXES),
}


class LocalObjectReference(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN, description="Object in the backend's namespace.")


class KeySelector(_Model):
    """A key of a ConfigMap or Secret in the backend's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN)
    key: str = Field(min_length=1, max_length=253, pattern=CONFIG_KEY_PATTERN)
    optional: bool | None = None


# The pod fields an env var may read (downward API), as the API server allows them in a pod template: k8s.io/kubernetes
# pkg/apis/core/validation/validation.go (v1.36) validateEnvVarValueFrom with validEnvDownwardAPIFieldPathExpressions,
# and validateObjectFieldSelector, which also admits one label or annotation by a subscripted key (a qualified name).
ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
                   "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs")
_SUBSCRIPTED_KEY = LABEL_KEY_PATTERN.removeprefix("^").removesuffix("$")
ENV_FIELD_PATH_PATTERN = (r"^(" + "|".join(re.escape(p) for p in ENV_FIELD_PATHS)
                          + r"|metadata\.(labels|annotations)\['" + _SUBSCRIPTED_KEY + r"'\])$")
# A container's resources an env var may read: validContainerResourceFieldPathExpressions, and the hugepages ones
# (validContainerResourceFieldPathPrefixesWithDownwardAPIHugePages) by their usual names (hugepages-2Mi, -1Gi).
ENV_RESOURCE_PATTERN = r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei))$"
# The divisors validateContainerResourceDivisor allows (validContainerResourceDivisorForCPU, ...ForMemory,
# ...ForHugePages). It compares the divisor's canonical text, which keeps a binary suffix binary and a decimal one
# decimal (k8s.io/apimachinery pkg/api/resource/quantity.go CanonicalizeBytes): "1000m" is 1, "1024Mi" is 1Gi,
# but "1024" stays 1024 (refused). So: the same value as an allowed divisor of the same suffix family. 0: unset.
CPU_DIVISORS = ("0", "1m", "1")
MEMORY_DIVISORS = ("0", "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")
_QUANTITY_SCALE: dict[str, Fraction | int] = {
    "": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def _quantity_value(text: str) -> tuple[Fraction, bool]:
    """(value, binary suffix) of a QUANTITY_PATTERN string (planning/quantity.py reads every quantity; the API layer
    may not import it, and needs only this pattern's few forms)."""
    number = text.rstrip("mkKMGTPEi")
    suffix = text[len(number):]
    return Fraction(number) * _QUANTITY_SCALE[suffix], suffix.endswith("i")


def _divisor_allowed(resource: str, divisor: str) -> bool:
    value, binary = _quantity_value(divisor)
    return any(_quantity_value(d) == (value, binary) or value == 0
               for d in (CPU_DIVISORS if resource.endswith(".cpu") else MEMORY_DIVISORS))


def _cel_divisors(allowed: tuple[str, ...]) -> str:
    """CEL: the divisor's value is that of one of ``allowed`` with the same suffix family (Kubernetes' quantity
    library), or 0."""
    def listed(ds: list[str]) -> str:
        return "[" + ", ".join(f"'{d}'" for d in ds) + "]"
    binary, decimal = ["0"] + [d for d in allowed if d.endswith("i")], [d for d in allowed if not d.endswith("i")]
    return (f"(self.divisor.endsWith('i') ? {listed(binary)} : {listed(decimal)})"
            ".exists(d, quantity(self.divisor).compareTo(quantity(d)) == 0)")


class ObjectFieldSelector(_Model):
    field_path: str = Field(min_length=1, max_length=256, pattern=ENV_FIELD_PATH_PATTERN,
                            description="A pod field (downward API): " + ", ".join(ENV_FIELD_PATHS)
                                        + ", or metadata.labels['<key>'] / metadata.annotations['<key>'].")
    api_version: Literal["v1"] | None = Field(default=None, description="v1, the only version the API server reads.")


class ResourceFieldSelector(_Model):
    resource: str = Field(min_length=1, max_length=64, pattern=ENV_RESOURCE_PATTERN,
                          description="limits. or requests. and cpu, memory, ephemeral-storage or hugepages-<size>.")
    container_name: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL_PATTERN)
    divisor: str | None = Field(default=None, max_length=QUANTITY_MAX_LENGTH, pattern=QUANTITY_PATTERN,
                                description="cpu: 1m or 1; the others: 1 or 1 with a suffix (1Mi, 1G).")

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.divisor) || (self.resource.endsWith('.cpu') ? "
                f"{_cel_divisors(CPU_DIVISORS)} : {_cel_divisors(MEMORY_DIVISORS)})",
        "message": "divisor of cpu must be 1m or 1; of memory, ephemeral-storage and hugepages 1, 1k..1E or 1Ki..1Ei",
    }]})

    @model_validator(mode="after")
    def _divisor_the_api_server_allows(self) -> ResourceFieldSelector:
        if self.divisor is not None and not _divisor_allowed(self.resource, self.divisor):
            allowed = CPU_DIVISORS if self.resource.endswith(".cpu") else MEMORY_DIVISORS
            raise ValueError(f"divisor of {self.resource} must be one of {', '.join(allowed[1:])}")
        return self


class EnvVarSource(_Model):
    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        _exactly_one("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")]})

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        _check_exactly_one(self, "secret_key_ref", "config_map_key_ref", "field_ref", "resource_field_ref")
        return self


class EnvVar(_Model):
    """An environment variable of the serving containers (core/v1 EnvVar)."""

    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN)
    value: str | None = Field(default=None, max_length=32768)
    value_from: EnvVarSource | None = None

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!(has(self.value) && has(self.valueFrom))", "message": "set value or valueFrom, not both"}]})

    @model_validator(mode="after")
    def _value_or_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("set value or valueFrom, not both")
        return self


class EnvSourceReference(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN)
    optional: bool | None = None


class EnvFromSource(_Model):
    """Every key of a ConfigMap or Secret as environment variables (core/v1 EnvFromSource)."""

    prefix: str | None = Field(default=None, max_length=253, pattern=ENV_NAME_PATTERN)
    config_map_ref: EnvSourceReference | None = None
    secret_ref: EnvSourceReference | None = None

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_exactly_one("configMapRef", "secretRef")]})

    @model_validator(mode="after")
    def _one_source(self) -> EnvFromSource:
        _check_exactly_one(self, "config_map_ref", "secret_ref")
        return self


class KeyToPath(_Model):
    key: str = Field(min_length=1, max_length=253, pattern=CONFIG_KEY_PATTERN)
    path: str = Field(min_length=1, max_length=1024, pattern=RELATIVE_PATH_PATTERN,
                      json_schema_extra={"x-kubernetes-validations": [_NO_DOTDOT]})
    mode: int | None = Field(default=None, ge=0, le=0o777)

    @field_validator("path")
    @classmethod
    def _path_stays_inside(cls, value: str) -> str | None:
        return _no_dotdot(value)


class ConfigMapVolume(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN)
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None


class SecretVolume(_Model):
    secret_name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN)
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None


class ClaimVolume(_Model):
    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_NAME_PATTERN)
    read_only: bool | None = Field(
        default=None, description="true: every mount is read-only. Without it the claim is writable, which needs the "
                                  "right to create pods in the namespace; read-only needs that or use on the claim by name (docs/security.md).")


class EmptyDirVolume(_Model):
    medium: Literal["", "Memory"] | None = None
    size_limit: str | None = Field(default=None, max_length=QUANTITY_MAX_LENGTH, pattern=QUANTITY_PATTERN)


class CSIVolume(_Model):
    """An inline CSI volume (e.g. the Secrets Store CSI driver). Its driver acts on the attributes given, so it needs
    the right to create pods in the namespace (docs/security.md)."""

    # at most 63 characters: validation.go ValidateCSIDriverName
    driver: str = Field(min_length=1, max_length=63, pattern=DNS_NAME_PATTERN)
    read_only: bool | None = None
    volume_attributes: dict[
        Annotated[str, Field(max_length=253, pattern=r"^[A-Za-z0-9._/\-]+$")], Annotated[str, Field(max_length=4096)]
    ] | None = Field(default=None, max_length=64)
    node_publish_secret_ref: LocalObjectReference | None = None


class Volume(_Model):
    """An extra volume of the serving pods. Sources: configMap, secret, persistentVolumeClaim, emptyDir, csi
    (no hostPath or other node-level sources: a backend's pods reach nothing of the node)."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)
    config_map: ConfigMapVolume | None = None
    secret: SecretVolume | None = None
    persistent_volume_claim: ClaimVolume | None = None
    empty_dir: EmptyDirVolume | None = None
    csi: CSIVolume | None = None

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        _exactly_one("configMap", "secret", "persistentVolumeClaim", "emptyDir", "csi")]})

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        _check_exactly_one(self, "config_map", "secret", "persistent_volume_claim", "empty_dir", "csi")
        return self


class VolumeMount(_Model):
    """Where a podTemplate volume is mounted in the serving containers."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN, description="A volume of podTemplate.volumes.")
    mount_path: str = Field(min_length=2, max_length=1024, pattern=MOUNT_PATH_PATTERN,
                            json_schema_extra={"x-kubernetes-validations": [_NO_DOTDOT]})
    sub_path: str | None = Field(default=None, max_length=1024, pattern=RELATIVE_PATH_PATTERN,
                                 json_schema_extra={"x-kubernetes-validations": [_NO_DOTDOT]})
    read_only: bool | None = None

    @field_validator("mount_path", "sub_path")
    @classmethod
    def _paths_without_parents(cls, value: str | None) -> str | None:
        return _no_dotdot(value)


def _list_map(*keys: str) -> dict[str, Any]:
    """A list merged by key (server-side apply) whose keys are unique."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class PodTemplate(_Model):
    """Fields merged into every serving pod: the Deployment's, or a LeaderWorkerSet's leaders and workers.

    What the operator sets itself wins by refusal, never by silent override: a label or annotation key, env name,
    volume name or mount path the operator already uses is an error (InvalidPodTemplate) and nothing is applied.
    env, envFrom and volumeMounts go to the serving containers (Triton and the OpenAI frontend), not to init
    containers. Scheduling fields (nodeSelector, tolerations, priorityClassName) are under spec.scheduling.
    """

    labels: dict[
        Annotated[str, Field(max_length=316, pattern=LABEL_KEY_PATTERN)],
        Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)],
    ] | None = Field(default=None, max_length=64,
                     description="Labels added to the serving pods. Services, NetworkPolicies, Kueue and webhooks act "
                                 "on them, so setting any needs the right to create pods in the namespace "
                                 "(docs/security.md).",
                     json_schema_extra={"x-kubernetes-validations": [_RESERVED_KEYS_RULE]})
    annotations: dict[
        Annotated[str, Field(max_length=316, pattern=LABEL_KEY_PATTERN)], Annotated[str, Field(max_length=4096)],
    ] | None = Field(default=None, max_length=64,
                     description="Annotations added to the serving pods. Webhooks inject sidecars, volumes and "
                                 "identities by them, so setting any needs the right to create pods in the namespace "
                                 "(docs/security.md).",
                     json_schema_extra={"x-kubernetes-validations": [_RESERVED_KEYS_RULE, _SECURITY_ANNOTATIONS_RULE]})
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, max_length=16, json_schema_extra=_list_map("name"),
        description="Secrets (kubernetes.io/dockerconfigjson) for pulling the serving image from a private registry "
                    "(e.g. nvcr.io with an NGC API key).")
    service_account_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_NAME_PATTERN,
        description="ServiceAccount of the serving pods (its token is not mounted); without it they run as the "
                    "backend's own <name>-serving-<tag> (tag: from the backend's uid, new for every backend created), "
                    "never the namespace's default. Multi-node TensorRT-LLM leaders keep the operator's launcher "
                    "account, which may exec into their workers.")
    runtime_class_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_NAME_PATTERN,
        description="RuntimeClass of the serving pods (e.g. nvidia, where the GPU runtime is not the default).")
    env: list[EnvVar] | None = Field(default=None, max_length=64, json_schema_extra=_list_map("name"),
                                     description="Environment variables of the serving containers.")
    env_from: list[EnvFromSource] | None = Field(
        default=None, max_length=16, description="ConfigMaps and Secrets whose keys become environment variables.")
    volumes: list[Volume] | None = Field(default=None, max_length=32, json_schema_extra=_list_map("name"),
                                         description="Extra volumes of the serving pods.")
    volume_mounts: list[VolumeMount] | None = Field(
        default=None, max_length=32, json_schema_extra=_list_map("mountPath"),
        description="Mounts of those volumes in the serving containers.")

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
                "self.volumes.exists(v, v.name == m.name))",
        "message": "every volumeMount must name a volume of podTemplate.volumes",
    }]})

    @field_validator("labels", "annotations")
    @classmethod
    def _not_operator_keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _reserved_keys(value)

    @field_validator("annotations")
    @classmethod
    def _no_security_annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key in value or {}:
            if key.startswith(SECURITY_ANNOTATION_PREFIXES):
                raise ValueError(f"annotation {key}: the pods' security settings are the operator's")
        return value

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> PodTemplate:
        names = {v.name for v in self.volumes or []}
        for mount in self.volume_mounts or []:
            if mount.name not in names:
                raise ValueError(f"volumeMount {mount.mount_path} names volume {mount.name}, which podTemplate.volumes "
                                 "does not have; every volumeMount must name a volume of podTemplate.volumes")
        for field_name, items, key in (("env", self.env, "name"), ("volumes", self.volumes, "name"),
                                       ("volumeMounts", self.volume_mounts, "mount_path"),
                                       ("imagePullSecrets", self.image_pull_secrets, "name")):
            seen = [getattr(i, key) for i in items or []]
            if len(seen) != len(set(seen)):
                raise ValueError(f"{field_name} lists a {to_camel(key)} twice")
        # Paths are compared as the kubelet resolves them (the CRD and the API server compare strings): `/data` and
        # `/data/` are one directory, and which volume a container would see there is up to its runtime (attack3).
        resolved: dict[str, str] = {}
        for mount in self.volume_mounts or []:
            first = resolved.setdefault(same_mount_path(mount.mount_path), mount.mount_path)
            if first != mount.mount_path:
                raise ValueError(f"volumeMounts {first} and {mount.mount_path} are one directory; mount it once")
        return self


def same_mount_path(path: str) -> str:
    """A mount path as the kubelet resolves it: `/models/.`, `//models` and `/./models/` are `/models`."""
    # posixpath.normpath keeps a leading `//` (POSIX leaves it implementation-defined); Linux treats it as `/`.
    return posixpath.normpath("/" + path.lstrip("/"))


class ServingSpec(_Model):
    """Client-facing endpoints of the serving pods (besides Triton's own HTTP/gRPC)."""

    openai: bool = Field(
        default=True,
        description="Serve an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models) from a "
                    "second container in each serving pod, on the Service port named openai.",
    )
    drain_seconds: int | None = Field(
        default=None, ge=0, le=1800,  # render/drain.py MAX_DRAIN_S
        description="How long a leaving replica may take to finish its requests (preStop wait and Triton's "
                    "--exit-timeout-secs; terminationGracePeriodSeconds adds margins), at scale-down and at rollouts. "
                    "Default: maxSeqLen x 60 ms + 30 s, between 60 s and 30 min. status.autoscaling compares it with "
                    "the observed p99 request time. Changing it changes the pod template (the replicas roll).",
    )
    pod_template: PodTemplate | None = Field(
        default=None,
        description="Labels, annotations, image pull secrets, ServiceAccount, RuntimeClass, env and extra volumes "
                    "of every serving pod (docs/pod-template.md: what the operator sets may not be overridden).",
    )
    progress_deadline_seconds: int = Field(
        default=600, ge=1, le=86400,
        description="How long waiting on work in flight counts as progress (Progressing) before it is Degraded: "
                    "serving pods the scheduler cannot place yet (nodes being added), a download or inspector pod "
                    "that does not start, a download with no new bytes. As a Deployment's, default 600.",
    )


class Placement(str, Enum):
    BEST = "best"
    PREFER_RUNNABLE = "preferRunnable"


class PlanningSpec(_Model):
    """How the operator picks the plan (tensor/pipeline parallelism, GPU product) among those that fit."""

    placement: Placement = Field(
        default=Placement.BEST,
        description="best: the best plan for the hardware, waiting for GPUs if they are busy (status says when a "
                    "runner-up could run on the GPUs free now). preferRunnable: when the best plan's pods cannot be "
                    "placed on the GPUs free now but a runner-up's could, take the runner-up.",
    )


MAX_ADAPTERS = 64
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"


# An adapter's download uses a cache claim as it is (the base's source.cache creates it, or its owner does): no
# StorageClass of its own, so the admission policy has nothing more to check for adapters (docs/security.md).
ADAPTER_STORAGE_CLASS_RULE: dict[str, Any] = {
    "rule": "!has(self.source.cache) || !has(self.source.cache.storageClassName)",
    "message": "an adapter's source.cache may not set storageClassName: adapters use the cache claim as it is "
               "(spec.model.source.cache creates it)"}


class AdapterSpec(_Model):
    """A LoRA adapter of the base model, served as a model of its own name (docs/adapters.md)."""

    name: str = Field(
        max_length=63, pattern=MODEL_NAME_PATTERN,
        description="Model name clients ask for (OpenAI `model`, Triton's `adapter` parameter); unique, and not the "
                    "base model's name.",
    )
    source: ModelSource = Field(
        description="Where the adapter (adapter_config.json and its weights) comes from, as spec.model.source: a "
                    "uri downloaded once into the model cache, or a pvc directory.",
    )

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [ADAPTER_STORAGE_CLASS_RULE]})

    @model_validator(mode="after")
    def _no_storage_class(self) -> AdapterSpec:
        if self.source.cache is not None and self.source.cache.storage_class_name is not None:
            raise ValueError(ADAPTER_STORAGE_CLASS_RULE["message"])
        return self


class LLMBackendSpec(_Model):
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec, json_schema_extra=lambda s: s.update(default=EngineSpec().dump()))
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec, json_schema_extra=lambda s: s.update(default=ParallelismSpec().dump()))
    replicas: int = Field(default=1, ge=0, le=1000, description="Replicas (model copies) when autoscaling is off.")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, json_schema_extra=lambda s: s.update(default=AutoscalingSpec().dump()))
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec, json_schema_extra=lambda s: s.update(default=SchedulingSpec().dump()))
    serving: ServingSpec = Field(default_factory=ServingSpec, json_schema_extra=lambda s: s.update(default=ServingSpec().dump()))
    planning: PlanningSpec = Field(default_factory=PlanningSpec, json_schema_extra=lambda s: s.update(default=PlanningSpec().dump()))
    adapters: list[AdapterSpec] | None = Field(
        default=None, max_length=MAX_ADAPTERS,
        description="LoRA adapters of the model, each served as a model of its own name beside the base; added and "
                    "removed without restarting the serving pods once LoRA is on (docs/adapters.md).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!has(self.adapters) || !has(self.model.name) || self.adapters.all(a, a.name != self.model.name)",
         "message": "an adapter may not have the base model's name (spec.model.name)"},
        {"rule": "!has(self.adapters) || !has(self.model.preset) || has(self.model.name) || "
                 "self.adapters.all(a, a.name != self.model.preset)",
         "message": "an adapter may not have the base model's name (spec.model.preset)"},
    ]})

    @model_validator(mode="after")
    def _adapters(self) -> LLMBackendSpec:
        names = [a.name for a in self.adapters or []]
        if len(set(names)) != len(names):
            raise ValueError("adapter names must be unique")
        base = self.model.name or self.model.preset
        if base is not None and base in names:
            raise ValueError(f"an adapter may not have the base model's name ({base})")
        if names and self.engine.lora is None:  # one place for the defaults: the planner and renderers read engine.lora
            self.engine.lora = LoRASpec()
        return self


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
    # The operator keeps the plan in status while the spec is unchanged (node churn must not reshuffle replicas), so
    # it is read back: a size below 1 is refused here (and by the API server), and the backend is planned afresh.
    tensor_parallel: int = Field(ge=1)
    pipeline_parallel: int = Field(ge=1)
    expert_parallel: int | None = Field(default=None, ge=1, description="MoE: expert-parallel size inside the TP group (absent for dense models).")
    attention_data_parallel: bool | None = Field(
        default=None, description="MoE: attention runs data parallel over the tensorParallel GPUs (each GPU its own requests); absent: tensor parallel attention.")
    gpus_per_replica: int = Field(ge=1)
    nodes_per_replica: int = Field(ge=1)
    memory_per_gpu_bytes: int = Field(ge=0)
    gpu_product: str | None = None
    spans_nvlink_clique: bool | None = Field(
        default=None, description="Tensor parallelism spans nodes of one multi-node NVLink clique (needs an IMEX channel).",
    )
    topology_source: Literal["annotation", "inferred", "explicit"] | None = None
    explanation: str = Field(default="", max_length=8192)
    objective: str | None = Field(default=None, max_length=32, description="Objective the plan was chosen for.")
    estimate: str | None = Field(
        default=None, max_length=256,
        description="What the figures below are: an estimate for the workload named here (input/output tokens, "
                    "requests in flight), from a performance model calibrated on TensorRT-LLM's published tables.")
    time_to_first_token_ms: float | None = Field(
        default=None, description="Estimate: milliseconds to the first token at the estimate's workload.")
    time_per_output_token_ms: float | None = Field(
        default=None, description="Estimate: milliseconds per output token at the estimate's workload.")
    tokens_per_second: float | None = Field(
        default=None, description="Estimate: output tokens/s per replica at the estimate's workload.")
    achievable_concurrency: int | None = Field(
        default=None, description="Requests in flight the estimate assumes: at most maxBatchSize and what the KV "
                                  "cache holds at the estimate's input + output tokens.")
    estimate_input_tokens: int | None = Field(default=None, description="Input tokens per request the estimate assumes (default maxInputLen).")
    estimate_output_tokens: int | None = Field(default=None, description="Output tokens per request the estimate assumes (default maxSeqLen - maxInputLen).")
    hbm_bandwidth_gbps: int | None = Field(default=None, description="HBM bandwidth per GPU used by the estimate (GB/s).")
    tflops_per_gpu: float | None = Field(default=None, description="Dense peak TFLOPS per GPU at the plan's math precision used by the estimate.")
    interconnect: str | None = Field(default=None, max_length=128, description="Link the TP all-reduces use, with its bandwidth (e.g. NVLink4 900 GB/s, PCIe Gen4 x16 32 GB/s).")
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels that pick this plan's GPU product (GFD's nvidia.com/gpu.product, or a managed cloud's accelerator/instance-type label).")
    input_hash: str | None = Field(
        default=None, max_length=64,
        description="Hash of the spec fields this plan was made for; the plan is kept while they are unchanged.",
    )


class EndpointStatus(_Model):
    service: str
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    openai_port: int | None = Field(default=None, description="Port of the OpenAI-compatible API (when serving.openai).")


SCALER_MEMORY_MAX_BURSTS = 16  # status.autoscaling.memory.bursts: 30 minutes of 5-minute buckets is 7
SCALER_MEMORY_MAX_TEXT = 4096  # status.autoscaling.memory's "time:value ..." lists: 120 pairs (MAX_LOADS) or fewer


def _timed_values(description: str) -> Any:
    """A field of ScalerMemory holding "epoch seconds:value ..." (what the autoscaler writes as it decides)."""
    return Field(default=None, max_length=SCALER_MEMORY_MAX_TEXT, description=description)


class LearnedBurst(_Model):
    start: str = Field(description="Start of a 5-minute interval (RFC 3339).")
    headroom: float = Field(
        description="The largest rise of the arrivals over their forecast within one cold start seen in it (1: none; "
                    "the decision uses at most learnedHeadroomMax of it).")


class ScalerMemory(_Model):
    """What the autoscaler learned of the backend's traffic. Kept in status so that an operator restart (an upgrade, a
    leader failover) resumes it rather than sizing every backend as a new one for 30 minutes."""

    watching_since: str = Field(description="Since when the autoscaler has watched this backend's traffic (RFC 3339).")
    last_seen: str = Field(
        description="The 5-minute interval of the last decision (RFC 3339). An operator that starts more than 10 "
                    "minutes after it does not resume the memory: it missed the bursts of the gap.")
    bursts: list[LearnedBurst] = Field(
        default_factory=list, max_length=SCALER_MEMORY_MAX_BURSTS,
        description="The burst memory (the last 30 minutes): what status.autoscaling.burstHeadroom is the largest of.")
    queued_at: str | None = Field(
        default=None, description="The last decision that saw requests queue over targetRatio (RFC 3339): with a "
                                  "burst over learnedHeadroomMax, what status.autoscaling.burstWarning reports.")
    burst_floor_since: str | None = Field(
        default=None, description="Since when the automatic burst floor stands (burstFloor auto; RFC 3339).")
    loads: str | None = _timed_values(
        "The load of each decision of the last cold start (epoch seconds:load, space-separated), as of the last status "
        "write: the forecast of a resumed autoscaler starts from them.")
    rates: str | None = _timed_values("The arrival rate of each decision of the last cold start (as loads).")
    forecasts: str | None = _timed_values(
        "The arrival rates forecast within the last cold start, checked against the rates that come (as loads): what "
        "burstHeadroom learns from.")
    recommendations: str | None = _timed_values("The replicas recommended within the stabilization windows (as loads).")
    peaks: str | None = _timed_values(
        "With burstMemorySeconds: the peak load of each 5-minute interval it remembers (as loads; the last 10 hours at "
        "most).")
    rises: str | None = _timed_values(
        "The largest rise of the arrival rates over their median within a cold start, per 5-minute interval of the "
        "last 30 minutes (as loads): what status.autoscaling.burstRise is the largest of.")
    fit: list[float] | None = Field(
        default=None, min_length=6, max_length=6,
        description="The compute time per request against the batch (least-squares sums: weight, batch, time, "
                    "batch squared, batch x time; and the epoch seconds of the last reading).")


class AutoscalingStatus(_Model):
    current_ratio: str | None = Field(default=None, description="Last measured queue/compute ratio (string, 3 decimals).")
    signal: str | None = Field(
        default=None,
        description="Which counters the ratio comes from: engine (the serving model's engine queue/compute), "
                    "triton (Triton's own; non-LLM models only) or prometheus (the recording rule).",
    )
    in_flight: str | None = Field(default=None, description="Requests inside the engines (batch + engine queue) / batch slots, ready pods.")
    forecast_in_flight: str | None = Field(default=None, description="Requests in flight expected one cold start ahead.")
    burst_headroom: str | None = Field(
        default=None,
        description="The factor on the forecast learned from the load's own bursts (the largest rise over a forecast "
                    "within one cold start, remembered for 30 minutes; 1.00 for smooth traffic and with "
                    "learnedHeadroomMax 1).")
    burst_rise: str | None = Field(
        default=None,
        description="How far the load's bursts rose over the load beside them (the largest rise within one cold "
                    "start, remembered for 30 minutes, at most learnedHeadroomMax): the median load times it stays "
                    "standing, also when a calm cold start brought the forecast down to the base (1.00 for smooth "
                    "traffic and with learnedHeadroomMax 1).")
    utilization: str | None = Field(
        default=None,
        description="The share of the batch slots the last decision sized replicas for: targetUtilization, or "
                    "learnedUtilization once the scaler has watched its traffic for 30 minutes.")
    cold_start_seconds: int | None = Field(default=None, description="Pod creation to Ready, as used for the forecast.")
    cold_start_source: str | None = Field(default=None, description="Where coldStartSeconds comes from (learned from N pods, spec, default).")
    request_p99_seconds: str | None = Field(
        default=None,
        description="p99 of a finished request's time in the engine (arrival to last token) over the metrics window, "
                    "seconds, from the serving model's histogram (absent with fewer than 20 requests in the window).",
    )
    drain_seconds: int | None = Field(
        default=None, description="The drain bound the serving pods use (spec.serving.drainSeconds or its default).")
    drain_warning: str | None = Field(
        default=None, description="Set while the observed p99 request time exceeds half the drain bound: what to do.")
    load: str | None = Field(
        default=None, description="The load now (sequences the arrivals keep busy at the target batch) the last "
                                  "decision used.")
    ready_replicas: int | None = Field(default=None, description="Supply the last decision counted: replicas serving.")
    starting_replicas: int | None = Field(
        default=None, description="Supply the last decision counted: replicas ordered and not Ready yet (capacity on the way).")
    pods_deleted_before_ready: int | None = Field(
        default=None, description="Pods deleted before they turned Ready within the last hour (churn).")
    churn_warning: str | None = Field(
        default=None, description="Set while pods were deleted before Ready repeatedly within the last hour: what to do.")
    burst_warning: str | None = Field(
        default=None,
        description="Set while the burst floor stands (burstFloor auto) or, with burstFloor off, while a burst of the "
                    "last 30 minutes rose 1.25 x learnedHeadroomMax or more and queued: how far, and what to do.")
    memory: ScalerMemory | None = Field(
        default=None, description="What the autoscaler learned of the traffic, resumed after an operator restart.")
    panic: str | None = Field(
        default=None,
        description="Set while panic mode holds (spec.autoscaling.panic): since when, the load of the panic window "
                    "against the ready replicas, and when it ends.")
    schedule_floor: str | None = Field(
        default=None,
        description="Set while a schedule entry (spec.autoscaling.schedule) raises minReplicas: which entry, since "
                    "when, and the floor.")
    preempted_by: str | None = Field(
        default=None,
        description="Set while backends of higher priority on the same GPUs hold replicas this backend wants "
                    "(spec.autoscaling.priority): who (namespace/name and priority for backends of this namespace, a count for "
                    "others) and how many replicas it gave up.")
    waiting_for_capacity: str | None = Field(
        default=None,
        description="Set while this backend wants GPUs of its pool that no backend of lower priority can give up: "
                    "how many, and who holds them (namespace/name and priority for backends of this namespace, a count for "
                    "others); or, when no node of the pool could hold one of its pods even with the GPUs free, how many "
                    "replicas are not claimed and why (the scheduler's reasons and each request no node meets); or, "
                    "when the namespace's ResourceQuota on GPUs admits fewer replicas, how many are not claimed.")
    desired_replicas: int | None = None
    last_scale_time: str | None = None
    reason: str | None = Field(default=None, description="Why the last decision chose desiredReplicas.")
    message: str | None = Field(default=None, description="The last decision and its inputs (ratio, load, supply, forecast).")


class ModelStatus(_Model):
    """Download of a URI source into the model cache, or the inspection of a pvc source without an architecture."""

    phase: Literal["Resolving", "Downloading", "Inspecting", "Ready", "Failed"] | None = Field(
        default=None, description="Inspecting: a pvc source's inspector Job is reading config.json.")
    source: str | None = None
    resolved_revision: str | None = Field(default=None, description="Commit (hf://) or listing digest (s3://) the cache holds.")
    bytes_done: int | None = None
    bytes_total: int | None = None
    claim_name: str | None = None
    path: str | None = Field(default=None, description="Directory inside the cache claim.")
    last_progress_time: str | None = Field(
        default=None, description="When bytesDone last grew (a download without progress for "
                                  "spec.serving.progressDeadlineSeconds is Degraded: DownloadStalled).")


class AdapterStatus(_Model):
    """One adapter of spec.adapters: where it is and whether the base model serves it."""

    name: str = Field(max_length=63)
    phase: Literal["Pending", "Downloading", "Ready", "Incompatible", "Failed"] = Field(
        description="Ready: listed for the serving pods (in /v1/models); Incompatible: adapter_config.json does not "
                    "fit the base model or spec.engine.lora (reason, message); Failed: the download failed.")
    source: str | None = Field(default=None, max_length=2048)
    path: str | None = Field(default=None, max_length=4096, description="Where the serving pods read it.")
    rank: int | None = Field(default=None, description="adapter_config.json r, once read.")
    reason: str | None = Field(default=None, max_length=1024)
    message: str | None = Field(default=None, max_length=4096)


class LLMBackendStatus(_Model):
    observed_generation: int | None = None
    phase: Literal["Ready", "Progressing", "Degraded", "ScaledToZero"] | None = Field(
        default=None, description="What the conditions add up to, as Argo CD's health check reads them (STATUS column).")
    reason: str | None = Field(default=None, max_length=1024, description="The reason behind phase: the condition that decides it (REASON column).")
    ready: str | None = Field(default=None, max_length=32, description="Ready/desired replicas (READY column).")
    parallelism: str | None = Field(default=None, max_length=32, description="The plan's tensor x pipeline parallel size, e.g. 8x1 (TPxPP column).")
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
    adapters: list[AdapterStatus] | None = Field(default=None, max_length=MAX_ADAPTERS,
                                                 description="Each adapter of spec.adapters and its state.")


class LLMBackend(_Model):
    """A model served by Triton Inference Server with the TensorRT-LLM (or vLLM) backend."""

    api_version: Literal["llmbackend.dev/v1alpha1"] = "llmbackend.dev/v1alpha1"
    kind: Literal["LLMBackend"] = "LLMBackend"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LLMBackendSpec
    status: LLMBackendStatus | None = None

    model_config = ConfigDict(extra="ignore")
