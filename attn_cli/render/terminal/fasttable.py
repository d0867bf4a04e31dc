"""rich's Table, drawing its one-line text cells without rich's per-cell layout.

rich draws each cell of a Table as Padding(Text) through two ``render_lines``
passes: the padding renders its text, the text wraps itself into lines,
justifies, joins and renders them, and the table splits the result into lines
again, then shapes and aligns every cell: about 100 microseconds a cell, most of
a batch's table view (a 13-token text's default view has some 300 cells). It
also measures every cell through ``Measurement.get`` to size the columns.

``Table`` here keeps what rich decides for the whole table (column widths and
their collapsing, the box and its ASCII substitute, styles) and, for a boxed
table without footer, row lines or sections, yields the rows itself: a cell that
is one line of text at its column's width is made with rich's own steps
(``Text.truncate``, ``rstrip``, ``pad_left``, ``Text("\n").join``, ``render``,
``Segment.apply_style``); any other cell (a header that wraps when the table is
narrowed, several lines, tabs, a renderable that is not text) is drawn by rich,
and its row aligned as rich aligns one. Text columns are measured with the steps
of ``Measurement.get``, in line. Anything else goes to rich unchanged.

It overrides private methods of ``rich.table.Table`` (``_render``,
``_measure_column``) and calls ``_get_cells``: ``tests/render/test_fasttable.py``
compares its output with rich's over random tables in three colour systems and
over every view, so a rich release that changes them fails there, not on a screen.
"""

from __future__ import annotations

from typing import Any

import rich.table
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text


class Table(rich.table.Table):
    """``rich.table.Table``, drawing one-line text cells directly (see the module)."""

    def _measure_column(self, console: Console, options: ConsoleOptions, column: rich.table.Column) -> Measurement:
        """rich's measure of a column of text cells, without its dispatch for each cell
        (``Measurement.get`` of a Padding of a Text: the same steps, in line)."""
        max_width = options.max_width
        if max_width < 1 or column.width is not None:
            return super()._measure_column(console, options, column)
        minimums, maximums = [], []
        for cell in rich.table.Table._get_cells(self, console, column._index, column):
            padding = cell.renderable
            text = padding.renderable if type(padding) is Padding else None
            if isinstance(text, str):
                text = console.render_str(text, markup=options.markup, highlight=False)
            extra = padding.left + padding.right if text is not None else 0
            if (
                not isinstance(text, Text)
                or type(text).__rich_measure__ is not Text.__rich_measure__
                or max_width - extra < 1
            ):
                return super()._measure_column(console, options, column)
            inner = Text.__rich_measure__(text, console, options).normalize().with_maximum(max_width)
            inner = Measurement(0, 0) if inner.maximum < 1 else inner.normalize()
            measured = Measurement(inner.minimum + extra, inner.maximum + extra).with_maximum(max_width)
            minimums.append(measured.minimum)
            maximums.append(measured.maximum)
        padding_width = self._get_padding_width(column._index)
        measurement = Measurement(max(minimums) if minimums else 1, max(maximums) if maximums else max_width).with_maximum(max_width)
        return measurement.clamp(
            None if column.min_width is None else column.min_width + padding_width,
            None if column.max_width is None else column.max_width + padding_width,
        )

    def _render(self, console: Console, options: ConsoleOptions, widths: list[int]) -> RenderResult:
        lines = self._one_line_rows(console, options, widths)
        if lines is None:
            yield from super()._render(console, options, widths)
        else:
            yield from lines

    def _one_line_rows(self, console: Console, options: ConsoleOptions, widths: list[int]) -> list[Segment] | None:
        """The segments rich's ``_render`` yields, for a boxed table without footer, lines
        between rows or sections (else None, and rich draws it)."""
        if not self.box or self.show_footer or self.show_lines or self.leading or any(row.end_section for row in self.rows):
            return None
        if any(width - self._get_padding_width(i) < 1 for i, width in enumerate(widths)):
            return None  # a column narrower than its padding: rich's cropping
        get_style = console.get_style
        table_style = get_style(self.style or "")
        border_style = table_style + get_style(self.border_style or "")
        box = self.box.substitute(options, safe=self.safe_box if self.safe_box is not None else console.safe_box)
        box = box.get_plain_headed_box() if not self.show_header else box
        columns = self.columns
        cells_by_column = [list(rich.table.Table._get_cells(self, console, i, column)) for i, column in enumerate(columns)]
        edges = [
            (Segment(box.head_left, border_style), Segment(box.head_right, border_style), Segment(box.head_vertical, border_style)),
            (Segment(box.mid_left, border_style), Segment(box.mid_right, border_style), Segment(box.mid_vertical, border_style)),
            (Segment(box.foot_left, border_style), Segment(box.foot_right, border_style), Segment(box.foot_vertical, border_style)),
        ]
        column_options = [  # as rich's _render makes them (later rich releases give a column its own highlight)
            options.update(width=width, justify=c.justify, no_wrap=c.no_wrap, overflow=c.overflow, height=None,
                           **({"highlight": c.highlight} if hasattr(c, "highlight") else {}))
            for width, c in zip(widths, columns)
        ]
        new_line = Segment.line()
        out: list[Segment] = []
        if self.show_edge:
            out += [Segment(box.get_top(widths), border_style), new_line]
        rows = list(zip(*cells_by_column))
        for index, row in enumerate(rows):
            first, last = index == 0, index == len(rows) - 1
            header_row = first and self.show_header
            row_style = Style.null() if header_row else get_style(self.get_row_style(console, index - 1 if self.show_header else index))
            left, right, divider = edges[0 if first else (2 if last else 1)]
            if not divider.text.strip():
                divider = Segment(divider.text, row_style.background_style + divider.style)
            cells = _row_lines(console, row, column_options, widths, row_style, header_row)
            height = len(cells[0]) if cells else 1
            for line_no in range(height):
                if self.show_edge:
                    out.append(left)
                for k, lines in enumerate(cells):
                    out += lines[line_no]
                    if k < len(cells) - 1:
                        out.append(divider)
                if self.show_edge:
                    out.append(right)
                out.append(new_line)
            if header_row:
                out += [Segment(box.get_row(widths, "head", edge=self.show_edge), border_style), new_line]
        if self.show_edge:
            out += [Segment(box.get_bottom(widths), border_style), new_line]
        return out


