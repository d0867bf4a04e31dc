"""The table view of chosen query rows (--query) and of layers whose tables were not kept (a long
text): each head's statistics in one line, and each chosen query's strongest keys with the text
around them, instead of a T-wide table.

Shapes: T query rows, S keys, H heads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from attn_cli.analysis.rowstats import row_of, row_score_of, stats_of
from attn_cli.render.terminal.cells import printable
from attn_cli.render.terminal.header import config_header, text_rule

if TYPE_CHECKING:
    from attn_cli.records.layers import LayerWeights
    from attn_cli.records.summary import LayerSummary
    from attn_cli.records.tokens import Tokens
    from attn_cli.records.trace import Trace

TOP_KEYS = 5  # keys listed for each chosen query and head
AROUND = 3  # tokens of context on each side of a key


def rows_view(run: Trace, precision: int, index: int | None = None, total: int = 1) -> RenderableType:
    """Each kept layer: its heads' statistics, then each chosen query's strongest keys per head."""
    parts: list[RenderableType] = [text_rule(run, index, total), config_header(run), Text("")]
    if run.tables_omitted is not None:
        parts.append(Text(f"Not kept: {run.tables_omitted}.", style="dim italic"))
    for layer in run.layers:
        parts.append(Rule(Text(f"layer {layer.layer} of {run.model.layers}", style="bold"), align="left", characters="="))
        parts.append(head_summary(run, layer, precision))
        for query in run.queries:
            parts.append(query_keys(run, layer, query, precision))
    return Group(*parts)


def head_summary(run: Trace, layer: LayerWeights | LayerSummary, precision: int) -> RenderableType:
    """One line a head: mean entropy and effective keys, the self, previous and first-token masses,
    the sink score, and the distance bin that holds most weight."""
    from attn_cli.analysis.stats import distance_bins

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("head", "entropy", "eff. keys", "self", "prev", "first", "sink"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("peak distance", justify="left", no_wrap=True)
    bins = distance_bins(len(run.own_stack.key_tokens))

    def number(value: float | None, digits: int = min(precision, 3)) -> str:
        return "–" if value is None else f"{value:.{digits}f}"

    for h, stats in zip(run.shown_heads, stats_of(layer, run.shown_heads)):
        where = "–"
        if stats.distance_mass is not None:
            peak = max(range(len(stats.distance_mass)), key=stats.distance_mass.__getitem__)
            low, high = bins[peak]
            where = f"{low if low == high else f'{low}-{high}'}: {stats.distance_mass[peak]:.3f}"
        table.add_row(
            str(h), number(stats.mean_entropy_bits, 2), number(stats.mean_effective_tokens, 1), number(stats.self_mass),
            number(stats.previous_mass), number(stats.first_mass), number(stats.sink_score), where,
        )  # fmt: skip
    return table


def query_keys(run: Trace, layer: LayerWeights | LayerSummary, query: int, precision: int) -> RenderableType:
    """Query ``query``'s strongest keys in each shown head, each with the text around it."""
    rows, keys = run.tokens, run.own_stack.key_tokens
    table = Table(title=Text(f"query {query} {rows.labels[query]!r}: its strongest keys", style="bold"), title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)  # fmt: skip
    names = ("head", "key", "weight", *(("score",) if run.row_scores else ()), "around the key")
    for name in names:
        table.add_column(name, justify="left" if name == "around the key" else "right")
    for h in run.shown_heads:
        weights = row_of(layer, query, h)  # (S,)
        scores = row_score_of(layer, query, h) if run.row_scores else None  # (S,) raw Q K^T, or None
        top = weights.topk(min(TOP_KEYS, weights.shape[-1]))
        for rank, (weight, key) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
            score = () if scores is None else (f"{float(scores[key]):.{precision}f}",)
            table.add_row(str(h) if rank == 0 else "", str(key), f"{weight:.{precision}f}", *score, snippet(keys, key))
        table.add_section()
    return table


def snippet(tokens: Tokens, key: int) -> Text:
    """The key's token in brackets, with AROUND tokens of text on each side (``Tokens.around``)."""
    around = tokens.around(key, AROUND)
    made = Text("…" if around.low > 0 else "")
    made.append(printable(around.before))
    made.append(f"[{printable(around.own)}]", style="bold")
    made.append(printable(around.after))
    made.append("…" if around.high < len(tokens.texts) else "")
    return made
