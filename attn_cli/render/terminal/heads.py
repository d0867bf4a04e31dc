"""`attn-cli heads` for people: the top heads of each role and a layers x heads grid of
roles. Fed a ``HeadsReport`` (``attn_cli.analysis.headroles``); prints nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from attn_cli.analysis.headroles import BROAD, ROLES, THRESHOLDS, HeadScores, HeadsReport

ROLE_SCORE = {
    "previous": "previous_mass",
    "first": "first_mass",
    "self": "self_mass",
    "duplicate": "duplicate_score",
    "induction": "induction_score",
    "broad": "spread",
}
LETTERS = {"previous": "P", "first": "F", "self": "S", "duplicate": "D", "induction": "I", "broad": "B", "mixed": "·"}
COLOURS = {"previous": "cyan", "first": "yellow", "self": "magenta", "duplicate": "blue", "induction": "green", "broad": "dim", "mixed": "dim"}


STACK_LINES = {
    "encoder": "stack: encoder self-attention (--stack decoder|cross for the others)",
    "decoder": "stack: decoder self-attention, causal (--stack encoder|cross for the others)",
    "cross": "stack: cross-attention, decoder inputs to source tokens: the masses are not defined (--stack encoder|decoder for the others)",
}


def top_heads(heads: Sequence[HeadScores], role: str, n: int) -> list[HeadScores]:
    """The ``n`` heads with ``role``, highest score first."""
    key = ROLE_SCORE[role]
    members = [h for h in heads if h.role == role]
    return sorted(members, key=lambda h: -(getattr(h, key) or 0.0))[:n]


def thresholds_text() -> str:
    focused = ", ".join(f"{ROLE_SCORE[r]} ≥ {t:g}" for r, t in THRESHOLDS.items())
    return (
        f"role: the largest of {focused} wins; else broad when the mean entropy is at least {BROAD:g} of the most "
        "the visible keys allow; else mixed."
    )


def heads_view(report: HeadsReport, *, top: int = 5, precision: int = 3, index: int = 0, total: int = 1) -> Any:
    """The table for people: a header, the top heads of each role, the grid of roles; what
    --ablate and --norms add; cross-attention's alignment."""
    heads = report.heads
    parts: list[Any] = _header(report, index, total)
    parts.append(_top_heads_table(heads, top, precision))
    parts += _roles_grid(heads)
    if report.ablation is not None:
        parts += _ablation_part(report, top, precision)
    parts += _sinks_part(heads, top, precision)
    parts += _alignment_part(report)
    return Group(*parts)


def _header(report: HeadsReport, index: int, total: int) -> list[Any]:
    trace = report.trace
    model = trace.model
    title = Text()
    if total > 1:
        title.append(f"text {index + 1} of {total}: ", style="bold")
    shown = trace.text if len(trace.text) <= 70 else trace.text[:67] + "…"
    title.append(f"{shown!r}", style="bold")
    title.append(f"  {model.name}: {model.layers} layer{'s' if model.layers != 1 else ''} × {model.heads} head{'s' if model.heads != 1 else ''}, T = {len(trace.tokens)}")
    parts: list[Any] = [title]
    stack = trace.view_stack
    if stack is not None:  # one stack of an encoder-decoder (--stack)
        parts.append(Text(STACK_LINES[stack.name], style="dim"))
    hiding = trace.hiding
    if hiding is not None and hiding.active:
        parts.append(
            Text(
                f"--hide-tokens: {', '.join(hiding.labels)} flagged hidden (tokens[] in JSON); the scores use the model's own "
                "weights, as their definitions say, so hiding does not change them (special_mass is the share on special tokens)",
                style="yellow",
            )
        )
    if report.probe is not None:
        p = report.probe
        parts.append(
            Text(
                f"probe: {p.start} leading special token{'s' if p.start != 1 else ''}, then {p.repeat_length} random token ids "
                f"twice (induction and duplicate scores)",
                style="dim",
            )
        )
    elif report.probe_note:
        parts.append(Text(f"no probe: {report.probe_note}; induction and duplicate scores are not computed", style="dim"))
    return parts


