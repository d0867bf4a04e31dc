"""``heads --ablate``: each head's change in the model's loss when its slice of W_o's input is
zeroed or set to its mean. Each layer's input and concat are kept from the clean run, so an
ablation recomputes the layers after it only, a layer's ablations as one batch, through the
one layer loop (``loop.forward`` from a later layer: ``start``). A decoder's loss is its
next-token loss over the text; an encoder-decoder's, the target's (teacher-forced, each decoder
position predicting its label), with the heads of one of its three attentions ablated.

Shapes: B ablations in a batch, T tokens (a decoder's), S source tokens, D d_model, H heads,
Dv per head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from attn_cli.records.layers import LayerAttention, Linear
from attn_cli.records.tokens import Tokens
from attn_cli.sources.checkpoint.families.base import Family, LayerTensors, Weights
from attn_cli.sources.checkpoint.families.loop import Visit, cross_step, forward
from attn_cli.sources.checkpoint.families.seq2seq import EncoderDecoder

Losses = Callable[[torch.Tensor], list[float]]  # a batch of the last layer's normed outputs (B, T, D) -> each one's loss
Kept = tuple[torch.Tensor, LayerTensors, torch.Tensor, Linear]  # a layer's attention: its input, tensors, concat, W_o
# (layer, its attention's input, its tensors, W_o's output for a batch of ablated concats) -> each one's loss
Resume = Callable[[int, torch.Tensor, LayerTensors, torch.Tensor], list[float]]


def ablated_losses(
    family: Family, weights: Weights, tokens: Tokens, losses: Losses, method: str, device: torch.device | str = "cpu",
) -> tuple[float, list[list[float]]]:  # fmt: skip
    """(the clean loss, per layer and head the loss with that head ablated), for a decoder over
    ``tokens``. Ablating head h of layer l sets its slice of W_o's input (the concat) to zero
    (``method`` "zero") or to its mean over the text's positions ("mean"), every other head
    untouched; layers l .. L-1 are computed again (``multi_head`` and the families' steps take
    a leading batch dimension)."""
    kept: list[Kept] = []
    done = forward(family, weights, tokens, (), device, "weights", whole=True, visit=keeper(kept))
    assert done.hidden is not None

    def resume(index: int, layer_input: torch.Tensor, t: LayerTensors, output: torch.Tensor) -> list[float]:
        after = family.finish_layer(t, layer_input, output)  # (B, T, D) the layer's outputs, each ablated
        rest = forward(family, weights, tokens, (), device, "weights", whole=True, start=(index + 1, after)).hidden
        assert rest is not None
        return losses(family.final_norm(weights, rest))  # (B, T, D)

    with torch.inference_mode():
        (clean_loss,) = losses(family.final_norm(weights, done.hidden)[None])  # (1, T, D)
        batch, _ = ablation_batch(family, len(tokens))
        return clean_loss, each_head_ablated(kept, family.heads, batch, method, resume)


def ablated_pair_losses(
    model: EncoderDecoder, weights: Weights, source: Tokens, decoder: Tokens, stack: str, losses: Losses, method: str,
    device: torch.device | str = "cpu",
) -> tuple[float, list[list[float]]]:  # fmt: skip
    """``ablated_losses`` for an encoder-decoder: the heads of ``stack`` ("encoder": the encoder's
    self-attention, "decoder": the decoder's, "cross": cross-attention), ``losses`` over the
    decoder's normed outputs. An encoder head's ablation runs the rest of the encoder and the
    whole decoder again over each ablated memory; a decoder head's, the rest of the decoder."""
    enc, dec = model.encoder, model.decoder
    kept: list[Kept] = []  # the ablated stack's attentions only
    encoded = forward(enc, weights, source, (), device, "weights", whole=True, visit=keeper(kept) if stack == "encoder" else None).hidden
    assert encoded is not None
    memory = enc.final_norm(weights, encoded)  # (S, D)

    def decoder_visit(index: int, hidden: torch.Tensor, t: LayerTensors, layer: LayerAttention) -> None:
        if layer.cross == (stack == "cross"):
            keeper(kept)(index, hidden, t, layer)

    visit = decoder_visit if stack != "encoder" else None
    clean = forward(dec, weights, decoder, (), device, "weights", whole=True, memory=memory, visit=visit).hidden
    assert clean is not None
    embedded = dec.embed(weights, decoder) if stack == "encoder" else None  # (T, D) the decoder's first input, once

    def decoder_from(start: int, hidden: torch.Tensor, memory: torch.Tensor) -> list[float]:
        """(B, T, D) a batch of decoder layer ``start``'s inputs, over ``memory`` (S, D) or (B, S, D)."""
        rest = forward(dec, weights, decoder, (), device, "weights", whole=True, memory=memory, start=(start, hidden)).hidden
        assert rest is not None
        return losses(dec.final_norm(weights, rest))  # (B, T, D)

    def resume(index: int, layer_input: torch.Tensor, t: LayerTensors, output: torch.Tensor) -> list[float]:
        if stack == "encoder":  # the rest of the encoder, then the whole decoder over each ablated memory
            after = enc.finish_layer(t, layer_input, output)  # (B, S, D)
            rest = forward(enc, weights, source, (), device, "weights", whole=True, start=(index + 1, after)).hidden
            assert rest is not None and embedded is not None
            return decoder_from(0, embedded.expand(len(after), *embedded.shape), enc.final_norm(weights, rest))
        if stack == "decoder":  # the layer's cross-attention on the ablated self-attention's residual
            between = dec.between(t, layer_input, output)  # (B, T, D)
            output, layer_input = cross_step(dec, t, index, between, memory).output, between
        return decoder_from(index + 1, dec.finish_layer(t, layer_input, output), memory)

    with torch.inference_mode():
        (clean_loss,) = losses(dec.final_norm(weights, clean)[None])  # (1, T, D)
        family = enc if stack == "encoder" else dec
        batch, _ = ablation_batch(family, max(len(source), len(decoder)))
        return clean_loss, each_head_ablated(kept, family.heads, batch, method, resume)


def keeper(into: list[Kept]) -> Visit:
    """A ``forward`` visitor that keeps each attention's input, tensors, concat and W_o in ``into``."""

    def keep(index: int, hidden: torch.Tensor, t: LayerTensors, layer: LayerAttention) -> None:
        into.append((hidden, t, layer.concat, layer.projections.out))

    return keep


def each_head_ablated(kept: Sequence[Kept], heads: int, batch: int, method: str, resume: Resume) -> list[list[float]]:
    """Per kept layer, per head: the loss with the head's slice of the concat zeroed or set to its
    mean over the positions (``method``), from ``resume`` given W_o's output, ``batch`` heads at a time."""
    ablated = []
    for index, (layer_input, t, concat, out) in enumerate(kept):
        row: list[float] = []
        d_v = concat.shape[-1] // heads  # (N, H*Dv): each head's Dv columns
        for first in range(0, heads, batch):
            chosen = range(first, min(first + batch, heads))
            changed = concat.expand(len(chosen), *concat.shape).clone()  # (B, N, H*Dv)
            for b, h in enumerate(chosen):
                cut = slice(h * d_v, (h + 1) * d_v)
                changed[b, :, cut] = 0.0 if method == "zero" else concat[:, cut].mean(dim=0, keepdim=True)  # (N, Dv)
            row += resume(index, layer_input, t, out(changed))  # (B, N, D) W_o's output, each ablated
        ablated.append(row)
    return ablated


ABLATION_BATCH_BYTES = 256 * 2**20  # a batch of ablations' tensors in flight through one layer


def ablation_batch(family: Family, n_tokens: int) -> tuple[int, int]:
    """(how many of a layer's ablations run as one batch, the bytes in flight for each): a
    layer's ablations go through the later layers together, in bigger matmuls (faster than
    one text at a time: bench/ablation.py measures by how much)."""
    n = n_tokens
    per_text = 4 * (3 * family.heads * n * n + n * (8 * family.d_model + 3 * family.d_ffn))
    return max(1, min(family.heads, ABLATION_BATCH_BYTES // per_text)), per_text
