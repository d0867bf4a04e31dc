"""Gemma 1, 2 and 3 (text): embeddings times sqrt(D), RMSNorm as x · (1 + weight)
in float32, a GELU-tanh gated MLP, grouped-query attention.

Shapes: T tokens, D d_model, H query heads, Hkv key/value heads, Dk head_dim.

Gemma 2 and 3 add norms after attention and after the MLP (four per layer), divide
the scores by sqrt(query_pre_attn_scalar) instead of sqrt(Dk), and alternate
sliding-window and global layers. Gemma 2 soft-caps the scaled scores
(cap · tanh(s / cap)); Gemma 3 norms each head's query and key instead and gives
its local and global layers rotary settings of their own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attn_cli.sources.checkpoint.families.decoder import SLIDING, Decoder, types_from_pattern
from attn_cli.sources.checkpoint.families.decoder_config import Gemma2Config, Gemma3Config, GemmaConfig

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {"gemma": ("gemma", "Gemma"), "gemma2": ("gemma2", "Gemma2"), "gemma3_text": ("gemma3_text", "Gemma3Text")}

GEMMA2_NAMES = {
    **Decoder.names,
    "attn_out_norm": "post_attention_layernorm",
    "mlp_norm": "pre_feedforward_layernorm",
    "mlp_out_norm": "post_feedforward_layernorm",
}


class Gemma(Decoder):
    family = "gemma"
    norm_kind = "rms_plus_one"
    config_class = GemmaConfig
    norm_text = "h_L / sqrt(mean(h_L²) + eps) · (1 + g): Gemma's RMSNorm"
    embed_scale = True
    head_dim_default = 256

    def activation_name(self) -> Any:
        name = self.c.activation or "gelu_pytorch_tanh"
        # transformers reads "gelu" in a Gemma config as the tanh approximation (the official files' legacy value)
        return "gelu_pytorch_tanh" if name == "gelu" else name


class Gemma2(Gemma):
    family = "gemma2"
    names = GEMMA2_NAMES
    post_norm = True
    config_class = Gemma2Config
    pattern = 2  # every 2nd layer global, by default

    @property
    def gemma(self) -> Gemma2Config:
        assert isinstance(self.c, Gemma2Config)
        return self.c

    def layer_types(self) -> list[str] | None:
        return list(self.c.layer_types or types_from_pattern(self.layers, self.pattern))

    def divisor(self, layer: int) -> tuple[float, str]:
        scalar = float(self.gemma.query_pre_attn_scalar)
        return math.sqrt(scalar), f"sqrt({scalar:g})"

    def score_scale(self, layer: int) -> float:
        return float(self.gemma.query_pre_attn_scalar) ** -0.5  # Gemma2Attention.scaling, multiplied in

    def attention_softcap(self) -> float | None:
        cap = self.gemma.attention_softcap
        return float(cap) if cap else None


class Gemma3Text(Gemma2):
    family = "gemma3_text"
    config_class = Gemma3Config
    names = {**GEMMA2_NAMES, "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
    qk_norm = "head"
    rotary_per_layer_type = True

    @property
    def pattern(self) -> int:  # type: ignore[override]
        assert isinstance(self.c, Gemma3Config)
        return int(self.c.sliding_window_pattern)

    def rope_parameters(self, layer_type: str | None) -> Mapping[str, Any] | None:
        """transformers 5 nests rope_parameters by layer type; older files have rope_theta
        (global layers, with rope_scaling), rope_local_base_freq (local layers)."""
        c = self.c
        assert isinstance(c, Gemma3Config)
        chosen = self.c.nested_rope(layer_type)
        if chosen is None and layer_type == SLIDING:
            chosen = {"rope_type": "default", "rope_theta": float(c.local_theta)}
        elif chosen is None:
            chosen = {"rope_type": "default", **(c.rope_parameters or {}), **(c.rope_scaling or {})}
        chosen.setdefault("rope_theta", 10000.0 if layer_type == SLIDING else float(c.global_theta))
        return chosen
