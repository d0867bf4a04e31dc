"""The one layer loop: ``forward`` runs a family's layers over a text (embed, then for each
layer: its attention step, what the run keeps of it, the rest of the layer), keeping what
was asked for and handing each layer to the analyses that read it as it passes (norms,
rollout); ``multi_head`` is every family's attention step, through ``attn_cli.sources.attend``.

Shapes: T tokens, D d_model, H (query) heads, Hkv key/value heads, Dk = Dv per head.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from attn_cli.analysis.norms import with_norms
from attn_cli.analysis.rollout import RolloutAccumulator
from attn_cli.records.layers import LayerAttention, LayerWeights, Linear, Projections
from attn_cli.records.selection import Keep
from attn_cli.records.tokens import Tokens
from attn_cli.runtime.allocator import LayerHeap
from attn_cli.records.summary import LayerSummary
from attn_cli.sources.attend import attend, split_heads
from attn_cli.sources.blocks import BlockPlan, attend_in_blocks
from attn_cli.sources.checkpoint.families.base import Family, LayerTensors, Weights


@dataclasses.dataclass
class Forward:
    layers: list[LayerWeights] | list[LayerSummary]  # one record per requested layer, in the order asked (summaries: in blocks)
    hidden: torch.Tensor | None  # (T, D) the last layer's output (``whole``), before the final norm; else None
    cross: list[LayerWeights] = dataclasses.field(default_factory=list)  # with ``memory``: the requested layers' cross-attention


Visit = Callable[[int, torch.Tensor, LayerTensors, LayerAttention], None]  # (layer, its input, its tensors, its attention)
Rotate = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (queries, keys) -> rotated


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
    memory: torch.Tensor | None = None,
    start: tuple[int, torch.Tensor] | None = None,
    visit: Visit | None = None,
    blocks: BlockPlan | None = None,
    padding: torch.Tensor | None = None,
    grad: bool = False,
) -> Forward:
    """Layers 0 .. max(layers) over ``tokens``; one record per requested layer, in the
    order asked: a LayerAttention at ``keep="all"``, a LayerWeights (weights, mask,
    divisor) at "weights". Later layers are never read; a layer not kept, and a kept
    layer's vectors at "weights", are dropped once the next layer has its input.
    ``norms``: each kept layer with its value-weighted norms, worked out from its vectors
    before they are dropped. ``rollout``: every layer's weights are added to it, in order.
    ``whole``: every layer runs, the last one's MLP too, and ``Forward.hidden`` is its output.
    ``memory`` (S, D): an encoder's output, the keys and values of each layer's second
    attention (``family.cross``), kept as the self-attention is (``Forward.cross``).
    ``start`` (layer, its input (..., T, D)): from that layer on, not from the embeddings
    (ablations: a batch of a later layer's inputs). ``visit``: called with every attention's
    input, the layer's tensors and the attention as it passes (cross-attention's too).
    ``blocks``: no layer's tables are made; every layer's attention runs in blocks of query rows,
    and each kept layer is a ``LayerSummary`` (its statistics and chosen rows; ``BlockPlan``).
    ``padding`` (B, T): True at the positions that pad a batch of texts (``padded_inputs``, given as
    ``start``), hidden as keys in every layer: each text's rows and keys are its own run's.
    ``grad``: the run records autograd's graph from the embeddings on (attention x gradient: a
    ``visit`` keeps each layer's weights, whose gradients a backward from the output gives); every
    step's own numbers, no table in the forward's heap.
    The layers run in the ``weights``' dtype on ``device``; what is kept is float32 on the CPU.
    """
    assert (memory is not None) == family.cross, "cross-attention reads the encoder's output: give memory for a decoder stack"
    assert blocks is None or not (norms or rollout or visit or memory is not None or padding is not None), "a blocked run keeps statistics and rows only"
    wanted = set(layers)
    last = family.layers - 1 if whole else max(wanted)  # ``layers`` may be empty with ``whole`` (generation)
    heap = LayerHeap(0 if blocks else family.heads * len(tokens) ** 2 * 4, len(wanted))  # (H, T, T) float32 tables kept
    run = LayerPass(family, weights, wanted, keep, norms, rollout, memory, visit, heap, blocks, grad=grad)
    if padding is not None:  # a text's rows never see the padding; a padding row keeps the layer's own mask (>= 1 key)
        run.padding = ((~padding)[:, None, :, None] & padding[:, None, None, :]).to(device)  # (B, 1, T, T)
    try:
        with torch.enable_grad() if grad else torch.inference_mode():
            first, hidden = start if start is not None else (0, family.embed(weights, tokens))  # (..., T, D)
            if grad:
                hidden = hidden.detach().requires_grad_()  # the graph starts here: every layer's weights in it
            shared = None if blocks else family.mask(len(tokens))  # (T, T) or None, shared by every layer; blocks: a Band each
            run.shared = shared.to(device) if shared is not None else None
            for index in range(first, last + 1):
                hidden = run.layer(index, hidden, finish=index < last or whole)  # (..., T, D)
    finally:
        heap.done()  # glibc trims the heap's top again, whatever ended the forward
    return Forward([run.kept[i] for i in layers], hidden if whole else None, [run.crossed[i] for i in layers if i in run.crossed])


@dataclasses.dataclass
class LayerPass:
    """What one forward carries from layer to layer, and ``layer``: one layer's steps."""

    family: Family
    weights: Weights
    wanted: set[int]
    keep: Keep
    norms: bool
    rollout: RolloutAccumulator | None
    memory: torch.Tensor | None
    visit: Visit | None
    heap: LayerHeap
    blocks: BlockPlan | None = None
    grad: bool = False  # an autograd run (``forward``'s ``grad``): no weights' table from the heap
    shared: torch.Tensor | None = None  # (T, T) the mask every layer starts from
    padding: torch.Tensor | None = None  # (B, 1, T, T) a batch's padding keys, hidden from its texts' rows
    kept: dict[int, LayerWeights | LayerSummary] = dataclasses.field(default_factory=dict)
    crossed: dict[int, LayerWeights] = dataclasses.field(default_factory=dict)

    def layer(self, index: int, hidden: torch.Tensor, finish: bool) -> torch.Tensor:
        """Layer ``index`` over its input ``hidden`` (..., T, D): its attention (kept where
        wanted), its cross-attention (with ``memory``), then, where ``finish``, the rest of
        the layer, whose output it returns (``hidden`` itself otherwise)."""
        family = self.family
        if self.blocks is not None:
            t, output, summary = blocked_step(family, self.weights, index, hidden, self.blocks, keep=index in self.wanted)
            if summary is not None:
                self.kept[index] = summary
            return family.finish_layer(t, hidden, output) if finish else hidden  # (T, D)
        self.heap.before_layer(len(self.kept))  # the heap's free memory back where it would raise the peak
        t, layer = attention_step(family, self.weights, index, hidden, self.shared, None if self.grad else self.heap, self.padding)
        output = layer.output  # (..., T, D)
        if self.rollout is not None:
            self.rollout.add(layer.weights, layer.mask)
        if self.visit is not None:
            self.visit(index, hidden, t, layer)
        if index in self.wanted:
            self.kept[index] = kept_layer(layer, self.keep, self.norms)
        # What is not kept goes now, before the MLP and the next layer allocate theirs:
        # held until the next assignment, this layer's (H, T, T) weights would be a
        # second one in flight beside the next layer's.
        del layer
        if self.memory is not None:  # the layer's cross-attention, on its self-attention's residual
            hidden = family.between(t, hidden, output)  # (T, D)
            layer = cross_step(family, t, index, hidden, self.memory)
            output = layer.output  # (T, D)
            if self.visit is not None:  # the cross-attention's input is the state after the self-attention block
                self.visit(index, hidden, t, layer)
            if index in self.wanted:
                self.crossed[index] = kept_layer(layer, self.keep, self.norms)
            del layer
        return family.finish_layer(t, hidden, output) if finish else hidden  # (..., T, D)


