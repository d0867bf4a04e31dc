"""A sequence classifier's head (a checkpoint saved as *ForSequenceClassification): where it pools
the last layer's output, the layers it runs, its labels; and its logits, as transformers computes
them (dropout off).

  - BERT: the pooler (dense, tanh) on position 0, then ``classifier``;
  - DistilBERT: ``pre_classifier`` and ReLU on position 0, then ``classifier``;
  - RoBERTa, XLM-R, MPNet: ``classifier.dense`` and tanh on position 0, then ``classifier.out_proj``;
  - ModernBERT: the model's final norm, position 0 (``classifier_pooling`` "cls") or the mean of every
    position ("mean"), then its head (dense, ``classifier_activation``, norm) and ``classifier``;
  - the decoders (GPT-2, Llama, Qwen, Mistral, Gemma, ...): the model's final norm, then ``score`` on the
    last position whose id is not ``pad_token_id`` (the last position where config.json names none).

Shapes: T tokens, D d_model, N labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from attn_cli.sources.checkpoint.families.base import Family, Weights
from attn_cli.sources.checkpoint.files import ROOT
from attn_cli.runtime.errors import ModelUnavailable

# a family's head: (its first layer, the activation after it, the output layer), names after ROOT but the
# pooler's (inside the base model's prefix); "head": the family's own ``head_transform`` (dense, activation, norm)
LAYOUTS: dict[str, tuple[str | None, str, str]] = {
    "bert": ("pooler.dense", "tanh", f"{ROOT}classifier"),
    "distilbert": (f"{ROOT}pre_classifier", "relu", f"{ROOT}classifier"),
    "roberta": (f"{ROOT}classifier.dense", "tanh", f"{ROOT}classifier.out_proj"),
    "mpnet": (f"{ROOT}classifier.dense", "tanh", f"{ROOT}classifier.out_proj"),
    "modernbert": (None, "head", f"{ROOT}classifier"),
}
SCORE = f"{ROOT}score"  # every decoder's: one matrix on the pooled position


@dataclasses.dataclass(frozen=True)
class Classifier:
    """What a *ForSequenceClassification adds to its base model."""

    first: str | None  # the head's first layer (None: the output layer reads the pooled state, or "head" transforms it)
    activation: str  # "tanh", "relu", "head" (the family's head_transform) or "" (none)
    out: str  # the layer that gives the N logits
    labels: tuple[str, ...]  # config.json's id2label, by index
    problem: str  # "single_label_classification", "multi_label_classification" or "regression"
    pooling: str  # "first", "mean" or "last" (the last position that is not padding)
    pad_id: int | None  # the decoders' pad_token_id


def classifier_for(family: Family, config: Mapping[str, Any], weights: Weights) -> Classifier | None:
    """The head of a checkpoint whose config.json names a *ForSequenceClassification architecture, else
    None; ModelUnavailable where its tensors are not there."""
    architectures = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        return None
    key = "roberta" if family.family == "xlm-roberta" else family.family
    first, activation, out = LAYOUTS.get(key, (None, "", SCORE)) if family.encoder else (None, "", SCORE)
    if not weights.has(f"{out}.weight"):
        raise ModelUnavailable(f"config.json names {architectures[0]}, but its classification head ({out.removeprefix(ROOT)}.weight) "
                               "is not in the weights; fetch the model's files again")  # fmt: skip
    n_labels = int(weights.entry(f"{out}.weight").shape[0])  # type: ignore[attr-defined]
    given = config.get("id2label") or {}
    labels = tuple(str(given.get(str(i), given.get(i, f"LABEL_{i}"))) for i in range(n_labels))
    problem = str(config.get("problem_type") or ("regression" if n_labels == 1 else "single_label_classification"))
    pooling = "last" if not family.encoder else ("mean" if key == "modernbert" and config.get("classifier_pooling") == "mean" else "first")
    pad = config.get("pad_token_id")
    return Classifier(first, activation, out, labels, problem, pooling, pad if isinstance(pad, int) and not isinstance(pad, bool) else None)


def pooled_position(classifier: Classifier, ids: Sequence[int]) -> int | None:
    """The position the head reads: 0, the last whose id is not the pad id (as transformers: the last
    position where there is none; 0 where every id is one), or None for the mean of every position."""
    if classifier.pooling == "first":
        return 0
    if classifier.pooling == "mean":
        return None
    if classifier.pad_id is None:
        return len(ids) - 1
    return max((i for i, tid in enumerate(ids) if tid != classifier.pad_id), default=0)


def classifier_logits(family: Family, weights: Weights, classifier: Classifier, hidden: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """(T, D) the last layer's output -> (N,) float32 logits."""
    position = pooled_position(classifier, ids)
    hidden = family.model_norm(weights, hidden)  # (T, D) the base model's own last step (a decoder's final norm)
    x = hidden.mean(dim=0) if position is None else hidden[position]  # (D,)
    if classifier.activation == "head":
        x = family.head_transform(weights, x)  # (D,)
    elif classifier.first is not None:
        x = _linear(weights, classifier.first, x)  # (D,)
        x = torch.tanh(x) if classifier.activation == "tanh" else torch.relu(x)
    return _linear(weights, classifier.out, x).float()  # (N,)


def label_scores(classifier: Classifier, logits: torch.Tensor) -> torch.Tensor | None:
    """(N,) the labels' probabilities: softmax (one label), sigmoid (several), None (regression)."""
    if classifier.problem == "regression":
        return None
    return torch.sigmoid(logits) if classifier.problem == "multi_label_classification" else torch.softmax(logits, dim=-1)


def _linear(weights: Weights, name: str, x: torch.Tensor) -> torch.Tensor:
    bias = f"{name}.bias"
    return torch.nn.functional.linear(x, weights.read(f"{name}.weight"), weights.read(bias) if weights.has(bias) else None)
