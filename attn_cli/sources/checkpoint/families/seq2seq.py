"""Encoder-decoder models (BART and Marian in bart.py, T5 and Flan-T5 in t5.py) as two stacks
of the one layer loop.

Three attentions, as transformers computes them: the encoder's self-attention over the source
(S x S), the decoder's causal self-attention over its inputs (T x T), and in every decoder
layer cross-attention from the decoder's states (queries) to the encoder's output (keys and
values): T x S. Each stack is a ``Family`` (``Seq2Seq``, built once per stack), so both run
through ``loop.forward`` with its keep levels, heap, dtype and device; cross-attention is the
decoder layer's second attention, whose keys and values are the encoder's output
(``loop.forward``'s ``memory``). What differs between the families is where the norms go, the
embeddings, the scale and T5's relative position bias: each family's methods, per ``kind`` of
attention ("self" or "cross").

The decoder reads its inputs teacher-forced: ``decoder_inputs`` builds them from the labels
(the tokenizer's encoding of the target) as transformers' ``shift_tokens_right`` does.

Shapes: S source tokens, T decoder tokens, D d_model, H heads.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch

from attn_cli.records.layers import LayerWeights, Projections
from attn_cli.records.selection import Keep
from attn_cli.records.summary import LayerSummary
from attn_cli.records.tokens import Tokens
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint.families.base import Family, LayerTensors, Weights, token_rows
from attn_cli.sources.checkpoint.families.config import FamilyConfig, first_of, key
from attn_cli.sources.blocks import BiasRows, BlockPlan
from attn_cli.sources.checkpoint.families.loop import forward

STACKS = ("encoder", "decoder")


@dataclasses.dataclass(frozen=True)
class Seq2SeqConfig(FamilyConfig):
    """What every encoder-decoder reads; BartConfig and T5Config add their own."""

    d_model: int = key("d_model")
    pad_token_id: int = first_of("pad_token_id", default=0)
    max_positions: int | None = key("max_position_embeddings")  # None: relative positions only (T5)
    decoder_start_token_id: int | None = key("decoder_start_token_id")  # None: the family's default


class Seq2Seq(Family):
    """One stack (``stack``: "encoder" or "decoder") of an encoder-decoder architecture: sizes
    from config.json and the steps that differ, by kind of attention ("self", "cross")."""

    layer_name: ClassVar[dict[str, str]]  # stack -> a layer's name prefix with {layer}
    qkv_bias: ClassVar[bool] = True  # W_q, W_k, W_v have biases
    start_default: ClassVar[int | None] = None  # decoder_start_token_id when config.json has none; None: the pad id
    embedding_tensors: ClassVar[dict[str, str]] = {}  # read by the family's own ``embed``, per stack

    config_class: ClassVar[type[Seq2SeqConfig]]  # what the family reads from config.json

    def __init__(self, config: dict[str, Any], stack: str) -> None:
        assert stack in STACKS, stack
        c = self.c = self.config_class.read(config)
        self.stack = stack
        self.encoder = stack == "encoder"  # every source token sees every other
        self.cross = stack == "decoder"  # each layer's second attention reads the encoder's output
        self.d_model, self.pad = int(c.d_model), int(c.pad_token_id)
        self.max_positions: int | None = int(c.max_positions) if c.max_positions is not None else None  # None: relative positions only
        self.layers, self.heads, self.d_ffn = self.sizes()[stack]
        self._weights: Weights | None = None  # read by ``score_modifiers`` (T5's bias table), set by ``embed``

    @abc.abstractmethod
    def sizes(self) -> dict[str, tuple[int, int, int]]:
        """stack -> (layers, heads, F) from config.json."""

    @property
    def layer_input(self) -> str:  # type: ignore[override]
        return self.input_text

    @property
    def decoder_start(self) -> int:
        """The decoder's first input id: config.json's ``decoder_start_token_id``, else the family's default."""
        start = self.c.decoder_start_token_id
        if start is None:
            start = self.pad if self.start_default is None else self.start_default
        return int(start)

    def decoder_inputs(self, labels: Sequence[int]) -> list[int]:
        """The decoder's inputs for ``labels`` (the target's ids with its special tokens):
        ``decoder_start``, then every label but the last, as transformers' shift_tokens_right."""
        return [self.decoder_start, *labels[:-1]]

    def token_rows(self, weights: Weights, name: str, ids: Sequence[int]) -> torch.Tensor:
        """(N, D) rows ``ids`` of the token table ``name`` (its row count from the file's header)."""
        return token_rows(weights, name, ids, int(weights.entry(name).shape[0]))

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Every layer role's shape (``layer_suffixes``) from the family's sizes: ``layer_shapes``
        gives each role's (out, in), the config keys that imply them named once."""
        shapes, keys = self.layer_shapes()
        return {role: (shapes[role], keys) for role in self.layer_suffixes()}

    @abc.abstractmethod
    def layer_shapes(self) -> tuple[dict[str, tuple[int, ...]], str]:
        """(role -> the shape config.json implies, the keys that imply them, in words)."""

    def layer_names(self, layer: int) -> dict[str, str]:
        prefix = self.layer_name[self.stack].format(layer=layer)
        return {role: prefix + suffix for role, suffix in self.layer_suffixes().items()}

    def mask(self, n_tokens: int) -> torch.Tensor | None:
        return causal_mask(n_tokens) if self.stack == "decoder" else None  # (N, N)

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        self._weights = weights  # a bias table is read with the embeddings, once per text
        return self.embed_ids(weights, tokens.ids)  # (N, D)

    def score_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | None, float | None]:
        assert self._weights is not None, "embed first"
        return self.position_bias(self._weights, n_tokens), None

    def position_bias(self, weights: Weights, n_tokens: int) -> torch.Tensor | None:
        """(H, N, N) added to every self-attention layer's scores of this stack, or None."""
        return None

    def blocked_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | BiasRows | None, float | None]:
        assert self._weights is not None, "embed first"
        return self.bias_rows(self._weights), None

    def bias_rows(self, weights: Weights) -> BiasRows | None:
        """``position_bias`` a block at a time (``attend_in_blocks``), or None where the stack has none."""
        return None

    # -- the loop's steps, from the family's steps per kind of attention --

    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return self.block_input(t, "self", hidden)  # (N, D)

    def projections(self, t: LayerTensors) -> Projections:
        return self.attention_projections(t, "self")

    def between(self, t: LayerTensors, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        return self.after_attention(t, "self", hidden, output)  # (T, D)

    def cross_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return self.block_input(t, "cross", hidden)  # (T, D)

    def cross_projections(self, t: LayerTensors) -> Projections:
        return self.attention_projections(t, "cross")

    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        hidden = self.after_attention(t, "cross" if self.cross else "self", hidden, attention_output)  # (N, D)
        return self.feed_forward(t, hidden)  # (N, D)

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        """The stack's output from its last layer's (a final norm, where the family has one)."""
        return hidden

    # -- what each family says --

    @abc.abstractmethod
    def layer_suffixes(self) -> dict[str, str]:
        """role -> the tensor's name after the layer's prefix, in this stack."""

    @abc.abstractmethod
    def embed_ids(self, weights: Weights, ids: Sequence[int]) -> torch.Tensor:
        """(N, D) the stack's first input."""

    @abc.abstractmethod
    def attention_projections(self, t: LayerTensors, kind: str) -> Projections:
        """W_q, W_k, W_v, W_o of the layer's ``kind`` of attention: "self" or "cross"."""

    @abc.abstractmethod
    def block_input(self, t: LayerTensors, kind: str, hidden: torch.Tensor) -> torch.Tensor:
        """What the ``kind`` attention's queries read (keys and values too, for "self")."""

    @abc.abstractmethod
    def after_attention(self, t: LayerTensors, kind: str, hidden: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """The hidden state after the ``kind`` attention block: residual (and norm)."""

    @abc.abstractmethod
    def feed_forward(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        """The layer's output after its feed-forward block: residual (and norm)."""


def clamp_float16(hidden: torch.Tensor, when: Callable[[torch.Tensor], bool]) -> torch.Tensor:
    """transformers' guard for float16 runs of BART, Marian and T5: where ``when(hidden)`` (an
    infinity, or any value that is not finite), every value clamped to +-(the largest float16
    - 1000); otherwise, and in every other dtype, ``hidden`` as it is."""
    if hidden.dtype != torch.float16 or not when(hidden):
        return hidden
    limit = torch.finfo(torch.float16).max - 1000
    return torch.clamp(hidden, min=-limit, max=limit)


@dataclasses.dataclass(frozen=True)
class EncoderDecoder:
    """An encoder-decoder: its two stacks, each a ``Seq2Seq`` of the same family."""

    encoder: Seq2Seq
    decoder: Seq2Seq

    @classmethod
    def of(cls, family: type[Seq2Seq], config: dict[str, Any]) -> EncoderDecoder:
        return cls(family(config, "encoder"), family(config, "decoder"))


@dataclasses.dataclass
class PairForward:
    """The three stacks' kept layers, in layer order: encoder (H, S, S), decoder (H, T, T), cross
    (H, T, S), each float32 on the CPU (``loop.forward``'s records)."""

    encoder: list[LayerWeights] | list[LayerSummary]  # summaries where the encoder ran in blocks
    decoder: list[LayerWeights]
    cross: list[LayerWeights]
    hidden: torch.Tensor | None  # (T, D) the decoder's output after its final norm (``whole``), else None


def pair_forward(
    model: EncoderDecoder, weights: Weights, source: Tokens, decoder: Tokens, device: torch.device | str = "cpu",
    keep: Keep = "all", *, norms: bool = False, whole: bool = False, blocks: BlockPlan | None = None,
) -> PairForward:  # fmt: skip
    """The source through every encoder layer, its output (after the encoder's final norm) as
    the memory every decoder layer's cross-attention reads, and the decoder's inputs through
    every decoder layer, both in ``loop.forward``. ``whole``: the decoder's last MLP and final
    norm too, for the head (``PairForward.hidden``). ``blocks``: the encoder's layers in blocks
    of query rows, each kept one a ``LayerSummary`` (the decoder's and cross-attention's tables
    are T x T and T x S: a long source's are its encoder's)."""
    memory = encode(model, weights, source, range(model.encoder.layers), device, keep, norms=norms, blocks=blocks)
    done = forward(
        model.decoder, weights, decoder, range(model.decoder.layers), device, keep, norms=norms, whole=whole,
        memory=memory.output,
    )  # fmt: skip
    hidden = model.decoder.final_norm(weights, done.hidden) if done.hidden is not None else None
    return PairForward(memory.layers, done.layers, done.cross, hidden)


@dataclasses.dataclass
class Encoded:
    layers: list[LayerWeights] | list[LayerSummary]  # the encoder's kept layers
    output: torch.Tensor  # (S, D) what the decoder's cross-attention reads


def encode(
    model: EncoderDecoder, weights: Weights, source: Tokens, layers: Sequence[int] = (), device: torch.device | str = "cpu",
    keep: Keep = "weights", *, norms: bool = False, blocks: BlockPlan | None = None,
) -> Encoded:  # fmt: skip
    """The encoder over ``source``, ``layers`` of it kept at ``keep`` (``blocks``: in blocks, summaries),
    and its output after its final norm."""
    done = forward(model.encoder, weights, source, layers, device, keep, norms=norms, whole=True, blocks=blocks)
    assert done.hidden is not None
    return Encoded(done.layers, model.encoder.final_norm(weights, done.hidden))
