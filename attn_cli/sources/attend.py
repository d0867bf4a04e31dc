"""The one masked softmax every source computes attention with: softmax(Q K^T / divisor
(+ bias, soft-capped), masked) V, in place in one T x T buffer per head, float32 softmax
for half-precision scores (as transformers' eager attention), and a named error where
float32 overflows.

Shapes: T tokens, H heads, Dk per-head query/key size, Dv per-head value size.
"""

from __future__ import annotations

import math

import torch

from attn_cli.runtime.errors import ConfigError


def attend(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    divisor: float,
    mask: torch.Tensor | None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    out: torch.Tensor | None = None,
    scale: float | None = None,
    softmax_in_dtype: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / divisor (+ bias, soft-capped), masked) V, the one masked softmax
    every source uses.

    Shapes: queries (H, T, Dk), keys (H, T, Dk), values (H, T, Dv), mask (T, T)
    True = hidden, bias (H, T, T) or (1, T, T) -> (context (H, T, Dv), weights (H, T, T)).
    ``out``: the (H, T, T) block the weights are written into (``attention_weights``).
    """
    weights = attention_weights(
        queries, keys, divisor=divisor, mask=mask, bias=bias, softcap=softcap, out=out, scale=scale, softmax_in_dtype=softmax_in_dtype
    )
    return weights @ values, weights  # (H, T, T) @ (H, T, Dv) -> (H, T, Dv)


def attention_weights(
    queries: torch.Tensor,
    keys: torch.Tensor,
    *,
    divisor: float,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    out: torch.Tensor | None = None,
    scale: float | None = None,
    softmax_in_dtype: bool = False,
    mask_from: int = 0,
    check: bool = True,
    softmax_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(Q K^T / divisor, masked) over the keys. Shapes (..., T, Dk) -> (..., T, T);
    ``mask`` (T, T) is True where a query may not see a key (every row must keep one key), or its
    ``hiding`` already made (-inf there, 0 elsewhere, in the scores' dtype).
    A family's score modifiers come after the division, before the mask, as
    transformers applies them: ``bias`` (..., T, T) added (MPNet's relative
    positions), then ``softcap`` * tanh(s / ``softcap``) (Gemma 2's soft-capping).

    Every step works in place in one (..., T, T) buffer, so the peak memory is one
    T x T tensor per head, as in torch's own attention: a new one, or ``out`` (a block of
    that shape and dtype the caller chose where it lives).

    ``scale``: the scores are multiplied by it instead of divided by ``divisor`` (the same
    number, 1 / divisor, as a checkpoint's transformers code writes it: in half precision
    the two can round a score to different bits). ``softmax_in_dtype``: half-precision scores'
    softmax worked out by torch in their dtype (GPT-2, BERT, BART call nn.functional.softmax on
    them), not in float32 and rounded back (Llama's softmax(dtype=float32)): the two can differ
    in the last bit. ``check``: whether to read every weight for an overflow's NaN (``attend_in_blocks``
    reads each block's context instead, R x Dv numbers, not R x S). ``softmax_out``: a float32 tensor of
    the weights' shape the softmax writes into, leaving the softmax's input in ``out`` (what ``attend_in_blocks``
    gives a consumer that reads the scores too): the same weights as in place.
    """
    if torch.is_grad_enabled() and (queries.requires_grad or keys.requires_grad):  # attention x gradient's autograd run
        return _differentiable_weights(queries, keys, divisor, mask, bias, softcap, scale, softmax_in_dtype, mask_from)
    transposed = keys.transpose(-2, -1)  # (H, Dk, T)
    weights = queries @ transposed if out is None else torch.matmul(queries, transposed, out=out)  # (H, T, T) raw scores
    if scale is None:
        weights.div_(divisor)  # the same operation as softmax_input_of, so scaled_scores agree
    else:
        weights.mul_(scale)
    if bias is not None:
        weights.add_(bias)  # (H, T, T) + (H or 1, T, T)
    if softcap is not None:
        weights.div_(softcap).tanh_().mul_(softcap)
    if mask is not None:
        masked = weights if mask_from == 0 and mask.shape[-1] == weights.shape[-1] else weights[..., mask_from : mask_from + mask.shape[-1]]
        masked.add_(mask if mask.is_floating_point() else hiding(mask, weights.dtype))  # (H, T, T) + (T, T): -inf where hidden, 0 elsewhere
    # softmax subtracts the row max, so large finite inputs cannot overflow; a masked cell is exp(-inf) = exactly 0
    weights = _softmax_(weights, in_dtype=softmax_in_dtype, into=softmax_out)
    if check and not math.isfinite(float(weights.sum())):
        explain_overflow(queries, keys, divisor)
    return weights


