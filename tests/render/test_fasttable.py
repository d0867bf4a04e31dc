"""render.fasttable.Table draws exactly what rich's Table draws, plain and in colour."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import pytest
import rich.table
from rich.console import Console

import attn_cli.render.terminal.tables as tables
from attn_cli.render.terminal import cells, fasttable, header, matrices
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource

# Random tables of the kinds attn-cli draws and some it does not: wide characters, empty
# cells, styles, cut labels, fixed widths, headers that wrap when the width is short,
# other boxes, row styles and sections (which rich draws itself). Each color system in a
# process of its own: rich caches a style's ANSI codes on the style, so one process that
# drew a style in 24-bit colour draws it so again for a 16-colour console.
RANDOM_TABLES = textwrap.dedent(
    """
    import io, random, sys
    from rich import box
    from rich.console import Console
    from rich.style import Style
    from rich.table import Table as RichTable
    from rich.text import Text
    from attn_cli.render.terminal.fasttable import Table as FastTable

    WORDS = ["a", "tok", "␣saw#3", "naïve", "café", "日本語", "🙂x", "0.1234", "-0.0001", "", "long label here",
             "x" * 30, "effective tokens", "two words"]

    def build(cls, seed):
        r = random.Random(seed)
        t = cls(box=r.choice([box.SIMPLE_HEAD, box.SIMPLE_HEAD, box.ROUNDED, box.ASCII]), show_edge=r.random() < .8,
                pad_edge=r.random() < .8, show_header=r.random() < .9, row_styles=["", "dim"] if r.random() < .1 else None)
        for c in range(r.randint(1, 7)):
            kw = dict(justify=r.choice(["left", "right"]))
            if r.random() < .5:
                kw.update(no_wrap=True, overflow="ellipsis", max_width=r.randint(3, 12))
            if r.random() < .15:
                kw.update(width=r.randint(1, 10))
            t.add_column(r.choice([r.choice(WORDS), Text(r.choice(WORDS), style="bold")]), **kw)
        for _ in range(r.randint(0, 6)):
            cells = []
            for c in range(len(t.columns)):
                w, k = r.choice(WORDS), r.random()
                if k < .3:
                    cells.append(w)
                elif k < .6:
                    cells.append(Text(w, style=r.choice(["", "dim", "bold underline", Style(bgcolor="#440154", color="white")])))
                elif k < .7:
                    cells.append(Text.assemble(("x", "bold"), (w, "red")))
                else:
                    cells.append(Text(w, no_wrap=True, overflow="ellipsis"))
            t.add_row(*cells, end_section=r.random() < .05)
        return t

    def render(t, width, color):
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=color, force_terminal=color is not None, highlight=False,
                markup=False, emoji=False, soft_wrap=False).print(t)
        return buf.getvalue()

    color = None if sys.argv[1] == "none" else sys.argv[1]
    bad = [(seed, width) for seed in range(int(sys.argv[2])) for width in (12, 30, 60, 200)
           if render(build(RichTable, seed), width, color) != render(build(FastTable, seed), width, color)]
    print(bad[:5], len(bad))
    """
)


@pytest.mark.parametrize("color", ["none", "truecolor", "standard"])
def test_random_tables_are_drawn_as_rich_draws_them(color: str) -> None:
    out = subprocess.run([sys.executable, "-c", RANDOM_TABLES, color, "150"], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "0", out.stdout


def draw_view(table_class: type, run, width: int, color: str | None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=color, force_terminal=color is not None, highlight=False, markup=False, emoji=False)
    drawing = [m for m in (cells, header, matrices, tables) if hasattr(m, "Table")]  # every module that makes tables
    saved = [m.Table for m in drawing]
    for m in drawing:
        m.Table = table_class
    try:
        console.print(tables.human_view(run, cells.View(show=frozenset(cells.SHOW_CHOICES))))
    finally:
        for m, table in zip(drawing, saved):
            m.Table = table
    return buf.getvalue()


@pytest.mark.parametrize("text, options", [
    ("Tokens dessert into is and on each cat query scale to heads.", {}),
    ("I saw a saw naïve café 日本語 🙂", {"heads": 2, "causal": True, "tokenizer": "words"}),
    (" ".join(f"w{i}" for i in range(60)), {"tokenizer": "words", "out_proj": True, "heads": 4}),
])
@pytest.mark.parametrize("width", [40, 80, 200])
def test_every_view_is_drawn_as_rich_draws_it(text: str, options: dict, width: int) -> None:
    run = ToySource(Config(**options)).run(text)
    assert draw_view(fasttable.Table, run, width, None) == draw_view(rich.table.Table, run, width, None)
    assert draw_view(fasttable.Table, run, width, "truecolor") == draw_view(rich.table.Table, run, width, "truecolor")
