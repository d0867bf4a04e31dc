"""Summaries of attention weights, per query row and per head. Pure torch, no I/O.

Shapes: H heads, T tokens; ``weights`` is (H, T, T), rows sum to 1 (a masked
cell is exactly 0).

Per query row i:
  - ``most_attended[i]``: the key with the largest weight (the first one on ties);
  - ``entropy_bits[i]`` = -sum_j w_ij log2 w_ij (0 log 0 = 0): 0 when the row
    puts everything on one key, log2(n) when it spreads evenly over n keys;
  - ``effective_tokens[i]`` = 2 ** entropy_bits[i]: how many keys the row
    attends to "in effect" (n for an even spread over n keys, 1 for one key).

Per head, each the mean over query rows of one weight:
  - ``self_mass``: w_ii, the diagonal, over every row;
  - ``previous_mass``: w_i,i-1, over rows 1 .. T-1 (row 0 has no previous token);
  - ``first_mass``: w_i,0, over rows 1 .. T-1 (row 0's first token is itself,
    already in ``self_mass``).
``previous_mass`` and ``first_mass`` are ``None`` for a one-token text.
  - ``distance_mass[b]``: the weight each query row puts on keys at a distance |i - j| in bin b
    (``distance_bins``: [0], [1], [2, 3], [4, 7], [8, 15], ...), the mean over every row: the
    head's distance profile, which sums to 1 (a decoder's keys are all at i - j >= 0; an
    encoder's on both sides, by absolute value);
  - ``sink_score``: w_i,0 summed over the rows that may see the first token, divided by their
    number (Gu et al. 2024's first-token score, row 0 included: > 0.3 marks a sink there).
Self-attention only: cross-attention's queries and keys are tokens of two texts, and every
head mass is None there.

Everything is computed in float64 from the float32 weights, so the JSON, the
CSV and the tables (which all call this) show the same numbers. The float64
copies are made a block of rows at a time (``CHUNK_ROWS``), never of the whole
(H, T, T): at 10,000 tokens one head's copy alone would be 800 MB. Each row's
sum is the same whichever block it is in.

The per-row numbers can be asked for some rows only (``rows=``): a table shows 41
of a long text's rows, and the entropy of all 10,000 costs seconds. The head
masses read a diagonal and a column, so they always cover every row; the means
over rows (``mean_entropy_bits``) need every row and are not there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attn_cli.records.summary import HeadStats

__all__ = ["HeadStats", "attention_stats", "binned", "bits_of", "distance_bins", "distance_sums", "effective_tokens", "entropy_bits", "skewed_columns"]

CHUNK_ROWS = 256  # query rows converted to float64 at a time


def entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(..., T) probability rows -> (...) entropy in bits, in float64, never negative."""
    w = weights.double()  # (..., T)
    return bits_of(-torch.special.xlogy(w, w).sum(dim=-1))  # (...,) xlogy(0, 0) = 0


def bits_of(nats: torch.Tensor) -> torch.Tensor:
    """(...) entropy in nats -> bits, float64, never negative (+ 0.0 turns a one-hot row's -0.0 into 0.0)."""
    return (nats.double() / math.log(2)).clamp_min(0.0) + 0.0


def effective_tokens(bits: torch.Tensor) -> torch.Tensor:
    """2 ** entropy: the number of keys an even spread with this entropy would cover."""
    return torch.exp2(bits.double())  # (...,)


def head_masses(weights: torch.Tensor) -> tuple[float | None, float | None, float | None]:
    """(T, T) -> (self, previous-token, first-token) mean weights, as defined above; none of
    them for (T, S) cross-attention, whose queries and keys are tokens of two texts."""
    n_tokens = weights.shape[-1]
    if weights.shape[-2] != n_tokens:
        return None, None, None
    self_mass = weights.diagonal().double().mean().item()  # (T,)
    if n_tokens < 2:
        return self_mass, None, None
    previous = weights.diagonal(offset=-1).double().mean().item()  # (T-1,) w[i, i-1] for i = 1 .. T-1
    first = weights[1:, 0].double().mean().item()  # (T-1,) -> ()
    return self_mass, previous, first


def distance_bins(n_keys: int) -> list[tuple[int, int]]:
    """The fixed bins of key distances (lowest, highest), both included: [0], [1], [2, 3], [4, 7],
    ..., as far as the one holding n_keys - 1, the longest distance in a text of n_keys tokens."""
    bins, low = [(0, 0)], 1
    while low <= n_keys - 1:
        bins.append((low, 2 * low - 1))
        low *= 2
    return bins


