"""BERT-style encoders: BERT (MiniLM), RoBERTa and XLM-RoBERTa, DistilBERT, MPNet.
Learned absolute positions, post-LN blocks, every token sees every other.

Shapes: T tokens, D d_model (hidden_size), H heads, Dk = D / H, F intermediate_size.

One unpadded sequence (or a --pair) sees every token: no mask. A layer's
projections read its input as it is, the previous layer's LayerNorm output.
What differs: the tensor names, token types (BERT; RoBERTa's one row; none in
DistilBERT and MPNet), where positions start (RoBERTa and MPNet count from
padding_idx + 1, as fairseq did), and MPNet's relative position bias, added to
every layer's scaled scores.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch

from attn_cli.analysis.contributions import BlockNorm
from attn_cli.records.layers import FusedLinear, Projections
from attn_cli.sources.checkpoint.families.base import (
    Family,
    Head,
    LayerTensors,
    Weights,
    scaled_divisor,
    token_rows,
)
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.families.config import FamilyConfig, first_of, key
from attn_cli.sources.checkpoint.families.norms import layer_norm
from attn_cli.sources.checkpoint.files import ROOT
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.records.tokens import Tokens

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {
    "bert": ("bert", "Bert"),
    "roberta": ("roberta", "Roberta"),
    "xlm-roberta": ("roberta", "Roberta"),
    "mpnet": ("mpnet", "MPNet"),
    "distilbert": ("distilbert", "DistilBert"),
}

@dataclasses.dataclass(frozen=True)
class BertConfig(FamilyConfig):
    """BertConfig's keys and defaults (RoBERTa's and MPNet's files use the same keys)."""

    layers: int = key("num_hidden_layers", 12)
    heads: int = key("num_attention_heads", 12)
    d_model: int = key("hidden_size", 768)
    d_ffn: int = key("intermediate_size", 3072)
    max_positions: int = key("max_position_embeddings", 512)
    vocab_size: int = key("vocab_size", 30522)
    activation: str = key("hidden_act", "gelu")
    type_vocab_size: int = key("type_vocab_size", 2)
    eps: float = key("layer_norm_eps", 1e-12)
    pad_token_id: int = first_of("pad_token_id", default=1)
    position_embedding_type: str | None = key("position_embedding_type", "absolute")
    is_decoder: bool | None = key("is_decoder")


@dataclasses.dataclass(frozen=True)
class DistilBertConfig(BertConfig):
    layers: int = key("n_layers", 6)
    heads: int = key("n_heads", 12)
    d_model: int = key("dim", 768)
    d_ffn: int = key("hidden_dim", 3072)
    activation: str = key("activation", "gelu")


# role -> BERT's name (the other encoders rename them)
BERT_LAYER = {
    "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
    "out": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense", "output": "output.dense", "output_norm": "output.LayerNorm",
}  # fmt: skip


