"""A picture's canvas: its size in inches and pixels, what drawing it takes in memory and the
check before drawing, the token ticks that fit, and writing it as PNG, SVG or PDF with
metadata that does not change from run to run.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import IO, Any

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine

from attn_cli.render.picture.fonts import missing_glyph_note, missing_glyphs
from attn_cli.runtime.errors import UsageError

DEFAULT_DPI = 150
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
LAYOUT_PASSES = 8  # constrained layout's passes at most before a picture is written (settle_layout)


def check_pixels(figsize: tuple[float, float], dpi: float) -> None:
    """UsageError for a canvas over MAX_PIXELS_PER_SIDE a side (Agg's limit is 2**16)."""
    width, height = (round(v * dpi) for v in figsize)
    if max(width, height) > MAX_PIXELS_PER_SIDE:
        raise UsageError(
            f"the picture would be {width}x{height} pixels, over {MAX_PIXELS_PER_SIDE} a side; "
            f"lower --dpi or give a smaller --size"
        )


def settle_layout(fig: Figure) -> None:
    """Run ``fig``'s constrained layout until every label lies inside the figure, then keep it.

    A draw runs one pass of the layout, which measures each panel's labels where the panel
    stood before the pass; the square panels and their colour bars then move, so one pass can
    leave the key label below the figure's edge when the tick labels are long. Each further
    pass measures again from closer. Once everything is inside (or after LAYOUT_PASSES, when
    the figure is too small for its labels), the layout engine is set aside, so that the file
    is the figure measured. A figure placed by hand (the model view) is left as it is."""
    engine = fig.get_layout_engine()
    if not isinstance(engine, ConstrainedLayoutEngine):
        return
    width, height = fig.get_size_inches()
    for _ in range(LAYOUT_PASSES):
        engine.execute(fig)
        box = fig.get_tightbbox()  # inches
        if box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height:
            break
    fig.set_layout_engine("none")


def write_figure(fig: Figure, file: IO[bytes], fmt: str) -> list[str]:
    """Save ``fig`` as ``fmt`` (png, svg, pdf) into an open binary file, its layout settled
    first (``settle_layout``); return notes for the user."""
    notes: list[str] = []
    # A fixed salt for the SVG element ids: the same run gives the same bytes in every format.
    with warnings.catch_warnings(record=True) as caught, rc_context({"svg.hashsalt": "attn-cli"}):
        warnings.simplefilter("always")
        settle_layout(fig)
        fig.savefig(file, format=fmt, dpi=fig.dpi, metadata=metadata(fmt))
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


def metadata(fmt: str) -> dict[str, Any]:
    # No creation dates: the same run gives the same bytes.
    if fmt == "png":
        return {"Software": "attn-cli (matplotlib)"}
    if fmt == "pdf":
        return {"Creator": "attn-cli", "Producer": None, "CreationDate": None}
    if fmt == "svg":
        return {"Creator": "attn-cli", "Date": None}
    return {}
