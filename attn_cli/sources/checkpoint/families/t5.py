"""T5 v1.0 and v1.1 / Flan-T5, an encoder-decoder with pre-norm layers and a relative position
bias (seq2seq.py has what every encoder-decoder shares).

Shapes: N a stack's tokens, D d_model, H heads, F the feed-forward's inner size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from attn_cli.records.layers import FusedLinear, Projections
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.sources.blocks import BiasRows
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.families.base import Head, LayerTensors, Weights
from attn_cli.sources.checkpoint.families.bert import relative_buckets
from attn_cli.sources.checkpoint.families.norms import rms_norm_in_gain_dtype
from attn_cli.sources.checkpoint.families.config import key
from attn_cli.sources.checkpoint.families.seq2seq import Seq2Seq, Seq2SeqConfig, clamp_float16
from attn_cli.sources.checkpoint.files import ROOT

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
ENCODER_DECODER_TYPES = {"t5": ("t5", "T5")}


def _has_infinity(hidden: torch.Tensor) -> bool:
    return bool(torch.isinf(hidden).any())


@dataclasses.dataclass(frozen=True)
class T5Config(Seq2SeqConfig):
    """T5Config's keys and defaults."""

    d_model: int = key("d_model", 512)
    layers: int = key("num_layers", 6)
    decoder_layers: int | None = key("num_decoder_layers")  # None: as many as the encoder's
    heads: int = key("num_heads", 8)
    d_ff: int = key("d_ff", 2048)
    d_kv: int = key("d_kv", 64)
    buckets: int = key("relative_attention_num_buckets", 32)
    max_distance: int = key("relative_attention_max_distance", 128)
    eps: float = key("layer_norm_epsilon", 1e-6)
    feed_forward_proj: str = key("feed_forward_proj", "relu")
    scale_decoder_outputs: bool | None = key("scale_decoder_outputs")  # transformers 5; None: scaled where tied
    tie_word_embeddings: bool | None = key("tie_word_embeddings", True)


