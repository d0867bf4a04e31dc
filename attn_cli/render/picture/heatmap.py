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
import math
import re
import warnings
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap, LogNorm, Normalize
from matplotlib.figure import Figure

from attn_cli.records.hiding import hidden_text
from attn_cli.runtime.errors import UsageError
from attn_cli.render.picture.fonts import font_families, missing_glyph_note, missing_glyphs
from attn_cli.render.picture.kinds import FORMATS, KINDS, STOCHASTIC, What
from attn_cli.render.picture.titles import FROM, fit_title, title_font
from attn_cli.records.trace import Trace as Run
from attn_cli.records.tokens import Tokens, visible
from attn_cli.records.hiding import shown

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerAttention


DEFAULT_DPI = 150
DEFAULT_CMAPS = {What.weights: "viridis", What.scores: "RdBu_r", What.scaled: "RdBu_r", What.norms: "magma", What.rollout: "viridis"}
MASKED_COLOR = "#d4d4d4"  # neutral grey: not on either colour map
SPECIAL_COLOR = "#7a5195"  # tick labels of the special tokens a model's tokenizer adds
MAX_PANELS = 64  # a bigger grid is unreadable and slow; --head or --split-heads instead
MAX_ANNOTATED_CELLS = 2500  # numbers written into cells, over all panels
MAX_FIGURE_INCHES = 20.0  # automatic sizes stay on a screen and a slide
MAX_PIXELS_PER_SIDE = 16000  # well under Agg's 2**16 limit, and under a minute to draw
MIN_TICK_FONT = 5.5  # points: token labels smaller than this are thinned instead
# What a picture allocates, measured with tracemalloc around heatmap_figure + write_figure
# (PNG, SVG and PDF alike) at T = 500 to 6,000 and 1 to 4 heads (bench/heatmap_memory.py);
# the sum is 1.1x-1.4x the measured peaks, never under them:
HELD_BYTES_PER_CELL = 12  # each panel's masked (T, T) array, kept until the figure is saved
DRAW_BYTES_PER_CELL = 40  # resampling one panel onto the canvas (float RGBA copies); panels draw one at a time
CANVAS_BYTES_PER_PIXEL = 16  # the Agg buffer, its copies and the encoder
FIXED_DRAW_BYTES = 150 * 2**20  # the renderer, fonts, colour bars and text, whatever T
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
class _Panel:
    kind: What
    head: int
    matrix: np.ma.MaskedArray  # (T, T)
    limits: tuple[float, float]
    log: bool = False


def check_options(options: HeatmapOptions, heads: Sequence[int]) -> None:
    """UsageError for options that cannot make one picture of ``heads``; needs no run,
    so the command calls it before anything is computed."""
    kinds = KINDS[options.what]
    if options.log and not set(kinds) & {*STOCHASTIC, What.norms}:
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
    tokens = (trace.tokens,) if trace.key_tokens is None else (trace.tokens, trace.key_tokens)  # cross-attention: both texts
    return trace.text + "".join("".join(t.labels) + "".join(visible(x) for x in t.texts) for t in tokens)


