"""Encoder-decoder models: BART, Marian and T5 / Flan-T5.

Three stacks, as transformers computes them: the encoder's self-attention over the source
(S x S), the decoder's causal self-attention over its inputs (T x T), and in every decoder
layer cross-attention from the decoder's states (queries) to the encoder's output (keys and
values): T x S. Every attention is ``loop.multi_head`` (``source=`` for cross-attention) and
so ``attention.attend``; what differs between the two families is where the norms go, the
embeddings, the scale and T5's relative position bias, each a method below.

The decoder reads its inputs teacher-forced: ``decoder_inputs`` builds them from the labels
(the tokenizer's encoding of the target) as transformers' ``shift_tokens_right`` does.

``checkpoint.pair`` opens a checkpoint of one of these families.
Shapes: S source tokens, T decoder tokens, D d_model, H heads.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from attn_cli.records.layers import FusedLinear, LayerAttention, Projections
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint.families.base import Head, LayerTensors, Weights, token_rows
from attn_cli.sources.checkpoint.families.activations import activation
from attn_cli.sources.checkpoint.families.loop import multi_head
from attn_cli.sources.checkpoint.families.bert import relative_buckets
from attn_cli.sources.checkpoint.families.norms import layer_norm, rms_norm
from attn_cli.sources.checkpoint.files import ROOT
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.records.trace import Anatomy

@dataclasses.dataclass
class PairForward:
    """Every layer of the three stacks, in layer order, each a LayerAttention (float32 on the CPU
    in a float32 run): encoder (H, S, S), decoder (H, T, T), cross (H, T, S)."""

    encoder: list[LayerAttention]
    decoder: list[LayerAttention]
    cross: list[LayerAttention]
    hidden: torch.Tensor  # (T, D) the decoder's output (after its final norm, where it has one)


class Seq2Seq(abc.ABC):
    """One encoder-decoder architecture: sizes from config.json and the steps that differ."""

    family: ClassVar[str]
    anchor: ClassVar[str]  # finds the save's prefix
    layer_name: ClassVar[dict[str, str]]  # stack -> a layer's name prefix with {layer}

    input_text: ClassVar[str]  # what each attention's queries read, in words
    qkv_bias: ClassVar[bool] = True  # W_q, W_k, W_v have biases
    start_default: ClassVar[int | None] = None  # decoder_start_token_id when config.json has none; None: the pad id
    first_hidden: ClassVar[str]  # h_0 in words (explain's step 2)
    out_proj_name: ClassVar[str]  # the checkpoint's names for W_o

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.d_model = int(config["d_model"])
        self.pad = int(config.get("pad_token_id") if config.get("pad_token_id") is not None else 0)
        positions = config.get("max_position_embeddings")
        self.max_positions: int | None = int(positions) if positions is not None else None  # None: relative positions only

    # -- sizes per stack --
    layers: dict[str, int]
    heads: dict[str, int]

    def head_dim(self, stack: str) -> int:
        return self.d_model // self.heads[stack]

    @property
    def decoder_start(self) -> int:
        """The decoder's first input id: config.json's ``decoder_start_token_id``, else the family's default."""
        start = self.config.get("decoder_start_token_id")
        if start is None:
            start = self.pad if self.start_default is None else self.start_default
        return int(start)

    def token_rows(self, weights: Weights, name: str, ids: Sequence[int]) -> torch.Tensor:
        """(N, D) rows ``ids`` of the token table ``name`` (its row count from the file's header)."""
        return token_rows(weights, name, ids, int(weights.entry(name).shape[0]))

    def decoder_inputs(self, labels: Sequence[int]) -> list[int]:
        """The decoder's inputs for ``labels`` (the target's ids with its special tokens):
        ``decoder_start``, then every label but the last, as transformers' shift_tokens_right."""
        return [self.decoder_start, *labels[:-1]]

    def names(self, stack: str, layer: int) -> dict[str, str]:
        prefix = self.layer_name[stack].format(layer=layer)
        return {role: prefix + suffix for role, suffix in self.layer_suffixes(stack).items()}

    @abc.abstractmethod
    def layer_suffixes(self, stack: str) -> dict[str, str]:
        """role -> the tensor's name after the layer's prefix."""

    @abc.abstractmethod
    def embed(self, weights: Weights, stack: str, ids: Sequence[int]) -> torch.Tensor:
        """(N, D) the stack's first input."""

    @abc.abstractmethod
    def projections(self, t: LayerTensors, kind: str) -> Projections:
        """W_q, W_k, W_v, W_o of the layer's ``kind`` of attention: "self" or "cross"."""

    @abc.abstractmethod
    def divisor(self, stack: str) -> tuple[float, str]:
        """(scores / divisor is the softmax input, the divisor in words)."""

    def position_bias(self, weights: Weights, stack: str, n_tokens: int) -> torch.Tensor | None:
        """(H, N, N) added to every self-attention layer's scores of ``stack``, or None."""
        return None

    @abc.abstractmethod
    def attention_input(self, t: LayerTensors, kind: str, hidden: torch.Tensor) -> torch.Tensor:
        """What the ``kind`` attention's queries read (keys and values too, for "self")."""

    @abc.abstractmethod
    def after_attention(self, t: LayerTensors, kind: str, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """The hidden state after the ``kind`` attention block: residual (and norm)."""

    @abc.abstractmethod
    def feed_forward(self, t: LayerTensors, stack: str, hidden: torch.Tensor) -> torch.Tensor:
        """The layer's output after its feed-forward block: residual (and norm)."""

    def stack_output(self, weights: Weights, stack: str, hidden: torch.Tensor) -> torch.Tensor:
        """The stack's output from its last layer's (a final norm, where the family has one)."""
        return hidden

    def anatomy(self) -> Anatomy:
        """The steps in words, for the walk-through (``explain``)."""
        return Anatomy(self.first_hidden, self.input_text, self.out_proj_name)

    @abc.abstractmethod
    def head(self, weights: Weights) -> Head:
        """The language-model head the decoder's output goes through (``base.head_logits``)."""

    # -- the forward --

    def run_stack(
        self, weights: Weights, stack: str, ids: Sequence[int], memory: torch.Tensor | None = None
    ) -> tuple[list[LayerAttention], list[LayerAttention], torch.Tensor]:
        """(self-attention layers, cross-attention layers, the stack's output) over ``ids``;
        ``memory`` (S, D): the encoder's output, which the decoder's cross-attention reads."""
        hidden = self.embed(weights, stack, ids)  # (N, D)
        n = len(ids)
        mask = causal_mask(n) if stack == "decoder" else None  # (N, N)
        bias = self.position_bias(weights, stack, n)  # (H, N, N) or None
        divisor, divisor_text = self.divisor(stack)
        heads = self.heads[stack]
        own, cross = [], []
        for index in range(self.layers[stack]):
            t = LayerTensors(weights, self.names(stack, index))
            x = self.attention_input(t, "self", hidden)  # (N, D)
            layer = multi_head(x, self.projections(t, "self"), heads, divisor, mask, index, divisor_text, bias=bias)
            hidden = self.after_attention(t, "self", hidden, layer.output)  # (N, D)
            own.append(layer)
            if memory is not None:
                x = self.attention_input(t, "cross", hidden)  # (N, D)
                layer = multi_head(x, self.projections(t, "cross"), heads, divisor, None, index, divisor_text, source=memory)
                hidden = self.after_attention(t, "cross", hidden, layer.output)  # (N, D)
                cross.append(layer)
            hidden = self.feed_forward(t, stack, hidden)  # (N, D)
        return own, cross, self.stack_output(weights, stack, hidden)

    def forward(self, weights: Weights, source_ids: Sequence[int], decoder_ids: Sequence[int]) -> PairForward:
        """The source through the encoder, then the decoder's inputs through the decoder."""
        with torch.inference_mode():
            encoder, _, memory = self.run_stack(weights, "encoder", source_ids)
            decoder, cross, hidden = self.run_stack(weights, "decoder", decoder_ids, memory)
        return PairForward(encoder, decoder, cross, hidden)


class Bart(Seq2Seq):
    """BART (modeling_bart.py): learned positions with their offset of 2, the embeddings times
    sqrt(D) where ``scale_embedding``, ``layernorm_embedding``; post-norm layers (the norm after
    each residual), scores divided by sqrt(head_dim), biases everywhere."""

    family = "bart"
    anchor = "encoder.layers.0.self_attn.q_proj.weight"
    input_text = "x = h_(l-1), the layer's input as it is (post-norm: each norm comes after its residual)"
    first_hidden = "h_0 = LayerNorm(token embedding (× sqrt(d_model) where scale_embedding) + learned position (row p + 2))"
    out_proj_name = "self_attn.out_proj, and encoder_attn.out_proj in cross-attention"
    layer_name = {"encoder": "encoder.layers.{layer}.", "decoder": "decoder.layers.{layer}."}
    POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding: position p is row p + 2
    start_default = 2  # </s>
    EPS = 1e-5  # nn.LayerNorm's default

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.layers = {"encoder": int(config["encoder_layers"]), "decoder": int(config["decoder_layers"])}
        self.heads = {"encoder": int(config["encoder_attention_heads"]), "decoder": int(config["decoder_attention_heads"])}
        self.scale = math.sqrt(self.d_model) if config.get("scale_embedding") else 1.0
        self.act = activation(config.get("activation_function", "gelu"), "activation_function", self.family)

    def layer_suffixes(self, stack: str) -> dict[str, str]:
        roles = {}
        for kind, module in (("self", "self_attn"), ("cross", "encoder_attn")):
            if kind == "cross" and stack == "encoder":
                continue
            for p in ("q", "k", "v", "out"):
                roles[f"{kind}.{p}.weight"], roles[f"{kind}.{p}.bias"] = f"{module}.{p}_proj.weight", f"{module}.{p}_proj.bias"
            roles[f"{kind}.norm.weight"], roles[f"{kind}.norm.bias"] = f"{module}_layer_norm.weight", f"{module}_layer_norm.bias"
        for p in ("fc1", "fc2", "final_layer_norm"):
            roles[f"{p}.weight"], roles[f"{p}.bias"] = f"{p}.weight", f"{p}.bias"
        return roles

    def embed(self, weights: Weights, stack: str, ids: Sequence[int]) -> torch.Tensor:
        rows = self.token_rows(weights, "shared.weight", ids) * self.scale  # (N, D)
        positions = weights.read_rows(f"{stack}.embed_positions.weight", self.POSITION_OFFSET, self.POSITION_OFFSET + len(ids))  # (N, D)
        norm = f"{stack}.layernorm_embedding"
        return layer_norm(rows + positions, weights.read(f"{norm}.weight"), weights.read(f"{norm}.bias"), self.EPS)

    def projections(self, t: LayerTensors, kind: str) -> Projections:
        q, k, v, o = (FusedLinear(t[f"{kind}.{p}.weight"], t[f"{kind}.{p}.bias"]) for p in ("q", "k", "v", "out"))
        return Projections(q, k, v, o)

    def divisor(self, stack: str) -> tuple[float, str]:
        return math.sqrt(self.head_dim(stack)), f"sqrt({self.head_dim(stack)})"

    def attention_input(self, t: LayerTensors, kind: str, hidden: torch.Tensor) -> torch.Tensor:
        return hidden  # post-norm: the layer reads its input as it is

    def after_attention(self, t: LayerTensors, kind: str, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return layer_norm(hidden + output, t[f"{kind}.norm.weight"], t[f"{kind}.norm.bias"], self.EPS)

    def head(self, weights: Weights) -> Head:
        """``lm_head``: the shared token table (tied, as BartForConditionalGeneration saves it) or
        the file's own ``lm_head.weight``, plus ``final_logits_bias``."""
        own = f"{ROOT}lm_head.weight"
        weight = own if weights.has(own) else self.token_table(weights, "decoder")
        bias = f"{ROOT}final_logits_bias"
        return Head(weight, bias if weights.has(bias) else None, tied=weight != own)

    def token_table(self, weights: Weights, stack: str) -> str:
        return "shared.weight"

    def feed_forward(self, t: LayerTensors, stack: str, hidden: torch.Tensor) -> torch.Tensor:
        inner = self.act(FusedLinear(t["fc1.weight"], t["fc1.bias"])(hidden))  # (N, F)
        out = FusedLinear(t["fc2.weight"], t["fc2.bias"])(inner)  # (N, D)
        return layer_norm(hidden + out, t["final_layer_norm.weight"], t["final_layer_norm.bias"], self.EPS)


class Marian(Bart):
    """Marian (modeling_marian.py): BART's layers with sinusoidal positions that checkpoints do
    not store (``sinusoid``: sines in the first half of each vector, cosines in the second),
    from position 0; no ``layernorm_embedding``; the embeddings times sqrt(D) where
    ``scale_embedding``; one shared token table, or one per stack (``share_encoder_decoder_embeddings``
    false: the decoder's has ``decoder_vocab_size`` rows); the decoder starts with the pad id."""

    family = "marian"
    first_hidden = "h_0 = token embedding (× sqrt(d_model) where scale_embedding) + sinusoidal position (sines | cosines)"
    start_default = None  # the pad id

    def token_table(self, weights: Weights, stack: str) -> str:
        return "shared.weight" if weights.has("shared.weight") else f"{stack}.embed_tokens.weight"

    def embed(self, weights: Weights, stack: str, ids: Sequence[int]) -> torch.Tensor:
        rows = self.token_rows(weights, self.token_table(weights, stack), ids) * self.scale  # (N, D)
        return rows + sinusoid(len(ids), self.d_model).to(rows.dtype)  # (N, D)


def sinusoid(n_positions: int, dim: int) -> torch.Tensor:
    """(N, D) Marian's position table, as MarianSinusoidalPositionalEmbedding makes it: angle
    pos / 10000^(2 (j // 2) / D) in float64, the sines of the even j in the first half (the
    first ceil(D / 2) columns), the cosines of the odd j after them (not interleaved), in float32."""
    j = torch.arange(dim, dtype=torch.float64)  # (D,)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    return torch.cat([torch.sin(angles[:, 0::2]), torch.cos(angles[:, 1::2])], dim=-1).to(torch.float32)  # (N, D)


class T5(Seq2Seq):
    """T5 v1.0 and v1.1 / Flan-T5 (modeling_t5.py): no scaling of the scores; a relative position
    bias from each stack's first block, shared by its layers (bidirectional buckets in the
    encoder, causal in the decoder, none in cross-attention); pre-norm with RMSNorm without a
    mean or bias; ReLU or gated-GELU (tanh) feed-forward; a final norm per stack."""

    family = "t5"
    anchor = "encoder.block.0.layer.0.SelfAttention.q.weight"
    qkv_bias = False
    input_text = "x = RMSNorm(h_(l-1)) (T5's norm: no mean, no bias)"
    first_hidden = "h_0 = token embedding (the shared table, unscaled); positions enter each layer's scores as a learned bias"
    out_proj_name = "SelfAttention.o, and EncDecAttention.o in cross-attention"
    layer_name = {"encoder": "encoder.block.{layer}.", "decoder": "decoder.block.{layer}."}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        encoder_layers = int(config["num_layers"])
        decoder_layers = config.get("num_decoder_layers")
        self.layers = {"encoder": encoder_layers, "decoder": int(decoder_layers if decoder_layers is not None else encoder_layers)}
        self.heads = {"encoder": int(config["num_heads"]), "decoder": int(config["num_heads"])}
        self.d_kv = int(config["d_kv"])
        self.buckets = int(config.get("relative_attention_num_buckets", 32))
        self.max_distance = int(config.get("relative_attention_max_distance", 128))
        self.eps = float(config.get("layer_norm_epsilon", 1e-6))
        # T5Config: "relu" or "gated-gelu" ("gated-gelu" means gelu_new, the tanh approximation)
        proj = str(config.get("feed_forward_proj", "relu"))
        parts = proj.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise ModelUnavailable(f"config.json feed_forward_proj {proj!r}: T5 reads 'ACT' or 'gated-ACT'")
        self.gated = parts[0] == "gated"
        name = "gelu_new" if proj == "gated-gelu" else parts[-1]
        self.act = activation(name, "feed_forward_proj", self.family)
        self._bias: dict[tuple[str, int], torch.Tensor] = {}
        self.max_positions = None  # relative positions: any length

    def head_dim(self, stack: str) -> int:
        return self.d_kv

    def layer_suffixes(self, stack: str) -> dict[str, str]:
        roles = {}
        attentions = [("self", "layer.0.SelfAttention", "layer.0.layer_norm")]
        if stack == "decoder":
            attentions.append(("cross", "layer.1.EncDecAttention", "layer.1.layer_norm"))
        for kind, module, norm in attentions:
            for p in ("q", "k", "v", "o"):
                roles[f"{kind}.{p}.weight"] = f"{module}.{p}.weight"
            roles[f"{kind}.norm.weight"] = f"{norm}.weight"
        ff = "layer.2" if stack == "decoder" else "layer.1"
        for p in ("wi_0", "wi_1", "wo") if self.gated else ("wi", "wo"):
            roles[f"ff.{p}.weight"] = f"{ff}.DenseReluDense.{p}.weight"
        roles["ff.norm.weight"] = f"{ff}.layer_norm.weight"
        return roles

    def embed(self, weights: Weights, stack: str, ids: Sequence[int]) -> torch.Tensor:
        return self.token_rows(weights, "shared.weight", ids)  # (N, D) unscaled

    def projections(self, t: LayerTensors, kind: str) -> Projections:
        q, k, v, o = (FusedLinear(t[f"{kind}.{p}.weight"], None) for p in ("q", "k", "v", "o"))
        return Projections(q, k, v, o)

    def divisor(self, stack: str) -> tuple[float, str]:
        return 1.0, "1 (T5 does not scale its scores)"

    def position_bias(self, weights: Weights, stack: str, n_tokens: int) -> torch.Tensor:
        """(H, N, N) from the first block's table (buckets, H), bidirectional in the encoder."""
        key = (stack, n_tokens)
        if key not in self._bias:
            table = weights.read(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")  # (buckets, H)
            relative = torch.arange(n_tokens)[None, :] - torch.arange(n_tokens)[:, None]  # (N, N) j - i
            buckets = relative_buckets(relative, self.buckets, self.max_distance, bidirectional=stack == "encoder")
            self._bias[key] = table[buckets].permute(2, 0, 1).contiguous()  # (N, N, H) -> (H, N, N)
        return self._bias[key]

    def _norm(self, t: LayerTensors, role: str, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, t[role], None, self.eps)

    def attention_input(self, t: LayerTensors, kind: str, hidden: torch.Tensor) -> torch.Tensor:
        return self._norm(t, f"{kind}.norm.weight", hidden)  # pre-norm

    def after_attention(self, t: LayerTensors, kind: str, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return hidden + output

    def feed_forward(self, t: LayerTensors, stack: str, hidden: torch.Tensor) -> torch.Tensor:
        x = self._norm(t, "ff.norm.weight", hidden)  # (N, D)
        if self.gated:
            inner = self.act(FusedLinear(t["ff.wi_0.weight"], None)(x)) * FusedLinear(t["ff.wi_1.weight"], None)(x)  # (N, F)
        else:
            inner = self.act(FusedLinear(t["ff.wi.weight"], None)(x))  # (N, F)
        return hidden + FusedLinear(t["ff.wo.weight"], None)(inner)  # (N, D)

    def stack_output(self, weights: Weights, stack: str, hidden: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden, weights.read(f"{stack}.final_layer_norm.weight"), None, self.eps)

    def head(self, weights: Weights) -> Head:
        """``lm_head``: the file's own ``lm_head.weight`` (v1.1, Flan) or the shared table; the
        decoder's output times d_model ** -0.5 first where the config ties the embeddings (T5
        v1.0; transformers 5 writes the choice as ``scale_decoder_outputs``)."""
        own = f"{ROOT}lm_head.weight"
        scaled = self.config.get("scale_decoder_outputs", self.config.get("tie_word_embeddings", True) is not False)
        weight = own if weights.has(own) else "shared.weight"
        return Head(weight, tied=weight != own, input_scale=self.d_model**-0.5 if scaled else None)

