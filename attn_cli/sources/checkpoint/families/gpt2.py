"""GPT-2: learned positions, pre-LN blocks, fused Conv1D projections, causal mask.

Shapes: T tokens, D d_model (n_embd), H heads, Dk = D / H, F the MLP's inner size.

transformers stores GPT-2's projections as ``Conv1D``: weight (in, out), ``y = x W + b``.
attn-cli's ``Linear`` is nn.Linear's (out, in), so every Conv1D weight is transposed
on the way in (``conv1d_as_linear``), and ``c_attn``'s fused output columns are
q | k | v, each D wide, head h at columns h*Dk .. (h+1)*Dk - 1 of its block.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from attn_cli.records.layers import FusedLinear, Projections
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint.families.base import (
    Family,
    Head,
    LayerTensors,
    Weights,
    scaled_divisor,
    token_rows,
)
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.families.config import FamilyConfig, key
from attn_cli.sources.checkpoint.families.norms import layer_norm
from attn_cli.sources.checkpoint.files import ROOT
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.records.tokens import Tokens

# the config.json model_types this module computes (registry.py reads this): model_type -> (family, class)
MODEL_TYPES = {"gpt2": ("gpt2", "Gpt2")}


@dataclasses.dataclass(frozen=True)
class Gpt2Config(FamilyConfig):
    layers: int = key("n_layer", 12)
    heads: int = key("n_head", 12)
    d_model: int = key("n_embd", 768)
    d_ffn: int | None = key("n_inner")  # None: 4 D
    max_positions: int = key("n_positions", 1024)
    vocab_size: int = key("vocab_size", 50257)
    eps: float = key("layer_norm_epsilon", 1e-5)
    scale: bool = key("scale_attn_weights", True)
    by_layer: bool = key("scale_attn_by_inverse_layer_idx", False)
    activation: str = key("activation_function", "gelu_new")
    tie_word_embeddings: bool = key("tie_word_embeddings", True)


def conv1d_as_linear(weight: torch.Tensor) -> torch.Tensor:
    """A Conv1D weight (in, out) as nn.Linear's (out, in)."""
    return weight.T  # (in, out) -> (out, in)