def kept_layer(layer: LayerAttention, keep: Keep, norms: bool) -> LayerWeights:
    """What a run keeps of a requested layer: with its norms where asked, every tensor
    (``keep="all"``) or its weights, float32 on the CPU."""
    if norms:
        layer = with_norms(layer)
    return as_float32(layer if keep == "all" else layer.weights_only())


def attention_step(
    family: Family, weights: Weights, index: int, hidden: torch.Tensor, shared: torch.Tensor | None,
    heap: LayerHeap | None = None, padding: torch.Tensor | None = None,
) -> tuple[LayerTensors, LayerAttention]:
    """Layer ``index``'s attention over its input ``hidden`` (T, D): its tensors (for
    ``finish_layer``) and every tensor of its multi-head attention. ``shared``: the (T, T)
    mask every layer starts from. ``heap``: the forward's, which places the weights' table.
    ``padding`` (B, 1, T, T): a batch's padding keys, hidden from its texts' rows besides the layer's mask."""
    t, x, divisor, divisor_text = layer_inputs(family, weights, index, hidden)
    mask = family.layer_mask(index, shared, hidden.shape[-2])  # (T, T) or None
    mask = mask.to(hidden.device) if mask is not None else None  # a window a family made itself (ModernBERT's): on the CPU
    if padding is not None:
        mask = padding if mask is None else mask | padding  # (B, 1, T, T)
    n_tokens = hidden.shape[-2]
    bias, softcap = family.score_modifiers(index, n_tokens)  # (H or 1, T, T) or None, float or None
    shape = (*hidden.shape[:-2], family.heads, n_tokens, n_tokens)  # the weights: (H, T, T), or (B, H, T, T)
    table = heap.table(shape, hidden.dtype, hidden.device) if heap else None
    layer = multi_head(
        x, family.projections(t), family.heads, divisor, mask, index, divisor_text, family.kv_heads,
        functools.partial(family.rotate, layer=index), bias=bias, softcap=softcap, weights_out=table,
        **half_precision(family, index, x),
    )  # fmt: skip
    return t, layer


