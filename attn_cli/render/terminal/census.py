"""The table view of a census: one line a layer and head, its main measures and its flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from attn_cli.sources.census import Census

COLUMNS = (
    ("cls", "cls"), ("sep", "sep"), ("punct", "punct"), ("previous", "prev"), ("next", "next"), ("entropy_nats", "entropy"),
    ("sink_score", "sink"), ("sink_rate", "sink rate"), ("confidence", "conf."), ("positional", "positional"),
)  # fmt: skip


def census_view(census: Census, *, precision: int = 3) -> RenderableType:
    """The corpus in one line, then every head's measures (mean over rows or texts, docs/census.md)."""
    from attn_cli.formats.census import census_dict

    made = census_dict(census)
    name = census.model_name
    rate = made["sink_rate"]
    head = Text(
        f"{name}: {made['texts']:,} texts ({made['tokens']:,} tokens) of {made['corpus']}; "
        f"{made['empty']} empty and {len(made['skipped'])} unreadable skipped; "
        f"sink rate {'–' if rate is None else f'{rate:.{precision}f}'} (epsilon {made['epsilon']})",
        style="bold",
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("layer", justify="right", no_wrap=True, min_width=5)
    table.add_column("head", justify="right", no_wrap=True, min_width=4)
    for _, title in COLUMNS:  # the numbers whole; a narrow terminal shortens the titles instead
        table.add_column(title, justify="right", no_wrap=True, min_width=precision + 2)
    table.add_column("flags", justify="left")
    for entry in made["heads"]:
        measures = entry["measures"]
        cells = [_number(measures[key], precision) for key, _ in COLUMNS]
        table.add_row(str(entry["layer"]), str(entry["head"]), *cells, ", ".join(entry["flags"]))
    return Group(head, table)


def _number(value: float | None, precision: int) -> str:
    return "–" if value is None else f"{value:.{precision}f}"
