"""The options of documents, declared once for the commands that take them (run, heatmap): the
query rows to follow at any length, whether a run keeps its tables, where they go, and how a
long text's picture pools its weights.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from attn_cli.cli.panels import DISPLAY, OUTPUT
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.records.selection import Selection, Tables


def _check_queries(values: Optional[list[str]]) -> Optional[list[str]]:
    from attn_cli.records.positions import check_query

    try:
        return [check_query(v) for v in values] if values else None
    except UsageError as err:
        raise typer.BadParameter(str(err).removeprefix("--query ")) from None


# run's --query: several rows, at any length (``records.positions.resolve_queries``)
QueriesOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--query", "-q",
        help="Query rows to follow: a position (0-based, negative from the end), a range A:B (B not included), last, "
        "last:N (the last N), or a token's text; repeat for several. run: JSON and CSV keep each chosen row's weights "
        "whole (rows), at any length, and one token focuses the tables on it; heatmap: the rows as strips over every key.",
        rich_help_panel=DISPLAY, show_default=False, metavar="QUERY", callback=_check_queries,
    ),
]  # fmt: skip


NoTablesOption = Annotated[
    bool,
    typer.Option(
        "--no-tables",
        help="Keep each head's statistics and the --query rows only, computed a block of query rows at a time, "
        "whatever the length (a long text's tables give way to them by themselves where they do not fit the memory).",
        rich_help_panel=DISPLAY,
    ),
]


TablesFileOption = Annotated[
    Optional[Path],
    typer.Option(
        "--tables",
        help="Also stream the chosen layers' and heads' whole T x T weights to FILE, a block of rows at a time, at any "
        "length: FILE.npy (one layer and head) or FILE.safetensors (several, named layer.L.head.H). The output then has "
        "the statistics and --query rows.",
        rich_help_panel=OUTPUT, metavar="FILE", show_default=False,
    ),
]  # fmt: skip
TableDtypeOption = Annotated[
    str,
    typer.Option("--table-dtype", help="The number type of --tables: float32 or float16 (half the disk).", rich_help_panel=OUTPUT),
]


def _check_span(value: Optional[str]) -> Optional[str]:
    found = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", value) if value is not None else None
    if value is not None and (found is None or int(found[1]) >= int(found[2])):
        raise typer.BadParameter(f"{value!r}: give A:B, token positions A to B - 1, B after A (e.g. 100:160)")
    return value


def long_selection(
    selection: Selection, query: list[str] | None, pool: Pool, window: str | None, keys: str | None, *, tables: Tables = "fit"
) -> Selection:  # fmt: skip
    """A picture's or page's selection at any length: its tables where they fit (``tables``), else each
    kept layer's statistics, pooled maps and the --query and --window rows, computed in blocks."""
    from attn_cli.analysis.pooling import POOL_CELLS  # torch: only once a command runs

    if keys is not None and window is None:
        raise UsageError("--keys chooses the columns of a --window: give --window A:B too")
    queries = tuple(query or ()) + ((window.replace(" ", ""),) if window is not None else ())
    return dataclasses.replace(selection, tables=tables, queries=queries, pool=(POOL_CELLS, pool.value))


def span(value: str | None, n: int, flag: str) -> tuple[int, int] | None:
    """``A:B`` as positions A .. B - 1 among n tokens, B past the end cut to it (UsageError where A is past it)."""
    if value is None:
        return None
    a, b = (int(part) for part in value.split(":"))
    if a >= n:
        raise UsageError(f"{flag} {value}: the text has {n} tokens, positions 0 to {n - 1}")
    return a, min(b, n)


class Pool(str, enum.Enum):
    max = "max"
    mean = "mean"


PoolOption = Annotated[
    Pool,
    typer.Option(
        "--pool", help="A long text's picture (over 2,048 tokens, or whose tables do not fit): each pixel the max or the "
        "mean of its group of weights.", rich_help_panel=DISPLAY, case_sensitive=False,
    ),
]  # fmt: skip
WindowOption = Annotated[
    Optional[str],
    typer.Option(
        "--window", help="Zoom into query rows A:B (B not included) at full resolution, on the keys --keys chooses "
        "(default the same positions): a long text's detail.", rich_help_panel=DISPLAY, show_default=False, metavar="A:B",
        callback=_check_span,
    ),
]  # fmt: skip
KeysOption = Annotated[
    Optional[str],
    typer.Option("--keys", help="With --window: the key columns C:D to draw.", rich_help_panel=DISPLAY, show_default=False,
                 metavar="C:D", callback=_check_span),
]  # fmt: skip
