"""Two maps of what each token contributes to each position's output, per layer and through the model.

**Value zeroing** (Mohebbi et al., EACL 2023, "Quantifying Context Mixing in Transformers"; their code:
hmohebbi/ValueZeroing): for layer l and key j, j's value vector is zeroed in every head, the layer
runs again (attention, residual, norms, MLP: the layer's output as the next layer reads it) and
C_ij is the cosine distance between position i's output with and without j; each row divided by
its sum, as the authors' demo does. The re-run is the source's (``families.attribution``); here is
its arithmetic (``cosine_distance``, ``normalized_rows``).

**ALTI** (Ferrando et al., EMNLP 2022, "Measuring the Mixing of Contextual Information in the
Transformer"; mt-upc/transformer-contributions for post-norm layers, mt-upc/logit-explanations for
pre-norm ones): the attention block's output y_i written as a sum over input tokens,

    c_ij  = sum_h A^h_ij (v^h_j W_o^h) + [i = j] x_j          what j sends to i (the residual: x_i)
    T_i(x_j) = c_ij                                          pre-norm: y_i = x_i + attention_i
             = g * (c_ij - mean c_ij) / s_i                  post-norm: y_i = LN(x_i + attention_i)
    y_i   = sum_j T_i(x_j) + (the biases' terms)

with s_i the norm's divisor for row i (sqrt(var + eps), its own epsilon; an RMS norm neither
centres nor has a bias), and where a family norms the attention's output before the residual
(Gemma 2 and 3, OLMo 2: y_i = x_i + N(attention_i)) the norm acts on the heads' part only. The
contribution of j to i is max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), each row divided by its sum
(exact L1 distances: the authors' ``F.pairwise_distance`` adds 1e-6 to each component).

Both combine through the layers as the authors' code does: the product C_L ... C_1 C_0, no
identity added, no renormalising (``joint``).

Shapes: T tokens, D d_model, H heads, Dv per-head value size, R a block of query rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.records.results import Rollout

if TYPE_CHECKING:
    import torch

# The (R, T, D) float32 vectors of one block of ALTI's rows
ALTI_BLOCK_BYTES = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class BlockNorm:
    """Where a layer's attention block has a norm, and the norm (a family's ``attention_block``)."""

    where: str  # "none": y = x + a (pre-norm); "around": y = N(x + a) (post-norm); "attention": y = x + N(a)
    weight: torch.Tensor | None = None  # (D,) the gain
    bias: torch.Tensor | None = None  # (D,)
    eps: float = 0.0
    centered: bool = True  # LayerNorm (the mean subtracted); False: an RMS norm
    plus_one: bool = False  # Gemma's gain: 1 + weight

    def linear(self, v: torch.Tensor) -> torch.Tensor:
        """(..., D) the norm's linear part: centred (LayerNorm), times the gain; no divisor, no bias."""
        if self.centered:
            v = v - v.mean(dim=-1, keepdim=True)
        assert self.weight is not None
        return v * (1.0 + self.weight.float() if self.plus_one else self.weight.float())

    def divisor(self, z: torch.Tensor) -> torch.Tensor:
        """(R, D) the norm's inputs -> (R, 1) the reciprocal of each row's divisor."""
        import torch

        spread = z.var(dim=-1, unbiased=False, keepdim=True) if self.centered else z.pow(2).mean(dim=-1, keepdim=True)
        return torch.rsqrt(spread + self.eps)


def alti_layer(
    weights: torch.Tensor, values: torch.Tensor, w_out: torch.Tensor, b_out: torch.Tensor | None, residual: torch.Tensor,
    block: BlockNorm,
) -> torch.Tensor:  # fmt: skip
    """A layer's ALTI map (T, T) float32, rows summing to 1: ``weights`` (H, T, T), ``values`` (H, T, Dv)
    (per query head), W_o ``w_out`` (D, H*Dv) and ``b_out`` (D,), the residual stream ``residual``
    (T, D) (the layer's input), and its ``block``."""
    return normalized_rows(alti_parts(weights, values, w_out, b_out, residual, block)[0])


