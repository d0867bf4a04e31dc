"""A run's matrices and vectors as fitted tables: weights, scores and their softmax input,
the rollout, the value-weighted norms, Q, K, V, the context, the embeddings and the output.
Shapes: T tokens, D d_model, H heads, Dk/Dv per-head query-key/value sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.text import Text

from attn_cli.records.hiding import hidden_text
from attn_cli.render.terminal.cells import ROW_HINT, FittedTable, WeightCell, note_text, title_text, fmt
from attn_cli.render.terminal.header import scaling

if TYPE_CHECKING:  # importing this module must not import torch (run's option parsing uses it)
    import torch

    from attn_cli.records.trace import Trace


def head_suffix(run: Trace, head: int) -> str:
    layer = f", layer {run.layers[0].layer}" if run.model.layers > 1 else ""
    return f"{layer}, head {head}" if run.layers[0].n_heads > 1 else layer


def vector_table(
    run: Trace, title: Text, matrix: torch.Tensor, precision: int, captions: Sequence[Text] = (), dims: Sequence[int] | None = None,
    *, keys: bool = False,
) -> FittedTable:
    """A (T, d) table: a row per token, a column per dimension (those in ``dims``, by default all);
    ``keys``: a row per key token (cross-attention's keys and values are the source's)."""
    dims = range(matrix.shape[-1]) if dims is None else dims  # matrix: (T, d)
    return FittedTable(
        title, "token \\ dim", (run.own_stack.key_tokens if keys else run.tokens).labels, [str(d) for d in dims],
        lambda i, j: Text(fmt(matrix[i, dims[j]].item(), precision)),
        what="dims", rows_what="tokens", captions=captions, numbers=dims,
    )


def scaled_score(run: Trace, head: int, query: int, key: int) -> float:
    """One cell of the softmax input (see ``AttentionResult.scaled_score``)."""
    return run.layers[0].scaled_score(head, query, key)


def square_table(
    run: Trace, title: Text, value: Callable[[int, int], float], precision: int, *, masked: str | None, captions: Sequence[Text] = ()
) -> FittedTable:
    """A (T, T) table of scores, ``value(query, key)`` each; ``masked`` is what a
    causally masked cell shows (None: its value)."""
    labels, columns = run.tokens.labels, run.own_stack.key_tokens.labels
    result = run.layers[0]
    hides = result.causal and masked is not None

    def cell(i: int, j: int) -> Text:
        if hides and result.masked(i, j):
            return Text(masked, style="dim")
        return Text(fmt(value(i, j), precision))

    return FittedTable(
        title, "query \\ key", labels, columns, cell,
        what="keys", rows_what="queries", captions=captions, hint=ROW_HINT, row_hint=ROW_HINT,
    )


def weights_table(run: Trace, head: int, precision: int = 4) -> FittedTable:
    result = run.layers[0]
    formula, _ = scaling(run)
    hidden = hidden_text(run)
    if hidden is not None:
        title = title_text("Attention weights", f"  softmax({formula}), {hidden}{head_suffix(run, head)}")
    else:
        title = title_text("Attention weights", f"  softmax({formula}) over each row{head_suffix(run, head)}")
    extra = "; before dropout (the JSON has dropped_weights)" if result.dropped_weights is not None else ""
    return rows_table(run, result.weights[head], result.mask, title, precision, extra=extra)


COMBINED_TITLES = {  # a map through the layers: its title, and how it is made
    "rollout": ("Attention rollout", "each layer's mean over all heads, half residual (I), multiplied"),
    "flow": ("Attention flow", "the max flow from each position to each input token through every layer's mixed weights (rollout's), rows normalized"),
    "alti": ("ALTI", "each layer's contributions (Ferrando et al. 2022), multiplied"),
    "value_zeroing_rollout": ("Value zeroing rollout", "each layer's value-zeroing map (Mohebbi et al. 2023), multiplied"),
    "attention_gradient": ("Attention x gradient", "R = I, then R += mean over heads of (gradient x weights)+ · R for each layer (Chefer et al. 2021)"),
}  # fmt: skip
LAYER_TITLES = {  # a layer's attribution map: its title, and how it is made
    "value_zeroing": ("Value zeroing", "the cosine distance of each position's layer output with each key's values zeroed, rows normalized"),
    "alti": ("ALTI", "||y_i||_1 - ||y_i - T_i(x_j)||_1 (at least 0): what each token gives each position's attention block output, rows normalized"),
    "attention_gradient": ("Attention x gradient", "the mean over heads of (the target logit's gradient x the weights), its positive part"),
}  # fmt: skip


def rollout_table(run: Trace, precision: int = 4, *, name: str = "rollout") -> FittedTable:
    """A map through the layers (``name``, one of ``COMBINED_TITLES``: the attention rollout, the attention flow,
    ALTI, value zeroing's rollout): how much of each key token reaches each query position through the
    layers, drawn as a weights table (its rows sum to 1)."""
    rollout = run.combined(name)
    assert rollout is not None, f"a {name} table needs a trace computed with it"
    hidden = hidden_text(run)
    through = f"layers 0 to {rollout.through_layer}" if rollout.through_layer else "layer 0"
    heading, how = COMBINED_TITLES[name]
    title = title_text(heading, f"  of {through}: {how}" + (f"; {hidden}" if hidden is not None else ""))
    if name == "attention_gradient":
        explained = f"the relevance of each key token to {explained_line(run)}"
        return rows_table(run, rollout.weights, rollout.mask, title, precision, what=explained, shares=False)
    return rows_table(run, rollout.weights, rollout.mask, title, precision, what="how much of each key token reaches each query position")


def layer_map_table(run: Trace, name: str, precision: int = 4) -> FittedTable:
    """The one kept layer's attribution map ``name`` (``LAYER_TITLES``), drawn as a weights table (its rows sum to 1)."""
    layer = run.layers[0]
    heading, how = LAYER_TITLES[name]
    hidden = hidden_text(run)
    title = title_text(heading, f"  of layer {layer.layer}: {how}" + (f"; {hidden}" if hidden is not None else ""))
    what = "how much of each key token the query position's output owes"
    return rows_table(run, layer.maps[name], layer.mask, title, precision, what=what, shares=name != "attention_gradient")


def explained_line(run: Trace) -> str:
    """The output attention x gradient explains, in the table's words."""
    t = run.explained
    if t is None:
        return "the target"
    return f"{t.what}'s logit {t.logit:.4g} at {t.where}" + ("" if t.predicted else " (as asked)")


def rows_table(
    run: Trace, weights: torch.Tensor, mask: torch.Tensor | None, title: Text, precision: int, *, extra: str = "",
    what: str = "", shares: bool = True,
) -> FittedTable:
    """A (T, T) table whose rows sum to 1 (weights, rollout), each cell coloured by its
    value, the row's largest bold, masked cells a dot; NaN: a renormalized row with no weight left."""
    labels, columns = run.tokens.labels, run.own_stack.key_tokens.labels
    causal = mask is not None and bool(mask.any())
    best: dict[int, int] = {}  # query -> its largest weight's key, for the rows drawn only

    def cell(i: int, j: int) -> Text:
        if causal and bool(mask[i, j]):
            return Text("·", style="dim")
        w = weights[i, j].item()
        if math.isnan(w):
            return Text("—", style="dim")
        if i not in best:
            best[i] = int(weights[i].nan_to_num(-1.0).argmax())  # (T,) -> () the first of equal maxima
        return WeightCell(fmt(w, precision), w, best=j == best[i])

    lead = f"{what}; " if what else ""
    if not shares:  # relevance (attention x gradient): not a share of a row
        caption = f"{lead}rows are queries, columns keys; not shares of a row: the row's largest is bold"
    elif hidden_text(run) is not None:
        caption = f"{lead}rows are queries, columns keys; each row divided by its weight on the keys shown, so it sums to 1; the row's largest weight is bold"
        if weights.isnan().any():
            caption += "; —: the row put all its weight on hidden tokens, nothing is left to renormalize"
    else:
        caption = f"{lead}rows are queries, columns keys; each row sums to 1; the row's largest weight is bold"
    if causal:
        caption += "; · masked (weight exactly 0)"
    caption += extra
    return FittedTable(
        title, "query \\ key", labels, columns, cell,
        what="keys", rows_what="queries", captions=[note_text(caption)], hint=ROW_HINT, row_hint=ROW_HINT,
    )


def norms_table(run: Trace, head: int | None, precision: int) -> FittedTable:
    """Value-weighted norms of one head (||a_ij f_h(x_j)||), or of the layer (``head``
    None: ||sum_h a_ij^h f_h(x_j)||): what moves from each key to each query."""
    result = run.layers[0]
    assert result.norms is not None and result.layer_norms is not None, "a norms table needs a trace computed with --norms"
    if head is None:
        values = result.layer_norms  # (T, T)
        layer = f", layer {result.layer}" if run.model.layers > 1 else ""
        title = title_text("Value-weighted norms", f"  ||sum over heads of a_ij f_h(x_j)||, every head together{layer}")
    else:
        values = result.norms[head]  # (T, T)
        title = title_text("Value-weighted norms", f"  ||a_ij f(x_j)||, weight x the norm of what the key sends{head_suffix(run, head)}")
    captions = [note_text("rows are queries, columns keys; how much the attention output of the query moves from each key, in the "
                      "model's units: a large weight on a key that sends little is a small norm (Kobayashi et al. 2020)")]
    return square_table(run, title, lambda i, j: values[i, j].item(), precision, masked="·", captions=captions)


def scores_table(run: Trace, head: int, precision: int) -> FittedTable:
    title = title_text("Raw scores", f"  Q K^T, before scaling and masking{head_suffix(run, head)}")
    captions = [note_text("computed for every pair; the causal mask applies to the scaled scores")] if run.layers[0].causal else []
    scores = run.layers[0].scores[head]  # (T, T)
    return square_table(run, title, lambda i, j: scores[i, j].item(), precision, masked=None, captions=captions)


def scaled_table(run: Trace, head: int, precision: int) -> FittedTable:
    formula, factor = scaling(run)
    title = title_text("Scaled scores", f"  {formula}, the softmax input{head_suffix(run, head)}")
    caption = f"raw scores x {factor}"
    if run.layers[0].causal:
        caption += "; -inf: masked (the query may not see the key)"
    return square_table(
        run, title, lambda i, j: scaled_score(run, head, i, j), precision, masked="-inf", captions=[note_text(caption)]
    )


_QKV = {"q": ("Queries", "queries", "d_k"), "k": ("Keys", "keys", "d_k"), "v": ("Values", "values", "d_v")}  # title, field, size


def qkv_table(run: Trace, head: int, letter: str, precision: int) -> FittedTable:
    """Q, K or V (``letter`` q, k or v) of one head: a row per query token, or per key token for K and V."""
    m = run.model
    name, field, size = _QKV[letter]
    tensor = getattr(run.layers[0], field)  # (H, T, Dk) or (H, T, Dv)
    width = m.value_dim if letter == "v" else m.head_dim
    bias = " + b" if m.qkv_bias else ""
    x = m.about.input_letter  # the layer input, as its source names it
    formula = f"{letter.upper()} = {x} W_{letter}^T{bias}" if m.projections else f"{letter.upper()} = {x} (no projections)"
    rows = len(run.tokens if letter == "q" else run.own_stack.key_tokens)
    title = title_text(name, f"  {formula}{head_suffix(run, head)} ({rows} x {size} {width})")
    return vector_table(run, title, tensor[head], precision, keys=letter != "q")


def qkv_tables(run: Trace, head: int, precision: int) -> list[FittedTable]:
    return [qkv_table(run, head, letter, precision) for letter in "qkv"]


def context_table(run: Trace, head: int, precision: int) -> FittedTable:
    weights = "dropped weights" if run.layers[0].dropped_weights is not None else "weights"
    title = title_text("Context vectors", f"  {weights} @ V{head_suffix(run, head)} ({len(run.tokens)} x d_v {run.model.value_dim})")
    return vector_table(run, title, run.layers[0].context[head], precision)


def embeddings_table(run: Trace, precision: int) -> FittedTable:
    """The first layer's input: named as its source names it (the toy's embeddings X), with
    where its rows come from, or the layer input x of the layer shown."""
    m = run.model
    name, rows_from = m.about.layer_input
    if rows_from is None:  # the slot: what the model's input_text says, of the layer (or head) shown
        rows_from = f"{m.input_text}{head_suffix(run, 0) if m.heads == 1 else f', layer {run.layers[0].layer}'}"
    title = title_text(name, f"  ({len(run.tokens)} x d_model {m.d_model}) {rows_from}")
    return vector_table(run, title, run.layers[0].x, precision)


def output_table(run: Trace, precision: int, heads: Sequence[int] | None = None) -> FittedTable:
    """The layer's output; ``heads`` (--head) chosen from several: without a W_o only their
    dims of the concat, with one the whole output and a caption saying it mixes every head."""
    m = run.model
    n_heads = run.layers[0].n_heads
    heads = list(range(n_heads)) if heads is None else list(heads)
    some = len(heads) < n_heads
    how = "the heads' context vectors side by side" if n_heads > 1 else "the context vectors"
    if m.out_proj:
        how += ", through W_o"
    layer = f", layer {run.layers[0].layer}" if m.layers > 1 else ""
    width = run.layers[0].output.shape[-1]
    d_v = m.value_dim
    dims = None
    captions = [note_text(f"dims h*{d_v} .. h*{d_v}+{d_v - 1} come from head h")] if n_heads > 1 and not m.out_proj else []
    if some and m.out_proj:
        captions.append(note_text(
            f"W_o mixes every head's dims into each output dim: this is the output of all {n_heads} heads, "
            f"not of head{'s' if len(heads) > 1 else ''} {', '.join(map(str, heads))} alone (--head)"
        ))
    elif some:
        dims = [h * d_v + d for h in heads for d in range(d_v)]  # the chosen heads' slices of the concat
        which = f"head{'s' if len(heads) > 1 else ''} {', '.join(map(str, heads))}"
        how = f"{which} of the heads side by side"
        captions.append(note_text(f"--head chose {which} of {n_heads}: the other heads' dims are left out (--format json has every one)"))
    size = f"{len(dims)} of {width}" if dims is not None else str(width)
    title = title_text("Output", f"  {how}{layer} ({len(run.tokens)} x {m.about.output_width} {size})")
    return vector_table(run, title, run.layers[0].output, precision, captions, dims)
