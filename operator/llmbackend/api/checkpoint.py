"""Architecture from a Hugging Face checkpoint: config.json (+ safetensors index) -> ModelArchitecture.

Pure: takes the parsed JSON, returns the API type. The operator feeds it what it read
over HTTPS (hf://) or what the download Job reported (s3://, pvc).

Parameter count (when the checkpoint gives none; biases and norms are left out, < 0.1 %):
  embeddings      vocab x hidden, once more for lm_head unless tie_word_embeddings
  attention/layer GQA: hidden x head_dim x (2 x heads + 2 x kv_heads)   (q, o; k, v)
                  MLA (DeepSeek): hidden x q_lora + q_lora x heads x (nope + rope)  (or hidden x heads x (nope + rope))
                                  + hidden x (kv_lora + rope) + kv_lora x heads x (nope + v) + heads x v x hidden
  MLP/layer       gated (SwiGLU/GeGLU): 3 x hidden x intermediate
  MoE/layer       (routed + shared experts) x 3 x hidden x expert_intermediate + router hidden x routed
  active          the same with only the routed experts a token uses (num_experts_per_tok) plus shared ones,
                  and lm_head but not the input embedding (a token reads one row of it): what decode streams
                  per token. Model cards differ here (OpenAI's 5.1B for gpt-oss-120b leaves the embedding out,
                  Meta's 17B for Llama 4 Scout counts it).
DeepSeek's multi-token-prediction layer (num_nextn_predict_layers) is not counted: it is not served
by default (it is in the checkpoint's bytes, metadata.total_size, which weight_bytes takes as is).

KV cache (see kv_bytes_per_token / kv_cache_bytes): per layer and token, GQA caches
2 x kv_heads x head_dim elements, MLA one latent of kv_lora_rank + qk_rope_head_dim elements
(not split by tensor parallelism). Sliding-window layers, and Llama 4's chunked-attention layers
(they attend within chunks of attention_chunk_size, so they never hold more than that), cache at
most the window.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .v1alpha1 import ModelArchitecture


class CheckpointError(ValueError):
    """The checkpoint cannot be read into an architecture; the message says what to do."""

    reason = "InvalidCheckpointConfig"


class UnsupportedModelTypeError(CheckpointError):
    reason = "UnsupportedModelType"


# Fields transformers fills in when a config.json leaves them out (its *Config class defaults).
# Gemma 3's published text_config omits vocab_size and the sliding-window pattern, for one.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "sliding_window": 4096, "sliding_window_pattern": 6,
                    "tie_word_embeddings": True, "head_dim": 256, "num_key_value_heads": 16},
    "gemma2": {"tie_word_embeddings": True, "sliding_window": 4096, "head_dim": 256},
    "llama4_text": {"tie_word_embeddings": False, "attention_chunk_size": 8192, "interleave_moe_layer_step": 1},
    "gpt_oss": {"tie_word_embeddings": False},
    "deepseek_v3": {"tie_word_embeddings": False, "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_shared_experts": 1},
    "deepseek_v2": {"tie_word_embeddings": False, "first_k_dense_replace": 0, "moe_layer_freq": 1},
    "qwen3_moe": {"decoder_sparse_step": 1, "mlp_only_layers": []},
    "qwen2_moe": {"decoder_sparse_step": 1, "mlp_only_layers": []},
}

# Multimodal wrappers: the language model's shape sits in text_config.
_TEXT_CONFIG_WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text", "mistral3": None}


def _get(c: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = c.get(key)
    return default if value is None else value


def _req(c: Mapping[str, Any], key: str, model_type: str) -> int:
    value = c.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(
            f"config.json of model_type {model_type!r} has no valid {key!r} (got {value!r}); "
            "fix the checkpoint or set spec.model.architecture explicitly"
        )
    return value


def text_config(config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(model_type, the language model's config with transformers' defaults applied)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CheckpointError("config.json has no model_type; is this a Hugging Face transformers checkpoint?")
    c = dict(config)
    if model_type in _TEXT_CONFIG_WRAPPERS and isinstance(config.get("text_config"), Mapping):
        inner = dict(config["text_config"])
        model_type = inner.get("model_type") or _TEXT_CONFIG_WRAPPERS[model_type] or model_type
        # Top-level flags (tie_word_embeddings, quantization_config) apply to the text model too.
        for key in ("tie_word_embeddings", "quantization_config", "torch_dtype"):
            if key in config and key not in inner:
                inner[key] = config[key]
        c = inner
    for key, value in _DEFAULTS.get(model_type, {}).items():
        if c.get(key) is None:
            c[key] = value
    return model_type, c


# ---- per-family readers: return the ModelArchitecture fields that differ by family ----

def _gqa_attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    return hidden * head_dim * (2 * heads + 2 * kv_heads)


def _window_layers_from_types(c: Mapping[str, Any]) -> int | None:
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if t == "sliding_attention")
    return None


def _dense_common(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    layers = _req(c, "num_hidden_layers", mt)
    hidden = _req(c, "hidden_size", mt)
    heads = _req(c, "num_attention_heads", mt)
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or hidden // heads
    return {"num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": _req(c, "vocab_size", mt)}


def _llama_like(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """llama, mistral, qwen2, qwen3, gemma2/3: dense, GQA, gated MLP; optional sliding window."""
    f = _dense_common(c, mt)
    inter = _req(c, "intermediate_size", mt)
    per_layer = _gqa_attention_params(f["hidden_size"], f["num_attention_heads"], f["num_key_value_heads"], f["head_dim"])
    per_layer += 3 * f["hidden_size"] * inter
    f["_layer_params"] = per_layer * f["num_layers"]
    f["_active_layer_params"] = f["_layer_params"]
    window, window_layers = None, None
    # As transformers builds layer_types (models/gemma3/configuration_gemma3.py and gemma2's, Gemma3TextConfig /
    # Gemma2Config __init__): an explicit layer_types list wins; else layer i is "sliding_attention" unless
    # (i + 1) % sliding_window_pattern == 0 (Gemma 3's pattern defaults to 6, Gemma 2 alternates: pattern 2), so
    # num_layers - num_layers // pattern layers are windowed.
    if mt in ("gemma3_text", "gemma2"):
        window = c.get("sliding_window")
        window_layers = _window_layers_from_types(c)
        if window_layers is None:
            # Gemma 2: every other layer; Gemma 3: every `pattern`-th layer is global, the rest windowed.
            pattern = 2 if mt == "gemma2" else int(_get(c, "sliding_window_pattern", 6))
            window_layers = f["num_layers"] - f["num_layers"] // pattern
    elif mt in ("qwen2", "qwen3"):
        if c.get("use_sliding_window") and c.get("sliding_window"):
            window = c["sliding_window"]
            window_layers = max(f["num_layers"] - int(_get(c, "max_window_layers", f["num_layers"])), 0)
    elif c.get("sliding_window"):  # mistral (v0.1 7B: 4096 on every layer)
        window = c["sliding_window"]
        window_layers = _window_layers_from_types(c)
        if window_layers is None:
            window_layers = f["num_layers"]
    if window and window_layers:
        f["sliding_window"], f["sliding_window_layers"] = int(window), int(window_layers)
    return f


def _mixtral(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    f = _dense_common(c, mt)
    hidden, inter = f["hidden_size"], _req(c, "intermediate_size", mt)
    experts, top_k = _req(c, "num_local_experts", mt), _req(c, "num_experts_per_tok", mt)
    attn = _gqa_attention_params(hidden, f["num_attention_heads"], f["num_key_value_heads"], f["head_dim"])
    expert = 3 * hidden * inter
    f["_layer_params"] = f["num_layers"] * (attn + experts * expert + hidden * experts)
    f["_active_layer_params"] = f["num_layers"] * (attn + top_k * expert + hidden * experts)
    f.update(num_experts=experts, num_experts_per_token=top_k, num_shared_experts=0)
    if c.get("sliding_window"):
        f.update(sliding_window=int(c["sliding_window"]), sliding_window_layers=f["num_layers"])
    return f


def _qwen_moe(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    f = _dense_common(c, mt)
    hidden, layers = f["hidden_size"], f["num_layers"]
    experts, top_k = _req(c, "num_experts", mt), _req(c, "num_experts_per_tok", mt)
    expert = 3 * hidden * _req(c, "moe_intermediate_size", mt)
    dense = 3 * hidden * _req(c, "intermediate_size", mt)
    shared_inter = int(_get(c, "shared_expert_intermediate_size", 0))  # qwen2_moe has one shared expert
    shared = 3 * hidden * shared_inter + (hidden if shared_inter else 0)
    step, mlp_only = int(_get(c, "decoder_sparse_step", 1)), set(_get(c, "mlp_only_layers", []))
    moe_layers = sum(1 for i in range(layers) if i not in mlp_only and (i + 1) % step == 0)
    attn = layers * _gqa_attention_params(hidden, f["num_attention_heads"], f["num_key_value_heads"], f["head_dim"])
    router = hidden * experts
    f["_layer_params"] = attn + (layers - moe_layers) * dense + moe_layers * (experts * expert + shared + router)
    f["_active_layer_params"] = attn + (layers - moe_layers) * dense + moe_layers * (top_k * expert + shared + router)
    f.update(num_experts=experts, num_experts_per_token=top_k, num_shared_experts=1 if shared_inter else 0)
    return f


def _deepseek(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """DeepSeek-V2/V3/R1: MLA attention, the first k layers dense, the rest MoE with shared experts."""
    layers, hidden = _req(c, "num_hidden_layers", mt), _req(c, "hidden_size", mt)
    heads = _req(c, "num_attention_heads", mt)
    kv_lora, rope = _req(c, "kv_lora_rank", mt), _req(c, "qk_rope_head_dim", mt)
    nope, v_dim = _req(c, "qk_nope_head_dim", mt), _req(c, "v_head_dim", mt)
    q_lora = c.get("q_lora_rank")
    q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
    attn = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
    experts, top_k = _req(c, "n_routed_experts", mt), _req(c, "num_experts_per_tok", mt)
    shared = int(_get(c, "n_shared_experts", 0))
    expert = 3 * hidden * _req(c, "moe_intermediate_size", mt)
    dense = 3 * hidden * _req(c, "intermediate_size", mt)
    first_dense, freq = int(_get(c, "first_k_dense_replace", 0)), int(_get(c, "moe_layer_freq", 1))
    moe_layers = sum(1 for i in range(layers) if i >= first_dense and i % freq == 0)
    router = hidden * experts
    base = layers * attn + (layers - moe_layers) * dense
    return {
        "num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
        # MLA has no per-head K/V cache; heads and the q/k head width keep TP checks meaningful.
        "num_key_value_heads": int(_get(c, "num_key_value_heads", heads)), "head_dim": nope + rope,
        "vocab_size": _req(c, "vocab_size", mt),
        "num_experts": experts, "num_experts_per_token": top_k, "num_shared_experts": shared,
        "kv_lora_rank": kv_lora, "qk_rope_head_dim": rope,
        "_layer_params": base + moe_layers * ((experts + shared) * expert + router),
        "_active_layer_params": base + moe_layers * ((top_k + shared) * expert + router),
    }


def _gpt_oss(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """gpt-oss: every layer MoE (no shared expert), alternating sliding-window and full attention."""
    f = _dense_common(c, mt)
    hidden, layers = f["hidden_size"], f["num_layers"]
    experts = _req(c, "num_local_experts", mt)
    top_k = int(_get(c, "num_experts_per_tok", _get(c, "experts_per_token", 4)))
    expert = 3 * hidden * _req(c, "intermediate_size", mt)  # gate_up (2 x) + down
    attn = _gqa_attention_params(hidden, f["num_attention_heads"], f["num_key_value_heads"], f["head_dim"])
    f["_layer_params"] = layers * (attn + experts * expert + hidden * experts)
    f["_active_layer_params"] = layers * (attn + top_k * expert + hidden * experts)
    f.update(num_experts=experts, num_experts_per_token=top_k, num_shared_experts=0)
    window_layers = _window_layers_from_types(c)
    if window_layers is None:
        window_layers = (layers + 1) // 2  # layer 0 is windowed, then every other one
    if c.get("sliding_window") and window_layers:
        f.update(sliding_window=int(c["sliding_window"]), sliding_window_layers=window_layers)
    return f


def _llama4(c: Mapping[str, Any], mt: str) -> dict[str, Any]:
    """Llama 4: MoE every `interleave_moe_layer_step` layers (routed + one shared expert of
    intermediate_size), dense layers of intermediate_size_mlp; RoPE layers use chunked attention."""
    f = _dense_common(c, mt)
    hidden, layers = f["hidden_size"], f["num_layers"]
    experts, top_k = _req(c, "num_local_experts", mt), _req(c, "num_experts_per_tok", mt)
    expert = 3 * hidden * _req(c, "intermediate_size", mt)
    dense = 3 * hidden * int(_get(c, "intermediate_size_mlp", c["intermediate_size"]))
    step = int(_get(c, "interleave_moe_layer_step", 1))
    moe_layers = c.get("moe_layers")
    n_moe = len(moe_layers) if isinstance(moe_layers, list) else sum(1 for i in range(layers) if (i + 1) % step == 0)
    attn = layers * _gqa_attention_params(hidden, f["num_attention_heads"], f["num_key_value_heads"], f["head_dim"])
    router = hidden * experts
    base = attn + (layers - n_moe) * dense
    f["_layer_params"] = base + n_moe * ((experts + 1) * expert + router)
    f["_active_layer_params"] = base + n_moe * ((top_k + 1) * expert + router)
    f.update(num_experts=experts, num_experts_per_token=top_k, num_shared_experts=1)
    chunk = c.get("attention_chunk_size")
    no_rope = c.get("no_rope_layers")
    # no_rope_layers[i] == 1: layer i uses RoPE and chunked (local) attention; 0: global NoPE layer.
    chunked = sum(1 for x in no_rope if x) if isinstance(no_rope, list) and no_rope else layers - layers // 4
    if chunk and chunked:
        f.update(sliding_window=int(chunk), sliding_window_layers=chunked)
    return f


_READERS: dict[str, Callable[[Mapping[str, Any], str], dict[str, Any]]] = {
    "llama": _llama_like, "mistral": _llama_like, "qwen2": _llama_like, "qwen3": _llama_like,
    "gemma2": _llama_like, "gemma3_text": _llama_like,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
    "llama4_text": _llama4,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(set(_READERS) | {"llama4", "gemma3"}))


def checkpoint_quantization(config: Mapping[str, Any]) -> str | None:
    """The quant_method a checkpoint declares (fp8, awq, gptq, mxfp4, compressed-tensors, ...), normalized."""
    qc = config.get("quantization_config")
    if not isinstance(qc, Mapping) and isinstance(config.get("text_config"), Mapping):
        qc = config["text_config"].get("quantization_config")
    if not isinstance(qc, Mapping):
        return None
    method = qc.get("quant_method") or qc.get("quant_algo")
    # NVIDIA ModelOpt writes quant_method "modelopt" and the format in quant_algo (FP8, NVFP4, ...), in
    # config.json or, older exports, in hf_quant_config.json (model_fetch merges that file's "quantization" block
    # here): the algorithm is what says how wide the weights are.
    algo = qc.get("quant_algo")
    if (not method or str(method).lower() == "modelopt") and isinstance(algo, str) and algo:
        method = algo
    if not isinstance(method, str) or not method:
        return None
    return re.sub(r"[^a-z0-9_\-]+", "-", method.lower()).strip("-")[:63] or None


def architecture_from_config(
    config: Mapping[str, Any],
    index: Mapping[str, Any] | None = None,
    weight_bytes: int | None = None,
) -> ModelArchitecture:
    """ModelArchitecture of a checkpoint from its config.json and, when present, its
    model.safetensors.index.json (metadata.total_size = exact weight bytes). `weight_bytes`
    stands in for the index of a single-file checkpoint (the size of model.safetensors)."""
    model_type, c = text_config(config)
    reader = _READERS.get(model_type)
    if reader is None:
        raise UnsupportedModelTypeError(
            f"model_type {model_type!r} is not known to the architecture reader "
            f"(known: {', '.join(SUPPORTED_MODEL_TYPES)}); set spec.model.architecture explicitly "
            "(layers, hidden size, heads, KV heads, head dim, vocabulary, parameter count)"
        )
    fields = reader(c, model_type)
    tied = bool(c.get("tie_word_embeddings", False))
    embed = fields["vocab_size"] * fields["hidden_size"] * (1 if tied else 2)
    total = fields.pop("_layer_params") + embed
    active = fields.pop("_active_layer_params") + fields["vocab_size"] * fields["hidden_size"]
    if index is not None:
        size = (index.get("metadata") or {}).get("total_size")
        if isinstance(size, (int, float)) and size > 0:
            weight_bytes = int(size)
    return ModelArchitecture(
        **fields,
        parameter_count=total,
        active_parameter_count=active if fields.get("num_experts") else None,
        tie_word_embeddings=tied,
        weight_bytes=weight_bytes,
        checkpoint_quantization=checkpoint_quantization(config),
    )


# ---- KV cache size ----

def kv_elements_per_token_layer(arch: ModelArchitecture) -> int:
    """Cached elements per token in one layer (unsharded): MLA latent, or K and V of every KV head."""
    if arch.kv_lora_rank:
        return arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)
    return 2 * arch.num_key_value_heads * arch.head_dim


def windowed_layers(arch: ModelArchitecture) -> int:
    if not arch.sliding_window:
        return 0
    return arch.num_layers if arch.sliding_window_layers is None else arch.sliding_window_layers


def kv_bytes_per_token(arch: ModelArchitecture, element_bytes: int = 2) -> int:
    """KV bytes each further token of a long sequence adds: full-attention layers only
    (windowed layers stop growing at the window). Equals the all-layer figure without windows."""
    return (arch.num_layers - windowed_layers(arch)) * kv_elements_per_token_layer(arch) * element_bytes


def kv_cache_bytes(arch: ModelArchitecture, tokens: int, element_bytes: int = 2) -> int:
    """KV bytes of one sequence of `tokens` tokens (unsharded)."""
    per_layer = kv_elements_per_token_layer(arch) * element_bytes
    windowed = windowed_layers(arch)
    window_tokens = min(tokens, arch.sliding_window or tokens)
    return per_layer * ((arch.num_layers - windowed) * tokens + windowed * window_tokens)