def distance_sums(weights: torch.Tensor, start: int, first: int, bins: Sequence[tuple[int, int]]) -> torch.Tensor:
    """(H, R, K) weights of query rows start .. start + R - 1 against keys first .. first + K - 1 ->
    (H, bins) float64: each bin's weight, summed over the block's rows (keys beyond the block
    have no weight): the rows' shifted column sums (``skewed_columns``), binned in float64."""
    n_rows = weights.shape[-2]
    columns = skewed_columns(weights.to(torch.promote_types(weights.dtype, torch.float32)))  # half precision summed in float32
    return binned(columns.double(), start - first + n_rows - 1, bins)  # column c holds offset j - i = c - (start - first + R - 1)


def entropy_nats(weights: torch.Tensor, terms: torch.Tensor) -> torch.Tensor:
    """(..., K) probability rows -> (...,) -sum w ln w, summed in ``terms``' dtype, 0 ln 0 = 0: w ln max(w, that
    dtype's smallest float) written into ``terms`` (a tensor of ``weights``' shape: float32 for a long text's
    blocks, float64 for the census), in a third of entr's time."""
    tiny = torch.finfo(terms.dtype).tiny
    if weights.dtype == terms.dtype:
        torch.clamp_min(weights, tiny, out=terms)
    else:  # half precision: its terms in float32
        terms.copy_(weights).clamp_min_(tiny)
    return -terms.log_().mul_(weights).sum(dim=-1)  # w ln w, summed


