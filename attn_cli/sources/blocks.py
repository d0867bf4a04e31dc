"""``attend`` a block of query rows at a time: the same masked softmax as the whole table, each
block handed to the consumers that keep what a run asked for, then dropped, so that no
(H, T, T) tensor exists unless a consumer builds one (DESIGN.md, "A layer's attention in blocks").

Shapes: T query tokens, S key tokens (S = T but in cross-attention), H heads, R rows in a block
(``block_rows``, fewer in the last one), K the keys a block reads (S, or the band a mask lets
through), Dk per-head query/key size, Dv per-head value size.

A mask is a ``Band`` (which keys each query sees: a causal mask, a sliding window either way,
or nothing hidden), or any (T, S) boolean table. With a band, a block computes only the keys
its rows can see (key ``first`` to ``first + K - 1``): a causal layer half the products, a
window of W keys O(T x W) work and memory, not O(T x S). A key left out is a weight of exactly
0, as the whole table's masked cell is.

Each block's weights are ``attention_weights`` of the block's queries against its keys, with
the mask's and the bias's rows of that block: the same steps in the same order on the same rows.
What can differ from the whole table is the matrix product: a BLAS picks its kernel, and with it
the order it adds a dot product's terms in, by the number of rows (MKL's sgemm, for one row a
matrix-vector product), so a score can differ from the whole table's in its last bit. Where every
block computes its rows as the whole table does (one block of every row, or a product that
computes each row alone) over every key, the weights and the context are the whole table's bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from attn_cli.analysis.pooling import PooledMap
from attn_cli.analysis.rowstats import KeptRows, RowStats, SpecialMass
from attn_cli.records.band import Band
from attn_cli.records.summary import LayerSummary
from attn_cli.sources.attend import attention_weights, check_finite, explain_overflow, hiding


LayerSink = Callable[[int, int, int], "BlockConsumer"]  # (layer, T, S) -> a consumer of that layer's blocks
# a position bias made a block at a time, where the whole (H, T, S) would not fit (T5's relative positions):
# (heads, start, end, first, stop) -> (H', R, K) for heads ``heads``, query rows start .. end - 1, keys first .. stop - 1
BiasRows = Callable[[slice, int, int, int, int], torch.Tensor]


class BlockConsumer(Protocol):
    """What a run keeps of a layer's attention, fed one block of query rows of some heads at a time:
    for each group of heads, its rows in order."""

    def __call__(self, start: int, weights: torch.Tensor, first: int, head: int) -> None:
        """``weights`` (..., H', R, K): heads head .. head + H' - 1, query rows start .. start + R - 1
        against keys first .. first + K - 1 (every other key's weight is 0). The block is reused for
        the next rows once this returns: a consumer copies what it keeps. A consumer whose ``wants_scores``
        is True is also given ``scores=``, the block's softmax input (..., H', R, K) (-inf where hidden), where
        the scores are float32; else it is called without them."""


def attend_in_blocks(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    divisor: float,
    mask: torch.Tensor | Band | None,
    block_rows: int,
    consumers: Sequence[BlockConsumer] = (),
    bias: torch.Tensor | BiasRows | None = None,
    softcap: float | None = None,
    scale: float | None = None,
    softmax_in_dtype: bool = False,
    heads_at_once: int | None = None,
) -> torch.Tensor:
    """``attend``'s context, computed ``block_rows`` query rows of ``heads_at_once`` heads (None:
    every head) at a time; each block of weights goes to every consumer before the next is computed.
    A group of heads runs through all its rows before the next group starts, so that the group's
    keys and values stay in the processor's cache while its blocks read them again and again.

    Shapes: queries (..., H, T, Dk), keys (..., H, S, Dk), values (..., H, S, Dv), mask a ``Band``
    or (T, S) True = hidden, bias (..., H or 1, T, S) or ``BiasRows`` -> context (..., H, T, Dv). The peak memory
    beyond the inputs and the context is one (..., H', R, K) block of weights, allocated once.
    """
    n_heads, n_queries, n_keys = queries.shape[-3], queries.shape[-2], keys.shape[-2]
    group = n_heads if heads_at_once is None else max(1, min(heads_at_once, n_heads))
    band = mask if isinstance(mask, Band) else Band()
    bounds = block_bounds(n_queries, block_rows)
    spans = [band.keys(start, end, n_keys) for start, end in bounds]
    most = max(((end - start) * (stop - first) for (start, end), (first, stop) in zip(bounds, spans)), default=0)
    batch = queries.shape[:-3].numel()
    scratch = torch.empty(batch * group * most, dtype=queries.dtype, device=queries.device)  # (... * H' * R * K,)
    # the softmax's input kept beside the weights, for a consumer that reads both (RowStats: the entropy without a log)
    readers = [bool(getattr(c, "wants_scores", False)) and queries.dtype == torch.float32 for c in consumers]
    kept_scores = torch.empty_like(scratch) if any(readers) else None
    context = torch.empty(*queries.shape[:-1], values.shape[-1], dtype=values.dtype, device=values.device)  # (..., H, T, Dv)
    for head in range(0, n_heads, group):
        heads = slice(head, head + group)
        q, k, v = queries[..., heads, :, :], keys[..., heads, :, :], values[..., heads, :, :]  # (..., H', T or S, D)
        for (start, end), (first, stop) in zip(bounds, spans):
            shape = (*q.shape[:-2], end - start, stop - first)
            block = scratch[: math.prod(shape)].view(shape)
            scores = None if kept_scores is None else kept_scores[: block.numel()].view(shape)
            mask_from, hidden = _block_mask(mask, start, end, first, stop, queries.dtype, queries.device)
            context[..., heads, start:end, :] = _attend_block(
                q, k[..., first:stop, :], v[..., first:stop, :], start, end, block, divisor=divisor, mask=hidden,
                bias=_block_bias(bias, heads, start, end, first, stop), softcap=softcap, scale=scale, softmax_in_dtype=softmax_in_dtype,
                mask_from=mask_from, scores=scores,
            )  # fmt: skip
            for consumer, reads in zip(consumers, readers):
                if reads:
                    consumer(start, block, first, head, scores=scores)
                else:
                    consumer(start, block, first, head)
    return context


def _block_mask(
    mask: torch.Tensor | Band | None, start: int, end: int, first: int, stop: int, dtype: torch.dtype, device: torch.device
) -> tuple[int, torch.Tensor | None]:
    """Rows start .. end - 1's mask over the block's keys first .. stop - 1: (the first key it covers,
    less ``first``; (R, K')) — a band's narrowest span of hidden keys as its ``hiding`` (-inf where
    hidden), a table's rows (True = hidden)."""
    if isinstance(mask, Band):
        run = mask.hidden_run(start, end, first, stop)
        hidden = None if run is None else _band_hiding(mask, end - start, run[0] - start, run[1] - start, dtype, device)
        return (0, None) if hidden is None else (run[0] - first, hidden)
    return 0, None if mask is None else mask[start:end].to(device)  # (R, S)


@functools.lru_cache(maxsize=4)
def _band_hiding(band: Band, rows: int, low: int, high: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """(R, K') -inf where row r may not see key low + k (both relative to the block's first row), 0
    elsewhere: the same for every block of the same shape (a layer's blocks and every layer's), made
    once. Shared: read, never written."""
    hidden = band.hidden(0, rows, low, high)  # (R, K'): only the rows' and keys' distances matter
    return None if hidden is None else hiding(hidden.to(device), dtype)


def _block_bias(bias: torch.Tensor | BiasRows | None, heads: slice, start: int, end: int, first: int, stop: int) -> torch.Tensor | None:
    """The bias of heads ``heads``' rows start .. end - 1 over keys first .. stop - 1: (..., H' or 1, R, K)."""
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor):
        return bias(heads, start, end, first, stop)  # (H', R, K), made for this block
    return (bias if bias.shape[-3] == 1 else bias[..., heads, :, :])[..., start:end, first:stop]


def block_bounds(n_queries: int, block_rows: int) -> list[tuple[int, int]]:
    """The (start, end) query rows of each block: ``block_rows`` of them, the last block what is left."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be at least 1, not {block_rows}")
    return [(start, min(start + block_rows, n_queries)) for start in range(0, n_queries, block_rows)]


def _attend_block(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int, end: int, block: torch.Tensor, *,
    divisor: float, mask: torch.Tensor | None, bias: torch.Tensor | None, softcap: float | None, scale: float | None,
    softmax_in_dtype: bool, mask_from: int = 0, scores: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Query rows start .. end - 1 against ``keys`` (..., H, K, Dk): their weights written into
    ``block`` (..., H, R, K), their context returned. ``bias`` (..., H or 1, R, K) and ``mask``
    (R, K') the block's rows already, the mask over keys mask_from .. mask_from + K' - 1 of the block's.
    ``scores``: a float32 tensor of ``block``'s shape that keeps the softmax's input (else it is not kept)."""
    rows = queries[..., start:end, :]  # (..., H, R, Dk)
    attention_weights(
        rows, keys, divisor=divisor, mask=mask, bias=bias, softcap=softcap, out=block if scores is None else scores,
        scale=scale, softmax_in_dtype=softmax_in_dtype, mask_from=mask_from, check=False, softmax_out=None if scores is None else block,
    )  # fmt: skip
    context = block @ values  # (..., H, R, K) @ (..., H, K, Dv) -> (..., H, R, Dv)
    if not math.isfinite(float(context.sum())):  # an overflow's NaN weight reaches its row's context: R x Dv to read, not R x K
        check_finite((values,), "the values", "use smaller embeddings")
        explain_overflow(rows, keys, divisor)
    return context


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """A run that keeps no (H, T, S) tables: each layer's attention in blocks of ``rows`` query
    rows, and of each kept layer every head's statistics and the chosen query rows."""

    rows: int  # query rows a block holds
    heads_at_once: int | None = None  # heads a block holds (``heads_at_once_for``); None: every head
    queries: tuple[int, ...] = ()  # the chosen query rows (--query), kept whole for ``heads``
    heads: tuple[int, ...] | None = None  # the heads whose chosen rows are kept; None: every head
    special: tuple[bool, ...] | None = None  # the keys that are special tokens, for each head's special_mass; None: not asked
    sink: LayerSink | None = None  # what else reads each kept layer's blocks (--tables: the file's writer)
    pool: tuple[int, str] | None = None  # (cells, "max" or "mean"): a pooled map of the ``heads``, at most cells a side
    scores: bool = False  # the chosen rows' raw scores Q K^T too (--show scores)
    stats: bool = True  # every head's statistics (RowStats); a census reads its own measures from the ``sink``

    def gathering(self, layer: int, heads: int, n_queries: int, n_keys: int, band: Band, *, cross: bool = False) -> Gathering:
        """The consumers of one kept layer's blocks."""
        row_heads = tuple(range(heads)) if self.heads is None else self.heads
        special = SpecialMass(heads, n_queries, self.special) if self.special is not None and any(self.special) else None
        pooled = None if self.pool is None else PooledMap(row_heads, n_queries, n_keys, self.pool[0], self.pool[0], self.pool[1])
        return Gathering(
            RowStats(heads, n_queries, n_keys, mask=band, cross=cross) if self.stats else None, KeptRows(self.queries, row_heads, heads, n_keys), n_keys, cross,
            band.hides(n_keys), special, None if self.sink is None else self.sink(layer, n_queries, n_keys), pooled,
        )  # fmt: skip


@dataclasses.dataclass
class Gathering:
    """One kept layer's consumers, and the ``LayerSummary`` they leave."""

    stats: RowStats | None
    rows: KeptRows
    n_keys: int
    cross: bool
    causal: bool
    special: SpecialMass | None = None
    sink: BlockConsumer | None = None
    pooled: PooledMap | None = None

    @property
    def consumers(self) -> tuple[BlockConsumer, ...]:
        return tuple(c for c in (self.stats, self.rows, self.special, self.sink, self.pooled) if c is not None)

    def summary(self, layer: int, divisor: float, divisor_text: str) -> LayerSummary:
        return LayerSummary(
            layer=layer, stats=() if self.stats is None else tuple(self.stats.result()), queries=self.rows.queries, rows=self.rows.rows,
            row_heads=self.rows.heads, n_keys=self.n_keys, divisor=divisor, divisor_text=divisor_text, cross=self.cross,
            causal=self.causal, special_mass=None if self.special is None else tuple(self.special.result()),
            row_scores=self.rows.scores,
            **({} if self.pooled is None else {
                "pooled": self.pooled.result(), "pooled_heads": self.pooled.heads,
                "pool_sizes": (self.pooled.row_size, self.pooled.column_size),
            }),
        )  # fmt: skip


def heads_at_once_for(heads: int, n_keys: int, head_sizes: int) -> int:
    """Heads a block holds: as many as keep their keys and values (``head_sizes`` = Dk + Dv float32
    numbers a key) within ``GROUP_BYTES``, at least one. Every block of a group's rows reads the
    group's keys and values again: where they stay in the processor's cache, the products run at
    its speed, not memory's (at 32,768 keys, one head at a time is about 1.4 times as fast as all
    sixteen of a Qwen3-0.6B layer, whose keys and values take 512 MiB)."""
    return max(1, min(heads, GROUP_BYTES // max(1, 4 * n_keys * head_sizes)))


GROUP_BYTES = 32 * 2**20


def block_rows_for(heads: int, n_keys: int, budget: int) -> int:
    """Query rows a block may hold for its (H, R, S) weights (BYTES_PER_CELL a head's cell) and what
    is made of one (R, S) at a time (ROW_BYTES_PER_KEY: the mask, and what the consumers derive from
    one head at a time), to stay within ``budget`` bytes; at least one. The larger the block, the
    fewer times a layer's keys and values are read: at 32,768 keys that reading bounds the products."""
    return max(1, budget // ((BYTES_PER_CELL * heads + ROW_BYTES_PER_KEY) * max(n_keys, 1)))


# a head's cell: its float32 weight (4), its softmax input kept beside it for RowStats's entropy (4), and a
# copy of the kept heads where a picture pools some (4)
BYTES_PER_CELL = 4 + 4 + 4
# a (row, key) of the block once, whatever H: the mask and its -inf (1 + 4), the softmax's scratch (4),
# and 8 that counted the entropy's terms and the distance profile's shifted copy, which since session 20
# live in RowStats's fixed scratch (CHUNK_NUMBERS): a margin, kept because bench/README.md's block sizes
# were measured with it (without it, 780 rows of one head at 32,768 keys: between the 512 MiB blocks'
# 564 and the 768 MiB blocks' 847, which were no faster)
ROW_BYTES_PER_KEY = 1 + 4 + 4 + 8
