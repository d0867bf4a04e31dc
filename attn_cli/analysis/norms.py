"""Value-weighted norms (Kobayashi et al. 2020, "Attention is Not Only a Weight").

A head's output is a sum over keys of the weight times what the key sends::

    f_h(x_j) = (x_j W_v^h + b_v^h) W_o^h        (D,) what key j sends through head h
    output_i = sum_h sum_j a_ij^h f_h(x_j) + b_o

where W_o^h are the columns of the output projection (nn.Linear's (D, H*Dv)) that read
head h's slice of the concat. A weight on a key that sends almost nothing moves almost
nothing: ||a_ij^h f_h(x_j)|| = a_ij^h ||f_h(x_j)|| measures what does move (``head``,
per head), and ||sum_h a_ij^h f_h(x_j)|| what the layer moves from j to i (``layer``).

The layer's norm is computed without a (T, T, D) tensor: with G_j the H x H Gram matrix
of key j's f_h(x_j), ||sum_h a_ij^h f_h(x_j)||^2 = a_ij^T G_j a_ij, an (H, T, T)-sized
contraction. Grouped-query heads read the values of their key/value head (a
LayerAttention holds them repeated per query head); with the toy's --dropout, a is the
dropped weights that mixed the values; a toy without --out-proj has W_o = I (the concat
is the output), so each head's f lives in its own slice and G_j is diagonal.

Shapes: T tokens, D the output's width, H heads, Dv per-head value size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerAttention

AnyLayer = TypeVar("AnyLayer", bound="LayerAttention")

# One block's buffer (of rows, or of keys): under the smallest mmap threshold set by
# attn_cli.runtime.allocator (1 MiB), blocks reuse the heap's memory instead of faulting in fresh pages
# each time; 32 MiB blocks made --norms on MiniLM at T = 512 take 2.3x a plain run, not 1.6x.
BLOCK_BYTES = 768 * 2**10


def with_norms(layer: AnyLayer) -> AnyLayer:
    """``layer`` with its value-weighted norms (``norms``, ``layer_norms``) filled in."""
    import dataclasses

    head, layer_norms = value_norms(layer)
    return dataclasses.replace(layer, norms=head, layer_norms=layer_norms)


def mixing_weights(layer: LayerAttention) -> torch.Tensor:
    """(H, T, T) the weights that mixed the values: after dropout, when there was any."""
    return layer.dropped_weights if layer.dropped_weights is not None else layer.weights


def head_outputs(layer: LayerAttention, keys: slice = slice(None), dtype: torch.dtype | None = None) -> torch.Tensor:
    """(H, K, D) f_h(x_j) of keys ``keys``: what each key sends through each head, in
    ``dtype`` (default float64). Without an output projection, D = H*Dv and head h's
    vector is zero outside its slice."""
    import torch

    dtype = dtype or torch.float64
    values = layer.values[:, keys].to(dtype)  # (H, K, Dv), b_v included
    heads, n, d_v = values.shape
    out = layer.projections.out
    if out is None:  # output = concat: W_o is the identity
        sent = values.new_zeros(heads, n, heads * d_v)  # (H, T, H*Dv)
        for h in range(heads):
            sent[h, :, h * d_v : (h + 1) * d_v] = values[h]
        return sent
    w_o = out.weight.to(dtype).view(-1, heads, d_v).transpose(0, 1)  # (D, H*Dv) -> (D, H, Dv) -> (H, D, Dv)
    return values @ w_o.transpose(1, 2)  # (H, K, Dv) @ (H, Dv, D) -> (H, K, D)


def _gram(layer: LayerAttention) -> torch.Tensor:
    """(T, H, H) float32 G_j[h, g] = <f_h(x_j), f_g(x_j)>, a block of keys at a time (f of
    every key at once would be (H, T, D))."""
    import torch

    heads, n = layer.values.shape[:2]
    width = layer.projections.out.weight.shape[0] if layer.projections.out is not None else heads * layer.values.shape[-1]
    gram = torch.empty(n, heads, heads, dtype=torch.float32, device=layer.values.device)  # (T, H, H)
    step = max(1, BLOCK_BYTES // (4 * heads * width))
    for start in range(0, n, step):
        sent = head_outputs(layer, slice(start, start + step), torch.float32).transpose(0, 1)  # (H, K, D) -> (K, H, D)
        gram[start : start + step] = torch.bmm(sent, sent.transpose(1, 2))  # (K, H, D) @ (K, D, H) -> (K, H, H)
    return gram


def value_norms(layer: LayerAttention) -> tuple[torch.Tensor, torch.Tensor]:
    """((H, T, T) ||a_ij^h f_h(x_j)|| per head, (T, T) ||sum_h a_ij^h f_h(x_j)|| per layer),
    float32; worked out a block of query rows at a time (blocks of about ``BLOCK_BYTES``),
    so what it holds beyond its results is (T, H, H) and one block.

    Float32 throughout, as the weights are (float64 took several times as long): within about 1e-6 of a float64 computation relative to the
    layer's largest norm; a cancellation between heads can cost relative digits in a norm
    far smaller than that, never absolute ones."""
    import torch

    weights = mixing_weights(layer).float()  # (H, T, T), or cross-attention's (H, T, S)
    heads, queries, n = weights.shape  # n keys
    if layer.projections.out is None:  # disjoint slices: ||f_h(x_j)|| = ||v_hj||, G_j diagonal
        values = layer.values.float()  # (H, T, Dv)
        sent_sq = (values * values).sum(dim=-1)  # (H, T)
        gram = torch.diag_embed(sent_sq.transpose(0, 1))  # (T, H) -> (T, H, H)
    else:
        gram = _gram(layer)  # (T, H, H)
        sent_sq = torch.diagonal(gram, dim1=1, dim2=2).transpose(0, 1)  # (T, H) -> (H, T)
    sent_norm = sent_sq.clamp(min=0).sqrt()  # (H, T) ||f_h(x_j)||
    head = weights * sent_norm[:, None, :]  # (H, T, T) * (H, 1, T)
    layer_norms = torch.empty(queries, n, dtype=torch.float32, device=weights.device)  # (T, T)
    step = max(1, BLOCK_BYTES // (4 * heads * n))
    for start in range(0, queries, step):
        rows = slice(start, start + step)
        # a_ij^T G_j a_ij for every (i, j), key j as the batch: (T_j, H, H) @ (T_j, H, R). Each
        # head's (R, T_j) block transposed (a 2-D copy), then viewed with j first: a 3-D
        # permute copy with h innermost cost three times as much.
        by_key = weights[:, rows, :].transpose(1, 2).contiguous().permute(1, 0, 2)  # (H, R, T_j) -> (H, T_j, R) -> (T_j, H, R) view
        squared = torch.linalg.vecdot(torch.matmul(gram, by_key), by_key, dim=1)  # (T_j, H, R) -> (T_j, R)
        layer_norms[rows, :] = squared.transpose(0, 1).clamp(min=0).sqrt()  # (R, T_j)
    return head, layer_norms