def skewed_columns(rows: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """(..., R, K) rows -> (..., K + R - 1) column sums of the rows shifted so that one column holds one
    offset j - i for every row: row r's key k lands in column k + R - 1 - r, R terms a column in the
    dtype of ``scratch``, else the rows' (float32 for float32 weights: float64 in a strided sum over
    rows is 25x slower).
    The offsets every row holds (0 .. K - R) are summed where the rows lie, read along a diagonal
    stride; only the two R x R corners are shifted into a copy (``_shifted_sums``).
    ``scratch``: at least ... x R x (K + R - 1) numbers to shift them in (its dtype; else a new tensor)."""
    *lead, n_rows, n_keys = rows.shape
    if n_keys < 2 * n_rows or rows.stride(-1) != 1:
        return _shifted_sums(rows, scratch)
    dtype = rows.dtype if scratch is None else scratch.dtype
    sums = torch.empty(*lead, n_keys + n_rows - 1, dtype=dtype, device=rows.device)  # (..., K + R - 1)
    every = rows.as_strided((*lead, n_rows, n_keys - n_rows + 1), (*rows.stride()[:-2], rows.stride(-2) + 1, 1))  # [r, d] = rows[r, d + r]
    torch.sum(every, dim=-2, dtype=dtype, out=sums[..., n_rows - 1 : n_keys])  # offsets 0 .. K - R: every row's
    sums[..., : n_rows - 1] = _shifted_sums(rows[..., :n_rows], scratch)[..., : n_rows - 1]  # offsets below 0: key < row
    sums[..., n_keys:] = _shifted_sums(rows[..., n_keys - n_rows :], scratch)[..., n_rows:]  # beyond K - R: the last keys'
    return sums


def _shifted_sums(rows: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """``skewed_columns`` by a shifted copy: each row written into a (..., R, K + R - 1) tensor at its offset."""
    *lead, n_rows, n_keys = rows.shape
    width = n_keys + n_rows - 1
    count = rows[..., :1, :1].numel() * n_rows * width
    room = torch.empty(count, dtype=rows.dtype, device=rows.device) if scratch is None else scratch[:count]
    skewed = room.view(*lead, n_rows, width)  # (..., R, K + R - 1)
    skewed[..., : n_rows - 1].zero_()  # row r's keys fill columns R - 1 - r .. K + R - 2 - r: zero what is left of each
    skewed[..., n_keys:].zero_()  # side only (2 R (R - 1) numbers, not R (K + R - 1)), the copy writes the rest
    view = skewed.as_strided((*lead, n_rows, n_keys), (*skewed.stride()[:-2], width - 1, 1), skewed.storage_offset() + n_rows - 1)
    view.copy_(rows)  # (..., R, K)
    return skewed.sum(dim=-2)  # (..., K + R - 1)


def binned(by_offset: torch.Tensor, zero: int, bins: Sequence[tuple[int, int]]) -> torch.Tensor:
    """(..., N) float64 weights at each offset j - i (offset 0 at index ``zero``) -> (..., bins): each
    bin's weight at distances |i - j| in (lowest, highest), both sides, from running sums."""
    running = torch.nn.functional.pad(by_offset.cumsum(dim=-1), (1, 0))  # (..., N + 1) running[c]: indices 0 .. c - 1
    last = by_offset.shape[-1] - 1
    low = torch.tensor([lo for lo, _ in bins], device=by_offset.device)  # (bins,)
    high = torch.tensor([hi for _, hi in bins], device=by_offset.device)  # (bins,)

    def between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # indices a .. b, clamped, bin by bin -> (..., bins)
        a, b = a.clamp(0, last + 1), b.clamp(-1, last)
        sums = running[..., b + 1] - running[..., a.clamp_max(last)]
        return torch.where(a <= b, sums, 0.0)

    return between(zero - high, zero - low) + between(zero + low.clamp_min(1), zero + high)  # i - j = d, then j - i = d


def sink_scores(weights: torch.Tensor, mask: torch.Tensor | None) -> list[float]:
    """(H, T, S) -> each head's sink score: w_i,0 over the rows that may see key 0, their mean in float64."""
    sees = slice(None) if mask is None else ~mask[:, 0]  # (T,)
    return [weights[h, sees, 0].double().mean().item() for h in range(weights.shape[0])]


def _distance_profile(weights: torch.Tensor) -> list[list[float]]:
    """(H, T, T) -> each head's ``distance_mass``, CHUNK_ROWS rows at a time."""
    bins = distance_bins(weights.shape[-1])
    sums = sum(distance_sums(weights[:, i : i + CHUNK_ROWS], i, 0, bins) for i in range(0, weights.shape[-2], CHUNK_ROWS))
    return (sums / weights.shape[-2]).tolist()  # (H, bins)


def _row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(H, R, T) -> (H, R) entropy in bits, CHUNK_ROWS query rows at a time."""
    if weights.shape[-2] <= CHUNK_ROWS:  # one block: every row's sum as the blocks would give it
        return entropy_bits(weights)
    return torch.stack(
        [
            torch.cat([entropy_bits(head[i : i + CHUNK_ROWS]) for i in range(0, head.shape[0], CHUNK_ROWS)])  # (R,)
            for head in weights
        ]
    )  # (H, R)


def attention_stats(
    weights: torch.Tensor, *, mask: torch.Tensor | None = None, rows: Sequence[int] | None = None, cross: bool = False
) -> list[HeadStats]:
    """(H, T, T) weights -> one HeadStats per head; ``mask`` (T, T) True = hidden key;
    ``rows``: the query rows to give per-row numbers for (None: every row); ``cross``:
    cross-attention's (H, T, S), whose masses are not defined (None), even where S = T."""
    n_tokens = weights.shape[-1]
    picked = weights if rows is None else weights[:, list(rows)]  # (H, T, T), or (H, R, T): a copy of those rows
    top_key = picked.argmax(dim=-1)  # (H, R) argmax picks the first of equal maxima
    top_weight = picked.gather(-1, top_key.unsqueeze(-1)).squeeze(-1)  # (H, R, 1) -> (H, R)
    bits = _row_entropy_bits(picked)  # (H, R)
    effective = effective_tokens(bits)  # (H, R)
    n_rows = picked.shape[-2]
    visible = [n_tokens] * n_rows if mask is None else (~(mask if rows is None else mask[list(rows)])).sum(dim=-1).tolist()  # (R,)
    stats = []
    whole = not cross and weights.shape[-2] == n_tokens  # self-attention: the distance profile and the sink score
    profile = _distance_profile(weights) if whole else None
    sinks = sink_scores(weights, mask) if whole else None
    for h in range(weights.shape[0]):
        self_mass, previous, first = (None, None, None) if cross else head_masses(weights[h])
        stats.append(
            HeadStats(
                head=h,
                most_attended=top_key[h].tolist(),
                top_weight=top_weight[h].tolist(),
                entropy_bits=bits[h].tolist(),
                effective_tokens=effective[h].tolist(),
                visible_keys=visible,
                self_mass=self_mass,
                previous_mass=previous,
                first_mass=first,
                rows=None if rows is None else tuple(rows),
                distance_mass=None if profile is None else profile[h],
                sink_score=None if sinks is None else sinks[h],
            )
        )
    return stats
