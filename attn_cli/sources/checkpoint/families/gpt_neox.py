"""GPT-NeoX and Pythia: LayerNorm with biases, a fused query_key_value whose rows
are [q_h | k_h | v_h] head by head, a partial rotation (rotary_pct, 25% in Pythia),
and the parallel residual: h + attention(ln_1(h)) + MLP(ln_2(h)).

Shapes: T tokens, D d_model, H heads, Dk = D / H, F intermediate_size.
"""

from __future__ import annotations

from typing import Any

from attn_cli.sources.checkpoint.families.decoder import Decoder
from attn_cli.sources.checkpoint.families.decoder_config import GptNeoXConfig

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {"gpt_neox": ("gpt_neox", "GptNeoX")}


class GptNeoX(Decoder):
    family = "gpt_neox"
    anchor = "embed_in.weight"
    embedding_tensors = {"tokens": "embed_in.weight"}
    names = {
        "attn_norm": "input_layernorm", "qkv": "attention.query_key_value", "o": "attention.dense",
        "mlp_norm": "post_attention_layernorm", "fc_in": "mlp.dense_h_to_4h", "fc_out": "mlp.dense_4h_to_h",
    }  # fmt: skip
    out_proj_name = "attention.dense"
    norm_kind = "layer"
    norm_bias = True
    qkv_kind = "fused"
    mlp_kind = "plain"
    final_norm_name = "final_layer_norm"
    head_name = "embed_out"
    norm_text = "LayerNorm(h_L): (h_L − mean) / sqrt(var + eps) · g + b"
    config_class = GptNeoXConfig
    qkv_layout = "per_head"
    weights_note = (
        "W_q, W_k and W_v are stored as one matrix, query_key_value, head by head: rows 3·Dk·h … of it are "
        "head h's query rows, then its key rows, then its value rows"
    )

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        assert isinstance(self.c, GptNeoXConfig)
        self.parallel = bool(self.c.parallel)

    def reads_head_dim(self) -> bool:
        return False

    def biases(self) -> tuple[bool, bool, bool]:
        bias = bool(self.c.attention_bias)
        return bias, bias, True
