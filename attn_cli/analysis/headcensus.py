"""The census measures of one layer over one text, or a batch of texts padded to one length,
gathered from blocks of query rows as they pass (``sources.blocks``) or from whole tables given as
one block: the sums that ``analysis.tally`` folds into a corpus's numbers. Pure torch, no I/O.

Shapes: B texts, H heads, T query rows (= S keys: self-attention), R rows in a block, K the keys a
block holds (``first`` .. ``first + K - 1``; every other key's weight is 0).

Per text and head, summed over the text's rows in float64 (each with the number of rows it is over):
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
from typing import Any

import torch

from attn_cli.analysis.stats import binned, distance_bins, entropy_nats, skewed_columns
from attn_cli.records.band import Band

ROW_MEASURES = ("cls", "sep", "punct", "self", "previous", "next", "entropy_nats", "first_mass", "confidence", "top_previous", "top_next")
EXAMPLE_MEASURES = ("cls", "sep", "previous", "next", "entropy_nats", "confidence")  # a row value each, for the examples
ENTROPY_STEP = 0.25  # nats a bin of the entropy histogram
ENTROPY_BINS = 48  # 0 .. 12 nats; a larger entropy in the last bin


class TextLayer:
    """A block consumer: the sums of one layer's census measures over a batch of texts, every head:
    one text, or several run together padded on the right to the longest (``Checkpoint.trace_batch``),
    each text's rows and keys its own (a padding row is left out; a padding key has weight 0)."""

    def __init__(
        self, heads: int, lengths: Sequence[int], *, band: Band, sep: Sequence[Sequence[int]], punct: Sequence[Sequence[int]]
    ) -> None:  # fmt: skip
        """``lengths``: each text's tokens; ``sep``, ``punct``: each text's separator and punctuation key positions."""
        self.heads, self.lengths, self.band = heads, list(lengths), band
        n_texts, n_tokens = len(self.lengths), max(self.lengths)
        self.n_tokens = n_tokens
        self.real = torch.arange(n_tokens) < torch.tensor(self.lengths)[:, None]  # (B, T) a text's own rows
        self.sep, self.punct = _key_mask(sep, n_tokens), _key_mask(punct, n_tokens)  # (B, T) float64, 1 at a key
        self.sees_first = torch.tensor([band.before is None or i <= band.before for i in range(n_tokens)])  # (T,)
        self.sums = torch.zeros(n_texts, heads, len(ROW_MEASURES), dtype=torch.float64)  # (B, H, M)
        self.sink = torch.zeros(n_texts, heads, dtype=torch.float64)  # (B, H)
        self.first_row_entropy = torch.zeros(n_texts, heads, dtype=torch.float64)  # (B, H)
        self.by_offset = torch.zeros(n_texts, heads, 2 * n_tokens - 1, dtype=torch.float64)  # (B, H, 2T - 1) weight at j - i
        self.histogram = torch.zeros(n_texts, heads, ENTROPY_BINS, dtype=torch.float64)  # (B, H, E) rows per entropy bin
        self.rows = {m: torch.zeros(n_texts, heads, n_tokens, dtype=torch.float64) for m in EXAMPLE_MEASURES}  # (B, H, T)
        self.seen = [0] * heads

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0, head: int = 0) -> None:
        """Rows start .. start + R - 1 of (H', R, K) weights (one text) or (B, H', R, K) (the batch's) of heads
        head .. head + H' - 1, keys first .. first + K - 1."""
        heads = slice(head, head + weights.shape[-3])
        if any(self.seen[h] != start for h in range(heads.start, heads.stop)):
            raise ValueError(f"rows from {start} after {self.seen[head]} rows: a head's blocks must come in order")
        weights = weights if weights.dim() == 4 else weights[None]  # (B, H', R, K)
        end = start + weights.shape[-2]
        rows = torch.arange(start, end)  # (R,) positions in the text
        real = self.real[:, None, start:end]  # (B, 1, R)
        values = _row_values(weights.cpu(), rows, first, self.sep, self.punct)  # (B, H', R) each
        values = {m: torch.where(real, v, 0.0) for m, v in values.items()}  # a padding row counts nothing
        self.sums[:, heads] += torch.stack([values[m].sum(dim=-1) for m in ROW_MEASURES], dim=-1)  # (B, H', M)
        self.sink[:, heads] += (values["cls"] * self.sees_first[start:end]).sum(dim=-1)
        if start == 0:
            self.first_row_entropy[:, heads] = values["entropy_nats"][..., 0]
        bins = (values["entropy_nats"] / ENTROPY_STEP).floor().clamp(0, ENTROPY_BINS - 1).long()  # (B, H', R)
        self.histogram[:, heads] += torch.zeros_like(self.histogram[:, heads]).scatter_add_(-1, bins, real.expand(bins.shape).double())
        for m in EXAMPLE_MEASURES:
            self.rows[m][:, heads, start:end] = torch.where(real, values[m], -math.inf)  # a padding row is never an example
        columns = skewed_columns(weights.float().cpu() * real[..., None])  # (B, H', K + R - 1) by offset j - i
        lowest = first - start - (weights.shape[-2] - 1) + self.n_tokens - 1  # where column 0 lands in ``by_offset``
        self.by_offset[:, heads, lowest : lowest + columns.shape[-1]] += columns.double()
        for h in range(heads.start, heads.stop):
            self.seen[h] = end

    def result(self) -> dict[str, Any]:
        """The batch's sums, text by text along the first dimension: ``sums`` (B, H, M), ``counts`` (B, M) rows
        each is over, ``sink`` (B, H) the mean over the rows that see key 0, ``first_row_entropy`` (B, H),
        ``distance`` (B, H, bins of the longest; a shorter text's far bins 0), ``histogram`` (B, H, E),
        ``rows``: each example measure's (B, H, T) row values (-inf past a text's end), ``lengths``."""
        if any(seen != self.n_tokens for seen in self.seen):
            raise ValueError(f"{min(self.seen)} of {self.n_tokens} rows were gathered: every block must pass")
        t = torch.tensor(self.lengths, dtype=torch.float64)  # (B,)
        counts = torch.stack([t - 1 if m in ("previous", "next", "first_mass") else t for m in ROW_MEASURES], dim=-1)  # (B, M)
        seeing = (self.sees_first & self.real).sum(dim=-1)  # (B,) the rows that see key 0
        return {
            "sums": self.sums, "counts": counts, "sink": self.sink / seeing[:, None], "first_row_entropy": self.first_row_entropy,
            "distance": binned(self.by_offset, self.n_tokens - 1, distance_bins(self.n_tokens)), "histogram": self.histogram,
            "rows": self.rows, "lengths": self.lengths,
        }  # fmt: skip


