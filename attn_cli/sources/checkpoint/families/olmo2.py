"""OLMo 2: no norm before attention or MLP; RMSNorm on each branch's output inside
the residual (post_attention_layernorm, post_feedforward_layernorm), and on the
whole query and key projections (all heads at once) before the rotation.

Shapes: T tokens, D d_model, H query heads, Hkv key/value heads, Dk head_dim.
"""

from __future__ import annotations

from attn_cli.sources.checkpoint.families.decoder import Decoder
from attn_cli.sources.checkpoint.families.decoder_config import Olmo2Config

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {"olmo2": ("olmo2", "Olmo2")}


class Olmo2(Decoder):
    family = "olmo2"
    names = {
        "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
        "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm", "attn_out_norm": "post_attention_layernorm",
        "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
        "mlp_out_norm": "post_feedforward_layernorm",
    }  # fmt: skip
    pre_norm = False
    post_norm = True
    norm_kind = "rms_wide_gain"
    config_class = Olmo2Config
    qk_norm = "whole"
    rotary_precision = "float32"
