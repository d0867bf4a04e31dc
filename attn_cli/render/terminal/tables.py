"""The human view of a run: rich renderables, printed once by the command.

Token text always goes through ``Text`` (never markup): a token like ``[b]`` is
text, not a style. Tables decide how many columns to draw when they are
rendered, from the width they are given: a table that does not fit shows its
first columns, a ``…`` column and its last column, and says how to see the rest,
instead of wrapping. A table of more than ``ROW_LIMIT + 1`` rows (a long text)
shows its first ``ROW_LIMIT`` rows, a ``⋮`` row and its last row, and says so.
Only the cells drawn are ever made: a 10,000-token text's weights are 10^8
numbers, of which a terminal shows a few hundred.

Shapes: T tokens, D d_model, H heads, Dk/Dv per-head query-key/value sizes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.text import Text

from attn_cli.records.hiding import shown
from attn_cli.render.terminal.cells import (
    ANALYSES,
    ELLIPSIS,
    LABEL_WIDTH,
    SEE_ALL,
    SHOW_CHOICES,
    TOP_KEYS,
    VDOTS,
    View,
    note_text,
    title_text,
    bar,
    fmt,
    precise,
    rows_note,
    rows_to_show,
)
from attn_cli.render.terminal.fasttable import Table
from attn_cli.render.terminal.header import Pairs, config_header, predictions_table, text_rule, tokens_table
from attn_cli.render.terminal.matrices import (
    head_suffix,
    context_table,
    layer_map_table,
    embeddings_table,
    norms_table,
    output_table,
    qkv_table,
    rollout_table,
    scaled_score,
    scaled_table,
    scores_table,
    weights_table,
)

if TYPE_CHECKING:  # importing this module must not import torch (run's option parsing uses it)
    from attn_cli.analysis.stats import HeadStats
    from attn_cli.records.trace import Trace


# -- statistics --------------------------------------------------------------


def _mass(value: float | None, precision: int) -> str:
    return "-" if value is None else fmt(value, precision)


def stats_table(run: Trace, stats: HeadStats, precision: int, *, explain: bool = True) -> RenderableType:
    labels = run.tokens.labels
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("query", no_wrap=True, overflow="ellipsis", max_width=LABEL_WIDTH)
    table.add_column("most attended", no_wrap=True, overflow="ellipsis", max_width=LABEL_WIDTH)
    table.add_column("weight", justify="right")
    table.add_column("entropy (bits)", justify="right")
    table.add_column("effective tokens", justify="right")
    table.add_column("of keys", justify="right")
    rows, key_labels = rows_to_show(len(labels)), run.own_stack.key_tokens.labels
    for i in rows:
        if i is None:
            table.add_row(*(Text(VDOTS, style="dim") for _ in range(6)))
            continue
        k = stats.row(i)
        table.add_row(
            Text(labels[i]),
            Text(key_labels[stats.most_attended[k]]),
            fmt(stats.top_weight[k], precision),
            fmt(stats.entropy_bits[k], precision),
            fmt(stats.effective_tokens[k], precision),
            str(stats.visible_keys[k]),
        )
    title = title_text("Statistics", f"  of the attention weights{head_suffix(run, stats.head)}")
    cut = rows_note(rows, len(labels), "queries", "--query N shows one query's entropy")
    if stats.self_mass is None:  # cross-attention: no query is among the keys; the most attended source token aligns
        meaning = note_text(
            "entropy 0: all weight on one key; effective tokens = 2^entropy (n for an even spread over n keys). "
            "Most attended: the source token each decoder input aligns with in this head."
        )
        return Group(title, table, *([cut] if cut else []), *([meaning] if explain else []), Text(""))
    masses = Pairs(
        [
            ("self (diagonal) mass", _mass(stats.self_mass, precision)),
            ("previous-token mass", _mass(stats.previous_mass, precision)),
            ("first-token mass", _mass(stats.first_mass, precision)),
        ],
        gap="   ",
    )
    meaning = note_text(
        "entropy 0: all weight on one key; effective tokens = 2^entropy (n for an even spread over n keys). "
        "Masses: the mean weight a query puts on itself, on the token before it, on the first token "
        "(the last two over queries 1..T-1)."
    )
    return Group(title, table, *([cut] if cut else []), masses, *([meaning] if explain else []), Text(""))


def heads_compared(run: Trace, stats: Sequence[HeadStats], precision: int) -> RenderableType:
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("head", "self", "previous", "first", "entropy (bits)", "effective tokens"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in stats:
        table.add_row(
            str(s.head),
            _mass(s.self_mass, precision),
            _mass(s.previous_mass, precision),
            _mass(s.first_mass, precision),
            fmt(s.mean_entropy_bits, precision),
            fmt(s.mean_effective_tokens, precision),
        )
    caption = note_text(
        "self, previous, first: the head's mass on the query itself, the token before it, the first token; "
        "entropy and effective tokens: means over the head's query rows"
    )
    return Group(title_text("Heads compared", "  one row per head, no averaging across heads"), table, caption, Text(""))


# -- one query, one key --------------------------------------------------------


def query_view(run: Trace, head: int, query: int, stats: HeadStats, precision: int) -> RenderableType:
    keys = run.own_stack.key_tokens
    labels, columns = run.tokens.labels, keys.labels
    row = run.layers[0].weights[head][query].tolist()  # (T,)
    visible = _unmasked(run, query=query) if run.layers[0].causal else range(len(row))
    order = sorted(visible, key=lambda j: -row[j])  # stable: equal weights keep position order
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("rank", justify="right")
    table.add_column("pos", justify="right")
    table.add_column("key", no_wrap=True, overflow="ellipsis", max_width=LABEL_WIDTH)
    table.add_column("weight", justify="right")
    table.add_column("", no_wrap=True)
    for rank, j in enumerate(order[:TOP_KEYS], start=1):
        table.add_row(str(rank), str(keys.position(j)), Text(columns[j]), fmt(row[j], precision), Text(bar(row[j]), style="cyan"))
    title = Text.assemble(
        ("Query ", "bold"), (labels[query], "bold"), (f" (position {run.tokens.position(query)})", "bold"),
        f": what it attends to, most first{head_suffix(run, head)}",
        no_wrap=True, overflow="ellipsis",
    )
    parts: list[RenderableType] = [title, table]
    if len(order) > TOP_KEYS:
        rest = math.fsum(row[j] for j in order[TOP_KEYS:])
        parts.append(note_text(f"{ELLIPSIS} {len(order) - TOP_KEYS} more keys, {fmt(rest, precision)} of the weight together; {SEE_ALL}"))
    if len(order) < len(row):
        after = f"key {query + 1} is" if query + 2 == len(row) else f"keys {query + 1}..{len(row) - 1} are"
        parts.append(note_text(f"{after} after the query: masked, weight 0"))
    k = stats.row(query)
    parts.append(
        note_text(
            f"entropy {fmt(stats.entropy_bits[k], precision)} bits, "
            f"{fmt(stats.effective_tokens[k], precision)} effective tokens of {stats.visible_keys[k]}"
        )
    )
    parts.append(Text(""))
    return Group(*parts)


def key_view(run: Trace, head: int, key: int, precision: int) -> RenderableType:
    labels, columns = run.tokens.labels, run.own_stack.key_tokens.labels
    column = run.layers[0].weights[head][:, key].tolist()  # (T,)
    queries = _unmasked(run, key=key) if run.layers[0].causal else range(len(column))
    best = max(queries, key=lambda i: column[i])
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("pos", justify="right")
    table.add_column("query", no_wrap=True, overflow="ellipsis", max_width=LABEL_WIDTH)
    table.add_column("weight", justify="right")
    table.add_column("", no_wrap=True)
    chosen = rows_to_show(len(queries))
    rows = [None if r is None else queries[r] for r in chosen]
    for i in rows:
        if i is None:
            table.add_row(*(Text(VDOTS, style="dim") for _ in range(4)))
            continue
        style = "bold" if i == best else ""
        table.add_row(str(run.tokens.position(i)), Text(labels[i], style=style), Text(fmt(column[i], precision), style=style), Text(bar(column[i]), style="magenta"))
    title = Text.assemble(
        ("Key ", "bold"), (columns[key], "bold"), (f" (position {run.own_stack.key_tokens.position(key)})", "bold"),
        f": who attends to it, in query order{head_suffix(run, head)}",
        no_wrap=True, overflow="ellipsis",
    )
    parts: list[RenderableType] = [title, table]
    if run.layers[0].causal and key > 0:
        before = "query 0 comes" if key == 1 else f"queries 0..{key - 1} come"
        parts.append(note_text(f"{before} before the key: masked, weight 0"))
    cut = rows_note(chosen, len(queries), "queries", start=queries[0])
    if cut is not None:
        parts.append(cut)
    mean = math.fsum(column[i] for i in queries) / len(queries)
    largest = "largest in bold"
    if best not in rows:
        largest = f"the largest, {fmt(column[best], precision)}, is from query {best} ({labels[best]}), not shown"
    parts.append(note_text(f"mean weight from the queries that can see it: {fmt(mean, precision)}; {largest}"))
    parts.append(Text(""))
    return Group(*parts)


def _unmasked(run: Trace, *, query: int | None = None, key: int | None = None) -> list[int]:
    """The keys ``query`` may see, or the queries that may see ``key``, in order."""
    mask = run.layers[0].mask
    assert mask is not None
    line = mask[query] if query is not None else mask[:, key]  # (T,)
    return (~line).nonzero().flatten().tolist()


def cell_line(run: Trace, head: int, query: int, key: int, precision: int) -> Text:
    labels = run.tokens.labels
    result = run.layers[0]
    weight = result.weights[head][query][key].item()
    raw = result.scores[head][query][key].item()
    scaled = scaled_score(run, head, query, key)
    return Text.assemble(
        (labels[query], "bold"), " -> ", (run.own_stack.key_tokens.labels[key], "bold"), f"{head_suffix(run, head)}: weight ",
        (fmt(weight, precision), "bold"),
        f", raw score {fmt(raw, precision)}, scaled score {'-inf (masked)' if scaled == -math.inf else fmt(scaled, precision)}",
    )


# -- the whole view ------------------------------------------------------------


def human_view(run: Trace, view: View = View(), index: int | None = None, total: int = 1) -> RenderableType:
    """Everything ``view`` asks for, for one run, as one renderable: each kept layer in turn."""
    parts: list[RenderableType] = [text_rule(run, index, total), config_header(run), Text("")]
    if "tokens" in view.show:
        parts.append(tokens_table(run))
    full, run = run, shown(run)  # every table after the tokens: without the hidden tokens
    own = full.own_stack
    if any(h is not None and h.active for h in (own.hiding, own.key_hiding)):
        parts.append(hidden_note(full))
    for layer in run.layers:
        if len(run.layers) > 1:
            parts.append(Rule(Text(f"layer {layer.layer} of {run.model.layers}", style="bold"), align="left", characters="="))
        parts.extend(_layer_view(dataclasses.replace(run, layers=(layer,)), view))
    if "rollout" in view.show and run.rollout is not None:
        parts.append(precise(partial(rollout_table, run), view))
    if "flow" in view.show and run.flow is not None:
        parts.append(precise(partial(rollout_table, run, name="flow"), view))
    for name in run.maps:  # ALTI's, value zeroing's rollout: asked for with --what
        parts.append(precise(partial(rollout_table, run, name=name), view))
    if full.predictions is not None:  # every position's, whatever --hide-tokens leaves out of the attention
        parts.append(predictions_table(full, view.precision))
    return Group(*parts)


def _layer_view(run: Trace, view: View) -> list[RenderableType]:
    """One layer's tables (``run`` holds just that layer)."""
    from attn_cli.analysis.stats import attention_stats

    p = view.precision
    show = view.show
    heads = view.heads if view.heads is not None else run.shown_heads
    stats: dict[int, HeadStats] = {}
    if "stats" in show or view.query is not None:  # only for the heads drawn
        # Heads compared means every row's entropy: O(T^2) a head; else only the rows drawn
        compared = "stats" in show and len(heads) > 1
        shown = [i for i in rows_to_show(len(run.tokens)) if i is not None] if "stats" in show else []
        rows = None if compared else sorted({*shown, *([view.query] if view.query is not None else [])})
        for h in heads:
            weights = run.layers[0].weights[h : h + 1]  # (1, T, T)
            if run.renormalized:  # a renormalized row with no weight left (NaN) counts as all zeros
                weights = weights.nan_to_num(0.0)
            (one,) = attention_stats(weights, mask=run.layers[0].mask, rows=rows, cross=run.layers[0].cross)
            stats[h] = dataclasses.replace(one, head=h)
    parts: list[RenderableType] = []
    if "embeddings" in show:
        parts.append(precise(partial(embeddings_table, run), view))
    multi = run.layers[0].n_heads > 1
    norms = "norms" in show and run.layers[0].norms is not None
    per_head = {"qkv", "scores", "scaled", "weights", "stats", "context"} & show or norms or view.query is not None or view.key is not None
    for h in heads:
        if multi and len(heads) > 1 and per_head:
            parts.append(Rule(Text(f"head {h} of {run.layers[0].n_heads}", style="bold"), align="left"))
        if "qkv" in show:
            parts.extend(precise(partial(qkv_table, run, h, letter), view) for letter in "qkv")
        if "scores" in show:
            parts.append(precise(partial(scores_table, run, h), view))
        if "scaled" in show:
            parts.append(precise(partial(scaled_table, run, h), view))
        if "weights" in show:
            parts.append(precise(partial(weights_table, run, h), view))
        if norms:
            parts.append(precise(partial(norms_table, run, h), view))
        if "stats" in show:
            parts.append(stats_table(run, stats[h], p, explain=h == heads[0] and run.layers[0] is run.layers[0]))
        if view.query is not None:
            parts.append(query_view(run, h, view.query, stats[h], p))
        if view.key is not None:
            parts.append(key_view(run, h, view.key, p))
        if view.query is not None and view.key is not None:
            parts.extend([cell_line(run, h, view.query, view.key, p), Text("")])
        if "context" in show:
            parts.append(precise(partial(context_table, run, h), view))
    if "stats" in show and len(heads) > 1:
        parts.append(heads_compared(run, [stats[h] for h in heads], p))
    if norms and run.layers[0].n_heads > 1:
        parts.append(precise(partial(norms_table, run, None), view))
    parts.extend(precise(partial(layer_map_table, run, name), view) for name in run.layers[0].maps)  # --what value-zeroing, alti
    # by default only when it differs from the one head's context: the chosen heads' slice of the concat is that
    if "output" in show and (view.explicit or len(heads) > 1 or run.model.out_proj):
        parts.append(precise(partial(output_table, run, heads=heads), view))
    return parts


