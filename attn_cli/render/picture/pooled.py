"""Pictures of a long text's attention, where a pixel per cell is more than a picture has:
a pooled overview (each pixel the max, or the mean, of a group of weights), the --query rows
as strips over the whole document, and a --window of queries and keys at full resolution.

Shapes: T query rows, S keys, H heads, Q chosen rows, G x C the pooled map's groups.

Every panel's values come from the trace's layers: a ``LayerSummary`` (a run in blocks) brings
its pooled maps and rows; a layer with its tables is pooled here the same way
(``attn_cli.analysis.pooling.PooledMap`` fed the table as one block), so both paths draw the
same picture.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib import rc_context
from matplotlib.figure import Figure

from attn_cli.analysis.pooling import POOL_CELLS, PooledMap, pool_grid
from attn_cli.analysis.rowstats import row_of
from attn_cli.records.summary import LayerSummary
from attn_cli.records.tokens import visible
from attn_cli.render.picture.canvas import check_pixels
from attn_cli.render.picture.fonts import font_families
from attn_cli.render.picture.panels import HeatmapOptions, colour_map
from attn_cli.render.picture.titles import fit_title
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.records.layers import LayerWeights
    from attn_cli.records.trace import Trace

POOL_ABOVE = 2048  # tokens: a longer text's weights picture is pooled (its panel has fewer pixels than cells)
TICKS = 6  # labelled positions on a pooled axis
LABEL_CHARS = 12
PANEL_INCHES = 4.2


@dataclasses.dataclass(frozen=True)
class LongView:
    """What a long text's picture shows: the pooled overview, the chosen rows as strips, or a window."""

    how: str = "max"  # --pool: each pixel the max or the mean of its group
    cells: int = POOL_CELLS
    window: tuple[int, int] | None = None  # --window A:B: query rows A .. B - 1 at full resolution
    keys: tuple[int, int] | None = None  # --keys C:D: key columns C .. D - 1 (default: the window's own)


def pooled(layer: LayerWeights | LayerSummary, heads: Sequence[int], n_queries: int, n_keys: int, view: LongView) -> tuple[torch.Tensor, int, int]:
    """(H', G, C) the heads' pooled maps, and the rows and keys a pixel pools (the largest group)."""
    if isinstance(layer, LayerSummary):
        if layer.pooled is None:
            raise UsageError("this trace kept no pooled maps: draw it with heatmap, which asks for them")
        kept = [layer.pooled_heads.index(h) for h in heads]
        return layer.pooled[kept], layer.pool_sizes[0], layer.pool_sizes[1]
    made = PooledMap(list(heads), n_queries, n_keys, view.cells, view.cells, view.how)
    made(0, layer.weights, 0)
    return made.result(), made.row_size, made.column_size


def rows_matrix(layer: LayerWeights | LayerSummary, queries: Sequence[int], head: int) -> torch.Tensor:
    """(Q, S) the chosen rows' weights in ``head``."""
    return torch.stack([row_of(layer, q, head) for q in queries])