def _heatmap_figure(run: Run, options: HeatmapOptions, new_figure: Callable[..., Figure] | None) -> Figure:
    n_heads = run.layers[0].n_heads
    heads = run.shown_heads if options.heads is None else options.heads
    if options.what is What.rollout:  # one matrix for every head together
        if run.rollout is None:
            raise UsageError("this trace has no rollout: compute it with --rollout")
        heads = (0,)
    for h in heads:
        if not 0 <= h < n_heads:
            raise UsageError(f"--head {h} is out of range: the run has {n_heads} head(s), numbered 0 to {n_heads - 1}")
    check_options(options, heads)
    kinds = KINDS[options.what]
    cmaps = {kind: colour_map(options.cmap or DEFAULT_CMAPS[kind]) for kind in kinds}

    n_tokens = max(len(run.tokens), len(run.columns))  # cross-attention's panels are T_target x T_source
    n_panels = len(heads) * len(kinds)
    # --what all: one column per matrix, in the order attention computes them, one row per head.
    rows, cols = (len(heads), len(kinds)) if len(kinds) > 1 else grid_shape(len(heads))
    # A colour bar beside each column (per-head scales, or one scale per matrix), else one for all.
    colorbars_across = cols if options.per_head_scale or len(kinds) > 1 else 1
    shape = (len(run.tokens) / n_tokens, len(run.columns) / n_tokens)  # a panel's height and width over its longer side
    layout = _Layout.plan(n_tokens, rows, cols, [*run.tokens.labels, *run.columns.labels], options, colorbars_across=colorbars_across, shape=shape)
    if layout.annotate and options.annotate and n_panels * n_tokens * n_tokens > MAX_ANNOTATED_CELLS:
        raise UsageError(annotate_refusal(n_tokens, n_panels, len(kinds)))
    check_pixels(layout.figsize, options.dpi)
    check_picture_memory(n_tokens, n_panels, layout.figsize, options.dpi, one_panel=len(kinds),
                         fewer="draw one head with --head N, or one file per head with --split-heads")

    panels = [_panels(run, kind, heads, options) for kind in kinds]
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
                        title=_panel_title(panel, options.what is not What.rollout and (len(heads) > 1 or (options.heads is not None and n_heads > 1)), len(kinds) > 1),
                        left=c == 0, bottom=_is_bottom(grid, r, c))
    _colorbars(fig, axes, grid, options)
    title = _title(run, options.what, heads)
    for kind in set(kinds) & set(STOCHASTIC):
        title += hint_lines(faint_hint([p.matrix for p in panels[kinds.index(kind)]], options))
    fig_width = layout.figsize[0]
    font = title_font(fig_width, layout.title_font)
    # Centred over the whole figure: its width less a margin each side is the room.
    fig.suptitle(fit_title(title, (fig_width - 0.2) * 72, font), fontsize=font, parse_math=False)
    return fig


def check_pixels(figsize: tuple[float, float], dpi: float) -> None:
    """UsageError for a canvas over MAX_PIXELS_PER_SIDE a side (Agg's limit is 2**16)."""
    width, height = (round(v * dpi) for v in figsize)
    if max(width, height) > MAX_PIXELS_PER_SIDE:
        raise UsageError(
            f"the picture would be {width}x{height} pixels, over {MAX_PIXELS_PER_SIDE} a side; "
            f"lower --dpi or give a smaller --size"
        )


def write_figure(fig: Figure, file: IO[bytes], fmt: str) -> list[str]:
    """Save ``fig`` as ``fmt`` (png, svg, pdf) into an open binary file; return notes for the user."""
    notes: list[str] = []
    # A fixed salt for the SVG element ids: the same run gives the same bytes in every format.
    with warnings.catch_warnings(record=True) as caught, rc_context({"svg.hashsalt": "attn-cli"}):
        warnings.simplefilter("always")
        fig.savefig(file, format=fmt, dpi=fig.dpi, metadata=_metadata(fmt))
    messages = [str(warning.message) for warning in caught]
    missing = missing_glyphs(messages)
    if missing:  # one note for the characters no installed font has, not a warning per glyph
        notes.append(missing_glyph_note(missing))
    for message in messages:
        if missing_glyphs([message]) or re.search(r"does not support .* natively", message):
            continue
        if "constrained_layout not applied" in message:
            notes.append("note: the picture is too small for its labels, so they may overlap; give a larger --size")
        else:
            notes.append(f"note: matplotlib: {' '.join(message.split())}")
    return list(dict.fromkeys(notes))


def picture_bytes(n_tokens: int, n_panels: int, figsize: tuple[float, float], dpi: float) -> dict[str, int]:
    """What drawing and saving a picture allocates, by part, in bytes (see the constants)."""
    cells = n_tokens * n_tokens
    pixels = round(figsize[0] * dpi) * round(figsize[1] * dpi)
    return {
        "panels": n_panels * cells * HELD_BYTES_PER_CELL,
        "drawing": cells * DRAW_BYTES_PER_CELL + FIXED_DRAW_BYTES,
        "canvas": pixels * CANVAS_BYTES_PER_PIXEL,
    }


