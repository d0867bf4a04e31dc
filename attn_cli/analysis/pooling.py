"""A pooled map of a layer's attention, built from blocks of query rows as they pass
(``sources.blocks``): a long text's (T, S) table cut into groups of rows and keys, each
pixel the max or the mean of one group's weights, so that a 20,000-token heatmap has one
pixel per group, not per cell, and no (H, T, S) tensor ever exists. Pure torch, no I/O.

Shapes: H heads in a block, H' kept heads, T query rows, S keys, R rows in a block, K the keys
a block holds (``first`` .. ``first + K - 1``; every other key's weight is 0, as in the whole
table), G' row groups and C' key groups of the map, g / c the groups one block touches.

The grouping (``pool_grid``): n rows cut into groups of ``ceil(n / cells)``, the last group
what is left. Every pixel but the last row and column of pixels then pools the same number of
weights (a title can say "each pixel the max of 11 x 11 weights"), row i is in group
i // size (an axis tick is group x size), and the map may have fewer groups than ``cells``
(101 rows in at most 50 cells: groups of 3, 34 of them).

Memory: the (H', G', C') map, and per block what its reductions make: the max reads the block
as it is (a copy of the kept heads only where some are left out), the mean sums in float64,
and torch casts the block to float64 (8 bytes a cell) before it sums it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

HOWS = ("max", "mean")
POOL_CELLS = 600  # groups a side of a picture's pooled panel, at most


def pool_grid(n: int, cells: int) -> list[int]:
    """The group boundaries [0, size, 2 size, ..., n] of n rows (or keys) in at most ``cells``
    groups of ``size = ceil(n / cells)``, the last group what is left; one row a group (no pooling)
    where n <= cells."""
    if cells < 1:
        raise ValueError(f"a map needs at least one cell a side, not {cells}")
    if n < 0:
        raise ValueError(f"cannot pool {n} rows")
    size = max(1, -(-n // cells))
    return list(range(0, n, size)) + [n]


class PooledMap:
    """A block consumer that pools every kept head's weights into a (G', C') map: cell (a, b) the
    max (``how="max"``) or the mean (``how="mean"``) of the whole (T, S) table's weights of query
    rows in group a against keys in group b, zeros outside a block's keys included (the mean
    divides by every cell of the group), so the map is the whole table's, pooled.

    ``heads``: the heads to keep, by number, in that order; an int H keeps every head 0 .. H - 1.
    ``rows``, ``columns``: at most that many groups of query rows and of keys (``pool_grid``).
    Kept: one (H', G', C') float32 running max or float64 running sum, on the blocks' device.
    """

    def __init__(
        self, heads: Sequence[int] | int, n_queries: int, n_keys: int, rows: int, columns: int, how: str = "max"
    ) -> None:
        if how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(HOWS)}, not {how!r}")
        self.heads = tuple(range(heads)) if isinstance(heads, int) else tuple(heads)
        self.how = how
        self.n_queries, self.n_keys = n_queries, n_keys
        self.row_bounds = pool_grid(n_queries, rows)  # (G' + 1,) query rows a group starts at, and T
        self.column_bounds = pool_grid(n_keys, columns)  # (C' + 1,) keys a group starts at, and S
        self.seen = [0] * len(self.heads)  # each kept head's rows pooled so far: a head's blocks come in order
        self._pooled: torch.Tensor | None = None  # (H', G', C') made on the first block's device

    @property
    def row_size(self) -> int:
        """Query rows in a group (the last group may hold fewer)."""
        return self.row_bounds[1] - self.row_bounds[0] if self.n_queries else 0

    @property
    def column_size(self) -> int:
        """Keys in a group (the last group may hold fewer)."""
        return self.column_bounds[1] - self.column_bounds[0] if self.n_keys else 0

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H', G', C'): the map ``result`` returns."""
        return len(self.heads), len(self.row_bounds) - 1, len(self.column_bounds) - 1

    def __call__(self, start: int, weights: torch.Tensor, first: int = 0, head: int = 0) -> None:
        """Pool query rows start .. start + R - 1 of (H, R, K) weights of heads head .. head + H - 1
        over keys first .. first + K - 1."""
        n_rows, n_cols = weights.shape[-2:]
        if self._pooled is None:
            dtype = torch.float32 if self.how == "max" else torch.float64
            self._pooled = torch.zeros(self.shape, dtype=dtype, device=weights.device)  # (H', G', C'): 0, a hidden key's weight
        kept = [(i, h - head) for i, h in enumerate(self.heads) if head <= h < head + weights.shape[0]]  # (in the map, in the block)
        if any(self.seen[i] != start for i, _ in kept):
            raise ValueError(f"rows from {start} after {min(self.seen)} rows: a head's blocks must come in order")
        if start + n_rows > self.n_queries or first < 0 or first + n_cols > self.n_keys:
            raise ValueError(
                f"a block of rows {start} .. {start + n_rows - 1} and keys {first} .. {first + n_cols - 1} "
                f"lies outside the {self.n_queries} x {self.n_keys} table this map was opened for"
            )
        if kept and n_rows and n_cols:
            where, block = self._kept(weights, kept)  # (H'',) the map's heads, (H'', R, K)
            # rows first: an element-wise max (or sum) of whole rows, several times faster on the CPU
            # than reducing short runs of keys first, and it leaves the keys a g-row tensor to group
            by_rows = _grouped(block, -2, start, self.row_size, self.how)  # (H'', R, K) -> (H'', g, K)
            pooled = _grouped(by_rows, -1, first, self.column_size, self.how)  # (H'', g, K) -> (H'', g, c)
            row_group, col_group = start // self.row_size, first // self.column_size
            cells = (where, slice(row_group, row_group + pooled.shape[1]), slice(col_group, col_group + pooled.shape[2]))
            target = self._pooled[cells]  # (H'', g, c), a copy
            self._pooled[cells] = torch.maximum(target, pooled) if self.how == "max" else target + pooled
        for i, _ in kept:
            self.seen[i] = start + n_rows

    def _kept(self, weights: torch.Tensor, kept: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The map's heads a block holds, (H'',) their places in the map, and their (H'', R, K)
        weights: the block itself where it holds just those heads, in the map's order."""
        where = torch.tensor([i for i, _ in kept], device=self._pooled.device)  # (H'',)
        inside = [h for _, h in kept]
        if inside == list(range(weights.shape[0])):
            return where, weights  # (H, R, K)
        return where, weights[inside]  # (H, R, K) -> (H'', R, K)

    def result(self) -> torch.Tensor:
        """(H', G', C') float32 on the CPU: each kept head's pooled map."""
        if any(seen != self.n_queries for seen in self.seen):
            raise ValueError(f"{min(self.seen)} of {self.n_queries} query rows were pooled: every block must pass")
        if self._pooled is None:  # no rows at all
            return torch.zeros(self.shape)  # (H', 0, C')
        pooled = self._pooled.cpu()  # (H', G', C')
        if self.how == "max":
            return pooled.clone()  # (H', G', C') float32, the map's own copy
        row_sizes = torch.tensor(self.row_bounds, dtype=torch.float64).diff()  # (G',)
        col_sizes = torch.tensor(self.column_bounds, dtype=torch.float64).diff()  # (C',)
        return (pooled / (row_sizes[:, None] * col_sizes[None, :])).float()  # (H', G', C') / (G', C') -> float32


def _grouped(x: torch.Tensor, dim: int, offset: int, size: int, how: str) -> torch.Tensor:
    """``x``'s max or float64 sum over groups of ``size`` along ``dim`` (-1 or -2), whose first
    element is row (or key) ``offset`` of the table: a partial group where x starts inside one,
    whole groups reshaped to (..., groups, size), a partial group where x ends inside one.
    Shapes: (..., L) -> (..., groups) along dim -1, (..., L, K) -> (..., groups, K) along -2."""
    length = x.shape[dim]
    head = min(length, (-offset) % size)  # elements before the first group boundary in x
    whole = (length - head) // size  # groups x holds whole
    tail = length - head - whole * size  # elements after the last boundary
    parts = []
    if head:
        parts.append(_reduce(x.narrow(dim, 0, head), dim, how))  # (..., 1) or (..., 1, K)
    if whole:
        split = x.narrow(dim, head, whole * size).unflatten(dim, (whole, size))  # (..., whole, size) or (..., whole, size, K)
        parts.append(_reduce(split, dim, how, keepdim=False))  # (..., whole) or (..., whole, K)
    if tail:
        parts.append(_reduce(x.narrow(dim, length - tail, tail), dim, how))  # (..., 1) or (..., 1, K)
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)  # (..., groups) or (..., groups, K)


def _reduce(x: torch.Tensor, dim: int, how: str, keepdim: bool = True) -> torch.Tensor:
    """The max (as float32: exact for float32, bfloat16 and float16 weights) or the float64 sum over ``dim``."""
    if how == "max":
        return x.amax(dim=dim, keepdim=keepdim).float()  # exact copies of the largest weights
    return x.sum(dim=dim, keepdim=keepdim, dtype=torch.float64)  # float64 accumulation, whatever x's dtype
