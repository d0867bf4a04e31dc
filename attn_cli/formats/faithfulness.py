"""`attn-cli faithfulness`'s JSON and CSV (``analysis.faithfulness.Faithfulness``)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any


def json_text(result: Any) -> str:
    """``{"bins", "target", "delete_with", "methods": [{"method", "aopc", "drops"}], "random": {"aopc", "drops"}}``, one line."""
    return json.dumps(result.as_dict(), allow_nan=False, ensure_ascii=False) + "\n"


def csv_text(result: Any) -> str:
    """One row per map (the random baseline last) and bin: method, rank, aopc, bin (percent), drop."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["method", "rank", "aopc", "bin", "drop"])
    for rank, curve in enumerate([*result.curves, result.random], start=1):
        for p, drop in zip(result.bins, curve.drops):
            writer.writerow([curve.method, rank if curve is not result.random else "", curve.aopc, p, drop])
    return out.getvalue()
