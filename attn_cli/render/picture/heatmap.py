"""Attention heatmaps as matplotlib Figures: pure, headless, no pyplot state.

``heatmap_figure(run, options)`` draws a ``Run`` into a new ``Figure`` (Agg
canvas, so it never needs a display) and returns it; the command decides
where it goes. Shapes: T tokens, H heads; every panel is one (T, T) matrix,
query tokens on the rows, key tokens on the columns, drawn with a single
``imshow`` so a 512-token text is one image, not 262,144 patches.

Causal runs hand ``imshow`` a masked array whose mask is the upper triangle
(the keys a query may not see); the colour map's "bad" colour paints those
cells a neutral grey, so they never pass for zeros of the scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap, LogNorm, Normalize
from matplotlib.figure import Figure

from attn_cli.records.hiding import shown
from attn_cli.records.tokens import Tokens, visible
from attn_cli.records.trace import Trace as Run
from attn_cli.render.picture.canvas import (
    MAX_ANNOTATED_CELLS,
    MAX_FIGURE_INCHES,
    MAX_PANELS,
    MIN_TICK_FONT,
    annotate_refusal,
    check_picture_memory,
    check_pixels,
    grid_shape,
    shorten,
    tick_step,
)
from attn_cli.render.picture.fonts import font_families
from attn_cli.render.picture.kinds import COMBINED, KINDS, MAGNITUDES, STOCHASTIC, What, combined_of
from attn_cli.render.picture.panels import (
    DEFAULT_CMAPS,
    KIND_NAMES,
    SPECIAL_COLOR,
    HeatmapOptions,
    Panel,
    cell_number,
    colour_map,
    faint_hint,
    panels_of,
)
from attn_cli.render.picture.titles import fit_title, heatmap_title, hint_lines, title_font
from attn_cli.runtime.errors import UsageError


def check_options(options: HeatmapOptions, heads: Sequence[int]) -> None:
    """UsageError for options that cannot make one picture of ``heads``; needs no run,
    so the command calls it before anything is computed."""
    kinds = KINDS[options.what]
    if options.log and not set(kinds) & {*STOCHASTIC, *MAGNITUDES}:
        raise UsageError(f"--log is for the weights (0 to 1); --what {options.what.value} has signed values: drop --log")
    if len(kinds) * len(heads) > MAX_PANELS:
        raise UsageError(
            f"{len(heads)} heads x {len(kinds)} matrices is over {MAX_PANELS} panels in one picture; "
            f"pick one with --head N, or write one file per head with --split-heads"
        )


def heatmap_figure(run: Run, options: HeatmapOptions = HeatmapOptions(), *, new_figure: Callable[..., Figure] | None = None) -> Figure:
    """Draw ``run`` as ``options`` says into a new Figure and return it.

    ``new_figure`` makes the figure (``matplotlib.pyplot.figure`` to show it in
    a window); by default it is a plain ``Figure`` on an Agg canvas. Tokens hidden
    with --hide-tokens are left out, rows renormalized (``Trace.shown``).
    """
    run = shown(run)
    # Each glyph from the first family that has it: CJK and emoji tokens are not boxes.
    with rc_context({"font.family": font_families(drawn_text(run))}):
        return _heatmap_figure(run, options, new_figure)


def drawn_text(trace: Run) -> str:
    """Every character a picture of ``trace`` may draw: the text and the token labels."""
    stack = trace.own_stack
    tokens = (trace.tokens, stack.key_tokens) if stack.cross else (trace.tokens,)  # cross-attention: both texts
    return trace.text + "".join("".join(t.labels) + "".join(visible(x) for x in t.texts) for t in tokens)


def _heatmap_figure(run: Run, options: HeatmapOptions, new_figure: Callable[..., Figure] | None) -> Figure:
    n_heads = run.layers[0].n_heads
    heads = run.shown_heads if options.heads is None else options.heads
    if options.what in COMBINED:  # one matrix for every head together
        if combined_of(run, options.what) is None:
            raise UsageError(f"this trace has no {options.what.value}: compute it with --what {options.what.value}")
        heads = (0,)
    for h in heads:
        if not 0 <= h < n_heads:
            raise UsageError(f"--head {h} is out of range: the run has {n_heads} head(s), numbered 0 to {n_heads - 1}")
    check_options(options, heads)
    kinds = KINDS[options.what]
    cmaps = {kind: colour_map(options.cmap or DEFAULT_CMAPS[kind]) for kind in kinds}

    n_tokens = max(len(run.tokens), len(run.own_stack.key_tokens))  # cross-attention's panels are T_target x T_source
    n_panels = len(heads) * len(kinds)
    # --what all: one column per matrix, in the order attention computes them, one row per head.
    rows, cols = (len(heads), len(kinds)) if len(kinds) > 1 else grid_shape(len(heads))
    # A colour bar beside each column (per-head scales, or one scale per matrix), else one for all.
    colorbars_across = cols if options.per_head_scale or len(kinds) > 1 else 1
    shape = (len(run.tokens) / n_tokens, len(run.own_stack.key_tokens) / n_tokens)  # a panel's height and width over its longer side
    layout = _Layout.plan(n_tokens, rows, cols, [*run.tokens.labels, *run.own_stack.key_tokens.labels], options, colorbars_across=colorbars_across, shape=shape)
    if layout.annotate and options.annotate and n_panels * n_tokens * n_tokens > MAX_ANNOTATED_CELLS:
        raise UsageError(annotate_refusal(n_tokens, n_panels, len(kinds)))
    check_pixels(layout.figsize, options.dpi)
    check_picture_memory(n_tokens, n_panels, layout.figsize, options.dpi, one_panel=len(kinds),
                         fewer="draw one head with --head N, or one file per head with --split-heads")

    panels = [panels_of(run, kind, heads, options) for kind in kinds]
    if len(kinds) > 1:
        grid = [[panels[k][i] for k in range(len(kinds))] for i in range(len(heads))]
    else:
        grid = [panels[0][r * cols : (r + 1) * cols] for r in range(rows)]

    make = new_figure or Figure
    fig = make(figsize=layout.figsize, dpi=options.dpi, layout="constrained")
    if new_figure is None:
        FigureCanvasAgg(fig)
    fig.get_layout_engine().set(w_pad=0.06, h_pad=0.06, wspace=0.04, hspace=0.04)
    axes = fig.subplots(rows, cols, squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r][c]
            if c >= len(grid[r]):
                ax.remove()
                continue
            panel = grid[r][c]
            _draw_panel(ax, panel, cmaps[panel.kind], run, layout,
                        title=_panel_title(panel, options.what not in COMBINED and (len(heads) > 1 or (options.heads is not None and n_heads > 1)), len(kinds) > 1),
                        left=c == 0, bottom=_is_bottom(grid, r, c))
    _colorbars(fig, axes, grid, options)
    title = heatmap_title(run, options.what, heads)
    for kind in set(kinds) & set(STOCHASTIC):
        title += hint_lines(faint_hint([p.matrix for p in panels[kinds.index(kind)]], options))
    fig_width = layout.figsize[0]
    font = title_font(fig_width, layout.title_font)
    # Centred over the whole figure: its width less a margin each side is the room.
    fig.suptitle(fit_title(title, (fig_width - 0.2) * 72, font), fontsize=font, parse_math=False)
    return fig




# -- layout --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Layout:
    figsize: tuple[float, float]
    tick_font: float
    title_font: float
    label_limit: int  # characters per tick label
    step: int  # label every step-th token
    annotate: bool
    annotate_font: float
    rotate: float  # key labels' angle
    panel: float  # inches a side of one panel, about

    @classmethod
    def plan(
        cls, n_tokens: int, rows: int, cols: int, labels: Sequence[str], options: HeatmapOptions, *, colorbars_across: int,
        shape: tuple[float, float] = (1.0, 1.0),
    ) -> _Layout:  # fmt: skip
        """``shape``: a panel's (height, width) over its longer side, 1 for square panels (cross-attention's
        T_target x T_source are not): the figure is as tall and wide as its panels."""
        # Panels grow with T (about half an inch a cell, room for a number) up to a cap,
        # and shrink so that the whole grid stays within MAX_FIGURE_INCHES.
        per_cell = 0.5 if rows * cols == 1 else 0.42
        panel = min(max(per_cell * n_tokens, 2.6), 8.5)
        tick_font = 10.0 if n_tokens <= 16 else 8.0 if n_tokens <= 48 else 7.0
        label_limit = 14 if n_tokens <= 16 else 10
        longest = min(label_limit, max((len(s) for s in labels), default=1))

        def label_room(font: float) -> float:
            """Inches the query labels take left of a panel (the key labels as much below)."""
            return (longest + (4 if n_tokens > 48 else 0)) * 0.62 * font / 72 + 0.45

        def chosen_size_panel(font: float) -> float:
            """Room per panel in the size the user chose, for thinning and annotations."""
            label_in = label_room(font)
            return max(0.5, min((options.size[0] - label_in - colorbar_in) / cols, (options.size[1] - 1.2 - label_in) / rows) - 0.3)

        label_in = label_room(tick_font)
        colorbar_in = 0.9 * colorbars_across
        panel = min(panel, (MAX_FIGURE_INCHES - label_in - colorbar_in) / cols - 0.3, (MAX_FIGURE_INCHES - 1.2 - label_in) / rows - 0.45)
        panel = max(panel, 1.4)
        if cols > 1 or rows > 1:
            tick_font = min(tick_font, max(MIN_TICK_FONT, panel * 72 / max(n_tokens, 1) * 0.7))
        title_font = 12.0 if cols * rows == 1 else 13.0

        if options.size is not None:
            figsize = options.size
            panel = chosen_size_panel(tick_font)
        else:
            tall, wide = shape
            width = label_in + cols * (max(panel * wide, 1.0) + 0.3) + colorbar_in + 0.3
            height = 0.95 + label_in + rows * (max(panel * tall, 1.0) + (0.45 if rows * cols > 1 else 0.05))
            figsize = (round(width, 2), round(height, 2))

        def fits_every_label(font: float, side: float) -> bool:
            return int(side * 72 / (font * 1.45)) >= n_tokens

        step = tick_step(n_tokens, int(panel * 72 / (tick_font * 1.45)))
        # Every token labelled at a smaller font, when that fits, rather than every n-th.
        font = tick_font
        while step > 1 and font - 0.5 >= MIN_TICK_FONT:
            font -= 0.5
            side = chosen_size_panel(font) if options.size is not None else panel
            if fits_every_label(font, side):
                tick_font, panel, step = font, side, 1
        cell_pt = panel * 72 / max(n_tokens, 1)
        annotate_font = min(9.0, cell_pt * 0.85 / (0.62 * 4.5))
        cells = rows * cols * n_tokens * n_tokens
        auto = annotate_font >= 5.5 and n_tokens <= 24 and cells <= MAX_ANNOTATED_CELLS
        annotate = auto if options.annotate is None else options.annotate
        rotate = 45.0 if n_tokens <= 16 and step == 1 else 90.0
        return cls(figsize, tick_font, title_font, label_limit, step, annotate, max(annotate_font, 4.0), rotate, panel)


# -- drawing -------------------------------------------------------------------


def _draw_panel(ax: Axes, panel: Panel, cmap: Colormap, run: Run, layout: _Layout, *, title: str, left: bool, bottom: bool) -> None:
    n_rows, n_cols = panel.matrix.shape  # queries x keys: the same tokens, or cross-attention's target x source
    n_tokens = max(n_rows, n_cols)
    norm = LogNorm(*panel.limits, clip=True) if panel.log else Normalize(*panel.limits)
    pixels = ax.get_figure().dpi * layout.panel
    image = ax.imshow(
        panel.matrix,
        cmap=cmap,
        norm=norm,
        aspect="equal",
        # Crisp cells while each cell gets a pixel or two; smooth when it must shrink.
        interpolation="nearest" if n_tokens * 2 <= pixels else "antialiased",
    )
    image.set_label(f"{panel.kind.value} head {panel.head}")
    ax.set_label(f"{panel.kind.value}/head{panel.head}")

    rows, columns = run.tokens, run.own_stack.key_tokens
    row_ticks, col_ticks = list(range(0, n_rows, layout.step)), list(range(0, n_cols, layout.step))
    thinned = layout.step > 1

    def label(tokens: Tokens, i: int) -> str:
        if thinned:  # the position leads, so repeats need no #pos suffix
            return f"{tokens.position(i)} {shorten(visible(tokens.texts[i]), layout.label_limit)}"
        return shorten(tokens.labels[i], layout.label_limit)

    ax.set_xticks(col_ticks)
    ax.set_yticks(row_ticks)
    cross = run.own_stack.cross
    if bottom:
        ax.set_xticklabels([label(columns, i) for i in col_ticks], rotation=layout.rotate, ha="right" if layout.rotate < 90 else "center",
                           rotation_mode="anchor" if layout.rotate < 90 else "default", fontsize=layout.tick_font, parse_math=False)
        ax.set_xlabel("key (source)" if cross else "key", fontsize=layout.tick_font + 1)
    else:
        ax.set_xticklabels([])
    if left:
        ax.set_yticklabels([label(rows, i) for i in row_ticks], fontsize=layout.tick_font, parse_math=False)
        ax.set_ylabel("query (target)" if cross else "query", fontsize=layout.tick_font + 1)
    else:
        ax.set_yticklabels([])
    ax.tick_params(length=2 if thinned else 0, pad=2)
    for tokens, ticks, tick_labels in ((columns, col_ticks, ax.get_xticklabels()), (rows, row_ticks, ax.get_yticklabels())):
        for i, text in zip(ticks, tick_labels):
            if tokens.is_special(i):  # added by the model's tokenizer: marked, as in the tables
                text.set_fontstyle("italic")
                text.set_color(SPECIAL_COLOR)
    for spine in ax.spines.values():
        spine.set_visible(False)
    mark_prompt_end(ax, run)
    if title:
        ax.set_title(title, fontsize=layout.tick_font + 2, parse_math=False)
    if layout.annotate:
        _annotate(ax, panel, cmap, norm, layout.annotate_font)


def mark_prompt_end(ax: Axes, run: Run) -> None:
    """--generate: dashed lines before the first generated token's row and column."""
    start = run.prompt_length
    if start is None or not 0 < start < len(run.tokens):
        return
    if run.renormalized and run.hiding is not None:  # the shown tokens' place of the first generated one
        start = sum(1 for i in run.hiding.kept if i < start)
    for line in (ax.axhline, ax.axvline):
        line(start - 0.5, color="white", linewidth=0.9, linestyle=(0, (3, 2)), alpha=0.9)


