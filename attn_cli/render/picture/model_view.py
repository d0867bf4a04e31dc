"""The model view: every kept layer's heads in one picture, as a matplotlib Figure.

``model_view_figure(trace, options)`` draws a grid of small weight maps, one
row per kept layer and one column per chosen head (bertviz's model view, as a
file). Shapes: L kept layers, H chosen heads, T tokens; each panel is one
(T, T) weights matrix, query tokens on the rows, key tokens on the columns.

Every panel shares one colour scale (the fixed 0..1 of the weights, or one log
scale with ``--log``) and one colour bar, so a colour means the same weight in
every layer. The axes are placed by hand rather than by constrained layout:
144 panels lay out in milliseconds, and the figure size is exactly the sum of
its parts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from attn_cli.records.hiding import shown
from attn_cli.records.tokens import Tokens, visible
from attn_cli.records.trace import Trace
from attn_cli.render.picture.canvas import check_picture_memory, check_pixels, shorten
from attn_cli.render.picture.fonts import font_families
from attn_cli.render.picture.heatmap import drawn_text, mark_prompt_end
from attn_cli.render.picture.kinds import What
from attn_cli.render.picture.panels import (
    DEFAULT_CMAPS,
    SPECIAL_COLOR,
    HeatmapOptions,
    colour_limits,
    colour_map,
    faint_hint,
    layer_matrix,
)
from attn_cli.render.picture.titles import fit_title, generated_line, hidden_line, hint_lines, title_font
from attn_cli.runtime.errors import UsageError

MAX_MODEL_PANELS = 576  # 24 layers x 24 heads; past that a panel is a few pixels: --layer, --head
MAX_MODEL_INCHES = 18.0  # the automatic size stays printable (2700 px at 150 dpi); panels shrink to fit
MIN_PANEL_INCHES = 0.45  # below this a panel is a smudge, whatever the dpi
LABEL_CELL_POINTS = 6.5  # token labels go on the edges only when a cell is at least this tall
LABEL_CHARS = 8
TITLE_CHARS = 70
TITLE_FONT = 10.0  # points
LABEL_FONT = 9.0  # points: the head and layer labels


@dataclasses.dataclass(frozen=True)
class _Plan:
    figsize: tuple[float, float]  # inches
    panel: float  # inches a side
    gap: float  # inches between panels
    left: float  # inches: layer labels and token labels
    bottom: float
    top: float  # inches: title lines and head labels
    token_labels: bool  # all token labels on the edge panels
    tick_font: float


def check_model_view(options: HeatmapOptions, n_layers: int, n_heads: int) -> None:
    """UsageError for options the model view cannot draw; needs no trace, so the
    command calls it before anything is computed."""
    if options.what not in (What.weights, What.norms):
        raise UsageError(
            f"--what {options.what.value}: the model view (several layers) draws the weights or the norms; "
            f"pick one layer with --layer L for the scores"
        )
    if options.per_head_scale:
        raise UsageError("--per-head-scale: the model view shares one colour scale across layers; pick one layer with --layer L, or use --log")
    if options.annotate:
        raise UsageError("--annotate: the model view's panels are too small for numbers; pick one layer with --layer L")
    if n_layers * n_heads > MAX_MODEL_PANELS:
        raise UsageError(
            f"{n_layers} layers x {n_heads} heads is over {MAX_MODEL_PANELS} panels in one picture; "
            f"choose fewer with --layer and --head"
        )


def model_view_figure(trace: Trace, options: HeatmapOptions = HeatmapOptions(), *, new_figure: Callable[..., Figure] | None = None) -> Figure:
    """Draw every kept layer of ``trace`` (rows) by ``options.heads`` or the trace's
    shown heads (columns) into a new Figure and return it. Tokens hidden with
    --hide-tokens are left out, rows renormalized (``Trace.shown``)."""
    trace = shown(trace)
    with rc_context({"font.family": font_families(drawn_text(trace))}):
        return _model_view_figure(trace, options, new_figure)


def _model_view_figure(trace: Trace, options: HeatmapOptions, new_figure: Callable[..., Figure] | None) -> Figure:
    heads = tuple(trace.shown_heads if options.heads is None else options.heads)
    n_heads = trace.model.heads
    for h in heads:
        if not 0 <= h < n_heads:
            raise UsageError(f"--head {h} is out of range: the model has {n_heads} heads, numbered 0 to {n_heads - 1}")
    layers = trace.layers
    check_model_view(options, len(layers), len(heads))
    if options.size is not None:
        check_pixels(options.size, options.dpi)
    check_picture_memory(max(len(trace.tokens), len(trace.own_stack.key_tokens)), len(layers) * len(heads), options.size or (MAX_MODEL_INCHES, MAX_MODEL_INCHES),
                         options.dpi, one_panel=1, fewer="choose fewer layers and heads with --layer and --head")
    kind = options.what
    drawn = [[layer_matrix(layer, kind, h) for h in heads] for layer in layers]  # L x H of (T, T)
    flat = [m for row in drawn for m in row]
    limits = colour_limits(kind, flat, options)
    norm = LogNorm(*limits, clip=True) if options.log else Normalize(*limits)
    cmap = colour_map(options.cmap or DEFAULT_CMAPS[kind])

    n_tokens = max(len(trace.tokens), len(trace.own_stack.key_tokens))  # cross-attention's panels are T_target x T_source
    title_lines = _title(trace, heads, kind) + (hint_lines(faint_hint(flat, options)) if kind is What.weights else [])
    plan, title, font = _planned(trace, title_lines, n_tokens, len(layers), len(heads), options)
    make = new_figure or Figure
    fig = make(figsize=plan.figsize, dpi=options.dpi)
    if new_figure is None:
        FigureCanvasAgg(fig)
    width, height = plan.figsize
    pixels = plan.panel * options.dpi
    image = None
    named = _names_fit(plan, [layer.layer for layer in layers], heads)
    every = 1 if named else _label_step(plan, [layer.layer for layer in layers], heads)  # numbers: every k-th, if tight
    for r, (layer, row) in enumerate(zip(layers, drawn)):
        for c, (h, matrix) in enumerate(zip(heads, row)):
            x = plan.left + c * (plan.panel + plan.gap)
            y = height - plan.top - (r + 1) * plan.panel - r * plan.gap
            ax = fig.add_axes((x / width, y / height, plan.panel / width, plan.panel / height))
            image = ax.imshow(matrix, cmap=cmap, norm=norm, aspect="equal",
                              interpolation="nearest" if n_tokens * 2 <= pixels else "antialiased")
            image.set_label(f"{kind.value} layer {layer.layer} head {h}")
            ax.set_label(f"layer{layer.layer}/head{h}")
            _edges(ax, trace, plan, left=c == 0, bottom=r == len(layers) - 1)
            mark_prompt_end(ax, trace)
            if r == 0 and c % every == 0:
                ax.set_title(f"head {h}" if named else str(h), fontsize=LABEL_FONT, pad=3)
            if c == 0 and r % every == 0:
                if named:
                    ax.set_ylabel(f"layer {layer.layer}", fontsize=LABEL_FONT, labelpad=4)
                else:
                    ax.set_ylabel(str(layer.layer), fontsize=LABEL_FONT, labelpad=4, rotation=0, ha="right", va="center")
    assert image is not None  # at least one layer and one head: Selection never gives fewer
    _colour_bar(fig, plan, image, kind, options.log, len(layers), len(heads))
    fig.text(_title_left(plan) / width, 1 - 0.12 / height, title, ha="left", va="top", fontsize=font, parse_math=False)
    if not named:  # numbers over the columns and beside the rows; what they count, said once
        grid_top = height - plan.top
        fig.text(0.04 / width, (grid_top + 3 / 72) / height, "head →", ha="left", va="bottom", fontsize=LABEL_FONT)
        grid_middle = grid_top - (len(layers) * (plan.panel + plan.gap) - plan.gap) / 2
        fig.text(0.06 / width, grid_middle / height, "layer ↓", ha="left", va="center", rotation=90, fontsize=LABEL_FONT)
    check_pixels(tuple(fig.get_size_inches()), options.dpi)
    return fig


def _colour_bar(fig: Figure, plan: _Plan, image: Any, kind: What, log: bool, n_layers: int, n_heads: int) -> None:
    """The colour bar right of the grid, centred on it."""
    width, height = plan.figsize
    bar_x = plan.left + n_heads * (plan.panel + plan.gap) + 0.1
    grid_height = n_layers * plan.panel + (n_layers - 1) * plan.gap
    bar_height = min(grid_height, 4.0)
    bar_y = height - plan.top - (grid_height + bar_height) / 2
    bar_ax = fig.add_axes((bar_x / width, bar_y / height, 0.15 / width, bar_height / height))
    bar = fig.colorbar(image, cax=bar_ax)
    name = "weight" if kind is What.weights else "‖a·f(x)‖"
    bar.set_label(f"{name} (log scale)" if log else name, fontsize=9)
    bar.ax.tick_params(labelsize=8)


def _planned(
    trace: Trace, title_lines: list[list[str]], n_tokens: int, n_layers: int, n_heads: int, options: HeatmapOptions
) -> tuple[_Plan, str, float]:
    """(the layout, the title wrapped to it, the title's font size). The title wraps to the
    figure's width, and its lines take height from the panels: plan, wrap, plan again until
    the width the title was wrapped for stays put."""
    font = title_font(options.size[0], TITLE_FONT) if options.size else TITLE_FONT
    title = fit_title(title_lines, MAX_MODEL_INCHES * 72, font)
    for _ in range(4):
        plan = _plan(n_tokens, n_layers, n_heads, [*trace.tokens.labels, *trace.own_stack.key_tokens.labels], (title.count("\n") + 1) * font / 72, options)
        wrapped = fit_title(title_lines, (plan.figsize[0] - _title_left(plan) - 0.1) * 72, font)
        if wrapped == title:
            break
        title = wrapped
    return plan, title, font


def _title_left(plan: _Plan) -> float:
    """Inches from the left edge to the title: over the layer labels, less on a narrow figure."""
    return min(0.5, 0.04 * plan.figsize[0])


def _names_fit(plan: _Plan, layers: Sequence[int], heads: Sequence[int]) -> bool:
    """Whether "head 11" over each column and "layer 5" beside each row fit the panels'
    spacing at LABEL_FONT (DejaVu Sans averages about 0.6 em a character); else numbers."""
    step = (plan.panel + plan.gap) * 72  # points from one panel to the next
    longest = max(len(f"layer {max(layers)}"), len(f"head {max(heads)}"))
    return longest * 0.6 * LABEL_FONT <= step - 2


def _label_step(plan: _Plan, layers: Sequence[int], heads: Sequence[int]) -> int:
    """Label every k-th column and row with its number: the smallest k whose numbers do not touch."""
    step = (plan.panel + plan.gap) * 72
    widest = max(len(str(max(layers))), len(str(max(heads)))) * 0.6 * LABEL_FONT + 2
    return max(1, math.ceil(widest / step))


def _plan(n_tokens: int, rows: int, cols: int, labels: Sequence[str], title_height: float, options: HeatmapOptions) -> _Plan:
    gap = 0.08
    layer_label = 0.45
    top = 0.2 + 1.3 * title_height + 0.3  # lines 1.3 font sizes apart  # the title, then the head labels over the first row
    colorbar = 0.9
    room_w, room_h = options.size or (MAX_MODEL_INCHES, MAX_MODEL_INCHES)

    def fitting(side: float) -> float:
        """The panel side that fills the room when ``side`` inches go to labels on the left and below."""
        return min((room_w - layer_label - side - colorbar) / cols - gap, (room_h - top - side - 0.3) / rows - gap)

    # Automatic: panels grow with the text (about 0.15 inch a token) within bounds, and shrink to fit.
    wanted = min(max(0.15 * n_tokens, 1.0), 1.6)
    panel = fitting(0.0) if options.size else min(wanted, fitting(0.0))
    tick_font = min(8.0, panel * 72 / max(n_tokens, 1) * 0.85)
    token_labels = panel * 72 / max(n_tokens, 1) >= LABEL_CELL_POINTS
    label_in = 0.0
    if token_labels:
        longest = min(LABEL_CHARS, max((len(s) for s in labels), default=1))
        label_in = longest * 0.6 * tick_font / 72 + 0.1
        panel = fitting(label_in) if options.size else min(panel, fitting(label_in))
    panel = max(panel, 0.05 if options.size else MIN_PANEL_INCHES)  # a chosen --size wins, however small
    left = layer_label + label_in + 0.05
    bottom = 0.3 + label_in
    width = left + cols * (panel + gap) + colorbar
    height = top + rows * (panel + gap) + bottom
    figsize = options.size or (round(width, 2), round(height, 2))
    return _Plan(figsize, panel, gap, left, bottom, top, token_labels, tick_font)


def _edges(ax: Axes, trace: Trace, plan: _Plan, *, left: bool, bottom: bool) -> None:
    """Token labels on the edge panels when they fit; else purple ticks where the
    special tokens are (the title names them)."""
    def ticks_of(tokens: Tokens) -> list[int]:
        special = [i for i in range(len(tokens)) if tokens.is_special(i)]
        return list(range(len(tokens))) if plan.token_labels else special

    rows, columns = trace.tokens, trace.own_stack.key_tokens  # the same tokens, or cross-attention's target and source
    ax.set_xticks(ticks_of(columns) if bottom else [])
    ax.set_yticks(ticks_of(rows) if left else [])
    if plan.token_labels:
        if bottom:
            ax.set_xticklabels([shorten(columns.labels[i], LABEL_CHARS) for i in ticks_of(columns)], rotation=90, fontsize=plan.tick_font, parse_math=False)
        if left:
            ax.set_yticklabels([shorten(rows.labels[i], LABEL_CHARS) for i in ticks_of(rows)], fontsize=plan.tick_font, parse_math=False)
    else:
        ax.set_xticklabels([])
        ax.set_yticklabels([])
    for axis, tokens in ((ax.xaxis, columns), (ax.yaxis, rows)):
        for tick, text in zip(axis.get_major_ticks(), axis.get_ticklabels()):
            position = int(round(tick.get_loc()))
            if tokens.is_special(position):  # added by the model's tokenizer: marked, as in the tables
                text.set_fontstyle("italic")
                text.set_color(SPECIAL_COLOR)
                tick.tick1line.set_color(SPECIAL_COLOR)
                tick.tick1line.set_markeredgewidth(1.5)
    ax.tick_params(length=0 if plan.token_labels else 3, pad=1)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _title(trace: Trace, heads: Sequence[int], kind: What = What.weights) -> list[list[str]]:
    """The title's lines, each a list of parts (``fit_title`` wraps them between parts)."""
    text = " ".join(trace.text.split())
    if len(text) > TITLE_CHARS:
        text = text[: TITLE_CHARS - 1] + "…"
    m = trace.model
    layers = [layer.layer for layer in trace.layers]
    shown_layers = f"all {m.layers} layers" if len(layers) == m.layers else f"layers {', '.join(map(str, layers))} of {m.layers}"
    shown_heads = f"all {m.heads} heads" if len(heads) == m.heads else f"heads {', '.join(map(str, heads))} of {m.heads}"
    masked = "causal (grey: masked)" if any(layer.causal for layer in trace.layers) else "not causal"
    lines = [
        [f"{'Attention weights' if kind is What.weights else 'Value-weighted norms ‖a·f(x)‖'}, layers x heads: “{text}”"],
        [m.name, shown_layers, shown_heads, f"{len(trace.tokens)} tokens", "each panel: query rows, key columns", masked],
    ]
    stack = trace.view_stack
    if stack is not None and stack.cross:  # cross-attention
        lines[1][3:5] = [f"{len(trace.tokens)} target x {len(stack.key_tokens)} source tokens", "cross-attention: target rows, source columns"]
    elif stack is not None:
        lines[1].insert(3, f"{stack.name} self-attention")
    special = [i for i in range(len(trace.tokens)) if trace.tokens.is_special(i)]
    if special:
        names = ", ".join(dict.fromkeys(visible(trace.tokens.texts[i]) for i in special))
        lines.append([f"special tokens ({names}) in purple on the edges"])
    return lines + hint_lines(hidden_line(trace) + generated_line(trace))
