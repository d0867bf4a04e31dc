"""GPT-NeoX and Pythia: LayerNorm with biases, a fused query_key_value whose rows
are [q_h | k_h | v_h] head by head, a partial rotation (rotary_pct, 25% in Pythia),
and the parallel residual: h + attention(ln_1(h)) + MLP(ln_2(h)).

Shapes: T tokens, D d_model, H heads, Dk = D / H, F intermediate_size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attn_cli.sources.checkpoint.families import norms
from attn_cli.sources.checkpoint.families.decoder import Decoder


class GptNeoX(Decoder):
    family = "gpt_neox"
    anchor = "embed_in.weight"
    embedding_tensors = {"tokens": "embed_in.weight"}
    names = {
        "attn_norm": "input_layernorm", "qkv": "attention.query_key_value", "o": "attention.dense",
        "mlp_norm": "post_attention_layernorm", "fc_in": "mlp.dense_h_to_4h", "fc_out": "mlp.dense_4h_to_h",
    }  # fmt: skip
    out_proj_name = "attention.dense"
    norm = staticmethod(norms.layer_norm)
    norm_bias = True
    final_norm_name = "final_layer_norm"
    head_name = "embed_out"
    norm_text = "LayerNorm(h_L): (h_L − mean) / sqrt(var + eps) · g + b"
    eps_key = "layer_norm_eps"
    eps_default = 1e-5
    act_default = "gelu"
    qkv_layout = "per_head"
    theta_keys = ("rotary_emb_base", "rope_theta")  # Pythia's files say rotary_emb_base
    partial_keys = ("rotary_pct", "partial_rotary_factor")  # and rotary_pct, 0.25 unless set
    partial_default = 0.25
    weights_note = (
        "W_q, W_k and W_v are stored as one matrix, query_key_value, head by head: rows 3·Dk·h … of it are "
        "head h's query rows, then its key rows, then its value rows"
    )

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.parallel = bool(config.get("use_parallel_residual", True))

    def reads_head_dim(self) -> bool:
        return False

    def biases(self) -> tuple[bool, bool, bool]:
        bias = bool(self.config.get("attention_bias", True))
        return bias, bias, True

    def rope_parameters(self, layer_type: str | None) -> Mapping[str, Any] | None:
        return self.config.get("rope_scaling") or self.config.get("rope_parameters")
