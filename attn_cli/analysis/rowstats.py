"""``attention_stats`` built from blocks of query rows as they pass (``sources.blocks``), so a
layer's statistics exist at any length without its (H, T, S) weights. Pure torch, no I/O.

Shapes: H heads, T query rows, S keys, R rows in a block.

The numbers are stats.py's: each row's argmax and top weight to the bit, the head masses and
the sink score too (the means over rows run at the end, one float64 sum over T values, on
tensors of the shapes stats.py gives them). Two are computed for speed, as a long text needs
them: a row's entropy is -sum w log w from float32 terms and a pairwise float32 sum, not
float64 (four times the work on every one of T x S weights), 1e-6 bits apart at the tests'
lengths (about 2e-6 at 32,768 near-even keys); where a block's float32 softmax input comes with
it, the terms are w_j (s_k - s_j) and no log is taken (``entropy_bits_from_scores``). The distance
profile is summed block by block, each block's rows in float32, 1e-7 apart. What is kept is
O(H x T): the diagonal, the previous-token diagonal and the first column of the weights, and
the per-row lists.

A block may hold some keys only (``first`` .. ``first + K - 1``, the band a ``Band`` lets
through): every other key's weight is 0, as in the whole table.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from attn_cli.analysis.stats import HeadStats, attention_stats, binned, bits_of, distance_bins, effective_tokens, entropy_nats, skewed_columns
from attn_cli.records.band import Band
from attn_cli.records.summary import LayerSummary

if TYPE_CHECKING:
    from attn_cli.records.layers import LayerWeights


def block_entropy_bits(weights: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """(..., R, K) probability rows -> (..., R) entropy in bits, float64, from float32 terms and sums:
    w log w with log of max(w, smallest float) (0 log 0 = 0 exactly, as entr's, in a third the time).
    ``scratch``: a float32 tensor of at least R x K numbers the terms are written into (else a new one)."""
    return bits_of(entropy_nats(weights, _terms_for(weights, scratch)))  # (..., R)


def entropy_bits_from_scores(
    weights: torch.Tensor, scores: torch.Tensor, top_weight: torch.Tensor, top_key: torch.Tensor, scratch: torch.Tensor | None = None
) -> torch.Tensor:
    """(..., R, K) float32 softmax rows and their input -> (..., R) entropy in bits, float64, with no log over
    the row: ln w_j = s_j - ln Z' for every key j (Z' the row's sum of exponentials, its maximum taken out),
    and ln Z' = s_k - ln w_k at the row's largest weight k (``top_weight``, ``top_key`` from ``row_maxima``),
    so -sum w ln w = sum_j w_j (s_k - s_j) - ln w_k sum_j w_j: float32 terms w_j (s_k - s_j) >= 0 in a pairwise
    sum, the rest in float64. A hidden key (s = -inf, w = 0) gives the term NaN, which ``nansum`` leaves out.
    In twice to three times less time than ``block_entropy_bits`` (a sub, a multiply and two sums against
    a clamp, a log, a multiply and a sum), and as close to the float64 entropy of the float32 weights.
    ``scratch``: a float32 tensor of at least R x K numbers the terms are written into (else a new one)."""
    terms = _terms_for(weights, scratch)
    peak = torch.gather(scores, -1, top_key[..., None])  # (..., R, 1) s_k
    torch.sub(peak, scores, out=terms)  # (..., R, K) s_k - s_j = ln w_k - ln w_j >= 0, +inf where hidden
    spread = terms.mul_(weights).nansum(dim=-1).double()  # (..., R)
    return bits_of(spread - top_weight.double().log() * weights.sum(dim=-1).double())  # - ln w_k * sum w (1 but for rounding)


def _terms_for(weights: torch.Tensor, scratch: torch.Tensor | None) -> torch.Tensor:
    """A float32 tensor of ``weights``' shape for an entropy's terms: the start of ``scratch``, else a new one."""
    if scratch is None:
        return torch.empty(weights.shape, dtype=torch.float32, device=weights.device)
    return scratch.view(-1)[: weights.numel()].view(weights.shape)


def row_maxima(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., R, K) -> each row's largest value and its key, the first of equal maxima, as ``max(dim=-1)``
    gives them, in a quarter less time: the maxima of groups of GROUP keys (a vectorised amax), the
    first group holding the row's largest, the first key of that group holding it. A row's last
    K mod GROUP keys are a group of their own. NaN as max gives it (the first NaN)."""
    n_keys = rows.shape[-1]
    whole = n_keys - n_keys % GROUP
    if whole < 2 * GROUP:
        top = rows.max(dim=-1)
        return top.values, top.indices
    groups = rows[..., :whole].unflatten(-1, (whole // GROUP, GROUP))  # (..., R, K // GROUP, GROUP)
    best = groups.amax(dim=-1).max(dim=-1)  # (..., R): the largest, the first group holding it
    inside = torch.gather(groups, -2, best.indices[..., None, None].expand(*best.indices.shape, 1, GROUP))  # (..., R, 1, GROUP)
    key = best.indices * GROUP + inside.squeeze(-2).max(dim=-1).indices  # (..., R)
    value = best.values
    if whole < n_keys:  # the last keys, after every group: theirs only where strictly larger (or NaN)
        tail = rows[..., whole:].max(dim=-1)
        later = (tail.values > value) | (tail.values.isnan() & ~value.isnan())
        value, key = torch.where(later, tail.values, value), torch.where(later, tail.indices + whole, key)
    return value, key


GROUP = 64  # keys a group of ``row_maxima`` holds


# the numbers a block's rows (every head's) are read in at a time, so that the statistics' several
# passes over them (the maxima, the entropy's terms and sum, the distance sums) find them in the
# processor's cache, in few enough pieces that the Python calls around them stay small: the
# statistics' time a weight on a 2-core Xeon, 8,192 and 32,768 keys: 2.1-2.2 ns at 2^19 numbers
# (16 rows of 32,768 keys: the calls dominate), 1.4 at 2^21, 1.2-1.3 at 2^22, 1.8-2.1 at 2^23, 2.3-2.6
# over a whole block of 2^24; a piece and its terms take 32 MiB
CHUNK_NUMBERS = 1 << 22


def _visibility(mask: torch.Tensor | Band | None, n_queries: int, n_keys: int) -> tuple[list[int], list[bool]]:
    """How many keys each query row sees, and whether it sees key 0: (T,) each."""
    if isinstance(mask, Band):
        return mask.visible(0, n_queries, n_keys), [mask.before is None or i <= mask.before for i in range(n_queries)]
    if mask is None:
        return [n_keys] * n_queries, [True] * n_queries
    return (~mask).sum(dim=-1).tolist(), (~mask[:, 0]).tolist()


class RowStats:
    """A block consumer that gathers ``attention_stats(weights, mask=mask, cross=cross)`` of every row."""

    wants_scores = True  # attend_in_blocks gives float32 blocks' softmax input too: the entropy without a log

    def __init__(
        self, heads: int, n_queries: int, n_keys: int, *, mask: torch.Tensor | Band | None = None, cross: bool = False
    ) -> None:
        self.masses = not cross and n_queries == n_keys  # stats.py's head masses: self-attention only
        self.bins = distance_bins(n_keys)
        self.n_queries = n_queries
        # (H, T + S - 1) the weight at each offset j - i (-(T - 1) .. S - 1), summed over the rows
        self.by_offset = torch.zeros(heads, n_queries + n_keys - 1 if self.masses else 0, dtype=torch.float64)
        self.n_keys = n_keys
        self.visible, self.sees_first = _visibility(mask, n_queries, n_keys)  # (T,) keys each row sees, whether key 0
        self.seen = [0] * heads  # each head's rows gathered so far: a head's blocks come in order
        self.top_key = torch.empty(heads, n_queries, dtype=torch.long)  # (H, T)
        self.top_weight = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) exact copies of the weights
        self.bits = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T)
        self.diagonal = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, i]
        self.previous = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, i-1], row 0 unused
        self.first = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, 0], row 0 unused

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0, head: int = 0, scores: torch.Tensor | None = None) -> None:
        """Gather query rows start .. start + R - 1 of (H', R, K) weights of heads head .. head + H' - 1
        over keys first .. first + K - 1; ``scores``: their float32 softmax input, (H', R, K), where given."""
        heads = range(head, head + weights.shape[0])
        if any(self.seen[h] != start for h in heads):
            raise ValueError(f"rows from {start} after {self.seen[head]} rows: a head's blocks must come in order")
        end = start + weights.shape[-2]
        # rows read at a time, every head's: each pass over them finds them in the cache
        chunk = max(1, min(weights.shape[-2], CHUNK_NUMBERS // max(weights.shape[0] * weights.shape[-1], 1)))
        scratch = torch.empty(weights.shape[0] * chunk * (weights.shape[-1] + chunk), dtype=torch.float32, device=weights.device)
        for r in range(0, weights.shape[-2], chunk):
            rows = None if scores is None else scores[:, r : r + chunk]
            self._rows_of(heads, weights[:, r : r + chunk], start + r, first, scratch, rows)
        if self.masses:
            self._masses_of(weights, start, end, first, heads)
        for h in heads:
            self.seen[h] = end

    def _rows_of(
        self, heads: range, rows: torch.Tensor, start: int, first: int, scratch: torch.Tensor, scores: torch.Tensor | None
    ) -> None:
        """The heads' (H', R', K) rows start .. start + R' - 1 (and their softmax input, where given): each
        row's largest weight and its key (the first of equal maxima, as argmax), its entropy and, for
        self-attention, the distance sums."""
        end, at = start + rows.shape[-2], slice(heads.start, heads.stop)
        top_weight, top_key = row_maxima(rows)  # (H', R') each
        self.top_key[at, start:end] = top_key + first
        self.top_weight[at, start:end] = top_weight
        self.bits[at, start:end] = (
            block_entropy_bits(rows, scratch) if scores is None else entropy_bits_from_scores(rows, scores, top_weight, top_key, scratch)
        )  # (H', R')
        if self.masses:
            # column c of the shifted rows holds key j - query i = c - (R' - 1) + first - start for every row
            columns = skewed_columns(rows, scratch)  # (H', K + R' - 1)
            lowest = first - start - (rows.shape[-2] - 1) + self.n_queries - 1  # where column 0 lands in ``by_offset``
            self.by_offset[at, lowest : lowest + columns.shape[-1]] += columns.to(self.by_offset.device, torch.float64)

    def _masses_of(self, weights: torch.Tensor, start: int, end: int, first: int, heads: range) -> None:
        """Rows start .. end - 1's diagonal, previous-token and first-token weights (0 where the block
        holds no such key: hidden) in (H', R, K) ``weights`` of ``heads``."""
        rows = torch.arange(start, end, device=weights.device)  # (R,) positions in the text
        local = torch.arange(end - start, device=weights.device)  # (R,) positions in the block
        at = slice(heads.start, heads.stop)
        self.diagonal[at, start:end] = weights[:, local, rows - first]  # (H', R): a row always sees itself
        previous = rows - 1 - first  # (R,) w[i, i-1]'s column in the block; row 0's unused
        self.previous[at, start:end] = torch.where(previous >= 0, weights[:, local, previous.clamp_min(0)], 0.0)  # (H', R)
        self.first[at, start:end] = weights[:, :, 0] if first == 0 else 0.0  # (H', R)

    def result(self) -> list[HeadStats]:
        """One HeadStats per head, as ``attention_stats`` gives them for every row."""
        n_queries = self.top_key.shape[-1]
        if any(seen != n_queries for seen in self.seen):
            raise ValueError(f"{min(self.seen)} of {n_queries} query rows were gathered: every block must pass")
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
            "distance_mass": (binned(self.by_offset[head], self.n_queries - 1, self.bins) / self.n_queries).tolist(),
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

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0, head: int = 0) -> None:
        """Rows start .. start + R - 1 of (H', R, K) weights of heads head .. head + H' - 1, keys first .. first + K - 1."""
        inside = self.keys[(self.keys >= first) & (self.keys < first + weights.shape[-1])] - first  # (F',) in the block
        if len(inside):
            mass = weights[..., inside.to(weights.device)].double().sum(dim=-1).cpu()  # (H', R)
            self.mass[head : head + weights.shape[0], start : start + weights.shape[-2]] = mass

    def result(self) -> list[float]:
        """Each head's mean over the rows (``text_scores``' operations: a float64 sum per row, then the mean)."""
        return self.mass.mean(dim=-1).tolist()


class KeptRows:
    """A block consumer that keeps the chosen query rows' weights, every key's, for some heads."""

    def __init__(self, queries: Sequence[int], heads: Sequence[int], n_heads: int, n_keys: int) -> None:
        self.queries = tuple(sorted(set(queries)))
        self.heads = tuple(heads)
        self.rows = torch.zeros(len(self.queries), len(self.heads), n_keys)  # (Q, H', S) a key outside a block: weight 0
        self.scores: torch.Tensor | None = None  # (Q, H', S) the rows' raw scores, where ``raw_scores`` made them

    def raw_scores(self, queries: torch.Tensor, keys: torch.Tensor) -> None:
        """Keep the chosen rows' raw scores Q K^T of the kept heads, from a layer's (H, T, Dk) queries
        and (H, S, Dk) keys (as the layer's ``scores`` table computes them, of those rows only)."""
        heads, rows = list(self.heads), list(self.queries)
        made = queries[heads][:, rows] @ keys[heads].transpose(-2, -1)  # (H', Q, Dk) @ (H', Dk, S) -> (H', Q, S)
        self.scores = made.transpose(0, 1).to("cpu", torch.float32)  # (Q, H', S)

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0, head: int = 0) -> None:
        """Copy the chosen rows among start .. start + R - 1 of (H', R, K) weights of heads head ..
        head + H' - 1 over keys first .. first + K - 1."""
        end, stop = start + weights.shape[-2], first + weights.shape[-1]
        low, high = bisect.bisect_left(self.queries, start), bisect.bisect_left(self.queries, end)
        if low == high:
            return
        kept = [(i, h - head) for i, h in enumerate(self.heads) if head <= h < head + weights.shape[0]]  # (where, in the block)
        if not kept:
            return
        where, inside = [i for i, _ in kept], [h for _, h in kept]
        for at in range(low, high):
            row = weights[:, self.queries[at] - start]  # (H', K)
            self.rows[at, where, first:stop] = row[inside].to(self.rows.device, self.rows.dtype)


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


def row_score_of(layer: LayerWeights | LayerSummary, query: int, head: int) -> torch.Tensor | None:
    """(S,) query ``query``'s raw scores Q K^T in head ``head``: a summary's kept row, or the row of
    the layer's ``scores`` table; None where the layer has neither (weights alone)."""
    from attn_cli.records.layers import LayerAttention

    if isinstance(layer, LayerSummary):
        return layer.row_score(query, head)
    return layer.scores[head, query] if isinstance(layer, LayerAttention) else None