def _differentiable_weights(
    queries: torch.Tensor, keys: torch.Tensor, divisor: float, mask: torch.Tensor | None, bias: torch.Tensor | None,
    softcap: float | None, scale: float | None, softmax_in_dtype: bool, mask_from: int,
) -> torch.Tensor:  # fmt: skip
    """``attention_weights``' operations, in their order, each into a new tensor: what autograd can run back
    through (the in-place buffer above cannot be differentiated). The same numbers."""
    weights = queries @ keys.transpose(-2, -1)  # (..., T, T)
    weights = weights / divisor if scale is None else weights * scale
    if bias is not None:
        weights = weights + bias
    if softcap is not None:
        weights = torch.tanh(weights / softcap) * softcap
    if mask is not None:
        hidden = mask if mask.is_floating_point() else hiding(mask, weights.dtype)  # (T, T) -inf where hidden
        if mask_from or mask.shape[-1] != weights.shape[-1]:
            hidden = torch.nn.functional.pad(hidden, (mask_from, weights.shape[-1] - mask_from - mask.shape[-1]))
        weights = weights + hidden
    if weights.dtype == torch.float32 or softmax_in_dtype:
        return torch.softmax(weights, dim=-1)
    return torch.softmax(weights, dim=-1, dtype=torch.float32).to(weights.dtype)


def _softmax_(x: torch.Tensor, in_dtype: bool = False, into: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension, written back into x (or into float32 scores' ``into``, which
    it returns): torch.softmax's own numbers (public API). Contiguous float32 scores on the CPU in place
    (its kernel reads a row's inputs before it writes them: the same numbers as into a new tensor, with
    no copy); elsewhere one (T, T) block at a time through one block allocated once for every head:
    half-precision scores exponentiated in float32 and rounded back, as transformers' eager attention
    does for most families; with ``in_dtype``, torch's softmax of the half-precision block itself. A
    masked cell (-inf) becomes exactly 0."""
    if into is not None or (x.dtype == torch.float32 and x.device.type == "cpu" and x.is_contiguous()):
        return torch.softmax(x, dim=-1, out=x if into is None else into)
    blocks = x.reshape(-1, *x.shape[-2:]) if x.dim() > 2 else x.unsqueeze(0)  # (..., T, T) -> (B, T, T), a view
    dtype = x.dtype if in_dtype else torch.float32
    scratch = torch.empty(blocks.shape[-2:], dtype=dtype, device=x.device)  # (T, T)
    for block in blocks:
        torch.softmax(block, dim=-1, dtype=None if in_dtype else torch.float32, out=scratch)  # (T, T)
        block.copy_(scratch)  # cast back to x's dtype
    return x


def explain_overflow(queries: torch.Tensor, keys: torch.Tensor, divisor: float) -> None:
    """Raise the error that says which step overflowed float32 (weights came out NaN or inf)."""
    scores = queries @ keys.transpose(-2, -1)  # (H, T, T)
    check_finite((scores,), "the attention scores Q K^T", "use smaller embeddings")
    raise ConfigError(
        f"the softmax input (scores divided by {divisor:.3g}): a value overflows float32 "
        f"(beyond +-3.4e38); raise --temperature"
    )


def hiding(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(T, T) -inf where ``mask`` hides a key, 0 where a query sees it: added to finite scores,
    the masked_fill(mask, -inf) of ``softmax_input_of`` cell for cell (s + 0 is s, s - inf is -inf),
    in one vectorised add (several times faster than a masked_fill_ through a mask broadcast
    over the heads). A score that overflowed to +inf where it is hidden
    becomes NaN, which ``attention_weights`` reports as the overflow it is."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))


def causal_mask(n_tokens: int) -> torch.Tensor:
    """(T, T) True above the diagonal: the keys a query may not see."""
    return torch.ones(n_tokens, n_tokens, dtype=torch.bool).triu(diagonal=1)


def check_finite(tensors: tuple[torch.Tensor, ...], what: str, fix: str) -> None:
    if not all(bool(torch.isfinite(t).all()) for t in tensors):
        raise ConfigError(f"{what}: a value overflows float32 (beyond +-3.4e38); {fix}")


def split_heads(m: torch.Tensor, heads: int) -> torch.Tensor:
    """Head h's columns of a (..., T, H*d) projection, heads first (a checkpoint's
    ablations run a batch of texts: the leading dimensions)."""
    return m.reshape(*m.shape[:-1], heads, -1).transpose(-3, -2)  # (..., T, H*d) -> (..., T, H, d) -> (..., H, T, d)
