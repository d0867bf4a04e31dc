"""Machine formats: JSON (one object per text) and tidy long CSV.

Both are built from the same ``run_dict``, so the numbers cannot depend on the
format. Floats are the float32 values written at full precision (Python's
shortest repr of the exact value); masked softmax inputs are ``null`` in JSON
and ``-inf`` in CSV. The schema is documented in the README ("JSON schema");
``SCHEMA_VERSION`` changes when a key is renamed or removed, not when one is added.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from collections.abc import Sequence

from attn_cli.attention import LayerAttention
from attn_cli.stats import attention_stats
from attn_cli.tokens import Tokens
from attn_cli.trace import Trace

SCHEMA_VERSION = 2  # 2: heads moved into layers[], a model object, tokens[].special

VECTOR_TABLES = ("queries", "keys", "values", "context")  # per head, (T, d)
MATRIX_TABLES = ("scores", "scaled_scores", "weights", "dropped_weights", "weights_shown")  # per head, (T, T)
HEAD_STATS = ("self_mass", "previous_mass", "first_mass")  # per head, one number
CSV_COLUMNS = ("text_index", "tokenizer", "table", "head", "layer", "row", "col", "row_token", "col_token", "value")


# Bytes of memory per number while a run is exported: a Python float in a nested
# list (~32), its text (~20), and for CSV a row tuple around it (~100).
EXPORT_BYTES_PER_NUMBER = 160


def export_numbers(run: Trace) -> int:
    """How many numbers the JSON (or CSV) of ``run`` holds."""
    n, heads = len(run.tokens), len(run.shown_heads)
    total = 0
    for layer in run.layers:
        d_k, d_v, d_in = layer.queries.shape[-1], layer.values.shape[-1], layer.x.shape[-1] if layer.x is not None else 0
        squares = (4 if layer.dropped_weights is not None else 3) * heads * n * n  # scores, scaled_scores, weights (dropped)
        squares += heads * n * n if run.hiding is not None and run.hiding.active else 0  # weights_shown
        vectors = n * (d_in + heads * (2 * d_k + 2 * d_v) + layer.concat.shape[-1] + layer.output.shape[-1])  # x, Q, K, V, context, concat, output
        total += squares + vectors
    return total


def check_export_size(run: Trace) -> None:
    """Refuse an export that would not fit in memory, before building it."""
    from attn_cli import budget

    numbers = export_numbers(run)
    layers = f"{len(run.layers)} layer{'s' if len(run.layers) != 1 else ''} x " if run.model.layers > 1 else ""
    what = f"the {numbers:,} numbers of the JSON/CSV of {len(run.tokens)} tokens x {layers}{len(run.shown_heads)} heads"
    fix = "use a shorter text, fewer layers or heads (--layer, --head), or --format table (which summarises)"
    budget.check({"export": numbers * EXPORT_BYTES_PER_NUMBER}, {"export": what}, {"export": fix}, doing="this export")


def token_dicts(tokens: Tokens, hidden: Sequence[int] = ()) -> list[dict[str, Any]]:
    """The documented ``tokens`` array: position, id, text, label, special, hidden, partial (and
    bytes for a piece of a character, segment for pairs)."""
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
        out.append(entry)
    return out


def layer_dict(layer: LayerAttention, heads: Sequence[int], kept: Sequence[int] | None = None) -> dict[str, Any]:
    """One ``layers[]`` object: its input, the chosen heads' tables and statistics, concat, output.
    ``kept``: the tokens --hide-tokens leaves (None: nothing hidden), for ``weights_shown``."""
    scaled = layer.scaled_scores
    shown = None if kept is None else _weights_shown(layer, heads, kept)
    stats = attention_stats(layer.weights[list(heads)], mask=layer.mask)
    entries = []
    for h, head_stats in zip(heads, stats):
        head = layer.head(h)
        entry: dict[str, Any] = {
            "head": h,
            "queries": head.queries.tolist(),
            "keys": head.keys.tolist(),
            "values": head.values.tolist(),
            "scores": head.scores.tolist(),
            "scaled_scores": [[v if math.isfinite(v) else None for v in row] for row in scaled[h].tolist()],
            "weights": head.weights.tolist(),
            "context": head.context.tolist(),
        }
        if layer.dropped_weights is not None:
            entry["dropped_weights"] = layer.dropped_weights[h].tolist()
        if shown is not None:
            entry["weights_shown"] = shown[h]
        entry["stats"] = head_stats.as_dict()
        entries.append(entry)
    return {
        "layer": layer.layer,
        "input": layer.x.tolist() if layer.x is not None else None,
        "heads": entries,
        "concat": layer.concat.tolist(),
        "output": layer.output.tolist(),
    }


def _weights_shown(layer: LayerAttention, heads: Sequence[int], kept: Sequence[int]) -> dict[int, list[list[float | None]]]:
    """Per head, the (T, T) renormalized weights (``attn_cli.hiding``) at the model's positions:
    ``null`` in the hidden tokens' rows and columns, and in a row with no weight left."""
    from attn_cli.hiding import renormalize

    n = layer.weights.shape[-1]
    shown = renormalize(layer.weights[list(heads)], kept).tolist()  # (H', K, K)
    out = {}
    for h, matrix in zip(heads, shown):
        full: list[list[float | None]] = [[None] * n for _ in range(n)]
        for row, i in zip(matrix, kept):
            if not math.isnan(row[0]):
                for value, j in zip(row, kept):
                    full[i][j] = value
        out[h] = full
    return out


def run_dict(run: Trace) -> dict[str, Any]:
    """The documented JSON object (README, "JSON schema")."""
    check_export_size(run)
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
        "layers": [layer_dict(layer, run.shown_heads, hiding.kept if hiding else None) for layer in run.layers],
    }


def to_json(run: Trace, *, indent: int | None = None) -> str:
    return json.dumps(run_dict(run), allow_nan=False, ensure_ascii=False, indent=indent)


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