class Bert(Family):
    family = "bert"
    softmax_upcast = False  # nn.functional.softmax of the half-precision scores (RoBERTa, DistilBERT, MPNet too)
    encoder = True
    anchor = "embeddings.word_embeddings.weight"
    input_text = "the previous layer's output (post-LN)"
    embedding_tensors = {
        "words": "embeddings.word_embeddings.weight",
        "positions": "embeddings.position_embeddings.weight",
        "token_types": "embeddings.token_type_embeddings.weight",
        "norm.weight": "embeddings.LayerNorm.weight",
        "norm.bias": "embeddings.LayerNorm.bias",
    }
    first_hidden = "h_0 = LayerNorm(word[ids] + position[positions] + token_type[type ids]) (learned embeddings)"
    layer_input = "x = h_L: the previous layer's output, already layer-normed (post-LN)"
    out_proj_name = "attention.output.dense"
    layer_prefix: ClassVar[str] = "encoder.layer.{layer}."
    renamed: ClassVar[dict[str, str]] = BERT_LAYER  # role -> name under layer_prefix
    config_class: ClassVar[type[BertConfig]] = BertConfig  # what the family reads from config.json

    # The masked-LM head of a *ForMaskedLM save, by role, outside the model's prefix: a
    # transform (dense, activation, LayerNorm), then the decoder (tied to the word
    # embeddings unless saved) and its bias. mlm_act: the transform's activation (None:
    # config.json's, as BERT's; RoBERTa's head always uses exact GELU).
    mlm: ClassVar[dict[str, str]] = {
        "dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
        "decoder": "cls.predictions.decoder", "bias": "cls.predictions.bias",
    }  # fmt: skip
    mlm_act: ClassVar[str | None] = None

    def __init__(self, config: dict[str, Any]) -> None:
        c = self.config_class.read(config)  # keys absent from config.json take the family config's defaults
        if c.position_embedding_type != "absolute":
            raise ModelUnavailable(
                f"config.json position_embedding_type {c.position_embedding_type!r}: attn-cli computes {self.family} with "
                f"absolute positions only"
            )
        if c.is_decoder:
            raise ModelUnavailable(f"config.json is_decoder true: attn-cli computes {self.family} as an encoder only")
        self.layers, self.heads, self.d_model = int(c.layers), int(c.heads), int(c.d_model)
        self.d_ffn, self.vocab_rows = int(c.d_ffn), int(c.vocab_size)
        self.position_rows = int(c.max_positions)  # the position table's rows
        self.type_rows, self.eps = int(c.type_vocab_size), float(c.eps)
        self.act = activation(c.activation, self.config_class.key_of("activation"), self.family)
        self.head_act = self.act if self.mlm_act is None else activation(self.mlm_act, "the head's activation", self.family)
        self.padding_idx = int(c.pad_token_id)
        self.max_positions = self.position_rows - self.first_position()  # the longest text: a row for each token
        self.layer_tensors = {
            f"{role}.{kind}": f"{self.layer_prefix}{name}.{kind}" for role, name in self.renamed.items() for kind in ("weight", "bias")
        }

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        d, f = self.d_model, self.d_ffn
        model = (
            f"vocab_size {self.vocab_rows}, max_position_embeddings {self.position_rows}, "
            f"type_vocab_size {self.type_rows}, hidden_size {d}, intermediate_size {f}"
        )
        shapes = {
            "words": (self.vocab_rows, d), "positions": (self.position_rows, d), "token_types": (self.type_rows, d),
            "norm.weight": (d,), "norm.bias": (d,),
            **{f"{p}.weight": (d, d) for p in ("query", "key", "value", "out")},
            **{f"{p}.bias": (d,) for p in ("query", "key", "value", "out", "output")},
            **{f"{n}.{w}": (d,) for n in ("attention_norm", "output_norm") for w in ("weight", "bias")},
            "intermediate.weight": (f, d), "intermediate.bias": (f,), "output.weight": (d, f),
        }  # fmt: skip  (nn.Linear weights are (out, in))
        return {role: (shape, model) for role, shape in shapes.items()}

    def first_position(self) -> int:
        """The position table's row of the first token."""
        return 0

    def position_ids(self, tokens: Tokens) -> list[int]:
        """(T,) the row of the position table each token reads: 0 .. T-1."""
        return list(range(len(tokens)))

    def type_ids(self, tokens: Tokens) -> tuple[int, ...]:
        return tokens.type_ids or (0,) * len(tokens)

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        names = self.embedding_tensors
        words = token_rows(weights, names["words"], tokens.ids, self.vocab_rows)  # (T, D)
        positions = self.position_ids(tokens)
        if max(positions, default=0) >= self.position_rows:
            raise ModelUnavailable(
                f"position {max(positions)} is past the model's {self.position_rows} position rows; use fewer tokens"
            )
        summed = words
        if "token_types" in names:
            summed = summed + token_rows(weights, names["token_types"], self.type_ids(tokens), self.type_rows)  # (T, D)
        if positions == list(range(len(tokens))):
            summed = summed + weights.read_rows(names["positions"], 0, len(tokens))  # (T, D), rows 0 .. T-1
        else:
            summed = summed + token_rows(weights, names["positions"], positions, self.position_rows)  # (T, D)
        norm_weight, norm_bias = weights.read(names["norm.weight"]), weights.read(names["norm.bias"])  # (D,) each
        return layer_norm(summed, norm_weight, norm_bias, self.eps)  # (T, D)

    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return hidden  # (T, D)

    def projections(self, t: LayerTensors) -> Projections:
        return Projections(
            FusedLinear(t["query.weight"], t["query.bias"]),  # (H*Dk, D)
            FusedLinear(t["key.weight"], t["key.bias"]),  # (H*Dk, D)
            FusedLinear(t["value.weight"], t["value.bias"]),  # (H*Dv, D)
            FusedLinear(t["out.weight"], t["out.bias"]),  # (D, H*Dv)
        )

    def divisor(self, layer: int) -> tuple[float, str]:
        return scaled_divisor(self.head_dim, True, 1)

    def score_scale(self, layer: int) -> float | None:
        return self.head_dim**-0.5  # BertSelfAttention.scaling, multiplied in (MPNet divides)

    def mask(self, n_tokens: int) -> None:
        return None

    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        residual = attention_output + hidden  # (T, D)
        attended = layer_norm(residual, t["attention_norm.weight"], t["attention_norm.bias"], self.eps)  # (T, D)
        inner = self.act(FusedLinear(t["intermediate.weight"], t["intermediate.bias"])(attended))  # (T, D) -> (T, F)
        out = FusedLinear(t["output.weight"], t["output.bias"])(inner)  # (T, F) -> (T, D)
        return layer_norm(out + attended, t["output_norm.weight"], t["output_norm.bias"], self.eps)  # (T, D)

    def attention_block(self, t: LayerTensors) -> BlockNorm:
        return BlockNorm("around", t["attention_norm.weight"], t["attention_norm.bias"], self.eps)  # post-LN

    # -- after the last layer: the masked-LM head --

    def head(self, weights: Weights) -> Head:
        dense = f"{ROOT}{self.mlm['dense']}.weight"
        if not weights.has(dense):
            raise ModelUnavailable(
                f"this {self.family} checkpoint has no masked-LM head ({self.mlm['dense']}.weight): a bare encoder such "
                f"as all-MiniLM-L6-v2 (BertModel) computes attention, not predictions; use a *ForMaskedLM checkpoint"
            )
        decoder = f"{ROOT}{self.mlm['decoder']}.weight"
        bias = f"{ROOT}{self.mlm['bias']}"
        return Head(
            decoder if weights.has(decoder) else self.embedding_tensors["words"],
            bias if weights.has(bias) else f"{ROOT}{self.mlm['decoder']}.bias",
            tied=not weights.has(decoder),
        )

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        """The head's transform: dense, its activation, LayerNorm."""
        dense, norm = f"{ROOT}{self.mlm['dense']}", f"{ROOT}{self.mlm['norm']}"
        x = torch.nn.functional.linear(hidden, weights.read(f"{dense}.weight"), weights.read(f"{dense}.bias"))  # (P, D)
        return layer_norm(self.head_act(x), weights.read(f"{norm}.weight"), weights.read(f"{norm}.bias"), self.eps)  # (P, D)


