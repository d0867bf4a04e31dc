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
    value_zeroing = "value-zeroing"  # one layer's value-zeroing map, one (T, T) for all heads (analysis.contributions)
    value_zeroing_rollout = "value-zeroing-rollout"  # their product through the layers
    alti = "alti"  # ALTI's contributions multiplied through the layers (analysis.contributions)
    attention_gradient = "attention-gradient"  # attention x gradient's relevance through the layers (families.gradient)


KINDS: dict[What, tuple[What, ...]] = {
    What.weights: (What.weights,),
    What.scores: (What.scores,),
    What.scaled: (What.scaled,),
    What.all: (What.scores, What.scaled, What.weights),  # the order attention computes them
    What.norms: (What.norms,),
    What.rollout: (What.rollout,),
    What.flow: (What.flow,),
    What.value_zeroing: (What.value_zeroing,),
    What.value_zeroing_rollout: (What.value_zeroing_rollout,),
    What.alti: (What.alti,),
    What.attention_gradient: (What.attention_gradient,),
}
ATTRIBUTIONS = (What.value_zeroing, What.value_zeroing_rollout, What.alti, What.attention_gradient)  # Selection.maps: each kind's JSON name
# rows sum to 1: the fixed 0..1 scale, --log (attention x gradient's relevance: I plus what the layers add, not a share)
STOCHASTIC = (What.weights, What.rollout, What.flow, What.value_zeroing, What.value_zeroing_rollout, What.alti)
ANALYSES = (What.norms, What.rollout, What.flow, *ATTRIBUTIONS)  # computed on request: the source is asked for them
MAGNITUDES = (What.norms, What.attention_gradient)  # from 0 up to the largest drawn (--log: from the smallest above 0)
# one (T, T) for every head together: through the layers (Trace.rollout, Trace.flow, Trace.maps), or one layer's value zeroing
COMBINED = (What.rollout, What.flow, *ATTRIBUTIONS)


def json_name(kind: What) -> str:
    """The kind's name in the JSON and in ``Selection.maps``: value-zeroing -> value_zeroing."""
    return kind.value.replace("-", "_")


def combined_of(run: Any, kind: What) -> Any:
    """The run's map of ``kind`` drawn as one matrix (a ``Rollout``: through_layer, weights, mask), None where it
    has none; one layer's value zeroing as its first kept layer's."""
    if kind is What.value_zeroing:
        from attn_cli.records.results import Rollout

        layer = run.layers[0]
        m = layer.maps.get("value_zeroing")
        return None if m is None else Rollout(layer.layer, m, layer.mask)
    return run.combined(json_name(kind)) if kind in COMBINED else None

FORMATS = ("png", "svg", "pdf")  # the extensions -o takes; write_figure saves each
