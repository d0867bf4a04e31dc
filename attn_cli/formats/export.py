"""Machine formats: JSON (one object per text) and tidy long CSV.

Both are built from the same ``layer_dict``, so the numbers cannot depend on the
format. A table's float32 values are written rounded to 9 significant digits
(``float32_value``), exactly enough for every float32 to come back bit for bit
when read as float32, and half the text of the float64 repr (JSON is written
about twice as fast); the statistics, computed in float64, are at Python's
shortest repr, except ``top_weight``, a float32 weight written as in its table.
``run_dict`` holds the same numbers the JSON has (``json.loads(to_json(run)) ==
run_dict(run)``). Masked softmax inputs are ``null`` in JSON and ``-inf`` in CSV.
The schema is documented in the README ("JSON schema"); ``SCHEMA_VERSION``
changes when a key is renamed or removed, not when one is added.

``write_json`` and ``write_csv`` stream: each table is formatted a block of rows
at a time (``BLOCK_NUMBERS``) and the text is written about ``WRITE_CHARS`` at a
time, so what they hold beyond the trace is one layer's derived tables, never the
text: a 3,000-token JSON of 390 MB is written in the memory of its T x T tables.
The tables a trace does not keep (the raw scores, the softmax input,
``weights_shown``) are made one layer, or one block of rows, at a time, with the
same operations as the whole tensors, so the bytes are the same. ``to_json``,
``to_csv``, ``csv_rows`` and ``run_dict`` return the whole text or data, for the
Python API and the tests.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, Callable, Union

import torch

from attn_cli.records.layers import LayerAttention, LayerWeights
from attn_cli.analysis.stats import CHUNK_ROWS, attention_stats
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Trace

if TYPE_CHECKING:
    from attn_cli.records.trace import Hiding

SCHEMA_VERSION = 2  # 2: heads moved into layers[], a model object, tokens[].special

VECTOR_TABLES = ("queries", "keys", "values", "context")  # per head, (T, d)
MATRIX_TABLES = ("scores", "scaled_scores", "weights", "dropped_weights", "weights_shown", "norms")  # per head, (T, T)
HEAD_STATS = ("self_mass", "previous_mass", "first_mass")  # per head, one number
CSV_COLUMNS = ("text_index", "tokenizer", "table", "head", "layer", "row", "col", "row_token", "col_token", "value")


# Bytes of memory per number while a run is held whole (``run_dict``, ``to_json``,
# ``to_csv``): a Python float in a nested list (~32), its text (~20), and for CSV a
# row tuple around it (~100).
EXPORT_BYTES_PER_NUMBER = 160
# What a streamed export holds whatever the size of its tables: the text gathered
# for one write and its UTF-8 bytes (WRITE_CHARS each), one block's floats, text and
# CSV rows, the csv module's buffer; tracemalloc measured under 5 MiB
# (bench/json_memory.py), this leaves room for allocator slack.
STREAM_BYTES = 16 * 2**20
# From this much derived beside the trace (the raw scores, the entropy's float64 rows), a
# streamed export has glibc give freed blocks back (attn_cli.runtime.allocator): otherwise the
# heap keeps the entropy's blocks: 5,000 tokens of JSON peaked 60 MB higher, 2,000 tokens 20.
LARGE_EXPORT_BYTES = 16 * 2**20


def export_numbers(run: Trace) -> int:
    """How many numbers the JSON (or CSV) of ``run`` holds."""
    n, heads = len(run.tokens), len(run.shown_heads)
    hidden = run.hiding is not None and run.hiding.active
    total = (2 if hidden else 1) * n * n if run.rollout is not None else 0  # rollout (and its weights_shown)
    for layer in run.layers:
        rows, cols = layer.weights.shape[-2:]  # T x T, or T x S for cross-attention
        cells = rows * cols
        shown = heads * cells if hidden else 0  # weights_shown
        if layer.norms is not None:
            total += heads * cells + cells  # norms per head and per layer
        if not isinstance(layer, LayerAttention):  # weights alone (a saved trace, attention from elsewhere)
            total += heads * cells + shown
            continue
        d_k, d_v, d_in = layer.queries.shape[-1], layer.values.shape[-1], layer.x.shape[-1] if layer.x is not None else 0
        squares = (4 if layer.dropped_weights is not None else 3) * heads * cells  # scores, scaled_scores, weights (dropped)
        squares += shown
        width = max(rows, cols)  # cross-attention's keys and values are the source's
        vectors = width * (d_in + heads * (2 * d_k + 2 * d_v) + layer.concat.shape[-1] + layer.output.shape[-1])  # x, Q, K, V, context, concat, output
        total += squares + vectors
    return total + sum(export_numbers(stack) for _, stack in decoder_stacks(run))


def export_bytes(run: Trace, *, whole: bool = False) -> int:
    """Bytes of memory exporting ``run`` needs beyond the trace itself. Streamed
    (``write_json``, ``write_csv``): the raw scores of one layer, when the layer has
    not kept its own (H x T x T); the statistics of one layer's heads (four lists of T
    Python numbers per head, the float64 rows the entropy is summed in, and a copy of
    the chosen heads' weights when --head chose some); and ``STREAM_BYTES``.
    ``whole``: also every number as Python objects and text."""
    n, heads = len(run.tokens), len(run.shown_heads)
    scores = max((_derived_scores_bytes(layer) for layer in run.layers), default=0)
    every_head = heads == run.model.heads
    stats = (
        heads * 4 * 32 * n  # the per-row lists
        + 2 * 8 * n * (heads * n if n <= CHUNK_ROWS else CHUNK_ROWS)  # entropy's float64 rows and their x log x
        + (0 if every_head else heads * n * n * 4)  # the chosen heads' weights, copied
    )
    need = scores + stats + STREAM_BYTES
    return need + export_numbers(run) * EXPORT_BYTES_PER_NUMBER if whole else need


def _derived_scores_bytes(layer: LayerWeights) -> int:
    if not isinstance(layer, LayerAttention) or "scores" in vars(layer):  # none to derive, or kept already
        return 0
    return layer.weights.numel() * layer.queries.element_size()  # (H, T, T) in the queries' dtype


def check_export_size(run: Trace, *, whole: bool = True) -> None:
    """Refuse an export that would not fit in memory, before building it (``whole``:
    held in memory, as ``run_dict`` or ``to_json``; otherwise streamed)."""
    from attn_cli.runtime import budget

    layers = f"{len(run.layers)} layer{'s' if len(run.layers) != 1 else ''} x " if run.model.layers > 1 else ""
    if whole:
        what = f"the {export_numbers(run):,} numbers of the JSON/CSV of {len(run.tokens)} tokens x {layers}{len(run.shown_heads)} heads"
    else:
        what = f"the raw scores and statistics of {len(run.tokens)} tokens x {layers}{len(run.shown_heads)} heads, one layer at a time"
    fix = "use a shorter text, fewer layers or heads (--layer, --head), or --format table (which summarises)"
    budget.check({"export": export_bytes(run, whole=whole)}, {"export": what}, {"export": fix}, doing="this export")


def token_dicts(tokens: Tokens, hidden: Sequence[int] = (), prompt_length: int | None = None) -> list[dict[str, Any]]:
    """The documented ``tokens`` array: position, id, text, label, special, hidden, partial (and
    bytes for a piece of a character, segment for pairs, and with --generate ``generated``:
    whether the model added the token after the prompt's ``prompt_length``)."""
    pair = any(tokens.type_ids)
    hidden = set(hidden)
    out = []
    for i, (tid, text, label) in enumerate(zip(tokens.ids, tokens.texts, tokens.labels)):
        entry: dict[str, Any] = {
            "position": i, "id": tid, "text": text, "label": label, "special": tokens.is_special(i), "hidden": i in hidden,
            "partial": bool(tokens.partial_bytes(i)),
        }
        if entry["partial"]:  # its text shows these bytes as \xNN escapes, which real text can also read as
            entry["bytes"] = tokens.partial_bytes(i)
        if pair:
            entry["segment"] = tokens.type_ids[i]
        if prompt_length is not None:
            entry["generated"] = i >= prompt_length
        out.append(entry)
    return out


FLOAT32 = "{:.9}"  # 9 significant digits give back every float32; floats stay floats ("1.0", not "1")
_LARGE = re.compile(r"-?[0-9.]+e\+[0-9]+")


def float32_value(value: float) -> float:
    """A float32 value as the JSON and CSV write it: rounded to 9 significant digits, which
    reads back as the same float32 (``json.dumps`` of the result is the text ``to_json`` writes)."""
    return float(FLOAT32.format(value))


BLOCK_NUMBERS = 4096  # numbers formatted at a time: a block of a table's rows (at least one), one cached template
WRITE_CHARS = 2**20  # text gathered before one write
_FLOAT32_EXACT = (torch.float32, torch.bfloat16, torch.float16)  # dtypes whose every value 9 digits give back


class Rows:
    """A (T, C) table that is not kept whole but made a block of rows at a time,
    ``rows[a:b]`` giving rows a .. b-1 (a head's softmax input, its ``weights_shown``)."""

    __slots__ = ("shape", "dtype", "_make")

    def __init__(self, shape: tuple[int, int], dtype: torch.dtype, make: Callable[[int, int], torch.Tensor]) -> None:
        self.shape, self.dtype, self._make = torch.Size(shape), dtype, make

    def __getitem__(self, rows: slice) -> torch.Tensor:
        start, stop, _ = rows.indices(self.shape[0])
        return self._make(start, stop)


Source = Union[torch.Tensor, Rows]  # a table as layer_dict hands it over


def blocks(source: Source) -> Iterator[torch.Tensor]:
    """A 2-D table a block of rows at a time: ``BLOCK_NUMBERS`` numbers, at least one row."""
    step = _block_rows(source)
    for start in range(0, source.shape[0], step):
        yield source[start : start + step]


def _block_rows(source: Source) -> int:
    return max(1, BLOCK_NUMBERS // max(1, source.shape[-1]))


def as_lists(source: Source, nulls: bool = False) -> list[Any]:
    """A 2-D table as the lists of floats that ``to_json`` writes (``float32_value``);
    ``nulls``: NaN and infinities become None."""
    written = float32_value if source.dtype in _FLOAT32_EXACT else float  # a float64 table keeps all its digits
    tensor = source if isinstance(source, torch.Tensor) else source[:]
    if nulls:
        return [[written(v) if math.isfinite(v) else None for v in row] for row in tensor.tolist()]
    return [[written(v) for v in row] for row in tensor.tolist()]


class StreamedTable:
    """A float32 table in ``run_dict(table=StreamedTable)``: its source (a tensor, or
    ``Rows``), written a block of rows at a time, as JSON (``json_pieces``: one
    ``str.format`` of ``FLOAT32`` per block instead of one float repr per number
    through ``json``) or as the rows of ``as_lists`` (``row_lists``, for CSV);
    ``nulls``: NaN and infinities are written ``null`` (None)."""

    __slots__ = ("source", "nulls")

    def __init__(self, source: Source, nulls: bool = False) -> None:
        self.source, self.nulls = source, nulls

    def json(self) -> str:
        return "".join(self.json_pieces())

    def json_pieces(self) -> Iterator[str]:
        field = FLOAT32 if self.source.dtype in _FLOAT32_EXACT else "{!r}"  # a float64 table keeps all its digits
        return _table_pieces(self.source, field, self.nulls)

    def row_lists(self) -> Iterator[list[Any]]:
        """Each row as ``as_lists`` gives it."""
        for block in blocks(self.source):
            yield from as_lists(block, self.nulls)


JsonTable = StreamedTable  # the name before tables were streamed


def _table_pieces(source: Source, field: str, nulls: bool) -> Iterator[str]:
    """A table's JSON text: in one piece up to ``BLOCK_NUMBERS`` numbers, else a block of rows a piece."""
    shape = tuple(source.shape)
    if len(shape) != 2:  # no export table is one: a vector in one piece, a stack table by table
        if len(shape) <= 1:
            yield _finished(_template(shape, field).format(*source.reshape(-1).tolist()), nulls)
            return
        yield "["
        for i in range(shape[0]):
            if i:
                yield ", "
            yield from _table_pieces(source[i], field, nulls)
        yield "]"
        return
    n_rows, width = shape
    step = _block_rows(source)
    if n_rows <= step:
        yield _finished(_template(shape, field).format(*source[:].reshape(-1).tolist()), nulls)
        return
    yield "["
    for start in range(0, n_rows, step):
        block = source[start : start + step]
        if start:
            yield ", "
        yield _finished(_rows_template(block.shape[0], width, field).format(*block.reshape(-1).tolist()), nulls)
    yield "]"


def _finished(text: str, nulls: bool) -> str:
    """Numbers formatted with ``FLOAT32`` as ``json.dumps`` writes them."""
    if "e+" in text:  # 1e9 and up: the notation of repr ("1234567890.0"), as json.dumps writes the same value
        text = _LARGE.sub(lambda m: repr(float(m[0])), text)
    if "n" in text:  # "inf", "-inf" or "nan": no finite number's text has an n
        if not nulls:
            raise ValueError("Out of range float values are not JSON compliant")
        text = text.replace("-inf", "null").replace("inf", "null").replace("nan", "null")
    return text


@functools.lru_cache(maxsize=512)
def _template(shape: tuple[int, ...], field: str = FLOAT32) -> str:
    """The str.format template of a table of this shape: nested JSON arrays of ``field``s."""
    if not shape:
        return field
    inner = _template(shape[1:], field)
    return "[" + ", ".join([inner] * shape[0]) + "]"


@functools.lru_cache(maxsize=64)
def _rows_template(n_rows: int, width: int, field: str) -> str:
    """``n_rows`` JSON arrays of ``width`` fields, comma-separated: a block of a long table."""
    return ", ".join([_template((width,), field)] * n_rows)


Table = Callable[..., Any]  # as_lists or StreamedTable: what run_dict makes of each float32 table


def layer_dict(
    layer: LayerAttention, heads: Sequence[int], kept: Sequence[int] | None = None, *, table: Table = as_lists,
    kept_rows: Sequence[int] | None = None,
) -> dict[str, Any]:
    """One ``layers[]`` object: its input, the chosen heads' tables and statistics, concat, output.
    ``kept``: the tokens --hide-tokens leaves (None: nothing hidden), for ``weights_shown``.
    The softmax input and ``weights_shown`` are ``Rows``, made as they are read. A layer
    of weights alone (a saved trace, attention from elsewhere) has its weights, what is
    shown of them and their statistics, and none of the vectors or scores."""
    if not isinstance(layer, LayerAttention):
        return _weights_layer_dict(layer, heads, kept, table, kept_rows)
    scores = _raw_scores(layer)  # (H, T, T)
    stats = _head_stats(layer, heads)
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
        entry["stats"]["top_weight"] = [float32_value(w) for w in head_stats.top_weight]  # float32 weights, as in the table
        entries.append(entry)
    made = {
        "layer": layer.layer,
        "input": table(layer.x) if layer.x is not None else None,
        "heads": entries,
        "concat": table(layer.concat),
        "output": table(layer.output),
    }
    return _with_layer_norms(made, layer, table)


def _with_layer_norms(made: dict[str, Any], layer: LayerWeights, table: Table) -> dict[str, Any]:
    """A layer's object with its (T, T) ``norms`` (the heads' summed value-weighted norms), when computed."""
    if layer.layer_norms is not None:
        made["norms"] = table(layer.layer_norms)
    return made


def _head_stats(layer: LayerWeights, heads: Sequence[int]) -> list[Any]:
    """The chosen heads' statistics, every chosen head at once, as before streaming:
    torch's exp2 can round a number differently by where it falls in the tensor (a
    vectorized stretch or the tail), so one head at a time would change last digits.
    A subset of the heads is a copy."""
    every_head = list(heads) == list(range(layer.weights.shape[0])) and layer.weights.is_contiguous()
    return attention_stats(layer.weights if every_head else layer.weights[list(heads)], mask=layer.mask, cross=layer.cross)


def _weights_layer_dict(
    layer: LayerWeights, heads: Sequence[int], kept: Sequence[int] | None, table: Table, kept_rows: Sequence[int] | None = None
) -> dict[str, Any]:
    stats = _head_stats(layer, heads)
    entries = []
    for h, head_stats in zip(heads, stats):
        entry: dict[str, Any] = {"head": h, "weights": table(layer.weights[h])}
        if kept is not None:
            entry["weights_shown"] = table(_weights_shown(layer, h, kept, kept_rows), nulls=True)
        if layer.norms is not None:
            entry["norms"] = table(layer.norms[h])
        entry["stats"] = head_stats.as_dict()
        entry["stats"]["top_weight"] = [float32_value(w) for w in head_stats.top_weight]
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


def _hiding(run: Trace) -> Hiding | None:
    return run.hiding if run.hiding is not None and run.hiding.active else None


def _header(run: Trace) -> dict[str, Any]:
    """The documented JSON object up to its layers."""
    tokens = run.tokens
    hiding = _hiding(run)
    made = {
        "schema_version": SCHEMA_VERSION,
        "text": run.text,
        "pair": run.pair,
        "tokenizer": tokens.tokenizer,
        "vocab_size": tokens.vocab_size,
        "tokens": token_dicts(tokens, hiding.hidden if hiding else (), run.prompt_length),
        "model": run.model.as_dict(),
    }
    if run.prompt_length is not None:  # --generate: what the model added to the text
        made["generated_text"] = run.generated_text
    if run.target_tokens is not None:  # an encoder-decoder: the decoder's text and inputs
        made["target"] = run.target
        if run.generated_text is not None:  # --generate wrote the target
            made["generated_text"] = run.generated_text
        target_hidden = run.target_hiding.hidden if run.target_hiding is not None else ()
        made["target_tokens"] = token_dicts(run.target_tokens, target_hidden)
    return made


def decoder_stacks(run: Trace) -> list[tuple[str, Trace]]:
    """An encoder-decoder's ``decoder_layers`` and ``cross_layers`` as the traces of their stacks
    (``Trace.stack``); none for a model of one stack."""
    if run.target_tokens is None:
        return []
    return [("decoder_layers", run.stack("decoder")), ("cross_layers", run.stack("cross"))]


def _kept(run: Trace) -> Sequence[int] | None:
    """The columns --hide-tokens keeps (None: nothing hidden): the keys, the source's for cross-attention."""
    if run.key_tokens is not None:
        key_hiding = run.key_hiding if run.key_hiding is not None and run.key_hiding.active else None
        if key_hiding is None and _hiding(run) is None:
            return None
        return key_hiding.kept if key_hiding is not None else tuple(range(len(run.key_tokens)))
    hiding = _hiding(run)
    return hiding.kept if hiding else None


def _kept_rows(run: Trace) -> Sequence[int] | None:
    """Cross-attention's rows --hide-tokens keeps, when some columns or rows are hidden; None otherwise."""
    if run.key_tokens is None or _kept(run) is None:
        return None
    hiding = _hiding(run)
    return hiding.kept if hiding is not None else tuple(range(len(run.tokens)))


def rollout_dict(run: Trace, *, table: Table = as_lists) -> dict[str, Any] | None:
    """The top-level ``rollout`` object: ``through_layer`` and the (T, T) ``weights``, and
    with --hide-tokens their renormalized ``weights_shown`` (null in hidden rows and columns)."""
    rollout = run.rollout
    if rollout is None:
        return None
    made: dict[str, Any] = {"through_layer": rollout.through_layer, "weights": table(rollout.weights)}
    if run.rollout_stack is not None:  # an encoder-decoder's: which stack's layers were rolled out
        made = {"stack": run.rollout_stack, **made}
    kept = _kept(run)
    if kept is not None:
        as_layer = LayerWeights(rollout.weights[None], rollout.mask, 1.0)  # (1, T, T): drawn like one head's weights
        made["weights_shown"] = table(_weights_shown(as_layer, 0, kept), nulls=True)
    return made


def predictions_list(run: Trace) -> list[dict[str, Any]] | None:
    """The top-level ``predictions`` array (--predict): per position, its top K, most likely first."""
    p = run.predictions
    if p is None:
        return None
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
    made = {**_header(run), "layers": _layer_list(run, table)}
    for key, stack in decoder_stacks(run):
        made[key] = _layer_list(stack, table)
    if run.rollout is not None:
        made["rollout"] = rollout_dict(run, table=table)
    if run.predictions is not None:
        made["predictions"] = predictions_list(run)
    return made


def _layer_list(run: Trace, table: Table) -> list[dict[str, Any]]:
    return [layer_dict(layer, run.shown_heads, _kept(run), table=table, kept_rows=_kept_rows(run)) for layer in run.layers]


_dumps = functools.partial(json.dumps, allow_nan=False, ensure_ascii=False)


def json_pieces(run: Trace) -> Iterator[str]:
    """The run as one line of JSON (the schema of ``run_dict``, no newline), in pieces:
    each layer's dict is made as it is reached and let go before the next."""
    yield _dumps(_header(run))[:-1] + ', "layers": '  # the rest (tokens, model) has no tables: json writes it
    yield from _layer_array(run)
    for key, stack in decoder_stacks(run):
        yield f', "{key}": '
        yield from _layer_array(stack)
    rollout = rollout_dict(run, table=StreamedTable)
    if rollout is not None:
        yield ', "rollout": {'
        yield from _members(rollout)
        yield "}"
    if run.predictions is not None:
        yield ', "predictions": ' + _dumps(predictions_list(run))
    yield "}"


def _layer_array(run: Trace) -> Iterator[str]:
    """A trace's layers as a JSON array, each layer's object made as it is reached."""
    yield "["
    for i, layer in enumerate(run.layers):
        yield "{" if i == 0 else ", {"
        yield from _members(layer_dict(layer, run.shown_heads, _kept(run), table=StreamedTable, kept_rows=_kept_rows(run)))
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
    if type(value) is StreamedTable:
        yield from value.json_pieces()
    elif type(value) is list and value and type(value[0]) is dict:  # a layer's heads
        for i, entry in enumerate(value):
            yield "[{" if i == 0 else ", {"
            yield from _members(entry)
            yield "}"
        yield "]"
    elif type(value) is int:
        yield str(value)
    else:
        yield _dumps(value)


def write_json(run: Trace, out: IO[bytes]) -> None:
    """Write the run's JSON line (no newline) to ``out`` as UTF-8, streamed: what it
    holds is one layer's derived tables and a block of text, not the text."""
    _before_streaming(run)
    _write(json_pieces(run), out)


def _before_streaming(run: Trace) -> None:
    check_export_size(run, whole=False)
    if export_bytes(run) - STREAM_BYTES >= LARGE_EXPORT_BYTES:
        from attn_cli.runtime.allocator import return_freed_memory

        return_freed_memory()


def to_json(run: Trace) -> str:
    """The run as one line of JSON (the schema of ``run_dict``)."""
    check_export_size(run)
    return "".join(json_pieces(run))


def _write(pieces: Iterable[str], out: IO[bytes]) -> None:
    """Write text to a binary file about ``WRITE_CHARS`` at a time."""
    gathered: list[str] = []
    size = 0
    for piece in pieces:
        gathered.append(piece)
        size += len(piece)
        if size >= WRITE_CHARS:
            out.write("".join(gathered).encode("utf-8"))
            gathered, size = [], 0
    if gathered:
        out.write("".join(gathered).encode("utf-8"))


def csv_rows(run: Trace, index: int = 0) -> list[tuple[Any, ...]]:
    """Tidy rows (``CSV_COLUMNS``): one per head/query/key for matrices, per
    token/dimension for vectors, per query for the row statistics, one per head
    for the head statistics, and first one per token with its id (and, for a
    checkpoint's added tokens, ``special``; for a piece of a character, one per byte in
    ``token_bytes``). ``index`` is the text's place in a
    --lines batch; every row names the tokenizer actually used and the layer."""
    check_export_size(run)
    return [row for rows in _csv_batches(run, index) for row in rows]


def _csv_batches(run: Trace, index: int) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``csv_rows`` a few at a time (the token rows, then one row of a
    table at a time), each layer's tables made as the layer is reached."""
    hiding = _hiding(run)
    tokens = token_dicts(run.tokens, hiding.hidden if hiding else (), run.prompt_length)
    labels = [t["label"] for t in tokens]
    tokenizer = run.tokens.tokenizer
    yield [(index, tokenizer, "token_id", "", "", i, "", labels[i], "", t["id"]) for i, t in enumerate(tokens)]
    yield [(index, tokenizer, "special", "", "", i, "", labels[i], "", 1) for i, t in enumerate(tokens) if t["special"]]
    yield [(index, tokenizer, "hidden", "", "", i, "", labels[i], "", 1) for i, t in enumerate(tokens) if t["hidden"]]
    yield [
        (index, tokenizer, "token_bytes", "", "", i, b, labels[i], "", byte)
        for i, t in enumerate(tokens) if t["partial"]
        for b, byte in enumerate(bytes.fromhex(t["bytes"]))
    ]
    hidden = {i for i, t in enumerate(tokens) if t["hidden"]}

    # An encoder-decoder's decoder and cross-attention tables are named "decoder.weights",
    # "cross.weights", ...: ``p`` the prefix, ``rl`` and ``cl`` the row and column labels.
    def vectors(table: str, head: Any, layer: int, values: StreamedTable, rl: Sequence[str] = labels, p: str = "") -> Iterator[list[tuple[Any, ...]]]:
        for i, vec in enumerate(values.row_lists()):
            yield [(index, tokenizer, p + table, head, layer, i, d, rl[i], "", v) for d, v in enumerate(vec)]

    def squares(
        table: str, head: Any, layer: int, values: StreamedTable, rl: Sequence[str] = labels, cl: Sequence[str] = labels, p: str = "",
        rh: set[int] = hidden, ch: set[int] = hidden,
    ) -> Iterator[list[tuple[Any, ...]]]:  # fmt: skip
        if table in ("weights_shown", "rollout_shown"):  # the shown tokens' cells only; "" in a row with no weight left
            for i, vec in enumerate(values.row_lists()):
                if i not in rh:
                    yield [
                        (index, tokenizer, p + table, head, layer, i, j, rl[i], cl[j], "" if v is None else v)
                        for j, v in enumerate(vec) if j not in ch
                    ]
            return
        for i, vec in enumerate(values.row_lists()):
            yield [(index, tokenizer, p + table, head, layer, i, j, rl[i], cl[j], "-inf" if v is None else v) for j, v in enumerate(vec)]

    def layer_rows(
        layer: dict[str, Any], rl: Sequence[str] = labels, cl: Sequence[str] = labels, p: str = "", out_proj: bool = run.model.out_proj,
        rh: set[int] = hidden, ch: set[int] = hidden,
    ) -> Iterator[list[tuple[Any, ...]]]:  # fmt: skip
        n = layer["layer"]
        if layer["input"] is not None:
            yield from vectors("input", "", n, layer["input"], rl, p)
        for head in layer["heads"]:
            h = head["head"]
            for table in VECTOR_TABLES:
                if table in head:  # a layer of weights alone has no vectors; cross-attention's keys and values are the source's
                    yield from vectors(table, h, n, head[table], cl if table in ("keys", "values") else rl, p)
            for table in MATRIX_TABLES:
                if table in head:
                    yield from squares(table, h, n, head[table], rl, cl, p, rh, ch)
            stats = head["stats"]
            yield [
                (index, tokenizer, p + "most_attended", h, n, i, j, rl[i], cl[j], w)
                for i, (j, w) in enumerate(zip(stats["most_attended"], stats["top_weight"]))
            ]
            for table in ("entropy_bits", "effective_tokens"):
                yield [(index, tokenizer, p + table, h, n, i, "", rl[i], "", v) for i, v in enumerate(stats[table])]
            yield [(index, tokenizer, p + table, h, n, "", "", "", "", stats[table]) for table in HEAD_STATS if stats.get(table) is not None]
        if "norms" in layer:
            yield from squares("layer_norms", "", n, layer["norms"], rl, cl, p)
        if out_proj and "concat" in layer:  # otherwise concat is the output itself
            yield from vectors("concat", "", n, layer["concat"], rl, p)
        if "output" in layer:
            yield from vectors("output", "", n, layer["output"], rl, p)

    for layer in run.layers:  # each layer's dict (and its derived tables) goes before the next is made
        yield from layer_rows(layer_dict(layer, run.shown_heads, _kept(run), table=StreamedTable))
    for key, stack in decoder_stacks(run):  # an encoder-decoder's decoder (T x T) and cross-attention (T x S)
        target = [t["label"] for t in token_dicts(stack.tokens)]
        prefix = "decoder." if key == "decoder_layers" else "cross."
        if prefix == "decoder.":  # the decoder's inputs, one per decoder row
            yield [(index, tokenizer, "decoder.token_id", "", "", i, "", target[i], "", tid) for i, tid in enumerate(stack.tokens.ids)]
        columns = target if prefix == "decoder." else labels
        row_hidden = set(stack.hiding.hidden) if stack.hiding is not None else set()
        column_hidden = row_hidden if prefix == "decoder." else hidden
        for layer in stack.layers:
            made = layer_dict(layer, stack.shown_heads, _kept(stack), table=StreamedTable, kept_rows=_kept_rows(stack))
            yield from layer_rows(made, target, columns, prefix, True, row_hidden, column_hidden)
    predictions = predictions_list(run)
    if predictions is not None:  # row: the position; col: the rank; value: the probability; col_token: the prediction
        positions = labels if run.target_tokens is None else [t["label"] for t in token_dicts(run.target_tokens)]  # the decoder's
        for entry in predictions:
            i = entry["position"]
            yield [(index, tokenizer, "predictions", "", "", i, r, positions[i], top["label"], top["prob"]) for r, top in enumerate(entry["top"])]
    rollout = rollout_dict(run, table=StreamedTable)
    if rollout is not None:  # its layer: the last layer rolled out through
        yield from squares("rollout", "", rollout["through_layer"], rollout["weights"])
        if "weights_shown" in rollout:
            yield from squares("rollout_shown", "", rollout["through_layer"], rollout["weights_shown"])


def csv_pieces(run: Trace, *, header: bool = True, index: int = 0) -> Iterator[str]:
    """The CSV text of ``csv_rows`` (with the header line when ``header``), about
    ``WRITE_CHARS`` a piece."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    for rows in _csv_batches(run, index):
        writer.writerows(rows)
        if buffer.tell() >= WRITE_CHARS // 4:  # a StringIO holds 4 bytes a character
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def write_csv(run: Trace, out: IO[bytes], *, header: bool = True, index: int = 0) -> None:
    """Write the run's CSV rows (after the header line when ``header``) to ``out`` as
    UTF-8, streamed like ``write_json``."""
    _before_streaming(run)
    _write(csv_pieces(run, header=header, index=index), out)


def to_csv(run: Trace, *, header: bool = True, index: int = 0) -> str:
    check_export_size(run)
    return "".join(csv_pieces(run, header=header, index=index))