def check_picture_memory(n_tokens: int, n_panels: int, figsize: tuple[float, float], dpi: float, *, one_panel: int, fewer: str) -> None:
    """TooLargeError, before any panel is built, when the picture would not fit in free
    memory (``attn_cli.runtime.budget``); the message names what would: ``fewer`` panels (when
    ``one_panel`` of them would fit), a text short enough, or a smaller canvas."""
    from attn_cli.runtime import budget

    have = budget.available_bytes()
    if have is None:
        return
    parts = picture_bytes(n_tokens, n_panels, figsize, dpi)

    def fitting_tokens(panels: int) -> int:
        """The longest text whose picture of ``panels`` panels fits beside this canvas."""
        room = have * budget.SHARE - FIXED_DRAW_BYTES - parts["canvas"]
        return math.isqrt(max(0, int(room / (panels * HELD_BYTES_PER_CELL + DRAW_BYTES_PER_CELL))))

    smaller_canvas = "lower --dpi or give a smaller --size"
    if n_panels > one_panel and fitting_tokens(one_panel) >= n_tokens:
        cells_fix = fewer
    elif fitting_tokens(n_panels) >= 2:
        cells_fix = f"use a shorter text (about {fitting_tokens(n_panels):,} tokens fit)"
    elif parts["canvas"] > FIXED_DRAW_BYTES:  # the canvas alone nearly fills the budget
        cells_fix = smaller_canvas
    else:
        cells_fix = f"free some memory: drawing any picture takes about {budget.gib(FIXED_DRAW_BYTES)}"
    wide, tall = round(figsize[0] * dpi), round(figsize[1] * dpi)
    budget.check(
        parts,
        {
            "panels": f"{n_panels} panel{'s' if n_panels > 1 else ''} of {n_tokens:,} x {n_tokens:,} cells",
            "drawing": f"drawing {n_tokens:,} x {n_tokens:,} cells",
            "canvas": f"a {wide:,} x {tall:,}-pixel canvas",
        },
        {"panels": cells_fix, "drawing": cells_fix, "canvas": smaller_canvas},
        doing="this picture",
        available=have,
    )


def annotate_refusal(n_tokens: int, n_panels: int, n_kinds: int) -> str:
    """Why --annotate is refused, naming what would make it fit: fewer heads, one
    matrix, or a shorter text (when even one panel has too many cells)."""
    cells = n_panels * n_tokens * n_tokens
    one_panel = n_tokens * n_tokens
    several_heads = n_panels > n_kinds
    if one_panel > MAX_ANNOTATED_CELLS:  # no choice of heads or matrices helps
        fix = f"a shorter text: at most {math.isqrt(MAX_ANNOTATED_CELLS)} tokens (this one has {n_tokens})"
    elif n_kinds * one_panel <= MAX_ANNOTATED_CELLS:
        fix = "one head with --head N, or one file per head with --split-heads"
    elif several_heads:
        fix = "one head (--head N) of one matrix (--what weights, scores or scaled)"
    else:
        fix = "one matrix with --what weights, scores or scaled"
    return f"--annotate would write {cells:,} numbers, over {MAX_ANNOTATED_CELLS:,}; drop --annotate, or draw {fix}"


def grid_shape(n: int) -> tuple[int, int]:
    """(rows, cols) for n panels: an exact rectangle near square, else a near-square grid."""
    rows = math.isqrt(n)
    while rows > 1 and n % rows:
        rows -= 1
    cols = n // rows
    if cols > 2 * rows + 1:
        cols = math.ceil(math.sqrt(n))
        rows = math.ceil(n / cols)
    return rows, cols


def shorten(label: str, limit: int) -> str:
    """``label`` cut to ``limit`` characters with an ellipsis, keeping a ``#pos`` suffix whole."""
    if len(label) <= limit:
        return label
    match = re.search(r"#\d+$", label)
    suffix = match.group(0) if match else ""
    head = label[: len(label) - len(suffix)]
    keep = max(1, limit - len(suffix) - 1)
    return head[:keep] + "…" + suffix


def tick_step(n_tokens: int, room: int) -> int:
    """Label every ``step``-th token so that at most ``room`` labels fit an axis."""
    return max(1, math.ceil(n_tokens / max(1, room)))


# -- matrices and colour limits ------------------------------------------------


def matrices(run: Run, kind: What, head: int) -> np.ma.MaskedArray:
    """(T, T) values of one head of the run's first kept layer (``layer_matrix``), or the
    run's rollout (``kind`` rollout: every head together, ``head`` unused)."""
    if kind is What.rollout:
        assert run.rollout is not None, "the command computes the rollout it draws"
        return _masked(run.rollout.weights, run.rollout.mask, kind)
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
    return _masked(values, result.mask, kind)


