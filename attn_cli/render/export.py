"""Machine formats: JSON (one object per text) and tidy long CSV.

Both are built from the same ``run_dict``, so the numbers cannot depend on the
format. Floats are the float32 values written at full precision (Python's
shortest repr of the exact value); masked softmax inputs are ``null`` in JSON
and ``-inf`` in CSV.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from attn_cli.pipeline import Run

SCHEMA_VERSION = 1

VECTOR_TABLES = ("queries", "keys", "values", "context")  # per head, (T, d)
MATRIX_TABLES = ("scores", "scaled_scores", "weights", "dropped_weights")  # per head, (T, T)
CSV_COLUMNS = ("table", "head", "row", "col", "row_token", "col_token", "value")


def run_dict(run: Run) -> dict[str, Any]:
    """The documented JSON object (README, "JSON schema")."""
    result = run.result
    scaled = result.scaled_scores
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


def csv_rows(run: Run) -> list[tuple[Any, ...]]:
    """Tidy rows: one per head/query/key for matrices, per token/dimension for vectors."""
    data = run_dict(run)
    labels = [t["label"] for t in data["tokens"]]
    rows: list[tuple[Any, ...]] = []

    def vectors(table: str, head: Any, matrix: list[list[float]]) -> None:
        for i, vec in enumerate(matrix):
            rows.extend((table, head, i, d, labels[i], "", v) for d, v in enumerate(vec))

    def squares(table: str, head: Any, matrix: list[list[float | None]]) -> None:
        for i, vec in enumerate(matrix):
            rows.extend(
                (table, head, i, j, labels[i], labels[j], "-inf" if v is None else v) for j, v in enumerate(vec)
            )

    vectors("embeddings", "", data["embeddings"])
    for head in data["heads"]:
        for table in VECTOR_TABLES:
            vectors(table, head["head"], head[table])
        for table in MATRIX_TABLES:
            if table in head:
                squares(table, head["head"], head[table])
    vectors("output", "", data["output"])
    return rows


def to_csv(run: Run, *, header: bool = True) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_rows(run))
    return buffer.getvalue()