def _row_lines(
    console: Console, row: Any, column_options: list[ConsoleOptions], widths: list[int], row_style: Style, header_row: bool
) -> list[list[list[Segment]]]:
    """Each cell of one row as its lines: one line drawn here, or rich's lines for a cell that
    wraps, every cell then shaped to the row's height as rich shapes them."""
    get_style = console.get_style
    cells: list[list[list[Segment]]] = []  # per cell, its lines
    by_rich = False
    for cell, cell_options in zip(row, column_options):
        style = get_style(cell.style) + row_style
        line = _one_line(console, cell_options, cell.renderable)
        if line is None:  # rich draws this one (a header that wraps, say)
            by_rich = True
            cells.append(console.render_lines(cell.renderable, cell_options, style=style))
        else:
            cells.append([list(Segment.apply_style(line, style)) if style else line])
    height = max(1, *(len(lines) for lines in cells))
    if by_rich:  # rich's alignment and shape: a header at the bottom, other cells as their column says
        cells = [
            Segment.set_shape(_align(lines, "bottom" if header_row else cell.vertical, width, height, get_style(cell.style) + row_style), width, height)
            for lines, cell, width in zip(cells, row, widths)
        ]
    return cells


def _align(lines: list[list[Segment]], vertical: str, width: int, height: int, style: Style) -> list[list[Segment]]:
    if vertical == "top":
        return Segment.align_top(lines, width, height, style)
    if vertical == "middle":
        return Segment.align_middle(lines, width, height, style)
    return Segment.align_bottom(lines, width, height, style)


def _one_line(console: Console, options: ConsoleOptions, padding: Any) -> list[Segment] | None:
    """A table cell (a Padding around text) as the one line of segments rich draws for it at
    ``options.max_width`` before the cell's style, or None when it is not one line of text."""
    if type(padding) is not Padding or padding.top or padding.bottom or not padding.expand:
        return None
    renderable = padding.renderable
    drawn = getattr(renderable, "drawn", None)  # a text that picks its style as it is drawn (WeightCell)
    if drawn is not None:
        text = drawn(console)
    elif isinstance(renderable, str):
        text = console.render_str(renderable, highlight=options.highlight, markup=options.markup)
    elif type(renderable) is Text:
        text = renderable
    else:
        return None
    plain = text.plain
    if "\n" in plain or "\t" in plain:
        return None
    width = options.max_width - padding.left - padding.right
    if width < 1:
        return None
    no_wrap = text.no_wrap if text.no_wrap is not None else bool(options.no_wrap)
    if not no_wrap and cell_len(plain) > width:
        return None  # it would wrap onto several lines
    justify = text.justify or options.justify or "default"
    overflow = text.overflow or options.overflow or "fold"
    if not text.spans and overflow != "ignore" and cell_len(plain) <= width:
        # what the steps below make of a text with one style that fits: one segment
        if justify == "left":
            body = plain + " " * (width - cell_len(plain))
        elif justify == "right":
            plain = plain.rstrip()
            body = " " * (width - cell_len(plain)) + plain
        else:
            return None
        segments = [Segment(body, console.get_style(text.style)) if text.style else Segment(body)]
    else:
        segments = _justified(console, text, width, justify, overflow)
        if segments is None:
            return None
    style = console.get_style(padding.style)
    if padding.left:
        segments.insert(0, Segment(" " * padding.left, style))
    if padding.right:
        segments.append(Segment(" " * padding.right, style))
    return segments


def _justified(console: Console, text: Text, width: int, justify: str, overflow: Any) -> list[Segment] | None:
    line = text.copy()
    # Text.wrap of a line that fits (or is not wrapped), then Lines.justify, as rich does them
    if justify == "left":
        line.truncate(width, overflow=overflow, pad=True)
    elif justify == "right":
        line.rstrip()
        line.truncate(width, overflow=overflow)
        line.pad_left(width - cell_len(line.plain))
    else:
        return None
    line.truncate(width, overflow=overflow)
    segments = list(Text("\n").join([line]).render(console))
    return segments if sum(segment.cell_length for segment in segments) == width else None