class T5(Seq2Seq):
    """T5 v1.0 and v1.1 / Flan-T5 (modeling_t5.py): no scaling of the scores; a relative position
    bias from each stack's first block, shared by its layers (bidirectional buckets in the
    encoder, causal in the decoder, none in cross-attention); pre-norm with RMSNorm without a
    mean or bias; ReLU or gated-GELU (tanh) feed-forward; a final norm per stack."""

    family = "t5"
    softmax_upcast = False  # eager_attention_forward (transformers 5): nn.functional.softmax of the half-precision scores
    anchor = "encoder.block.0.layer.0.SelfAttention.q.weight"
    qkv_bias = False
    input_text = "x = RMSNorm(h_(l-1)) (T5's norm: no mean, no bias)"
    first_hidden = "h_0 = token embedding (the shared table, unscaled); positions enter each layer's scores as a learned bias"
    out_proj_name = "SelfAttention.o, and EncDecAttention.o in cross-attention"
    layer_name = {"encoder": "encoder.block.{layer}.", "decoder": "decoder.block.{layer}."}

    config_class = T5Config

    def __init__(self, config: dict[str, Any], stack: str) -> None:
        super().__init__(config, stack)
        c = self.c
        assert isinstance(c, T5Config)
        self.d_kv, self.buckets, self.max_distance, self.eps = int(c.d_kv), int(c.buckets), int(c.max_distance), float(c.eps)
        # T5Config: "relu" or "gated-gelu" ("gated-gelu" means gelu_new, the tanh approximation)
        proj = str(c.feed_forward_proj)
        parts = proj.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise ModelUnavailable(f"config.json feed_forward_proj {proj!r}: T5 reads 'ACT' or 'gated-ACT'")
        self.gated = parts[0] == "gated"
        name = "gelu_new" if proj == "gated-gelu" else parts[-1]
        self.act = activation(name, "feed_forward_proj", self.family)
        self._bias: dict[int, torch.Tensor] = {}
        self.max_positions = None  # relative positions: any length

    def sizes(self) -> dict[str, tuple[int, int, int]]:
        c = self.c
        assert isinstance(c, T5Config)
        heads, d_ff = int(c.heads), int(c.d_ff)
        decoder_layers = c.decoder_layers if c.decoder_layers is not None else c.layers
        return {"encoder": (int(c.layers), heads, d_ff), "decoder": (int(decoder_layers), heads, d_ff)}

    @property
    def head_dim(self) -> int:
        return self.d_kv

    def inconsistency(self) -> str | None:
        return None  # d_kv is its own: the heads need not divide d_model

    def divisor(self, layer: int) -> tuple[float, str]:
        return 1.0, "1 (T5 does not scale its scores)"

    def layer_shapes(self) -> tuple[dict[str, tuple[int, ...]], str]:
        d, f, inner = self.d_model, self.d_ffn, self.heads * self.d_kv
        shapes: dict[str, tuple[int, ...]] = {}
        for kind in ("self", "cross"):
            shapes.update({f"{kind}.q.weight": (inner, d), f"{kind}.k.weight": (inner, d), f"{kind}.v.weight": (inner, d)})
            shapes[f"{kind}.o.weight"], shapes[f"{kind}.norm.weight"] = (d, inner), (d,)
        shapes.update({"ff.wi.weight": (f, d), "ff.wi_0.weight": (f, d), "ff.wi_1.weight": (f, d), "ff.wo.weight": (d, f)})
        shapes["ff.norm.weight"] = (d,)
        return shapes, f"d_model {d}, num_heads {self.heads}, d_kv {self.d_kv}, d_ff {f}"

    def layer_suffixes(self) -> dict[str, str]:
        roles = {}
        attentions = [("self", "layer.0.SelfAttention", "layer.0.layer_norm")]
        if self.cross:
            attentions.append(("cross", "layer.1.EncDecAttention", "layer.1.layer_norm"))
        for kind, module, norm in attentions:
            for p in ("q", "k", "v", "o"):
                roles[f"{kind}.{p}.weight"] = f"{module}.{p}.weight"
            roles[f"{kind}.norm.weight"] = f"{norm}.weight"
        ff = "layer.2" if self.cross else "layer.1"
        for p in ("wi_0", "wi_1", "wo") if self.gated else ("wi", "wo"):
            roles[f"ff.{p}.weight"] = f"{ff}.DenseReluDense.{p}.weight"
        roles["ff.norm.weight"] = f"{ff}.layer_norm.weight"
        return roles

    def embed_ids(self, weights: Weights, ids: Sequence[int]) -> torch.Tensor:
        return self.token_rows(weights, "shared.weight", ids)  # (N, D) unscaled

    def attention_projections(self, t: LayerTensors, kind: str) -> Projections:
        q, k, v, o = (FusedLinear(t[f"{kind}.{p}.weight"], None) for p in ("q", "k", "v", "o"))
        return Projections(q, k, v, o)

    def position_bias(self, weights: Weights, n_tokens: int) -> torch.Tensor:
        """(H, N, N) from the first block's table (buckets, H), bidirectional in the encoder."""
        if n_tokens not in self._bias:  # the whole table as one block of every row and key
            self._bias = {n_tokens: self.bias_rows(weights)(slice(None), 0, n_tokens, 0, n_tokens)}  # (H, N, N)
        return self._bias[n_tokens]

    def bias_rows(self, weights: Weights) -> BiasRows:
        """``position_bias``'s (H', R, K) of a block: the table's row for each distance j - i the block
        holds (R + K - 1 of them, lowest first), laid out so that row i's key j reads distance j - i."""
        table = weights.read(f"{self.stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")  # (buckets, H)

        def rows(heads: slice, start: int, end: int, first: int, stop: int) -> torch.Tensor:
            distances = torch.arange(first - (end - 1), stop - start)[None, :]  # (1, R + K - 1) j - i
            buckets = relative_buckets(distances, self.buckets, self.max_distance, bidirectional=self.encoder)[0]
            by_distance = table[buckets.to(table.device)][:, heads].T.contiguous()  # (R + K - 1, H') -> (H', R + K - 1)
            r, k = end - start, stop - first
            # the last row reads distances from the lowest on: row R - 1 - r starts r further along
            return by_distance.as_strided((by_distance.shape[0], r, k), (by_distance.stride(0), 1, 1)).flip(-2)  # (H', R, K)

        return rows

    def _norm(self, t: LayerTensors, role: str, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_in_gain_dtype(x, t[role], None, self.eps)

    def block_input(self, t: LayerTensors, kind: str, hidden: torch.Tensor) -> torch.Tensor:
        return self._norm(t, f"{kind}.norm.weight", hidden)  # pre-norm

    def after_attention(self, t: LayerTensors, kind: str, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return clamp_float16(hidden + output, _has_infinity)  # T5Block's guard after each sub-layer

    def feed_forward(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        x = self._norm(t, "ff.norm.weight", hidden)  # (N, D)
        if self.gated:
            inner = self.act(FusedLinear(t["ff.wi_0.weight"], None)(x)) * FusedLinear(t["ff.wi_1.weight"], None)(x)  # (N, F)
        else:
            inner = self.act(FusedLinear(t["ff.wi.weight"], None)(x))  # (N, F)
        if inner.dtype == torch.float16:  # transformers keeps ``wo`` in float32 in a float16 run (_keep_in_fp32_modules)
            out = FusedLinear(t.wide("ff.wo.weight", torch.float32), None)(inner.float())  # (N, D) float32
        else:
            out = FusedLinear(t["ff.wo.weight"], None)(inner)  # (N, D)
        return clamp_float16(hidden + out, _has_infinity)  # (N, D), float32 from there in a float16 run

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        return rms_norm_in_gain_dtype(hidden, weights.read(f"{self.stack}.final_layer_norm.weight"), None, self.eps)

    def head(self, weights: Weights) -> Head:
        """``lm_head``: the file's own ``lm_head.weight`` (v1.1, Flan) or the shared table; the
        decoder's output times d_model ** -0.5 first where the config ties the embeddings (T5
        v1.0; transformers 5 writes the choice as ``scale_decoder_outputs``)."""
        own = f"{ROOT}lm_head.weight"
        c = self.c
        assert isinstance(c, T5Config)
        scaled = c.scale_decoder_outputs if c.scale_decoder_outputs is not None else c.tie_word_embeddings is not False
        weight = own if weights.has(own) else "shared.weight"
        return Head(weight, tied=weight != own, input_scale=self.d_model**-0.5 if scaled else None)
