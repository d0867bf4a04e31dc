"""ModernBERT: an encoder on the rotary decoders' layer (decoder.py) with its own
mask. Pre-norm LayerNorms (biases only with norm_bias; the first layer has no norm
before attention: its input is already the embeddings' norm), a fused Wqkv laid
out [all q | all k | all v], a GeGLU MLP (Wi's rows [input | gate]: act(input) *
gate), rotary positions with a global and a local base, and no causal mask: global
layers (every global_attn_every_n_layers-th, from layer 0) see every token, the
others a window |i - j| <= local_attention // 2 each way.

Shapes: T tokens, D d_model, H heads, Dk = D / H, F intermediate_size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from attn_cli.sources.checkpoint.families import norms
from attn_cli.sources.checkpoint.families.base import Head, LayerTensors, Weights
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.families.decoder import SLIDING, Decoder
from attn_cli.sources.checkpoint.families.decoder_config import ModernBertConfig
from attn_cli.sources.checkpoint.files import ROOT
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.records.band import Band
from attn_cli.records.tokens import Tokens

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {"modernbert": ("modernbert", "ModernBert")}


class ModernBert(Decoder):
    family = "modernbert"
    encoder = True
    anchor = "embeddings.tok_embeddings.weight"
    embedding_tensors = {"tokens": "embeddings.tok_embeddings.weight", "norm.weight": "embeddings.norm.weight"}
    names = {
        "attn_norm": "attn_norm", "qkv": "attn.Wqkv", "o": "attn.Wo", "mlp_norm": "mlp_norm",
        "gate_up": "mlp.Wi", "down": "mlp.Wo",
    }  # fmt: skip
    out_proj_name = "attn.Wo"
    norm_kind = "layer"
    qkv_kind = "fused"
    mlp_kind = "gated_fused"
    norm_text = "LayerNorm(h_L): (h_L − mean) / sqrt(var + eps) · g"
    config_class = ModernBertConfig
    rotary_per_layer_type = True
    rotary_precision = "float32_turn"
    weights_note = "W_q, W_k and W_v are stored as one matrix, Wqkv: its rows are all of W_q, then W_k, then W_v"

    def __init__(self, config: dict[str, Any]) -> None:
        self.norm_bias = bool(ModernBertConfig.read(config).norm_bias)  # before the tensor names are made
        if self.norm_bias:
            self.embedding_tensors = {**self.embedding_tensors, "norm.bias": "embeddings.norm.bias"}
        super().__init__(config)
        self.first_hidden = "h_0 = LayerNorm(tok_embeddings[ids]): no position is added here; each layer rotates its queries and keys"
        self.layer_input = (
            "x = attn_norm(h_L), a LayerNorm before attention (pre-norm); layer 0 has none: h_0 is already normed"
        )
        self.input_text = "attn_norm (LayerNorm) of the residual stream; layer 0: the normed embeddings"

    def reads_head_dim(self) -> bool:
        return False

    # -- after the last layer: the model's final_norm, then ModernBertForMaskedLM's head
    # (dense, classifier_activation, norm) and the decoder, tied to tok_embeddings --

    def head(self, weights: Weights) -> Head:
        if not weights.has(f"{ROOT}head.dense.weight"):
            raise ModelUnavailable(
                "this modernbert checkpoint has no masked-LM head (head.dense.weight): a bare ModernBertModel computes "
                "attention, not predictions; use its ModernBertForMaskedLM checkpoint"
            )
        decoder = f"{ROOT}decoder.weight"
        bias = f"{ROOT}decoder.bias"
        return Head(
            decoder if weights.has(decoder) else self.embedding_tensors["tokens"],
            bias if weights.has(bias) else None,
            tied=not weights.has(decoder),
        )

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        return self.head_transform(weights, self.model_norm(weights, hidden))  # (P, D)

    def model_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        return self._normed(weights, "final_norm", hidden)  # (P, D) the model's own last step

    def head_transform(self, weights: Weights, x: torch.Tensor) -> torch.Tensor:
        """(..., D): the head's dense, classifier_activation and norm (the masked LM's and the classifier's)."""
        dense_bias = f"{ROOT}head.dense.bias" if weights.has(f"{ROOT}head.dense.bias") else None
        x = torch.nn.functional.linear(x, weights.read(f"{ROOT}head.dense.weight"), None if dense_bias is None else weights.read(dense_bias))
        act = activation(self.modern.classifier_activation, "classifier_activation", self.family)
        return self._normed(weights, f"{ROOT}head.norm", act(x))

    def _normed(self, weights: Weights, name: str, x: torch.Tensor) -> torch.Tensor:
        bias = weights.read(f"{name}.bias") if self.norm_bias else None
        return norms.layer_norm(x, weights.read(f"{name}.weight"), bias, self.eps)

    @property
    def modern(self) -> ModernBertConfig:
        assert isinstance(self.c, ModernBertConfig)
        return self.c

    def layer_types(self) -> list[str] | None:
        if self.c.layer_types:
            return list(self.c.layer_types)
        every = int(self.modern.global_attn_every_n_layers)
        return [SLIDING if i % every else "full_attention" for i in range(self.layers)]

    def layer_windows(self) -> list[int | None]:
        half = int(self.modern.local_attention) // 2
        return [half if kind == SLIDING else None for kind in self.layer_types() or []]

    def layer_names(self, layer: int) -> dict[str, str]:
        names = super().layer_names(layer)
        if layer == 0:  # nn.Identity: no tensors
            names = {role: name for role, name in names.items() if not role.startswith("attn_norm.")}
        return names

    def rope_parameters(self, layer_type: str | None) -> Mapping[str, Any] | None:
        """transformers 5 nests rope_parameters by layer type; older files have
        global_rope_theta and local_rope_theta (and rope_scaling for both)."""
        c = self.modern
        chosen = self.c.nested_rope(layer_type)
        if chosen is None:
            chosen = {"rope_type": "default", **(c.rope_parameters or {}), **(c.rope_scaling or {})}
        chosen.setdefault("rope_theta", float(c.local_theta if layer_type == SLIDING else c.global_theta))
        return chosen

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        shapes = super().tensor_shapes()
        d = self.d_model
        model = shapes["tokens"][1]
        shapes["norm.weight"] = shapes["norm.bias"] = ((d,), model)
        return shapes

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        rows = super().embed(weights, tokens)  # (T, D)
        bias = weights.read("embeddings.norm.bias") if self.norm_bias else None
        return norms.layer_norm(rows, weights.read("embeddings.norm.weight"), bias, self.eps)  # (T, D)

    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return hidden if t.index == 0 else self.normed(t, "attn_norm", hidden)  # (T, D): layer 0's attn_norm is nn.Identity

    def mask(self, n_tokens: int) -> None:
        return None

    def band(self, layer: int) -> Band:
        half = self.windows[layer]  # |i - j| <= half either way
        return Band() if half is None else Band(before=half, after=half)

    def layer_mask(self, layer: int, shared: torch.Tensor | None, n_tokens: int) -> torch.Tensor | None:
        return self.band(layer).table(n_tokens)  # (T, T) True = hidden: farther than half the window either way

