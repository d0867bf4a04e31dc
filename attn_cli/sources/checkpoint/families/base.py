"""What every family shares: the layer loop and the multi-head attention step.

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
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

import torch

from attn_cli.runtime.allocator import LayerHeap
from attn_cli.analysis.norms import with_norms
from attn_cli.analysis.rollout import RolloutAccumulator
from attn_cli.records.layers import LayerAttention, LayerWeights, Linear, Projections
from attn_cli.sources.attend import attend, split_heads
from attn_cli.runtime.errors import ModelUnavailable
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Anatomy
from attn_cli.records.selection import Keep


class Weights(Protocol):
    """Named float32 tensors of one checkpoint (names without the save's prefix)."""

    def read(self, name: str) -> torch.Tensor: ...

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


def _dims(shape: Sequence[int]) -> str:
    return " x ".join(str(n) for n in shape) or "a scalar"


class LayerTensors:
    """One layer's tensors by role ("ln_1.weight"), each read on first use, so a
    step that is skipped (the last layer's MLP) reads nothing."""

    def __init__(self, weights: Weights, names: Mapping[str, str]) -> None:
        self._weights = weights
        self._names = names
        self._read: dict[str, torch.Tensor] = {}

    def __getitem__(self, role: str) -> torch.Tensor:
        if role not in self._read:
            self._read[role] = self._weights.read(self._names[role])
        return self._read[role]

    def get(self, role: str) -> torch.Tensor | None:
        """The tensor, or None when the family has no such role (a bias it lacks)."""
        return self[role] if role in self._names else None


class Family(abc.ABC):
    """One architecture: its hyperparameters from config.json and its steps."""

    family: ClassVar[str]  # "gpt2", "bert", "llama", ...: the adapter (registry.MODEL_TYPES)
    encoder: ClassVar[bool] = False  # every token sees every other, and a --pair is read as two segments
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
        mismatch was a traceback deep in a layer). A tensor whose shard is absent is
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

    def score_modifiers(self, layer: int, n_tokens: int) -> tuple[torch.Tensor | None, float | None]:
        """What layer ``layer``'s softmax reads besides the scaled scores: an additive
        bias (H or 1, T, T) (relative positions) and a soft-cap, each None when absent."""
        return None, None

    def layer_mask(self, layer: int, shared: torch.Tensor | None) -> torch.Tensor | None:
        """(T, T) layer ``layer``'s mask given the shared one (a sliding window adds to it)."""
        return shared

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

    # -- after the last layer (the whole forward: predictions) --

    def head(self, weights: Weights) -> Head:
        """The language-model head, or ModelUnavailable naming what is missing (a bare
        encoder such as all-MiniLM-L6-v2 has none)."""
        raise ModelUnavailable(f"attn-cli does not compute {self.family}'s language-model head yet")

    def final_norm(self, weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
        """(P, D) -> (P, D): what the head reads from the last layer's output."""
        return hidden

    def logits(self, weights: Weights, head: Head, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """(P, D) last hidden states (after ``final_norm``) -> (P, V) logits (``head_logits``)."""
        return head_logits(weights, head, hidden, out)


def head_logits(weights: Weights, head: Head, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(P, D) hidden states -> (P, V) logits through ``head``; written into ``out`` (P, V) when
    given (a block buffer reused: a fresh (P, V) block is mapped and faulted in afresh each
    time, which cost ``heads --ablate`` a third of its head)."""
    bias = None if head.bias is None else weights.read(head.bias).reshape(-1)  # (V,)
    weight = weights.read(head.weight)  # (V, D)
    if head.input_scale is not None:
        hidden = hidden * head.input_scale  # (P, D)
    if out is None:
        logits = torch.nn.functional.linear(hidden, weight, bias)  # (P, D) @ (D, V) -> (P, V)
    else:
        logits = torch.mm(hidden, weight.t(), out=out)  # (P, D) @ (D, V) -> (P, V)
        if bias is not None:
            logits.add_(bias)
    if head.softcap is not None:
        logits.div_(head.softcap).tanh_().mul_(head.softcap)  # (P, V) cap * tanh(logits / cap)
    return logits


@dataclasses.dataclass
class Forward:
    layers: list[LayerWeights]  # one record per requested layer, in the order asked
    hidden: torch.Tensor | None  # (T, D) the last layer's output (``whole``), before the final norm; else None


def forward(
    family: Family,
    weights: Weights,
    tokens: Tokens,
    layers: Sequence[int],
    device: torch.device | str = "cpu",
    keep: Keep = "all",
    *,
    norms: bool = False,
    rollout: RolloutAccumulator | None = None,
    whole: bool = False,
) -> Forward:
    """Layers 0 .. max(layers) over ``tokens``; one record per requested layer, in the
    order asked: a LayerAttention at ``keep="all"``, a LayerWeights (weights, mask,
    divisor) at "weights". Later layers are never read; a layer not kept, and a kept
    layer's vectors at "weights", are dropped once the next layer has its input.
    ``norms``: each kept layer with its value-weighted norms, worked out from its vectors
    before they are dropped. ``rollout``: every layer's weights are added to it, in order.
    ``whole``: every layer runs, the last one's MLP too, and ``Forward.hidden`` is its output.

    The layers run in the dtype the ``weights`` come in, on ``device``; what is
    kept is handed back as float32 on the CPU, the way every renderer reads it.
    """
    wanted = set(layers)
    heap = LayerHeap(family.heads * len(tokens) ** 2 * 4, len(wanted))  # (H, T, T) float32 tables kept
    last = family.layers - 1 if whole else max(wanted)  # ``layers`` may be empty with ``whole`` (generation)
    kept: dict[int, LayerWeights] = {}
    try:
        with torch.inference_mode():
            hidden = family.embed(weights, tokens)  # (T, D)
            shared = family.mask(len(tokens))  # (T, T) or None, shared by every layer
            shared = shared.to(device) if shared is not None else None
            for index in range(last + 1):
                heap.before_layer(len(kept))  # the heap's free memory back where it would raise the peak
                t, layer = attention_step(family, weights, index, hidden, shared, heap)
                output = layer.output  # (T, D)
                if rollout is not None:
                    rollout.add(layer.weights, layer.mask)
                if index in wanted:
                    if norms:
                        layer = with_norms(layer)
                    kept[index] = as_float32(layer if keep == "all" else layer.weights_only())
                # What is not kept goes now, before the MLP and the next layer allocate theirs:
                # held until the next assignment, this layer's (H, T, T) weights would be a
                # second one in flight beside the next layer's.
                del layer
                if index < last or whole:
                    hidden = family.finish_layer(t, hidden, output)  # (T, D)
    finally:
        heap.done()  # glibc trims the heap's top again, whatever ended the forward
    return Forward([kept[index] for index in layers], hidden if whole else None)


def attention_step(
    family: Family, weights: Weights, index: int, hidden: torch.Tensor, shared: torch.Tensor | None,
    heap: LayerHeap | None = None,
) -> tuple[LayerTensors, LayerAttention]:
    """Layer ``index``'s attention over its input ``hidden`` (T, D): its tensors (for
    ``finish_layer``) and every tensor of its multi-head attention. ``shared``: the (T, T)
    mask every layer starts from. ``heap``: the forward's, which places the weights' table."""
    t = LayerTensors(weights, family.layer_names(index))
    x = family.attention_input(t, hidden)  # (T, D)
    divisor, divisor_text = family.divisor(index)
    mask = family.layer_mask(index, shared)  # (T, T) or None
    n_tokens = hidden.shape[-2]
    bias, softcap = family.score_modifiers(index, n_tokens)  # (H or 1, T, T) or None, float or None
    shape = (*hidden.shape[:-2], family.heads, n_tokens, n_tokens)  # the weights: (H, T, T), or (B, H, T, T)
    table = heap.table(shape, hidden.dtype, hidden.device) if heap else None
    layer = multi_head(
        x, family.projections(t), family.heads, divisor, mask, index, divisor_text, family.kv_heads,
        functools.partial(family.rotate, layer=index), bias=bias, softcap=softcap, weights_out=table,
    )  # fmt: skip
    return t, layer


def ablated_losses(
    family: Family, weights: Weights, tokens: Tokens, head: Head, losses: Callable[[torch.Tensor], list[float]], method: str,
    device: torch.device | str = "cpu",
) -> tuple[float, list[list[float]]]:
    """(the clean loss, per layer and head the loss with that head ablated): ``losses`` maps
    a batch of the last layer's normed outputs (B, T, D) to each one's loss. Ablating head h of layer l sets its slice
    of W_o's input (the concat) to zero (``method`` "zero") or to its mean over the text's
    positions ("mean"), every other head untouched. Each layer's input and concat are kept
    from the clean run, so an ablation recomputes layers l .. L-1 only, a layer's ablations
    as one batch (``multi_head`` and the families' steps take a leading batch dimension)."""
    d_v = None
    with torch.inference_mode():
        hidden = family.embed(weights, tokens)  # (T, D)
        shared = family.mask(len(tokens))  # (T, T) or None
        shared = shared.to(device) if shared is not None else None
        clean: list[tuple[torch.Tensor, LayerTensors, torch.Tensor, Linear]] = []  # per layer: input, tensors, concat, W_o
        for index in range(family.layers):
            t, layer = attention_step(family, weights, index, hidden, shared)
            clean.append((hidden, t, layer.concat, layer.projections.out))
            d_v = layer.values.shape[-1]
            hidden = family.finish_layer(t, hidden, layer.output)  # (T, D)
        (clean_loss,) = losses(family.final_norm(weights, hidden)[None])  # (1, T, D)

        def finish(start: int, hidden: torch.Tensor) -> list[float]:
            """(B, T, D) the batch's outputs of layer ``start - 1`` -> each one's loss."""
            for index in range(start, family.layers):
                t, layer = attention_step(family, weights, index, hidden, shared)
                hidden = family.finish_layer(t, hidden, layer.output)  # (B, T, D)
                del layer
            return losses(family.final_norm(weights, hidden))  # (B, T, D)

        assert d_v is not None
        batch, _ = ablation_batch(family, len(tokens))
        ablated = []
        for index, (layer_input, t, concat, out) in enumerate(clean):
            row: list[float] = []
            for first in range(0, family.heads, batch):
                chosen = range(first, min(first + batch, family.heads))
                changed = concat.expand(len(chosen), *concat.shape).clone()  # (B, T, H*Dv)
                for b, h in enumerate(chosen):
                    cut = slice(h * d_v, (h + 1) * d_v)
                    changed[b, :, cut] = 0.0 if method == "zero" else concat[:, cut].mean(dim=0, keepdim=True)  # (T, Dv)
                after = family.finish_layer(t, layer_input, out(changed))  # (B, T, D) this layer's outputs, each ablated
                row += finish(index + 1, after)
            ablated.append(row)
    return clean_loss, ablated


ABLATION_BATCH_BYTES = 256 * 2**20  # a batch of ablations' tensors in flight through one layer


def ablation_batch(family: Family, n_tokens: int) -> tuple[int, int]:
    """(how many of a layer's ablations run as one batch, the bytes in flight for each): a
    layer's ablations go through the later layers together, in bigger matmuls (on
    GPT-2-small's layers about 2.4x the speed of one text at a time; bench/ablation.py)."""
    n = n_tokens
    per_text = 4 * (3 * family.heads * n * n + n * (8 * family.d_model + 3 * family.d_ffn))
    return max(1, min(family.heads, ABLATION_BATCH_BYTES // per_text)), per_text


AnyLayer = TypeVar("AnyLayer", bound=LayerWeights)


def as_float32(layer: AnyLayer) -> AnyLayer:
    """The layer (either record) with every tensor float32 on the CPU (itself when it already is)."""
    if layer.weights.dtype == torch.float32 and layer.weights.device.type == "cpu":
        return layer

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to("cpu", torch.float32) if value.is_floating_point() else value.to("cpu")
        if isinstance(value, Linear):
            return type(value)(cast(value.weight), cast(value.bias))
        if isinstance(value, Projections):
            return Projections(*(cast(getattr(value, f.name)) for f in dataclasses.fields(value)))
        return value

    return dataclasses.replace(layer, **{f.name: cast(getattr(layer, f.name)) for f in dataclasses.fields(layer)})


def multi_head(
    x: torch.Tensor,
    projections: Projections,
    heads: int,
    divisor: float,
    mask: torch.Tensor | None,
    layer: int,
    divisor_text: str,
    kv_heads: int | None = None,
    rotate: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    *,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    source: torch.Tensor | None = None,
    weights_out: torch.Tensor | None = None,
) -> LayerAttention:
    """One layer's multi-head attention over X (T, D), every tensor kept; keys and
    values per query head (a shared key/value head repeated for its group). X may have
    leading batch dimensions (B, T, D): the same operations, each tensor (B, ...) too
    (``ablated_losses`` runs a layer's ablations as one batch). ``source`` (S, D):
    cross-attention, the keys and values projected from it (an encoder's output), so the
    weights are (H, T, S). ``weights_out``: the block the weights are written into."""
    assert projections.query and projections.key and projections.value and projections.out
    n_tokens, lead = x.shape[-2], x.shape[:-2]
    kv_heads = kv_heads or heads
    # 1. project (and norm, where the family norms queries and keys), split into heads
    queries, keys = projections.queries_keys(x, source)  # (T, D) -> (T, H*Dk), (S, Hkv*Dk)
    queries = split_heads(queries, heads)  # (T, H*Dk) -> (H, T, Dk)
    keys = split_heads(keys, kv_heads)  # (S, Hkv*Dk) -> (Hkv, S, Dk)
    values = split_heads(projections.value(x if source is None else source), kv_heads)  # (S, D) -> (S, Hkv*Dv) -> (Hkv, S, Dv)
    # 2. positions, where the family rotates queries and keys (RoPE)
    if rotate is not None:
        queries, keys = rotate(queries, keys)  # (H, T, Dk), (Hkv, T, Dk)
    # 3. each query head's key/value head: h // (H / Hkv)
    keys = repeat_kv(keys, heads // kv_heads)  # (Hkv, T, Dk) -> (H, T, Dk)
    values = repeat_kv(values, heads // kv_heads)  # (Hkv, T, Dv) -> (H, T, Dv)
    # 4. the masked softmax every source shares, and each head's context
    context, weights = attend(
        queries, keys, values, divisor=divisor, mask=mask, bias=bias, softcap=softcap, out=weights_out
    )  # (H, T, Dv), (H, T, T)
    # 5. heads side by side, through W_o; a kept layer holds one copy of the context,
    # the heads being views into the concat's columns
    concat = context.transpose(-3, -2).reshape(*lead, n_tokens, -1)  # (H, T, Dv) -> (T, H, Dv) -> (T, H*Dv)
    context = concat.view(*lead, n_tokens, heads, -1).transpose(-3, -2)  # (T, H*Dv) -> (T, H, Dv) -> (H, T, Dv), a view
    output = projections.out(concat)  # (T, H*Dv) -> (T, D)
    return LayerAttention(
        queries=queries,
        keys=keys,
        values=values,
        weights=weights,
        dropped_weights=None,
        context=context,
        concat=concat,
        output=output,
        divisor=divisor,
        mask=mask,
        projections=projections,
        layer=layer,
        x=x,
        divisor_text=divisor_text,
        bias=bias,
        softcap=softcap,
        cross=source is not None,
        source=source,
    )


def repeat_kv(m: torch.Tensor, groups: int) -> torch.Tensor:
    """(Hkv, T, d) -> (H, T, d), each key/value head repeated for the ``groups``
    query heads beside each other that share it (0, 0, 1, 1, not 0, 1, 0, 1)."""
    return m if groups == 1 else m.repeat_interleave(groups, dim=-3)  # (Hkv, T, d) -> (Hkv*groups, T, d)


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


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's own formula ("gelu_new"), as OpenAI and transformers write it,
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), in one (T, F) buffer
    instead of six: the same operations on the same operands (the halving is exact
    wherever it comes), so the same bits in every dtype."""
    out = torch.pow(x, 3.0)  # (T, F)
    out.mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi)).tanh_().add_(1.0).mul_(x).mul_(0.5)
    return out  # (T, F)


def _gelu_fast(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))  # (T, F)


# The activation names config.json uses (transformers' ACT2FN) that these families meet.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": torch.nn.functional.gelu,  # exact, with erf
    "gelu_python": torch.nn.functional.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "gelu_python_tanh": _gelu_tanh,
    "gelu_fast": _gelu_fast,
    "relu": torch.relu,
    "silu": torch.nn.functional.silu,
    "swish": torch.nn.functional.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}


# The same kernels writing into their input, for the activations torch has them for: a
# gated MLP's (T, F) blocks are a layer's largest, and each fresh one is mapped and faulted in.
IN_PLACE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": torch.ops.aten.gelu_,
    "gelu_python": torch.ops.aten.gelu_,
    "gelu_pytorch_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "relu": torch.relu_,
    "silu": lambda x: torch.nn.functional.silu(x, inplace=True),
    "swish": lambda x: torch.nn.functional.silu(x, inplace=True),
}


def activation(name: Any, key: str, family: str, in_place: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """config.json's activation ``name``. ``in_place``: one that may overwrite its input and
    returns its result (the input itself where torch has the kernel in place): for an input
    nothing else reads."""
    if name not in ACTIVATIONS:
        raise ModelUnavailable(
            f"config.json {key} {name!r} is not one attn-cli computes for {family}; "
            f"supported: {', '.join(ACTIVATIONS)}"
        )
    return IN_PLACE.get(name, ACTIVATIONS[name]) if in_place else ACTIVATIONS[name]