class Roberta(Bert):
    """RoBERTa and XLM-RoBERTa: BERT's layers; positions count from padding_idx + 1
    (a padding token keeps padding_idx), and the one token-type row for every token."""

    family = "roberta"
    mlm = {"dense": "lm_head.dense", "norm": "lm_head.layer_norm", "decoder": "lm_head.decoder", "bias": "lm_head.bias"}
    mlm_act = "gelu"
    first_hidden = (
        "h_0 = LayerNorm(word[ids] + position[padding_idx + 1 + i] + token_type[0]) (learned embeddings; "
        "positions start after padding_idx, as fairseq counted them)"
    )

    def first_position(self) -> int:
        return self.padding_idx + 1

    def position_ids(self, tokens: Tokens) -> list[int]:
        """fairseq's make_positions: each non-padding token's count of non-padding tokens
        so far, plus padding_idx; a padding token keeps padding_idx."""
        mask = torch.tensor(tokens.ids).ne(self.padding_idx).int()  # (T,)
        return (torch.cumsum(mask, dim=0) * mask + self.padding_idx).tolist()  # (T,)

    def type_ids(self, tokens: Tokens) -> tuple[int, ...]:
        return (0,) * len(tokens)  # RoBERTa's tokenizers give no token types; the model reads row 0


