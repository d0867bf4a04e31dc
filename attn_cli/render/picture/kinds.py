"""What a heatmap can draw and write, with no matplotlib: the command's option
choices (parsed before anything heavy loads) and the renderer share this one list."""

from __future__ import annotations

import enum
from typing import Any


class What(str, enum.Enum):
    """Which (T, T) matrix to draw."""

    weights = "weights"  # softmax(scaled scores): rows sum to 1
    scores = "scores"  # raw Q K^T
    scaled = "scaled"  # the softmax input: scores / divisor
    all = "all"  # scores, scaled and weights side by side
    norms = "norms"  # value-weighted norms ||a_ij f_h(x_j)|| (--norms; attn_cli.analysis.norms)
    rollout = "rollout"  # attention rollout through the layers, one (T, T) for all heads (--rollout)
    flow = "flow"  # attention flow through the layers, one (T, T) for all heads (analysis.flow)


KINDS: dict[What, tuple[What, ...]] = {
    What.weights: (What.weights,),
    What.scores: (What.scores,),
    What.scaled: (What.scaled,),
    What.all: (What.scores, What.scaled, What.weights),  # the order attention computes them
    What.norms: (What.norms,),
    What.rollout: (What.rollout,),
    What.flow: (What.flow,),
}
STOCHASTIC = (What.weights, What.rollout, What.flow)  # rows sum to 1: the fixed 0..1 scale, --log
ANALYSES = (What.norms, What.rollout, What.flow)  # computed on request: the source is asked for them
COMBINED = (What.rollout, What.flow)  # one (T, T) through the layers for every head together (Trace.rollout, Trace.flow)


def combined_of(run: Any, kind: What) -> Any:
    """The run's rollout or flow (``kind``), None where it has none."""
    return run.rollout if kind is What.rollout else run.flow if kind is What.flow else None

FORMATS = ("png", "svg", "pdf")  # the extensions -o takes; write_figure saves each
