"""What a heatmap can draw and write, with no matplotlib: the command's option
choices (parsed before anything heavy loads) and the renderer share this one list."""

from __future__ import annotations

import enum


class What(str, enum.Enum):
    """Which (T, T) matrix to draw."""

    weights = "weights"  # softmax(scaled scores): rows sum to 1
    scores = "scores"  # raw Q K^T
    scaled = "scaled"  # the softmax input: scores / divisor
    all = "all"  # scores, scaled and weights side by side


KINDS: dict[What, tuple[What, ...]] = {
    What.weights: (What.weights,),
    What.scores: (What.scores,),
    What.scaled: (What.scaled,),
    What.all: (What.scores, What.scaled, What.weights),  # the order attention computes them
}

FORMATS = ("png", "svg", "pdf")  # the extensions -o takes; write_figure saves each