def hidden_note(run: Trace) -> Text:
    """The line before the layers' tables when --hide-tokens left tokens out of them."""
    hiding, stack = run.hiding, run.own_stack
    if stack.cross:  # cross-attention: the decoder's inputs (rows) and the source's tokens (columns)
        named = lambda h, what: f"{what} {', '.join(h.labels)} (position{'s' if len(h.hidden) > 1 else ''} {', '.join(map(str, h.hidden))})"  # noqa: E731
        key_hiding = stack.key_hiding
        cut = [named(h, what) for h, what in ((hiding, "target rows"), (key_hiding, "source columns")) if h is not None and h.active]
        columns = key_hiding.kept if key_hiding is not None and key_hiding.active else range(len(stack.key_tokens))
        return Text.assemble(
            ("Hidden: ", "bold yellow"), ("; ".join(cut), "bold"),
            f" are left out of every table below; each query's weights are divided by their sum over the {len(columns)} "
            f"source tokens shown (--hide-tokens). Statistics are of those renormalized weights; --format json keeps the model's own.",
            "\n",
        )  # fmt: skip
    assert hiding is not None
    where = ", ".join(map(str, hiding.hidden))
    return Text.assemble(
        ("Hidden: ", "bold yellow"),
        (", ".join(hiding.labels), "bold"),
        f" (position{'s' if len(hiding.hidden) > 1 else ''} {where}) are left out of every table below, rows and columns; "
        f"each query's weights are divided by their sum over the {len(hiding.kept)} keys shown (--hide-tokens). "
        f"Statistics are of those renormalized weights; --format json keeps the model's own.",
        "\n",
    )


