"""attend_in_blocks against attend's whole table: the context, and the weights the consumers
receive stitched back together, for every mask, bias, soft-cap, dtype and block size (T = 37,
a prime, so most block sizes leave a partial last block). Each bug a blocked loop can have
(a boundary off by one, the last block dropped, the wrong rows' mask, a row written into the
wrong place) is put in by monkeypatch and shown to fail the same assertion."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from attn_cli.analysis.rowstats import RowStats
from attn_cli.analysis.stats import attention_stats
from attn_cli.records.band import Band
from attn_cli.sources import blocks
from attn_cli.sources.attend import attend, attention_weights, causal_mask
from attn_cli.sources.blocks import attend_in_blocks
from stats_support import assert_same_stats

HEADS, TOKENS, DK, DV, WINDOW = 4, 37, 16, 8, 6
BLOCK_ROWS = [1, 5, 16, 37, 64]
DTYPES = [torch.float32, torch.bfloat16]


def sliding_window(n_tokens: int, window: int) -> torch.Tensor:
    """(T, T) True where a query may not see a key: later keys, and keys ``window`` or more back."""
    i = torch.arange(n_tokens)
    return (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - window)  # (T, T)


def case(name: str, dtype: torch.dtype) -> dict:
    """attend's arguments for one named case, seeded."""
    gen = torch.Generator().manual_seed(35)
    queries, keys = (torch.randn(HEADS, TOKENS, DK, generator=gen) * 2 for _ in range(2))  # (H, T, Dk)
    values = torch.randn(HEADS, TOKENS, DV, generator=gen)  # (H, T, Dv)
    made = {"queries": queries, "keys": keys, "values": values, "divisor": DK**0.5, "mask": None}
    if name in ("causal", "bias", "softcap", "scale"):
        made["mask"] = causal_mask(TOKENS)
    if name == "window":
        made["mask"] = sliding_window(TOKENS, WINDOW)
    if name == "bias":
        made["bias"] = torch.randn(HEADS, TOKENS, TOKENS, generator=gen)  # (H, T, T)
    if name == "bias1":
        made["bias"] = torch.randn(1, TOKENS, TOKENS, generator=gen)  # (1, T, T)
    if name == "softcap":
        made["softcap"] = 3.0
    if name == "scale":
        made.update(scale=DK**-0.5, softmax_in_dtype=True)
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in made.items()}


CASES = ["plain", "causal", "window", "bias", "bias1", "softcap", "scale"]


class Stitch:
    """A consumer that copies every block into one (H, T, S) table, and notes the starts."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, torch.Tensor]] = []

    def __call__(self, start: int, weights: torch.Tensor, first: int, head: int = 0) -> None:
        assert first == 0, "a (T, S) mask: every block reads every key"
        self.blocks.append((start, weights.clone(), head))

    def table(self) -> torch.Tensor:
        groups = sorted({head for _, _, head in self.blocks})
        rows = [torch.cat([w for _, w, h in self.blocks if h == group], dim=-2) for group in groups]  # (H', T, S) each
        return torch.cat(rows, dim=-3)  # (H, T, S)


def blocked(args: dict, block_rows: int, heads_at_once: int | None = None) -> tuple[torch.Tensor, Stitch]:
    stitch = Stitch()
    return attend_in_blocks(**args, block_rows=block_rows, consumers=[stitch], heads_at_once=heads_at_once), stitch


@pytest.fixture
def row_by_row(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every matrix product computed one row at a time, for the whole table and the blocks alike:
    MKL's sgemm adds a dot product's terms in an order that depends on how many rows it is given,
    so this is what lets the rest of the steps be compared to the bit. On one thread: MKL may
    split a sum by its thread count, and choose that count call by call (MKL_DYNAMIC)."""
    matmul, threads = torch.matmul, torch.get_num_threads()

    def rows(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        made = torch.cat([matmul(a[..., i : i + 1, :], b) for i in range(a.shape[-2])], dim=-2)  # (..., M, N)
        return made if out is None else out.copy_(made)

    monkeypatch.setattr(torch, "matmul", rows)
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: rows(a, b))
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def check_same(args: dict, block_rows: int, heads_at_once: int | None = None) -> None:
    """The blocked context and stitched weights equal the whole table's, bit for bit."""
    context, weights = attend(**args)
    got, stitch = blocked(args, block_rows, heads_at_once)
    assert torch.equal(stitch.table(), weights), "the stitched blocks differ from attention_weights"
    assert torch.equal(got, context), "the blocked context differs from attend's"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
@pytest.mark.parametrize("name", CASES)
def test_blocks_are_the_whole_table_to_the_bit(row_by_row: None, name: str, block_rows: int, dtype: torch.dtype) -> None:
    check_same(case(name, dtype), block_rows)


@pytest.mark.parametrize("heads_at_once", [1, 3])
@pytest.mark.parametrize("name", CASES)
def test_heads_a_group_at_a_time_are_the_whole_table_to_the_bit(row_by_row: None, name: str, heads_at_once: int) -> None:
    """A group of heads through all its rows, then the next (the last group what is left)."""
    check_same(case(name, torch.float32), 5, heads_at_once)