class Gpt2(Family):
    family = "gpt2"
    softmax_upcast = False  # eager_attention_forward: nn.functional.softmax of the half-precision scores
    anchor = "wte.weight"
    input_text = "ln_1 of the residual stream"
    embedding_tensors = {"tokens": "wte.weight", "positions": "wpe.weight"}
    first_hidden = "h_0 = wte[ids] + wpe[positions] (learned token and position embeddings)"
    layer_input = "x = ln_1(h_L): the layer norm before attention (pre-LN), applied to the residual stream h_L"
    out_proj_name = "attn.c_proj"
    weights_note = (
        "GPT-2 stores W_q, W_k, W_v fused in one Conv1D, c_attn (input-first, D × 3D); here each is shown "
        "as nn.Linear stores it, (out × in), which is c_attn's transpose cut in three."
    )
    layer_tensors = {
        "ln_1.weight": "h.{layer}.ln_1.weight",
        "ln_1.bias": "h.{layer}.ln_1.bias",
        "c_attn.weight": "h.{layer}.attn.c_attn.weight",  # (D, 3D) input-first, columns q | k | v
        "c_attn.bias": "h.{layer}.attn.c_attn.bias",  # (3D,)
        "c_proj.weight": "h.{layer}.attn.c_proj.weight",  # (D, D) input-first: W_o
        "c_proj.bias": "h.{layer}.attn.c_proj.bias",
        "ln_2.weight": "h.{layer}.ln_2.weight",
        "ln_2.bias": "h.{layer}.ln_2.bias",
        "mlp.c_fc.weight": "h.{layer}.mlp.c_fc.weight",  # (D, F) input-first
        "mlp.c_fc.bias": "h.{layer}.mlp.c_fc.bias",
        "mlp.c_proj.weight": "h.{layer}.mlp.c_proj.weight",  # (F, D) input-first
        "mlp.c_proj.bias": "h.{layer}.mlp.c_proj.bias",
    }

    def __init__(self, config: dict[str, Any]) -> None:
        c = Gpt2Config.read(config)  # keys absent from config.json take GPT2Config's defaults
        self.layers, self.heads, self.d_model = int(c.layers), int(c.heads), int(c.d_model)
        self.d_ffn = int(c.d_ffn or 4 * self.d_model)
        self.max_positions, self.vocab_rows, self.eps = int(c.max_positions), int(c.vocab_size), float(c.eps)
        self.scale, self.by_layer, self.tied = bool(c.scale), bool(c.by_layer), bool(c.tie_word_embeddings)
        self.act = activation(c.activation, Gpt2Config.key_of("activation"), self.family)

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        d, f = self.d_model, self.d_ffn
        model = (f"vocab_size {self.vocab_rows}, n_positions {self.max_positions}, n_embd {d}, n_inner {f}")
        shapes = {
            "tokens": (self.vocab_rows, d), "positions": (self.max_positions, d),
            "ln_1.weight": (d,), "ln_1.bias": (d,), "c_attn.weight": (d, 3 * d), "c_attn.bias": (3 * d,),
            "c_proj.weight": (d, d), "c_proj.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
            "mlp.c_fc.weight": (d, f), "mlp.c_fc.bias": (f,), "mlp.c_proj.weight": (f, d), "mlp.c_proj.bias": (d,),
        }  # fmt: skip  (Conv1D weights are input-first)
        return {role: (shape, model) for role, shape in shapes.items()}

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        n_tokens = len(tokens)
        words = token_rows(weights, "wte.weight", tokens.ids, self.vocab_rows)  # (T, D)
        positions = weights.read_rows("wpe.weight", 0, n_tokens)  # (T, D), positions 0 .. T-1
        return words + positions  # (T, D)

    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return layer_norm(hidden, t["ln_1.weight"], t["ln_1.bias"], self.eps)  # (T, D)

    def projections(self, t: LayerTensors) -> Projections:
        fused = conv1d_as_linear(t["c_attn.weight"])  # (D, 3D) -> (3D, D)
        w_q, w_k, w_v = fused.split(self.d_model, dim=0)  # (3D, D) -> 3 x (D, D)
        b_q, b_k, b_v = t["c_attn.bias"].split(self.d_model)  # (3D,) -> 3 x (D,)
        w_o = conv1d_as_linear(t["c_proj.weight"])  # (D, D) input-first -> (out, in)
        return Projections(FusedLinear(w_q, b_q), FusedLinear(w_k, b_k), FusedLinear(w_v, b_v), FusedLinear(w_o, t["c_proj.bias"]))

    def divisor(self, layer: int) -> tuple[float, str]:
        return scaled_divisor(self.head_dim, self.scale, layer + 1 if self.by_layer else 1)

    def score_scale(self, layer: int) -> float:
        """GPT2Attention.scaling, multiplied in: head_dim ** -0.5 (or 1), then / (layer + 1)."""
        scaling = self.head_dim**-0.5 if self.scale else 1.0
        return scaling / float(layer + 1) if self.by_layer else scaling

    def mask(self, n_tokens: int) -> torch.Tensor:
        return causal_mask(n_tokens)  # (T, T)

    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        hidden = attention_output + hidden  # (T, D) residual
        normed = layer_norm(hidden, t["ln_2.weight"], t["ln_2.bias"], self.eps)  # (T, D)
        inner = self.act(FusedLinear(conv1d_as_linear(t["mlp.c_fc.weight"]), t["mlp.c_fc.bias"])(normed))  # (T, D) -> (T, F)
        mlp = FusedLinear(conv1d_as_linear(t["mlp.c_proj.weight"]), t["mlp.c_proj.bias"])(inner)  # (T, F) -> (T, D)
        return hidden + mlp  # (T, D) residual

    # -- after the last layer: ln_f, then the head (wte itself unless untied) --

    def head(self, weights: Weights) -> Head:
        if self.tied:
            return Head(self.embedding_tensors["tokens"], tied=True)
        if not weights.has(f"{ROOT}lm_head.weight"):
            raise ModelUnavailable("this GPT-2 checkpoint has no language-model head (lm_head.weight, untied); use GPT2LMHeadModel's files")
        return Head(f"{ROOT}lm_head.weight")

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        return layer_norm(hidden, weights.read("ln_f.weight"), weights.read("ln_f.bias"), self.eps)  # (P, D)
