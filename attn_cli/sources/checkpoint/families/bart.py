"""BART and Marian, encoder-decoders with post-norm layers (seq2seq.py has what every
encoder-decoder shares).

Shapes: N a stack's tokens, D d_model, F the feed-forward's inner size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

from attn_cli.analysis.contributions import BlockNorm
from attn_cli.records.layers import FusedLinear, Projections
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.families.base import Head, LayerTensors, Weights
from attn_cli.sources.checkpoint.families.norms import layer_norm
from attn_cli.sources.checkpoint.families.config import key
from attn_cli.sources.checkpoint.families.seq2seq import Seq2Seq, Seq2SeqConfig, clamp_float16
from attn_cli.sources.checkpoint.files import ROOT

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
ENCODER_DECODER_TYPES = {"bart": ("bart", "Bart"), "marian": ("marian", "Marian")}


@dataclasses.dataclass(frozen=True)
class BartConfig(Seq2SeqConfig):
    """BartConfig's keys and defaults, which MarianConfig shares."""

    d_model: int = key("d_model", 1024)
    encoder_layers: int = key("encoder_layers", 12)
    decoder_layers: int = key("decoder_layers", 12)
    encoder_heads: int = key("encoder_attention_heads", 16)
    decoder_heads: int = key("decoder_attention_heads", 16)
    encoder_ffn: int = key("encoder_ffn_dim", 4096)
    decoder_ffn: int = key("decoder_ffn_dim", 4096)
    scale_embedding: bool | None = key("scale_embedding")
    activation: str = key("activation_function", "gelu")


