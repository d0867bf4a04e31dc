"""The walk-through as rich panels for a terminal, one per step; a grid wider than
the terminal loses its right-hand columns behind a marker that says so."""

from __future__ import annotations

from typing import Any

from attn_cli.render.explain.document import Block, Explanation, Grid, Line


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
    """A grid as rich tables that fit the width they are given: when its columns
    do not fit side by side, the body columns go into stacked blocks, each with the
    row labels again, so no number is cut (``attn_cli.render.terminal.fit`` measures
    them)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def _table(self, columns: list[int]) -> Any:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        grid = self.grid
        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 0, 0, 1),
        )
        for k in columns:
            table.add_column(Text(grid.header[k]), justify="left" if k < grid.left else "right", no_wrap=True)
        for r, row in enumerate(grid.rows):
            table.add_row(*(Text(row[k], style="bold reverse" if (r, k) in grid.emphasis else "") for k in columns))
        return table

    def blocks(self, room: int) -> list[list[int]]:
        """The body columns of each stacked block (the row labels go with every one)."""
        from rich.cells import cell_len

        grid = self.grid
        n = len(grid.header)

        def width(k: int) -> int:  # content, and for every column but the first a divider and a left pad
            content = max(cell_len(grid.header[k]), *(cell_len(row[k]) for row in grid.rows))
            return content + (2 if k else 0)

        labels = sum(width(k) for k in range(min(grid.left, n)))
        blocks: list[list[int]] = [[]]
        used = labels
        for k in range(grid.left, n):
            w = width(k) if k else width(k) + 2
            if blocks[-1] and used + w > room:
                blocks.append([])
                used = labels
            blocks[-1].append(k)
            used += w
        return blocks

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.padding import Padding

        grid = self.grid
        labels = list(range(min(grid.left, len(grid.header))))
        blocks = self.blocks(options.max_width)
        for i, body in enumerate(blocks):
            title = grid.title or None
            if len(blocks) > 1:
                shown = f"columns {grid.header[body[0]]} to {grid.header[body[-1]]}" if len(body) > 1 else f"column {grid.header[body[0]]}"
                title = f"{grid.title} ({shown}; {i + 1} of {len(blocks)})" if grid.title else f"({shown})"
            table = self._table(labels + body)
            yield Padding(table if title is None else self._titled(title, table), (1 if i == 0 else 0, 0, 0, 0))

    @staticmethod
    def _titled(title: str, table: Any) -> Any:
        """The title as a line of its own over the table, wrapped to the width the grid has: a
        rich table's own title wraps to the table's width, which a block of one narrow column
        makes a few characters wide."""
        from rich.console import Group
        from rich.text import Text

        return Group(Text(title, style="bold"), table)
