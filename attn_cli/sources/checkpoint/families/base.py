"""What every family shares: the ``Family`` a checkpoint's architecture declares, the tensors
of a layer by role, the head. The layer loop is loop.py.

Shapes: T tokens, D d_model, H (query) heads, Hkv key/value heads (H without
grouped-query attention), Dk = Dv per head (D / H unless the family says), F
the MLP's inner size.

A family adapter (gpt2.py, bert.py, decoder.py's rotary decoders) is a table of tensor names and the few steps
that differ between architectures: how tokens become the first hidden state,
what a layer's projections read, where the norms and the MLP go. The attention
itself is the same everywhere: ``attn_cli.sources.attend.attend``. Pure: tensors are
asked for by name from a ``Weights`` (the loader beside this package reads them),
nothing here opens files or prints.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

from attn_cli.analysis.contributions import BlockNorm
from attn_cli.records.band import Band
from attn_cli.records.layers import Projections
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Anatomy
from attn_cli.runtime.errors import ModelUnavailable

if TYPE_CHECKING:
    from attn_cli.sources.blocks import BiasRows


class Weights(Protocol):
    """Named float32 tensors of one checkpoint (names without the save's prefix)."""

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor: ...

    def read_rows(self, name: str, start: int, stop: int) -> torch.Tensor: ...

    def read_at(self, name: str, rows: torch.Tensor) -> torch.Tensor: ...

    def has(self, name: str) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Head:
    """How the last hidden state becomes next-token (or masked-token) logits, after the
    family's final norm: ``logits = x @ weight^T (+ bias)``, then ``softcap * tanh(logits /
    softcap)`` where the family caps them (Gemma 2)."""

    weight: str  # the (V, D) matrix's name: the head's own ("/lm_head.weight"), or the embedding table when tied
    bias: str | None = None  # (V,), or (1, V) (BART's and Marian's final_logits_bias)
    softcap: float | None = None
    tied: bool = False  # the weight is the token embedding table (tie_word_embeddings)
    input_scale: float | None = None  # the hidden state times this first (T5's d_model ** -0.5 with tied embeddings)
    bias_after: bool = False  # the bias added to the product (BART's final_logits_bias), not inside it as nn.Linear's


def _dims(shape: Sequence[int]) -> str:
    return " x ".join(str(n) for n in shape) or "a scalar"


class LayerTensors:
    """Layer ``index``'s tensors by role ("ln_1.weight"), each read on first use, so a
    step that is skipped (the last layer's MLP) reads nothing."""

    def __init__(self, weights: Weights, names: Mapping[str, str], index: int = 0) -> None:
        self.index = index  # the layer's index in its stack
        self._weights = weights
        self._names = names
        self._read: dict[str, torch.Tensor] = {}

    def __getitem__(self, role: str) -> torch.Tensor:
        if role not in self._read:
            self._read[role] = self._weights.read(self._names[role])
        return self._read[role]

    def wide(self, role: str, dtype: torch.dtype) -> torch.Tensor:
        """The tensor in ``dtype``, read from the file (a family that keeps one wider than the run: T5's ``wo``)."""
        return self._weights.read(self._names[role], dtype)

    def get(self, role: str) -> torch.Tensor | None:
        """The tensor, or None when the family has no such role (a bias it lacks)."""
        return self[role] if role in self._names else None


class Family(abc.ABC):
    """One architecture: its hyperparameters from config.json and its steps."""

    family: ClassVar[str]  # "gpt2", "bert", "llama", ...: the adapter (registry.MODEL_TYPES)
    encoder: bool = False  # every token sees every other, and a --pair is read as two segments
    cross: bool = False  # each layer attends a second time, to another stack's output (an encoder-decoder's decoder)
    anchor: ClassVar[str]  # a tensor every checkpoint of the family has: finds the save's prefix
    input_text: ClassVar[str]  # what a layer's projections read, in words
    layer_tensors: ClassVar[Mapping[str, str]]  # role -> name with {layer}
    embedding_tensors: ClassVar[Mapping[str, str]]  # role -> name
    # The walk-through's words for the steps (trace.Anatomy): h_0, x from h_L, W_o's name,
    # and how the file stores the projections when not as nn.Linear does.
    first_hidden: ClassVar[str]
    layer_input: ClassVar[str]
    out_proj_name: ClassVar[str]
    weights_note: ClassVar[str] = ""

    layers: int
    heads: int
    d_model: int
    d_ffn: int  # F, the MLP's inner size
    max_positions: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def kv_heads(self) -> int:
        """Hkv: key/value heads, each shared by H / Hkv query heads (grouped-query attention)."""
        return self.heads

    def inconsistency(self) -> str | None:
        """Why config.json's sizes cannot be computed, or None."""
        if self.layers < 1 or self.heads < 1 or self.d_model % self.heads:
            return (
                f"config.json has {self.layers} layers and {self.heads} heads for d_model {self.d_model}; "
                f"the heads must divide d_model"
            )
        return None

    @abc.abstractmethod
    def tensor_shapes(self) -> Mapping[str, tuple[tuple[int, ...], str]]:
        """Every role of ``embedding_tensors`` and ``layer_tensors`` -> (the shape config.json
        implies, the config keys that imply it): what ``check_shapes`` holds the file to."""

    def check_shapes(self, weights: Any) -> None:
        """Every tensor the family reads, for every layer, has the shape config.json
        implies: from the safetensors headers alone, before anything is computed (a
        mismatch would otherwise be a traceback deep in a layer). A tensor whose shard is absent is
        checked when read; a missing tensor or a non-float one is refused by ``entry``.
        ``weights``: a checkpoint.files.WeightReader."""
        shapes = self.tensor_shapes()
        named = [(role, name) for role, name in self.embedding_tensors.items()]
        named += [(role, name) for layer in range(self.layers) for role, name in self.layer_names(layer).items()]
        for role, name in named:
            if not weights.present(name):
                continue
            entry = weights.entry(name)
            want, keys = shapes[role]
            if tuple(entry.shape) != tuple(want):
                raise ModelUnavailable(
                    f"{entry.file.name}: {weights.prefix}{name} is {_dims(entry.shape)}, but config.json ({keys}) "
                    f"implies {_dims(want)}; the config and the weights are of different models: fetch them again together"
                )

    def layer_elements(self) -> int | None:
        """Elements in one layer's tensors, from config.json alone; None: the family
        reads them from the safetensors headers only."""
        return None

    def rotary_text(self) -> str | None:
        """What ``rotate`` does, in words (with its numbers); None: it does nothing."""
        return None

    def anatomy(self) -> Anatomy:
        return Anatomy(self.first_hidden, self.layer_input, self.out_proj_name, self.weights_note, self.rotary_text())

    def rotate(self, queries: torch.Tensor, keys: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(H, T, Dk) queries and (Hkv, T, Dk) keys with layer ``layer``'s positions
        applied (rotary families); as they are otherwise."""
        return queries, keys

    def length_class(self, n_tokens: int) -> int:
        """Texts of one class run padded to one length in a batch (``Checkpoint.trace_batch``) as each
        would alone: 0 at every length, but where positions read the text's length (LongRoPE)."""
        return 0

    # half-precision scores' softmax in float32, rounded back (softmax(dtype=float32)); False:
    # torch's softmax of the half-precision scores (GPT-2, BERT and BART call it so)
    softmax_upcast: ClassVar[bool] = True

    def score_scale(self, layer: int) -> float | None:
        """1 / divisor as the family's transformers code writes it where it multiplies the
        scores by it (``scaling = head_dim ** -0.5``) rather than dividing; None where it
        divides. Read in half precision only, where x * (1/d) and x / d can round apart."""
        return None

    def score_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | None, float | None]:
        """What layer ``layer``'s softmax reads besides the scaled scores: an additive
        bias (H or 1, T, T) (relative positions) and a soft-cap, each None when absent."""
        return None, None

    def blocked_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | BiasRows | None, float | None]:
        """``score_modifiers`` for a layer run in blocks: the bias may be made a block at a time
        (``BiasRows``) where the family's (H, T, T) would be as large as the tables it spares."""
        return self.score_modifiers(layer, n_tokens)

    def layer_mask(self, layer: int, shared: torch.Tensor | None, n_tokens: int) -> torch.Tensor | None:
        """(T, T) layer ``layer``'s mask over ``n_tokens`` given the shared one (a sliding window adds to it)."""
        return shared

    def band(self, layer: int) -> Band:
        """Layer ``layer``'s mask as a rule, at any length (``Band.table`` is ``layer_mask``'s
        table): causal where the family's mask is, else nothing hidden; a family with windows
        says which keys they let through."""
        return Band(after=0) if self.mask(2) is not None else Band()

    def layer_names(self, layer: int) -> dict[str, str]:
        return {role: name.format(layer=layer) for role, name in self.layer_tensors.items()}

    @abc.abstractmethod
    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        """(T, D) the first layer's input."""

    @abc.abstractmethod
    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        """(T, D) -> (T, D) what the layer's projections read."""

    @abc.abstractmethod
    def projections(self, t: LayerTensors) -> Projections:
        """W_q, W_k, W_v (H*Dk, D) and W_o (D, H*Dv), nn.Linear's (out, in) orientation."""

    @abc.abstractmethod
    def divisor(self, layer: int) -> tuple[float, str]:
        """(scores / divisor is the softmax input, the divisor as a formula)."""

    @abc.abstractmethod
    def mask(self, n_tokens: int) -> torch.Tensor | None:
        """(T, T) True = hidden, or None."""

    @abc.abstractmethod
    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        """(T, D) the layer's output from its input and the attention block's output:
        residuals, norms, the MLP."""

    def attention_block(self, t: LayerTensors) -> BlockNorm:
        """Where the layer's attention block has a norm, and that norm's tensors: what ALTI reads
        (``analysis.contributions``). The default: pre-norm, y = x + attention."""
        return BlockNorm("none")

    # -- a layer's second attention, where the family has one (``cross``) --

    def between(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        """(T, D) the state cross-attention starts from: the self-attention block's residual (and norm)."""
        raise NotImplementedError(f"{self.family} has no cross-attention")

    def cross_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        """(T, D) -> (T, D) what cross-attention's queries read."""
        raise NotImplementedError(f"{self.family} has no cross-attention")

    def cross_projections(self, t: LayerTensors) -> Projections:
        """Cross-attention's W_q (queries from this stack), W_k, W_v (from the other's output) and W_o."""
        raise NotImplementedError(f"{self.family} has no cross-attention")

    # -- after the last layer (the whole forward: predictions) --

    def head(self, weights: Weights) -> Head:
        """The language-model head, or ModelUnavailable naming what is missing (a bare
        encoder such as all-MiniLM-L6-v2 has none)."""
        raise ModelUnavailable(f"attn-cli does not compute {self.family}'s language-model head yet")

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        """(P, D) -> (P, D): what the head reads from the last layer's output."""
        return hidden

    def model_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        """(P, D) -> (P, D): the base model's own last step after its last layer, what a classification
        head reads: a decoder's final norm (``final_norm``); none for a post-norm encoder."""
        return hidden if self.encoder else self.final_norm(weights, hidden)

    def head_transform(self, weights: Weights, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., D): a head's own layers before its output (ModernBERT's dense, activation, norm)."""
        raise ModelUnavailable(f"{self.family} has no head transform")

    def logits(self, weights: Weights, head: Head, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """(P, D) last hidden states (after ``final_norm``) -> (P, V) logits (``head_logits``)."""
        return head_logits(weights, head, hidden, out)


def head_logits(weights: Weights, head: Head, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(P, D) hidden states -> (P, V) logits through ``head``; written into ``out`` (P, V) when
    given (a block buffer reused: a fresh (P, V) block is mapped and faulted in afresh each
    time, a large share of ``heads --ablate``'s time)."""
    bias = None if head.bias is None else weights.read(head.bias).reshape(-1)  # (V,)
    weight = weights.read(head.weight)  # (V, D)
    if head.input_scale is not None:
        hidden = hidden * head.input_scale  # (P, D)
    # a bias inside the product (nn.Linear's) is rounded with it once in half precision, one added
    # after it (BART's final_logits_bias) twice: each as the family's transformers code does
    fused = None if head.bias_after else bias
    if out is None:
        logits = torch.nn.functional.linear(hidden, weight, fused)  # (P, D) @ (D, V) -> (P, V)
    elif fused is not None:
        logits = torch.addmm(fused, hidden, weight.t(), out=out)  # (P, D) @ (D, V) + (V,) -> (P, V)
    else:
        logits = torch.mm(hidden, weight.t(), out=out)  # (P, D) @ (D, V) -> (P, V)
    if bias is not None and head.bias_after:
        logits.add_(bias)
    if head.softcap is not None and logits.requires_grad:  # attention x gradient's autograd run
        logits = torch.tanh(logits / head.softcap) * head.softcap
    elif head.softcap is not None:
        logits.div_(head.softcap).tanh_().mul_(head.softcap)  # (P, V) cap * tanh(logits / cap)
    return logits


