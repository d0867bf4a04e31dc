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

from attn_cli.pipeline import Run
from attn_cli.render.stats import attention_stats

SCHEMA_VERSION = 1

VECTOR_TABLES = ("queries", "keys", "values", "context")  # per head, (T, d)
MATRIX_TABLES = ("scores", "scaled_scores", "weights", "dropped_weights")  # per head, (T, T)
HEAD_STATS = ("self_mass", "previous_mass", "first_mass")  # per head, one number
CSV_COLUMNS = ("text_index", "tokenizer", "table", "head", "row", "col", "row_token", "col_token", "value")


# Bytes of memory per number while a run is exported: a Python float in a nested
# list (~32), its text (~20), and for CSV a row tuple around it (~100).
EXPORT_BYTES_PER_NUMBER = 160


def export_numbers(run: Run) -> int:
    """How many numbers the JSON (or CSV) of ``run`` holds."""
    c, n = run.config, len(run.tokens)
    heads, d_k, d_v = c.heads, c.d_k or 0, c.d_v or 0
    squares = (4 if c.dropout else 3) * heads * n * n  # scores, scaled_scores, weights (and dropped_weights)
    vectors = n * ((c.d_model or 0) + heads * (2 * d_k + 2 * d_v) + 2 * heads * d_v)  # X, Q, K, V, context, concat, output
    return squares + vectors


def check_export_size(run: Run) -> None:
    """Refuse an export that would not fit in memory, before building it."""
    from attn_cli.errors import TooLargeError
    from attn_cli.pipeline import available_memory

    numbers = export_numbers(run)
    need, have = numbers * EXPORT_BYTES_PER_NUMBER, available_memory()
    if have is not None and need > have * 0.8:
        raise TooLargeError(
            f"the JSON/CSV of {len(run.tokens)} tokens x {run.config.heads} heads holds {numbers:,} numbers, "
            f"about {need / 2**30:.1f} GiB to build with {have / 2**30:.1f} GiB free; use a shorter text, "
            f"fewer heads, or --format table (which summarises)"
        )


def run_dict(run: Run) -> dict[str, Any]:
    """The documented JSON object (README, "JSON schema")."""
    check_export_size(run)
    result = run.result
    scaled = result.scaled_scores
    stats = attention_stats(result.weights, mask=result.mask)
    heads = []
    for h in range(result.n_heads):
        head = result.head(h)
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
        if result.dropped_weights is not None:
            entry["dropped_weights"] = result.dropped_weights[h].tolist()
        entry["stats"] = stats[h].as_dict()
        heads.append(entry)
    tokens = run.tokens
    return {
        "schema_version": SCHEMA_VERSION,
        "text": run.text,
        "tokenizer": tokens.tokenizer,
        "vocab_size": tokens.vocab_size,
        "tokens": [
            {"position": i, "id": tid, "text": text, "label": label}
            for i, (tid, text, label) in enumerate(zip(tokens.ids, tokens.texts, tokens.labels))
        ],
        "config": run.config.as_dict(),
        "embeddings": run.x.tolist(),
        "heads": heads,
        "concat": result.concat.tolist(),
        "output": result.output.tolist(),
    }


def to_json(run: Run, *, indent: int | None = None) -> str:
    return json.dumps(run_dict(run), allow_nan=False, ensure_ascii=False, indent=indent)


def csv_rows(run: Run, index: int = 0) -> list[tuple[Any, ...]]:
    """Tidy rows (``CSV_COLUMNS``): one per head/query/key for matrices, per
    token/dimension for vectors, per query for the row statistics, one per head
    for the head statistics, and first one per token with its id. ``index`` is the
    text's place in a --lines batch; every row names the tokenizer actually used."""
    data = run_dict(run)
    labels = [t["label"] for t in data["tokens"]]
    tokenizer = data["tokenizer"]
    rows: list[tuple[Any, ...]] = [
        (index, tokenizer, "token_id", "", i, "", labels[i], "", t["id"]) for i, t in enumerate(data["tokens"])
    ]

    def vectors(table: str, head: Any, matrix: list[list[float]]) -> None:
        for i, vec in enumerate(matrix):
            rows.extend((index, tokenizer, table, head, i, d, labels[i], "", v) for d, v in enumerate(vec))

    def squares(table: str, head: Any, matrix: list[list[float | None]]) -> None:
        for i, vec in enumerate(matrix):
            rows.extend(
                (index, tokenizer, table, head, i, j, labels[i], labels[j], "-inf" if v is None else v)
                for j, v in enumerate(vec)
            )

    vectors("embeddings", "", data["embeddings"])
    for head in data["heads"]:
        h = head["head"]
        for table in VECTOR_TABLES:
            vectors(table, h, head[table])
        for table in MATRIX_TABLES:
            if table in head:
                squares(table, h, head[table])
        stats = head["stats"]
        for i, (j, w) in enumerate(zip(stats["most_attended"], stats["top_weight"])):
            rows.append((index, tokenizer, "most_attended", h, i, j, labels[i], labels[j], w))
        for table in ("entropy_bits", "effective_tokens"):
            rows.extend((index, tokenizer, table, h, i, "", labels[i], "", v) for i, v in enumerate(stats[table]))
        for table in HEAD_STATS:
            if stats[table] is not None:
                rows.append((index, tokenizer, table, h, "", "", "", "", stats[table]))
    if run.config.out_proj:  # otherwise concat is the output itself
        vectors("concat", "", data["concat"])
    vectors("output", "", data["output"])
    return rows


def to_csv(run: Run, *, header: bool = True, index: int = 0) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_rows(run, index))
    return buffer.getvalue()