def _top_heads_table(heads: Sequence[HeadScores], top: int, precision: int) -> Table:
    f = f"{{:.{precision}f}}"
    table = Table(box=box.SIMPLE_HEAD, title="Top heads per role", title_justify="left", title_style="bold", pad_edge=False)
    table.add_column("role", no_wrap=True)
    table.add_column("heads", justify="right")
    table.add_column(f"strongest, up to {top} (L layer H head: score)")
    for role in ROLES:
        members = [h for h in heads if h.role == role]
        if not members:
            continue
        if role == "mixed":
            listed = Text("no single pattern", style="dim")
        else:
            key = ROLE_SCORE[role]
            listed = Text("  ".join(f"L{h.layer}H{h.head} {f.format(getattr(h, key))}" for h in top_heads(heads, role, top)))
        table.add_row(Text(role, style=COLOURS[role]), str(len(members)), listed)
    return table


def _roles_grid(heads: Sequence[HeadScores]) -> list[Any]:
    # The title on a line of its own: a table as narrow as one head's would wrap it word by word.
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    n_heads = max(h.head for h in heads) + 1
    grid.add_column("layer", justify="right")
    for h in range(n_heads):
        grid.add_column(str(h), justify="center")
    for layer in sorted({h.layer for h in heads}):
        row = {h.head: h for h in heads if h.layer == layer}
        cells = [Text(LETTERS[row[h].role], style=COLOURS[row[h].role]) if h in row else Text("") for h in range(n_heads)]
        grid.add_row(str(layer), *cells)
    return [
        Text("Roles, layers x heads", style="bold"), grid, Text("  ".join(f"{LETTERS[r]} {r}" for r in ROLES), style="dim"),
        Text(thresholds_text(), style="dim"),
    ]  # fmt: skip


def _ablation_part(report: HeadsReport, top: int, precision: int) -> list[Any]:
    ablation = report.ablation
    assert ablation is not None
    ranked = sorted(report.heads, key=lambda h: -ablation.delta(h.layer, h.head))[:top]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("head")
    table.add_column("loss change (nats)", justify="right")
    for h in ranked:
        table.add_row(f"L{h.layer}H{h.head}", f"{ablation.delta(h.layer, h.head):+.{precision}f}")
    return [
        Text(""),
        Text(f"Heads that matter ({ablation.method} ablation)", style="bold"),  # a title line: the table is narrow
        table,
        Text(
            f"the mean next-token loss of the text is {ablation.clean_loss:.{precision}f} nats; each row is how much it "
            f"rises when that head's output (its slice of W_o's input) is set to {'zero' if ablation.method == 'zero' else 'its mean over the text'}",
            style="dim",
        ),
    ]  # fmt: skip


def _sinks_part(heads: Sequence[HeadScores], top: int, precision: int) -> list[Any]:
    f = f"{{:.{precision}f}}"
    sinks = sorted((h for h in heads if h.special_mass is not None), key=lambda h: -(h.special_mass or 0.0))[:top]
    if not sinks or all(h.norm_special_mass is None and h.sink_score is None for h in sinks):
        return []
    table = Table(box=box.SIMPLE_HEAD, title="Special tokens: weight vs what moves", title_justify="left", title_style="bold", pad_edge=False)
    table.add_column("head")
    table.add_column("special_mass", justify="right")
    table.add_column("norm_special_mass", justify="right")
    table.add_column("sink_score", justify="right")
    for h in sinks:
        norm = "—" if h.norm_special_mass is None else f.format(h.norm_special_mass)
        sink = "—" if h.sink_score is None else f.format(h.sink_score)
        table.add_row(f"L{h.layer}H{h.head}", f.format(h.special_mass), norm, sink)
    return [
        Text(""),
        table,
        Text(
            "the heads with the most weight on special tokens; norm_special_mass is the share of the value-weighted "
            "norms ||a f(x)|| on them: much lower means the weight parks there and moves little (a sink; — where the "
            "tables were not kept); sink_score is the first token's mean weight over the rows that see it (> 0.3: a sink)",
            style="dim",
        ),
    ]  # fmt: skip


def _alignment_part(report: HeadsReport) -> list[Any]:
    """Cross-attention: each decoder input's most attended source token, in the last layer scored."""
    trace, heads = report.trace, report.heads
    aligned = [h for h in heads if h.alignment is not None and h.layer == heads[-1].layer]
    if not aligned:
        return []
    align = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    align.add_column("decoder input", no_wrap=True)
    for h in aligned:
        align.add_column(f"H{h.head}", no_wrap=True)
    source = trace.own_stack.key_tokens.labels
    for i, label in enumerate(trace.tokens.labels):
        align.add_row(Text(label), *(Text(source[h.alignment[i]]) for h in aligned))
    return [Text(""), Text(f"Alignment, layer {aligned[0].layer}: each decoder input's most attended source token", style="bold"), align]
