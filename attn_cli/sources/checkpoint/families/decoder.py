"""Rotary decoders: every causal family with rotary positions (Llama, Mistral, Qwen 2 and 3,
Gemma 1 to 3, Phi-3, GPT-NeoX, OLMo 2) as one adapter with switches.

Shapes: T tokens, D d_model (hidden_size), H query heads, Hkv key/value heads, Dk = Dv = head_dim, F intermediate_size.

A family here is data: named switches for the layer's shape (``pre_norm``, ``post_norm``,
``norm_kind``, ``qkv_kind``, ``mlp_kind``, ``qk_norm``, ``parallel``), its tensor names by role, the
embedding scale, the score modifiers (Gemma 2's soft-capping, ``query_pre_attn_scalar``), the windows
and rotary settings per layer. The steps are written once, below, and read the switches; the
attention itself is ``loop.multi_head`` as for every family.

Roles (the keys of ``names``, each with ``.weight`` and, where the family has one, ``.bias``):
attn_norm (before attention), attn_out_norm (on the attention output, inside the residual branch),
mlp_norm (before the MLP), mlp_out_norm (on the MLP output); q, k, v, o or a fused qkv; q_norm,
k_norm; the MLP as gate, up, down, or a fused gate_up and down, or (ungated) fc_in and fc_out.
``decoder_config.roles_for`` says which roles the switches need; a family whose ``names`` say
otherwise is an error when its class is defined.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch

from attn_cli.analysis.contributions import BlockNorm
from attn_cli.records.layers import FusedLinear, Projections
from attn_cli.records.band import Band
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint.families import norms, rotary
from attn_cli.sources.checkpoint.families.base import Family, Head, LayerTensors, Weights, token_rows
from attn_cli.sources.checkpoint.families.decoder_config import DecoderConfig, roles_for
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.files import ROOT
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.records.tokens import Tokens

SLIDING = "sliding_attention"
NORMS: dict[str, norms.Norm] = {
    "rms": norms.rms_norm,  # Llama, Mistral, Qwen, Phi-3: normed in float32, rounded, times the gain
    "rms_plus_one": norms.rms_norm_plus_one,  # Gemma: times (1 + gain) in float32
    "rms_wide_gain": norms.rms_norm_wide_gain,  # OLMo 2: times the gain in float32
    "layer": norms.layer_norm,  # GPT-NeoX, ModernBERT: LayerNorm
}

class Decoder(Family):
    """A causal decoder with rotary positions; the class attributes are the switches."""

    anchor = "embed_tokens.weight"
    embedding_tensors = {"tokens": "embed_tokens.weight"}
    layer_prefix: ClassVar[str] = "layers.{layer}."
    # role -> the tensor's name under the layer's prefix, without .weight/.bias
    names: ClassVar[Mapping[str, str]] = {
        "attn_norm": "input_layernorm", "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
        "o": "self_attn.o_proj", "mlp_norm": "post_attention_layernorm",
        "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
    }  # fmt: skip
    # the layer's shape, named
    pre_norm: ClassVar[bool] = True  # attn_norm before attention, mlp_norm before the MLP (OLMo 2: neither)
    post_norm: ClassVar[bool] = False  # attn_out_norm, mlp_out_norm on each branch's output, inside the residual (Gemma 2 and 3, OLMo 2)
    norm_kind: ClassVar[str] = "rms"  # every norm of the layer and the final one: a key of NORMS
    norm_bias: ClassVar[bool] = False  # the norms have a bias (GPT-NeoX)
    qkv_kind: ClassVar[str] = "separate"  # "separate": q, k, v; "fused": one qkv matrix, its rows as qkv_layout says
    mlp_kind: ClassVar[str] = "gated"  # "gated": down(act(gate) * up); "gated_fused": gate_up's halves (Phi-3); "plain": fc_out(act(fc_in)) (GPT-NeoX)
    norm: ClassVar[norms.Norm]  # NORMS[norm_kind], set for each family class
    config_class: ClassVar[type[DecoderConfig]] = DecoderConfig  # what the family reads from config.json
    qk_norm: ClassVar[str | None] = None  # "head": over each head's Dk (Qwen 3, Gemma 3); "whole": over H*Dk (OLMo 2)
    qkv_layout: ClassVar[str] = "blocks"  # a fused qkv's rows: "blocks" [q | k | v]; "per_head" [q_h, k_h, v_h] per head
    parallel: ClassVar[bool] = False  # the MLP reads the layer's input, not the attention's output (GPT-NeoX)
    embed_scale: ClassVar[bool] = False  # the token embeddings times sqrt(D) (Gemma)
    head_dim_default: ClassVar[int | None] = None  # None: D / H
    rotary_per_layer_type: ClassVar[bool] = False  # local and global layers rotate with their own settings
    rotary_precision: ClassVar[str] = "dtype"  # a key of rotary.PRECISIONS: where half precision rounds the rotation
    out_proj_name = "self_attn.o_proj"
    # after the last layer: the final norm (under the model's prefix), the head (the file's own)
    final_norm_name: ClassVar[str] = "norm"
    head_name: ClassVar[str] = "lm_head"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "norm" not in cls.__dict__:
            cls.norm = staticmethod(NORMS[cls.norm_kind])
        named, needed = set(cls.names), roles_for(cls)
        if named != needed:
            raise TypeError(f"{cls.__name__}.names: {sorted(named - needed)} not read, {sorted(needed - named)} missing, by its switches")

    def __init__(self, config: dict[str, Any]) -> None:
        # Keys absent from config.json take the family's defaults (its config_class's).
        c = self.c = self.config_class.read(config)
        self.model_type = str(c.model_type or self.family)
        self.layers, self.heads, self.d_model = int(c.layers), int(c.heads), int(c.d_model)
        self._kv_heads = int(c.kv_heads or self.heads)
        default_dim = self.head_dim_default or self.d_model // max(self.heads, 1)
        self._head_dim = int(c.head_dim or default_dim) if self.reads_head_dim() else default_dim
        self.d_ffn, self.max_positions, self.vocab_rows, self.eps = int(c.d_ffn), int(c.max_positions), int(c.vocab_size), float(c.eps)
        self.act = activation(self.activation_name(), self.config_class.key_of("activation"), self.family, in_place=True)
        if c.bidirectional:
            raise ModelUnavailable(f"config.json use_bidirectional_attention: attn-cli computes {self.model_type} as a causal decoder only")
        self.qkv_bias, self.out_bias, self.mlp_bias = self.biases()
        self.windows = self.layer_windows()
        self.rotaries = self.layer_rotaries()
        self.softcap = self.attention_softcap()
        self.layer_tensors = self._layer_tensors()
        self.first_hidden, self.layer_input, self.input_text = self.words()

    norm_text: ClassVar[str] = "h_L / sqrt(mean(h_L²) + eps) · g: the RMSNorm"

    def words(self) -> tuple[str, str, str]:
        """(h_0, x, what the projections read) in words, for the walk-through."""
        scale = f" · sqrt({self.d_model})" if self.embed_scale else ""
        first = (
            f"h_0 = embed_tokens[ids]{scale}: the token embeddings alone; no position is added here, "
            f"positions enter each layer through the rotation of its queries and keys (step 3)"
        )
        if not self.pre_norm:
            as_it_is = "x = h_L: the residual stream as it is (this family norms the attention's output instead)"
            return first, as_it_is, "the residual stream itself (no norm before attention)"
        name = self.names["attn_norm"].rsplit(".", 1)[-1]
        kind = "LayerNorm" if self.norm_kind == "layer" else "RMSNorm"
        return first, f"x = {name}(h_L) = {self.norm_text} before attention (pre-norm)", (
            f"{name} ({kind}) of the residual stream"
        )

    # -- what a family reads from its config (overridden where it differs) ---------------

    def reads_head_dim(self) -> bool:
        """Whether config.json's head_dim is read (Phi-3 and GPT-NeoX take D / H whatever it says)."""
        return True

    def activation_name(self) -> Any:
        return self.c.activation

    def biases(self) -> tuple[bool, bool, bool]:
        """(q/k/v biases, W_o's bias, the MLP's biases)."""
        return bool(self.c.attention_bias), bool(self.c.attention_bias), bool(self.c.mlp_bias)

    def layer_types(self) -> list[str] | None:
        """Each layer's kind ("sliding_attention" or "full_attention"), None when all are full."""
        return None

    def layer_windows(self) -> list[int | None]:
        """Each layer's sliding window (None: every earlier token is seen)."""
        window, types = self.c.sliding_window, self.layer_types()
        if not window or types is None:
            return [None] * self.layers
        if len(types) != self.layers:
            raise ModelUnavailable(f"config.json layer_types lists {len(types)} layers for num_hidden_layers {self.layers}")
        return [int(window) if kind == SLIDING else None for kind in types]

    def rope_parameters(self, layer_type: str | None) -> Mapping[str, Any] | None:
        """The rotary dict for a layer type: ``rope_parameters`` (transformers 5) or the
        older ``rope_scaling`` (rope_theta beside it)."""
        return self.c.rope()

    def rope(self, layer_type: str | None = None) -> rotary.RopeSettings:
        """The rotary settings: the dict, then the keys beside it, then the family's defaults."""
        original = self.c.original_max_positions
        return rotary.settings(
            self.rope_parameters(layer_type),
            head_dim=self.head_dim,
            max_positions=self.max_positions,
            theta=float(self.c.theta),
            partial=float(self.c.partial),
            original=None if original is None else int(original),
        )

    def layer_rotaries(self) -> list[rotary.Rotary]:
        """Each layer's rotary embedding: one for all, or one per layer type when the
        family gives its local and global layers their own (Gemma 3, ModernBERT)."""
        kinds = (self.layer_types() if self.rotary_per_layer_type else None) or [None] * self.layers
        made = {kind: rotary.Rotary(self.rope(kind), self.rotary_precision) for kind in set(kinds)}
        return [made[kind] for kind in kinds]

    def attention_softcap(self) -> float | None:
        return None

    # -- the tensors ----------------------------------------------------------------------

    def roles(self) -> dict[str, tuple[str, bool]]:
        """role -> (name without .weight/.bias, has a bias)."""
        mlp = {"gate", "up", "gate_up", "down", "fc_in", "fc_out"}
        made: dict[str, tuple[str, bool]] = {}
        for role, name in self.names.items():
            if role in ("q", "k", "v", "qkv"):
                biased = self.qkv_bias
            elif role == "o":
                biased = self.out_bias
            elif role in mlp:
                biased = self.mlp_bias
            else:  # the norms
                biased = self.norm_bias and role not in ("q_norm", "k_norm")
            made[role] = (self.layer_prefix + name, biased)
        return made

    def _layer_tensors(self) -> dict[str, str]:
        tensors = {}
        for role, (name, biased) in self.roles().items():
            tensors[f"{role}.weight"] = f"{name}.weight"
            if biased:
                tensors[f"{role}.bias"] = f"{name}.bias"
        return tensors

    @property
    def head_dim(self) -> int:
        return self._head_dim

    @property
    def kv_heads(self) -> int:
        return self._kv_heads

    def inconsistency(self) -> str | None:
        if self.layers < 1 or self.heads < 1 or self.kv_heads < 1 or self.heads % self.kv_heads:
            return (
                f"config.json has {self.layers} layers, {self.heads} query heads and {self.kv_heads} key/value heads; "
                f"the key/value heads must divide the query heads"
            )
        if self._head_dim % 2:
            return f"config.json head_dim {self._head_dim} is odd; rotary embeddings pair a head's dimensions"
        return None

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        d, f, dk = self.d_model, self.d_ffn, self.head_dim
        q, kv = self.heads * dk, self.kv_heads * dk
        model = (
            f"vocab_size {self.vocab_rows}, hidden_size {d}, num_attention_heads {self.heads}, "
            f"num_key_value_heads {self.kv_heads}, head_dim {dk}, intermediate_size {f}"
        )
        norm_dims = {"q_norm": dk if self.qk_norm == "head" else q, "k_norm": dk if self.qk_norm == "head" else kv}
        outs = {"q": q, "k": kv, "v": kv, "qkv": q + 2 * kv, "o": d, "gate": f, "up": f, "gate_up": 2 * f, "down": d,
                "fc_in": f, "fc_out": d}  # fmt: skip
        ins = {"o": q, "down": f, "fc_out": f}
        shapes: dict[str, tuple[int, ...]] = {"tokens": (self.vocab_rows, d)}
        for role in self.roles():
            if role.endswith("norm"):
                width = norm_dims.get(role, d)
                shapes[f"{role}.weight"], shapes[f"{role}.bias"] = (width,), (width,)
            else:
                shapes[f"{role}.weight"] = (outs[role], ins.get(role, d))  # nn.Linear's (out, in)
                shapes[f"{role}.bias"] = (outs[role],)
        return {role: (shape, model) for role, shape in shapes.items()}

    def layer_elements(self) -> int:
        shapes = self.tensor_shapes()
        return sum(math.prod(shapes[role][0]) for role in self.layer_tensors)

    # -- the steps ------------------------------------------------------------------------

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        rows = token_rows(weights, self.embedding_tensors["tokens"], tokens.ids, self.vocab_rows)  # (T, D)
        if self.embed_scale:  # sqrt(D) as a float32 tensor rounded to the run's dtype, as transformers
            rows = rows * torch.tensor(self.d_model**0.5, dtype=torch.float32).to(rows.dtype)  # (T, D)
        return rows

    def normed(self, t: LayerTensors, role: str, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x, t[f"{role}.weight"], t[f"{role}.bias"] if self.norm_bias else None, self.eps)  # (T, D)

    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return self.normed(t, "attn_norm", hidden) if self.pre_norm else hidden  # (T, D)

    def _linear(self, t: LayerTensors, role: str) -> FusedLinear:
        return FusedLinear(t[f"{role}.weight"], t.get(f"{role}.bias"))

    def projections(self, t: LayerTensors) -> Projections:
        if self.qkv_kind == "fused":
            query, key, value = self._split_qkv(self._linear(t, "qkv"))
        else:
            query, key, value = (self._linear(t, role) for role in ("q", "k", "v"))
        return Projections(query, key, value, self._linear(t, "o"), *self._qk_norms(t))

    def _split_qkv(self, fused: FusedLinear) -> tuple[FusedLinear, FusedLinear, FusedLinear]:
        """W_q, W_k, W_v (and biases) as rows of one fused matrix."""
        dk, q, kv = self.head_dim, self.heads * self.head_dim, self.kv_heads * self.head_dim
        w, b = fused.weight, fused.bias  # (q + 2 kv, D), (q + 2 kv,)
        if self.qkv_layout == "per_head":  # GPT-NeoX: head h's rows are [q_h | k_h | v_h]
            per_head = w.view(self.heads, 3, dk, -1)  # (H, 3, Dk, D)
            biases = b.view(self.heads, 3, dk) if b is not None else None  # (H, 3, Dk)
            return tuple(  # type: ignore[return-value]
                FusedLinear(
                    per_head[:, i].reshape(q, -1),  # (H, Dk, D) -> (H*Dk, D)
                    biases[:, i].reshape(q) if biases is not None else None,  # (H*Dk,)
                )
                for i in range(3)
            )
        bounds = ((0, q), (q, q + kv), (q + kv, q + 2 * kv))  # Phi-3: [all q | all k | all v]
        return tuple(  # type: ignore[return-value]
            FusedLinear(w[lo:hi], b[lo:hi] if b is not None else None) for lo, hi in bounds
        )

    def _qk_norms(self, t: LayerTensors) -> tuple[Callable[[torch.Tensor], torch.Tensor] | None, ...]:
        if self.qk_norm is None:
            return None, None
        dk, norm, eps = self.head_dim, self.norm, self.eps

        def make(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
            if self.qk_norm == "whole":
                return lambda m: norm(m, weight, None, eps)  # (T, H*Dk) over all of it
            # (T, H*Dk) -> (T, H, Dk), each head normed over its Dk -> (T, H*Dk)
            return lambda m: norm(m.view(*m.shape[:-1], -1, dk), weight, None, eps).view(m.shape)  # (..., T, H*Dk) per head

        return make(t["q_norm.weight"]), make(t["k_norm.weight"])

    def rotate(self, queries: torch.Tensor, keys: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotaries[layer].apply(queries, keys)  # (H, T, Dk), (Hkv, T, Dk)

    def length_class(self, n_tokens: int) -> int:
        return max(rotary.length_class(r.settings, n_tokens) for r in self.rotaries)

    def rotary_text(self) -> str:
        texts = list(dict.fromkeys(r.text() for r in self.rotaries))
        if len(texts) == 1:
            return texts[0]
        kinds = self.layer_types() or []
        local = next(r for r, kind in zip(self.rotaries, kinds) if kind == SLIDING).text()
        full = next(r for r, kind in zip(self.rotaries, kinds) if kind != SLIDING).text()
        return f"on sliding-window layers, {local}; on global layers, {full}"

    def divisor(self, layer: int) -> tuple[float, str]:
        return math.sqrt(self.head_dim), f"sqrt({self.head_dim})"

    def score_scale(self, layer: int) -> float:
        return self.head_dim**-0.5  # the attention's scaling, multiplied in

    def score_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | None, float | None]:
        return None, self.softcap

    def mask(self, n_tokens: int) -> torch.Tensor:
        return causal_mask(n_tokens)  # (T, T)

    def band(self, layer: int) -> Band:
        window = self.windows[layer]  # each query sees itself and window - 1 keys before it
        return Band(before=None if window is None else window - 1, after=0)

    def layer_mask(self, layer: int, shared: torch.Tensor | None, n_tokens: int) -> torch.Tensor | None:
        window = self.windows[layer]
        if window is None or shared is None or n_tokens <= window:
            return shared
        return self.band(layer).table(n_tokens).to(shared.device)  # (T, T) the causal mask and the window
    def mlp(self, t: LayerTensors, x: torch.Tensor) -> torch.Tensor:
        """(T, D) -> (T, D) the feed-forward branch: transformers' act(gate) * up written into the gate's
        block (``self.act`` in place where torch can; the product commutes exactly), two (T, F) in flight, not four."""
        if self.mlp_kind == "plain":  # ungated: GPT-NeoX
            return self._linear(t, "fc_out")(self.act(self._linear(t, "fc_in")(x)))  # (T, D) -> (T, F) -> (T, D)
        if self.mlp_kind == "gated_fused":  # Phi-3: [gate | up] rows of one matrix
            gate, up = self._linear(t, "gate_up")(x).chunk(2, dim=-1)  # (T, D) -> (T, 2F) -> (T, F) twice
        else:
            gate, up = self._linear(t, "gate")(x), self._linear(t, "up")(x)  # (T, D) -> (T, F) each
        gated = self.act(gate.clone()) * up if gate.requires_grad else self.act(gate).mul_(up)  # (T, F), in the gate's block but under autograd
        del gate, up
        return self._linear(t, "down")(gated)  # (T, F) -> (T, D)

    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        if self.parallel:  # both branches read the layer's input; summed as transformers orders it
            return self.mlp(t, self.normed(t, "mlp_norm", hidden)) + attention_output + hidden  # (T, D)
        if self.post_norm:
            attention_output = self.normed(t, "attn_out_norm", attention_output)  # (T, D)
        hidden = hidden + attention_output  # (T, D) residual
        x = self.normed(t, "mlp_norm", hidden) if self.pre_norm else hidden  # (T, D)
        out = self.mlp(t, x)  # (T, D)
        if self.post_norm:
            out = self.normed(t, "mlp_out_norm", out)  # (T, D)
        return hidden + out  # (T, D) residual

    def attention_block(self, t: LayerTensors) -> BlockNorm:
        if not self.post_norm or self.parallel:  # pre-norm (a parallel layer's attention half): y = x + attention
            return BlockNorm("none")
        kind = self.norm_kind
        return BlockNorm("attention", t["attn_out_norm.weight"], t.get("attn_out_norm.bias"), self.eps, kind == "layer", kind == "rms_plus_one")

    # -- after the last layer --

    def head(self, weights: Weights) -> Head:
        cap = self.c.final_softcap
        softcap = float(cap) if cap else None
        if bool(self.c.tie_word_embeddings):
            return Head(self.embedding_tensors["tokens"], softcap=softcap, tied=True)
        name = f"{ROOT}{self.head_name}.weight"
        if not weights.has(name):
            raise ModelUnavailable(
                f"this {self.family} checkpoint has no language-model head ({self.head_name}.weight): a bare model "
                f"(*Model) computes attention, not predictions; use its *ForCausalLM checkpoint"
            )
        return Head(name, softcap=softcap)

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        bias = weights.read(f"{self.final_norm_name}.bias") if self.norm_bias else None
        return self.norm(hidden, weights.read(f"{self.final_norm_name}.weight"), bias, self.eps)  # (P, D)


def types_from_pattern(layers: int, pattern: int) -> list[str]:
    """Every ``pattern``-th layer global, the others sliding (Gemma 2: 2, Gemma 3: 6)."""
    return [SLIDING if (i + 1) % pattern else "full_attention" for i in range(layers)]
