"""Llama-style decoders: Llama 2/3, Mistral, Qwen2 and Qwen3 (RMSNorm before
attention and MLP, rotary positions, grouped-query attention, a SiLU-gated MLP).

Shapes: T tokens, D d_model, H query heads, Hkv key/value heads, Dk head_dim.

Query head h shares key/value head h // (H / Hkv): heads are grouped, not tiled.
Qwen3 norms each head's query and key (RMSNorm over Dk) before the rotation.
"""

from __future__ import annotations

from attn_cli.sources.checkpoint.families.decoder import SLIDING, Decoder
from attn_cli.sources.checkpoint.families.decoder_config import QwenConfig

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {
    "llama": ("llama", "Llama"),
    "mistral": ("llama", "Llama"),
    "qwen2": ("llama", "Llama"),
    "qwen3": ("qwen3", "Qwen3"),
}


class Llama(Decoder):
    """Llama, Mistral (a sliding window on every layer when set) and Qwen2 (q/k/v
    biases always, no W_o bias; the window from max_window_layers on)."""

    family = "llama"
    weights_note = ""
    config_class = QwenConfig

    def biases(self) -> tuple[bool, bool, bool]:
        bias, mlp = bool(self.c.attention_bias), bool(self.c.mlp_bias)
        if self.model_type == "qwen2":
            return True, False, mlp
        return bias, bias, mlp

    def layer_types(self) -> list[str] | None:
        if self.model_type == "mistral":
            return [SLIDING] * self.layers
        return qwen_layer_types(self.c, self.layers) if self.model_type == "qwen2" else None


class Qwen3(Decoder):
    """Qwen3: Llama's layer with RMSNorm of each head's query and key (q_norm, k_norm
    over Dk) before the rotation; biases on all four projections when attention_bias."""

    family = "qwen3"
    names = {**Decoder.names, "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
    qk_norm = "head"
    config_class = QwenConfig

    def layer_types(self) -> list[str] | None:
        return qwen_layer_types(self.c, self.layers)  # type: ignore[arg-type]


def qwen_layer_types(config: QwenConfig, layers: int) -> list[str] | None:
    """Qwen2/3's windows: only with use_sliding_window; then layer_types' sliding layers,
    else the layers from max_window_layers on."""
    if not config.use_sliding_window or not config.sliding_window:
        return None
    if config.layer_types:
        return list(config.layer_types)
    first = int(config.max_window_layers)
    return [SLIDING if i >= first else "full_attention" for i in range(layers)]
