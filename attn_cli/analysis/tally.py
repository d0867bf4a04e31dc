"""A corpus's census of every layer and head: numbers that merge exactly (float64 counts and sums,
the per-text values' means and sums of squared deviations merged as Chan et al. 1979 do, fixed-bin
histograms, top-K lists), so that shards combine into the same numbers, to float64's last bits,
in any order and any split. Pure torch, no I/O (``formats.census`` writes it).

Shapes: L layers, H heads, M row measures (``headcensus.ROW_MEASURES``), B distance bins, E
entropy bins.

Averaging, stated once: a row measure is averaged over every query row of every text
(token-weighted: its sum over rows over its number of rows); a text measure (``sink_score``,
``first_row_entropy_nats``) over texts; a rate (``sink_rate``) is the share of texts. ``se``: the
standard deviation of the per-text values (ddof 1) over the square root of the number of texts.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Sequence
from typing import Any

import torch

from attn_cli.analysis.headcensus import EXAMPLE_MEASURES, ROW_MEASURES

TEXT_MEASURES = ("sink_score", "first_row_entropy_nats", "sink_rate")
# the flags, with the papers' thresholds: (name, measure, threshold, strict)
FLAGS = (
    ("broad", "entropy_nats", 3.8, True),  # Clark et al. 2019
    ("previous", "previous", 0.5, True),
    ("next", "next", 0.5, True),
    ("special", "cls", 0.6, True),
    ("special", "sep", 0.6, True),
    ("positional", "positional", 0.9, False),  # Voita et al. 2019
    ("sink", "sink_rate", 0.5, True),
)
EXAMPLE_OF = {"entropy_nats": "entropy_nats", "previous": "previous", "next": "next", "cls": "cls", "sep": "sep",
              "positional": "confidence", "sink_rate": "cls"}  # fmt: skip  a flag's measure -> the row value its examples rank by
EXAMPLES = 5  # texts a head's examples list
DISTANCES = ("distance", "distance_means", "distance_m2")


@dataclasses.dataclass
class Tally:
    """Every (layer, head)'s sums over the texts seen so far."""

    layers: int
    heads: int
    epsilon: float = 0.3  # a text's sink score above it counts toward the sink rate (strict, as Gu et al.'s code)
    texts: int = 0
    tokens: int = 0
    longest: int = 0  # the most tokens a text had: the distance bins reach its longest distance
    row_sums: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, M)
    row_counts: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (M,) rows each measure is over
    text_means: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, M + 3) per-text values' mean
    text_m2: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, M + 3) their squared deviations summed
    distance: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, B) summed over rows
    distance_means: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, B) per-text profiles' mean
    distance_m2: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, B) their squared deviations
    histogram: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]  # (L, H, E)
    # --against M2: each row's total variation from the other model's, summed (L, H); the per-text
    # cosine and mean total variation's mean and squared deviations (L, H, 2)
    against_sums: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]
    against_means: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]
    against_m2: torch.Tensor = dataclasses.field(default=None)  # type: ignore[assignment]
    against: bool = False  # whether the texts were compared with another model's
    examples: dict[tuple[int, int, str], list[tuple[float, int, int, int]]] = dataclasses.field(default_factory=dict)
    # (layer, head, measure) -> the strongest (value, -text, -window, -query) rows, a min-heap of EXAMPLES: the
    # largest values, and of equal values the earliest text, window and query

    def __post_init__(self) -> None:
        from attn_cli.analysis.headcensus import ENTROPY_BINS

        shape = (self.layers, self.heads)
        n = len(ROW_MEASURES) + len(TEXT_MEASURES)
        for name, size in (("row_sums", len(ROW_MEASURES)), ("text_means", n), ("text_m2", n), ("histogram", ENTROPY_BINS)):
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros(*shape, size, dtype=torch.float64))
        if self.row_counts is None:
            self.row_counts = torch.zeros(len(ROW_MEASURES), dtype=torch.float64)
        for name in DISTANCES:
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros(*shape, 0, dtype=torch.float64))
        for name, size in (("against_sums", ()), ("against_means", (2,)), ("against_m2", (2,))):
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros(*shape, *size, dtype=torch.float64))

    def add(self, layer: int, places: Sequence[tuple[int, int]], made: dict[str, Any]) -> None:
        """Fold a batch's ``TextLayer.result()`` of ``layer`` in: its texts (each a text, or one window of
        a long text's) at ``places`` (text, window), in the result's order (call ``count_text`` once per
        text or window after its every layer). The batch's per-text values join the running means as one
        group (Chan et al.'s merge; Welford's update for a batch of one)."""
        sums, counts = made["sums"], made["counts"]  # (B, H, M), (B, M)
        lengths = torch.tensor(made["lengths"], dtype=torch.float64)  # (B,)
        if layer == 0:
            self.row_counts += counts.sum(dim=0)
        per_text = torch.cat([sums / counts.clamp_min(1)[:, None, :], _text_values(made, self.epsilon)], dim=-1)  # (B, H, M + 3)
        self.row_sums[layer] += sums.sum(dim=0)
        _join(self.text_means[layer], self.text_m2[layer], per_text, self.texts)
        distance = made["distance"]  # (B, H, B')
        self._widen(distance.shape[-1])
        profile = _pad(distance / lengths[:, None, None], self.distance.shape[-1])  # (B, H, bins) a shorter text's far bins hold 0
        self.distance[layer, :, : distance.shape[-1]] += distance.sum(dim=0)
        _join(self.distance_means[layer], self.distance_m2[layer], profile, self.texts)
        self.histogram[layer] += made["histogram"].sum(dim=0)
        if "against" in made:  # {"cosine": (B, H), "tv": (B, H) summed over rows}
            self.against = True
            self.against_sums[layer] += made["against"]["tv"].sum(dim=0)
            per_text = torch.stack([made["against"]["cosine"], made["against"]["tv"] / lengths[:, None]], dim=-1)  # (B, H, 2)
            _join(self.against_means[layer], self.against_m2[layer], per_text, self.texts)
        self._examples(layer, places, made["rows"])

    def _examples(self, layer: int, places: Sequence[tuple[int, int]], rows: dict[str, torch.Tensor]) -> None:
        """Each head's strongest rows of the batch offered to its examples, largest first and of equal values
        the earliest (text, window, query), while they beat the list's least: the rows at or above the
        head's EXAMPLES-th largest value, in the batch's order, sorted stably."""
        order = sorted(range(len(places)), key=lambda b: places[b])
        for m in EXAMPLE_MEASURES:
            values = rows[m][order]  # (B, H, T) texts in order, -inf past a text's end
            n_tokens = values.shape[-1]
            flat = values.permute(1, 0, 2).reshape(values.shape[1], -1)  # (H, B*T)
            least = flat.topk(min(EXAMPLES, flat.shape[-1]), dim=-1).values[:, -1:]  # (H, 1) the EXAMPLES-th largest
            tied = flat == least  # (H, B*T) of the rows equal to it only the earliest EXAMPLES can be taken (saturated heads have many)
            chosen = ((flat > least) | (tied & (tied.cumsum(dim=-1) <= EXAMPLES))) & (flat > -math.inf)  # (H, B*T)
            by_head: dict[int, list[tuple[float, int]]] = {}
            for (h, at), value in zip(chosen.nonzero().tolist(), flat[chosen].tolist()):  # row-major: each head's in order
                by_head.setdefault(h, []).append((value, at))
            for h, found in by_head.items():
                key = (layer, h, m)
                for value, at in sorted(found, key=lambda item: -item[0])[:EXAMPLES]:  # stable: of equal values the earliest
                    if value < self._floor(key):  # nor any after it
                        break
                    text, window = places[order[at // n_tokens]]
                    self._offer(key, (value, -text, -window, -(at % n_tokens)))

    def count_text(self, n_tokens: int) -> None:
        self.texts += 1
        self.tokens += n_tokens
        self.longest = max(self.longest, n_tokens)

    def _widen(self, bins: int) -> None:
        """Room for ``bins`` distance bins (a longer text reaches farther; the shorter ones put 0 there)."""
        have = self.distance.shape[-1]
        if bins > have:
            for name in DISTANCES:
                setattr(self, name, torch.nn.functional.pad(getattr(self, name), (0, bins - have)))

    def _floor(self, key: tuple[int, int, str]) -> float:
        """The least value a full list of examples holds (-inf while it has room)."""
        kept = self.examples.get(key)
        return kept[0][0] if kept is not None and len(kept) == EXAMPLES else float("-inf")

    def _offer(self, key: tuple[int, int, str], item: tuple[float, int, int, int]) -> None:
        kept = self.examples.setdefault(key, [])
        if len(kept) == EXAMPLES and item[0] < kept[0][0]:
            return
        if len(kept) < EXAMPLES:
            heapq.heappush(kept, item)
        elif item > kept[0]:
            heapq.heapreplace(kept, item)

    def merge(self, other: Tally) -> Tally:
        """The tally of both corpora (the same model's layers and heads, the same epsilon)."""
        if (self.layers, self.heads, self.epsilon) != (other.layers, other.heads, other.epsilon):
            raise ValueError("tallies of different models or epsilons cannot be merged")
        made = Tally(self.layers, self.heads, self.epsilon, self.texts + other.texts, self.tokens + other.tokens, max(self.longest, other.longest))
        for name in ("row_sums", "row_counts", "histogram", "against_sums"):
            setattr(made, name, getattr(self, name) + getattr(other, name))
        made.against = self.against or other.against
        bins = max(self.distance.shape[-1], other.distance.shape[-1])
        made.distance = _pad(self.distance, bins) + _pad(other.distance, bins)
        for means, m2, width in (("text_means", "text_m2", None), ("distance_means", "distance_m2", bins), ("against_means", "against_m2", None)):
            pad = (lambda x: x) if width is None else (lambda x: _pad(x, bins))
            mean, deviations = _chan(
                (pad(getattr(self, means)), pad(getattr(self, m2)), self.texts), (pad(getattr(other, means)), pad(getattr(other, m2)), other.texts)
            )  # fmt: skip
            setattr(made, means, mean)
            setattr(made, m2, deviations)
        for source in (self, other):
            for key, items in source.examples.items():
                for item in items:
                    made._offer(key, item)
        return made


def _join(mean: torch.Tensor, m2: torch.Tensor, values: torch.Tensor, n_before: int) -> None:
    """The running mean and sum of squared deviations of ``n_before`` values, in place, with a group of
    B more (B, ...) joined (Chan, Golub and LeVeque 1979; for B = 1, Welford 1962's update)."""
    group = values.mean(dim=0)
    deviations = ((values - group) ** 2).sum(dim=0)
    n_group = values.shape[0]
    delta = group - mean
    mean += delta * (n_group / (n_before + n_group))
    m2 += deviations + delta**2 * (n_before * n_group / (n_before + n_group))


def _chan(a: tuple[torch.Tensor, torch.Tensor, int], b: tuple[torch.Tensor, torch.Tensor, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Two groups' (mean, squared deviations, count) as one group's (Chan, Golub and LeVeque 1979)."""
    (mean_a, m2_a, n_a), (mean_b, m2_b, n_b) = a, b
    n = n_a + n_b
    if n == 0:
        return mean_a.clone(), m2_a.clone()
    delta = mean_b - mean_a
    return mean_a + delta * (n_b / n), m2_a + m2_b + delta**2 * (n_a * n_b / n)


def _text_values(made: dict[str, Any], epsilon: float) -> torch.Tensor:
    """(B, H, 3) each text's sink score, first-row entropy and whether its sink score is over epsilon."""
    sink = made["sink"]  # (B, H)
    return torch.stack([sink, made["first_row_entropy"], (sink > epsilon).double()], dim=-1)


def _pad(x: torch.Tensor, bins: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, bins - x.shape[-1]))


def se_of(m2: torch.Tensor, n: int) -> torch.Tensor:
    """The standard error of per-text values from their sum of squared deviations: the standard
    deviation (ddof 1) over sqrt(n); NaN for fewer than two texts."""
    if n < 2:
        return torch.full_like(m2, float("nan"))
    return (m2.clamp_min(0.0) / (n - 1) / n).sqrt()


def head_results(tally: Tally) -> list[dict[str, Any]]:
    """One object per layer and head, in model order: measures, their se, flags, examples, the entropy histogram."""
    from attn_cli.analysis.headcensus import entropy_edges

    n, m = tally.texts, len(ROW_MEASURES)
    means = torch.cat([tally.row_sums / tally.row_counts.clamp_min(1), tally.text_means[..., m:]], dim=-1)  # (L, H, M + 3)
    errors = se_of(tally.text_m2, n)  # (L, H, M + 3)
    names = ROW_MEASURES + TEXT_MEASURES
    distance = tally.distance / tally.row_counts[ROW_MEASURES.index("self")].clamp_min(1)  # (L, H, B)
    distance_se = se_of(tally.distance_m2, n)
    made = []
    for layer in range(tally.layers):
        for head in range(tally.heads):
            values = dict(zip(names, means[layer, head].tolist()))
            se = dict(zip(names, errors[layer, head].tolist()))
            larger = "top_previous" if values["top_previous"] >= values["top_next"] else "top_next"
            values["positional"], se["positional"] = values[larger], se[larger]
            for name in ("top_previous", "top_next"):
                values.pop(name), se.pop(name)
            values["distance_mass"], se["distance_mass"] = distance[layer, head].tolist(), distance_se[layer, head].tolist()
            if tally.against:  # Kovaleva et al.'s cosine of the flattened maps, over texts; the rows' total variation
                rows = float(tally.row_counts[ROW_MEASURES.index("self")].clamp_min(1))
                values["cosine"], values["tv"] = float(tally.against_means[layer, head, 0]), float(tally.against_sums[layer, head]) / rows
                se["cosine"], se["tv"] = se_of(tally.against_m2[layer, head], n).tolist()
            flags, strongest = _flags(values)
            made.append({
                "layer": layer, "head": head, "measures": values, "se": se, "flags": flags,
                "examples": _examples(tally, layer, head, strongest),
                "entropy_histogram": {"edges_nats": entropy_edges()[:-1], "counts": [int(c) for c in tally.histogram[layer, head].tolist()]},
            })  # fmt: skip
    return made


def _flags(values: dict[str, Any]) -> tuple[list[str], str]:
    """The head's flags (each once) and the measure of its strongest: the flagged measure furthest
    over its threshold (by ratio); where nothing is flagged, the measure nearest to its threshold."""
    flags: list[str] = []
    ratios = {}
    for flag, measure, threshold, strict in FLAGS:
        value = values[measure]
        ratios[measure] = value / threshold
        if (value > threshold if strict else value >= threshold) and flag not in flags:
            flags.append(flag)
    flagged = [measure for flag, measure, threshold, strict in FLAGS if flag in flags and ratios[measure] >= 1]
    return flags, max(flagged or list(ratios), key=ratios.__getitem__)


def _examples(tally: Tally, layer: int, head: int, measure: str) -> list[dict[str, Any]]:
    """The texts (and query rows) where the row value of ``measure``'s examples is highest, highest first."""
    ranked = EXAMPLE_OF[measure]
    items = sorted(tally.examples.get((layer, head, ranked), []), reverse=True)
    return [{"text": -t, "window": -w, "query": -q, "measure": ranked, "value": v} for v, t, w, q in items]


def changed_heads(tally: Tally) -> list[dict[str, Any]]:
    """--against: every head by its rows' mean total variation from the other model's, largest first."""
    if not tally.against:
        return []
    rows = float(tally.row_counts[ROW_MEASURES.index("self")].clamp_min(1))
    tv = (tally.against_sums / rows).tolist()  # (L, H)
    made = [{"layer": l, "head": h, "tv": tv[l][h]} for l in range(tally.layers) for h in range(tally.heads)]
    return sorted(made, key=lambda entry: (-entry["tv"], entry["layer"], entry["head"]))


def model_sink_rate(tally: Tally) -> float | None:
    """Gu et al.'s Sink_1^epsilon: the share of (text, layer, head) whose sink score is over epsilon."""
    if not tally.texts:
        return None
    index = len(ROW_MEASURES) + TEXT_MEASURES.index("sink_rate")
    return float(tally.text_means[..., index].mean())  # each (layer, head)'s share over the same texts
