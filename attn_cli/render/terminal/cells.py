"""The pieces every terminal table is made of: numbers and weight cells (coloured on
viridis, a 16-colour ramp of their own on small terminals), token labels, titles and notes,
what the run's tables show (``View``), and ``FittedTable``, a table that decides at render
time how many columns fit its width and how many rows to draw.
No torch: run's option parsing imports this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from rich import box
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.style import Style
from rich.text import Text

from attn_cli.render.terminal.fasttable import Table
from attn_cli.render.terminal.fit import fit_columns, spans

# 16-colour terminals: the nearest of their colours to viridis is one grey for every weight
# under 0.35, so they get viridis' order in colours of their own, one per sixth of [0, 1]
# (background, text on it)
_RAMP_16 = (
    ("magenta", "white"), ("blue", "white"), ("cyan", "black"),
    ("green", "black"), ("bright_green", "black"), ("bright_yellow", "black"),
)
Cell = Callable[[int, int], Text]
SHOW_CHOICES = ("tokens", "embeddings", "qkv", "scores", "scaled", "weights", "context", "output", "stats", "norms", "rollout", "flow")
ANALYSES = ("norms", "rollout", "flow")  # tables of what --norms, --rollout, --what flow compute (--show norms computes them too)
# "output" in the default is drawn only when it differs from the one head's context.
DEFAULT_SHOW = frozenset({"tokens", "weights", "stats", "output"})
FOCUSED_SHOW = frozenset({"tokens"})  # the default when --query or --key is given
LABEL_WIDTH = 20  # widest token label drawn in a row or column header
BAR_WIDTH = 24  # characters of a full (weight 1) bar
TOP_KEYS = 50  # --query lists at most this many keys
ELLIPSIS = "…"
VDOTS = "⋮"
ROW_LIMIT = 40  # a longer table shows its first ROW_LIMIT rows, a ⋮ row and its last row
SEE_ALL = "--format csv (or -o FILE.csv) has every number"
ROW_HINT = "--query N shows one row in full"
DEFAULT_PRECISION = 4  # digits after the point
FEWEST_DIGITS = 2  # a table rounds to as few as this before it drops columns (--precision not given)
# viridis, from low to high: readable on dark and light terminals alike
_RAMP = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))


@dataclasses.dataclass(frozen=True)
class View:
    """What the human view shows."""

    show: frozenset[str] = DEFAULT_SHOW
    explicit: bool = False  # --show was given: draw "output" even for one head
    heads: tuple[int, ...] | None = None  # None: every head
    precision: int = DEFAULT_PRECISION
    fit_precision: bool = False  # --precision not given: a table that does not fit rounds to fewer digits first
    query: int | None = None  # a resolved position among the tokens shown (--hide-tokens leaves some out)
    key: int | None = None  # a resolved position among the tokens shown


def fmt(value: float, precision: int) -> str:
    """``value`` to ``precision`` digits, without the sign of a negative zero."""
    text = f"{value:.{precision}f}"
    if text.startswith("-") and not text.strip("-0."):
        text = text[1:]
    return text


def weight_style(weight: float, color_system: str | None = "truecolor") -> Style:
    """Background from the viridis ramp by value in [0, 1], text readable on it, in the
    colours ``color_system`` (rich's name: truecolor, 256, standard, windows) can show."""
    if color_system in ("standard", "windows"):
        background, text = _RAMP_16[min(int(min(max(weight, 0.0), 1.0) * len(_RAMP_16)), len(_RAMP_16) - 1)]
        return Style(bgcolor=background, color=text)
    # 256 colours: rich's nearest colour to each viridis step is a different one
    t = min(max(weight, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(t), len(_RAMP) - 2)
    f = t - i
    rgb = tuple(round(a + (b - a) * f) for a, b in zip(_RAMP[i], _RAMP[i + 1]))
    return Style(bgcolor=Color.from_rgb(*rgb), color="black" if weight >= 0.55 else "white")


class WeightCell(Text):
    """A weight's text, coloured when it is drawn: only then is the terminal's colour system known."""

    def __init__(self, text: str, weight: float, *, best: bool = False) -> None:
        super().__init__(text, style=Style(bold=best, underline=best))
        self.weight = weight

    def drawn(self, console: Console) -> Text:
        """The text as it is drawn on ``console``: its background from the weight."""
        drawn = self.copy()
        drawn.style = weight_style(self.weight, console.color_system) + self.style
        return drawn

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from Text.__rich_console__(self.drawn(console), console, options)


def bar(weight: float, width: int = BAR_WIDTH) -> str:
    """A horizontal bar of ``weight * width`` characters, in eighths."""
    eighths = round(min(max(weight, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[part]


def printable(text: str) -> str:
    """``text`` with spaces kept but line breaks, tabs and control characters made visible:
    nothing in it can move the cursor or restyle the terminal."""
    from attn_cli.records.tokens import visible

    return "".join(c if c == " " else visible(c) for c in text)


def label_text(label: str, style: str = "") -> Text:
    return Text(label, style=style, no_wrap=True, overflow="ellipsis")


def title_text(name: str, rest: str = "") -> Text:
    """A table's title: it wraps rather than lose its end (which names the layer and head)."""
    return Text.assemble((name, "bold"), rest, overflow="fold")


def note_text(message: str) -> Text:
    return Text(message, style="dim")


def rows_to_show(n_rows: int) -> list[int | None]:
    """Row indexes to draw, ``None`` standing for the ``⋮`` row: every row of a
    table of up to ``ROW_LIMIT + 1``, else the first ``ROW_LIMIT`` and the last."""
    if n_rows <= ROW_LIMIT + 1:
        return list(range(n_rows))
    return [*range(ROW_LIMIT), None, n_rows - 1]


def rows_note(
    chosen: Sequence[int | None], n_rows: int, what: str, hint: str = "", *, see_all: str = SEE_ALL, start: int = 0
) -> Text | None:
    """The line under a table whose rows were cut (None when none were); its
    rows are positions ``start`` .. ``start + n_rows - 1``."""
    if None not in chosen:
        return None
    tail = "".join(f"; {part}" for part in (hint, see_all) if part)
    return Text(
        f"{VDOTS} {len(chosen) - 1} of {n_rows} {what} shown ({start}-{start + ROW_LIMIT - 1}, {start + n_rows - 1}): "
        f"long tables show their first {ROW_LIMIT} rows and the last{tail}",
        style="yellow",
    )


class FittedTable:
    """A labelled matrix (rows x columns of cells) that drops middle columns
    rather than wrap, and middle rows past ``ROW_LIMIT``. ``what`` names the
    columns in the note ("keys", "dims"), ``rows_what`` the rows.

    ``cells`` is either the cells themselves or a ``cell(i, j)`` callback: a
    table of T x T cells on a terminal of 80 columns shows a few of them, and
    only those are ever made (once each)."""

    def __init__(
        self,
        title: Text,
        corner: str,
        row_labels: Sequence[str],
        col_labels: Sequence[str],
        cells: Sequence[Sequence[Text]] | Cell,
        *,
        what: str,
        rows_what: str = "rows",
        captions: Sequence[Text] = (),
        hint: str = "",
        row_hint: str = "",
        numbers: Sequence[int] = (),
    ) -> None:
        self.title = title
        self.corner = corner
        self.row_labels = row_labels
        self.col_labels = col_labels
        self._cell = cells if callable(cells) else (lambda i, j: cells[i][j])
        self.what = what
        self.rows_what = rows_what
        self.captions = captions
        self.hint = hint
        self.row_hint = row_hint
        self.numbers = numbers or range(len(col_labels))  # what the cut note calls the columns
        self.rows = rows_to_show(len(row_labels))
        self._cells: dict[tuple[int, int], Text] = {}
        self._widths: dict[int, int] = {}
        self.rounded: tuple[int, int] | None = None  # (the digits asked for, the fewer drawn) when PrecisionFit chose fewer

    def cell(self, i: int, j: int) -> Text:
        made = self._cells.get((i, j))
        if made is None:
            made = self._cells[(i, j)] = self._cell(i, j)
        return made

    def label_width(self) -> int:
        shown = (cell_len(self.row_labels[i]) for i in self.rows if i is not None)
        return min(LABEL_WIDTH, max(cell_len(self.corner), *shown))

    def column_width(self, j: int) -> int:
        """The widest of column ``j``'s header (cut to LABEL_WIDTH) and its shown cells."""
        width = self._widths.get(j)
        if width is None:
            shown = (self.cell(i, j).cell_len for i in self.rows if i is not None)
            width = self._widths[j] = max(min(LABEL_WIDTH, cell_len(self.col_labels[j])), *shown)
        return width

    def columns_that_fit(self, width: int) -> list[int | None]:
        """Column indexes to draw, ``None`` standing for the ``…`` column: every
        column if they fit, else the most first columns that fit with ``…`` and
        the last (``attn_cli.render.terminal.fit``). Only the columns looked at are
        measured (so made), a few more than fit."""
        # each column: content + 1 space padding either side + 1 divider; the label column, 2 edges
        room = width - (self.label_width() + 4)
        return fit_columns(len(self.col_labels), lambda j: self.column_width(j) + 3, room, ellipsis=cell_len(ELLIPSIS) + 3)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        chosen = self.columns_that_fit(options.max_width)
        table = Table(box=box.SIMPLE_HEAD, show_edge=True, pad_edge=True, expand=False)
        label = self.label_width()
        # The widths are what rich would measure (the widest shown cell, the header cut to
        # LABEL_WIDTH): given, rich does not measure every cell again.
        table.add_column(label_text(self.corner), no_wrap=True, overflow="ellipsis", max_width=label, width=label)
        for j in chosen:
            header = Text(ELLIPSIS) if j is None else label_text(self.col_labels[j])
            width = cell_len(ELLIPSIS) if j is None else self.column_width(j)
            table.add_column(header, justify="right", no_wrap=True, overflow="ellipsis", max_width=width, width=width)
        for i in self.rows:
            if i is None:
                table.add_row(*(Text(VDOTS, style="dim") for _ in range(len(chosen) + 1)))
                continue
            drawn = [Text(ELLIPSIS, style="dim") if j is None else self.cell(i, j) for j in chosen]
            table.add_row(label_text(self.row_labels[i]), *drawn)
        yield self.title
        yield table
        for caption in self.captions:
            yield caption
        if self.rounded is not None:
            asked, drawn = self.rounded
            yield Text(
                f"numbers to {drawn} digits after the point, not {asked}, to fit {options.max_width} columns "
                f"(--precision {asked} keeps {asked} and drops {self.what}); {SEE_ALL}",
                style="yellow",
            )
        shown = [j for j in chosen if j is not None]
        cut_columns = len(shown) < len(self.col_labels)
        if cut_columns:
            n = len(self.col_labels)
            hint = f"; {self.hint}" if self.hint else ""
            yield Text(
                f"{ELLIPSIS} {len(shown)} of {n} {self.what} shown ({spans([self.numbers[j] for j in shown])}) to fit "
                f"{options.max_width} columns{hint}; {SEE_ALL}",
                style="yellow",
            )
        # said once: the column note already named the hint, and it or the rounding note where every number is
        row_hint = "" if cut_columns and self.row_hint == self.hint else self.row_hint
        see_all = "" if cut_columns or self.rounded is not None else SEE_ALL
        note = rows_note(self.rows, len(self.row_labels), self.rows_what, row_hint, see_all=see_all)
        if note is not None:
            yield note
        yield Text("")


class PrecisionFit:
    """A table made with ``make(digits)`` at the most digits, from ``precision`` down to
    ``FEWEST_DIGITS``, at which every column fits the width it is drawn in: an 8 x 8 table
    of weights fits 80 columns at 3 digits, not at 4. When none fits, the table at
    ``precision`` with its middle columns dropped (``FittedTable``): fewer digits would
    still lose columns. Only the columns looked at are made, at each number of digits tried."""

    def __init__(self, make: Callable[[int], FittedTable], precision: int) -> None:
        self.make = make
        self.precision = precision

    def table(self, width: int) -> FittedTable:
        asked = self.make(self.precision)
        if self.precision <= FEWEST_DIGITS or _fits(asked, width):
            return asked
        fewest = self.make(FEWEST_DIGITS)
        if not _fits(fewest, width):
            return asked
        for digits in range(self.precision - 1, FEWEST_DIGITS, -1):  # the most digits that fit
            fewer = self.make(digits)
            if _fits(fewer, width):
                break
        else:
            digits, fewer = FEWEST_DIGITS, fewest
        fewer.rounded = (self.precision, digits)
        return fewer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)


def _fits(table: FittedTable, width: int) -> bool:
    return None not in table.columns_that_fit(width)


def precise(make: Callable[[int], FittedTable], view: View) -> FittedTable | PrecisionFit:
    """The table ``make(digits)`` at the view's precision, or its fewer digits that fit (``PrecisionFit``)."""
    return PrecisionFit(make, view.precision) if view.fit_precision else make(view.precision)