class Bart(Seq2Seq):
    """BART (modeling_bart.py): learned positions with their offset of 2, the embeddings times
    sqrt(D) where ``scale_embedding``, ``layernorm_embedding``; post-norm layers (the norm after
    each residual), scores divided by sqrt(head_dim), biases everywhere."""

    family = "bart"
    softmax_upcast = False  # BART and Marian: nn.functional.softmax of the half-precision scores
    anchor = "encoder.layers.0.self_attn.q_proj.weight"
    input_text = "x = h_(l-1), the layer's input as it is (post-norm: each norm comes after its residual)"
    first_hidden = "h_0 = LayerNorm(token embedding (× sqrt(d_model) where scale_embedding) + learned position (row p + 2))"
    out_proj_name = "self_attn.out_proj, and encoder_attn.out_proj in cross-attention"
    layer_name = {"encoder": "encoder.layers.{layer}.", "decoder": "decoder.layers.{layer}."}
    POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding: position p is row p + 2
    start_default = 2  # </s>
    EPS = 1e-5  # nn.LayerNorm's default

    config_class = BartConfig

    def __init__(self, config: dict[str, Any], stack: str) -> None:
        super().__init__(config, stack)
        assert isinstance(self.c, BartConfig)
        self.scale = math.sqrt(self.d_model) if self.c.scale_embedding else 1.0
        self.act = activation(self.c.activation, BartConfig.key_of("activation"), self.family)

    def sizes(self) -> dict[str, tuple[int, int, int]]:
        c = self.c
        assert isinstance(c, BartConfig)
        return {
            "encoder": (int(c.encoder_layers), int(c.encoder_heads), int(c.encoder_ffn)),
            "decoder": (int(c.decoder_layers), int(c.decoder_heads), int(c.decoder_ffn)),
        }

    def divisor(self, layer: int) -> tuple[float, str]:
        return math.sqrt(self.head_dim), f"sqrt({self.head_dim})"

    def score_scale(self, layer: int) -> float:
        return self.head_dim**-0.5  # BartAttention.scaling, multiplied in

    def layer_shapes(self) -> tuple[dict[str, tuple[int, ...]], str]:
        d, f = self.d_model, self.d_ffn
        shapes: dict[str, tuple[int, ...]] = {}
        for kind in ("self", "cross"):
            for p in ("q", "k", "v", "out"):
                shapes[f"{kind}.{p}.weight"], shapes[f"{kind}.{p}.bias"] = (d, d), (d,)
            shapes[f"{kind}.norm.weight"] = shapes[f"{kind}.norm.bias"] = (d,)
        shapes.update({"fc1.weight": (f, d), "fc1.bias": (f,), "fc2.weight": (d, f), "fc2.bias": (d,)})
        shapes["final_layer_norm.weight"] = shapes["final_layer_norm.bias"] = (d,)
        return shapes, f"d_model {d}, {self.stack}_ffn_dim {f}"

    def layer_suffixes(self) -> dict[str, str]:
        roles = {}
        for kind, module in (("self", "self_attn"), ("cross", "encoder_attn")):
            if kind == "cross" and not self.cross:
                continue
            for p in ("q", "k", "v", "out"):
                roles[f"{kind}.{p}.weight"], roles[f"{kind}.{p}.bias"] = f"{module}.{p}_proj.weight", f"{module}.{p}_proj.bias"
            roles[f"{kind}.norm.weight"], roles[f"{kind}.norm.bias"] = f"{module}_layer_norm.weight", f"{module}_layer_norm.bias"
        for p in ("fc1", "fc2", "final_layer_norm"):
            roles[f"{p}.weight"], roles[f"{p}.bias"] = f"{p}.weight", f"{p}.bias"
        return roles

    def embed_ids(self, weights: Weights, ids: Sequence[int]) -> torch.Tensor:
        rows = self.token_rows(weights, "shared.weight", ids) * self.scale  # (N, D)
        start = self.POSITION_OFFSET
        positions = weights.read_rows(f"{self.stack}.embed_positions.weight", start, start + len(ids))  # (N, D)
        norm = f"{self.stack}.layernorm_embedding"
        return layer_norm(rows + positions, weights.read(f"{norm}.weight"), weights.read(f"{norm}.bias"), self.EPS)

    def attention_projections(self, t: LayerTensors, kind: str) -> Projections:
        q, k, v, o = (FusedLinear(t[f"{kind}.{p}.weight"], t[f"{kind}.{p}.bias"]) for p in ("q", "k", "v", "out"))
        return Projections(q, k, v, o)

    def block_input(self, t: LayerTensors, kind: str, hidden: torch.Tensor) -> torch.Tensor:
        return hidden  # post-norm: the layer reads its input as it is

    def after_attention(self, t: LayerTensors, kind: str, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return layer_norm(hidden + output, t[f"{kind}.norm.weight"], t[f"{kind}.norm.bias"], self.EPS)

    def attention_block(self, t: LayerTensors) -> BlockNorm:
        return BlockNorm("around", t["self.norm.weight"], t["self.norm.bias"], self.EPS)  # post-LN, as after_attention

    def feed_forward(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        inner = self.act(FusedLinear(t["fc1.weight"], t["fc1.bias"])(hidden))  # (N, F)
        out = FusedLinear(t["fc2.weight"], t["fc2.bias"])(inner)  # (N, D)
        hidden = layer_norm(hidden + out, t["final_layer_norm.weight"], t["final_layer_norm.bias"], self.EPS)
        # the encoder layer's guard in float16 (the decoder layer has none)
        return clamp_float16(hidden, lambda h: not bool(torch.isfinite(h).all())) if self.encoder else hidden

    def head(self, weights: Weights) -> Head:
        """``lm_head``: the shared token table (tied, as BartForConditionalGeneration saves it) or
        the file's own ``lm_head.weight``, plus ``final_logits_bias``."""
        own = f"{ROOT}lm_head.weight"
        weight = own if weights.has(own) else self.token_table(weights)
        bias = f"{ROOT}final_logits_bias"
        return Head(weight, bias if weights.has(bias) else None, tied=weight != own, bias_after=True)

    def token_table(self, weights: Weights) -> str:
        return "shared.weight"


class Marian(Bart):
    """Marian (modeling_marian.py): BART's layers with sinusoidal positions that checkpoints do
    not store (``sinusoid``: sines in the first half of each vector, cosines in the second),
    from position 0; no ``layernorm_embedding``; the embeddings times sqrt(D) where
    ``scale_embedding``; one shared token table, or one per stack (``share_encoder_decoder_embeddings``
    false: the decoder's has ``decoder_vocab_size`` rows); the decoder starts with the pad id."""

    family = "marian"
    first_hidden = "h_0 = token embedding (× sqrt(d_model) where scale_embedding) + sinusoidal position (sines | cosines)"
    start_default = None  # the pad id

    def token_table(self, weights: Weights) -> str:
        return "shared.weight" if weights.has("shared.weight") else f"{self.stack}.embed_tokens.weight"

    def embed_ids(self, weights: Weights, ids: Sequence[int]) -> torch.Tensor:
        rows = self.token_rows(weights, self.token_table(weights), ids) * self.scale  # (N, D)
        return rows + sinusoid(len(ids), self.d_model).to(rows.device, rows.dtype)  # (N, D)


def sinusoid(n_positions: int, dim: int) -> torch.Tensor:
    """(N, D) Marian's position table, as MarianSinusoidalPositionalEmbedding makes it: angle
    pos / 10000^(2 (j // 2) / D) in float64, the sines of the even j in the first half (the
    first ceil(D / 2) columns), the cosines of the odd j after them (not interleaved), in float32."""
    j = torch.arange(dim, dtype=torch.float64)  # (D,)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    return torch.cat([torch.sin(angles[:, 0::2]), torch.cos(angles[:, 1::2])], dim=-1).to(torch.float32)  # (N, D)
