"""`attn-cli compare` for scripts: its JSON document and tidy CSV, streamed from a
``Comparison`` (``attn_cli.analysis.compare``), whatever the two traces came from.
Shapes: T tokens, H the heads shown.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attn_cli.formats.numbers import StreamedTable, as_lists, token_dicts

if TYPE_CHECKING:
    from attn_cli.analysis.compare import Comparison
    from attn_cli.records.trace import Trace

# compare's own document, not run's trace: "schema" names it, and its version counts its own
# changes (run's trace has no "schema" key and is at schema_version 2); docs/analyses.md
SCHEMA = "compare"
SCHEMA_VERSION = 1
CSV_COLUMNS = ("table", "head", "layer", "row", "col", "row_token", "col_token", "value")


def pair_label(a: str, b: str) -> str:
    """A position's label in a comparison: the token, or "he→she" where the two differ."""
    return a if a == b else f"{a}→{b}"



def pair_labels(c: Comparison) -> list[str]:
    return [pair_label(x, y) for x, y in zip(c.a.tokens.labels, c.b.tokens.labels)]



def _run(trace: Trace) -> dict[str, Any]:
    return {"text": trace.text, "tokens": token_dicts(trace.tokens), "model": trace.model.as_dict()}



def listed(c: Comparison, top: int | None) -> dict[tuple[int, int], int]:
    """(layer, head) -> rank of the heads a document lists: the ``top`` that change most
    (as the table), or every head when ``top`` is None."""
    return {key: rank for key, rank in c.ranks().items() if top is None or rank <= top}



def comparison_dict(c: Comparison, *, table: Any = as_lists, top: int | None = None) -> dict[str, Any]:
    """The documented JSON object (docs/analyses.md): ``schema`` ("compare") and its
    ``schema_version``, ``a`` and ``b`` (text, tokens,
    model), ``top``, ``heads[]`` (rank, layer, head, mean_tv, max_tv, max_row; model
    order) and ``layers[].heads[].difference`` (B - A, T x T), of the ``top`` heads that
    change most or of every head."""
    ranks = listed(c, top)
    heads = list(c.a.shown_heads)
    layers = []
    for layer, diff in zip(c.a.layers, c.differences):
        kept = [{"head": h, "difference": table(diff[i])} for i, h in enumerate(heads) if (layer.layer, h) in ranks]
        if kept:
            layers.append({"layer": layer.layer, "heads": kept})
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "a": _run(c.a),
        "b": _run(c.b),
        "top": top,
        "heads": [{"rank": ranks[(h.layer, h.head)], **h.as_dict()} for h in c.heads if (h.layer, h.head) in ranks],
        "layers": layers,
    }



def json_pieces(c: Comparison, top: int | None = None) -> Iterator[str]:
    """``comparison_dict`` as one line of JSON, the differences written a block of rows at a time."""
    import json

    made = comparison_dict(c, table=StreamedTable, top=top)
    layers = made.pop("layers")
    yield json.dumps(made, ensure_ascii=False, allow_nan=False)[:-1] + ', "layers": ['
    for i, layer in enumerate(layers):
        yield ("" if i == 0 else ", ") + '{"layer": ' + str(layer["layer"]) + ', "heads": ['
        for j, head in enumerate(layer["heads"]):
            yield ("" if j == 0 else ", ") + '{"head": ' + str(head["head"]) + ', "difference": '
            yield from head["difference"].json_pieces()
            yield "}"
        yield "]}"
    yield "]}"



def csv_pieces(c: Comparison, top: int | None = None) -> Iterator[str]:
    """Tidy rows (``CSV_COLUMNS``): ``token_a``/``token_b`` (a row per position, the id as
    value), ``rank``, ``mean_tv`` and ``max_tv`` (a row per head, ``row`` of max_tv its query
    row), ``tv`` (a row per head and query) and ``difference`` (a row per head, query and
    key), of the ``top`` heads that change most or of every head."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    labels = pair_labels(c)
    ranks = listed(c, top)
    for name, trace in (("token_a", c.a), ("token_b", c.b)):
        writer.writerows((name, "", "", i, "", label, "", tid) for i, (label, tid) in enumerate(zip(trace.tokens.labels, trace.tokens.ids)))
    for h in (h for h in c.heads if (h.layer, h.head) in ranks):
        writer.writerow(("rank", h.head, h.layer, "", "", "", "", ranks[(h.layer, h.head)]))
        writer.writerow(("mean_tv", h.head, h.layer, "", "", "", "", h.mean_tv))
        writer.writerow(("max_tv", h.head, h.layer, h.max_row, "", labels[h.max_row], "", h.max_tv))
    yield buffer.getvalue()
    heads = list(c.a.shown_heads)
    for layer, diff in zip(c.a.layers, c.differences):
        for i, h in ((i, h) for i, h in enumerate(heads) if (layer.layer, h) in ranks):
            buffer.seek(0)
            buffer.truncate()
            tv = (0.5 * diff[i].double().abs().sum(dim=-1)).tolist()  # (T,)
            writer.writerows(("tv", h, layer.layer, q, "", labels[q], "", v) for q, v in enumerate(tv))
            for q, row in enumerate(StreamedTable(diff[i]).row_lists()):
                writer.writerows(("difference", h, layer.layer, q, k, labels[q], labels[k], v) for k, v in enumerate(row))
            yield buffer.getvalue()