def _annotate(ax: Axes, panel: Panel, cmap: Colormap, norm: Normalize, font: float) -> None:
    data = panel.matrix
    n_rows, n_cols = data.shape
    rgba = cmap(norm(data.filled(0.0)))  # (T, T, 4)
    luminance = 0.2126 * rgba[..., 0] + 0.7152 * rgba[..., 1] + 0.0722 * rgba[..., 2]  # (T, T)
    mask = np.ma.getmaskarray(data)
    for i in range(n_rows):
        for j in range(n_cols):
            if mask[i, j]:
                continue
            value = float(data[i, j])
            ax.text(j, i, cell_number(value, panel.kind), ha="center", va="center", fontsize=font,
                    color="black" if luminance[i, j] > 0.5 else "white", parse_math=False)


def _colorbars(fig: Figure, axes: Any, grid: list[list[Panel]], options: HeatmapOptions) -> None:
    names = {What.weights: "weight", What.scores: "score  Q·Kᵀ", What.scaled: "scaled score", What.norms: "‖a·f(x)‖",
             What.rollout: "rollout", What.flow: "flow", What.value_zeroing: "value zeroing",
             What.value_zeroing_rollout: "value zeroing rollout", What.alti: "ALTI", What.attention_gradient: "relevance"}  # fmt: skip
    placed = [(axes[r][c], grid[r][c]) for r in range(len(grid)) for c in range(len(grid[r]))]
    if options.per_head_scale:
        for ax, panel in placed:
            bar = fig.colorbar(ax.images[0], ax=ax, shrink=0.85, pad=0.02, aspect=25)
            bar.ax.tick_params(labelsize=7)
        return
    for kind in dict.fromkeys(p.kind for _, p in placed):
        group = [ax for ax, p in placed if p.kind is kind]
        bar = fig.colorbar(group[0].images[0], ax=group, shrink=0.85 if len(group) == 1 else 0.95, pad=0.02, aspect=25 if len(group) == 1 else 35)
        log = any(p.log for _, p in placed if p.kind is kind)
        bar.set_label(names[kind] + (" (log scale)" if log else ""), fontsize=10)
        bar.ax.tick_params(labelsize=9)


def _panel_title(panel: Panel, name_heads: bool, name_kind: bool) -> str:
    parts = []
    if name_heads:
        parts.append(f"head {panel.head}")
    if name_kind:
        parts.append(KIND_NAMES[panel.kind])
    return " · ".join(parts)


def _is_bottom(grid: list[list[Panel]], r: int, c: int) -> bool:
    return r == len(grid) - 1 or c >= len(grid[r + 1])
