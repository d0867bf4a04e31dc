"""``attend`` a block of query rows at a time: the same masked softmax as the whole table, each
block handed to the consumers that keep what a run asked for, then dropped, so that no
(H, T, T) tensor exists unless a consumer builds one (DESIGN.md, "A layer's attention in blocks").

Shapes: T query tokens, S key tokens (S = T but in cross-attention), H heads, R rows in a block
(``block_rows``, fewer in the last one), Dk per-head query/key size, Dv per-head value size.

Each block's weights are ``attention_weights`` of the block's queries against every key, with
the mask's and the bias's rows of that block: the same steps in the same order on the same rows.
What can differ from the whole table is the matrix product: a BLAS picks its kernel, and with it
the order it adds a dot product's terms in, by the number of rows (MKL's sgemm, for one row a
matrix-vector product), so a score can differ from the whole table's in its last bit. Where every
block computes its rows as the whole table does (one block of every row, or a product that
computes each row alone), the weights and the context are the whole table's bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from attn_cli.sources.attend import attention_weights


class BlockConsumer(Protocol):
    """What a run keeps of a layer's attention, fed one block of query rows at a time, in order."""

    def __call__(self, start: int, weights: torch.Tensor) -> None:
        """``weights`` (..., H, R, S): query rows start .. start + R - 1. The block is reused for the
        next rows once this returns: a consumer copies what it keeps."""


def attend_in_blocks(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    divisor: float,
    mask: torch.Tensor | None,
    block_rows: int,
    consumers: Sequence[BlockConsumer] = (),
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    scale: float | None = None,
    softmax_in_dtype: bool = False,
) -> torch.Tensor:
    """``attend``'s context, computed ``block_rows`` query rows at a time; each block of weights goes
    to every consumer before the next is computed.

    Shapes: queries (..., H, T, Dk), keys (..., H, S, Dk), values (..., H, S, Dv), mask (T, S)
    True = hidden, bias (..., H or 1, T, S) -> context (..., H, T, Dv). The peak memory beyond the
    inputs and the context is one (..., H, R, S) block of weights, allocated once.
    """
    n_queries, n_keys = queries.shape[-2], keys.shape[-2]
    bounds = block_bounds(n_queries, block_rows)
    lead = queries.shape[:-2]  # (..., H)
    most = max((end - start for start, end in bounds), default=0)
    scratch = torch.empty(lead.numel() * most * n_keys, dtype=queries.dtype, device=queries.device)  # (... * H * R * S,)
    context = torch.empty(*lead, n_queries, values.shape[-1], dtype=values.dtype, device=values.device)  # (..., H, T, Dv)
    for start, end in bounds:
        block = scratch[: lead.numel() * (end - start) * n_keys].view(*lead, end - start, n_keys)  # (..., H, R, S)
        context[..., start:end, :] = _attend_block(
            queries, keys, values, start, end, block, divisor=divisor, mask=mask, bias=bias, softcap=softcap,
            scale=scale, softmax_in_dtype=softmax_in_dtype,
        )  # fmt: skip
        for consumer in consumers:
            consumer(start, block)
    return context


def block_bounds(n_queries: int, block_rows: int) -> list[tuple[int, int]]:
    """The (start, end) query rows of each block: ``block_rows`` of them, the last block what is left."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be at least 1, not {block_rows}")
    return [(start, min(start + block_rows, n_queries)) for start in range(0, n_queries, block_rows)]


def _attend_block(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int, end: int, block: torch.Tensor, *,
    divisor: float, mask: torch.Tensor | None, bias: torch.Tensor | None, softcap: float | None, scale: float | None,
    softmax_in_dtype: bool,
) -> torch.Tensor:  # fmt: skip
    """Query rows start .. end - 1: their weights written into ``block`` (..., H, R, S), their context returned."""
    attention_weights(
        queries[..., start:end, :], keys, divisor=divisor, mask=None if mask is None else mask[start:end],
        bias=None if bias is None else bias[..., start:end, :], softcap=softcap, out=block, scale=scale,
        softmax_in_dtype=softmax_in_dtype,
    )  # fmt: skip
    return block @ values  # (..., H, R, S) @ (..., H, S, Dv) -> (..., H, R, Dv)