def test_a_group_of_heads_runs_through_its_rows_before_the_next() -> None:
    _, stitch = blocked(case("causal", torch.float32), 16, heads_at_once=3)
    assert [(head, start, w.shape[0]) for start, w, head in stitch.blocks] == [
        (head, start, min(3, HEADS - head)) for head in range(0, HEADS, 3) for start in range(0, TOKENS, 16)
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
@pytest.mark.parametrize("name", CASES)
def test_blocks_with_this_machines_matmul(name: str, block_rows: int, dtype: torch.dtype) -> None:
    """With torch's own products: to the bit where one block holds every row (the same call as
    attend's), else to a last bit of the scores (1e-6 in float32, one rounding in bfloat16)."""
    args = case(name, dtype)
    context, weights = attend(**args)
    got, stitch = blocked(args, block_rows)
    if block_rows >= TOKENS:
        assert torch.equal(stitch.table(), weights) and torch.equal(got, context)
    tolerance = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(stitch.table(), weights, **tolerance)
    torch.testing.assert_close(got, context, **tolerance)


def test_blocks_come_in_order() -> None:
    _, stitch = blocked(case("causal", torch.float32), 5)
    assert [(start, w.shape) for start, w, _ in stitch.blocks] == [
        (start, (HEADS, min(5, TOKENS - start), TOKENS)) for start in range(0, TOKENS, 5)
    ]
    with pytest.raises(ValueError, match="at least 1"):
        blocked(case("plain", torch.float32), 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
@pytest.mark.parametrize("name", ["plain", "causal", "window", "bias", "softcap"])
def test_statistics_from_blocks_are_the_whole_tables(row_by_row: None, name: str, block_rows: int, dtype: torch.dtype) -> None:
    """RowStats as attend_in_blocks feeds it: stats.py's numbers on attend's (H, T, T) weights, to the bit."""
    args = case(name, dtype)
    _, weights = attend(**args)
    stats = RowStats(HEADS, TOKENS, TOKENS, mask=args["mask"])
    attend_in_blocks(**args, block_rows=block_rows, consumers=[stats])
    assert_same_stats(stats.result(), attention_stats(weights, mask=args["mask"]))


def test_float32_statistics_take_their_entropy_from_the_scores(row_by_row: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: RowStats fed by attend_in_blocks in float32 reads the scores (an entropy from them in
    nats fails the comparison above), in bfloat16 the weights alone."""
    from attn_cli.analysis import rowstats

    monkeypatch.setattr(rowstats, "entropy_bits_from_scores", lambda rows, *_: torch.special.entr(rows).sum(dim=-1).double())
    for dtype, caught in ((torch.float32, True), (torch.bfloat16, False)):
        args = case("causal", dtype)
        stats = RowStats(HEADS, TOKENS, TOKENS, mask=args["mask"])
        attend_in_blocks(**args, block_rows=5, consumers=[stats])
        try:
            assert_same_stats(stats.result(), attention_stats(attend(**args)[1], mask=args["mask"]))
        except AssertionError:
            assert caught, dtype
        else:
            assert not caught, dtype


class Scored(Stitch):
    """A Stitch that reads the scores too: the softmax input of each block it is given, else None."""

    wants_scores = True

    def __init__(self) -> None:
        super().__init__()
        self.scores: list[torch.Tensor | None] = []

    def __call__(self, start: int, weights: torch.Tensor, first: int, head: int = 0, scores: torch.Tensor | None = None) -> None:
        super().__call__(start, weights, first, head)
        self.scores.append(None if scores is None else scores.clone())


def softmax_input(args: dict) -> torch.Tensor:
    """(H, T, S) the scores attend's softmax reads, made here from the case's arguments: Q K^T divided
    by the divisor (or times the scale), the bias added, soft-capped, -inf where the mask hides a key."""
    scores = args["queries"] @ args["keys"].transpose(-2, -1)
    scores = scores * args["scale"] if args.get("scale") else scores / args["divisor"]
    if args.get("bias") is not None:
        scores = scores + args["bias"]
    if args.get("softcap"):
        scores = torch.tanh(scores / args["softcap"]) * args["softcap"]
    return scores if args["mask"] is None else scores.masked_fill(args["mask"], float("-inf"))


def check_scores(args: dict, block_rows: int) -> None:
    """With a consumer of the scores: the weights and context still the whole table's bit for bit, and
    the scores stitched back together the softmax's input."""
    context, weights = attend(**args)
    scored = Scored()
    got = attend_in_blocks(**args, block_rows=block_rows, consumers=[scored])
    assert torch.equal(scored.table(), weights) and torch.equal(got, context)
    stitched = torch.cat(scored.scores, dim=-2)  # (H, T, S): one group of every head
    assert torch.equal(stitched, softmax_input(args)), "the scores a consumer got are not the softmax's input"


@pytest.mark.parametrize("block_rows", [5, 37])
@pytest.mark.parametrize("name", CASES)
def test_a_consumer_of_the_scores_gets_the_softmax_input(row_by_row: None, name: str, block_rows: int) -> None:
    check_scores(case(name, torch.float32), block_rows)


def test_half_precision_blocks_come_without_their_scores() -> None:
    """bfloat16 scores are not what RowStats's entropy needs (float32 ones): its blocks come without them."""
    scored = Scored()
    attend_in_blocks(**case("causal", torch.bfloat16), block_rows=5, consumers=[scored])
    assert scored.scores and all(s is None for s in scored.scores)


def test_scores_overwritten_by_the_softmax_are_seen(row_by_row: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the softmax done in place in the scores' block (and copied to the weights') fails the check."""
    made = blocks.attention_weights

    def in_place(*args: object, softmax_out: torch.Tensor | None = None, **kwargs: object) -> torch.Tensor:
        weights = made(*args, **kwargs)  # the softmax written over the scores
        return weights if softmax_out is None else softmax_out.copy_(weights)

    monkeypatch.setattr(blocks, "attention_weights", in_place)
    with pytest.raises(AssertionError, match="softmax's input"):
        check_scores(case("causal", torch.float32), 5)


def test_cross_attention_and_leading_dimensions(row_by_row: None) -> None:
    """(B, H, T, Dk) queries against (B, H, S, Dk) keys, S != T, as a checkpoint's batch and cross-attention give them."""
    gen = torch.Generator().manual_seed(1)
    queries, keys, values = torch.randn(2, 3, 11, 4, generator=gen), torch.randn(2, 3, 7, 4, generator=gen), torch.randn(2, 3, 7, 5, generator=gen)
    mask = torch.rand(11, 7, generator=gen) > 0.7
    mask[:, 0] = False  # every row keeps a key
    context, weights = attend(queries, keys, values, divisor=2.0, mask=mask)
    got, stitch = blocked({"queries": queries, "keys": keys, "values": values, "divisor": 2.0, "mask": mask}, 4)
    assert torch.equal(stitch.table(), weights) and torch.equal(got, context)


# The bugs a blocked loop can have, each put in by monkeypatch: the check above must fail.
def shifted_bounds(n_queries: int, block_rows: int) -> list[tuple[int, int]]:
    """Every block one row later than it should be (the first row never computed)."""
    return [(min(s + 1, n_queries - 1), min(e + 1, n_queries)) for s, e in BOUNDS(n_queries, block_rows)]


def last_dropped(n_queries: int, block_rows: int) -> list[tuple[int, int]]:
    return BOUNDS(n_queries, block_rows)[:-1]


BOUNDS = blocks.block_bounds


def first_rows_mask(queries: torch.Tensor, keys: torch.Tensor, **kwargs: object) -> torch.Tensor:
    """The mask's first R rows for every block: not sliced to the block's rows."""
    if kwargs["mask"] is not None:
        kwargs["mask"] = causal_mask(TOKENS)[: queries.shape[-2]]
    return attention_weights(queries, keys, **kwargs)


def rows_swapped(*args: object, **kwargs: object) -> torch.Tensor:
    """The block's context with its first two rows in each other's place."""
    made = ATTEND_BLOCK(*args, **kwargs)  # (H, R, Dv)
    return made[..., [1, 0, *range(2, made.shape[-2])], :] if made.shape[-2] > 1 else made


ATTEND_BLOCK = blocks._attend_block


@pytest.mark.parametrize(
    ("name", "target", "bug"),
    [
        ("a block boundary off by one", "block_bounds", shifted_bounds),
        ("the last partial block dropped", "block_bounds", last_dropped),
        ("the wrong rows' mask", "attention_weights", first_rows_mask),
        ("a row written into the wrong place", "_attend_block", rows_swapped),
    ],
)
def test_each_blocking_bug_is_seen(row_by_row: None, monkeypatch: pytest.MonkeyPatch, name: str, target: str, bug: object) -> None:
    args = case("causal", torch.float32)
    check_same(args, 5)  # the check passes on the real loop
    monkeypatch.setattr(blocks, target, bug)
    with pytest.raises(AssertionError):
        check_same(args, 5)


def largest_allocation(run: object) -> int:
    """The most bytes one torch operation allocated while ``run()`` ran (torch's memory profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()  # type: ignore[operator]
    return max(event.cpu_memory_usage for event in prof.events())


def test_no_whole_table_is_allocated() -> None:
    """T = 2048, H = 8, 128 rows a block: nothing larger than one (H, 128, T) float32 block, where
    attend (the control) allocates its (H, T, T)."""
    heads, n_tokens, rows = 8, 2048, 128
    gen = torch.Generator().manual_seed(2)
    queries, keys, values = (torch.randn(heads, n_tokens, 16, generator=gen) for _ in range(3))  # (H, T, 16)
    args = {"queries": queries, "keys": keys, "values": values, "divisor": 4.0, "mask": causal_mask(n_tokens)}
    table, block = heads * n_tokens * n_tokens * 4, heads * rows * n_tokens * 4
    assert largest_allocation(lambda: attend_in_blocks(**args, block_rows=rows, consumers=[lambda s, w, f, h: None])) <= block
    assert largest_allocation(lambda: attend(**args)) >= table
