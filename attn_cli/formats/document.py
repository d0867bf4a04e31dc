"""The JSON document of one text (schema 2, docs/json.md): the header, each layer's tables
and statistics (``layer_dict``, shared with the CSV rows so the numbers cannot depend on the
format), the decoder's stacks, rollout and predictions. ``json_pieces`` streams it;
``run_dict`` holds the same numbers whole.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from attn_cli.analysis.rowstats import stats_of
from attn_cli.analysis.stats import distance_bins
from attn_cli.formats.numbers import Rows, StreamedTable, Table, as_lists, check_export_size, decoder_stacks, float32_value, streamed_rows, token_dicts
from attn_cli.records.layers import LayerAttention, LayerWeights
from attn_cli.records.results import COMBINED, Classification
from attn_cli.records.summary import LayerSummary
from attn_cli.records.trace import Stack, Trace

if TYPE_CHECKING:
    from attn_cli.records.trace import Hiding


SCHEMA_VERSION = 2  # 2: heads moved into layers[], a model object, tokens[].special


def layer_dict(
    layer: LayerAttention | LayerWeights | LayerSummary, heads: Sequence[int], kept: Sequence[int] | None = None, *,
    table: Table = as_lists, kept_rows: Sequence[int] | None = None, queries: Sequence[int] = (), row_scores: bool = False,
) -> dict[str, Any]:
    """One ``layers[]`` object: its input, the chosen heads' tables and statistics, concat, output.
    ``kept``: the tokens --hide-tokens leaves (None: nothing hidden), for ``weights_shown``.
    The softmax input and ``weights_shown`` are ``Rows``, made as they are read. A layer
    of weights alone (a saved trace, attention from elsewhere) has its weights, what is
    shown of them and their statistics, and none of the vectors or scores; a layer whose
    tables were not kept (``LayerSummary``) its statistics. ``queries``: each head's ``rows``,
    those query rows' weights (--query), and with ``row_scores`` their raw scores (--show scores)
    where the layer has them."""
    if isinstance(layer, LayerSummary):
        return _summary_dict(layer, heads, table)
    if not isinstance(layer, LayerAttention):
        return with_rows(_weights_layer_dict(layer, heads, kept, table, kept_rows), layer, queries, table)
    scores = _raw_scores(layer)  # (H, T, T)
    stats = stats_of(layer, heads)
    entries = []
    for h, head_stats in zip(heads, stats):
        entry: dict[str, Any] = {
            "head": h,
            "queries": table(layer.queries[h]),
            "keys": table(layer.keys[h]),
            "values": table(layer.values[h]),
            "scores": table(scores[h]),
            "scaled_scores": table(_softmax_input_rows(layer, scores[h], h), nulls=True),
            "weights": table(layer.weights[h]),
            "context": table(layer.context[h]),
        }
        if layer.dropped_weights is not None:
            entry["dropped_weights"] = table(layer.dropped_weights[h])
        if kept is not None:
            entry["weights_shown"] = table(_weights_shown(layer, h, kept, kept_rows), nulls=True)
        if layer.norms is not None:
            entry["norms"] = table(layer.norms[h])
        entry["stats"] = head_stats.as_dict()
        entry["stats"]["top_weight"] = _top_weights(table, head_stats.top_weight)
        entries.append(entry)
    made = {
        "layer": layer.layer,
        "input": table(layer.x) if layer.x is not None else None,
        "heads": entries,
        "concat": table(layer.concat),
        "output": table(layer.output),
    }
    return with_rows(_with_layer_norms(made, layer, table), layer, queries, table, scores if row_scores else None)


def with_rows(
    made: dict[str, Any], layer: LayerWeights, queries: Sequence[int], table: Table, scores: torch.Tensor | None = None
) -> dict[str, Any]:
    """Each head's ``rows`` (--query): the chosen query rows of its weights, as a summary keeps them,
    and of ``scores`` (the layer's (H, T, S) raw scores, for --show scores) where given."""
    for entry in made["heads"] if queries else ():
        h, chosen = entry["head"], list(queries)
        entry["rows"] = _chosen_rows(queries, layer.weights[h, chosen], None if scores is None else scores[h, chosen], table)
    return made


def _chosen_rows(queries: Sequence[int], weights: torch.Tensor, scores: torch.Tensor | None, table: Table) -> list[dict[str, Any]]:
    """Each chosen query's row object: its (Q, S) ``weights`` row, and its ``scores`` row where given,
    as ``table`` writes rows (lists of floats, or streamed rows written a head's at once)."""
    made: list[dict[str, Any]] = [{"query": q} for q in queries]
    for name, rows in (("weights", weights), ("scores", scores)):
        if rows is not None:
            for entry, value in zip(made, as_lists(rows) if table is as_lists else streamed_rows(rows)):
                entry[name] = value
    return made


def _top_weights(table: Table, values: Sequence[float]) -> Any:
    """A head's top weights, float32 weights written as in their table: ``table``'s (S,) row of them."""
    vector = torch.tensor(values, dtype=torch.float32)
    return as_lists(vector[None])[0] if table is as_lists else table(vector)


def _summary_dict(layer: LayerSummary, heads: Sequence[int], table: Table) -> dict[str, Any]:
    """A layer whose tables were not kept: each chosen head's statistics and chosen rows."""
    entries = []
    for h in heads:
        stats = layer.stats[h].as_dict()
        stats["top_weight"] = _top_weights(table, layer.stats[h].top_weight)
        entry: dict[str, Any] = {"head": h, "stats": stats}
        if layer.queries:
            entry["rows"] = _summary_rows(layer, h, table)
        entries.append(entry)
    return {"layer": layer.layer, "input": None, "heads": entries}


def _summary_rows(layer: LayerSummary, head: int, table: Table) -> list[dict[str, Any]]:
    """A summary's chosen rows of one head: their weights, and their raw scores where they were kept."""
    weights = torch.stack([layer.row(q, head) for q in layer.queries])  # (Q, S)
    scores = None if layer.row_scores is None else torch.stack([layer.row_score(q, head) for q in layer.queries])
    return _chosen_rows(layer.queries, weights, scores, table)


def _with_layer_norms(made: dict[str, Any], layer: LayerWeights, table: Table) -> dict[str, Any]:
    """A layer's object with its (T, T) ``norms`` (the heads' summed value-weighted norms), when computed,
    and its attribution maps (``value_zeroing``, ``alti``: (T, T) each), when asked for."""
    if layer.layer_norms is not None:
        made["norms"] = table(layer.layer_norms)
    for name, m in layer.maps.items():
        made[name] = table(m)
    return made


def _weights_layer_dict(
    layer: LayerWeights, heads: Sequence[int], kept: Sequence[int] | None, table: Table, kept_rows: Sequence[int] | None = None
) -> dict[str, Any]:
    stats = stats_of(layer, heads)
    entries = []
    for h, head_stats in zip(heads, stats):
        entry: dict[str, Any] = {"head": h, "weights": table(layer.weights[h])}
        if kept is not None:
            entry["weights_shown"] = table(_weights_shown(layer, h, kept, kept_rows), nulls=True)
        if layer.norms is not None:
            entry["norms"] = table(layer.norms[h])
        entry["stats"] = head_stats.as_dict()
        entry["stats"]["top_weight"] = _top_weights(table, head_stats.top_weight)
        entries.append(entry)
    return _with_layer_norms({"layer": layer.layer, "input": None, "heads": entries}, layer, table)


def _raw_scores(layer: LayerAttention) -> torch.Tensor:
    """(H, T, T) raw Q K^T: the layer's own when a table derived them already, otherwise
    derived by the same function but not kept on the layer, so that an export of many
    layers holds one layer's at a time."""
    derived = vars(layer).get("scores")
    return derived if derived is not None else type(layer).scores.func(layer)


def _softmax_input_rows(layer: LayerAttention, scores: torch.Tensor, head: int) -> Rows:
    """(T, T) head ``head``'s ``scaled_scores`` from its raw scores, a block of rows at a
    time (the same operations and mask, cell by cell, as the whole tensor)."""

    def rows(start: int, stop: int) -> torch.Tensor:
        return layer.softmax_input(scores[start:stop], start, stop, head=head)  # (R, T)

    return Rows(tuple(scores.shape), scores.dtype, rows)


def _weights_shown(layer: LayerWeights, h: int, kept: Sequence[int], kept_rows: Sequence[int] | None = None) -> Rows:
    """(T, T): head ``h``'s renormalized weights (``attn_cli.records.hiding``) at the model's
    positions, a block of rows at a time; NaN (``null``) in the hidden tokens' rows and
    columns, and in a row with no weight left. ``kept_rows``: the rows kept when they are not
    the columns (cross-attention: the decoder's inputs; the columns are the source's)."""
    from attn_cli.records.hiding import renormalize

    n_rows, n = layer.weights.shape[-2:]
    shown = set(kept if kept_rows is None else kept_rows)
    columns = torch.tensor(list(kept))  # (K,)

    def rows(start: int, stop: int) -> torch.Tensor:
        full = torch.full((stop - start, n), math.nan, dtype=layer.weights.dtype)  # (R, T)
        queries = [i for i in range(start, stop) if i in shown]
        if queries:
            at = torch.tensor(queries)[:, None] - start  # (R', 1)
            full[at, columns[None, :]] = renormalize(layer.weights[h : h + 1], kept, rows=queries)[0]  # (R', K)
        return full

    return Rows((n_rows, n), layer.weights.dtype, rows)


def hiding_of(run: Trace | Stack) -> Hiding | None:
    return run.hiding if run.hiding is not None and run.hiding.active else None


def _header(run: Trace) -> dict[str, Any]:
    """The documented JSON object up to its layers."""
    tokens = run.tokens
    hiding = hiding_of(run)
    made = {
        "schema_version": SCHEMA_VERSION,
        "text": run.text,
        "pair": run.pair,
        "tokenizer": tokens.tokenizer,
        "vocab_size": tokens.vocab_size,
        "tokens": token_dicts(tokens, hiding.hidden if hiding else (), run.prompt_length),
    }
    if tokens.truncated is not None:  # --truncate cut the text: ``tokens`` are its first
        made["truncated"] = {"from": tokens.truncated.original, "to": tokens.truncated.kept}
    made["model"] = run.model.as_dict()
    made["distance_bins"] = [list(b) for b in distance_bins(max(len(stack.key_tokens) for stack in run.stacks.values() if not stack.cross))]
    if run.queries:  # --query: the rows each head's ``rows`` holds
        made["queries"] = list(run.queries)
    if run.tables_omitted is not None:  # the layers hold statistics and rows, not tables: why
        made["tables_omitted"] = run.tables_omitted
    if run.prompt_length is not None:  # --generate: what the model added to the text
        made["generated_text"] = run.generated_text
    stacks = run.stacks
    if len(stacks) > 1:  # an encoder-decoder: the decoder's text and inputs
        decoder = stacks["decoder"]
        made["target"] = decoder.text
        if run.generated_text is not None:  # --generate wrote the target
            made["generated_text"] = run.generated_text
            made["ended_at_once"] = run.ended_at_once
        target_hidden = decoder.hiding.hidden if decoder.hiding is not None else ()
        made["target_tokens"] = token_dicts(decoder.tokens, target_hidden)
    return made


def kept_of(stack: Stack) -> Sequence[int] | None:
    """The columns --hide-tokens keeps (None: nothing hidden): the keys, the source's for cross-attention."""
    if stack.cross:
        key_hiding = stack.key_hiding if stack.key_hiding is not None and stack.key_hiding.active else None
        if key_hiding is None and hiding_of(stack) is None:
            return None
        return key_hiding.kept if key_hiding is not None else tuple(range(len(stack.key_tokens)))
    hiding = hiding_of(stack)
    return hiding.kept if hiding else None


def kept_rows_of(stack: Stack) -> Sequence[int] | None:
    """Cross-attention's rows --hide-tokens keeps, when some columns or rows are hidden; None otherwise."""
    if not stack.cross or kept_of(stack) is None:
        return None
    hiding = hiding_of(stack)
    return hiding.kept if hiding is not None else tuple(range(len(stack.tokens)))


def combined_dict(run: Trace, name: str, *, table: Table = as_lists) -> dict[str, Any] | None:
    """The top-level ``rollout``, ``flow``, ``alti`` or ``value_zeroing_rollout`` object (``name``, one of
    ``COMBINED``): ``through_layer`` and the (T, T) ``weights``, and with --hide-tokens their renormalized
    ``weights_shown`` (null in hidden rows and columns)."""
    stack = run.rolled_out if name == "rollout" else run.own_stack
    rollout = None if stack is None else stack.rollout if name == "rollout" else run.combined(name)
    if stack is None or rollout is None:
        return None
    made: dict[str, Any] = {"through_layer": rollout.through_layer, "weights": table(rollout.weights)}
    if stack.texts is not None:  # an encoder-decoder's: which stack's layers were rolled out
        made = {"stack": stack.name, **made}
    kept = kept_of(stack)  # the rolled-out stack's tokens, the decoder's too
    if name == "attention_gradient":  # relevance, not shares: no weights_shown; the output it explains
        return {**made, "target": run.explained.as_dict() if run.explained is not None else None}
    if kept is not None:
        as_layer = LayerWeights(rollout.weights[None], rollout.mask, 1.0)  # (1, T, T): drawn like one head's weights
        made["weights_shown"] = table(_weights_shown(as_layer, 0, kept), nulls=True)
    return made


def predictions_list(run: Trace) -> list[dict[str, Any]] | dict[str, Any] | None:
    """The top-level ``predictions`` (--predict): per position, its top K, most likely first; a classifier's
    one object, ``{"position", "top": [{"index", "label", "prob", "logit"}, ...]}``."""
    p = run.predictions
    if p is None:
        return None
    if isinstance(p, Classification):
        return {"position": p.position, "top": [
            {"index": i, "label": label, "prob": None if prob is None else float32_value(prob), "logit": float32_value(logit)}
            for i, label, prob, logit in p.ranked()
        ]}  # fmt: skip
    ids, probs, logits = p.ids.tolist(), p.probs.tolist(), p.logits.tolist()
    return [
        {"position": i, "top": [
            {"id": tid, "text": text, "label": label, "prob": float32_value(prob), "logit": float32_value(logit)}
            for tid, text, label, prob, logit in zip(ids[i], p.texts[i], p.labels[i], probs[i], logits[i])
        ]}
        for i in range(len(ids))
    ]  # fmt: skip


def run_dict(run: Trace, *, table: Table = as_lists) -> dict[str, Any]:
    """The documented JSON object (README, "JSON schema"); ``table``: what each float32 table
    becomes (nested lists of floats, or ``StreamedTable``)."""
    check_export_size(run)
    made = {**_header(run), "layers": _layer_list(run.own_stack, table, run.queries, run.row_scores)}
    for key, stack in decoder_stacks(run):
        made[key] = _layer_list(stack, table)
    for name in COMBINED:
        combined = combined_dict(run, name, table=table)
        if combined is not None:
            made[name] = combined
    if run.predictions is not None:
        made["predictions"] = predictions_list(run)
    return made


def _layer_list(stack: Stack, table: Table, queries: Sequence[int] = (), row_scores: bool = False) -> list[dict[str, Any]]:
    return [
        layer_dict(layer, stack.shown_heads, kept_of(stack), table=table, kept_rows=kept_rows_of(stack), queries=queries, row_scores=row_scores)
        for layer in stack.layers
    ]


_dumps = functools.partial(json.dumps, allow_nan=False, ensure_ascii=False)


def json_pieces(run: Trace) -> Iterator[str]:
    """The run as one line of JSON (the schema of ``run_dict``, no newline), in pieces:
    each layer's dict is made as it is reached and let go before the next."""
    yield _dumps(_header(run))[:-1] + ', "layers": '  # the rest (tokens, model) has no tables: json writes it
    yield from _layer_array(run.own_stack, run.queries, run.row_scores)
    for key, stack in decoder_stacks(run):
        yield f', "{key}": '
        yield from _layer_array(stack)
    for name in COMBINED:
        combined = combined_dict(run, name, table=StreamedTable)
        if combined is not None:
            yield f', "{name}": {{'
            yield from _members(combined)
            yield "}"
    if run.predictions is not None:
        yield ', "predictions": ' + _dumps(predictions_list(run))
    yield "}"


def _layer_array(stack: Stack, queries: Sequence[int] = (), row_scores: bool = False) -> Iterator[str]:
    """A stack's layers as a JSON array, each layer's object made as it is reached."""
    yield "["
    for i, layer in enumerate(stack.layers):
        yield "{" if i == 0 else ", {"
        made = layer_dict(
            layer, stack.shown_heads, kept_of(stack), table=StreamedTable, kept_rows=kept_rows_of(stack), queries=queries,
            row_scores=row_scores,
        )  # fmt: skip
        yield from _members(made)
        yield "}"
    yield "]"


def _members(entry: dict[str, Any]) -> Iterator[str]:
    """An object's members (without its braces) as json.dumps writes them (", " and ": ")."""
    for k, (key, value) in enumerate(entry.items()):
        yield f'{", " if k else ""}"{key}": '
        yield from _pieces(value)


def _pieces(value: Any) -> Iterator[str]:
    """JSON text of a value of ``layer_dict(table=StreamedTable)``: tables and the heads'
    objects around them here, the rest through json."""
    if isinstance(value, StreamedTable):
        yield from value.json_pieces()
    elif type(value) is list and value and type(value[0]) is dict:  # a layer's heads
        for i, entry in enumerate(value):
            yield "[{" if i == 0 else ", {"
            yield from _members(entry)
            yield "}"
        yield "]"
    elif type(value) is dict and any(isinstance(v, StreamedTable) for v in value.values()):  # a head's stats
        yield "{"
        yield from _members(value)
        yield "}"
    elif type(value) is int:
        yield str(value)
    else:
        yield _dumps(value)
