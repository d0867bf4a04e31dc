"""Which map is faithful to the model: a deletion test (DeYoung et al. 2020, ERASER's comprehensiveness,
over bins as its AOPC). For a map's row at the position that makes the prediction, the n tokens that
are not special are ranked (highest first); for p in ``BINS`` the top ceil(p n / 100) are deleted and
the drop in the target's probability measured; AOPC = the mean of the drops. A faithful map deletes
what the prediction rests on first: its drops, and its AOPC, are large. The baseline: the mean of
``RANDOM_RANKINGS`` random rankings drawn with seed 0.

Here the arithmetic (rankings, cuts, curves); the model's probabilities after each deletion are the
source's (``sources.checkpoint.deletion``). No torch at import time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

BINS = (1, 5, 10, 20, 50)  # percent of the text's tokens that are not special
RANDOM_RANKINGS = 10
RANDOM_SEED = 0
# the maps a faithfulness run can rank, in the order the table lists them when tied, by --methods' names
METHODS = ("weights", "rollout", "norms", "flow", "value-zeroing-rollout", "alti", "attention-gradient")


@dataclasses.dataclass(frozen=True)
class Curve:
    """One ranking's drops in the target's probability, one per bin."""

    method: str
    drops: tuple[float, ...]

    @property
    def aopc(self) -> float:
        return sum(self.drops) / len(self.drops)

    def as_dict(self) -> dict[str, object]:
        return {"method": self.method, "aopc": self.aopc, "drops": list(self.drops)}


def ranking(row: Sequence[float], candidates: Sequence[int]) -> list[int]:
    """The ``candidates`` (positions) by the map's ``row``, highest first; equal values in position order."""
    return sorted(candidates, key=lambda j: (-float(row[j]), j))


def cut_sizes(n: int, bins: Sequence[int] = BINS) -> list[int]:
    """How many of ``n`` tokens each bin deletes: ceil(p n / 100)."""
    return [math.ceil(p * n / 100) for p in bins]


def random_rankings(candidates: Sequence[int], count: int = RANDOM_RANKINGS, seed: int = RANDOM_SEED) -> list[list[int]]:
    """``count`` random orders of the ``candidates``, drawn with ``seed`` (torch's generator: reproducible)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [[candidates[i] for i in torch.randperm(len(candidates), generator=generator).tolist()] for _ in range(count)]


def averaged(method: str, curves: Sequence[Curve]) -> Curve:
    """The curve of the mean drop in each bin over ``curves`` (texts, or random rankings)."""
    bins = len(curves[0].drops)
    return Curve(method, tuple(sum(c.drops[b] for c in curves) / len(curves) for b in range(bins)))


def ranked(curves: Sequence[Curve]) -> list[Curve]:
    """Most faithful first: by AOPC, ties in ``METHODS`` order."""
    order = {name: i for i, name in enumerate(METHODS)}
    return sorted(curves, key=lambda c: (-c.aopc, order.get(c.method, len(order)), c.method))


@dataclasses.dataclass(frozen=True)
class Faithfulness:
    """A deletion test's result: each map's curve (most faithful first), the random baseline's, the bins, and
    the targets (one per text; curves averaged over the texts)."""

    curves: tuple[Curve, ...]
    random: Curve
    targets: tuple[object, ...]  # records.results.Target, one per text
    delete_with: str
    bins: tuple[int, ...] = BINS

    def as_dict(self) -> dict[str, object]:
        """The JSON: ``{"bins", "target", "delete_with", "methods", "random"}`` (``target`` a list for several texts)."""
        targets = [t.as_dict() for t in self.targets]  # type: ignore[attr-defined]
        return {
            "bins": list(self.bins), "target": targets[0] if len(targets) == 1 else targets, "delete_with": self.delete_with,
            "methods": [c.as_dict() for c in self.curves], "random": {"aopc": self.random.aopc, "drops": list(self.random.drops)},
        }  # fmt: skip


def map_row(trace: object, method: str, position: int | None) -> list[float]:
    """``method``'s map row at ``position`` (None: the mean of every row, a classifier pooling every position):
    weights and norms from the last kept layer (the mean over heads, the layer's norms), the others through
    the layers (``Trace.combined``)."""
    t: Any = trace
    if method == "weights":
        table = t.layers[-1].weights.mean(dim=0)  # (T, T)
    elif method == "norms":
        table = t.layers[-1].layer_norms
    else:
        table = t.combined(method.replace("-", "_")).weights
    row = table.mean(dim=0) if position is None else table[position]
    return [float(v) for v in row]