def token_rows(weights: Weights, name: str, ids: Sequence[int], rows: int) -> torch.Tensor:
    """(T, D) rows ``ids`` of an embedding table with ``rows`` rows, reading only
    those rows (GPT-2's table is 150 MB; a text uses a few hundred of its rows)."""
    if ids and max(ids) >= rows:
        raise ModelUnavailable(
            f"the tokenizer gave id {max(ids)} but the model's {name} has {rows} rows: "
            f"the folder's tokenizer files do not belong to these weights"
        )
    distinct = sorted(set(ids))
    table = weights.read_at(name, torch.tensor(distinct, dtype=torch.long))  # (U, D), one row per distinct id
    where = {token: row for row, token in enumerate(distinct)}
    return table[torch.tensor([where[i] for i in ids], dtype=torch.long)]  # (U, D) -> (T, D)


def scaled_divisor(head_dim: int, scale: bool, layer_factor: int) -> tuple[float, str]:
    """sqrt(Dk) (when scaled) times ``layer_factor`` (GPT-2's scale_attn_by_inverse_layer_idx)."""
    value = (math.sqrt(head_dim) if scale else 1.0) * layer_factor
    parts = ([f"sqrt({head_dim})"] if scale else []) + ([str(layer_factor)] if layer_factor != 1 else [])
    text = parts[0] if len(parts) == 1 else "(" + " * ".join(parts) + ")" if parts else ""
    return value, text
