"""``heads --ablate``: each head's change in next-token loss when its slice of W_o's input is
zeroed or set to its mean. Each layer's input and concat are kept from the clean run, so an
ablation recomputes the layers after it only, a layer's ablations as one batch.

Shapes: B ablations in a batch, T tokens, D d_model, H heads, Dv per head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attn_cli.records.layers import LayerAttention, Linear
from attn_cli.records.tokens import Tokens
from attn_cli.sources.checkpoint.families.base import Family, Head, LayerTensors, Weights
from attn_cli.sources.checkpoint.families.loop import forward


def ablated_losses(
    family: Family, weights: Weights, tokens: Tokens, head: Head, losses: Callable[[torch.Tensor], list[float]], method: str,
    device: torch.device | str = "cpu",
) -> tuple[float, list[list[float]]]:
    """(the clean loss, per layer and head the loss with that head ablated): ``losses`` maps
    a batch of the last layer's normed outputs (B, T, D) to each one's loss. Ablating head h of layer l sets its slice
    of W_o's input (the concat) to zero (``method`` "zero") or to its mean over the text's
    positions ("mean"), every other head untouched. Each layer's input and concat are kept
    from the clean run, so an ablation recomputes layers l .. L-1 only, a layer's ablations
    as one batch (``multi_head`` and the families' steps take a leading batch dimension)."""
    clean: list[tuple[torch.Tensor, LayerTensors, torch.Tensor, Linear]] = []  # per layer: input, tensors, concat, W_o

    def record(index: int, hidden: torch.Tensor, t: LayerTensors, layer: LayerAttention) -> None:
        clean.append((hidden, t, layer.concat, layer.projections.out))

    def loss_from(start: int, hidden: torch.Tensor) -> list[float]:
        """(B, T, D) a batch of layer ``start``'s inputs -> each one's loss, through the one loop."""
        done = forward(family, weights, tokens, (), device, "weights", whole=True, start=(start, hidden))
        assert done.hidden is not None
        return losses(family.final_norm(weights, done.hidden))  # (B, T, D)

    done = forward(family, weights, tokens, (), device, "weights", whole=True, visit=record)
    assert done.hidden is not None
    with torch.inference_mode():
        (clean_loss,) = losses(family.final_norm(weights, done.hidden)[None])  # (1, T, D)
        batch, _ = ablation_batch(family, len(tokens))
        ablated = []
        for index, (layer_input, t, concat, out) in enumerate(clean):
            row: list[float] = []
            d_v = concat.shape[-1] // family.heads  # (T, H*Dv): each head's Dv columns
            for first in range(0, family.heads, batch):
                chosen = range(first, min(first + batch, family.heads))
                changed = concat.expand(len(chosen), *concat.shape).clone()  # (B, T, H*Dv)
                for b, h in enumerate(chosen):
                    cut = slice(h * d_v, (h + 1) * d_v)
                    changed[b, :, cut] = 0.0 if method == "zero" else concat[:, cut].mean(dim=0, keepdim=True)  # (T, Dv)
                after = family.finish_layer(t, layer_input, out(changed))  # (B, T, D) this layer's outputs, each ablated
                row += loss_from(index + 1, after)
            ablated.append(row)
    return clean_loss, ablated


ABLATION_BATCH_BYTES = 256 * 2**20  # a batch of ablations' tensors in flight through one layer


def ablation_batch(family: Family, n_tokens: int) -> tuple[int, int]:
    """(how many of a layer's ablations run as one batch, the bytes in flight for each): a
    layer's ablations go through the later layers together, in bigger matmuls (faster than
    one text at a time: bench/ablation.py measures by how much)."""
    n = n_tokens
    per_text = 4 * (3 * family.heads * n * n + n * (8 * family.d_model + 3 * family.d_ffn))
    return max(1, min(family.heads, ABLATION_BATCH_BYTES // per_text)), per_text
