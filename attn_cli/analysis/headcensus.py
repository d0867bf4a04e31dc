"""One text's census measures of one layer, gathered from blocks of query rows as they pass
(``sources.blocks``) or from a whole table given as one block: the sums that ``analysis.tally``
folds into a corpus's numbers. Pure torch, no I/O.

Shapes: H heads, T query rows (= S keys: self-attention), R rows in a block, K the keys a block
holds (``first`` .. ``first + K - 1``; every other key's weight is 0), B distance bins.

Per head, summed over the text's rows in float64 (each with the number of rows it is over):
  - ``cls``: w[i, 0], every row; ``sep``: the weight on the keys at positions > 0 whose id is a
    separator or end-of-sequence id; ``punct``: on the keys whose text, stripped of spaces and
    word markers, is "." or ","; ``self``: w[i, i];
  - ``previous``: w[i, i-1] over rows 1 .. T-1; ``next``: w[i, i+1] over rows 0 .. T-2;
  - ``first_mass``: w[i, 0] over rows 1 .. T-1 (attn-cli's ``first_mass``);
  - ``entropy_nats``: -sum_j w log w in nats, exact (float64, no smoothing), every row;
  - ``confidence``: each row's top weight; ``top_previous``, ``top_next``: rows whose top key
    (the first of equal maxima) is i - 1, i + 1, counted over every row;
  - ``sink``: w[i, 0] over the rows that may see key 0 (Gu et al.'s first-token score is its mean);
  - per distance bin |i - j|, the weight summed over rows; each row's entropy in fixed bins;
  - and the row values of the text's strongest rows for the examples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attn_cli.analysis.stats import binned, distance_bins, skewed_columns
from attn_cli.records.band import Band

ROW_MEASURES = ("cls", "sep", "punct", "self", "previous", "next", "entropy_nats", "first_mass", "confidence", "top_previous", "top_next")
EXAMPLE_MEASURES = ("cls", "sep", "previous", "next", "entropy_nats", "confidence")  # a row value each, for the examples
ENTROPY_STEP = 0.25  # nats a bin of the entropy histogram
ENTROPY_BINS = 48  # 0 .. 12 nats; a larger entropy in the last bin
TOP_ROWS = 5  # a text's strongest rows kept per head and measure, for the examples


class TextLayer:
    """A block consumer: one text's sums of one layer's census measures, every head."""

    def __init__(self, heads: int, n_tokens: int, *, band: Band, sep: Sequence[int], punct: Sequence[int]) -> None:
        self.heads, self.n_tokens, self.band = heads, n_tokens, band
        self.sep = torch.tensor(sorted(set(sep)), dtype=torch.long)  # (F,) key positions
        self.punct = torch.tensor(sorted(set(punct)), dtype=torch.long)  # (P,)
        self.sees_first = torch.tensor([band.before is None or i <= band.before for i in range(n_tokens)])  # (T,)
        self.sums = torch.zeros(heads, len(ROW_MEASURES), dtype=torch.float64)  # (H, M)
        self.sink = torch.zeros(heads, dtype=torch.float64)  # (H,)
        self.first_row_entropy = torch.zeros(heads, dtype=torch.float64)  # (H,)
        self.by_offset = torch.zeros(heads, 2 * n_tokens - 1, dtype=torch.float64)  # (H, 2T - 1) weight at offset j - i
        self.histogram = torch.zeros(heads, ENTROPY_BINS, dtype=torch.float64)  # (H, E) rows per entropy bin
        self.rows = {m: torch.zeros(heads, n_tokens, dtype=torch.float64) for m in EXAMPLE_MEASURES}  # (H, T) row values
        self.seen = [0] * heads

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0, head: int = 0) -> None:
        """Rows start .. start + R - 1 of (H', R, K) weights of heads head .. head + H' - 1, keys first .. first + K - 1."""
        heads = slice(head, head + weights.shape[0])
        if any(self.seen[h] != start for h in range(heads.start, heads.stop)):
            raise ValueError(f"rows from {start} after {self.seen[head]} rows: a head's blocks must come in order")
        end = start + weights.shape[-2]
        rows = torch.arange(start, end)  # (R,) positions in the text
        w = weights.double().cpu()  # (H', R, K) float64: every sum below is float64
        values = {
            "cls": _column(w, 0, first), "sep": _keys(w, self.sep, first), "punct": _keys(w, self.punct, first),
            "self": _diagonal(w, rows, 0, first), "previous": _diagonal(w, rows, -1, first), "next": _diagonal(w, rows, 1, first),
            "entropy_nats": torch.special.entr(w).sum(dim=-1),
        }  # fmt: skip  (H', R) each
        top = w.max(dim=-1)  # (H', R) the first of equal maxima
        values["confidence"] = top.values
        values["top_previous"] = (top.indices + first == rows - 1).double()
        values["top_next"] = (top.indices + first == rows + 1).double()
        values["first_mass"] = torch.where(rows >= 1, values["cls"], 0.0)
        self.sums[heads] += torch.stack([values[m].sum(dim=-1) for m in ROW_MEASURES], dim=-1)  # (H', M)
        self.sink[heads] += (values["cls"] * self.sees_first[start:end]).sum(dim=-1)
        if start == 0:
            self.first_row_entropy[heads] = values["entropy_nats"][:, 0]
        bins = (values["entropy_nats"] / ENTROPY_STEP).floor().clamp(0, ENTROPY_BINS - 1).long()  # (H', R)
        self.histogram[heads] += torch.nn.functional.one_hot(bins, ENTROPY_BINS).double().sum(dim=-2)
        for m in EXAMPLE_MEASURES:
            self.rows[m][heads, start:end] = values[m]
        columns = skewed_columns(weights.float().cpu())  # (H', K + R - 1) by offset j - i
        lowest = first - start - (weights.shape[-2] - 1) + self.n_tokens - 1  # where column 0 lands in ``by_offset``
        self.by_offset[heads, lowest : lowest + columns.shape[-1]] += columns.double()
        for h in range(heads.start, heads.stop):
            self.seen[h] = end

    def result(self) -> dict[str, torch.Tensor]:
        """The text's sums: ``sums`` (H, M), ``counts`` (M,) rows each is over, ``sink`` (H,) the mean
        over the rows that see key 0, ``first_row_entropy`` (H,), ``distance`` (H, B), ``histogram`` (H, E),
        ``rows``: each example measure's (H, T) row values."""
        if any(seen != self.n_tokens for seen in self.seen):
            raise ValueError(f"{min(self.seen)} of {self.n_tokens} rows were gathered: every block must pass")
        t = self.n_tokens
        counts = {m: t for m in ROW_MEASURES} | {"previous": t - 1, "next": t - 1, "first_mass": t - 1}
        return {
            "sums": self.sums, "counts": torch.tensor([counts[m] for m in ROW_MEASURES], dtype=torch.float64),
            "sink": self.sink / int(self.sees_first.sum()), "first_row_entropy": self.first_row_entropy,
            "distance": binned(self.by_offset, t - 1, distance_bins(t)), "histogram": self.histogram, "rows": self.rows,
        }  # fmt: skip


def _column(w: torch.Tensor, key: int, first: int) -> torch.Tensor:
    """(H', R, K) -> (H', R): each row's weight on ``key`` (0 where the block does not hold it)."""
    if not first <= key < first + w.shape[-1]:
        return torch.zeros(w.shape[:-1], dtype=w.dtype)
    return w[..., key - first]


def _keys(w: torch.Tensor, keys: torch.Tensor, first: int) -> torch.Tensor:
    """(H', R, K) -> (H', R): each row's weight summed over ``keys`` the block holds."""
    inside = keys[(keys >= first) & (keys < first + w.shape[-1])] - first
    return w[..., inside].sum(dim=-1) if len(inside) else torch.zeros(w.shape[:-1], dtype=w.dtype)


def _diagonal(w: torch.Tensor, rows: torch.Tensor, offset: int, first: int) -> torch.Tensor:
    """(H', R, K) -> (H', R): w[i, i + offset] for each row i (0 where that key is outside the text or the block)."""
    columns = rows + offset - first  # (R,)
    inside = (columns >= 0) & (columns < w.shape[-1]) & (rows + offset >= 0)
    picked = w[:, torch.arange(len(rows)), columns.clamp(0, w.shape[-1] - 1)]  # (H', R)
    return torch.where(inside, picked, 0.0)


def punctuation_keys(texts: Sequence[str]) -> list[int]:
    """The positions whose token text, stripped of spaces and word markers, is "." or "," (Clark et al.)."""
    return [i for i, text in enumerate(texts) if text.strip().strip("\u2581\u0120#").strip() in (".", ",")]


def entropy_edges() -> list[float]:
    """The entropy histogram's bin edges in nats: ENTROPY_BINS bins of ENTROPY_STEP from 0, the last open."""
    return [round(i * ENTROPY_STEP, 6) for i in range(ENTROPY_BINS)] + [math.inf]