def blocked_step(
    family: Family, weights: Weights, index: int, hidden: torch.Tensor, plan: BlockPlan, *, keep: bool
) -> tuple[LayerTensors, torch.Tensor, LayerSummary | None]:
    """Layer ``index``'s attention over ``hidden`` (T, D) in blocks of query rows (``plan``), within
    the band its mask lets through: its tensors, its output (T, D) and, where ``keep``, its
    ``LayerSummary``. The same steps as ``attention_step``, without an (H, T, T) tensor."""
    t, x, divisor, divisor_text = layer_inputs(family, weights, index, hidden)
    n_tokens = hidden.shape[-2]
    bias, softcap = family.blocked_modifiers(index, n_tokens)  # (H or 1, T, T), BiasRows or None; float or None
    band = family.band(index)
    gathering = plan.gathering(index, family.heads, n_tokens, n_tokens, band) if keep else None
    projections = family.projections(t)
    rotate = functools.partial(family.rotate, layer=index)
    queries, keys, values = head_vectors(x, projections, family.heads, family.kv_heads, rotate, None)  # steps 1-3
    if gathering is not None and plan.scores:
        gathering.rows.raw_scores(queries, keys)
    context = attend_in_blocks(
        queries, keys, values, divisor=divisor, mask=band, block_rows=plan.rows, heads_at_once=plan.heads_at_once,
        consumers=gathering.consumers if gathering else (), bias=bias, softcap=softcap, **half_precision(family, index, x),
    )  # 4. (H, T, Dv), no (H, T, T) tensor: with a band, only the keys each block's rows see
    output = merged_heads(context, projections)[2]  # 5. (T, D)
    return t, output, gathering.summary(index, divisor, divisor_text) if gathering else None


def padded_inputs(family: Family, weights: Weights, texts: Sequence[Tokens]) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of texts' first-layer inputs (B, T, D), each text's (T_b, D) embedding padded on the
    right with zero rows to the longest's T (positions 0 .. T_b - 1 stay each text's own), and the
    (B, T) padding, True past each text's end: ``forward``'s ``start`` and ``padding``."""
    rows = [family.embed(weights, tokens) for tokens in texts]  # (T_b, D) each
    n = max(len(tokens) for tokens in texts)
    hidden = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)  # (B, T, D), zeros past each text's end
    padding = torch.arange(n) >= torch.tensor([len(tokens) for tokens in texts])[:, None]  # (B, T)
    return hidden, padding


def layer_inputs(family: Family, weights: Weights, index: int, hidden: torch.Tensor) -> tuple[LayerTensors, torch.Tensor, float, str]:
    """Layer ``index``'s tensors, what its projections read (T, D), and its divisor (the number, the formula)."""
    t = LayerTensors(weights, family.layer_names(index), index)
    x = family.attention_input(t, hidden)  # (T, D)
    return (t, x, *family.divisor(index))


