"""`attn-cli faithfulness`'s table: the maps ranked by AOPC, each bin's drop, the random baseline."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


def faithfulness_view(result: Any, n_texts: int) -> Group:
    """The ranked maps (most faithful first), their drops per bin and the random baseline's, under a line on the target."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("rank", justify="right")
    table.add_column("map", no_wrap=True)
    table.add_column("AOPC", justify="right")
    for p in result.bins:
        table.add_column(f"{p}%", justify="right")
    for rank, curve in enumerate(result.curves, start=1):
        better = curve.aopc > result.random.aopc
        table.add_row(str(rank), curve.method, Text(f"{curve.aopc:.4f}", style="bold" if better else "dim"), *(f"{d:+.4f}" for d in curve.drops))
    table.add_row("", Text("random (10)", style="italic"), f"{result.random.aopc:.4f}", *(f"{d:+.4f}" for d in result.random.drops))
    return Group(Text(_heading(result, n_texts), style="bold"), Text(""), table, Text(""), Text(_caption(result), style="dim"))


def _heading(result: Any, n_texts: int) -> str:
    if n_texts > 1:
        return f"Faithfulness over {n_texts} texts: each map's drops averaged (the targets: each text's own)"
    t = result.targets[0]
    return f"Faithfulness to {t.what} ({'predicted' if t.predicted else 'as asked'}), read at {t.where}"


def _caption(result: Any) -> str:
    return (
        f"each map's row ranks the tokens that are not special; the top 1, 5, 10, 20 and 50% are deleted "
        f"(--delete-with {result.delete_with}) and the target's probability measured: each column is the drop "
        f"p(before) - p(after); AOPC is their mean "
        f"(DeYoung et al. 2020), higher is more faithful; bold: above the random baseline"
    )
