"""What analyses leave in a trace beside the layers: the rollout through the kept layers
(``attn_cli.analysis.rollout`` computes it) and every position's predictions
(``attn_cli.analysis.effects``), or a classifier's labels. Shapes: T tokens, K predictions kept per position.
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


@dataclasses.dataclass(frozen=True)
class Classification:
    """A sequence classifier's labels (--predict on a *ForSequenceClassification), most likely first."""

    position: int | None  # the position its head reads; None: the mean of every position (ModernBERT's mean pooling)
    indices: tuple[int, ...]  # label indices
    labels: tuple[str, ...]  # their names (config.json's id2label)
    probs: tuple[float, ...] | None  # softmax of the logits (one label per text), sigmoid (several), None (regression)
    logits: tuple[float, ...]

    @property
    def k(self) -> int:
        return len(self.indices)

    @property
    def scores(self) -> tuple[float, ...]:
        """What the labels are ranked by: their probabilities, or a regression head's logits."""
        return self.probs if self.probs is not None else self.logits

    @property
    def where(self) -> str:
        """The position its head reads, in words."""
        return "the mean of every position" if self.position is None else f"position {self.position}"

    def ranked(self) -> list[tuple[int, str, float | None, float]]:
        """(index, label, probability or None, logit), most likely first."""
        probs = self.probs if self.probs is not None else (None,) * self.k
        return list(zip(self.indices, self.labels, probs, self.logits))
