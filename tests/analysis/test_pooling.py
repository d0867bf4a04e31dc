"""PooledMap, fed by attend_in_blocks, against the whole table pooled by hand in plain loops over
the same groups: every band (nothing hidden, causal, a window, both ways), a cross-attention
table, block sizes that straddle the groups or not, maps that pool or not. The max is the
stitched blocks' max to the bit (and the whole table's within 1e-6, the blocks' last bits), the
mean within 1e-6; without pooling the map is the table itself. Controls: a block one row later,
a block's rows moved one row down, a block told the wrong first key, a missing last block."""

from __future__ import annotations

import functools

import pytest
import torch

from attn_cli.analysis.pooling import PooledMap, pool_grid
from attn_cli.records.band import Band
from attn_cli.sources.attend import attend
from attn_cli.sources.blocks import attend_in_blocks

HEADS, DK = 3, 8
BANDS = {
    "nothing hidden": Band(),
    "causal": Band(after=0),
    "window 6": Band(before=5, after=0),
    "both ways 4": Band(before=4, after=4),
}
BLOCK_ROWS = [1, 7, 64, 101]
GRIDS = [(10, 10), (7, 13), (200, 200)]
HOWS = ["max", "mean"]


@pytest.mark.parametrize(
    ("n", "cells", "want"),
    [
        (101, 10, [0, 11, 22, 33, 44, 55, 66, 77, 88, 99, 101]),  # groups of 11, the last of 2
        (101, 7, [0, 15, 30, 45, 60, 75, 90, 101]),  # groups of 15, the last of 11
        (101, 13, [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 101]),
        (100, 10, [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]),  # every group whole
        (101, 50, list(range(0, 101, 3)) + [101]),  # groups of 3: 34 groups, not 50
        (101, 200, list(range(102))),  # one row a group: no pooling
        (5, 5, [0, 1, 2, 3, 4, 5]),
        (1, 1, [0, 1]),
        (7, 1, [0, 7]),
        (0, 4, [0]),
    ],
)
def test_pool_grid(n: int, cells: int, want: list[int]) -> None:
    assert pool_grid(n, cells) == want


def test_pool_grid_refuses_no_cells() -> None:
    with pytest.raises(ValueError, match="at least one cell"):
        pool_grid(10, 0)


def inputs(n_queries: int, n_keys: int) -> dict:
    gen = torch.Generator().manual_seed(n_queries * 1000 + n_keys)
    queries = torch.randn(HEADS, n_queries, DK, generator=gen) * 2  # (H, T, Dk)
    keys = torch.randn(HEADS, n_keys, DK, generator=gen) * 2  # (H, S, Dk)
    return {"queries": queries, "keys": keys, "values": torch.randn(HEADS, n_keys, 5, generator=gen), "divisor": DK**0.5}


class Placed:
    """Every block written where its keys are, in one (H, T, S) table of zeros."""

    def __init__(self, n_queries: int, n_keys: int) -> None:
        self.table = torch.zeros(HEADS, n_queries, n_keys)

    def __call__(self, start: int, weights: torch.Tensor, first: int, head: int = 0) -> None:
        self.table[head : head + weights.shape[0], start : start + weights.shape[-2], first : first + weights.shape[-1]] = weights


def pooled_by_hand(table: torch.Tensor, rows: list[int], columns: list[int], how: str) -> torch.Tensor:
    """(H, T, S) -> (H, G', C'): each group's max, or its float64 mean, one group at a time."""
    out = torch.empty(table.shape[0], len(rows) - 1, len(columns) - 1)
    for a in range(len(rows) - 1):
        for b in range(len(columns) - 1):
            cell = table[:, rows[a] : rows[a + 1], columns[b] : columns[b + 1]]  # (H, rows in a, keys in b)
            out[:, a, b] = cell.amax(dim=(-2, -1)) if how == "max" else cell.double().mean(dim=(-2, -1)).float()
    return out


