"""`attn-cli compare` for people: the heads ranked by how much their attention changes.
Reads a ``Comparison`` (attn_cli.analysis.compare), whatever the two traces came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attn_cli.formats.compare import pair_labels

if TYPE_CHECKING:
    from rich.console import RenderableType

    from attn_cli.analysis.compare import Comparison


def compare_view(c: Comparison, *, top: int, precision: int) -> RenderableType:
    """The heads ranked by mean total variation, for people."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from attn_cli.render.terminal.cells import printable

    labels = pair_labels(c)
    a, b = c.a, c.b
    title = Text()
    if a.model.source != b.model.source:
        title.append(f"{printable(a.text)!r}", style="bold")
        title.append(f"  through {a.model.name} (A) and {b.model.name} (B)")
    else:
        title.append("A ", style="bold")
        title.append(repr(printable(a.text)))
        title.append("\nB ", style="bold")
        title.append(repr(printable(b.text)))
        title.append(f"\n{a.model.name}: {len(a.tokens)} tokens each")
    differ = [i for i, (x, y) in enumerate(zip(a.tokens.ids, b.tokens.ids)) if x != y]
    lines: list[Any] = [title]
    if differ and a.model.source == b.model.source:
        lines.append(Text(f"differ at position{'s' if len(differ) > 1 else ''} " + ", ".join(f"{i} ({labels[i]})" for i in differ), style="dim"))
    f = f"{{:.{precision}f}}"
    table = Table(box=box.SIMPLE_HEAD, title=f"Heads that change most (of {len(c.heads)})", title_justify="left", title_style="bold", pad_edge=False)
    for name, justify in (("rank", "right"), ("layer", "right"), ("head", "right"), ("mean_tv", "right"), ("max_tv", "right"), ("at query", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, h in enumerate(c.ranked()[:top], start=1):
        table.add_row(str(rank), str(h.layer), str(h.head), f.format(h.mean_tv), f.format(h.max_tv), labels[h.max_row])
    lines += [table, Text(
        "tv: each query row's total variation distance, 0.5 x sum over keys of |B - A|: 0 the same attention, "
        "1 none in common; mean_tv averages it over the rows. -o NAME.png draws A, B and B - A of the top head "
        "(or --layer/--head); -F json has every difference.",
        style="dim",
    )]  # fmt: skip
    return Group(*lines)
