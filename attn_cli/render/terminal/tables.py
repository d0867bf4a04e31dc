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
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.rule import Rule
from rich.style import Style
from rich.text import Text

from attn_cli.records.hiding import hidden_text
from attn_cli.render.terminal.fasttable import Table
from attn_cli.render.terminal.fit import fit_columns, spans
from attn_cli.records.hiding import shown

if TYPE_CHECKING:  # importing this module must not import torch (run's option parsing uses it)
    import torch

    from attn_cli.analysis.stats import HeadStats
    from attn_cli.records.trace import Trace

SHOW_CHOICES = ("tokens", "embeddings", "qkv", "scores", "scaled", "weights", "context", "output", "stats", "norms", "rollout")
ANALYSES = ("norms", "rollout")  # tables of what --norms and --rollout compute (--show norms computes them too)
# "output" in the default is drawn only when it differs from the one head's context.
DEFAULT_SHOW = frozenset({"tokens", "weights", "stats", "output"})
FOCUSED_SHOW = frozenset({"tokens"})  # the default when --query or --key is given
LABEL_WIDTH = 20  # widest token label drawn in a row or column header
BAR_WIDTH = 24  # characters of a full (weight 1) bar
TOP_KEYS = 50  # --query lists at most this many keys
ELLIPSIS = "…"
VDOTS = "⋮"
ROW_LIMIT = 40  # a longer table shows its first ROW_LIMIT rows, a ⋮ row and its last row
SEE_ALL = "--format csv (or -o FILE.csv) has every number"
ROW_HINT = "--query N shows one row in full"

# viridis, from low to high: readable on dark and light terminals alike
_RAMP = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
# 16-colour terminals: the nearest of their colours to viridis is one grey for every weight
# under 0.35, so they get viridis' order in colours of their own, one per sixth of [0, 1]
# (background, text on it)
_RAMP_16 = (
    ("magenta", "white"), ("blue", "white"), ("cyan", "black"),
    ("green", "black"), ("bright_green", "black"), ("bright_yellow", "black"),
)


@dataclasses.dataclass(frozen=True)
class View:
    """What the human view shows."""

    show: frozenset[str] = DEFAULT_SHOW
    explicit: bool = False  # --show was given: draw "output" even for one head
    heads: tuple[int, ...] | None = None  # None: every head
    precision: int = 4
    query: int | None = None  # a resolved position among the tokens shown (--hide-tokens leaves some out)
    key: int | None = None  # a resolved position among the tokens shown


# -- numbers and cells ------------------------------------------------------


def fmt(value: float, precision: int) -> str:
    """``value`` to ``precision`` digits, without the sign of a negative zero."""
    text = f"{value:.{precision}f}"
    if text.startswith("-") and not text.strip("-0."):
        text = text[1:]
    return text