def long_figure(run: Trace, options: HeatmapOptions, view: LongView, *, new_figure: Callable[..., Figure] | None = None) -> Figure:
    """The trace's kept layers (a row each) and shown heads (a column each): strips of the chosen
    rows where the trace has --query rows (a window of them with ``view.window``), else the pooled map."""
    heads = list(run.shown_heads if options.heads is None else options.heads)
    layers = list(run.layers)
    n_queries = len(run.tokens)
    panels = [_panels(run, layer, heads, view) for layer in layers]
    drawn = [values for _, row in panels for values, *_ in row]
    # the overview's maxima on the weights' 0..1; rows and windows of a long text are thin: 0 to their largest
    top = 1.0 if view.window is None and not run.queries else max(float(max(v.max() for v in drawn)), 1e-6)
    norm = LogNorm(1e-4, top, clip=True) if options.log else Normalize(0.0, top)
    text = "".join(t for _, row in panels for _, _, ys, xs in row for _, t in (*ys, *xs))
    with rc_context({"font.family": font_families(text)}):
        fig = (new_figure or Figure)(figsize=options.size or _size(len(layers), len(heads), view, len(run.queries)), dpi=options.dpi, layout="constrained")
        if new_figure is None:
            FigureCanvasAgg(fig)
        check_pixels(tuple(fig.get_size_inches()), options.dpi)
        axes = fig.subplots(len(layers), len(heads), squeeze=False)
        cmap = colour_map(options.cmap or "viridis")
        for r, (layer, (_, row)) in enumerate(zip(layers, panels)):
            for c, (h, (values, extent, yticks, xticks)) in enumerate(zip(heads, row)):
                image = axes[r][c].imshow(values.numpy(), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest", extent=extent)
                axes[r][c].set_title(f"layer {layer.layer} head {h}", fontsize=9)
                _ticks(axes[r][c], yticks, xticks, left=c == 0, bottom=r == len(layers) - 1)
        scale = "" if top == 1.0 else f", 0 to the largest drawn ({top:.3g})"
        fig.colorbar(image, ax=axes, shrink=0.8, label="weight" + (" (log)" if options.log else "") + scale)
        title = f"{run.model.name}: {n_queries:,} tokens; {panels[0][0]}"  # wrapped between words where wider than the figure
        fig.suptitle(fit_title([[title]], (fig.get_figwidth() - 0.2) * 72, 11), fontsize=11, parse_math=False)
    return fig


def _panels(run: Trace, layer: LayerWeights | LayerSummary, heads: Sequence[int], view: LongView) -> tuple[str, list[Drawn]]:
    """One layer's panels, a head each: a window, the --query strips, or the pooled map."""
    if view.window is not None:
        return _window_panels(run, layer, heads, view)
    if run.queries:
        return _strip_panels(run, layer, heads, view)
    return _pooled_panels(layer, heads, len(run.tokens), len(run.own_stack.key_tokens), view)


Drawn = tuple[torch.Tensor, tuple[float, float, float, float], list[tuple[float, str]], list[tuple[float, str]]]


def _pooled_panels(layer: LayerWeights | LayerSummary, heads: Sequence[int], n_queries: int, n_keys: int, view: LongView) -> tuple[str, list[Drawn]]:
    maps, row_size, column_size = pooled(layer, heads, n_queries, n_keys, view)
    what = f"each pixel the {view.how} of {row_size} x {column_size} weights (query rows x keys)"
    extent = (0.0, float(n_keys), float(n_queries), 0.0)  # axes in token positions
    return what, [(maps[i], extent, _spread(n_queries), _spread(n_keys)) for i in range(len(heads))]


def _strip_panels(run: Trace, layer: LayerWeights | LayerSummary, heads: Sequence[int], view: LongView) -> tuple[str, list[Drawn]]:
    queries, n_keys = list(run.queries), len(run.own_stack.key_tokens)
    bounds = pool_grid(n_keys, view.cells)
    size = bounds[1] - bounds[0] if len(bounds) > 1 else 1
    texts = run.tokens.texts
    yticks = [(i + 0.5, f"{q} {visible(texts[q])[:LABEL_CHARS]}") for i, q in enumerate(queries)] if len(queries) <= 24 else []
    drawn = []
    for h in heads:
        strips = PooledMap([0], len(queries), n_keys, len(queries), view.cells, view.how)
        strips(0, rows_matrix(layer, queries, h)[None], 0)  # (1, Q, S) -> (1, Q, C)
        drawn.append((strips.result()[0], (0.0, float(n_keys), float(len(queries)), 0.0), yticks, _spread(n_keys)))
    pooled_text = f", each pixel the {view.how} of {size} keys" if size > 1 else ""
    return f"the rows of {len(queries)} chosen quer{'y' if len(queries) == 1 else 'ies'} over every key{pooled_text}", drawn


def _window_panels(run: Trace, layer: LayerWeights | LayerSummary, heads: Sequence[int], view: LongView) -> tuple[str, list[Drawn]]:
    assert view.window is not None
    (a, b), (c, d) = view.window, view.keys or view.window
    texts, key_texts = run.tokens.texts, run.own_stack.key_tokens.texts
    yticks = [(i + 0.5, visible(texts[i])[:LABEL_CHARS]) for i in range(a, b)]
    xticks = [(j + 0.5, visible(key_texts[j])[:LABEL_CHARS]) for j in range(c, d)]
    step_y, step_x = max(1, len(yticks) // 40), max(1, len(xticks) // 40)
    drawn = [
        (rows_matrix(layer, range(a, b), h)[:, c:d], (float(c), float(d), float(b), float(a)), yticks[::step_y], xticks[::step_x])
        for h in heads
    ]
    return f"queries {a} to {b - 1} x keys {c} to {d - 1}, every weight", drawn


def _spread(n: int) -> list[tuple[float, str]]:
    """TICKS positions spread over n tokens, labelled by position."""
    return [(float(p), f"{p:,}") for p in np.linspace(0, max(n - 1, 0), TICKS).round().astype(int).tolist()]


def _ticks(ax: Any, yticks: list[tuple[float, str]], xticks: list[tuple[float, str]], *, left: bool, bottom: bool) -> None:
    ax.set_yticks([p for p, _ in yticks], [t for _, t in yticks] if left else [], fontsize=7)
    ax.set_xticks([p for p, _ in xticks], [t for _, t in xticks] if bottom else [], fontsize=7, rotation=90 if len(xticks) > TICKS else 0)
    if left:
        ax.set_ylabel("query", fontsize=8)
    if bottom:
        ax.set_xlabel("key", fontsize=8)


def _size(n_layers: int, n_heads: int, view: LongView, n_queries: int) -> tuple[float, float]:
    """Inches: a panel of PANEL_INCHES a side (strips: a band a row), within the figure cap."""
    tall = PANEL_INCHES if view.window is not None or not n_queries else min(PANEL_INCHES, 0.9 + 0.22 * n_queries)
    width = min(1.6 + PANEL_INCHES * n_heads, 40.0)
    return width, min(1.2 + (tall + 0.5) * n_layers, 40.0)
