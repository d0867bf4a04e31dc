"""What analyses leave in a trace beside the layers: the rollout through the kept layers
(``attn_cli.analysis.rollout`` computes it) and every position's predictions
(``attn_cli.analysis.effects``), or a classifier's labels. Shapes: T tokens, K predictions kept per position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# The attribution maps a run may hold (``Selection.maps``), by their JSON names: the per-layer maps
# (``LayerWeights.maps``) and those through the layers (``Trace.maps``, beside the rollout and the flow)
LAYER_MAPS = ("value_zeroing", "alti", "attention_gradient")
COMBINED = ("rollout", "flow", "alti", "value_zeroing_rollout", "attention_gradient")
ATTRIBUTIONS = ("value_zeroing", "value_zeroing_rollout", "alti", "attention_gradient")  # --what's names besides weights, rollout, norms, flow
MAPS = ("weights", "rollout", "norms", "flow", *(name.replace("_", "-") for name in ATTRIBUTIONS))  # --what's names on run and html


def what_names(values: str | Sequence[str] | None, choices: Sequence[str] = MAPS) -> tuple[str, ...]:
    """--what's (and the API's ``what=``) names, comma-separated or repeated, each one of ``choices`` (``MAPS``; faithfulness's
    --methods: its maps): ValueError naming the others."""
    values = [values] if isinstance(values, str) else list(values or ())
    names = tuple(dict.fromkeys(name.strip() for value in values for name in value.split(",") if name.strip()))
    unknown = [name for name in names if name not in choices]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: choose from {', '.join(choices)}")
    return names


def attribution_maps(names: Sequence[str]) -> tuple[str, ...]:
    """The attribution maps among --what's ``names`` (``Selection.maps``), by their JSON names: value-zeroing -> value_zeroing."""
    return tuple(name.replace("-", "_") for name in names if name.replace("-", "_") in ATTRIBUTIONS)


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


@dataclasses.dataclass(frozen=True)
class Target:
    """The output a gradient map explains (attention x gradient): one logit of one position."""

    kind: str  # "label" (a classifier's), "next" (a decoder's next token), "mask" (a masked LM's filler of its first mask)
    position: int | None  # the position whose output it is; None: a classifier that pools every position
    index: int  # the label's index, or the token's id
    label: str  # the label's name, or the token's text
    logit: float
    predicted: bool  # the model's own top choice (no --target-label / --target-token)

    def as_dict(self) -> dict[str, object]:
        """The ``target`` object of the JSON's ``attention_gradient``."""
        return dataclasses.asdict(self)

    @property
    def what(self) -> str:
        """The output in words: 'label positive', 'the next token “ Paris”', 'the mask's filler “cat”'."""
        return {"label": f"label {self.label}", "next": f"the next token “{self.label}”", "mask": f"the mask's filler “{self.label}”"}[self.kind]

    @property
    def where(self) -> str:
        """The position whose output it is, in words."""
        return "the mean of every position" if self.position is None else f"position {self.position}"

