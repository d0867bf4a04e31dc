"""`attn-cli heads` for scripts: the documented JSON object and the CSV rows of a
``HeadsReport`` (``attn_cli.analysis.headroles``), one text at a time.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from attn_cli.analysis.headroles import HeadsReport
from attn_cli.formats.numbers import token_dicts


SCORES = (
    "self_mass", "previous_mass", "first_mass", "mean_entropy_bits", "special_mass", "norm_special_mass", "induction_score",
    "duplicate_score",
)  # fmt: skip



CSV_COLUMNS = ("text_index", "layer", "head", *SCORES, "role")



def heads_dict(report: HeadsReport, index: int | None = None) -> dict[str, Any]:
    """The documented JSON object of `attn-cli heads`."""
    data: dict[str, Any] = {}
    if index is not None:
        data["text_index"] = index
    heads = [h.as_dict() for h in report.heads]
    if report.ablation is not None:
        for entry, h in zip(heads, report.heads):
            entry["ablation_loss_delta"] = report.ablation.delta(h.layer, h.head)
    data.update(
        {
            "text": report.trace.text,
            **({"generated_text": report.trace.generated_text} if report.trace.prompt_length is not None else {}),
            "heads": heads,
            "probe": None if report.probe is None else report.probe.as_dict(),
            "probe_note": report.probe_note,
            "tokens": token_dicts(report.trace.tokens, report.trace.hiding.hidden if report.trace.hiding else (), report.trace.prompt_length),
            "model": report.trace.model.as_dict(),
        }
    )
    stack = report.trace.own_stack
    if stack.texts is not None:  # an encoder-decoder: the stack scored, and cross-attention's source
        data["stack"] = stack.name
        if stack.cross:
            data["source"] = stack.key_text
            data["source_tokens"] = token_dicts(stack.key_tokens)
    if report.ablation is not None:
        data["ablation"] = {"method": report.ablation.method, "clean_loss": report.ablation.clean_loss}
    return data



def to_json(report: HeadsReport, index: int | None = None) -> str:
    return json.dumps(heads_dict(report, index), ensure_ascii=False)



def to_csv(report: HeadsReport, *, header: bool, index: int = 0) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    ablated = report.ablation
    if header:
        writer.writerow((*CSV_COLUMNS, *(("ablation_loss_delta",) if ablated else ())))
    for h in report.heads:
        row = h.as_dict()
        extra = [repr(ablated.delta(h.layer, h.head))] if ablated else []
        writer.writerow([index, h.layer, h.head, *("" if row[s] is None else repr(row[s]) for s in SCORES), row["role"], *extra])
    return out.getvalue()
