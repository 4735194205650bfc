"""Built-in model catalog: architectures of well-known models, by preset name.

Each preset is what api/checkpoint.py reads from the model's published config.json
(tests/fixtures/checkpoints/<PRESET_FIXTURES[name]>/config.json; a unit test checks every
field), with the parameter count the model card publishes (active parameters: what decode reads per token,
see api/checkpoint.py).
"""

from __future__ import annotations

from .v1alpha1 import ModelArchitecture, ModelSpec


def _dense(layers: int, hidden: int, heads: int, kv_heads: int, vocab: int, params: int, head_dim: int = 128,
           **extra: object) -> ModelArchitecture:
    return ModelArchitecture(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, vocab_size=vocab, parameter_count=params, tie_word_embeddings=False, **extra,  # type: ignore[arg-type]
    )


PRESETS: dict[str, ModelArchitecture] = {
    "llama-3.1-8b": _dense(32, 4096, 32, 8, 128_256, 8_030_000_000),
    "llama-3.1-70b": _dense(80, 8192, 64, 8, 128_256, 70_600_000_000),
    "llama-3.1-405b": _dense(126, 16384, 128, 8, 128_256, 405_000_000_000),
    "mixtral-8x7b": _dense(
        32, 4096, 32, 8, 32_000, 46_700_000_000,
        active_parameter_count=12_900_000_000, num_experts=8, num_experts_per_token=2, num_shared_experts=0,
    ),
    "qwen2.5-72b": _dense(80, 8192, 64, 8, 152_064, 72_700_000_000),
    "mistral-7b": _dense(32, 4096, 32, 8, 32_768, 7_250_000_000),
    "mistral-small-24b": _dense(40, 5120, 32, 8, 131_072, 23_600_000_000),
    "qwen3-32b": _dense(64, 5120, 64, 8, 151_936, 32_800_000_000),
    "qwen3-235b-a22b": _dense(
        94, 4096, 64, 4, 151_936, 235_000_000_000,
        active_parameter_count=22_000_000_000, num_experts=128, num_experts_per_token=8, num_shared_experts=0,
    ),
    # Text model only (the 109B figure includes the vision encoder; Meta's 17B active counts the input
    # embedding, which decode does not stream). The 36 RoPE layers use chunked
    # attention over 8192-token chunks: they cache at most a chunk, like a sliding window.
    "llama-4-scout-17b-16e": _dense(
        48, 5120, 40, 8, 202_048, 107_800_000_000,
        active_parameter_count=16_100_000_000, num_experts=16, num_experts_per_token=1, num_shared_experts=1,
        sliding_window=8192, sliding_window_layers=36,
    ),
    # MLA: a 512 + 64 latent per token and layer; head_dim is the q/k width (128 nope + 64 rope).
    "deepseek-v3": _dense(
        61, 7168, 128, 128, 129_280, 671_000_000_000, head_dim=192,
        active_parameter_count=37_000_000_000, num_experts=256, num_experts_per_token=8, num_shared_experts=1,
        kv_lora_rank=512, qk_rope_head_dim=64, checkpoint_quantization="fp8",
    ),
    "gpt-oss-120b": _dense(
        36, 2880, 64, 8, 201_088, 116_800_000_000, head_dim=64,
        active_parameter_count=5_130_000_000, num_experts=128, num_experts_per_token=4, num_shared_experts=0,
        sliding_window=128, sliding_window_layers=18, checkpoint_quantization="mxfp4",
    ),
    # Text model only; tied embeddings; 5 of every 6 layers attend to a 1024-token window.
    "gemma-3-27b": ModelArchitecture(
        num_layers=62, hidden_size=5376, num_attention_heads=32, num_key_value_heads=16, head_dim=128,
        vocab_size=262_208, parameter_count=27_000_000_000, tie_word_embeddings=True,
        sliding_window=1024, sliding_window_layers=52,
    ),
}
# Same shapes, newer (or reasoning-tuned) weights.
PRESETS["llama-3.3-70b"] = PRESETS["llama-3.1-70b"]
PRESETS["llama-3-8b"] = PRESETS["llama-3.1-8b"]
PRESETS["llama-3-70b"] = PRESETS["llama-3.1-70b"]
PRESETS["deepseek-r1"] = PRESETS["deepseek-v3"]

# The fixture config.json (tests/fixtures/checkpoints/) each preset is checked against.
PRESET_FIXTURES: dict[str, str] = {
    "llama-3.1-8b": "llama-3.1-8b", "llama-3-8b": "llama-3.1-8b",
    "llama-3.1-70b": "llama-3.1-70b", "llama-3.3-70b": "llama-3.1-70b", "llama-3-70b": "llama-3.1-70b",
    "llama-3.1-405b": "llama-3.1-405b", "mixtral-8x7b": "mixtral-8x7b", "qwen2.5-72b": "qwen2.5-72b",
    "mistral-7b": "mistral-7b-v0.3", "mistral-small-24b": "mistral-small-24b-2501", "qwen3-32b": "qwen3-32b",
    "qwen3-235b-a22b": "qwen3-235b-a22b", "llama-4-scout-17b-16e": "llama-4-scout-17b-16e",
    "deepseek-v3": "deepseek-v3", "deepseek-r1": "deepseek-v3", "gpt-oss-120b": "gpt-oss-120b",
    "gemma-3-27b": "gemma-3-27b",
}


# The Hugging Face repository each fixture's config.json comes from (tests/fixtures/checkpoints/SOURCES.md; a unit
# test checks they agree): `llmbackend presets` shows it as the hf:// source of the preset.
FIXTURE_HUB_REPOS: dict[str, str] = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B-Instruct",
    "llama-4-scout-17b-16e": "meta-llama/Llama-4-Scout-17B-16E-Instruct", "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "qwen3-32b": "Qwen/Qwen3-32B", "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B", "gpt-oss-120b": "openai/gpt-oss-120b",
    "gemma-3-27b": "google/gemma-3-27b-it", "mistral-small-24b-2501": "mistralai/Mistral-Small-24B-Instruct-2501",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1", "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "mistral-7b-v0.3": "mistralai/Mistral-7B-Instruct-v0.3",
}


class UnknownPresetError(ValueError):
    pass


def resolve_architecture(model: ModelSpec) -> ModelArchitecture:
    """The architecture of a model spec: explicit, or looked up by preset."""
    if model.architecture is not None:
        return model.architecture
    if model.preset in PRESETS:
        return PRESETS[model.preset]
    known = ", ".join(sorted(PRESETS))
    if model.preset is None:
        raise UnknownPresetError("spec.model has neither preset nor architecture (and no checkpoint was read); "
                                 f"known presets (`llmbackend presets`): {known}")
    raise UnknownPresetError(f"unknown model preset {model.preset!r}; known presets (`llmbackend presets`): {known}")
