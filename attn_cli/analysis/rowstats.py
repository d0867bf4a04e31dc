"""``attention_stats`` built from blocks of query rows as they pass (``sources.blocks``), so a
layer's statistics exist at any length without its (H, T, S) weights. Pure torch, no I/O.

Shapes: H heads, T query rows, S keys, R rows in a block.

The numbers are stats.py's: each row's argmax and top weight to the bit, the head masses and
the sink score too (the means over rows run at the end, one float64 sum over T values, on
tensors of the shapes stats.py gives them). Two are computed for speed, as a long text needs
them: a row's entropy is -sum w log w from float32 terms and a pairwise float32 sum, not
float64 (four times the work on every one of T x S weights), 1e-6 bits apart; the distance
profile is summed block by block, each block's rows in float32, 1e-7 apart. What is kept is
O(H x T): the diagonal, the previous-token diagonal and the first column of the weights, and
the per-row lists.

A block may hold some keys only (``first`` .. ``first + K - 1``, the band a ``Band`` lets
through): every other key's weight is 0, as in the whole table.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from attn_cli.analysis.stats import HeadStats, attention_stats, distance_bins, distance_sums, effective_tokens
from attn_cli.records.band import Band
from attn_cli.records.summary import LayerSummary

if TYPE_CHECKING:
    from attn_cli.records.layers import LayerWeights


def block_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(H, R, K) probability rows -> (H, R) entropy in bits, float64, from float32 terms and sums:
    w log w with log of max(w, smallest float) (0 log 0 = 0 exactly, as entr's, in a third the time).
    A head at a time: the terms' copy is one (R, K), whatever H (``blocks.block_rows_for``)."""
    nats = torch.empty(weights.shape[:-1], dtype=torch.float32, device=weights.device)  # (H, R)
    for h in range(weights.shape[0]):
        terms = weights[h].float().clamp_min(torch.finfo(torch.float32).tiny)  # (R, K) a copy
        terms.log_().mul_(weights[h])  # w log w, in place
        nats[h] = -terms.sum(dim=-1)  # (R,)
    return (nats.double() / math.log(2)).clamp_min(0.0) + 0.0  # (H, R) + 0.0: a one-hot row's -0.0 is 0.0


class RowStats:
    """A block consumer that gathers ``attention_stats(weights, mask=mask, cross=cross)`` of every row."""

    def __init__(
        self, heads: int, n_queries: int, n_keys: int, *, mask: torch.Tensor | Band | None = None, cross: bool = False
    ) -> None:
        self.mask = mask  # (T, S) True = hidden, read a block of rows at a time; or the Band of keys each row sees
        self.masses = not cross and n_queries == n_keys  # stats.py's head masses: self-attention only
        self.bins = distance_bins(n_keys)
        self.distances = torch.zeros(heads, len(self.bins), dtype=torch.float64)  # (H, bins) summed over rows
        self.sees_first: list[bool] = []  # (T,) whether each row may see key 0
        self.n_keys = n_keys
        self.seen = 0  # rows gathered so far: the blocks come in order
        self.top_key = torch.empty(heads, n_queries, dtype=torch.long)  # (H, T)
        self.top_weight = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) exact copies of the weights
        self.bits = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T)
        self.visible: list[int] = []  # (T,)
        self.diagonal = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, i]
        self.previous = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, i-1], row 0 unused
        self.first = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, 0], row 0 unused

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0) -> None:
        """Gather query rows start .. start + R - 1 of (H, R, K) weights over keys first .. first + K - 1."""
        if start != self.seen:
            raise ValueError(f"rows from {start} after {self.seen} rows: the blocks must come in order")
        end = start + weights.shape[-2]
        top = weights.max(dim=-1)  # (H, R) each row's largest weight and its key, the first of equal maxima (as argmax)
        self.top_key[:, start:end] = top.indices + first
        self.top_weight[:, start:end] = top.values
        self.bits[:, start:end] = block_entropy_bits(weights)  # (H, R, K) -> (H, R)
        self._visibility(start, end)
        if self.masses:
            self._masses_of(weights, start, end, first)
        self.seen = end

    def _visibility(self, start: int, end: int) -> None:
        """How many keys rows start .. end - 1 see, and whether each sees key 0."""
        if isinstance(self.mask, Band):
            self.visible += self.mask.visible(start, end, self.n_keys)
            self.sees_first += [self.mask.before is None or i <= self.mask.before for i in range(start, end)]
        elif self.mask is None:
            self.visible += [self.n_keys] * (end - start)
            self.sees_first += [True] * (end - start)
        else:
            block_mask = self.mask[start:end]  # (R, S)
            self.visible += (~block_mask).sum(dim=-1).tolist()
            self.sees_first += (~block_mask[:, 0]).tolist()

    def _masses_of(self, weights: torch.Tensor, start: int, end: int, first: int) -> None:
        """Rows start .. end - 1's diagonal, previous-token and first-token weights (0 where the block
        holds no such key: hidden), and their distance sums."""
        rows = torch.arange(start, end, device=weights.device)  # (R,) positions in the text
        local = torch.arange(end - start, device=weights.device)  # (R,) positions in the block
        self.diagonal[:, start:end] = weights[:, local, rows - first]  # (H, R): a row always sees itself
        previous = rows - 1 - first  # (R,) w[i, i-1]'s column in the block; row 0's unused
        self.previous[:, start:end] = torch.where(previous >= 0, weights[:, local, previous.clamp_min(0)], 0.0)  # (H, R)
        self.first[:, start:end] = weights[:, :, 0] if first == 0 else 0.0  # (H, R)
        for h in range(weights.shape[0]):  # a head at a time: the shifted copy is one (R, K + R - 1)
            self.distances[h] += distance_sums(weights[h], start, first, self.bins).cpu()  # (bins,)

    def result(self) -> list[HeadStats]:
        """One HeadStats per head, as ``attention_stats`` gives them for every row."""
        n_queries = self.top_key.shape[-1]
        if self.seen != n_queries:
            raise ValueError(f"{self.seen} of {n_queries} query rows were gathered: every block must pass")
        effective = effective_tokens(self.bits)  # (H, T), the shape stats.py exponentiates
        return [
            HeadStats(
                head=h, most_attended=self.top_key[h].tolist(), top_weight=self.top_weight[h].tolist(),
                entropy_bits=self.bits[h].tolist(), effective_tokens=effective[h].tolist(), visible_keys=self.visible,
                **self._masses(h),
            )  # fmt: skip
            for h in range(self.top_key.shape[0])
        ]

    def _masses(self, head: int) -> dict[str, float | list[float] | None]:
        """stats.head_masses's means: one float64 mean over each gathered (T,) or (T-1,) vector."""
        if not self.masses:
            return {"self_mass": None, "previous_mass": None, "first_mass": None}
        self_mass = self.diagonal[head].mean().item()
        profile = {
            "distance_mass": (self.distances[head] / self.seen).tolist(),
            "sink_score": self.first[head, torch.tensor(self.sees_first)].mean().item(),  # stats.sink_scores's float64 mean
        }
        if self.n_keys < 2:
            return {"self_mass": self_mass, "previous_mass": None, "first_mass": None, **profile}
        return {
            **profile,
            "self_mass": self_mass,
            "previous_mass": self.previous[head, 1:].clone().mean().item(),  # a fresh (T-1,), as stats.py's copy
            "first_mass": self.first[head, 1:].clone().mean().item(),
        }