def whole_table(band: Band, n_queries: int, n_keys: int) -> torch.Tensor:
    mask = band.table(n_queries) if n_queries == n_keys else None
    return attend(**inputs(n_queries, n_keys), mask=mask)[1]  # (H, T, S)


@functools.lru_cache(maxsize=None)
def whole_pooled(band: Band, n_queries: int, n_keys: int, grid: tuple[int, int], how: str) -> torch.Tensor:
    return pooled_by_hand(whole_table(band, n_queries, n_keys), pool_grid(n_queries, grid[0]), pool_grid(n_keys, grid[1]), how)


def blocked(band: Band, n_queries: int, n_keys: int, block_rows: int, grid: tuple[int, int], how: str, feed=None):
    """A PooledMap and a Placed table, both given attend_in_blocks's blocks (through ``feed`` if given)."""
    pooled, placed = PooledMap(HEADS, n_queries, n_keys, *grid, how=how), Placed(n_queries, n_keys)
    consumers = [placed, pooled] if feed is None else [placed, functools.partial(feed, pooled)]
    attend_in_blocks(**inputs(n_queries, n_keys), mask=band, block_rows=block_rows, consumers=consumers)
    return pooled, placed


def check(pooled: PooledMap, placed: Placed, band: Band, grid: tuple[int, int]) -> None:
    """The map against the stitched blocks and the whole table, each pooled by hand."""
    n_queries, n_keys = placed.table.shape[-2:]
    got = pooled.result()
    stitched = pooled_by_hand(placed.table, pooled.row_bounds, pooled.column_bounds, pooled.how)
    assert got.dtype == torch.float32 and got.device.type == "cpu"
    if pooled.how == "max":
        assert torch.equal(got, stitched)
    else:
        torch.testing.assert_close(got, stitched, atol=1e-6, rtol=0)
    torch.testing.assert_close(got, whole_pooled(band, n_queries, n_keys, grid, pooled.how), atol=1e-6, rtol=0)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("grid", GRIDS, ids=str)
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
@pytest.mark.parametrize("name", list(BANDS))
def test_pooled_blocks_are_the_whole_table_pooled(name: str, block_rows: int, grid: tuple[int, int], how: str) -> None:
    band = BANDS[name]
    pooled, placed = blocked(band, 101, 101, block_rows, grid, how)
    check(pooled, placed, band, grid)
    if grid == (200, 200):  # one cell a pixel: the map is the table, the mean a float64 sum of one weight
        assert pooled.result().shape == placed.table.shape
        assert torch.equal(pooled.result(), placed.table)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("grid", GRIDS, ids=str)
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
def test_cross_attention(block_rows: int, grid: tuple[int, int], how: str) -> None:
    pooled, placed = blocked(Band(), 37, 53, block_rows, grid, how)
    check(pooled, placed, Band(), grid)


def test_what_a_title_states() -> None:
    pooled = PooledMap(HEADS, 101, 53, 7, 13, how="mean")
    assert (pooled.row_size, pooled.column_size, pooled.how, pooled.shape) == (15, 5, "mean", (HEADS, 7, 11))
    assert (PooledMap(2, 101, 101, 200, 200).row_size, PooledMap(2, 101, 101, 200, 200).column_size) == (1, 1)