def alti_parts(
    weights: torch.Tensor, values: torch.Tensor, w_out: torch.Tensor, b_out: torch.Tensor | None, residual: torch.Tensor,
    block: BlockNorm,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``alti_layer``'s contributions before the rows are normalized (T, T), and the block's output y
    (T, D) as their sum makes it (what the layer computes: the tests hold it to the model's)."""
    import torch

    heads, n, d_v = values.shape
    weights, values, residual = weights.float(), values.float(), residual.float()
    moved = torch.einsum("hjv,dhv->hjd", values, w_out.float().view(-1, heads, d_v))  # (H, T, D) what head h sends of j
    bias = torch.zeros(moved.shape[-1]) if b_out is None else b_out.float()  # (D,)
    attention = torch.einsum("hij,hjd->id", weights, moved) + bias  # (T, D) the block's attention output
    scale = None
    if block.where != "none":
        scale = block.divisor(residual + attention if block.where == "around" else attention)  # (T, 1)
    out, y = torch.zeros(n, n), torch.zeros(n, moved.shape[-1])
    rows = max(1, ALTI_BLOCK_BYTES // (4 * n * moved.shape[-1]))
    for first in range(0, n, rows):
        last = min(first + rows, n)
        out[first:last], y[first:last] = _alti_rows(weights[:, first:last], moved, bias, residual, block, scale, first)
    return out, y


def _alti_rows(
    weights: torch.Tensor, moved: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, block: BlockNorm,
    scale: torch.Tensor | None, first: int,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Rows first .. first + R - 1 of a layer's ALTI contributions, not normalized (R, T), and y (R, D)."""
    import torch

    r = weights.shape[1]
    rows = torch.arange(first, first + r)
    c = torch.einsum("hij,hjd->ijd", weights, moved)  # (R, T, D) c_ij without the residual
    if block.where == "none":
        c[torch.arange(r), rows] += residual[rows]
        y = c.sum(dim=1) + bias  # (R, D)
    elif block.where == "around":
        assert scale is not None and block.weight is not None
        c[torch.arange(r), rows] += residual[rows]
        c = block.linear(c) * scale[rows, None]  # (R, T, D) T_i(x_j)
        y = c.sum(dim=1) + block.linear(bias) * scale[rows]  # (R, D)
        y = y + block.bias.float() if block.bias is not None else y
    else:  # "attention": the norm on the heads' part, the residual after it
        assert scale is not None
        c = block.linear(c) * scale[rows, None]  # (R, T, D)
        y = c.sum(dim=1) + block.linear(bias) * scale[rows] + residual[rows]  # (R, D)
        y = y + block.bias.float() if block.bias is not None else y
        c[torch.arange(r), rows] += residual[rows]
    whole = y.abs().sum(dim=-1, keepdim=True)  # (R, 1) ||y_i||_1
    return (whole - (y[:, None, :] - c).abs().sum(dim=-1)).clamp(min=0), y  # (R, T), (R, D)


def cosine_distance(changed: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """1 - cos between each of ``changed`` (B, T, D) and ``clean`` (T, D), row by row: (B, T) float64,
    clipped to [0, 2] as scikit-learn's ``cosine_distances`` (the authors') clips it."""
    a, b = changed.double(), clean.double()
    cos = (a * b).sum(dim=-1) / (a.norm(dim=-1) * b.norm(dim=-1))  # (B, T)
    return (1.0 - cos).clamp(0.0, 2.0)


def normalized_rows(m: torch.Tensor) -> torch.Tensor:
    """(T, T) each row divided by its sum (a row of zeros stays zeros), float32."""
    total = m.sum(dim=-1, keepdim=True)
    return (m / total.where(total > 0, 1.0)).float()


def joint(maps: Sequence[torch.Tensor], mask: torch.Tensor | None) -> Rollout:
    """The product C_L ... C_1 C_0 of layers 0 .. L's (T, T) maps (layer 0 first), as the authors'
    ``compute_joint_attention`` combines them (no residual added, rows not renormalized), in float64,
    in ``Rollout``'s shape (``mask``: the pairs with no path, a causal model's future)."""
    import torch

    product = maps[0].double()
    for m in maps[1:]:
        product = m.double() @ product  # (T, T)
    return Rollout(len(maps) - 1, product.to(torch.float32), mask)
