"""RowStats, fed the blocks of a layer's weights, against attention_stats on the whole table:
every per-row list and head mass equal to the bit, for every block size (the last block partial
or not), masks, cross-attention, float32 and bfloat16 weights, and more rows than stats.py's
CHUNK_ROWS. Controls: entropy summed in float32, a block's rows out of place, a block missing."""

from __future__ import annotations

import math

import pytest
import torch

from attn_cli.analysis import rowstats
from attn_cli.analysis.rowstats import RowStats
from attn_cli.analysis.stats import CHUNK_ROWS, attention_stats
from stats_support import assert_same_stats
from attn_cli.sources.attend import attention_weights, causal_mask

HEADS = 4


def weights_of(n_queries: int, n_keys: int, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """(H, T, S) softmax rows of seeded scores, sharp enough for ties of small weights to be rare."""
    gen = torch.Generator().manual_seed(n_queries)
    queries, keys = torch.randn(HEADS, n_queries, 8, generator=gen) * 3, torch.randn(HEADS, n_keys, 8, generator=gen)
    return attention_weights(queries.to(dtype), keys.to(dtype), divisor=8**0.5, mask=mask)  # (H, T, S)


def window_mask(n_tokens: int, window: int = 5) -> torch.Tensor:
    i = torch.arange(n_tokens)
    return (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - window)  # (T, T)


def fed(weights: torch.Tensor, block_rows: int, mask: torch.Tensor | None, cross: bool = False, skip_last: bool = False) -> RowStats:
    """A RowStats given the table's rows ``block_rows`` at a time, as attend_in_blocks hands them."""
    n_queries, n_keys = weights.shape[-2:]
    consumer = RowStats(HEADS, n_queries, n_keys, mask=mask, cross=cross)
    starts = list(range(0, n_queries, block_rows))
    for start in starts[:-1] if skip_last else starts:
        consumer(start, weights[:, start : start + block_rows].contiguous())  # (H, R, S), a block of its own
    return consumer


CASES = [  # (name, T, S, mask, cross)
    ("no mask", 37, 37, None, False),
    ("causal", 37, 37, causal_mask(37), False),
    ("window", 37, 37, window_mask(37), False),
    ("cross", 37, 11, None, True),
    ("one token", 1, 1, None, False),
    ("past CHUNK_ROWS", CHUNK_ROWS + 44, CHUNK_ROWS + 44, causal_mask(CHUNK_ROWS + 44), False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("block_rows", [1, 5, 16, 37, 64, 256])
@pytest.mark.parametrize(("name", "n_queries", "n_keys", "mask", "cross"), CASES, ids=[c[0] for c in CASES])
def test_stats_from_blocks_are_stats_py_to_the_bit(name, n_queries, n_keys, mask, cross, block_rows, dtype) -> None:
    weights = weights_of(n_queries, n_keys, mask, dtype)
    assert_same_stats(fed(weights, block_rows, mask, cross).result(), attention_stats(weights, mask=mask, cross=cross))



def entropy_in_nats(weights: torch.Tensor, *_: object) -> torch.Tensor:
    return torch.special.entr(weights.float()).sum(dim=-1).double()  # (H, R): not divided by log 2


def test_entropy_in_the_wrong_unit_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison's 1e-6 on the entropy catches nats for bits (and so any real error)."""
    weights, mask = weights_of(37, 37, causal_mask(37), torch.float32), causal_mask(37)
    monkeypatch.setattr(rowstats, "block_entropy_bits", entropy_in_nats)
    with pytest.raises(AssertionError):
        assert_same_stats(fed(weights, 5, mask).result(), attention_stats(weights, mask=mask))


def test_rows_out_of_place_are_seen() -> None:
    weights, mask = weights_of(37, 37, causal_mask(37), torch.float32), causal_mask(37)
    rolled = torch.cat([block.roll(1, dims=-2) for block in weights.split(5, dim=-2)], dim=-2)  # (H, T, T)
    got, want = fed(rolled, 5, mask).result(), attention_stats(weights, mask=mask)
    for field in ("most_attended", "entropy_bits", "self_mass", "previous_mass", "first_mass"):
        assert [getattr(s, field) for s in got] != [getattr(s, field) for s in want], field


def test_a_missing_or_misplaced_block_is_an_error() -> None:
    weights = weights_of(37, 37, None, torch.float32)
    with pytest.raises(ValueError, match="35 of 37 query rows"):
        fed(weights, 5, None, skip_last=True).result()
    consumer = RowStats(HEADS, 37, 37)
    consumer(0, weights[:, :5])
    with pytest.raises(ValueError, match="rows from 6 after 5 rows"):
        consumer(6, weights[:, 6:11])


def profile_by_hand(weights: torch.Tensor, mask: torch.Tensor | None) -> tuple[list[list[float]], list[float]]:
    """distance_mass and sink_score as docs/json.md defines them, in plain Python loops."""
    n = weights.shape[-1]
    edges = [(0, 0)] + [(2**k, 2 ** (k + 1) - 1) for k in range(n.bit_length()) if 2**k <= n - 1]
    profile, sinks = [], []
    for h in range(weights.shape[0]):
        table = weights[h].tolist()
        profile.append([sum(table[i][j] for i in range(n) for j in range(n) if lo <= abs(i - j) <= hi) / n for lo, hi in edges])
        seeing = [i for i in range(n) if mask is None or not bool(mask[i, 0])]
        sinks.append(sum(table[i][0] for i in seeing) / len(seeing))
    return profile, sinks


@pytest.mark.parametrize("name", ["no mask", "causal", "window"])
def test_distance_profile_and_sink_score_by_hand(name: str) -> None:
    mask = {"no mask": None, "causal": causal_mask(37), "window": window_mask(37)}[name]
    weights = weights_of(37, 37, mask, torch.float32)
    profile, sinks = profile_by_hand(weights, mask)
    for got in (attention_stats(weights, mask=mask), fed(weights, 5, mask).result()):
        assert [s.distance_mass for s in got] == [pytest.approx(p, abs=1e-7) for p in profile]
        assert [s.sink_score for s in got] == pytest.approx(sinks, abs=1e-12)
        assert all(sum(s.distance_mass) == pytest.approx(1.0, abs=1e-6) for s in got)


def test_bins_off_by_one_are_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bins [1, 2], [3, 6], ... instead of [1], [2, 3], ...: the profile differs from the hand-made one."""
    weights, mask = weights_of(37, 37, causal_mask(37), torch.float32), causal_mask(37)
    profile, _ = profile_by_hand(weights, mask)
    from attn_cli.analysis import stats

    made = stats.distance_bins
    monkeypatch.setattr(stats, "distance_bins", lambda n: [(0, 0)] + [(lo, hi + 1) for lo, hi in made(n)[1:]])
    monkeypatch.setattr(rowstats, "distance_bins", stats.distance_bins)
    for got in (attention_stats(weights, mask=mask), fed(weights, 5, mask).result()):
        assert [s.distance_mass for s in got] != [pytest.approx(p, abs=1e-6) for p in profile]


def shifted_by_hand(rows: torch.Tensor) -> torch.Tensor:
    """(..., R, K) -> (..., K + R - 1): row r's key k added into column k + R - 1 - r, in float64."""
    *lead, n_rows, n_keys = rows.shape
    out = torch.zeros(*lead, n_keys + n_rows - 1, dtype=torch.float64)
    for r in range(n_rows):
        out[..., n_rows - 1 - r : n_rows - 1 - r + n_keys] += rows[..., r, :].double()
    return out


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (5, 9), (5, 10), (2, 4, 64), (3, 16, 40), (2, 3, 7, 33)], ids=str)
def test_skewed_columns_by_hand(shape: tuple[int, ...]) -> None:
    """Both ways (the diagonal read where K >= 2R, the shifted copy below), on a view of a larger
    block (its rows strided), and bfloat16 rows summed in a float32 scratch."""
    from attn_cli.analysis.stats import skewed_columns

    gen = torch.Generator().manual_seed(len(shape) * 100 + shape[-1])
    whole = torch.rand(*shape[:-2], shape[-2] + 3, shape[-1] + 2, generator=gen)
    for rows in (whole[..., 1 : 1 + shape[-2], :-2].contiguous(), whole[..., 2 : 2 + shape[-2], 1:-1]):
        assert skewed_columns(rows).double() == pytest.approx(shifted_by_hand(rows), abs=1e-5)
        half = rows.to(torch.bfloat16)
        scratch = torch.empty(half.numel() * 2 + shape[-1] * 4, dtype=torch.float32)
        summed = skewed_columns(half, scratch)
        assert summed.dtype == torch.float32
        assert summed.double() == pytest.approx(shifted_by_hand(half), abs=1e-5)


def test_a_corner_off_by_one_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the last keys' corner one column to the side fails the comparison above."""
    from attn_cli.analysis import stats

    rows = torch.rand(2, 4, 20, generator=torch.Generator().manual_seed(3))
    made = stats._shifted_sums
    calls = []

    def shifted(part: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
        calls.append(part.shape)
        got = made(part, scratch)
        return got.roll(1, dims=-1) if len(calls) == 2 else got  # the second call: the last keys' corner

    monkeypatch.setattr(stats, "_shifted_sums", shifted)
    assert stats.skewed_columns(rows).double() != pytest.approx(shifted_by_hand(rows), abs=1e-5)
    assert len(calls) == 2


@pytest.mark.parametrize("keys", [1, 7, 127, 128, 130, 200, 4099], ids=str)
def test_row_maxima_are_max_with_its_indices(keys: int) -> None:
    """Each row's largest value and the first key holding it, as max(dim=-1): random rows, rows of
    many ties, a largest value in the last keys (after every whole group), NaNs, a strided view."""
    gen = torch.Generator().manual_seed(keys)
    cases = [torch.randn(3, 5, keys, generator=gen), torch.randint(0, 3, (3, 5, keys), generator=gen).float()]
    tail = torch.randint(0, 3, (3, 5, keys), generator=gen).float()
    tail[..., -1] = 5.0
    nan = torch.randn(3, 5, keys, generator=gen)
    nan[0, :, keys // 2] = nan[1, :, -1] = float("nan")
    cases += [tail, nan, torch.randn(3, 9, keys + 3, generator=gen)[:, 2:7, 1:-2]]
    for rows in cases:
        value, key = rowstats.row_maxima(rows)
        want = rows.max(dim=-1)
        assert torch.equal(key, want.indices)
        assert torch.equal(value.nan_to_num(-9.0), want.values.nan_to_num(-9.0))


def test_row_maxima_cases_catch_their_bugs() -> None:
    """The controls: a row_maxima that ignores the keys after the last whole group, or that takes the
    last of equal maxima, gives other keys on the cases above."""
    gen = torch.Generator().manual_seed(130)
    tail = torch.randint(0, 3, (3, 5, 130), generator=gen).float()
    tail[..., -1] = 5.0
    whole = 130 - 130 % rowstats.GROUP
    assert not torch.equal(tail[..., :whole].max(dim=-1).indices, tail.max(dim=-1).indices)
    ties = torch.randint(0, 3, (3, 5, 130), generator=gen).float()
    last = 129 - ties.flip(-1).max(dim=-1).indices
    assert not torch.equal(last, rowstats.row_maxima(ties)[1])


def scored_rows(n_queries: int, n_keys: int, mask: torch.Tensor | None, scale: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(H, T, S) softmax inputs of seeded scores (-inf where ``mask`` hides a key) and their softmax."""
    gen = torch.Generator().manual_seed(n_keys)
    scores = torch.randn(HEADS, n_queries, 8, generator=gen) @ torch.randn(HEADS, 8, n_keys, generator=gen) * scale / 8**0.5
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores, torch.softmax(scores, dim=-1)


def fed_with_scores(scores: torch.Tensor, weights: torch.Tensor, block_rows: int, mask: torch.Tensor | None, cross: bool = False) -> RowStats:
    """``fed``, each block with its softmax input, as attend_in_blocks hands float32 blocks to RowStats."""
    consumer = RowStats(HEADS, *weights.shape[-2:], mask=mask, cross=cross)
    for start in range(0, weights.shape[-2], block_rows):
        rows = slice(start, start + block_rows)
        consumer(start, weights[:, rows].contiguous(), scores=scores[:, rows].contiguous())
    return consumer


@pytest.mark.parametrize("block_rows", [1, 5, 37, 256])
@pytest.mark.parametrize(("name", "n_queries", "n_keys", "mask", "cross"), CASES, ids=[c[0] for c in CASES])
def test_stats_from_blocks_and_their_scores_are_stats_py(name, n_queries, n_keys, mask, cross, block_rows) -> None:
    """The entropy from the softmax's input (no log over the rows): stats.py's float64 numbers to 1e-6 bits."""
    scores, weights = scored_rows(n_queries, n_keys, mask)
    assert_same_stats(fed_with_scores(scores, weights, block_rows, mask, cross).result(), attention_stats(weights, mask=mask, cross=cross))


def test_rowstats_reads_the_scores_where_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: an entropy from the scores in nats fails the comparison above (the scores' way is the one taken)."""
    scores, weights = scored_rows(37, 37, causal_mask(37))
    monkeypatch.setattr(rowstats, "entropy_bits_from_scores", lambda rows, *_: entropy_in_nats(rows))
    with pytest.raises(AssertionError):
        assert_same_stats(fed_with_scores(scores, weights, 5, causal_mask(37)).result(), attention_stats(weights, mask=causal_mask(37)))


def long_rows(n_keys: int = 4096) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(4, 8, S) rows from near-even to sharp (a row's scores times 0.3, 1, 6, 30), the last 100 keys
    and, in every other row, the first 7 hidden: softmax inputs, weights, and their float64 entropy in bits."""
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(4, 8, n_keys, generator=gen) * torch.tensor([0.3, 1.0, 6.0, 30.0])[:, None, None]
    scores[..., :50] += 3 * scores[..., :50].abs()  # a few keys stand out
    scores[..., -100:] = float("-inf")
    scores[:, ::2, :7] = float("-inf")
    weights = torch.softmax(scores, dim=-1)
    w = weights.double()
    return scores, weights, -torch.special.xlogy(w, w).sum(dim=-1) / math.log(2)


def test_entropy_from_scores_on_long_rows() -> None:
    """4,096 keys a row: both float32 ways within 2e-6 bits of the float64 entropy of the same weights
    (the error grows with a row's keys and its entropy: about 2e-6 bits at 32,768 near-even keys, either way)."""
    scores, weights, want = long_rows()
    top_weight, top_key = rowstats.row_maxima(weights)
    from_scores = rowstats.entropy_bits_from_scores(weights, scores, top_weight, top_key)
    from_logs = rowstats.block_entropy_bits(weights)
    assert from_scores.dtype == torch.float64 and not from_scores.isnan().any()
    assert (from_scores - want).abs().max() < 2e-6
    assert (from_logs - want).abs().max() < 2e-6


def test_entropy_from_scores_controls() -> None:
    """The bugs the comparison above catches: the peak score taken at the wrong key, and the hidden
    keys' terms (0 x inf) summed with the rest (NaN)."""
    scores, weights, want = long_rows()
    top_weight, top_key = rowstats.row_maxima(weights)
    beside = rowstats.entropy_bits_from_scores(weights, scores, top_weight, (top_key + 1) % scores.shape[-1])
    assert not ((beside - want).abs() <= 1e-3).all()
    terms = (scores.gather(-1, top_key[..., None]) - scores) * weights
    assert terms.sum(dim=-1).isnan().all() and not terms.nansum(dim=-1).isnan().any()