def weight_style(weight: float, color_system: str | None = "truecolor") -> Style:
    """Background from the viridis ramp by value in [0, 1], text readable on it, in the
    colours ``color_system`` (rich's name: truecolor, 256, standard, windows) can show."""
    if color_system in ("standard", "windows"):
        background, text = _RAMP_16[min(int(min(max(weight, 0.0), 1.0) * len(_RAMP_16)), len(_RAMP_16) - 1)]
        return Style(bgcolor=background, color=text)
    # 256 colours: rich's nearest colour to each viridis step is a different one
    t = min(max(weight, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(t), len(_RAMP) - 2)
    f = t - i
    rgb = tuple(round(a + (b - a) * f) for a, b in zip(_RAMP[i], _RAMP[i + 1]))
    return Style(bgcolor=Color.from_rgb(*rgb), color="black" if weight >= 0.55 else "white")


class WeightCell(Text):
    """A weight's text, coloured when it is drawn: only then is the terminal's colour system known."""

    def __init__(self, text: str, weight: float, *, best: bool = False) -> None:
        super().__init__(text, style=Style(bold=best, underline=best))
        self.weight = weight

    def drawn(self, console: Console) -> Text:
        """The text as it is drawn on ``console``: its background from the weight."""
        drawn = self.copy()
        drawn.style = weight_style(self.weight, console.color_system) + self.style
        return drawn

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from Text.__rich_console__(self.drawn(console), console, options)


def bar(weight: float, width: int = BAR_WIDTH) -> str:
    """A horizontal bar of ``weight * width`` characters, in eighths."""
    eighths = round(min(max(weight, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[part]


def printable(text: str) -> str:
    """``text`` with spaces kept but line breaks, tabs and control characters made visible:
    nothing in it can move the cursor or restyle the terminal."""
    from attn_cli.records.tokens import visible

    return "".join(c if c == " " else visible(c) for c in text)


def label_text(label: str, style: str = "") -> Text:
    return Text(label, style=style, no_wrap=True, overflow="ellipsis")


def _title(name: str, rest: str = "") -> Text:
    """A table's title: it wraps rather than lose its end (which names the layer and head)."""
    return Text.assemble((name, "bold"), rest, overflow="fold")


def _note(message: str) -> Text:
    return Text(message, style="dim")


# -- a table that fits its width ---------------------------------------------


def rows_to_show(n_rows: int) -> list[int | None]:
    """Row indexes to draw, ``None`` standing for the ``⋮`` row: every row of a
    table of up to ``ROW_LIMIT + 1``, else the first ``ROW_LIMIT`` and the last."""
    if n_rows <= ROW_LIMIT + 1:
        return list(range(n_rows))
    return [*range(ROW_LIMIT), None, n_rows - 1]


def rows_note(
    chosen: Sequence[int | None], n_rows: int, what: str, hint: str = "", *, see_all: str = SEE_ALL, start: int = 0
) -> Text | None:
    """The line under a table whose rows were cut (None when none were); its
    rows are positions ``start`` .. ``start + n_rows - 1``."""
    if None not in chosen:
        return None
    tail = "".join(f"; {part}" for part in (hint, see_all) if part)
    return Text(
        f"{VDOTS} {len(chosen) - 1} of {n_rows} {what} shown ({start}-{start + ROW_LIMIT - 1}, {start + n_rows - 1}): "
        f"long tables show their first {ROW_LIMIT} rows and the last{tail}",
        style="yellow",
    )


Cell = Callable[[int, int], Text]


class FittedTable:
    """A labelled matrix (rows x columns of cells) that drops middle columns
    rather than wrap, and middle rows past ``ROW_LIMIT``. ``what`` names the
    columns in the note ("keys", "dims"), ``rows_what`` the rows.

    ``cells`` is either the cells themselves or a ``cell(i, j)`` callback: a
    table of T x T cells on a terminal of 80 columns shows a few of them, and
    only those are ever made (once each)."""

    def __init__(
        self,
        title: Text,
        corner: str,
        row_labels: Sequence[str],
        col_labels: Sequence[str],
        cells: Sequence[Sequence[Text]] | Cell,
        *,
        what: str,
        rows_what: str = "rows",
        captions: Sequence[Text] = (),
        hint: str = "",
        row_hint: str = "",
        numbers: Sequence[int] = (),
    ) -> None:
        self.title = title
        self.corner = corner
        self.row_labels = row_labels
        self.col_labels = col_labels
        self._cell = cells if callable(cells) else (lambda i, j: cells[i][j])
        self.what = what
        self.rows_what = rows_what
        self.captions = captions
        self.hint = hint
        self.row_hint = row_hint
        self.numbers = numbers or range(len(col_labels))  # what the cut note calls the columns
        self.rows = rows_to_show(len(row_labels))
        self._cells: dict[tuple[int, int], Text] = {}
        self._widths: dict[int, int] = {}

    def cell(self, i: int, j: int) -> Text:
        made = self._cells.get((i, j))
        if made is None:
            made = self._cells[(i, j)] = self._cell(i, j)
        return made

    def label_width(self) -> int:
        shown = (cell_len(self.row_labels[i]) for i in self.rows if i is not None)
        return min(LABEL_WIDTH, max(cell_len(self.corner), *shown))

    def column_width(self, j: int) -> int:
        """The widest of column ``j``'s header (cut to LABEL_WIDTH) and its shown cells."""
        width = self._widths.get(j)
        if width is None:
            shown = (self.cell(i, j).cell_len for i in self.rows if i is not None)
            width = self._widths[j] = max(min(LABEL_WIDTH, cell_len(self.col_labels[j])), *shown)
        return width

    def columns_that_fit(self, width: int) -> list[int | None]:
        """Column indexes to draw, ``None`` standing for the ``…`` column: every
        column if they fit, else the most first columns that fit with ``…`` and
        the last (``attn_cli.render.terminal.fit``). Only the columns looked at are
        measured (so made), a few more than fit."""
        # each column: content + 1 space padding either side + 1 divider; the label column, 2 edges
        room = width - (self.label_width() + 4)
        return fit_columns(len(self.col_labels), lambda j: self.column_width(j) + 3, room, ellipsis=cell_len(ELLIPSIS) + 3)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        chosen = self.columns_that_fit(options.max_width)
        table = Table(box=box.SIMPLE_HEAD, show_edge=True, pad_edge=True, expand=False)
        label = self.label_width()
        # The widths are what rich would measure (the widest shown cell, the header cut to
        # LABEL_WIDTH): given, rich does not measure every cell again.
        table.add_column(label_text(self.corner), no_wrap=True, overflow="ellipsis", max_width=label, width=label)
        for j in chosen:
            header = Text(ELLIPSIS) if j is None else label_text(self.col_labels[j])
            width = cell_len(ELLIPSIS) if j is None else self.column_width(j)
            table.add_column(header, justify="right", no_wrap=True, overflow="ellipsis", max_width=width, width=width)
        for i in self.rows:
            if i is None:
                table.add_row(*(Text(VDOTS, style="dim") for _ in range(len(chosen) + 1)))
                continue
            drawn = [Text(ELLIPSIS, style="dim") if j is None else self.cell(i, j) for j in chosen]
            table.add_row(label_text(self.row_labels[i]), *drawn)
        yield self.title
        yield table
        for caption in self.captions:
            yield caption
        shown = [j for j in chosen if j is not None]
        cut_columns = len(shown) < len(self.col_labels)
        if cut_columns:
            n = len(self.col_labels)
            hint = f"; {self.hint}" if self.hint else ""
            yield Text(
                f"{ELLIPSIS} {len(shown)} of {n} {self.what} shown ({spans([self.numbers[j] for j in shown])}) to fit "
                f"{options.max_width} columns{hint}; {SEE_ALL}",
                style="yellow",
            )
        # said once: the column note already named the hint and where every number is
        row_hint = "" if cut_columns and self.row_hint == self.hint else self.row_hint
        note = rows_note(self.rows, len(self.row_labels), self.rows_what, row_hint, see_all="" if cut_columns else SEE_ALL)
        if note is not None:
            yield note
        yield Text("")


# -- header and tokens --------------------------------------------------------


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
                pair = Text.assemble((key + " ", "dim"), ("…" + value[-(room - 1) :], "bold"))
            if line.cell_len and line.cell_len + len(self.gap) + pair.cell_len > width:
                yield line
                line = Text()
            if line.cell_len:
                line.append(self.gap)
            line.append_text(pair)
        yield line


STACK_TEXTS = {  # --stack chooses; the decoder's inputs are the target's labels shifted right
    "encoder": "encoder self-attention (source x source)",
    "decoder": "decoder self-attention (target shifted right, causal)",
    "cross": "cross-attention (target rows x source columns)",
}


def config_header(run: Trace) -> RenderableType:
    """What ran: the toy model's configuration (and where its numbers come from: the
    seed, the user's file), or the checkpoint's."""
    m = run.model
    c = m.config
    _, factor = scaling(run)
    if c is None:
        pairs = [
            ("model", m.source),
            *([("revision", m.revision[:12])] if m.revision else []),
            ("architecture", m.architecture),
            ("layers", str(m.layers)),
            ("heads", str(m.heads) + (f" ({m.kv_heads} key/value)" if m.kv_heads != m.heads else "")),
            ("head_dim", str(m.head_dim)),
            ("d_model", str(m.d_model)),
            ("tokenizer", run.tokens.tokenizer),
            ("tokens", str(len(run.tokens))),
            ("scale factor", factor),
            ("masked", "causal" if run.layers[0].causal else "no"),
        ]
        if run.pair is not None:
            pairs.append(("pair", "segment B has token type 1"))
        if run.stack_name is not None:  # one stack of an encoder-decoder (--stack)
            pairs.append(("stack", STACK_TEXTS[run.stack_name]))
            if run.key_tokens is not None:
                pairs.append(("source tokens", str(len(run.key_tokens))))
        if run.prompt_length is not None:
            added = len(run.tokens) - run.prompt_length
            pairs.append(("generated", f"{added} token{'s' if added != 1 else ''} from position {run.prompt_length} (greedy): {printable(run.generated_text or '')!r}"))
        shown = ", ".join(str(layer.layer) for layer in run.layers)
        reminder = Text(
            f"A trained model's own weights; layer{'s' if len(run.layers) > 1 else ''} {shown} of {m.layers} shown, "
            f"head{'s' if len(run.shown_heads) != 1 else ''} {described(run.shown_heads, m.heads)} (--layer, --head choose).",
            style="dim italic",
        )
        return Group(Pairs(pairs), reminder)
    if c.embeddings:
        source = str(c.embeddings)
    else:
        source = f"nn.Embedding({run.tokens.vocab_size}, {c.d_model})"
    if c.positional.value != "none":
        source += f" + {c.positional.value} positions"
    pairs = [
        ("tokenizer", run.tokens.tokenizer),
        ("tokens", str(len(run.tokens))),
        ("seed", str(c.seed)),
        ("d_model", str(c.d_model)),
        ("heads", str(c.heads)),
        ("d_k", str(c.d_k)),
        ("d_v", str(c.d_v)),
        ("scale factor", factor),
        ("causal", "yes" if c.causal else "no"),
        ("init", c.init.value if c.projections else "none (Q = K = V = X)"),
        ("qkv_bias", "yes" if c.qkv_bias else "no"),
        ("out_proj", "yes" if c.out_proj else "no"),
        ("dropout", f"{c.dropout:g}"),
        ("embeddings", source),
    ]
    return Group(Pairs(pairs), Text(c.weights_origin(), style="dim italic"))


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
    text = run.text if run.stack_texts is None else " → ".join(run.stack_texts)
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
    cut = rows_note(rows, len(tokens), "tokens", see_all="--format json lists every token")
    return Group(_title("Tokens"), table, *(_note(n) for n in notes), *([cut] if cut else []), Text(""))


def predictions_table(run: Trace, precision: int) -> RenderableType:
    """--predict: each position's most likely next tokens (or fillers), with their probabilities."""
    p = run.predictions
    assert p is not None, "a predictions table needs a trace computed with --predict"
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
    causal = run.stack_name in ("decoder", "cross") or any(layer.causal for layer in run.layers)  # an encoder-decoder's decoder predicts
    what = "the next token after each position" if causal else "what the model would put at each position (a [MASK] shows it best)"
    notes = [f"{what}: the softmax of the position's logits, most likely first (run to the last layer, its final norm and the head)"]
    cut = rows_note(rows, len(tokens), "positions", see_all="--format json has every position's predictions")
    return Group(_title("Predictions", f"  top {p.k}"), table, *(_note(n) for n in notes), *([cut] if cut else []), Text(""))


# -- matrices and vectors ------------------------------------------------------


def _head_suffix(run: Trace, head: int) -> str:
    layer = f", layer {run.layers[0].layer}" if run.model.layers > 1 else ""
    return f"{layer}, head {head}" if run.layers[0].n_heads > 1 else layer


def vector_table(
    run: Trace, title: Text, matrix: torch.Tensor, precision: int, captions: Sequence[Text] = (), dims: Sequence[int] | None = None,
    *, keys: bool = False,
) -> FittedTable:
    """A (T, d) table: a row per token, a column per dimension (those in ``dims``, by default all);
    ``keys``: a row per key token (cross-attention's keys and values are the source's)."""
    dims = range(matrix.shape[-1]) if dims is None else dims  # matrix: (T, d)
    return FittedTable(
        title, "token \\ dim", (run.columns if keys else run.tokens).labels, [str(d) for d in dims],
        lambda i, j: Text(fmt(matrix[i, dims[j]].item(), precision)),
        what="dims", rows_what="tokens", captions=captions, numbers=dims,
    )


def scaled_score(run: Trace, head: int, query: int, key: int) -> float:
    """One cell of the softmax input (see ``AttentionResult.scaled_score``)."""
    return run.layers[0].scaled_score(head, query, key)


def square_table(
    run: Trace, title: Text, value: Callable[[int, int], float], precision: int, *, masked: str | None, captions: Sequence[Text] = ()
) -> FittedTable:
    """A (T, T) table of scores, ``value(query, key)`` each; ``masked`` is what a
    causally masked cell shows (None: its value)."""
    labels, columns = run.tokens.labels, run.columns.labels
    result = run.layers[0]
    hides = result.causal and masked is not None

    def cell(i: int, j: int) -> Text:
        if hides and result.masked(i, j):
            return Text(masked, style="dim")
        return Text(fmt(value(i, j), precision))

    return FittedTable(
        title, "query \\ key", labels, columns, cell,
        what="keys", rows_what="queries", captions=captions, hint=ROW_HINT, row_hint=ROW_HINT,
    )


def weights_table(run: Trace, head: int, precision: int = 4) -> FittedTable:
    result = run.layers[0]
    formula, _ = scaling(run)
    hidden = hidden_text(run)
    if hidden is not None:
        title = _title("Attention weights", f"  softmax({formula}), {hidden}{_head_suffix(run, head)}")
    else:
        title = _title("Attention weights", f"  softmax({formula}) over each row{_head_suffix(run, head)}")
    extra = "; before dropout (the JSON has dropped_weights)" if result.dropped_weights is not None else ""
    return rows_table(run, result.weights[head], result.mask, title, precision, extra=extra)


def rollout_table(run: Trace, precision: int = 4) -> FittedTable:
    """The attention rollout (``Trace.rollout``): how much of each key token reaches each query
    position through the layers, drawn as a weights table (its rows sum to 1)."""
    rollout = run.rollout
    assert rollout is not None, "a rollout table needs a trace computed with --rollout"
    hidden = hidden_text(run)
    through = f"layers 0 to {rollout.through_layer}" if rollout.through_layer else "layer 0"
    rest = f"  of {through}: each layer's mean over all heads, half residual (I), multiplied"
    title = _title("Attention rollout", rest + (f"; {hidden}" if hidden is not None else ""))
    return rows_table(run, rollout.weights, rollout.mask, title, precision, what="how much of each key token reaches each query position")


def rows_table(
    run: Trace, weights: torch.Tensor, mask: torch.Tensor | None, title: Text, precision: int, *, extra: str = "",
    what: str = "",
) -> FittedTable:
    """A (T, T) table whose rows sum to 1 (weights, rollout), each cell coloured by its
    value, the row's largest bold, masked cells a dot; NaN: a renormalized row with no weight left."""
    labels, columns = run.tokens.labels, run.columns.labels
    causal = mask is not None and bool(mask.any())
    best: dict[int, int] = {}  # query -> its largest weight's key, for the rows drawn only

    def cell(i: int, j: int) -> Text:
        if causal and bool(mask[i, j]):
            return Text("·", style="dim")
        w = weights[i, j].item()
        if math.isnan(w):
            return Text("—", style="dim")
        if i not in best:
            best[i] = int(weights[i].nan_to_num(-1.0).argmax())  # (T,) -> () the first of equal maxima
        return WeightCell(fmt(w, precision), w, best=j == best[i])

    lead = f"{what}; " if what else ""
    if hidden_text(run) is not None:
        caption = f"{lead}rows are queries, columns keys; each row divided by its weight on the keys shown, so it sums to 1; the row's largest weight is bold"
        if weights.isnan().any():
            caption += "; —: the row put all its weight on hidden tokens, nothing is left to renormalize"
    else:
        caption = f"{lead}rows are queries, columns keys; each row sums to 1; the row's largest weight is bold"
    if causal:
        caption += "; · masked (weight exactly 0)"
    caption += extra
    return FittedTable(
        title, "query \\ key", labels, columns, cell,
        what="keys", rows_what="queries", captions=[_note(caption)], hint=ROW_HINT, row_hint=ROW_HINT,
    )


def norms_table(run: Trace, head: int | None, precision: int) -> FittedTable:
    """Value-weighted norms of one head (||a_ij f_h(x_j)||), or of the layer (``head``
    None: ||sum_h a_ij^h f_h(x_j)||): what moves from each key to each query."""
    result = run.layers[0]
    assert result.norms is not None and result.layer_norms is not None, "a norms table needs a trace computed with --norms"
    if head is None:
        values = result.layer_norms  # (T, T)
        layer = f", layer {result.layer}" if run.model.layers > 1 else ""
        title = _title("Value-weighted norms", f"  ||sum over heads of a_ij f_h(x_j)||, every head together{layer}")
    else:
        values = result.norms[head]  # (T, T)
        title = _title("Value-weighted norms", f"  ||a_ij f(x_j)||, weight x the norm of what the key sends{_head_suffix(run, head)}")
    captions = [_note("rows are queries, columns keys; how much the attention output of the query moves from each key, in the "
                      "model's units: a large weight on a key that sends little is a small norm (Kobayashi et al. 2020)")]
    return square_table(run, title, lambda i, j: values[i, j].item(), precision, masked="·", captions=captions)


def scores_table(run: Trace, head: int, precision: int) -> FittedTable:
    title = _title("Raw scores", f"  Q K^T, before scaling and masking{_head_suffix(run, head)}")
    captions = [_note("computed for every pair; the causal mask applies to the scaled scores")] if run.layers[0].causal else []
    scores = run.layers[0].scores[head]  # (T, T)
    return square_table(run, title, lambda i, j: scores[i, j].item(), precision, masked=None, captions=captions)


def scaled_table(run: Trace, head: int, precision: int) -> FittedTable:
    formula, factor = scaling(run)
    title = _title("Scaled scores", f"  {formula}, the softmax input{_head_suffix(run, head)}")
    caption = f"raw scores x {factor}"
    if run.layers[0].causal:
        caption += "; -inf: masked (the query may not see the key)"
    return square_table(
        run, title, lambda i, j: scaled_score(run, head, i, j), precision, masked="-inf", captions=[_note(caption)]
    )


def qkv_tables(run: Trace, head: int, precision: int) -> list[FittedTable]:
    m = run.model
    result = run.layers[0]
    suffix = _head_suffix(run, head)
    bias = " + b" if m.qkv_bias else ""
    x = "X" if not m.trained else "x"
    tables = []
    for name, letter, tensor, size, width in (
        ("Queries", "q", result.queries, "d_k", m.head_dim),
        ("Keys", "k", result.keys, "d_k", m.head_dim),
        ("Values", "v", result.values, "d_v", m.value_dim),
    ):
        formula = f"{letter.upper()} = {x} W_{letter}^T{bias}" if m.projections else f"{letter.upper()} = X (no projections)"
        rows = len(run.tokens if letter == "q" else run.columns)
        title = _title(name, f"  {formula}{suffix} ({rows} x {size} {width})")
        tables.append(vector_table(run, title, tensor[head], precision, keys=letter != "q"))
    return tables


def context_table(run: Trace, head: int, precision: int) -> FittedTable:
    weights = "dropped weights" if run.layers[0].dropped_weights is not None else "weights"
    title = _title("Context vectors", f"  {weights} @ V{_head_suffix(run, head)} ({len(run.tokens)} x d_v {run.model.value_dim})")
    return vector_table(run, title, run.layers[0].context[head], precision)


def embeddings_table(run: Trace, precision: int) -> FittedTable:
    m = run.model
    c = m.config
    x = run.layers[0].x
    if c is None:
        title = _title("Layer input x", f"  ({len(run.tokens)} x d_model {m.d_model}) {m.input_text}{_head_suffix(run, 0) if m.heads == 1 else f', layer {run.layers[0].layer}'}")
        return vector_table(run, title, x, precision)
    source = f"from {c.embeddings}" if c.embeddings else f"rows of nn.Embedding after manual_seed({c.seed})"
    if c.positional.value != "none":
        source += f", plus {c.positional.value} positional encodings"
    title = _title("Embeddings X", f"  ({len(run.tokens)} x d_model {c.d_model}) {source}")
    return vector_table(run, title, x, precision)


def output_table(run: Trace, precision: int, heads: Sequence[int] | None = None) -> FittedTable:
    """The layer's output; ``heads`` (--head) chosen from several: without a W_o only their
    dims of the concat, with one the whole output and a caption saying it mixes every head."""
    m = run.model
    n_heads = run.layers[0].n_heads
    heads = list(range(n_heads)) if heads is None else list(heads)
    some = len(heads) < n_heads
    how = "the heads' context vectors side by side" if n_heads > 1 else "the context vectors"
    if m.out_proj:
        how += ", through W_o"
    layer = f", layer {run.layers[0].layer}" if m.layers > 1 else ""
    width = run.layers[0].output.shape[-1]
    d_v = m.value_dim
    dims = None
    captions = [_note(f"dims h*{d_v} .. h*{d_v}+{d_v - 1} come from head h")] if n_heads > 1 and not m.out_proj else []
    if some and m.out_proj:
        captions.append(_note(
            f"W_o mixes every head's dims into each output dim: this is the output of all {n_heads} heads, "
            f"not of head{'s' if len(heads) > 1 else ''} {', '.join(map(str, heads))} alone (--head)"
        ))
    elif some:
        dims = [h * d_v + d for h in heads for d in range(d_v)]  # the chosen heads' slices of the concat
        which = f"head{'s' if len(heads) > 1 else ''} {', '.join(map(str, heads))}"
        how = f"{which} of the heads side by side"
        captions.append(_note(f"--head chose {which} of {n_heads}: the other heads' dims are left out (--format json has every one)"))
    size = f"{len(dims)} of {width}" if dims is not None else str(width)
    title = _title("Output", f"  {how}{layer} ({len(run.tokens)} x {'d_model' if m.trained else 'heads*d_v'} {size})")
    return vector_table(run, title, run.layers[0].output, precision, captions, dims)


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
    rows = rows_to_show(len(labels))
    for i in rows:
        if i is None:
            table.add_row(*(Text(VDOTS, style="dim") for _ in range(6)))
            continue
        k = stats.row(i)
        table.add_row(
            Text(labels[i]),
            Text(run.columns.labels[stats.most_attended[k]]),
            fmt(stats.top_weight[k], precision),
            fmt(stats.entropy_bits[k], precision),
            fmt(stats.effective_tokens[k], precision),
            str(stats.visible_keys[k]),
        )
    title = _title("Statistics", f"  of the attention weights{_head_suffix(run, stats.head)}")
    cut = rows_note(rows, len(labels), "queries", "--query N shows one query's entropy")
    if stats.self_mass is None:  # cross-attention: no query is among the keys; the most attended source token aligns
        meaning = _note(
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
    meaning = _note(
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
    caption = _note(
        "self, previous, first: the head's mass on the query itself, the token before it, the first token; "
        "entropy and effective tokens: means over the head's query rows"
    )
    return Group(_title("Heads compared", "  one row per head, no averaging across heads"), table, caption, Text(""))


# -- one query, one key --------------------------------------------------------


def query_view(run: Trace, head: int, query: int, stats: HeadStats, precision: int) -> RenderableType:
    labels, columns = run.tokens.labels, run.columns.labels
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
        table.add_row(str(rank), str(run.columns.position(j)), Text(columns[j]), fmt(row[j], precision), Text(bar(row[j]), style="cyan"))
    title = Text.assemble(
        ("Query ", "bold"), (labels[query], "bold"), (f" (position {run.tokens.position(query)})", "bold"),
        f": what it attends to, most first{_head_suffix(run, head)}",
        no_wrap=True, overflow="ellipsis",
    )
    parts: list[RenderableType] = [title, table]
    if len(order) > TOP_KEYS:
        rest = math.fsum(row[j] for j in order[TOP_KEYS:])
        parts.append(_note(f"{ELLIPSIS} {len(order) - TOP_KEYS} more keys, {fmt(rest, precision)} of the weight together; {SEE_ALL}"))
    if len(order) < len(row):
        after = f"key {query + 1} is" if query + 2 == len(row) else f"keys {query + 1}..{len(row) - 1} are"
        parts.append(_note(f"{after} after the query: masked, weight 0"))
    k = stats.row(query)
    parts.append(
        _note(
            f"entropy {fmt(stats.entropy_bits[k], precision)} bits, "
            f"{fmt(stats.effective_tokens[k], precision)} effective tokens of {stats.visible_keys[k]}"
        )
    )
    parts.append(Text(""))
    return Group(*parts)


def key_view(run: Trace, head: int, key: int, precision: int) -> RenderableType:
    labels, columns = run.tokens.labels, run.columns.labels
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
        ("Key ", "bold"), (columns[key], "bold"), (f" (position {run.columns.position(key)})", "bold"),
        f": who attends to it, in query order{_head_suffix(run, head)}",
        no_wrap=True, overflow="ellipsis",
    )
    parts: list[RenderableType] = [title, table]
    if run.layers[0].causal and key > 0:
        before = "query 0 comes" if key == 1 else f"queries 0..{key - 1} come"
        parts.append(_note(f"{before} before the key: masked, weight 0"))
    cut = rows_note(chosen, len(queries), "queries", start=queries[0])
    if cut is not None:
        parts.append(cut)
    mean = math.fsum(column[i] for i in queries) / len(queries)
    largest = "largest in bold"
    if best not in rows:
        largest = f"the largest, {fmt(column[best], precision)}, is from query {best} ({labels[best]}), not shown"
    parts.append(_note(f"mean weight from the queries that can see it: {fmt(mean, precision)}; {largest}"))
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
        (labels[query], "bold"), " -> ", (run.columns.labels[key], "bold"), f"{_head_suffix(run, head)}: weight ",
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
    if (full.hiding is not None and full.hiding.active) or (full.key_hiding is not None and full.key_hiding.active):
        parts.append(hidden_note(full))
    for layer in run.layers:
        if len(run.layers) > 1:
            parts.append(Rule(Text(f"layer {layer.layer} of {run.model.layers}", style="bold"), align="left", characters="="))
        parts.extend(_layer_view(dataclasses.replace(run, layers=(layer,)), view))
    if "rollout" in view.show and run.rollout is not None:
        parts.append(rollout_table(run, view.precision))
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
        parts.append(embeddings_table(run, p))
    multi = run.layers[0].n_heads > 1
    norms = "norms" in show and run.layers[0].norms is not None
    per_head = {"qkv", "scores", "scaled", "weights", "stats", "context"} & show or norms or view.query is not None or view.key is not None
    for h in heads:
        if multi and len(heads) > 1 and per_head:
            parts.append(Rule(Text(f"head {h} of {run.layers[0].n_heads}", style="bold"), align="left"))
        if "qkv" in show:
            parts.extend(qkv_tables(run, h, p))
        if "scores" in show:
            parts.append(scores_table(run, h, p))
        if "scaled" in show:
            parts.append(scaled_table(run, h, p))
        if "weights" in show:
            parts.append(weights_table(run, h, p))
        if norms:
            parts.append(norms_table(run, h, p))
        if "stats" in show:
            parts.append(stats_table(run, stats[h], p, explain=h == heads[0] and run.layers[0] is run.layers[0]))
        if view.query is not None:
            parts.append(query_view(run, h, view.query, stats[h], p))
        if view.key is not None:
            parts.append(key_view(run, h, view.key, p))
        if view.query is not None and view.key is not None:
            parts.extend([cell_line(run, h, view.query, view.key, p), Text("")])
        if "context" in show:
            parts.append(context_table(run, h, p))
    if "stats" in show and len(heads) > 1:
        parts.append(heads_compared(run, [stats[h] for h in heads], p))
    if norms and run.layers[0].n_heads > 1:
        parts.append(norms_table(run, None, p))
    # by default only when it differs from the one head's context: the chosen heads' slice of the concat is that
    if "output" in show and (view.explicit or len(heads) > 1 or run.model.out_proj):
        parts.append(output_table(run, p, heads))
    return parts


def hidden_note(run: Trace) -> Text:
    """The line before the layers' tables when --hide-tokens left tokens out of them."""
    hiding = run.hiding
    if run.key_tokens is not None:  # cross-attention: the decoder's inputs (rows) and the source's tokens (columns)
        named = lambda h, what: f"{what} {', '.join(h.labels)} (position{'s' if len(h.hidden) > 1 else ''} {', '.join(map(str, h.hidden))})"  # noqa: E731
        cut = [named(h, what) for h, what in ((hiding, "target rows"), (run.key_hiding, "source columns")) if h is not None and h.active]
        columns = run.key_hiding.kept if run.key_hiding is not None and run.key_hiding.active else range(len(run.key_tokens))
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
    return _note(
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
            if name == "all":
                names.update(SHOW_CHOICES)
            elif name in SHOW_CHOICES:
                names.add(name)
            else:
                unknown.append(name)
    if unknown:
        raise ValueError(f"unknown table {', '.join(map(repr, unknown))}: choose from {', '.join(SHOW_CHOICES)} or all")
    if not names:
        raise ValueError(f"name at least one table: {', '.join(SHOW_CHOICES)} or all")
    return frozenset(names)
