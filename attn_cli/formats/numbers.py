"""A table's numbers as JSON and CSV read them: float32 written to 9 significant digits
(``float32_value``, every float32 back bit for bit), a block of rows at a time
(``BLOCK_NUMBERS``, ``StreamedTable``), tokens as dicts, and what an export needs in
memory before it starts (``export_bytes``, ``check_export_size``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, Union

import torch

from attn_cli.analysis.stats import CHUNK_ROWS
from attn_cli.formats.floattext import FLOAT32, finished, json_numbers, json_rows
from attn_cli.records.layers import LayerAttention, LayerWeights
from attn_cli.records.summary import LayerSummary
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Stack, Trace

if TYPE_CHECKING:
    from attn_cli.records.results import Rollout


VECTOR_TABLES = ("queries", "keys", "values", "context")  # per head, (T, d)
MATRIX_TABLES = ("scores", "scaled_scores", "weights", "dropped_weights", "weights_shown", "norms")  # per head, (T, T)
HEAD_STATS = ("self_mass", "previous_mass", "first_mass", "sink_score")  # per head, one number
# Bytes of memory per number while a run is held whole (``run_dict``, ``to_json``,
# ``to_csv``): a Python float in a nested list (~32), its text (~20), and for CSV a
# row tuple around it (~100).
EXPORT_BYTES_PER_NUMBER = 160
# What a streamed export holds whatever the size of its tables: the text gathered
# for one write and its UTF-8 bytes (WRITE_CHARS each), one block's floats, text and
# CSV rows, the csv module's buffer (tracemalloc measured under 5 MiB, bench/json_memory.py),
# and floattext's tensors for TEXT_NUMBERS numbers (about 16 MB); with room for allocator slack.
STREAM_BYTES = 32 * 2**20


def export_numbers(run: Trace) -> int:
    """How many numbers the JSON (or CSV) of ``run`` holds: its own stack's with the top-level
    maps through the layers (rollout, flow, ...), and an encoder-decoder's decoder and cross-attention's."""
    own = _stack_numbers(run.own_stack, None)
    others = sum(_stack_numbers(run.own_stack, m) - own for m in (run.flow, *run.maps.values()) if m is not None)  # their (T, T)
    return _stack_numbers(run.own_stack, run.rollout) + others + sum(_stack_numbers(stack, stack.rollout) for _, stack in decoder_stacks(run))


def _stack_numbers(stack: Stack, rollout: Rollout | None) -> int:
    """How many numbers one stack's layers (and ``rollout``, when there is one) hold in the JSON."""
    n, heads = len(stack.tokens), len(stack.shown_heads)
    hidden = stack.hiding is not None and stack.hiding.active
    total = (2 if hidden else 1) * n * n if rollout is not None else 0  # rollout (and its weights_shown)
    for layer in stack.layers:
        if isinstance(layer, LayerSummary):  # statistics (five lists of T, and the distance bins) and the chosen rows
            total += heads * (5 * n + 64 + len(layer.queries) * layer.n_keys)
            continue
        rows, cols = layer.weights.shape[-2:]  # T x T, or T x S for cross-attention
        cells = rows * cols
        shown = heads * cells if hidden else 0  # weights_shown
        if layer.norms is not None:
            total += heads * cells + cells  # norms per head and per layer
        total += len(layer.maps) * cells  # value zeroing's, ALTI's
        if not isinstance(layer, LayerAttention):  # weights alone (a saved trace, attention from elsewhere)
            total += heads * cells + shown
            continue
        d_k, d_v, d_in = layer.queries.shape[-1], layer.values.shape[-1], layer.x.shape[-1] if layer.x is not None else 0
        squares = (4 if layer.dropped_weights is not None else 3) * heads * cells  # scores, scaled_scores, weights (dropped)
        squares += shown
        width = max(rows, cols)  # cross-attention's keys and values are the source's
        vectors = width * (d_in + heads * (2 * d_k + 2 * d_v) + layer.concat.shape[-1] + layer.output.shape[-1])  # x, Q, K, V, context, concat, output
        total += squares + vectors
    return total


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
    tables = any(not isinstance(layer, LayerSummary) for layer in run.layers)  # a summary's statistics are made
    stats = heads * 4 * 32 * n + tables * (  # the per-row lists
        2 * 8 * n * (heads * n if n <= CHUNK_ROWS else CHUNK_ROWS)  # entropy's float64 rows and their x log x
        + (0 if every_head else heads * n * n * 4)  # the chosen heads' weights, copied
    )
    need = scores + stats + STREAM_BYTES
    return need + export_numbers(run) * EXPORT_BYTES_PER_NUMBER if whole else need


def _derived_scores_bytes(layer: LayerWeights | LayerSummary) -> int:
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
        if tokens.unknown_name(i):  # a token the vocabulary lacks: its text is what it replaced
            entry["unknown"] = tokens.unknown_name(i)
        if pair:
            entry["segment"] = tokens.type_ids[i]
        if prompt_length is not None:
            entry["generated"] = i >= prompt_length
        out.append(entry)
    return out


def float32_value(value: float) -> float:
    """A float32 value as the JSON and CSV write it: rounded to 9 significant digits, which
    reads back as the same float32 (``json.dumps`` of the result is the text ``to_json`` writes)."""
    return float(FLOAT32.format(value))


