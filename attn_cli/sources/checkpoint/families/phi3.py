"""Phi-3 and Phi-4-mini: Llama's layer with fused projections (qkv_proj rows [all q |
all k | all v], gate_up_proj [gate | up]), LongRoPE and, where configured, a partial
rotation and a sliding window on every layer.

Shapes: T tokens, D d_model, H query heads, Hkv key/value heads, Dk = D / H.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attn_cli.sources.checkpoint.families.decoder import SLIDING, Decoder
from attn_cli.sources.checkpoint.families.decoder_config import Phi3Config

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {"phi3": ("phi3", "Phi3")}


class Phi3(Decoder):
    family = "phi3"
    names = {
        "attn_norm": "input_layernorm", "qkv": "self_attn.qkv_proj", "o": "self_attn.o_proj",
        "mlp_norm": "post_attention_layernorm", "gate_up": "mlp.gate_up_proj", "down": "mlp.down_proj",
    }  # fmt: skip
    qkv_kind = "fused"
    mlp_kind = "gated_fused"
    config_class = Phi3Config  # its original_max_position_embeddings (4096) takes priority over the rotary dict's, as in transformers
    weights_note = "W_q, W_k and W_v are stored as one matrix, qkv_proj: its rows are all of W_q, then W_k, then W_v"

    def reads_head_dim(self) -> bool:
        return False

    def biases(self) -> tuple[bool, bool, bool]:
        return False, False, False

    def layer_types(self) -> list[str] | None:
        return [SLIDING] * self.layers

    def rope_parameters(self, layer_type: str | None) -> Mapping[str, Any] | None:
        given = dict(self.c.rope() or {})
        if given.get("rope_type", given.get("type")) in ("su", "yarn"):  # what older Phi-3 files call LongRoPE
            given["rope_type"] = "longrope"
            given.pop("type", None)
        return given
