"""The top of a run's view: what ran (the config header, the scaling, the text's rule), the
tokens table and the predictions table. Shapes: T tokens, K predictions per position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.rule import Rule
from rich.text import Text

from attn_cli.records.about import filled
from attn_cli.records.results import Classification
from attn_cli.render.terminal.cells import ELLIPSIS, LABEL_WIDTH, VDOTS, note_text, title_text, fmt, label_text, printable, rows_note, rows_to_show
from attn_cli.render.terminal.fasttable import Table

if TYPE_CHECKING:  # importing this module must not import torch (run's option parsing uses it)

    from attn_cli.records.trace import Trace


def scaling(run: Trace) -> tuple[str, str]:
    """The softmax input as a formula of the raw scores, and the factor's value."""
    expr = run.layers[0].divisor_text
    if not expr:
        return "Q K^T", "1 (--no-scale)"
    return f"Q K^T / {expr}", f"{1.0 / run.layers[0].divisor:.6g} = 1/{expr}"


class Pairs:
    """``key value`` pairs on lines that break between pairs, never inside one."""

    def __init__(self, pairs: Sequence[tuple[str, str]], *, gap: str = "  ") -> None:
        self.pairs = pairs
        self.gap = gap

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        line = Text()
        for key, value in self.pairs:
            pair = Text.assemble((key + " ", "dim"), (value, "bold"))
            room = width - cell_len(key) - 1
            if pair.cell_len > width and room > 1:  # a long path: its end names it, never folded mid-word
                pair = Text.assemble((key + " ", "dim"), (path_end(value, room), "bold"))
            if line.cell_len and line.cell_len + len(self.gap) + pair.cell_len > width:
                yield line
                line = Text()
            if line.cell_len:
                line.append(self.gap)
            line.append_text(pair)
        yield line


def path_end(value: str, room: int) -> str:
    """``value`` cut from its start to ``room`` cells: a path keeps its last folders whole
    (``…/org/model``, as the pictures' titles do), as many as fit; a value without a ``/``,
    or whose last folder alone is too wide, keeps its last characters."""
    if cell_len(value) <= room:
        return value
    folders = value.rstrip("/").split("/")
    end = ""
    for folder in reversed(folders[1:]):
        longer = f"/{folder}{end}"
        if cell_len(longer) + 1 > room:
            break
        end = longer
    if end:
        return "…" + end
    return "…" + value[-(room - 1) :]


STACK_TEXTS = {  # --stack chooses; the decoder's inputs are the target's labels shifted right
    "encoder": "encoder self-attention (source x source)",
    "decoder": "decoder self-attention (target shifted right, causal)",
    "cross": "cross-attention (target rows x source columns)",
}


def config_header(run: Trace) -> RenderableType:
    """What ran: the rows its source wrote (``ModelInfo.about``), then what this run added (a
    pair, a cut by --truncate, a stack, generated tokens), and where the numbers come from."""
    m = run.model
    pairs = filled(m.about.header, _own(run))
    if run.pair is not None:
        pairs.append(("pair", "segment B has token type 1"))
    if run.truncated is not None:
        pairs += run.truncated.rows(pair=run.pair is not None)
    stack = run.view_stack
    if stack is not None:  # one stack of an encoder-decoder (--stack)
        pairs.append(("stack", STACK_TEXTS[stack.name]))
        if stack.cross:
            pairs.append(("source tokens", str(len(stack.key_tokens))))
    generation = run.generation(lambda text: repr(printable(text)))
    if generation is not None:
        pairs.append(("generated", generation))
    note = m.about.note
    if note is None:  # a trained model's own weights: which of them are shown
        shown = ", ".join(str(layer.layer) for layer in run.layers)
        note = (
            f"A trained model's own weights; layer{'s' if len(run.layers) > 1 else ''} {shown} of {m.layers} shown, "
            f"head{'s' if len(run.shown_heads) != 1 else ''} {described(run.shown_heads, m.heads)} (--layer, --head choose)."
        )
    return Group(Pairs(pairs), Text(note, style="dim italic"))


