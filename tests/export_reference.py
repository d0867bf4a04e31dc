"""The JSON and CSV writer as it was before tables were streamed (commit 41d6613), kept
verbatim as the reference: tests/formats/test_export_stream.py checks that the streamed writer
writes the same bytes, and that this one, which holds the whole text, peaks far higher.

Only the size check before ``run_dict`` is left out (the reference is not the
program). The number format is copied, so a change to it shows here too; the
token dicts and the column names are imported.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Callable

import torch

from attn_cli.records.layers import LayerAttention
from attn_cli.formats.rows import CSV_COLUMNS
from attn_cli.formats.numbers import HEAD_STATS, MATRIX_TABLES, VECTOR_TABLES, token_dicts
from attn_cli.formats.document import SCHEMA_VERSION
from attn_cli.analysis.stats import attention_stats
from attn_cli.records.trace import Trace

FLOAT32 = "{:.9}"
_LARGE = re.compile(r"-?[0-9.]+e\+[0-9]+")
_INLINE = 4096
_FLOAT32_EXACT = (torch.float32, torch.bfloat16, torch.float16)


def float32_value(value: float) -> float:
    return float(FLOAT32.format(value))


def as_lists(tensor: torch.Tensor, nulls: bool = False) -> list[Any]:
    """A 2-D table as the lists of floats that ``to_json`` writes (``float32_value``);
    ``nulls``: NaN and infinities become None."""
    written = float32_value if tensor.dtype in _FLOAT32_EXACT else float  # a float64 table keeps all its digits
    if nulls:
        return [[written(v) if math.isfinite(v) else None for v in row] for row in tensor.tolist()]
    return [[written(v) for v in row] for row in tensor.tolist()]


class JsonTable:
    """A float32 table in ``run_dict(table=JsonTable)``, which ``to_json`` writes with
    ``FLOAT32`` in one ``str.format`` call per table (or per row of a large one) instead of
    one float repr per number through ``json``; ``nulls``: NaN and infinities are written ``null``."""

    __slots__ = ("tensor", "nulls")

    def __init__(self, tensor: torch.Tensor, nulls: bool = False) -> None:
        self.tensor, self.nulls = tensor, nulls

    def json(self) -> str:
        t = self.tensor
        field = FLOAT32 if t.dtype in _FLOAT32_EXACT else "{!r}"  # a float64 table keeps all its digits
        if t.numel() <= _INLINE:
            text = _template(tuple(t.shape), field).format(*t.reshape(-1).tolist())
        else:
            row = _template(tuple(t.shape[-1:]), field)
            text = _nest([row.format(*values) for values in t.reshape(-1, t.shape[-1]).tolist()], tuple(t.shape[:-1]))
        if "e+" in text:  # 1e9 and up: the notation of repr ("1234567890.0"), as json.dumps writes the same value
            text = _LARGE.sub(lambda m: repr(float(m[0])), text)
        if "n" in text:  # "inf", "-inf" or "nan": no finite number's text has an n
            if not self.nulls:
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


def _nest(rows: list[str], shape: tuple[int, ...]) -> str:
    """Written rows (the last dimension) -> the nested JSON arrays of ``shape`` around them."""
    if not shape:
        return rows[0]
    if len(shape) == 1:
        return "[" + ", ".join(rows) + "]"
    step = len(rows) // shape[0]
    return "[" + ", ".join(_nest(rows[i : i + step], shape[1:]) for i in range(0, len(rows), step)) + "]"


Table = Callable[..., Any]  # as_lists or JsonTable: what run_dict makes of each float32 table


def layer_dict(
    layer: LayerAttention, heads: Sequence[int], kept: Sequence[int] | None = None, *, table: Table = as_lists
) -> dict[str, Any]:
    """One ``layers[]`` object: its input, the chosen heads' tables and statistics, concat, output.
    ``kept``: the tokens --hide-tokens leaves (None: nothing hidden), for ``weights_shown``."""
    scaled = layer.scaled_scores
    shown = None if kept is None else _weights_shown(layer, heads, kept)
    stats = attention_stats(layer.weights[list(heads)], mask=layer.mask)
    entries = []
    for k, (h, head_stats) in enumerate(zip(heads, stats)):
        head = layer.head(h)
        entry: dict[str, Any] = {
            "head": h,
            "queries": table(head.queries),
            "keys": table(head.keys),
            "values": table(head.values),
            "scores": table(head.scores),
            "scaled_scores": table(scaled[h], nulls=True),
            "weights": table(head.weights),
            "context": table(head.context),
        }
        if layer.dropped_weights is not None:
            entry["dropped_weights"] = table(layer.dropped_weights[h])
        if shown is not None:
            entry["weights_shown"] = table(shown[k], nulls=True)
        entry["stats"] = head_stats.as_dict()
        entry["stats"]["top_weight"] = [float32_value(w) for w in head_stats.top_weight]  # float32 weights, as in the table
        entries.append(entry)
    return {
        "layer": layer.layer,
        "input": table(layer.x) if layer.x is not None else None,
        "heads": entries,
        "concat": table(layer.concat),
        "output": table(layer.output),
    }


def _weights_shown(layer: LayerAttention, heads: Sequence[int], kept: Sequence[int]) -> torch.Tensor:
    """(H', T, T): per chosen head, the renormalized weights (``attn_cli.records.hiding``) at the model's
    positions; NaN (``null``) in the hidden tokens' rows and columns, and in a row with no weight left."""
    from attn_cli.records.hiding import renormalize

    n = layer.weights.shape[-1]
    index = torch.tensor(list(kept))
    full = torch.full((len(heads), n, n), math.nan, dtype=layer.weights.dtype)
    full[:, index[:, None], index[None, :]] = renormalize(layer.weights[list(heads)], kept)  # (H', K, K)
    return full


def run_dict(run: Trace, *, table: Table = as_lists) -> dict[str, Any]:
    """The documented JSON object (README, "JSON schema"); ``table``: what each float32 table
    becomes (nested lists of floats, or ``JsonTable`` for ``to_json``)."""
    tokens = run.tokens
    hiding = run.hiding if run.hiding is not None and run.hiding.active else None
    return {
        "schema_version": SCHEMA_VERSION,
        "text": run.text,
        "pair": run.pair,
        "tokenizer": tokens.tokenizer,
        "vocab_size": tokens.vocab_size,
        "tokens": token_dicts(tokens, hiding.hidden if hiding else ()),
        "model": run.model.as_dict(),
        # the distance bins of each head's distance_mass (added with the statistics of long texts)
        "distance_bins": [[0, 0]] + [[2**k, 2 ** (k + 1) - 1] for k in range(len(tokens).bit_length()) if 2**k <= len(tokens) - 1],
        "layers": [layer_dict(layer, run.shown_heads, hiding.kept if hiding else None, table=table) for layer in run.layers],
    }


_dumps = functools.partial(json.dumps, allow_nan=False, ensure_ascii=False)


def _encode(value: Any) -> str:
    """JSON text of a value of run_dict(table=JsonTable), as json.dumps writes it (", " and ": "):
    tables and the layers' and heads' objects around them here, the rest through json."""
    if type(value) is JsonTable:
        return value.json()
    if type(value) is list and value and type(value[0]) is dict:  # layers, a layer's heads
        return "[" + ", ".join(
            "{" + ", ".join(f'"{key}": {_encode(v)}' for key, v in entry.items()) + "}" for entry in value
        ) + "]"
    if type(value) is int:
        return str(value)
    return _dumps(value)


def to_json(run: Trace) -> str:
    """The run as one line of JSON (the schema of ``run_dict``)."""
    data = run_dict(run, table=JsonTable)
    layers = data.pop("layers")  # the rest (tokens, model) has no tables: json writes it in one call
    return _dumps(data)[:-1] + ', "layers": ' + _encode(layers) + "}"


def csv_rows(run: Trace, index: int = 0) -> list[tuple[Any, ...]]:
    """Tidy rows (``CSV_COLUMNS``): one per head/query/key for matrices, per
    token/dimension for vectors, per query for the row statistics, one per head
    for the head statistics, and first one per token with its id (and, for a
    checkpoint's added tokens, ``special``; for a piece of a character, one per byte in
    ``token_bytes``). ``index`` is the text's place in a
    --lines batch; every row names the tokenizer actually used and the layer."""
    data = run_dict(run)
    labels = [t["label"] for t in data["tokens"]]
    tokenizer = data["tokenizer"]
    rows: list[tuple[Any, ...]] = [
        (index, tokenizer, "token_id", "", "", i, "", labels[i], "", t["id"]) for i, t in enumerate(data["tokens"])
    ]
    rows += [(index, tokenizer, "special", "", "", i, "", labels[i], "", 1) for i, t in enumerate(data["tokens"]) if t["special"]]
    rows += [(index, tokenizer, "hidden", "", "", i, "", labels[i], "", 1) for i, t in enumerate(data["tokens"]) if t["hidden"]]
    rows += [
        (index, tokenizer, "token_bytes", "", "", i, b, labels[i], "", byte)
        for i, t in enumerate(data["tokens"]) if t["partial"]
        for b, byte in enumerate(bytes.fromhex(t["bytes"]))
    ]

    def vectors(table: str, head: Any, layer: int, matrix: list[list[float]]) -> None:
        for i, vec in enumerate(matrix):
            rows.extend((index, tokenizer, table, head, layer, i, d, labels[i], "", v) for d, v in enumerate(vec))

    hidden = {i for i, t in enumerate(data["tokens"]) if t["hidden"]}

    def squares(table: str, head: Any, layer: int, matrix: list[list[float | None]]) -> None:
        if table == "weights_shown":  # the shown tokens' cells only; "" in a row with no weight left
            for i, vec in enumerate(matrix):
                if i not in hidden:
                    rows.extend(
                        (index, tokenizer, table, head, layer, i, j, labels[i], labels[j], "" if v is None else v)
                        for j, v in enumerate(vec) if j not in hidden
                    )
            return
        for i, vec in enumerate(matrix):
            rows.extend(
                (index, tokenizer, table, head, layer, i, j, labels[i], labels[j], "-inf" if v is None else v)
                for j, v in enumerate(vec)
            )

    for layer in data["layers"]:
        n = layer["layer"]
        if layer["input"] is not None:
            vectors("input", "", n, layer["input"])
        for head in layer["heads"]:
            h = head["head"]
            for table in VECTOR_TABLES:
                vectors(table, h, n, head[table])
            for table in MATRIX_TABLES:
                if table in head:
                    squares(table, h, n, head[table])
            stats = head["stats"]
            for i, (j, w) in enumerate(zip(stats["most_attended"], stats["top_weight"])):
                rows.append((index, tokenizer, "most_attended", h, n, i, j, labels[i], labels[j], w))
            for table in ("entropy_bits", "effective_tokens"):
                rows.extend((index, tokenizer, table, h, n, i, "", labels[i], "", v) for i, v in enumerate(stats[table]))
            for table in HEAD_STATS:
                if stats[table] is not None:
                    rows.append((index, tokenizer, table, h, n, "", "", "", "", stats[table]))
            rows.extend((index, tokenizer, "distance_mass", h, n, "", b, "", "", v) for b, v in enumerate(stats["distance_mass"]))
        if run.model.out_proj:  # otherwise concat is the output itself
            vectors("concat", "", n, layer["concat"])
        vectors("output", "", n, layer["output"])
    return rows


def to_csv(run: Trace, *, header: bool = True, index: int = 0) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_rows(run, index))
    return buffer.getvalue()