def _masked(values: torch.Tensor, hidden: torch.Tensor | None, kind: What) -> np.ma.MaskedArray:
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


def _panels(run: Run, kind: What, heads: Sequence[int], options: HeatmapOptions) -> list[_Panel]:
    """One panel per head, with colour limits shared by the heads unless ``per_head_scale``."""
    drawn = [matrices(run, kind, h) for h in heads]
    scopes = [[m] for m in drawn] if options.per_head_scale else [drawn] * len(drawn)
    return [_Panel(kind, h, m, _limits(kind, scope, options), log=kind in (*STOCHASTIC, What.norms) and options.log)
            for h, m, scope in zip(heads, drawn, scopes)]


def _limits(kind: What, scope: list[np.ma.MaskedArray], options: HeatmapOptions) -> tuple[float, float]:
    visible_values = [m for m in scope if m.count()]
    if kind is What.norms and not options.log:  # magnitudes: from 0 to the largest drawn
        top = max((float(m.max()) for m in visible_values), default=1.0)
        return 0.0, top if top > 0 and math.isfinite(top) else 1.0
    if kind in (*STOCHASTIC, What.norms) and options.log:
        # From the smallest non-zero weight (down to a power of ten) up to 1, or the head's largest.
        positive = [float(m[m > 0].min()) for m in visible_values if (m > 0).any()]
        low = 10 ** math.floor(math.log10(max(min(positive, default=1e-3), 1e-6)))
        top = max((float(m.max()) for m in visible_values), default=1.0) if options.per_head_scale or kind is What.norms else 1.0
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


def _draw_panel(ax: Axes, panel: _Panel, cmap: Colormap, run: Run, layout: _Layout, *, title: str, left: bool, bottom: bool) -> None:
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

    rows, columns = run.tokens, run.columns
    row_ticks, col_ticks = list(range(0, n_rows, layout.step)), list(range(0, n_cols, layout.step))
    thinned = layout.step > 1

    def label(tokens: Tokens, i: int) -> str:
        if thinned:  # the position leads, so repeats need no #pos suffix
            return f"{tokens.position(i)} {shorten(visible(tokens.texts[i]), layout.label_limit)}"
        return shorten(tokens.labels[i], layout.label_limit)

    ax.set_xticks(col_ticks)
    ax.set_yticks(row_ticks)
    cross = run.key_tokens is not None
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


def _annotate(ax: Axes, panel: _Panel, cmap: Colormap, norm: Normalize, font: float) -> None:
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
            ax.text(j, i, _number(value, panel.kind), ha="center", va="center", fontsize=font,
                    color="black" if luminance[i, j] > 0.5 else "white", parse_math=False)


def _number(value: float, kind: What) -> str:
    if kind in STOCHASTIC:
        return f"{value:.2f}"
    size = abs(value)
    return f"{value:.2f}" if size < 10 else f"{value:.1f}" if size < 100 else f"{value:.0f}"


def _colorbars(fig: Figure, axes: Any, grid: list[list[_Panel]], options: HeatmapOptions) -> None:
    names = {What.weights: "weight", What.scores: "score  Q·Kᵀ", What.scaled: "scaled score", What.norms: "‖a·f(x)‖",
             What.rollout: "rollout"}  # fmt: skip
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


KIND_NAMES = {What.weights: "weights", What.scores: "scores Q·Kᵀ", What.scaled: "scaled scores", What.norms: "norms ‖a·f(x)‖",
              What.rollout: "rollout"}  # fmt: skip


def _panel_title(panel: _Panel, name_heads: bool, name_kind: bool) -> str:
    parts = []
    if name_heads:
        parts.append(f"head {panel.head}")
    if name_kind:
        parts.append(KIND_NAMES[panel.kind])
    return " · ".join(parts)


def _is_bottom(grid: list[list[_Panel]], r: int, c: int) -> bool:
    return r == len(grid) - 1 or c >= len(grid[r + 1])


