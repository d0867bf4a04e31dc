"""What a rotary decoder (decoder.py) reads from config.json: one dataclass per family (config.py
says how a field is read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from attn_cli.sources.checkpoint.families.config import FamilyConfig, first_of, key


@dataclasses.dataclass(frozen=True)
class DecoderConfig(FamilyConfig):
    """Llama's keys and defaults (LlamaConfig's); the other families' dataclasses change some."""

    model_type: str | None = key("model_type")
    layers: int = key("num_hidden_layers", 32)
    heads: int = key("num_attention_heads", 32)
    kv_heads: int | None = key("num_key_value_heads")  # None or 0: as many as the query heads
    d_model: int = key("hidden_size", 4096)
    head_dim: int | None = key("head_dim")  # None or 0: the family's (D / H unless it says)
    d_ffn: int = key("intermediate_size", 11008)
    max_positions: int = key("max_position_embeddings", 2048)
    vocab_size: int = key("vocab_size", 32000)
    eps: float = key("rms_norm_eps", 1e-6)
    activation: str | None = key("hidden_act", "silu")
    bidirectional: bool | None = key("use_bidirectional_attention")  # refused: attn-cli computes decoders causally
    attention_bias: bool = key("attention_bias", False)
    mlp_bias: bool = key("mlp_bias", False)
    sliding_window: int | None = key("sliding_window")
    layer_types: list[str] | None = key("layer_types")
    rope_parameters: Mapping[str, Any] | None = key("rope_parameters")  # transformers 5
    rope_scaling: Mapping[str, Any] | None = key("rope_scaling")  # older files, rope_theta beside it
    theta: float = first_of("rope_theta", default=10000.0)
    partial: float = first_of("partial_rotary_factor", default=1.0)
    original_max_positions: int | None = first_of("original_max_position_embeddings")
    tie_word_embeddings: bool = key("tie_word_embeddings", False)
    final_softcap: float | None = key("final_logit_softcapping")

    def rope(self) -> Mapping[str, Any] | None:
        """The rotary dict: transformers 5's ``rope_parameters``, else the older ``rope_scaling``."""
        return self.rope_parameters or self.rope_scaling

    def nested_rope(self, layer_type: str | None) -> dict[str, Any] | None:
        """transformers 5's rope_parameters nested by layer type: this type's dict (full
        attention's when None), or None when config.json's is not nested."""
        given = self.rope_parameters
        if not (given and any(isinstance(v, dict) for v in given.values())):
            return None
        return dict(given.get(layer_type or "full_attention") or {"rope_type": "default"})


@dataclasses.dataclass(frozen=True)
class QwenConfig(DecoderConfig):
    """Qwen2 and Qwen3 (and Llama and Mistral, whose files lack these keys): the window only with
    use_sliding_window, on the layers from max_window_layers on unless layer_types says."""

    use_sliding_window: bool = key("use_sliding_window", False)
    max_window_layers: int = key("max_window_layers", 28)


@dataclasses.dataclass(frozen=True)
class Phi3Config(DecoderConfig):
    eps: float = key("rms_norm_eps", 1e-5)
    original_max_positions: int | None = first_of("original_max_position_embeddings", default=4096)

    def rope(self) -> Mapping[str, Any] | None:
        return self.rope_scaling or self.rope_parameters  # Phi-3's files say rope_scaling


@dataclasses.dataclass(frozen=True)
class GptNeoXConfig(DecoderConfig):
    eps: float = key("layer_norm_eps", 1e-5)
    activation: str | None = key("hidden_act", "gelu")
    attention_bias: bool = key("attention_bias", True)
    theta: float = first_of("rotary_emb_base", "rope_theta", default=10000.0)  # Pythia's files say rotary_emb_base
    partial: float = first_of("rotary_pct", "partial_rotary_factor", default=0.25)  # and rotary_pct
    parallel: bool = key("use_parallel_residual", True)

    def rope(self) -> Mapping[str, Any] | None:
        return self.rope_scaling or self.rope_parameters


@dataclasses.dataclass(frozen=True)
class Olmo2Config(DecoderConfig):
    eps: float = key("rms_norm_eps", 1e-5)


@dataclasses.dataclass(frozen=True)
class GemmaConfig(DecoderConfig):
    activation: str | None = key("hidden_act")  # None: the tanh GELU (``Gemma.activation_name``)
    tie_word_embeddings: bool = key("tie_word_embeddings", True)


@dataclasses.dataclass(frozen=True)
class Gemma2Config(GemmaConfig):
    activation: str | None = key("hidden_activation")
    sliding_window: int | None = key("sliding_window", 4096)
    final_softcap: float | None = key("final_logit_softcapping", 30.0)
    attention_softcap: float | None = key("attn_logit_softcapping", 50.0)
    query_pre_attn_scalar: float = key("query_pre_attn_scalar", 256)


@dataclasses.dataclass(frozen=True)
class Gemma3Config(Gemma2Config):
    final_softcap: float | None = key("final_logit_softcapping")
    attention_softcap: float | None = key("attn_logit_softcapping")
    sliding_window_pattern: int = key("sliding_window_pattern", 6)
    local_theta: float = key("rope_local_base_freq", 10000.0)  # older files: the local layers' theta
    global_theta: float = key("rope_theta", 1e6)  # and the global layers'


@dataclasses.dataclass(frozen=True)
class ModernBertConfig(DecoderConfig):
    eps: float = key("norm_eps", 1e-5)
    activation: str | None = key("hidden_activation", "gelu")
    norm_bias: bool = key("norm_bias", False)
    classifier_activation: str = key("classifier_activation", "gelu")
    global_attn_every_n_layers: int = key("global_attn_every_n_layers", 3)
    local_attention: int = key("local_attention", 128)
    local_theta: float = key("local_rope_theta", 10000.0)
    global_theta: float = key("global_rope_theta", 160000.0)


MLP_ROLES = {"gated": ("gate", "up", "down"), "gated_fused": ("gate_up", "down"), "plain": ("fc_in", "fc_out")}


def roles_for(family: Any) -> set[str]:
    """The roles a decoder family's switches read, each of which its ``names`` must name."""
    roles = {"o", *(("qkv",) if family.qkv_kind == "fused" else ("q", "k", "v")), *MLP_ROLES[family.mlp_kind]}
    roles |= {"attn_norm", "mlp_norm"} if family.pre_norm else set()
    roles |= {"attn_out_norm", "mlp_out_norm"} if family.post_norm else set()
    return roles | ({"q_norm", "k_norm"} if family.qk_norm else set())
