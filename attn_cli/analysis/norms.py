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

    from attn_cli.attention import LayerAttention

AnyLayer = TypeVar("AnyLayer", bound="LayerAttention")

BLOCK_BYTES = 32 * 2**20  # float64 working set of one block of rows or keys


def with_norms(layer: AnyLayer) -> AnyLayer:
    """``layer`` with its value-weighted norms (``norms``, ``layer_norms``) filled in."""
    import dataclasses

    head, layer_norms = value_norms(layer)
    return dataclasses.replace(layer, norms=head, layer_norms=layer_norms)


def mixing_weights(layer: LayerAttention) -> torch.Tensor:
    """(H, T, T) the weights that mixed the values: after dropout, when there was any."""
    return layer.dropped_weights if layer.dropped_weights is not None else layer.weights


def head_outputs(layer: LayerAttention, keys: slice = slice(None)) -> torch.Tensor:
    """(H, K, D) f_h(x_j) of keys ``keys``: what each key sends through each head, in
    float64. Without an output projection, D = H*Dv and head h's vector is zero
    outside its slice."""
    import torch

    values = layer.values[:, keys].to(torch.float64)  # (H, K, Dv), b_v included
    heads, n, d_v = values.shape
    out = layer.projections.out
    if out is None:  # output = concat: W_o is the identity
        sent = values.new_zeros(heads, n, heads * d_v)  # (H, T, H*Dv)
        for h in range(heads):
            sent[h, :, h * d_v : (h + 1) * d_v] = values[h]
        return sent
    w_o = out.weight.to(torch.float64).view(-1, heads, d_v).transpose(0, 1)  # (D, H*Dv) -> (D, H, Dv) -> (H, D, Dv)
    return values @ w_o.transpose(1, 2)  # (H, K, Dv) @ (H, Dv, D) -> (H, K, D)


def _gram(layer: LayerAttention) -> torch.Tensor:
    """(T, H, H) G_j[h, g] = <f_h(x_j), f_g(x_j)>, a block of keys at a time (f of every
    key at once would be (H, T, D) in float64)."""
    import torch

    heads, n = layer.values.shape[:2]
    width = layer.projections.out.weight.shape[0] if layer.projections.out is not None else heads * layer.values.shape[-1]
    gram = torch.empty(n, heads, heads, dtype=torch.float64)  # (T, H, H)
    step = max(1, BLOCK_BYTES // (8 * heads * width))
    for start in range(0, n, step):
        sent = head_outputs(layer, slice(start, start + step))  # (H, K, D)
        gram[start : start + step] = torch.einsum("hkd,gkd->khg", sent, sent)  # (K, H, H)
    return gram


def value_norms(layer: LayerAttention) -> tuple[torch.Tensor, torch.Tensor]:
    """((H, T, T) ||a_ij^h f_h(x_j)|| per head, (T, T) ||sum_h a_ij^h f_h(x_j)|| per layer),
    float32; worked out a block of query rows at a time (float64 blocks of about
    ``BLOCK_BYTES``), so what it holds beyond its results is (T, H, H) and one block."""
    import torch

    weights = mixing_weights(layer)  # (H, T, T)
    values = layer.values.to(torch.float64)  # (H, T, Dv)
    heads, n = weights.shape[0], weights.shape[-1]
    if layer.projections.out is None:  # disjoint slices: ||f_h(x_j)|| = ||v_hj||, G_j diagonal
        sent_sq = (values * values).sum(dim=-1)  # (H, T)
        gram = torch.diag_embed(sent_sq.transpose(0, 1))  # (T, H) -> (T, H, H)
    else:
        gram = _gram(layer)  # (T, H, H)
        sent_sq = torch.diagonal(gram, dim1=1, dim2=2).transpose(0, 1)  # (T, H) -> (H, T)
    sent_norm = sent_sq.clamp(min=0).sqrt()  # (H, T) ||f_h(x_j)||
    head = torch.empty(heads, n, n, dtype=torch.float32)  # (H, T, T)
    layer_norms = torch.empty(n, n, dtype=torch.float32)  # (T, T)
    step = max(1, BLOCK_BYTES // (3 * 8 * heads * n))
    for start in range(0, n, step):
        rows = slice(start, start + step)
        a = weights[:, rows, :].to(torch.float64)  # (H, R, T)
        head[:, rows, :] = a * sent_norm[:, None, :]  # (H, R, T) * (H, 1, T)
        # a_ij^T G_j a_ij for every (i, j), key j as the batch: (T_j, R, H) @ (T_j, H, H)
        by_key = a.permute(2, 1, 0)  # (H, R, T_j) -> (T_j, R, H)
        squared = ((by_key @ gram) * by_key).sum(dim=-1)  # (T_j, R, H) -> (T_j, R)
        layer_norms[rows, :] = squared.transpose(0, 1).clamp(min=0).sqrt()  # (R, T_j)
    return head, layer_norms