def _own(run: Trace) -> dict[str, str | None]:
    """The header's values for its slots: the trace's own (None: it has none)."""
    m = run.model
    return {
        "model": m.source,
        "revision": m.revision[:12] if m.revision else None,
        "architecture": m.architecture,
        "layers": str(m.layers),
        "heads": str(m.heads) + (f" ({m.kv_heads} key/value)" if m.kv_heads != m.heads else ""),
        "head_dim": str(m.head_dim),
        "d_model": str(m.d_model),
        "tokenizer": run.tokens.tokenizer,
        "tokens": str(len(run.tokens)),
        "scale factor": scaling(run)[1],
        "masked": "causal" if run.layers[0].causal else "no",
    }


def described(chosen: Sequence[int], total: int) -> str:
    """'all 12', '0-3 of 12', '2, 5 of 12'."""
    chosen = list(chosen)
    if chosen == list(range(total)):
        return f"all {total}"
    if len(chosen) > 2 and chosen == list(range(chosen[0], chosen[-1] + 1)):
        return f"{chosen[0]}-{chosen[-1]} of {total}"
    return f"{', '.join(map(str, chosen))} of {total}"


def text_rule(run: Trace, index: int | None = None, total: int = 1) -> Rule:
    where = f"text {index + 1} of {total}: " if index is not None and total > 1 else ""
    # one stack of an encoder-decoder: the source and the target, whichever the stack reads
    stack = run.view_stack
    text = run.text if stack is None or stack.texts is None else " → ".join(stack.texts)
    shown = text if len(text) <= 200 else text[:200] + ELLIPSIS
    title = Text(where + printable(shown), no_wrap=True, overflow="ellipsis")
    return Rule(title, align="left", style="dim")


def tokens_table(run: Trace) -> RenderableType:
    from attn_cli.records.tokens import visible

    tokens = run.tokens
    labels = tokens.labels  # (T,) made on each access: once here
    rows = rows_to_show(len(tokens))
    shown = {i: visible(tokens.texts[i]) for i in rows if i is not None}
    with_labels = any(text != labels[i] for i, text in shown.items())
    special = any(tokens.special)
    pair = any(tokens.type_ids)
    hidden = set(run.hiding.hidden) if run.hiding is not None else set()
    pieces = {i: tokens.partial_bytes(i) for i in shown if tokens.partial_bytes(i)}  # hex of a piece of a character
    generated = set(run.generated)
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("pos", justify="right")
    table.add_column("id", justify="right")
    table.add_column("token", no_wrap=True, overflow="ellipsis", max_width=40)
    if with_labels:
        table.add_column("label", no_wrap=True, overflow="ellipsis", max_width=40)
    if special:
        table.add_column("special")
    if pair:
        table.add_column("segment", justify="right")
    if hidden:
        table.add_column("hidden")
    if pieces:
        table.add_column("bytes")
    if generated:
        table.add_column("generated")
    for i in rows:
        if i is None:
            table.add_row(*(Text(VDOTS, style="dim") for _ in range(3 + with_labels + special + pair + bool(hidden) + bool(pieces) + bool(generated))))
            continue
        row: list[str | Text] = [str(i), str(tokens.ids[i]), Text(shown[i], style="italic" if tokens.is_special(i) else "")]
        if with_labels:
            row.append(Text(labels[i]))
        if special:
            row.append(Text("special", style="dim") if tokens.is_special(i) else "")
        if pair:
            row.append("AB"[tokens.type_ids[i]] if tokens.type_ids[i] < 2 else str(tokens.type_ids[i]))
        if hidden:
            row.append(Text("hidden", style="yellow") if i in hidden else "")
        if pieces:
            row.append(pieces.get(i, ""))
        if generated:
            row.append(Text("generated", style="cyan") if i in generated else "")
        table.add_row(*row)
    notes = _token_notes(shown, pieces, special=special, with_labels=with_labels)
    cut = rows_note(rows, len(tokens), "tokens", see_all="--format json lists every token")
    return Group(title_text("Tokens"), table, *(note_text(n) for n in notes), *([cut] if cut else []), Text(""))


