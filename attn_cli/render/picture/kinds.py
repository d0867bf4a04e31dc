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
    norms = "norms"  # value-weighted norms ||a_ij f_h(x_j)|| (--norms; attn_cli.analysis.norms)
    rollout = "rollout"  # attention rollout through the layers, one (T, T) for all heads (--rollout)


KINDS: dict[What, tuple[What, ...]] = {
    What.weights: (What.weights,),
    What.scores: (What.scores,),
    What.scaled: (What.scaled,),
    What.all: (What.scores, What.scaled, What.weights),  # the order attention computes them
    What.norms: (What.norms,),
    What.rollout: (What.rollout,),
}
STOCHASTIC = (What.weights, What.rollout)  # rows sum to 1: the fixed 0..1 scale, --log
ANALYSES = (What.norms, What.rollout)  # computed on request: the source is asked for them

FORMATS = ("png", "svg", "pdf")  # the extensions -o takes; write_figure saves each
