"""Attention x gradient (Chefer, Gur and Wolf, ICCV 2021, "Generic Attention-model Explainability for
Interpreting Bi-Modal and Encoder-Decoder Transformers"; their rule as hila-chefer/Transformer-MM-Explainability
computes it): for each layer, Abar = mean over heads of the positive part of (the gradient of the
target's logit with respect to the layer's attention weights) x (the weights); R starts as the identity
and R = R + Abar R through the layers.

The gradients come from an autograd run of the one layer loop (``forward``'s ``grad``): the same steps,
each into a new tensor, the graph kept from the embeddings to the target's logit, then one backward.
Every other run keeps its no-grad, in-place path.

Shapes: T tokens, H heads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from attn_cli.records.layers import LayerAttention
from attn_cli.records.results import Rollout
from attn_cli.records.tokens import Tokens
from attn_cli.sources.checkpoint.families.base import Family, LayerTensors, Weights
from attn_cli.sources.checkpoint.families.loop import Visit, forward
from attn_cli.sources.checkpoint.families.seq2seq import EncoderDecoder

Score = Callable[[torch.Tensor], torch.Tensor]  # the last layer's output (T, D) -> the target's logit, a scalar


def attention_gradients(family: Family, weights: Weights, tokens: Tokens, score: Score, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """Each layer's (T, T) Abar = mean_h (dy/dA_h * A_h)^+, float32 on the CPU, layer 0 first: y = ``score``
    of the last layer's output (before the model's final norm; ``score`` applies what follows)."""
    kept: list[torch.Tensor] = []
    done = forward(family, weights, tokens, (), device, "weights", whole=True, visit=visit(kept), grad=True)
    assert done.hidden is not None
    with torch.enable_grad():
        score(done.hidden).backward()
    return averaged(kept)


def pair_attention_gradients(
    model: EncoderDecoder, weights: Weights, source: Tokens, decoder: Tokens, score: Score, device: torch.device | str = "cpu"
) -> list[torch.Tensor]:  # fmt: skip
    """``attention_gradients`` of an encoder-decoder's encoder: the source through the encoder and the decoder's
    inputs through the decoder (its cross-attention reading the encoder's output) in one autograd run, y =
    ``score`` of the decoder's last layer's output; each encoder layer's Abar."""
    kept: list[torch.Tensor] = []
    encoded = forward(model.encoder, weights, source, (), device, "weights", whole=True, visit=visit(kept), grad=True).hidden
    assert encoded is not None
    with torch.enable_grad():
        memory = model.encoder.final_norm(weights, encoded)  # (S, D), in the graph
    done = forward(model.decoder, weights, decoder, (), device, "weights", whole=True, memory=memory, grad=True)
    assert done.hidden is not None
    with torch.enable_grad():
        score(done.hidden).backward()
    return averaged(kept)


def visit(kept: list[torch.Tensor]) -> Visit:
    """A ``forward`` visitor that keeps each self-attention's weights, their gradient kept by the backward."""

    def keep(index: int, hidden: torch.Tensor, t: LayerTensors, layer: LayerAttention) -> None:
        if not layer.cross:
            layer.weights.retain_grad()
            kept.append(layer.weights)

    return keep


def averaged(kept: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each layer's (H, T, T) weights, their gradient filled in -> (T, T) mean_h (grad * weights)+, float32 on the CPU."""
    maps = []
    for w in kept:
        assert w.grad is not None, "every layer's weights reach the target"
        maps.append((w.grad * w).clamp(min=0).mean(dim=0).detach().float().cpu())  # (T, T)
    return maps


def relevance(maps: Sequence[torch.Tensor], causal: bool) -> Rollout:
    """R through the last of ``maps`` (layer 0 first): R = I, then R = R + Abar_l R, in float64, as
    ``Rollout`` (``mask``: a causal model's future, where nothing reaches)."""
    n = maps[0].shape[-1]
    product = torch.eye(n, dtype=torch.float64)
    for m in maps:
        product = product + m.double() @ product  # (T, T)
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
    return Rollout(len(maps) - 1, product.to(torch.float32), mask)
