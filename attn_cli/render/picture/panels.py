"""What a heatmap's panels hold: one (T, T) matrix per head and kind (weights, scores,
scaled scores, norms, rollout), masked where a query may not see a key, the colour limits
shared or per head, and the picture's options (``HeatmapOptions``). Shapes: T tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Colormap

from attn_cli.records.trace import Trace as Run
from attn_cli.render.picture.canvas import DEFAULT_DPI
from attn_cli.render.picture.kinds import COMBINED, MAGNITUDES, STOCHASTIC, What, combined_of
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerAttention


DEFAULT_CMAPS = {What.weights: "viridis", What.scores: "RdBu_r", What.scaled: "RdBu_r", What.norms: "magma", **{k: "viridis" for k in COMBINED}, What.attention_gradient: "magma"}
MASKED_COLOR = "#d4d4d4"  # neutral grey: not on either colour map
SPECIAL_COLOR = "#7a5195"  # tick labels of the special tokens a model's tokenizer adds
FAINT_WEIGHT = 0.05  # on the fixed 0..1 scale, a weight under this is drawn in about the colour of 0
FAINT_SHARE = 0.95  # a weights picture with this share of faint cells reads as one colour


@dataclasses.dataclass(frozen=True)
class HeatmapOptions:
    """How to draw; every field has a sensible automatic value."""

    what: What = What.weights
    heads: tuple[int, ...] | None = None  # None: every head, in a grid
    per_head_scale: bool = False  # False: one colour scale shared by the heads of a kind
    annotate: bool | None = None  # None: write the values in the cells when they are big enough
    cmap: str | None = None  # None: viridis for weights, RdBu_r (centred on 0) for scores
    log: bool = False  # weights on a log scale: long texts spread their weight thin
    size: tuple[float, float] | None = None  # (width, height) inches; None: grows with T
    dpi: float = DEFAULT_DPI


@dataclasses.dataclass(frozen=True)
class Panel:
    kind: What
    head: int
    matrix: np.ma.MaskedArray  # (T, T)
    limits: tuple[float, float]
    log: bool = False


def matrices(run: Run, kind: What, head: int) -> np.ma.MaskedArray:
    """(T, T) values of one head of the run's first kept layer (``layer_matrix``), or the
    run's rollout or flow (``kind`` rollout or flow: every head together, ``head`` unused)."""
    if kind in COMBINED:
        combined = combined_of(run, kind)
        assert combined is not None, f"the command computes the {kind.value} it draws"
        return masked_matrix(combined.weights, combined.mask, kind)
    return layer_matrix(run.layers[0], kind, head)


def layer_matrix(result: LayerAttention, kind: What, head: int) -> np.ma.MaskedArray:
    """(T, T) values of one head as a masked array. Causal runs mask the future keys
    of the scaled scores and weights; raw scores Q K^T exist for every pair (the
    mask comes after them), so they are drawn whole."""
    if kind is What.weights:
        values = result.weights[head]  # (T, T)
    elif kind is What.scores:
        values = result.scores[head]  # (T, T)
    elif kind is What.scaled:
        values = result.head(head).scaled_scores  # (T, T), masked cells -inf
    elif kind is What.norms:
        if result.norms is None:
            raise UsageError("this trace has no value-weighted norms: compute them with --norms")
        values = result.norms[head]  # (T, T)
    else:
        raise ValueError(f"not one matrix: {kind}")
    return masked_matrix(values, result.mask, kind)


def masked_matrix(values: torch.Tensor, hidden: torch.Tensor | None, kind: What) -> np.ma.MaskedArray:
    """(T, T) values as a masked array: ``hidden`` (True: the query may not see the key)
    and NaN cells (a renormalized row with no weight left) masked, except for raw scores."""
    data = values.detach().cpu().numpy()  # (T, T)
    empty = np.isnan(data)  # (T, T) a renormalized row with no weight left (--hide-tokens)
    if empty.any():
        mask = empty if hidden is None else empty | hidden.numpy()
        return np.ma.masked_array(np.where(mask, 0.0, data).astype(data.dtype), mask=mask)
    if hidden is not None and kind is not What.scores:
        mask = hidden.numpy()  # (T, T) the keys each query may not see
        # Under the mask 0, not the scaled scores' -inf: nothing non-finite reaches the colour norm.
        return np.ma.masked_array(np.where(mask, 0.0, data).astype(data.dtype), mask=mask)
    return np.ma.masked_array(data, mask=np.zeros(data.shape, dtype=bool))