class DistilBert(Bert):
    """DistilBERT: BERT's post-LN layer under its own names, no token types, LayerNorm
    eps 1e-12 whatever the config; sinusoidal positions, where configured, are the
    saved position table (read, not recomputed)."""

    family = "distilbert"
    mlm = {"dense": "vocab_transform", "norm": "vocab_layer_norm", "decoder": "vocab_projector", "bias": "vocab_projector.bias"}
    first_hidden = "h_0 = LayerNorm(word[ids] + position[positions]) (learned or saved sinusoidal embeddings)"
    out_proj_name = "attention.out_lin"
    embedding_tensors = {k: v for k, v in Bert.embedding_tensors.items() if k != "token_types"}
    layer_prefix = "transformer.layer.{layer}."
    renamed = {
        "query": "attention.q_lin", "key": "attention.k_lin", "value": "attention.v_lin", "out": "attention.out_lin",
        "attention_norm": "sa_layer_norm", "intermediate": "ffn.lin1", "output": "ffn.lin2",
        "output_norm": "output_layer_norm",
    }  # fmt: skip
    config_class = DistilBertConfig

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.eps = 1e-12  # DistilBERT's LayerNorms are built with it, whatever config.json says

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        shapes = super().tensor_shapes()
        shapes.pop("token_types")
        return shapes


class MPNet(Roberta):
    """MPNet: RoBERTa-style positions (padding_idx 1), no token types, and a learned
    relative position bias: 32 buckets of the distance j - i (exact up to 8 each way,
    logarithmic up to 128), one number per head, computed once and added to every
    layer's scaled scores."""

    family = "mpnet"
    first_hidden = "h_0 = LayerNorm(word[ids] + position[2 + i]) (learned embeddings; positions start after padding_idx 1)"
    out_proj_name = "attention.attn.o"
    embedding_tensors = {
        **{k: v for k, v in Bert.embedding_tensors.items() if k != "token_types"},
        "relative_bias": "encoder.relative_attention_bias.weight",
    }
    renamed = {
        "query": "attention.attn.q", "key": "attention.attn.k", "value": "attention.attn.v", "out": "attention.attn.o",
        "attention_norm": "attention.LayerNorm", "intermediate": "intermediate.dense", "output": "output.dense",
        "output_norm": "output.LayerNorm",
    }  # fmt: skip
    buckets, max_distance = 32, 128  # MPNet's, whatever config.json's relative_attention_num_buckets says

    def score_scale(self, layer: int) -> None:
        return None  # MPNetSelfAttention divides by sqrt(head size)

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.padding_idx = 1  # MPNetEmbeddings' own, whatever pad_token_id says
        self.max_positions = self.position_rows - self.first_position()
        self._weights: Weights | None = None
        self._bias: dict[int, torch.Tensor] = {}

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        shapes = super().tensor_shapes()
        shapes.pop("token_types")
        rows = int(self.buckets)
        shapes["relative_bias"] = ((rows, self.heads), f"32 relative position buckets, num_attention_heads {self.heads}")
        return shapes

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        self._weights = weights  # the bias table is read with the embeddings, once per text
        self._bias = {}
        return super().embed(weights, tokens)

    def score_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | None, float | None]:
        if n_tokens not in self._bias:
            assert self._weights is not None
            table = self._weights.read(self.embedding_tensors["relative_bias"])  # (32, H)
            relative = torch.arange(n_tokens)[None, :] - torch.arange(n_tokens)[:, None]  # (T, T) j - i
            buckets = relative_buckets(relative, self.buckets, self.max_distance)  # (T, T)
            self._bias = {n_tokens: table[buckets].permute(2, 0, 1).contiguous()}  # (T, T, H) -> (H, T, T)
        return self._bias[n_tokens], None


def relative_buckets(relative: torch.Tensor, buckets: int = 32, max_distance: int = 128, bidirectional: bool = True) -> torch.Tensor:
    """(T, S) each distance j - i's bucket, as MPNet and T5 compute it: bidirectional (MPNet,
    T5's encoder), half the buckets for each sign; else (T5's decoder) every bucket for
    keys at or before the query, a later key in bucket 0. Exact for small distances,
    logarithmic up to max_distance."""
    n = -relative  # (T, S) i - j
    if bidirectional:
        half = buckets // 2
        bucket = (n < 0).to(torch.long) * half  # (T, S) the sign's half
        n = torch.abs(n)
    else:
        half = buckets
        bucket = torch.zeros_like(n)
        n = torch.clamp(n, min=0)  # a key after the query: distance 0
    exact = half // 2
    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact) * (half - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, half - 1))
    return bucket + torch.where(n < exact, n, large)  # (T, T)
