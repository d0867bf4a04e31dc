"""`attn-cli heads` output: a table for people (the top heads of each role and a
layers x heads grid of roles), JSON and CSV for scripts. Renderers are fed a
``HeadsReport`` (the scores of ``attn_cli.analysis.headroles``) and print nothing.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.analysis.headroles import BROAD, ROLES, THRESHOLDS, HeadScores, Probe
from attn_cli.formats.export import token_dicts
from attn_cli.records.trace import Trace

if TYPE_CHECKING:
    from attn_cli.analysis.effects import Ablation

SCORES = (
    "self_mass", "previous_mass", "first_mass", "mean_entropy_bits", "special_mass", "norm_special_mass", "induction_score",
    "duplicate_score",
)  # fmt: skip
CSV_COLUMNS = ("text_index", "layer", "head", *SCORES, "role")
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


@dataclasses.dataclass(frozen=True)
class HeadsReport:
    """One text's head scores (and the probe's, when it ran)."""

    trace: Trace  # the text's trace: its tokens and model
    heads: tuple[HeadScores, ...]  # layer by layer, head by head
    probe: Probe | None
    probe_note: str | None = None  # why there is no probe (--no-probe, the words tokenizer)
    ablation: Ablation | None = None  # --ablate: each head's change in next-token loss


STACK_LINES = {
    "encoder": "stack: encoder self-attention (--stack decoder|cross for the others)",
    "decoder": "stack: decoder self-attention, causal (--stack encoder|cross for the others)",
    "cross": "stack: cross-attention, decoder inputs to source tokens: the masses are not defined (--stack encoder|decoder for the others)",
}


def heads_dict(report: HeadsReport, index: int | None = None) -> dict[str, Any]:
    """The documented JSON object of `attn-cli heads`."""
    data: dict[str, Any] = {}
    if index is not None:
        data["text_index"] = index
    heads = [h.as_dict() for h in report.heads]
    if report.ablation is not None:
        for entry, h in zip(heads, report.heads):
            entry["ablation_loss_delta"] = report.ablation.delta(h.layer, h.head)
    data.update(
        {
            "text": report.trace.text,
            **({"generated_text": report.trace.generated_text} if report.trace.prompt_length is not None else {}),
            "heads": heads,
            "probe": None if report.probe is None else report.probe.as_dict(),
            "probe_note": report.probe_note,
            "tokens": token_dicts(report.trace.tokens, report.trace.hiding.hidden if report.trace.hiding else (), report.trace.prompt_length),
            "model": report.trace.model.as_dict(),
        }
    )
    if report.trace.stack_name is not None:  # an encoder-decoder: the stack scored, and cross-attention's source
        data["stack"] = report.trace.stack_name
        if report.trace.key_tokens is not None:
            data["source"] = report.trace.key_text
            data["source_tokens"] = token_dicts(report.trace.key_tokens)
    if report.ablation is not None:
        data["ablation"] = {"method": report.ablation.method, "clean_loss": report.ablation.clean_loss}
    return data


def to_json(report: HeadsReport, index: int | None = None) -> str:
    return json.dumps(heads_dict(report, index), ensure_ascii=False)


def to_csv(report: HeadsReport, *, header: bool, index: int = 0) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    ablated = report.ablation
    if header:
        writer.writerow((*CSV_COLUMNS, *(("ablation_loss_delta",) if ablated else ())))
    for h in report.heads:
        row = h.as_dict()
        extra = [repr(ablated.delta(h.layer, h.head))] if ablated else []
        writer.writerow([index, h.layer, h.head, *("" if row[s] is None else repr(row[s]) for s in SCORES), row["role"], *extra])
    return out.getvalue()


def ablation_figure(report: HeadsReport, *, dpi: float = 150) -> Any:
    """--ablate -o NAME.png: the layers x heads grid of loss deltas on RdBu_r centred on 0
    (red: the loss rises without the head, it matters)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from attn_cli.render.heatmap import check_pixels, colour_map

    ablation = report.ablation
    assert ablation is not None, "an ablation picture needs heads --ablate"
    deltas = np.array(ablation.deltas, dtype=float)  # (L, H)
    layers, heads = deltas.shape
    extent = float(np.abs(deltas).max()) or 1.0
    size = (max(6.0, min(18.0, 2.5 + 0.45 * heads)), max(3.5, min(18.0, 2.0 + 0.4 * layers)))
    check_pixels(size, dpi)
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    image = ax.imshow(deltas, cmap=colour_map("RdBu_r"), norm=Normalize(-extent, extent), aspect="auto", interpolation="nearest")
    image.set_label("ablation_loss_delta")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    if layers * heads <= 400:
        for l in range(layers):
            for h in range(heads):
                ax.text(h, l, f"{deltas[l, h]:+.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(deltas[l, h]) > 0.6 * extent else "black")  # fmt: skip
    fig.colorbar(image, ax=ax, shrink=0.9).set_label("loss change (nats)")
    text = " ".join(report.trace.text.split())
    text = text if len(text) <= 50 else text[:49] + "…"
    from attn_cli.render.titles import fit_title

    lines = [
        [f"Head ablation ({ablation.method}): next-token loss change on “{text}”"],
        [report.trace.model.name, f"clean loss {ablation.clean_loss:.3f} nats", "red: the loss rises without the head"],
    ]
    fig.suptitle(fit_title(lines, (size[0] - 0.2) * 72, 10), fontsize=10, parse_math=False)
    return fig


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
    """The table for people: a header, the top heads of each role, the grid of roles."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    trace, heads = report.trace, report.heads
    model = trace.model
    title = Text()
    if total > 1:
        title.append(f"text {index + 1} of {total}: ", style="bold")
    shown = trace.text if len(trace.text) <= 70 else trace.text[:67] + "…"
    title.append(f"{shown!r}", style="bold")
    title.append(f"  {model.name}: {model.layers} layer{'s' if model.layers != 1 else ''} × {model.heads} head{'s' if model.heads != 1 else ''}, T = {len(trace.tokens)}")
    parts: list[Any] = [title]
    if trace.stack_name is not None:  # one stack of an encoder-decoder (--stack)
        parts.append(Text(STACK_LINES[trace.stack_name], style="dim"))
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
    parts.append(table)

    # The title on a line of its own: a table as narrow as one head's would wrap it word by word.
    parts.append(Text("Roles, layers x heads", style="bold"))
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    n_heads = max(h.head for h in heads) + 1
    grid.add_column("layer", justify="right")
    for h in range(n_heads):
        grid.add_column(str(h), justify="center")
    for layer in sorted({h.layer for h in heads}):
        row = {h.head: h for h in heads if h.layer == layer}
        cells = [Text(LETTERS[row[h].role], style=COLOURS[row[h].role]) if h in row else Text("") for h in range(n_heads)]
        grid.add_row(str(layer), *cells)
    parts.append(grid)
    parts.append(Text("  ".join(f"{LETTERS[r]} {r}" for r in ROLES), style="dim"))
    parts.append(Text(thresholds_text(), style="dim"))
    if report.ablation is not None:
        ablation = report.ablation
        ranked = sorted(heads, key=lambda h: -ablation.delta(h.layer, h.head))[:top]
        parts.append(Text(""))
        parts.append(Text(f"Heads that matter ({ablation.method} ablation)", style="bold"))  # a title line: the table is narrow
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("head")
        table.add_column("loss change (nats)", justify="right")
        for h in ranked:
            table.add_row(f"L{h.layer}H{h.head}", f"{ablation.delta(h.layer, h.head):+.{precision}f}")
        parts.append(table)
        parts.append(Text(
            f"the mean next-token loss of the text is {ablation.clean_loss:.{precision}f} nats; each row is how much it "
            f"rises when that head's output (its slice of W_o's input) is set to {'zero' if ablation.method == 'zero' else 'its mean over the text'}",
            style="dim",
        ))  # fmt: skip
    sinks = sorted((h for h in heads if h.special_mass is not None), key=lambda h: -(h.special_mass or 0.0))[:top]
    if sinks and any(h.norm_special_mass is not None for h in sinks):
        parts.append(Text(""))
        table = Table(box=box.SIMPLE_HEAD, title="Special tokens: weight vs what moves", title_justify="left", title_style="bold", pad_edge=False)
        table.add_column("head")
        table.add_column("special_mass", justify="right")
        table.add_column("norm_special_mass", justify="right")
        for h in sinks:
            norm = "—" if h.norm_special_mass is None else f.format(h.norm_special_mass)
            table.add_row(f"L{h.layer}H{h.head}", f.format(h.special_mass), norm)
        parts.append(table)
        parts.append(Text(
            "the heads with the most weight on special tokens; norm_special_mass is the share of the value-weighted "
            "norms ||a f(x)|| on them: much lower means the weight parks there and moves little (a sink)",
            style="dim",
        ))  # fmt: skip
    aligned = [h for h in heads if h.alignment is not None and h.layer == heads[-1].layer]
    if aligned:  # cross-attention: each decoder input's most attended source token, in the last layer scored
        parts.append(Text(""))
        parts.append(Text(f"Alignment, layer {aligned[0].layer}: each decoder input's most attended source token", style="bold"))
        align = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        align.add_column("decoder input", no_wrap=True)
        for h in aligned:
            align.add_column(f"H{h.head}", no_wrap=True)
        source = trace.columns.labels
        for i, label in enumerate(trace.tokens.labels):
            align.add_row(Text(label), *(Text(source[h.alignment[i]]) for h in aligned))
        parts.append(align)
    return Group(*parts)