def panels_of(run: Run, kind: What, heads: Sequence[int], options: HeatmapOptions) -> list[Panel]:
    """One panel per head, with colour limits shared by the heads unless ``per_head_scale``."""
    drawn = [matrices(run, kind, h) for h in heads]
    scopes = [[m] for m in drawn] if options.per_head_scale else [drawn] * len(drawn)
    return [Panel(kind, h, m, colour_limits(kind, scope, options), log=kind in (*STOCHASTIC, *MAGNITUDES) and options.log)
            for h, m, scope in zip(heads, drawn, scopes)]


def colour_limits(kind: What, scope: list[np.ma.MaskedArray], options: HeatmapOptions) -> tuple[float, float]:
    visible_values = [m for m in scope if m.count()]
    if kind in MAGNITUDES and not options.log:  # magnitudes: from 0 to the largest drawn
        top = max((float(m.max()) for m in visible_values), default=1.0)
        return 0.0, top if top > 0 and math.isfinite(top) else 1.0
    if kind in (*STOCHASTIC, *MAGNITUDES) and options.log:
        # From the smallest non-zero weight (down to a power of ten) up to 1, or the head's largest.
        positive = [float(m[m > 0].min()) for m in visible_values if (m > 0).any()]
        low = 10 ** math.floor(math.log10(max(min(positive, default=1e-3), 1e-6)))
        top = max((float(m.max()) for m in visible_values), default=1.0) if options.per_head_scale or kind in MAGNITUDES else 1.0
        return low, max(top, low * 10)
    if kind in STOCHASTIC:
        if not options.per_head_scale:
            return 0.0, 1.0  # a fixed scale: the same colour means the same weight in every picture
        top = max((float(m.max()) for m in visible_values), default=1.0)
        return 0.0, top if top > 0 else 1.0
    # Diverging maps centred on zero: symmetric limits over the visible cells only.
    extent = max((float(np.abs(m).max()) for m in visible_values), default=0.0)
    extent = extent if extent > 0 and math.isfinite(extent) else 1.0
    return -extent, extent


def faint_share(drawn: Sequence[np.ma.MaskedArray]) -> float:
    """The share of visible weights under ``FAINT_WEIGHT`` over all ``drawn`` panels."""
    visible_cells = sum(int(m.count()) for m in drawn)
    faint = sum(int((m < FAINT_WEIGHT).sum()) for m in drawn)  # masked cells do not count
    return faint / visible_cells if visible_cells else 0.0


def faint_hint(drawn: Sequence[np.ma.MaskedArray], options: HeatmapOptions) -> str:
    """A title line when weights on the fixed 0..1 scale would be nearly one colour
    (long texts spread each row's weight thin), naming --log; else ""."""
    if options.log or options.per_head_scale:
        return ""
    share = faint_share(drawn)
    if share < FAINT_SHARE:
        return ""
    return (f"\nnearly one colour: {share:.0%} of the weights are under {FAINT_WEIGHT:g} on the 0..1 scale; "
            f"--log shows their differences")


def colour_map(name: str) -> Colormap:
    """Matplotlib's colour map ``name`` with masked cells in the neutral grey; UsageError if unknown."""
    try:
        cmap = colormaps[name]
    except KeyError:
        raise UsageError(f"unknown colour map {name!r}: use one of matplotlib's, e.g. viridis, magma, Blues, RdBu_r") from None
    return cmap.with_extremes(bad=MASKED_COLOR)


def cell_number(value: float, kind: What) -> str:
    if kind in STOCHASTIC:
        return f"{value:.2f}"
    size = abs(value)
    return f"{value:.2f}" if size < 10 else f"{value:.1f}" if size < 100 else f"{value:.0f}"


KIND_NAMES = {What.weights: "weights", What.scores: "scores Q·Kᵀ", What.scaled: "scaled scores", What.norms: "norms ‖a·f(x)‖",
              What.rollout: "rollout", What.flow: "flow", What.value_zeroing: "value zeroing",
              What.value_zeroing_rollout: "value zeroing rollout", What.alti: "ALTI", What.attention_gradient: "relevance"}  # fmt: skip
