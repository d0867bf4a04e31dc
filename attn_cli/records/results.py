"""What analyses leave in a trace beside the layers: the rollout through the kept layers
(``attn_cli.analysis.rollout`` computes it) and every position's predictions
(``attn_cli.analysis.effects``). Shapes: T tokens, K predictions kept per position.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass(frozen=True)
class Rollout:
    """The rollout of a text through layers 0 .. ``through_layer``."""

    through_layer: int
    weights: torch.Tensor  # (T, T) float32; rows sum to 1
    mask: torch.Tensor | None  # (T, T) True: no path from the key to the query (a causal model's future); None: every pair

    @property
    def causal(self) -> bool:
        return self.mask is not None and bool(self.mask.any())


@dataclasses.dataclass(frozen=True)
class Predictions:
    """The top ``k`` of every position."""

    ids: torch.Tensor  # (T, K) long: token ids, most likely first
    probs: torch.Tensor  # (T, K) float32: softmax of the position's logits
    logits: torch.Tensor  # (T, K) float32
    texts: tuple[tuple[str, ...], ...]  # (T, K) each id's text, as the tokenizer decodes it
    labels: tuple[tuple[str, ...], ...]  # (T, K) the same, drawn printable (tables, pictures)

    @property
    def k(self) -> int:
        return self.ids.shape[-1]