def cross_step(family: Family, t: LayerTensors, index: int, hidden: torch.Tensor, memory: torch.Tensor) -> LayerAttention:
    """Layer ``index``'s cross-attention: queries from ``hidden`` (T, D) through the family's
    cross input, keys and values from ``memory`` (S, D), no mask and no position bias (as
    BART's and T5's encoder-decoder attention): weights (H, T, S)."""
    divisor, divisor_text = family.divisor(index)
    x = family.cross_input(t, hidden)  # (T, D)
    return multi_head(
        x, family.cross_projections(t), family.heads, divisor, None, index, divisor_text, source=memory,
        **half_precision(family, index, x),
    )  # fmt: skip


def half_precision(family: Family, index: int, x: torch.Tensor) -> dict[str, Any]:
    """How a bfloat16 or float16 run rounds layer ``index``'s softmax as the family's
    transformers code does: ``scale``, the factor its scores are multiplied by where that
    code multiplies (``Family.score_scale``; None: divide), and ``softmax_in_dtype``
    (``Family.softmax_upcast``). Float32 runs divide and take the softmax in float32, the
    toy's and every source's formula, equal to 1e-5."""
    if x.dtype not in (torch.bfloat16, torch.float16):
        return {"scale": None, "softmax_in_dtype": False}
    return {"scale": family.score_scale(index), "softmax_in_dtype": not family.softmax_upcast}


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
    rotate: Rotate | None = None,
    *,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    source: torch.Tensor | None = None,
    weights_out: torch.Tensor | None = None,
    scale: float | None = None,
    softmax_in_dtype: bool = False,
) -> LayerAttention:
    """One layer's multi-head attention over X (T, D), every tensor kept; keys and
    values per query head (a shared key/value head repeated for its group). X may have
    leading batch dimensions (B, T, D): the same operations, each tensor (B, ...) too
    (``ablated_losses`` runs a layer's ablations as one batch). ``source`` (S, D):
    cross-attention, the keys and values projected from it (an encoder's output), so the
    weights are (H, T, S). ``weights_out``: the block the weights are written into.
    ``scale``, ``softmax_in_dtype``: how half precision rounds the softmax (``attend``)."""
    queries, keys, values = head_vectors(x, projections, heads, kv_heads, rotate, source)  # steps 1-3
    # 4. the masked softmax every source shares, and each head's context
    context, weights = attend(
        queries, keys, values, divisor=divisor, mask=mask, bias=bias, softcap=softcap, out=weights_out, scale=scale,
        softmax_in_dtype=softmax_in_dtype,
    )  # (H, T, Dv), (H, T, T)
    context, concat, output = merged_heads(context, projections)  # step 5
    return LayerAttention(
        queries=queries, keys=keys, values=values, weights=weights, dropped_weights=None, context=context, concat=concat,
        output=output, divisor=divisor, mask=mask, projections=projections, layer=layer, x=x, divisor_text=divisor_text,
        bias=bias, softcap=softcap, cross=source is not None, source=source,
    )  # fmt: skip


def head_vectors(
    x: torch.Tensor, projections: Projections, heads: int, kv_heads: int | None, rotate: Rotate | None, source: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 1-3 of a layer's attention: (H, T, Dk) queries, (H, S, Dk) keys, (H, S, Dv) values."""
    assert projections.query and projections.key and projections.value and projections.out
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
    return queries, keys, values


def merged_heads(context: torch.Tensor, projections: Projections) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 5: the heads' (..., H, T, Dv) context side by side, through W_o: (the context as a view
    into the concat's columns, the (..., T, H*Dv) concat, the (..., T, D) output). A kept layer
    holds one copy of the context, the heads being views into the concat."""
    assert projections.out is not None
    heads, n_tokens = context.shape[-3], context.shape[-2]
    lead = context.shape[:-3]
    concat = context.transpose(-3, -2).reshape(*lead, n_tokens, -1)  # (H, T, Dv) -> (T, H, Dv) -> (T, H*Dv)
    context = concat.view(*lead, n_tokens, heads, -1).transpose(-3, -2)  # (T, H*Dv) -> (T, H, Dv) -> (H, T, Dv), a view
    return context, concat, projections.out(concat)  # (T, H*Dv) -> (T, D)


def repeat_kv(m: torch.Tensor, groups: int) -> torch.Tensor:
    """(Hkv, T, d) -> (H, T, d), each key/value head repeated for the ``groups``
    query heads beside each other that share it (0, 0, 1, 1, not 0, 1, 0, 1)."""
    return m if groups == 1 else m.repeat_interleave(groups, dim=-3)  # (Hkv, T, d) -> (Hkv*groups, T, d)
