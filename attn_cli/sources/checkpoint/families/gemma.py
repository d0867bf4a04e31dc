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

from attn_cli.sources.checkpoint.families import norms
from attn_cli.sources.checkpoint.families.decoder import SLIDING, Decoder, types_from_pattern

GEMMA2_NAMES = {
    **Decoder.names,
    "attn_out_norm": "post_attention_layernorm",
    "mlp_norm": "pre_feedforward_layernorm",
    "mlp_out_norm": "post_feedforward_layernorm",
}


class Gemma(Decoder):
    family = "gemma"
    norm = staticmethod(norms.rms_norm_plus_one)
    tie_default = True
    norm_text = "h_L / sqrt(mean(h_L²) + eps) · (1 + g): Gemma's RMSNorm"
    embed_scale = True
    act_default = "gelu_pytorch_tanh"
    head_dim_default = 256

    def activation_name(self) -> Any:
        name = self.config.get(self.act_key) or self.act_default
        # transformers reads "gelu" in a Gemma config as the tanh approximation (the official files' legacy value)
        return "gelu_pytorch_tanh" if name == "gelu" else name


class Gemma2(Gemma):
    family = "gemma2"
    final_softcap_default = 30.0  # Gemma2Config's final_logit_softcapping
    names = GEMMA2_NAMES
    act_key = "hidden_activation"
    window_default = 4096
    pattern = 2  # every 2nd layer global, by default

    def layer_types(self) -> list[str] | None:
        return list(self.config.get("layer_types") or types_from_pattern(self.layers, self.pattern))

    def divisor(self, layer: int) -> tuple[float, str]:
        scalar = float(self.config.get("query_pre_attn_scalar", 256))
        return math.sqrt(scalar), f"sqrt({scalar:g})"

    def attention_softcap(self) -> float | None:
        cap = self.config.get("attn_logit_softcapping", 50.0 if self.family == "gemma2" else None)
        return float(cap) if cap else None


class Gemma3Text(Gemma2):
    family = "gemma3_text"
    final_softcap_default = None  # Gemma3TextConfig's: none
    names = {**GEMMA2_NAMES, "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
    qk_norm = "head"
    rotary_per_layer_type = True

    @property
    def pattern(self) -> int:  # type: ignore[override]
        return int(self.config.get("sliding_window_pattern", 6))

    def rope_parameters(self, layer_type: str | None) -> Mapping[str, Any] | None:
        """transformers 5 nests rope_parameters by layer type; older files have rope_theta
        (global layers, with rope_scaling), rope_local_base_freq (local layers)."""
        chosen = self.nested_rope(layer_type)
        if chosen is None and layer_type == SLIDING:
            chosen = {"rope_type": "default", "rope_theta": float(self.config.get("rope_local_base_freq", 10000.0))}
        elif chosen is None:
            given = self.config.get("rope_parameters") or {}
            chosen = {"rope_type": "default", **given, **(self.config.get("rope_scaling") or {})}
        chosen.setdefault("rope_theta", 10000.0 if layer_type == SLIDING else float(self.config.get("rope_theta", 1e6)))
        return chosen
