"""The walk-through as rich panels for a terminal, one per step; a grid wider than
the terminal loses its right-hand columns behind a marker that says so."""

from __future__ import annotations

from typing import Any

from attn_cli.render.explain.document import Block, Explanation, Grid, Line
from attn_cli.render.fit import fit_columns


def to_rich(explanation: Explanation) -> Any:
    """Panels, one per step, for a terminal; returns a rich renderable."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    parts: list[Any] = [_rich_block(block) for block in explanation.intro]
    for step in explanation.steps:
        title = Text(f"{step.number} · {step.title}", style="bold" if not step.skipped else "dim")
        body = Group(*(_rich_block(block) for block in step.blocks))
        parts.append(Panel(body, title=title, title_align="left", border_style="dim" if step.skipped else "blue"))
    parts.extend(_rich_block(block) for block in explanation.outro)
    return Group(*parts)


_STYLES = {"text": "", "formula": "bold cyan", "why": "italic", "note": "dim"}


def _rich_block(block: Block) -> Any:
    from rich.text import Text

    if isinstance(block, Line):
        if block.kind == "formula":
            return Text("  " + block.text, style=_STYLES["formula"])
        return Text(block.text, style=_STYLES.get(block.kind, ""))
    return _FitGrid(block)


class _FitGrid:
    """A grid as a rich table that fits the width it is given: body columns that
    do not fit are dropped behind a "…" column (the row labels and the
    ``keep_last`` total columns stay), and a line says how many, and how to see
    them."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def _table(self, columns: list[int]) -> Any:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        grid = self.grid
        table = Table(
            title=grid.title or None,
            title_justify="left",
            title_style="bold",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 0, 0, 1),
        )
        for k in columns:
            header = grid.header[k] if k >= 0 else "…"
            table.add_column(Text(header), justify="left" if 0 <= k < grid.left else "right", no_wrap=True)
        for r, row in enumerate(grid.rows):
            cells = [
                Text(row[k], style="bold reverse" if (r, k) in grid.emphasis else "") if k >= 0 else Text("…")
                for k in columns
            ]
            table.add_row(*cells)
        return table

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.cells import cell_len
        from rich.padding import Padding
        from rich.text import Text

        grid = self.grid
        n = len(grid.header)

        def width(k: int) -> int:  # content, and for every column but the first a divider and a left pad
            content = max(cell_len(grid.header[k]), *(cell_len(row[k]) for row in grid.rows))
            return content + (2 if k else 0)

        columns = fit_columns(n, width, options.max_width, keep_last=grid.keep_last, keep_first=min(2, n), ellipsis=cell_len("…") + 2)
        shown = [k if k is not None else -1 for k in columns]
        yield Padding(self._table(shown), (1, 0, 0, 0))
        cut = n - len([k for k in columns if k is not None])
        if cut:
            yield Text(
                f"{cut} column{'s' if cut > 1 else ''} cut to fit the terminal ({options.max_width} wide): "
                "a wider terminal, or --format text, shows them.",
                style="dim",
            )