BLOCK_NUMBERS = 4096  # numbers formatted at a time: a block of a table's rows (at least one), one cached template
TEXT_NUMBERS = 65536  # float32 numbers ``floattext`` writes at a time: its tensors' overhead spread, about 16 MB of them
TEXT_ABOVE = 2048  # and from how many on: below, a cached template's one str.format beats its tensor operations' start
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
    tensor = source if isinstance(source, torch.Tensor) else source[:]
    if tensor.dtype in _FLOAT32_EXACT and tensor.numel() >= TEXT_ABOVE and (nulls or bool(tensor.isfinite().all())):
        step = max(1, TEXT_NUMBERS // tensor.shape[-1])  # floattext's text read back, a block of rows at a time
        return [row for start in range(0, tensor.shape[0], step) for row in json.loads("".join(_float32_pieces(tensor[start : start + step], nulls)))]
    written = float32_value if source.dtype in _FLOAT32_EXACT else float  # a float64 table keeps all its digits
    if nulls:
        return [[written(v) if math.isfinite(v) else None for v in row] for row in tensor.tolist()]
    return [[written(v) for v in row] for row in tensor.tolist()]


class StreamedTable:
    """A float32 table in ``run_dict(table=StreamedTable)``: its source (a tensor, or
    ``Rows``), written a block of rows at a time, as JSON (``json_pieces``: by
    ``floattext`` for float32, not one float repr per number through ``json``) or as
    the rows of ``as_lists`` (``row_lists``, for CSV);
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


def streamed_rows(rows: torch.Tensor, nulls: bool = False) -> list[StreamedTable]:
    """(R, S) rows as R streamed (S,) rows, whose JSON text is made for several at once (``RowGroup``)."""
    group = RowGroup(rows, nulls)
    return [GroupRow(group, i) for i in range(rows.shape[0])]


class RowGroup:
    """Rows written together: float32 rows by one ``floattext.json_rows`` for about ``TEXT_NUMBERS`` numbers
    (a long text's chosen rows of one head: one call, not one a row), made when the first is written,
    each row's text let go once it is taken."""

    __slots__ = ("rows", "nulls", "_texts")

    def __init__(self, rows: torch.Tensor, nulls: bool) -> None:
        self.rows, self.nulls, self._texts = rows, nulls, None

    def text(self, i: int) -> str:
        if self._texts is None or self._texts[i] is None:
            if self.rows.dtype not in _FLOAT32_EXACT or self.rows.shape[-1] < TEXT_ABOVE:
                return "".join(StreamedTable(self.rows[i], self.nulls).json_pieces())
            step = max(1, TEXT_NUMBERS // self.rows.shape[-1])
            self._texts = [t for at in range(0, self.rows.shape[0], step) for t in json_rows(self.rows[at : at + step], nulls=self.nulls)]
        text, self._texts[i] = self._texts[i], None
        return text


class GroupRow(StreamedTable):
    """Row ``index`` of a ``RowGroup``: a streamed (S,) row whose text its group writes."""

    __slots__ = ("group", "index")

    def __init__(self, group: RowGroup, index: int) -> None:
        super().__init__(group.rows[index], group.nulls)
        self.group, self.index = group, index

    def json_pieces(self) -> Iterator[str]:
        yield self.group.text(self.index)


def _table_pieces(source: Source, field: str, nulls: bool) -> Iterator[str]:
    """A table's JSON text: float32 vectors and tables by ``floattext``, ``TEXT_NUMBERS`` numbers a
    piece; others in one piece up to ``BLOCK_NUMBERS`` numbers, else a block of rows a piece."""
    shape = tuple(source.shape)
    if field == FLOAT32 and len(shape) in (1, 2) and math.prod(shape) >= TEXT_ABOVE:
        yield from _float32_pieces(source, nulls)
        return
    if len(shape) != 2:  # no export table is one: a vector in one piece, a stack table by table
        if len(shape) <= 1:
            yield finished(_template(shape, field).format(*source.reshape(-1).tolist()), nulls)
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
        yield finished(_template(shape, field).format(*source[:].reshape(-1).tolist()), nulls)
        return
    yield "["
    for start in range(0, n_rows, step):
        block = source[start : start + step]
        if start:
            yield ", "
        yield finished(_rows_template(block.shape[0], width, field).format(*block.reshape(-1).tolist()), nulls)
    yield "]"


def _float32_pieces(source: Source, nulls: bool) -> Iterator[str]:
    """A (W,) vector's or an (R, W) table's JSON text, made ``TEXT_NUMBERS`` numbers at a time
    (a block of whole rows, or a piece of one long row)."""
    width, outer = source.shape[-1], len(source.shape) == 2
    step = max(1, TEXT_NUMBERS // width)
    yield "[" if outer else ""
    for start in range(0, source.shape[0] if outer else 1, step):
        flat = (source[start : start + step] if outer else source).reshape(-1)  # whole rows: row starts at multiples of W
        for at in range(0, flat.shape[0], TEXT_NUMBERS):
            yield ", " if start or at else ""
            yield json_numbers(flat[at : at + TEXT_NUMBERS], width, at, nulls=nulls)
    yield "]" if outer else ""


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


def decoder_stacks(run: Trace) -> list[tuple[str, Stack]]:
    """An encoder-decoder's decoder and cross-attention stacks (``Trace.stacks``) under their JSON
    keys, ``decoder_layers`` and ``cross_layers``; none for a trace of one stack."""
    stacks = run.stacks
    if len(stacks) == 1:
        return []
    return [("decoder_layers", stacks["decoder"]), ("cross_layers", stacks["cross"])]