class SpecialMass:
    """A block consumer: each row's weight on the special tokens' keys (BOS, [CLS], [SEP]), in
    float64, for ``headroles``' ``special_mass`` (the mean over the rows)."""

    def __init__(self, heads: int, n_queries: int, special: Sequence[bool]) -> None:
        self.keys = torch.tensor([i for i, flag in enumerate(special) if flag], dtype=torch.long)  # (F,) the flagged keys
        self.mass = torch.zeros(heads, n_queries, dtype=torch.float64)  # (H, T)

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0) -> None:
        inside = self.keys[(self.keys >= first) & (self.keys < first + weights.shape[-1])] - first  # (F',) in the block
        if len(inside):
            self.mass[:, start : start + weights.shape[-2]] = weights[..., inside.to(weights.device)].double().sum(dim=-1).cpu()  # (H, R)

    def result(self) -> list[float]:
        """Each head's mean over the rows (``text_scores``' operations: a float64 sum per row, then the mean)."""
        return self.mass.mean(dim=-1).tolist()


class KeptRows:
    """A block consumer that keeps the chosen query rows' weights, every key's, for some heads."""

    def __init__(self, queries: Sequence[int], heads: Sequence[int], n_heads: int, n_keys: int) -> None:
        self.queries = tuple(sorted(set(queries)))
        self.heads = tuple(heads)
        self.every_head = self.heads == tuple(range(n_heads))
        self.rows = torch.zeros(len(self.queries), len(self.heads), n_keys)  # (Q, H', S) a key outside a block: weight 0

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0) -> None:
        """Copy the chosen rows among start .. start + R - 1 of (H, R, K) weights over keys first .. first + K - 1."""
        end, stop = start + weights.shape[-2], first + weights.shape[-1]
        low, high = bisect.bisect_left(self.queries, start), bisect.bisect_left(self.queries, end)
        for at in range(low, high):
            row = weights[:, self.queries[at] - start]  # (H, K)
            self.rows[at, :, first:stop] = row if self.every_head else row[list(self.heads)]


def stats_of(layer: LayerWeights | LayerSummary, heads: Sequence[int]) -> list[HeadStats]:
    """The heads' statistics, the one place every view takes them from: a summary's, gathered from
    its blocks, or ``attention_stats`` of the tables, every chosen head at once (torch's exp2 can
    round a number differently by where it falls in the tensor, a vectorized stretch or the tail,
    so one head at a time would change last digits; a subset of the heads is a copy)."""
    if isinstance(layer, LayerSummary):
        return [layer.stats[h] for h in heads]
    every_head = list(heads) == list(range(layer.weights.shape[0])) and layer.weights.is_contiguous()
    return attention_stats(layer.weights if every_head else layer.weights[list(heads)], mask=layer.mask, cross=layer.cross)


def row_of(layer: LayerWeights | LayerSummary, query: int, head: int) -> torch.Tensor:
    """(S,) query ``query``'s weights in head ``head``."""
    return layer.row(query, head) if isinstance(layer, LayerSummary) else layer.weights[head, query]