def more_hint(view: View) -> Text:
    """One line saying what else the view can show (printed once after a default view)."""
    hidden = [name for name in SHOW_CHOICES if name not in view.show and name not in ANALYSES]
    return note_text(
        f"More tables: --show {','.join(hidden)} (or --show all). Follow one token with --query TOKEN or --key TOKEN. "
        f"Beyond the weights: --rollout, --norms. "
        f"Every number at full precision: --format json or --format csv."
    )


def parse_show(values: Iterable[str] | None) -> frozenset[str] | None:
    """``--show`` values (comma-separated and/or repeated) -> names; None when not given.
    Raises ValueError naming the unknown ones."""
    if not values:
        return None
    names: set[str] = set()
    unknown = []
    for value in values:
        for name in value.split(","):
            name = name.strip().lower()
            if not name:
                continue
            if name == "all":  # every table but the flow's: its max-flow problems are asked for by name
                names.update(choice for choice in SHOW_CHOICES if choice != "flow")
            elif name in SHOW_CHOICES:
                names.add(name)
            else:
                unknown.append(name)
    if unknown:
        raise ValueError(f"unknown table {', '.join(map(repr, unknown))}: choose from {', '.join(SHOW_CHOICES)} or all")
    if not names:
        raise ValueError(f"name at least one table: {', '.join(SHOW_CHOICES)} or all")
    return frozenset(names)
