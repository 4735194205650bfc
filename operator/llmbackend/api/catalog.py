"""Built-in model catalog: architectures of well-known models, by preset name."""

from __future__ import annotations

from .v1alpha1 import ModelArchitecture, ModelSpec

PRESETS: dict[str, ModelArchitecture] = {
    "llama-3.1-8b": ModelArchitecture(
        num_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, vocab_size=128_256, parameter_count=8_030_000_000,
    ),
    "llama-3.1-70b": ModelArchitecture(
        num_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
        head_dim=128, vocab_size=128_256, parameter_count=70_600_000_000,
    ),
    "llama-3.1-405b": ModelArchitecture(
        num_layers=126, hidden_size=16384, num_attention_heads=128, num_key_value_heads=8,
        head_dim=128, vocab_size=128_256, parameter_count=405_000_000_000,
    ),
    "mixtral-8x7b": ModelArchitecture(
        num_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, vocab_size=32_000, parameter_count=46_700_000_000,
    ),
    "qwen2.5-72b": ModelArchitecture(
        num_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
        head_dim=128, vocab_size=152_064, parameter_count=72_700_000_000,
    ),
    "mistral-7b": ModelArchitecture(
        num_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, vocab_size=32_768, parameter_count=7_250_000_000,
    ),
}
# Same shapes, newer weights.
PRESETS["llama-3.3-70b"] = PRESETS["llama-3.1-70b"]
PRESETS["llama-3-8b"] = PRESETS["llama-3.1-8b"]
PRESETS["llama-3-70b"] = PRESETS["llama-3.1-70b"]


class UnknownPresetError(ValueError):
    pass


def resolve_architecture(model: ModelSpec) -> ModelArchitecture:
    """The architecture of a model spec: explicit, or looked up by preset."""
    if model.architecture is not None:
        return model.architecture
    if model.preset in PRESETS:
        return PRESETS[model.preset]
    known = ", ".join(sorted(PRESETS))
    raise UnknownPresetError(f"unknown model preset {model.preset!r}; known presets: {known}")
