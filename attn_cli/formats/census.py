"""A census as JSON (docs/census.md), as CSV (one row per layer and head), and as a shard: the
tally's sums themselves, written so that they read back bit for bit (``shard_dict`` /
``tally_of``), for ``census merge``. No torch at import.
"""

from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attn_cli.analysis.tally import Tally
    from attn_cli.sources.census import Census

SCHEMA = "attn-cli census 1"
SHARD_SCHEMA = "attn-cli census shard 1"
TENSORS = ("row_sums", "row_counts", "text_means", "text_m2", "distance", "distance_means", "distance_m2", "histogram", "against_sums",
           "against_means", "against_m2")


def census_dict(census: Census) -> dict[str, Any]:
    """The documented JSON object."""
    from attn_cli.analysis.headcensus import entropy_edges
    from attn_cli.analysis.stats import distance_bins
    from attn_cli.analysis.tally import changed_heads, head_results, model_sink_rate

    tally, corpus = census.tally, census.corpus
    heads = head_results(tally)
    where = census.where
    for head in heads:
        for example in head["examples"]:
            example["where"] = where[example["text"]]
    made = {
        "schema": SCHEMA,
        "corpus": corpus.source,
        "texts": tally.texts,
        "corpus_texts": len(corpus.entries),
        "cut": census.cut,
        "tokens": tally.tokens,
        "empty": corpus.empty,
        "skipped": [s.as_dict() for s in corpus.skipped],
        "model": census.model.as_dict() if census.model is not None else None,
        **({"stack": census.stack} if census.stack else {}),
        "window": None if census.windows is None else {"size": census.windows.size, "stride": census.windows.stride},
        "epsilon": tally.epsilon,
        "distance_bins": [list(b) for b in distance_bins(tally.longest)],
        "entropy_bins_nats": entropy_edges()[:-1],
        "sink_rate": model_sink_rate(tally),
        **({"against": census.against, "changed": changed_heads(tally)} if tally.against else {}),
        "heads": heads,
    }
    return _finite(made)


def _finite(value: Any) -> Any:
    """NaN (an se of fewer than two texts) and infinities as null, as JSON has no such number."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def census_csv(census: Census) -> str:
    """One row per layer and head: each measure and its ``_se``, ``distance_mass_B`` bin by bin, the flags."""
    made = census_dict(census)
    heads = made["heads"]
    bins = len(made["distance_bins"])
    scalars = [name for name, value in heads[0]["measures"].items() if not isinstance(value, list)] if heads else []
    columns = ["layer", "head", *[c for name in scalars for c in (name, f"{name}_se")]]
    columns += [c for b in range(bins) for c in (f"distance_mass_{b}", f"distance_mass_{b}_se")] + ["flags"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for head in heads:
        measures, se = head["measures"], head["se"]
        row: list[Any] = [head["layer"], head["head"]]
        for name in scalars:
            row += [_cell(measures[name]), _cell(se[name])]
        for b in range(bins):
            row += [_cell(measures["distance_mass"][b]), _cell(se["distance_mass"][b])]
        writer.writerow([*row, ";".join(head["flags"])])
    return out.getvalue()


def _cell(value: float | None) -> str:
    return "" if value is None else repr(value)


def shard_dict(tally: Tally, texts: list[int], model: Any = None) -> dict[str, Any]:
    """A shard: the tally's sums (float64 as their repr, which reads back to the same bits), the
    corpus texts it covered, and the model that made it (its JSON object and its name)."""
    return {
        "schema": SHARD_SCHEMA, "model": None if model is None else model.as_dict(), "model_name": getattr(model, "name", None),
        "layers": tally.layers, "heads": tally.heads, "epsilon": tally.epsilon, "texts": tally.texts,
        "tokens": tally.tokens, "longest": tally.longest, "covered": texts, "against": tally.against,
        "tensors": {name: {"shape": list(getattr(tally, name).shape), "values": getattr(tally, name).reshape(-1).tolist()} for name in TENSORS},
        "examples": [[list(key), [list(item) for item in items]] for key, items in tally.examples.items()],
    }  # fmt: skip


def tally_of(shard: dict[str, Any]) -> Tally:
    """The tally a ``shard_dict`` holds (ValueError where it is not a shard)."""
    import torch

    from attn_cli.analysis.tally import Tally

    if shard.get("schema") != SHARD_SCHEMA:
        raise ValueError(f"not a census shard (its schema: {shard.get('schema')!r})")
    tensors = {
        name: torch.tensor(made["values"], dtype=torch.float64).reshape(made["shape"]) for name, made in shard["tensors"].items()
    }
    tally = Tally(shard["layers"], shard["heads"], shard["epsilon"], shard["texts"], shard["tokens"], shard["longest"], **tensors)
    tally.examples = {(k[0], k[1], k[2]): [tuple(item) for item in items] for k, items in shard["examples"]}
    tally.against = bool(shard.get("against"))
    return tally
