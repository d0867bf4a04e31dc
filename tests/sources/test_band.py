"""Band masks: the rule each family's mask follows, against the (T, T) tables it replaces; blocks
that read only the keys a band lets through, against the whole table with that table as its mask;
the statistics gathered from such blocks; and the work a window saves (O(T x W) memory). Controls:
a band off by one, a block that reads every key but is told it starts later."""

from __future__ import annotations

import pytest
import torch
from stats_support import assert_same_stats

from attn_cli.analysis.rowstats import RowStats
from attn_cli.analysis.stats import attention_stats
from attn_cli.records.band import Band
from attn_cli.sources.attend import attend, causal_mask
from attn_cli.sources.blocks import attend_in_blocks

HEADS, TOKENS, DK = 3, 41, 8
BANDS = {
    "nothing hidden": Band(),
    "causal": Band(after=0),
    "window 6": Band(before=5, after=0),
    "window 1": Band(before=0, after=0),
    "both ways 4": Band(before=4, after=4),
    "longer than the text": Band(before=100, after=0),
}


def table_of(name: str, n: int) -> torch.Tensor | None:
    """The (T, T) mask each band stands for, written out the way the families write theirs."""
    i = torch.arange(n)
    distance = i[None, :] - i[:, None]  # (T, T) j - i
    made = {
        "nothing hidden": None,
        "causal": causal_mask(n),
        "window 6": causal_mask(n) | (distance <= -6),
        "window 1": distance != 0,
        "both ways 4": distance.abs() > 4,
        "longer than the text": causal_mask(n),
    }[name]
    return made


@pytest.mark.parametrize("name", list(BANDS))
def test_band_tables_and_counts(name: str) -> None:
    band, want = BANDS[name], table_of(name, TOKENS)
    got = band.table(TOKENS)
    assert (got is None and want is None) or torch.equal(got, want)
    visible = [TOKENS] * TOKENS if want is None else (~want).sum(dim=-1).tolist()
    assert band.visible(0, TOKENS, TOKENS) == visible
    assert band.visible(7, 19, TOKENS) == visible[7:19]


def inputs() -> dict:
    gen = torch.Generator().manual_seed(41)
    queries, keys = (torch.randn(HEADS, TOKENS, DK, generator=gen) * 2 for _ in range(2))
    return {"queries": queries, "keys": keys, "values": torch.randn(HEADS, TOKENS, 5, generator=gen), "divisor": DK**0.5}


class Placed:
    """Every block written where its keys are, in one (H, T, T) table of zeros."""

    def __init__(self) -> None:
        self.table = torch.zeros(HEADS, TOKENS, TOKENS)

    def __call__(self, start: int, weights: torch.Tensor, first: int, head: int = 0) -> None:
        self.table[head : head + weights.shape[0], start : start + weights.shape[-2], first : first + weights.shape[-1]] = weights


def banded(band: Band, block_rows: int, heads_at_once: int | None = None) -> tuple[torch.Tensor, Placed, RowStats]:
    placed, stats = Placed(), RowStats(HEADS, TOKENS, TOKENS, mask=band)
    context = attend_in_blocks(**inputs(), mask=band, block_rows=block_rows, consumers=[placed, stats], heads_at_once=heads_at_once)
    return context, placed, stats


@pytest.mark.parametrize(("block_rows", "heads_at_once"), [(1, None), (4, None), (7, None), (41, None), (50, None), (7, 1), (4, 2)])
@pytest.mark.parametrize("name", list(BANDS))
def test_banded_blocks_are_the_whole_table(name: str, block_rows: int, heads_at_once: int | None) -> None:
    """The keys a band leaves out have weight 0 and the rest the whole table's (to float32's last
    bits: a row's softmax sums fewer zeros); the statistics likewise, a group of heads at a time too."""
    band = BANDS[name]
    context, weights = attend(**inputs(), mask=band.table(TOKENS))
    got, placed, stats = banded(band, block_rows, heads_at_once)
    torch.testing.assert_close(placed.table, weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got, context, atol=1e-6, rtol=1e-5)
    want = attention_stats(weights, mask=band.table(TOKENS))
    got_stats = stats.result()
    assert [s.most_attended for s in got_stats] == [s.most_attended for s in want]
    assert [s.visible_keys for s in got_stats] == [s.visible_keys for s in want]
    for g, w in zip(got_stats, want):
        for field in ("top_weight", "entropy_bits", "distance_mass"):  # entropy's log: a last-bit weight apart, 1e-6 apart
            assert getattr(g, field) == pytest.approx(getattr(w, field), abs=1e-5), field
        for field in ("self_mass", "previous_mass", "first_mass", "sink_score"):
            assert getattr(g, field) == pytest.approx(getattr(w, field), abs=1e-6), field


def test_a_band_reads_only_its_keys() -> None:
    """A window of 6 at 7 rows a block: each block is (H, 7, at most 12) keys, never (H, 7, T)."""
    shapes: list[tuple[int, tuple[int, ...]]] = []
    attend_in_blocks(**inputs(), mask=Band(before=5, after=0), block_rows=7, consumers=[lambda s, w, f, h: shapes.append((f, tuple(w.shape)))])
    assert max(shape[-1] for _, shape in shapes) == 7 + 5
    assert [first for first, _ in shapes] == [max(0, s - 5) for s in range(0, TOKENS, 7)]


@pytest.mark.parametrize(
    ("name", "bug"),
    [("a window one key too wide", Band(before=6, after=0)), ("a causal band that sees the next key", Band(after=1))],
)
def test_a_band_off_by_one_is_seen(name: str, bug: Band) -> None:
    want = attend(**inputs(), mask=(BANDS["window 6"] if "window" in name else BANDS["causal"]).table(TOKENS))[1]
    with pytest.raises(AssertionError):
        torch.testing.assert_close(banded(bug, 7)[1].table, want, atol=1e-6, rtol=1e-5)


def test_a_block_placed_at_the_wrong_keys_is_seen() -> None:
    """The first key shifted by one in what the consumers are told: the table and the statistics differ."""
    band = BANDS["window 6"]
    want = attend(**inputs(), mask=band.table(TOKENS))[1]
    placed, stats = Placed(), RowStats(HEADS, TOKENS, TOKENS, mask=band)

    def shifted(start: int, weights: torch.Tensor, first: int, head: int) -> None:
        moved = min(first + 1, TOKENS - weights.shape[-1])
        placed(start, weights, moved, head)
        stats(start, weights, moved, head)

    attend_in_blocks(**inputs(), mask=band, block_rows=7, consumers=[shifted])
    assert not torch.allclose(placed.table, want, atol=1e-3)
    assert [s.most_attended for s in stats.result()] != [s.most_attended for s in attention_stats(want, mask=band.table(TOKENS))]


@pytest.mark.parametrize("name", list(BANDS))
def test_the_hidden_span_holds_every_hidden_key(name: str) -> None:
    """hidden_span's run of keys, put back in the block, is the block's whole mask: nothing hidden outside it."""
    band = BANDS[name]
    for start, end in [(0, 7), (7, 14), (35, 41), (0, TOKENS)]:
        first, stop = band.keys(start, end, TOKENS)
        whole = band.hidden(start, end, first, stop)
        span = band.hidden_span(start, end, first, stop)
        if whole is None:
            assert span is None
            continue
        assert span is not None
        placed = torch.zeros_like(whole)
        placed[:, span[0] : span[0] + span[1].shape[-1]] = span[1]
        assert torch.equal(placed, whole), (start, end)
        if name == "causal" and end - start > 1:
            assert span[1].shape[-1] == end - start - 1  # a causal block: its last R - 1 keys only
