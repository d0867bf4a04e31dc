"""Titles that fit their figure: wrapped at the parts' joints, measured in points, never cut off.

A title is a list of lines, each a list of parts (``"heads 4"``, ``"d_k 8"``, ...)
joined by `` · ``. ``fit_title`` packs the parts of each line into as many lines
as the width needs, and shortens with ``…`` only a part that is wider than the
whole figure on its own: a quoted text loses its end (the closing quote stays),
a path its beginning (the name at its end stays), anything else its end.
Widths are measured with matplotlib's own text layout (``text_to_path``), in the
font the figure draws with, so the answer holds for PNG, SVG and PDF alike.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

from matplotlib import rcParams
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path

JOIN = " · "
FROM = "← "  # a part that begins so continues the part before it (a cross-attention's source): a space, not JOIN
MIN_TITLE_FONT = 7.0  # points; below this a title is not worth reading on paper


def text_width(text: str, size: float) -> float:
    """Width of ``text`` in points at ``size`` points, in the font family matplotlib draws with now."""
    return _width(text, size, tuple(rcParams["font.family"]))


@functools.lru_cache(maxsize=4096)
def _width(text: str, size: float, family: tuple[str, ...]) -> float:
    prop = FontProperties(family=list(family), size=size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing glyph is reported once, when the figure is saved
        width, _height, _descent = text_to_path.get_text_width_height_descent(text, prop, ismath=False)
    return float(width)


def fit_title(lines: Sequence[Sequence[str]], width: float, size: float) -> str:
    """The title's lines wrapped to ``width`` points at ``size`` points; a newline between lines.

    Lines break between parts; a part wider than ``width`` on its own is shortened
    when it is a quoted text or a path, and broken between its words otherwise
    (a hint's words all matter)."""
    out: list[str] = []
    for parts in lines:
        pieces: list[tuple[str, str]] = []  # (what joins it to the piece before, the piece)
        for part in parts:
            joiner = "" if not pieces else " " if part.startswith(FROM) else JOIN
            if text_width(part, size) <= width:
                pieces.append((joiner, part))
            elif _shortened_whole(part):
                pieces.append((joiner, shorten_to_width(part, width, size)))
            else:
                for i, word in enumerate(part.split(" ")):
                    word = word if text_width(word, size) <= width else shorten_to_width(word, width, size)
                    pieces.append((joiner if i == 0 else " ", word))
        current = ""
        for joiner, piece in pieces:
            longer = current + joiner + piece
            if current and text_width(longer, size) > width:
                out.append(current)
                current = piece
            else:
                current = longer
        if current:
            out.append(current)
    return "\n".join(out)


def title_font(figure_width: float, preferred: float) -> float:
    """A title font for a figure ``figure_width`` inches wide: ``preferred`` on a wide figure,
    smaller on a narrow one (about 2.4 points per inch), never under MIN_TITLE_FONT."""
    return max(MIN_TITLE_FONT, min(preferred, round(figure_width * 2.4 * 2) / 2))


def shorten_to_width(part: str, width: float, size: float) -> str:
    """``part`` cut with ``…`` until it fits ``width`` points (at least its first character)."""
    quoted = _quoted(part)
    path = not quoted and "/" in part

    def cut(keep: int) -> str:
        if quoted:
            return part[: keep] + "…”"
        if path:
            return "…" + part[len(part) - keep :]
        return part[:keep] + "…"

    low, high = 1, len(part) - 1  # the longest cut that still fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if text_width(cut(middle), size) <= width:
            low = middle
        else:
            high = middle - 1
    return cut(low)


def _quoted(part: str) -> bool:
    return part.endswith("”") and "“" in part


def _shortened_whole(part: str) -> bool:
    """Parts that lose characters rather than wrap: a quoted text (the title repeats the
    start of the text) and a path or a model name (one unbreakable word)."""
    return _quoted(part) or " " not in part
