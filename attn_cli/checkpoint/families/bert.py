"""BERT-style encoders (BERT, MiniLM): absolute positions, token types, post-LN blocks.

Shapes: T tokens, D d_model (hidden_size), H heads, Dk = D / H, F intermediate_size.

One unpadded sequence (or a --pair) sees every token: no mask. A layer's
projections read its input as it is, the previous layer's LayerNorm output.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_cli.attention import FusedLinear, Projections
from attn_cli.checkpoint.families.base import (
    Family,
    LayerTensors,
    Weights,
    activation,
    layer_norm,
    scaled_divisor,
    token_rows,
)
from attn_cli.errors import ModelUnavailable
from attn_cli.tokens import Tokens


class Bert(Family):
    family = "bert"
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
    layer_tensors = {
        "query.weight": "encoder.layer.{layer}.attention.self.query.weight",  # (D, D) nn.Linear (out, in)
        "query.bias": "encoder.layer.{layer}.attention.self.query.bias",
        "key.weight": "encoder.layer.{layer}.attention.self.key.weight",
        "key.bias": "encoder.layer.{layer}.attention.self.key.bias",
        "value.weight": "encoder.layer.{layer}.attention.self.value.weight",
        "value.bias": "encoder.layer.{layer}.attention.self.value.bias",
        "out.weight": "encoder.layer.{layer}.attention.output.dense.weight",  # W_o
        "out.bias": "encoder.layer.{layer}.attention.output.dense.bias",
        "attention_norm.weight": "encoder.layer.{layer}.attention.output.LayerNorm.weight",
        "attention_norm.bias": "encoder.layer.{layer}.attention.output.LayerNorm.bias",
        "intermediate.weight": "encoder.layer.{layer}.intermediate.dense.weight",  # (F, D)
        "intermediate.bias": "encoder.layer.{layer}.intermediate.dense.bias",
        "output.weight": "encoder.layer.{layer}.output.dense.weight",  # (D, F)
        "output.bias": "encoder.layer.{layer}.output.dense.bias",
        "output_norm.weight": "encoder.layer.{layer}.output.LayerNorm.weight",
        "output_norm.bias": "encoder.layer.{layer}.output.LayerNorm.bias",
    }

    def __init__(self, config: dict[str, Any]) -> None:
        positions = config.get("position_embedding_type", "absolute")
        if positions != "absolute":
            raise ModelUnavailable(
                f"config.json position_embedding_type {positions!r}: attn-cli computes BERT with absolute "
                f"positions only"
            )
        if config.get("is_decoder"):
            raise ModelUnavailable("config.json is_decoder true: attn-cli computes BERT as an encoder only")
        # Keys absent from config.json take BertConfig's defaults.
        self.layers = int(config.get("num_hidden_layers", 12))
        self.heads = int(config.get("num_attention_heads", 12))
        self.d_model = int(config.get("hidden_size", 768))
        self.d_ffn = int(config.get("intermediate_size", 3072))
        self.max_positions = int(config.get("max_position_embeddings", 512))
        self.vocab_rows = int(config.get("vocab_size", 30522))
        self.type_rows = int(config.get("type_vocab_size", 2))
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.act = activation(config.get("hidden_act", "gelu"), "hidden_act", self.family)

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        d, f = self.d_model, self.d_ffn
        model = (
            f"vocab_size {self.vocab_rows}, max_position_embeddings {self.max_positions}, "
            f"type_vocab_size {self.type_rows}, hidden_size {d}, intermediate_size {f}"
        )
        shapes = {
            "words": (self.vocab_rows, d), "positions": (self.max_positions, d), "token_types": (self.type_rows, d),
            "norm.weight": (d,), "norm.bias": (d,),
            **{f"{p}.weight": (d, d) for p in ("query", "key", "value", "out")},
            **{f"{p}.bias": (d,) for p in ("query", "key", "value", "out", "output")},
            **{f"{n}.{w}": (d,) for n in ("attention_norm", "output_norm") for w in ("weight", "bias")},
            "intermediate.weight": (f, d), "intermediate.bias": (f,), "output.weight": (d, f),
        }  # fmt: skip  (nn.Linear weights are (out, in))
        return {role: (shape, model) for role, shape in shapes.items()}

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        n_tokens = len(tokens)
        type_ids = tokens.type_ids or (0,) * n_tokens
        words = token_rows(weights, self.embedding_tensors["words"], tokens.ids, self.vocab_rows)  # (T, D)
        types = token_rows(weights, self.embedding_tensors["token_types"], type_ids, self.type_rows)  # (T, D)
        positions = weights.read_rows(self.embedding_tensors["positions"], 0, n_tokens)  # (T, D), 0 .. T-1
        summed = words + types + positions  # (T, D), added in transformers' order
        norm_weight = weights.read(self.embedding_tensors["norm.weight"])  # (D,)
        norm_bias = weights.read(self.embedding_tensors["norm.bias"])  # (D,)
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

    def mask(self, n_tokens: int) -> None:
        return None

    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        residual = attention_output + hidden  # (T, D)
        attended = layer_norm(residual, t["attention_norm.weight"], t["attention_norm.bias"], self.eps)  # (T, D)
        inner = self.act(FusedLinear(t["intermediate.weight"], t["intermediate.bias"])(attended))  # (T, D) -> (T, F)
        out = FusedLinear(t["output.weight"], t["output.bias"])(inner)  # (T, F) -> (T, D)
        return layer_norm(out + attended, t["output_norm.weight"], t["output_norm.bias"], self.eps)  # (T, D)