@pytest.mark.parametrize("how", HOWS)
def test_kept_heads_in_their_order(how: str) -> None:
    band, grid = BANDS["window 6"], (10, 10)
    every, _ = blocked(band, 101, 101, 7, grid, how)
    for heads_at_once in (None, 1, 2):
        some = PooledMap([2, 0], 101, 101, *grid, how=how)
        attend_in_blocks(**inputs(101, 101), mask=band, block_rows=7, consumers=[some], heads_at_once=heads_at_once)
        assert torch.equal(some.result(), every.result()[[2, 0]]), heads_at_once


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_blocks(dtype: torch.dtype) -> None:
    """Half-precision weights: the max their exact float32 values, the mean their float64 sum's."""
    band, grid = BANDS["both ways 4"], (7, 13)
    table = whole_table(band, 101, 101).to(dtype)  # (H, T, T)
    for how in HOWS:
        pooled = PooledMap(HEADS, 101, 101, *grid, how=how)
        for start in range(0, 101, 7):
            first, stop = band.keys(start, min(start + 7, 101), 101)
            pooled(start, table[:, start : start + 7, first:stop].contiguous(), first)
        want = pooled_by_hand(table.float(), pooled.row_bounds, pooled.column_bounds, how)
        if how == "max":
            assert torch.equal(pooled.result(), want)
        else:
            torch.testing.assert_close(pooled.result(), want, atol=1e-6, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("how", HOWS)
def test_cuda_blocks(how: str) -> None:
    band, grid = BANDS["window 6"], (7, 13)
    on_cuda, pooled = PooledMap([1, 2], 101, 101, *grid, how=how), PooledMap([1, 2], 101, 101, *grid, how=how)
    args = inputs(101, 101)
    attend_in_blocks(**args, mask=band, block_rows=7, consumers=[pooled])
    cuda_args = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    attend_in_blocks(**cuda_args, mask=band, block_rows=7, consumers=[on_cuda])
    assert on_cuda.result().device.type == "cpu"
    torch.testing.assert_close(on_cuda.result(), pooled.result(), atol=1e-6, rtol=0)


def one_row_later(pooled: PooledMap, start: int, weights: torch.Tensor, first: int, head: int) -> None:
    """The block of rows 7 .. 13 handed over as if it began at row 8."""
    pooled(start + 1 if start == 7 else start, weights, first, head)


def rows_moved_down(pooled: PooledMap, start: int, weights: torch.Tensor, first: int, head: int) -> None:
    """Every block's rows one row down (its last row on top): each weight one row later than it is."""
    pooled(start, weights.roll(1, dims=-2).contiguous(), first, head)


def first_key_later(pooled: PooledMap, start: int, weights: torch.Tensor, first: int, head: int) -> None:
    """The first key told one later than it is (where the block's keys leave room)."""
    pooled(start, weights, min(first + 1, pooled.n_keys - weights.shape[-1]), head)


def test_a_block_one_row_later_is_refused() -> None:
    with pytest.raises(ValueError, match="rows from 8 after 7 rows"):
        blocked(BANDS["causal"], 101, 101, 7, (10, 10), "max", feed=one_row_later)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("grid", [(10, 10), (200, 200)], ids=str)
@pytest.mark.parametrize(("name", "feed"), [("rows moved down", rows_moved_down), ("first key later", first_key_later)])
@pytest.mark.parametrize("band", ["causal", "window 6"])
def test_a_misplaced_block_is_seen(band: str, name: str, feed, grid: tuple[int, int], how: str) -> None:
    pooled, placed = blocked(BANDS[band], 101, 101, 7, grid, how, feed=feed)
    with pytest.raises(AssertionError):
        check(pooled, placed, BANDS[band], grid)


def test_a_missing_last_block_is_an_error() -> None:
    table = whole_table(Band(), 101, 101)  # (H, T, T)
    pooled = PooledMap(HEADS, 101, 101, 10, 10)
    for start in range(0, 98, 7):
        pooled(start, table[:, start : start + 7], 0)
    with pytest.raises(ValueError, match="98 of 101 query rows"):
        pooled.result()


def test_a_block_outside_the_table_is_an_error() -> None:
    pooled = PooledMap(HEADS, 10, 10, 3, 3)
    with pytest.raises(ValueError, match="outside the 10 x 10 table"):
        pooled(0, torch.zeros(HEADS, 4, 8), 3)
    with pytest.raises(ValueError, match="how must be one of max, mean"):
        PooledMap(HEADS, 10, 10, 3, 3, how="sum")