def _token_notes(shown: dict[int, str], pieces: dict[int, str], *, special: bool, with_labels: bool) -> list[str]:
    """What the tokens table's marks mean, for the marks it shows."""
    notes = []
    if pieces:
        one = next((i for i, hexed in pieces.items() if len(hexed) == 2), min(pieces))  # a one-byte piece reads best
        notes.append(
            f"{shown[one]}: {'one byte' if len(pieces[one]) == 2 else 'a piece'} of a character the tokenizer split over "
            f"several tokens, not the text {shown[one]}; the bytes column has each such token's bytes in hex (JSON: tokens[].bytes)"
        )
    if special:
        notes.append("special: added by the model's tokenizer, not in the text")
    if any(mark in text for text in shown.values() for mark in "␣↵⇥␍"):
        notes.append("␣ is a space, ↵ a line break, ⇥ a tab, ␍ a carriage return")
    if with_labels:
        notes.append("a repeated token is labelled with its position: use the label with --query/--key")
    return notes


def predictions_table(run: Trace, precision: int) -> RenderableType:
    """--predict: each position's most likely next tokens (or fillers), with their probabilities."""
    p = run.predictions
    assert p is not None, "a predictions table needs a trace computed with --predict"
    if isinstance(p, Classification):
        return classification_table(run, p, precision)
    tokens = run.tokens
    rows = rows_to_show(len(tokens))
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("pos", justify="right")
    table.add_column("token", no_wrap=True, overflow="ellipsis", max_width=LABEL_WIDTH)
    for r in range(p.k):
        table.add_column(f"{r + 1}", no_wrap=True, overflow="ellipsis", max_width=LABEL_WIDTH + precision + 3)
    probs = p.probs.tolist()
    for i in rows:
        if i is None:
            table.add_row(*(Text(VDOTS, style="dim") for _ in range(2 + p.k)))
            continue
        cells = [Text.assemble((printable(p.labels[i][r]), "bold" if r == 0 else ""), f" {fmt(probs[i][r], precision)}") for r in range(p.k)]
        table.add_row(str(i), label_text(tokens.labels[i], "italic" if tokens.is_special(i) else ""), *cells)
    stack = run.view_stack
    causal = (stack is not None and stack.name in ("decoder", "cross")) or any(layer.causal for layer in run.layers)  # an encoder-decoder's decoder predicts
    what = "the next token after each position" if causal else "what the model would put at each position (a [MASK] shows it best)"
    notes = [f"{what}: the softmax of the position's logits, most likely first (run to the last layer, its final norm and the head)"]
    cut = rows_note(rows, len(tokens), "positions", see_all="--format json has every position's predictions")
    return Group(title_text("Predictions", f"  top {p.k}"), table, *(note_text(n) for n in notes), *([cut] if cut else []), Text(""))


def classification_table(run: Trace, p: Classification, precision: int) -> RenderableType:
    """--predict on a classifier: its labels, most likely first, with their probabilities and logits."""
    table = Table(box=box.SIMPLE_HEAD)
    for name, justify in (("rank", "right"), ("index", "right"), ("label", "left"), ("prob", "right"), ("logit", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, (index, label, prob, logit) in enumerate(p.ranked(), start=1):
        table.add_row(str(rank), str(index), Text(printable(label), "bold" if rank == 1 else ""), "" if prob is None else fmt(prob, precision), fmt(logit, precision))
    where = p.where if p.position is None else f"{p.where} ({run.tokens.labels[p.position]})"
    kind = "no probabilities: a regression head" if p.probs is None else "probabilities from the logits"
    notes = [f"the classification head reads {where}, after every layer; {kind}"]
    return Group(title_text("Classification", f"  top {p.k}"), table, *(note_text(n) for n in notes), Text(""))