def _row_values(own: torch.Tensor, rows: torch.Tensor, first: int, sep: torch.Tensor, punct: torch.Tensor) -> dict[str, torch.Tensor]:
    """(B, H', R, K) weights of rows ``rows``, keys first .. first + K - 1 -> each row measure's (B, H', R), float64:
    every sum over a float64 copy, the weights a measure picks from ``own`` (float64 holds each exactly)."""
    w = own.double()  # (B, H', R, K)
    keys = slice(first, first + w.shape[-1])
    values = {
        "cls": _column(own, 0, first).double(), "sep": w @ sep[:, None, keys, None], "punct": w @ punct[:, None, keys, None],
        "self": _diagonal(own, rows, 0, first).double(), "previous": _diagonal(own, rows, -1, first).double(),
        "next": _diagonal(own, rows, 1, first).double(), "entropy_nats": entropy_nats(w, torch.empty_like(w)) + 0.0,  # + 0.0: a one-hot row's -0.0 is 0.0
    }  # fmt: skip
    values["sep"], values["punct"] = values["sep"][..., 0], values["punct"][..., 0]  # (B, H', R, 1) -> (B, H', R)
    top = own.max(dim=-1)  # (B, H', R) the first of equal maxima
    values["confidence"] = top.values.double()
    values["top_previous"] = (top.indices + first == rows - 1).double()
    values["top_next"] = (top.indices + first == rows + 1).double()
    values["first_mass"] = torch.where(rows >= 1, values["cls"], 0.0)
    return values


def _key_mask(positions: Sequence[Sequence[int]], n_tokens: int) -> torch.Tensor:
    """(B, T) float64: 1 at each text's ``positions``."""
    mask = torch.zeros(len(positions), n_tokens, dtype=torch.float64)
    pairs = [(b, at) for b, chosen in enumerate(positions) for at in chosen]
    if pairs:
        mask[tuple(torch.tensor(pairs).T)] = 1.0
    return mask


def _column(w: torch.Tensor, key: int, first: int) -> torch.Tensor:
    """(..., R, K) -> (..., R): each row's weight on ``key`` (0 where the block does not hold it)."""
    if not first <= key < first + w.shape[-1]:
        return torch.zeros(w.shape[:-1], dtype=w.dtype)
    return w[..., key - first]


def _diagonal(w: torch.Tensor, rows: torch.Tensor, offset: int, first: int) -> torch.Tensor:
    """(..., R, K) -> (..., R): w[i, i + offset] for each row i (0 where that key is outside the text or the block)."""
    columns = rows + offset - first  # (R,)
    inside = (columns >= 0) & (columns < w.shape[-1]) & (rows + offset >= 0)
    picked = w[..., torch.arange(len(rows)), columns.clamp(0, w.shape[-1] - 1)]  # (..., R)
    return torch.where(inside, picked, 0.0)


def punctuation_keys(texts: Sequence[str]) -> list[int]:
    """The positions whose token text, stripped of spaces and word markers, is "." or "," (Clark et al.)."""
    return [i for i, text in enumerate(texts) if text.strip().strip("\u2581\u0120#").strip() in (".", ",")]


def entropy_edges() -> list[float]:
    """The entropy histogram's bin edges in nats: ENTROPY_BINS bins of ENTROPY_STEP from 0, the last open."""
    return [round(i * ENTROPY_STEP, 6) for i in range(ENTROPY_BINS)] + [math.inf]