def _title(run: Run, what: What, heads: Sequence[int]) -> list[list[str]]:
    """The title's lines, each a list of parts (``fit_title`` wraps them between parts)."""
    m = run.model
    result = run.layers[0]
    text = " ".join(run.text.split())
    if len(text) > 60:
        text = text[:59] + "…"
    divisor = f"/ {result.divisor:.4g}" if result.divisor != 1 else ""
    headline = {
        What.weights: "Attention weights",
        What.scores: "Attention scores Q·Kᵀ",
        What.scaled: f"Scaled scores Q·Kᵀ {divisor}".rstrip(),
        What.all: "Attention: scores, scaled scores, weights",
        What.norms: "Value-weighted norms ‖a·f(x)‖",
        What.rollout: f"Attention rollout through layer {run.rollout.through_layer}" if run.rollout is not None else "",
    }[what]
    shown = f"{m.heads}" if len(heads) == m.heads else f"{m.heads} (showing {', '.join(map(str, heads))})"
    masked = (
        ("causal (grey: masked)" if what is not What.scores else "causal (mask not yet applied to raw scores)")
        if result.causal
        else "not causal"
    )
    if m.config is None:
        source = [m.name, f"layer {result.layer} of {m.layers}"] if m.layers > 1 else [m.name]
        if run.stack_name is not None:  # one stack of an encoder-decoder
            source.append(STACK_TITLES[run.stack_name])
        config = [*source, f"heads {shown}", *([f"head_dim {m.head_dim}"] if m.head_dim else []), masked]  # 0: not known (a saved trace)
    else:
        c = m.config
        config = [f"tokenizer {run.tokens.tokenizer}", f"seed {c.seed}", f"heads {shown}", f"d_k {c.d_k}"]
        if not c.scale:
            config.append("unscaled (--no-scale: scores not divided by √d_k)")
        config.append(masked)
        if c.dropout and what in (What.weights, What.all):
            config.append(f"dropout {c.dropout:g} (weights shown before it)")
        if c.dropout and what is What.norms:
            config.append(f"dropout {c.dropout:g} (the dropped weights, which mixed the values)")
    if what is What.rollout and run.rollout is not None:
        through = run.rollout.through_layer
        config = [m.name if m.config is None else f"tokenizer {run.tokens.tokenizer}",
                  f"layers 0 to {through} of {m.layers}" if through else f"layer 0 of {m.layers}",
                  f"each layer: mean of all {m.heads} heads, half residual (I)",
                  "causal (grey: no path)" if run.rollout.causal else "not causal"]  # fmt: skip
    if run.key_text is not None:  # cross-attention: the target's rows read the source
        source = " ".join(run.key_text.split())
        source = source if len(source) <= 60 else source[:59] + "…"
        return [[f"{headline}: “{text}”", f"{FROM}“{source}”"], config, *hint_lines(hidden_line(run) + generated_line(run))]
    return [[f"{headline}: “{text}”"], config, *hint_lines(hidden_line(run) + generated_line(run))]


STACK_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention: target rows, source columns",
}


def hint_lines(text: str) -> list[list[str]]:
    """A title addition written as "\\nline\\nline" (``hidden_line``, ``faint_hint``) as title lines."""
    return [[line] for line in text.split("\n") if line]


def generated_line(run: Run) -> str:
    """A title line saying where --generate's tokens start (the dashed lines); else ""."""
    if run.prompt_length is None:
        return ""
    added = len(run.tokens) - run.prompt_length
    return f"\n{added} generated token{'s' if added != 1 else ''} from position {run.prompt_length} (after the dashed lines)"


def hidden_line(run: Run) -> str:
    """A title line naming what --hide-tokens left out of a ``shown()`` trace; else ""."""
    hidden = hidden_text(run)
    if hidden is None:
        return ""
    line = f"\n{hidden} over the {len(run.columns)} tokens shown"
    if any(bool(layer.weights.isnan().any()) for layer in run.layers):
        line += " (grey rows: all their weight was on hidden tokens)"
    return line


def _metadata(fmt: str) -> dict[str, Any]:
    # No creation dates: the same run gives the same bytes.
    if fmt == "png":
        return {"Software": "attn-cli (matplotlib)"}
    if fmt == "pdf":
        return {"Creator": "attn-cli", "Producer": None, "CreationDate": None}
    if fmt == "svg":
        return {"Creator": "attn-cli", "Date": None}
    return {}
