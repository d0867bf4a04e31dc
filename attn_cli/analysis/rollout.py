"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

For layers 0 .. L, each layer's weights averaged over all its heads, with the residual
stream as an identity half::

    Â_l = 0.5 * mean_h A_l[h] + 0.5 * I,   each row renormalized to sum 1
    R   = Â_L ... Â_1 Â_0

R[i, j]: how much of input token j reaches position i after layer L. Rows sum to 1; a
causal model's R is lower-triangular. The product is folded in as the layers are
computed (``RolloutAccumulator``): a checkpoint's layer loop hands each layer's weights
over before it drops them, so a rollout through 28 layers holds one (T, T) product, not
28 layers of (H, T, T) weights. ``rollout_of`` folds the layers a trace already holds.

Shapes: T tokens, H heads. Computed in float64 (the products of L row-stochastic
matrices), kept as float32 like every table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.records.results import Rollout
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerWeights


def mixed_weights(weights: torch.Tensor) -> torch.Tensor:
    """(H, T, T) a layer's weights -> (T, T) float64 Â = 0.5 mean_h A + 0.5 I, each row renormalized
    (a head at a time: never a float64 copy of all H)."""
    import torch

    n = weights.shape[-1]
    mean = torch.zeros(n, n, dtype=torch.float64, device=weights.device)  # (T, T)
    for head in weights:
        mean += head  # (T, T)
    mixed = 0.5 * (mean / weights.shape[0]) + 0.5 * torch.eye(n, dtype=torch.float64, device=weights.device)  # (T, T)
    return mixed / mixed.sum(dim=-1, keepdim=True)  # (T, T) rows sum to 1


class RolloutAccumulator:
    """Folds layers 0, 1, 2, ... into the rollout, one ``add`` per layer, in order. ``keep``: each
    layer's mixed weights kept too (``mixed``, on the CPU), which attention flow reads."""

    def __init__(self, *, keep: bool = False) -> None:
        self._product: torch.Tensor | None = None  # (T, T) float64: Â_l ... Â_0 so far
        self._layers = 0
        self._causal = True  # every layer so far hides each query's future keys
        self.mixed: list[torch.Tensor] | None = [] if keep else None  # each layer's (T, T) float64 Â, with ``keep``

    def add(self, weights: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Layer ``self.layers``'s (H, T, T) weights and its (T, T) mask (True = hidden)."""
        import torch

        n = weights.shape[-1]
        mixed = mixed_weights(weights)  # (T, T)
        if self.mixed is not None:
            self.mixed.append(mixed.cpu())
        self._product = mixed if self._product is None else mixed @ self._product  # (T, T) @ (T, T) -> (T, T)
        future = torch.ones(n, n, dtype=torch.bool, device=weights.device).triu(1)  # (T, T)
        self._causal = self._causal and mask is not None and bool(mask[future].all())
        self._layers += 1

    @property
    def layers(self) -> int:
        return self._layers

    def result(self) -> Rollout:
        import torch

        assert self._product is not None, "add at least one layer"
        n = self._product.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1) if self._causal else None  # (T, T)
        return Rollout(self._layers - 1, self._product.to("cpu", torch.float32), mask)


def rollout_of(layers: Sequence[LayerWeights], through_layer: int | None = None) -> Rollout:
    """The rollout through ``through_layer`` (default: the last of ``layers``) from
    ``layers``, which must hold every layer 0 .. through_layer (a trace of attention
    computed elsewhere, a saved file, the toy's one layer). UsageError naming the
    missing layers otherwise."""
    return accumulated(layers, through_layer).result()


def accumulated(layers: Sequence[LayerWeights], through_layer: int | None = None, *, keep: bool = False) -> RolloutAccumulator:
    """``rollout_of``'s accumulator, every layer 0 .. through_layer added (``keep``: their mixed weights kept)."""
    by_index = {layer.layer: layer for layer in layers}
    last = max(by_index) if through_layer is None else through_layer
    missing = [i for i in range(last + 1) if i not in by_index]
    if missing:
        held = ", ".join(map(str, sorted(by_index)))
        raise UsageError(
            f"--rollout through layer {last} needs the weights of layers 0 to {last}, and layer{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing))} {'are' if len(missing) > 1 else 'is'} not here (held: {held}); keep every layer"
        )
    accumulator = RolloutAccumulator(keep=keep)
    for index in range(last + 1):
        layer = by_index[index]
        accumulator.add(layer.weights, layer.mask)
    return accumulator
