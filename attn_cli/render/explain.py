"""`attn-cli explain`: one run's computation, step by step, with its own numbers.

``explain(run, head=, query=, precision=)`` builds an ``Explanation``: numbered
``Step``s made of plain blocks, ``Line``s of prose or formula and ``Grid``s of
numbers already formatted. ``to_text`` lays them out as plain text (pipes,
files); ``to_rich`` as panels for a terminal, where a grid wider than the
terminal loses its right-hand columns behind a marker that says so. Both show
the same numbers, and each number can be checked against the step before it.

Long texts are summarised, and the output says so: past ``FULL_T`` tokens a
token-indexed table shows its first ``CORNER`` rows and columns (and the
followed query's row), past ``FULL_D`` dimensions its first ``CORNER``
columns (a weight matrix: rows too), each with statistics over every cell.
What a summary hides but a later line refers to is shown where it is used:
the K and V rows of the keys a followed query's tables list, and each head's
block of a concat too wide to show whole.

Shapes: T tokens, D d_model, H heads, Dk/Dv per-head query-key/value sizes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

from attn_cli.attention import _softmax_input
from attn_cli.config import Config, Init, Positional
from attn_cli.errors import UsageError
from attn_cli.trace import Trace as Run
from attn_cli.render.stats import HeadStats, attention_stats
from attn_cli.tokens import WORDS, Tokens, visible

FULL_T = 12  # token-indexed tables up to this many tokens are shown whole
FULL_D = 16  # vector tables up to this many dimensions are shown whole
CORNER = 6  # rows/columns shown of a summarised table
_HEAD_BLOCKS = 8  # step 9 shows at most this many heads' context blocks when concat is summarised


# -- the document ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Line:
    """A line of prose. ``kind``: text, formula, why (the reason for a step) or note."""

    text: str
    kind: str = "text"


@dataclasses.dataclass(frozen=True)
class Grid:
    """A table of pre-formatted cells; the first column holds the row labels."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    emphasis: frozenset[tuple[int, int]] = frozenset()  # (row, column) cells to stress, e.g. a row's max
    keep_last: int = 0  # trailing columns (a total) kept when a narrow terminal cuts columns
    left: int = 1  # leading columns aligned left (labels); numbers align right


Block = Line | Grid


@dataclasses.dataclass(frozen=True)
class Step:
    number: int
    title: str
    blocks: tuple[Block, ...]
    skipped: bool = False  # does not apply to this run; kept so the numbering never moves


@dataclasses.dataclass(frozen=True)
class Explanation:
    intro: tuple[Block, ...]
    steps: tuple[Step, ...]
    outro: tuple[Block, ...]


# -- choosing what to show ------------------------------------------------------


def resolve_head(run: Run, head: int | None) -> int:
    heads = run.result.n_heads
    if head is None:
        return 0
    if not 0 <= head < heads:
        raise UsageError(f"--head {head} does not exist: this run has {heads} head{'s' if heads > 1 else ''} (0 to {heads - 1})")
    return head


# -- building the explanation ------------------------------------------------


def explain(run: Run, *, head: int | None = None, query: int | None = None, precision: int = 4) -> Explanation:
    """The walk-through of ``run``: steps 4-8 for one head (``head``, default 0),
    following the query at position ``query`` in detail when it is given."""
    h = resolve_head(run, head)
    if query is not None and not 0 <= query < len(run.tokens):
        raise UsageError(f"--query {query} is out of range: the text has {len(run.tokens)} tokens, positions 0 to {len(run.tokens) - 1}")
    return _Explainer(run, h, query, precision).build()


class _Explainer:
    def __init__(self, run: Run, head: int, query: int | None, precision: int) -> None:
        self.run = run
        self.c: Config = run.config
        self.h = head
        self.q = query
        self.p = precision
        self.labels = run.tokens.labels
        self.T = len(run.tokens)
        self.H = run.result.n_heads
        self.one = run.result.head(head)
        self.hidden = run.result.mask  # (T, T) True = masked, or None

    # formatting -------------------------------------------------------------

    def f(self, v: float) -> str:
        if math.isinf(v):
            return "-inf" if v < 0 else "inf"
        return f"{v:.{self.p}f}"

    def signed(self, v: float) -> str:
        return ("+" if v >= 0 else "") + self.f(v)

    @property
    def query_keys(self) -> list[int]:
        """The keys the per-query tables list: all of them, or for long texts the
        CORNER keys the query weights most, in text order."""
        if self.T <= FULL_T or self.q is None:
            return list(range(min(self.T, FULL_T)))
        top = torch.topk(self.one.weights[self.q], CORNER).indices.tolist()
        return sorted(top)

    @property
    def query_keys_note(self) -> Line:
        return Line(
            f"Summarised (T = {self.T} > {FULL_T} tokens): keys {_ranges(self.query_keys)} shown, the {CORNER} this "
            f"query weights most; the sums run over all {self.T} keys.",
            "note",
        )

    @property
    def head_note(self) -> str:
        return f" (head {self.h})" if self.H > 1 else ""

    def ql(self) -> str:
        assert self.q is not None
        return f"{self.q} {self.labels[self.q]!r}"

    def matrix(
        self,
        title: str,
        m: torch.Tensor,
        *,
        cols: str = "tokens",
        col_offset: int = 0,
        emphasise_max: bool = False,
        masked_as: str | None = None,
        row_sums: bool = False,
    ) -> list[Block]:
        """A (T, n) tensor as a grid: rows are tokens, columns tokens or dimensions;
        summarised (a corner plus statistics) past FULL_T tokens or FULL_D dimensions."""
        values = m.tolist()
        n_rows, n_cols = len(values), len(values[0]) if values else 0
        row_idx = list(range(n_rows)) if n_rows <= FULL_T else _corner_rows(self.q)
        col_limit = FULL_T if cols == "tokens" else FULL_D
        col_idx = list(range(n_cols)) if n_cols <= col_limit else list(range(CORNER))
        if cols == "tokens":
            header = [self.labels[j] for j in col_idx]
        else:
            header = [str(col_offset + j) for j in col_idx]
        cut_cols = len(col_idx) < n_cols
        if cut_cols:
            header.append("…")
        if row_sums:
            header.append("row sum")
        rows: list[tuple[str, ...]] = []
        emphasis: set[tuple[int, int]] = set()
        previous = -1
        for i in row_idx:
            if i != previous + 1:
                rows.append(("⋮",) + ("",) * len(header))
            previous = i
            row = values[i]
            cells = []
            for j in col_idx:
                v = row[j]
                if masked_as is not None and self.c.causal and j > i:
                    cells.append(masked_as)
                else:
                    cells.append(self.f(v))
            if cut_cols:
                cells.append("…")
            if row_sums:
                cells.append(self.f(math.fsum(row)))
            if emphasise_max:
                best = max(range(n_cols), key=row.__getitem__)
                if best in col_idx:
                    emphasis.add((len(rows), col_idx.index(best) + 1))
            rows.append((self.labels[i], *cells))
        blocks: list[Block] = [
            Grid(f"{title}   {n_rows} × {n_cols}", ("",) + tuple(header), tuple(rows), frozenset(emphasis), 1 if row_sums else 0)
        ]
        if len(row_idx) < n_rows or cut_cols:
            shown = []
            if len(row_idx) < n_rows:
                shown.append(f"rows {_ranges(row_idx)}")
            if cut_cols:
                shown.append(f"columns {_ranges(col_idx)}")
            reasons = []
            if len(row_idx) < n_rows or (cut_cols and cols == "tokens"):
                reasons.append(f"T = {self.T} > {FULL_T} tokens")
            if cut_cols and cols != "tokens":
                reasons.append(f"{n_cols} > {FULL_D} dimensions")
            blocks.append(
                Line(
                    f"Summarised ({', '.join(reasons)}): showing {' and '.join(shown)}. {_stats(m, self.f)}. "
                    "`attn-cli run --format json` has every number.",
                    "note",
                )
            )
        return blocks

    # the steps ----------------------------------------------------------------

    def build(self) -> Explanation:
        steps = (
            self.tokenize(),
            self.embed(),
            self.project(),
            self.raw_scores(),
            self.scale(),
            self.mask(),
            self.softmax(),
            self.context(),
            self.heads(),
        )
        return Explanation(self.intro(), steps, self.outro())

    def intro(self) -> tuple[Block, ...]:
        parts = self.c.describe(self.run.tokens.tokenizer)
        blocks: list[Block] = [
            Line(f"Self-attention, step by step, for {self.run.text!r}" if len(self.run.text) <= 80 else f"Self-attention, step by step, for a text of {len(self.run.text)} characters"),
            Line("  ".join(parts), "note"),
            Line("The weights are random (drawn from the seed), not a trained model's: the numbers show the mechanics, not meaning.", "note"),
        ]
        if self.H > 1:
            blocks.append(Line(f"Steps 4 to 8 are shown for head {self.h} of {self.H} (--head N shows another); step 9 puts the heads together.", "note"))
        if self.q is not None:
            if self.q == 1:
                blocks.append(Line(f"Following query {self.ql()} through every step, as the \"Life is short\" walk-through does with its second word.", "note"))
            else:
                blocks.append(Line(f"Following query {self.ql()} through every step: its row of each matrix, and its sums term by term.", "note"))
        return tuple(blocks)

    def tokenize(self) -> Step:
        tokens = self.run.tokens
        blocks: list[Block] = []
        if tokens.tokenizer == WORDS:
            vocabulary = sorted(set(tokens.texts))
            listed = ", ".join(f"{visible(w)}={i}" for i, w in enumerate(vocabulary[:24]))
            if len(vocabulary) > 24:
                listed += f", … ({len(vocabulary) - 24} more)"
            blocks += [
                Line(
                    "Tokenizer 'words' (the tutorials'): punctuation removed, split on whitespace; a word's id is its "
                    f"position in the sorted vocabulary of this text's {len(vocabulary)} distinct words:"
                ),
                Line(listed, "formula"),
            ]
        else:
            blocks.append(
                Line(
                    f"Tokenizer {tokens.tokenizer} (tiktoken byte-pair encoding): each id indexes its vocabulary of "
                    f"{tokens.vocab_size} tokens. ␣ shows a token's leading space."
                )
            )
        blocks.append(Line(f"T = {self.T} token{'s' if self.T != 1 else ''}", "formula"))
        shown = range(min(self.T, FULL_T * 2))
        rows = tuple((str(i), self.labels[i], str(tokens.ids[i])) for i in shown)
        blocks.append(Grid("Tokens", ("position", "token", "id"), rows, left=2))
        if self.T > len(shown):
            blocks.append(Line(f"Summarised: the first {len(shown)} of {self.T} tokens are listed.", "note"))
        repeats = _repeats(tokens)
        if repeats and self.c.embeddings is None:
            text, where = repeats[0]
            blocks.append(
                Line(
                    f"{text!r} appears at positions {', '.join(map(str, where))}"
                    + (f" (and {len(repeats) - 1} other token{'s' if len(repeats) > 2 else ''} repeat too)" if len(repeats) > 1 else "")
                    + ": one id, so one row of the table in step 2"
                    + (
                        "; the positional encoding is what tells them apart."
                        if self.c.positional is not Positional.none
                        else ". Nothing tells the copies apart (\"I saw a saw\"); --positional sinusoidal would."
                    ),
                    "why",
                )
            )
        return Step(1, "Tokenize", tuple(blocks))

    def embed(self) -> Step:
        c, tokens = self.c, self.run.tokens
        blocks: list[Block] = []
        if c.embeddings is not None:
            blocks.append(Line(f"X = the rows of {visible(str(c.embeddings))}, one per token, as given; d_model = the file's width = {c.d_model}."))
            source = "X"
        else:
            blocks += [
                Line(
                    f"torch.manual_seed({c.seed}), then E = nn.Embedding({tokens.vocab_size}, {c.d_model}): a "
                    f"{tokens.vocab_size} × {c.d_model} table of N(0, 1) draws. Token i gets row ids[i]:"
                ),
                Line(f"X[i] = E[ids[i]]   → X is T × d_model = {self.T} × {c.d_model}", "formula"),
            ]
            source = "X = E[ids]"
        if c.positional is Positional.sinusoidal:
            from attn_cli.embed import sinusoidal

            pe = sinusoidal(self.T, c.d_model)  # (T, D)
            base = self.run.x - pe  # (T, D)
            blocks += self.matrix("E[ids]" if c.embeddings is None else "file rows", base, cols="dims")
            blocks += [
                Line("Positions: PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(pos / 10000^(2i/D)) (\"Attention Is All You Need\").", "formula"),
                *self.matrix("PE", pe, cols="dims"),
                Line("X = " + ("E[ids]" if c.embeddings is None else "file rows") + " + PE", "formula"),
                *self.matrix("X", self.run.x, cols="dims"),
            ]
        else:
            blocks += self.matrix(source, self.run.x, cols="dims")
        return Step(2, "Embed", tuple(blocks))

    def project(self) -> Step:
        c = self.c
        one = self.one
        dk, dv, H = c.d_k, c.d_v, self.H
        blocks: list[Block] = []
        if not c.projections:
            blocks.append(Line("No projections (--no-projections, the tutorials' naive attention): queries, keys and values are X itself."))
            blocks.append(Line("Q = K = V = X", "formula"))
            if H > 1:
                lo = self.h * dk
                blocks.append(Line(f"Head {self.h} takes columns {lo}…{lo + dk - 1} of X (step 9):"))
                blocks += self.matrix(f"Q = K = V{self.head_note}", one.queries, cols="dims", col_offset=lo)
            else:
                blocks.append(Line(f"So Q, K and V are the X of step 2, T × Dk = {self.T} × {dk}.", "note"))
            return Step(3, "Project", tuple(blocks))
        order = "W_q, W_k, W_v" + (", then W_o (step 9)" if c.out_proj else "")
        blocks.append(Line(f"torch.manual_seed({c.seed}) again, then {order} drawn in that order; {_init_text(c)}."))
        bias = " + b_q", " + b_k", " + b_v"
        if not c.qkv_bias:
            bias = "", "", ""
        D = c.d_model
        blocks += [
            Line(f"Q = X W_qᵀ{bias[0]}   ({self.T} × {D}) · ({D} × {H * dk}) → {self.T} × {H * dk}", "formula"),
            Line(f"K = X W_kᵀ{bias[1]}   ({self.T} × {D}) · ({D} × {H * dk}) → {self.T} × {H * dk}", "formula"),
            Line(f"V = X W_vᵀ{bias[2]}   ({self.T} × {D}) · ({D} × {H * dv}) → {self.T} × {H * dv}", "formula"),
        ]
        proj = self.run.result.projections
        assert proj.query is not None and proj.key is not None and proj.value is not None
        blocks.append(
            Line(
                "Each weight matrix is stored as nn.Linear stores it, (out × in): row d of W_q makes column d of Q, "
                "Q[i, d] = Σ_e X[i, e] W_q[d, e]" + (" + b_q[d]" if c.qkv_bias else "") + ", row i of X (step 2) against row d of W_q; "
                "likewise K and V."
                + (" The biases b_q, b_k, b_v (--qkv-bias) are the last column of each weight table: one number per row, added for every token." if c.qkv_bias else ""),
            )
        )
        if H > 1:
            qk, v = f"{self.h * dk}…{(self.h + 1) * dk - 1}", f"{self.h * dv}…{(self.h + 1) * dv - 1}"
            blocks.append(
                Line(
                    f"With {H} heads, head {self.h} takes columns {qk} of Q and K and {v} of V (step 9), so it needs only "
                    f"rows {qk} of W_q and W_k and rows {v} of W_v. Head {self.h}'s parts"
                    + (f" (column d of its Q is made by row {self.h * dk} + d of W_q; likewise K, and V with row {self.h * dv} + d of W_v):" if self.h else ":")
                )
            )
        for name, w, d, result in (("q", proj.query, dk, one.queries), ("k", proj.key, dk, one.keys), ("v", proj.value, dv, one.values)):
            lo = self.h * d
            blocks += self.weight(f"W_{name}", w.weight[lo : lo + d], None if w.bias is None else w.bias[lo : lo + d], f"b_{name}", lo)  # (d, D)
            blocks += self.matrix(f"{name.upper()}{self.head_note}", result, cols="dims")
        if self.q is not None and self.T > FULL_T:
            keys = self.query_keys
            blocks.append(
                Line(
                    f"The tables that follow query {self.ql()} in steps 4 to 8 list only the {len(keys)} keys it weights "
                    f"most (positions {', '.join(map(str, keys))}); here are their rows of K and V, so those tables can be checked "
                    "against this step:"
                )
            )
            blocks.append(self.picked_rows(f"K{self.head_note}, the rows query {self.q} uses", one.keys, keys))
            blocks.append(self.picked_rows(f"V{self.head_note}, the rows query {self.q} uses", one.values, keys))
            if one.keys.shape[1] > FULL_D or one.values.shape[1] > FULL_D:
                blocks.append(Line(f"Columns 0–{CORNER - 1} only, as in the tables above and below.", "note"))
        return Step(3, "Project", tuple(blocks))

    def picked_rows(self, title: str, m: torch.Tensor, idx: Sequence[int]) -> Grid:
        """Rows ``idx`` of a (T, n) tensor, each with its position; columns as ``matrix`` cuts them."""
        n = m.shape[1]
        cols = list(range(n)) if n <= FULL_D else list(range(CORNER))
        values = m.tolist()
        header = ["", "position", *(str(d) for d in cols)] + (["…"] if len(cols) < n else [])
        rows = tuple(
            (self.labels[j], str(j), *(self.f(values[j][d]) for d in cols), *(["…"] if len(cols) < n else []))
            for j in idx
        )
        return Grid(f"{title}   {len(rows)} of {m.shape[0]} × {n}", tuple(header), rows)

    def weight(self, name: str, w: torch.Tensor, bias: torch.Tensor | None, bias_name: str, lo: int) -> list[Block]:
        """A weight matrix (out, in), rows labelled by their row number in the full
        matrix (``lo`` on), its bias as a last column; summarised past FULL_D."""
        n_rows, n_cols = w.shape
        row_idx = list(range(n_rows)) if n_rows <= FULL_D else list(range(CORNER))
        col_idx = list(range(n_cols)) if n_cols <= FULL_D else list(range(CORNER))
        values = w.tolist()
        header = ["row", *(str(e) for e in col_idx)]
        if len(col_idx) < n_cols:
            header.append("…")
        if bias is not None:
            header.append(bias_name)
        rows: list[tuple[str, ...]] = []
        for d in row_idx:
            cells = [self.f(values[d][e]) for e in col_idx]
            if len(col_idx) < n_cols:
                cells.append("…")
            if bias is not None:
                cells.append(self.f(bias[d].item()))
            rows.append((str(lo + d), *cells))
        if len(row_idx) < n_rows:
            rows.append(("⋮",) + ("",) * (len(header) - 1))
        part = f" rows {lo}…{lo + n_rows - 1}" + (f" (head {self.h})" if self.H > 1 and name != "W_o" else "")
        if lo == 0 and (self.H == 1 or name == "W_o"):
            part = ""
        blocks: list[Block] = [Grid(f"{name}{part}   {n_rows} × {n_cols}", tuple(header), tuple(rows), keep_last=1 if bias is not None else 0)]
        if len(row_idx) < n_rows or len(col_idx) < n_cols:
            shown = []
            if len(row_idx) < n_rows:
                shown.append(f"rows {_ranges([lo + d for d in row_idx])}")
            if len(col_idx) < n_cols:
                shown.append(f"columns {_ranges(col_idx)}")
            wide = max(n_rows, n_cols)
            blocks.append(
                Line(
                    f"Summarised ({wide} > {FULL_D} dimensions): showing {' and '.join(shown)}. {name} {_lower(_stats(w, self.f))}. "
                    + (f"{bias_name} {_lower(_stats(bias, self.f))}. " if bias is not None else "")
                    + "--emit-python prints a script that draws every weight.",
                    "note",
                )
            )
        return blocks

    def raw_scores(self) -> Step:
        one, dk, T = self.one, self.c.d_k, self.T
        s = one.scores
        blocks: list[Block] = [
            Line(f"S = Q Kᵀ   ({T} × {dk}) · ({dk} × {T}) → {T} × {T}", "formula"),
            Line(f"S[i, j] = q_i · k_j = Σ_d Q[i, d] K[j, d], a sum of d_k = {dk} products: how well query i matches key j."),
        ]
        if self.q is None and T > 1:
            i, j = 0, 1
            blocks.append(Line(f"For example S[{i}, {j}] = Q[{self.labels[i]}] · K[{self.labels[j]}] = {self.f(s[i, j].item())}.", "note"))
        blocks += self.matrix(f"S, raw scores{self.head_note}", s)
        if self.q is not None:
            q = self.q
            blocks.append(Line(f"Query {self.ql()}: its dot product with every key, term by term (each term is Q[{q}, d] × K[j, d], both from step 3):"))
            products = one.queries[q].unsqueeze(0) * one.keys  # (1, Dk) * (T, Dk) -> (T, Dk)
            blocks += self._key_table(products, lambda j: self.f(s[q, j].item()), f"Σ = S[{q}, j]")
        return Step(4, "Raw scores", tuple(blocks))

    def _key_table(self, per_key: torch.Tensor, total: Any, total_name: str, first: Sequence[tuple[str, Any]] = ()) -> list[Block]:
        """Rows = keys j; columns = ``first`` (name, j -> cell), the terms of ``per_key`` (T, n), and a total."""
        n = per_key.shape[1]
        cols = list(range(n)) if n <= FULL_D else list(range(CORNER))
        keys = self.query_keys
        header = ["key", *(name for name, _ in first), *(f"d={d}" for d in cols)]
        if len(cols) < n:
            header.append(f"… {n - len(cols)} more")
        header.append(total_name)
        rows = []
        values = per_key.tolist()
        for j in keys:
            cells = [cell(j) for _, cell in first] + [self.signed(values[j][d]) for d in cols]
            if len(cols) < n:
                cells.append("…")
            rows.append((self.labels[j], *cells, total(j)))
        blocks: list[Block] = [Grid("", tuple(header), tuple(rows), keep_last=1)]
        if len(keys) < self.T:
            blocks.append(self.query_keys_note)
        return blocks

    def scale(self) -> Step:
        c, one = self.c, self.one
        s, z = one.scores, one.scores / self.run.result.divisor  # (T, T), (T, T) before any mask
        factor = 1.0 / self.run.result.divisor
        blocks: list[Block] = []
        if c.scale:
            text = f"factor = 1/√d_k = 1/√{c.d_k} = {1 / math.sqrt(c.d_k):.6g}"
            if c.temperature != 1.0:
                text += f", and 1/temperature = 1/{c.temperature:g}: factor = 1/(√{c.d_k} × {c.temperature:g}) = {factor:.6g}"
                text += " (step 7 compares the softmax under each scaling)"
        else:
            text = "--no-scale: the scores are not divided by √d_k"
            text += f"; only by the temperature: factor = 1/{c.temperature:g} = {factor:.6g}" if c.temperature != 1.0 else ": factor = 1"
            text += " (step 7 compares the softmax with and without)"
        blocks += [Line(text), Line(f"Z = S × {factor:.6g}   {self.T} × {self.T}", "formula")]
        blocks.append(
            Line(
                f"Spread of the scores: std {self.f(_std(s))} → {self.f(_std(z))}, max − min "
                f"{self.f(_span(s))} → {self.f(_span(z))}."
            )
        )
        blocks.append(
            Line(
                f"Why: each score adds up d_k = {c.d_k} products, so its spread grows like √d_k; big softmax inputs push "
                "each row towards one-hot (saturation), where the weights barely respond to the scores and training "
                "gradients vanish. Dividing by √d_k brings the spread back to that of a single product.",
                "why",
            )
        )
        if c.scale and c.temperature == 1.0 and self.T > 1:
            unscaled = _head_stats(_softmax(s, 1.0, self.hidden), self.hidden)
            scaled = _head_stats(one.weights, self.hidden)
            blocks.append(
                Line(
                    f"Here, without the scaling the largest weight per row would average {self.f(_mean_top(unscaled))} "
                    f"instead of {self.f(_mean_top(scaled))}, and the entropy {self.f(unscaled.mean_entropy_bits)} bits "
                    f"instead of {self.f(scaled.mean_entropy_bits)} "
                    "(--no-scale shows the whole comparison).",
                    "note",
                )
            )
        blocks += self.matrix(f"Z, scaled scores{self.head_note}", z)
        if self.q is not None:
            q = self.q
            rows = tuple(
                (self.labels[j], self.f(s[q, j].item()), f"× {factor:.6g}", self.f(z[q, j].item()))
                for j in self.query_keys
            )
            blocks.append(Line(f"Query {self.ql()}: its scores from step 4, scaled:"))
            blocks.append(Grid("", ("key", f"S[{q}, j]", "", f"Z[{q}, j]"), rows))
            if self.T > FULL_T:
                blocks.append(self.query_keys_note)
        return Step(5, "Scale", tuple(blocks))

    def mask(self) -> Step:
        if not self.c.causal:
            return Step(6, "Causal mask", (Line("Off: every query sees every key (--causal hides the keys after each query)."),), skipped=True)
        T = self.T
        blocks: list[Block] = [
            Line("Causal: query i may only look at keys 0…i, never at later tokens. The cells above the diagonal become −inf:"),
            Line("Z[i, j] = −inf for j > i", "formula"),
            Line("exp(−inf) = 0, so the softmax gives those keys weight exactly 0, and the diagonal keeps every row non-empty.", "why"),
        ]
        blocks += self.matrix(f"Z masked{self.head_note}", self.one.scaled_scores, masked_as="-inf")
        if self.q is not None:
            hidden = T - 1 - self.q
            if hidden:
                blocks.append(Line(f"Query {self.ql()} sees keys 0…{self.q}; the {hidden} later key{'s are' if hidden != 1 else ' is'} hidden."))
            else:
                blocks.append(Line(f"Query {self.ql()} is the last token: it sees every key, nothing is hidden."))
        return Step(6, "Causal mask", tuple(blocks))

    def softmax(self) -> Step:
        c, one, T = self.c, self.one, self.T
        blocks: list[Block] = [
            Line("weights[i, j] = exp(Z[i, j] − m_i) / Σ_k exp(Z[i, k] − m_i),   m_i = max_k Z[i, k]", "formula"),
            Line(
                "Subtracting the row maximum changes nothing (it cancels) but keeps exp from overflowing. "
                "Each row of weights is non-negative and sums to 1: how query i shares its attention among the keys."
            ),
        ]
        blocks += self.matrix(f"weights{self.head_note}", one.weights, emphasise_max=True, masked_as="0", row_sums=True)
        if self.q is not None:
            q = self.q
            z = one.scaled_scores[q]  # (T,)
            m = z.max().item()
            e = torch.exp(z - m)  # (T,)
            total = e.sum().item()
            blocks.append(Line(f"Query {self.ql()}: m = max_j Z[{q}, j] = {self.f(m)}; Σ_j exp(Z[{q}, j] − m) = {self.f(total)}."))
            keys = self.query_keys
            rows = tuple(
                (self.labels[j], self.f(z[j].item()), self.f(z[j].item() - m), self.f(e[j].item()), self.f(one.weights[q, j].item()))
                for j in keys
            )
            blocks.append(Grid("", ("key", f"Z[{q}, j]", "− m", "exp", "÷ Σ = weight"), rows))
            if T > FULL_T:
                blocks.append(self.query_keys_note)
        if not c.scale or c.temperature != 1.0:
            blocks += self.ablation()
        return Step(7, "Softmax", tuple(blocks))

    def ablation(self) -> list[Block]:
        """Max weight and entropy per query under each scaling: the saturation point."""
        c, one = self.c, self.one
        variants: list[tuple[str, float]] = [("no scaling", 1.0), (f"1/√{c.d_k}", math.sqrt(c.d_k))]
        mine = self.run.result.divisor
        name = "this run" + (f" (1/{c.temperature:g})" if not c.scale else f" (1/(√{c.d_k}·{c.temperature:g}))")
        if all(abs(mine - d) > 1e-12 * d for _, d in variants):
            variants.append((name, mine))
        else:
            variants = [(n + (" = this run" if abs(mine - d) <= 1e-12 * d else ""), d) for n, d in variants]
        stats = [_head_stats(_softmax(one.scores, d, self.hidden), self.hidden) for _, d in variants]
        letters = "ABC"
        legend = "; ".join(f"{letters[k]}: {n}, softmax(S / {d:.6g})" for k, (n, d) in enumerate(variants))
        header = ["query"]
        for k in range(len(variants)):
            header += [f"max w {letters[k]}", f"bits {letters[k]}"]
        rows = []
        keys = range(self.T) if self.T <= FULL_T else range(CORNER)
        for i in keys:
            cells = [self.labels[i]]
            for st in stats:
                cells += [self.f(st.top_weight[i]), self.f(st.entropy_bits[i])]
            rows.append(tuple(cells))
        mean = ["mean"]
        for st in stats:
            mean += [self.f(_mean_top(st)), self.f(st.mean_entropy_bits)]
        rows.append(tuple(mean))
        most = math.log2(self.T)
        return [
            Line("Scaling ablation: the same raw scores S through the softmax under each scaling.", "text"),
            Line(
                f"max w = a row's largest weight (1 = all attention on one key); bits = its entropy (0 = one-hot, "
                f"at most log2 T = {most:.2f} for evenly spread weights"
                + (", less for early queries under the mask" if c.causal else "")
                + "). The bigger the softmax input, the closer the rows get to one-hot: the saturation the tutorials "
                "show by multiplying the scores by 12.",
                "why",
            ),
            Line(legend, "formula"),
            Grid("", tuple(header), tuple(rows)),
            *([Line(f"Summarised (T = {self.T} > {FULL_T} tokens): queries {_ranges(list(keys))} shown; the mean is over all {self.T}.", "note")] if self.T > FULL_T else []),
        ]

    def context(self) -> Step:
        c, one, T, dv = self.c, self.one, self.T, self.c.d_v
        result = self.run.result
        blocks: list[Block] = [
            Line(f"context = weights · V   ({T} × {T}) · ({T} × {dv}) → {T} × {dv}", "formula"),
            Line("context[i] = Σ_j weights[i, j] V[j]: each query's weighted average of the value vectors."),
        ]
        mixing = one.weights
        if result.dropped_weights is not None:
            mixing = result.dropped_weights[self.h]  # (T, T)
            blocks.append(
                Line(
                    f"Dropout {c.dropout:g} first: each weight is zeroed with probability {c.dropout:g} and the survivors are "
                    f"multiplied by 1/(1 − {c.dropout:g}) = {1 / (1 - c.dropout):.6g} (seeded: the generator carries on "
                    "after the weight draws). These dropped weights mix the values:"
                )
            )
            blocks += self.matrix(f"dropped weights{self.head_note}", mixing, masked_as="0")
        if self.q is None and T <= FULL_T:
            w, v = mixing[0].tolist(), one.values[:, 0].tolist()
            terms = " + ".join(f"{self.f(a)}×{self.f(b)}" for a, b in zip(w, v))
            name = "weights" if result.dropped_weights is None else "dropped"
            blocks.append(Line(f"For example context[0, 0] = Σ_j {name}[0, j] V[j, 0] = {terms} = {self.f(one.context[0, 0].item())}.", "note"))
        blocks += self.matrix(f"context{self.head_note}", one.context, cols="dims")
        if self.q is not None:
            q = self.q
            weighted = mixing[q].unsqueeze(1) * one.values  # (T, 1) * (T, Dv) -> (T, Dv)
            blocks.append(Line(f"Query {self.ql()}: each value vector V[j] (step 3) times its weight (step 7), then added up:"))
            n = dv
            cols = list(range(n)) if n <= FULL_D else list(range(CORNER))
            keys = self.query_keys
            header = ["key", "weight", *(f"d={d}" for d in cols)] + (["…"] if len(cols) < n else [])
            rows = [
                (self.labels[j], self.f(mixing[q, j].item()), *(self.f(weighted[j, d].item()) for d in cols), *(["…"] if len(cols) < n else []))
                for j in keys
            ]
            rows.append((f"Σ = context[{q}]", self.f(mixing[q].sum().item()), *(self.f(one.context[q, d].item()) for d in cols), *(["…"] if len(cols) < n else [])))
            blocks.append(Grid("", tuple(header), tuple(rows), frozenset({(len(rows) - 1, k) for k in range(1, len(header))})))
            if len(keys) < T:
                blocks.append(self.query_keys_note)
        return Step(8, "Context vectors", tuple(blocks))

    def heads(self) -> Step:
        c, result, T = self.c, self.run.result, self.T
        H, dk, dv = self.H, c.d_k, c.d_v
        if H == 1 and not c.out_proj:
            return Step(
                9,
                "Heads and output",
                (Line(f"One head and no output projection: output = context ({T} × {dv}). --heads N and --out-proj add this step."),),
                skipped=True,
            )
        blocks: list[Block] = []
        if H > 1:
            blocks += [
                Line(
                    f"Split (before step 4): Q and K ({T} × {H * dk}) become {H} heads of {T} × {dk}, head h taking columns "
                    f"h·{dk} … h·{dk}+{dk - 1}; V ({T} × {H * dv}) likewise, {dv} columns each. Each head then runs steps 4 to 8 "
                    f"on its own (shown above for head {self.h})."
                ),
            ]
            follow = self.q
            summary_rows = []
            for st in attention_stats(result.weights, mask=result.mask):  # run's statistics, head by head
                if follow is not None:
                    best = st.most_attended[follow]
                    summary_rows.append((str(st.head), self.labels[best], self.f(st.top_weight[follow]), self.f(st.entropy_bits[follow])))
                else:
                    summary_rows.append((str(st.head), self.f(_mean_top(st)), self.f(st.mean_entropy_bits)))
            if follow is not None:
                blocks.append(Line(f"What query {self.ql()} does in each head:"))
                blocks.append(Grid("", ("head", "most attended key", "its weight", "entropy bits"), tuple(summary_rows)))
            else:
                blocks.append(Line("Each head's weights, in brief (averaged over the queries):"))
                blocks.append(Grid("", ("head", "mean max weight", "mean entropy bits"), tuple(summary_rows)))
            parts = " | ".join(f"context_{h}" for h in range(H)) if H <= 4 else f"context_0 | context_1 | … | context_{H - 1}"
            blocks.append(Line(f"concat = [{parts}]   {H} × ({T} × {dv}) → {T} × {H * dv}", "formula"))
            blocks.append(Line("Where each head's context goes (each head's own steps 4 to 8: --head N):"))
            blocks.append(
                Grid(
                    "",
                    ("head", "Q, K columns", "V = concat columns", "its steps 4–8"),
                    tuple(
                        (
                            str(h),
                            f"{h * dk}…{(h + 1) * dk - 1}",
                            f"{h * dv}…{(h + 1) * dv - 1}",
                            "step 8 above" if h == self.h else f"--head {h}",
                        )
                        for h in range(H)
                    ),
                    left=1,
                )
            )
            if H * dv <= FULL_D:
                blocks.append(Line(f"Columns {self.h * dv}…{(self.h + 1) * dv - 1} of concat are head {self.h}'s context from step 8.", "note"))
            else:
                # concat's corner shows only the first columns: show each head's block on its own
                shown = range(min(H, _HEAD_BLOCKS))
                blocks.append(
                    Line(
                        f"concat is {H * dv} columns wide, too wide to show whole, so here is each head's block"
                        + (f" (the first {len(shown)} of {H} heads)" if len(shown) < H else "")
                        + f"; head {self.h}'s is the context of step 8."
                    )
                )
                for h in shown:
                    blocks += self.matrix(f"context_{h} = concat columns {h * dv}…{(h + 1) * dv - 1}", result.context[h], cols="dims", col_offset=h * dv)
            blocks += self.matrix("concat", result.concat, cols="dims")
        else:
            blocks.append(Line(f"One head: concat = the context of step 8, {T} × {dv}."))
        if c.out_proj:
            width = H * dv
            out = result.projections.out
            assert out is not None
            blocks += [
                Line(f"Output projection: W_o ({width} × {width}) and b_o, drawn after W_v ({_init_text(c, bias=True)}); it mixes the heads' features."),
                Line(f"output = concat W_oᵀ + b_o   ({T} × {width}) · ({width} × {width}) → {T} × {width}", "formula"),
                Line("output[i, d] = Σ_e concat[i, e] W_o[d, e] + b_o[d]: row i of concat against row d of W_o, plus b_o[d] (the last column)."),
            ]
            blocks += self.weight("W_o", out.weight, out.bias, "b_o", 0)
            blocks += self.matrix("output", result.output, cols="dims")
        else:
            blocks.append(Line(f"No output projection (--out-proj adds one): output = concat, {T} × {H * dv}."))
        return Step(9, "Heads and output", tuple(blocks))

    def outro(self) -> tuple[Block, ...]:
        return (
            Line(
                "Every number, full precision: the same options with `attn-cli run --format json`. "
                "A plain PyTorch script that recomputes them: add --emit-python.",
                "note",
            ),
        )


# -- numbers -------------------------------------------------------------------


def _softmax(scores: torch.Tensor, divisor: float, mask: torch.Tensor | None) -> torch.Tensor:
    """The weights the scores ``S`` (T, T) would give under ``divisor``: the engine's
    softmax input (scaled, masked), then its softmax."""
    return torch.softmax(_softmax_input(scores, divisor, mask), dim=-1)  # (T, T)


def _head_stats(weights: torch.Tensor, mask: torch.Tensor | None) -> HeadStats:
    """``run``'s statistics (``attn_cli.render.stats``) of one (T, T) weight matrix,
    so both commands print the same entropy for the same row."""
    return attention_stats(weights.unsqueeze(0), mask=mask)[0]  # (T, T) -> (1, T, T)


def _mean_top(stats: HeadStats) -> float:
    """The largest weight per row, averaged over the rows."""
    return math.fsum(stats.top_weight) / len(stats.top_weight)


def _std(m: torch.Tensor) -> float:
    return m.double().std(correction=0).item()


def _span(m: torch.Tensor) -> float:
    return (m.max() - m.min()).item()


def _stats(m: torch.Tensor, f: Any) -> str:
    finite = m[torch.isfinite(m)].double()
    if finite.numel() == 0:
        return "No finite values"
    where = f"Over all {m.numel()} cells" if finite.numel() == m.numel() else f"Over its {finite.numel()} unmasked cells"
    return (
        f"{where}: min {f(finite.min().item())}, max {f(finite.max().item())}, mean {f(finite.mean().item())}, "
        f"std {f(finite.std(correction=0).item())}"
    )


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


def _corner_rows(query: int | None) -> list[int]:
    rows = list(range(CORNER))
    if query is not None and query >= CORNER:
        rows.append(query)
    return rows


def _ranges(idx: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0–2, 5'."""
    parts, start = [], None
    for k, i in enumerate(idx):
        if start is None:
            start = i
        if k + 1 == len(idx) or idx[k + 1] != i + 1:
            parts.append(str(start) if start == i else f"{start}–{i}")
            start = None
    return ", ".join(parts)


def _repeats(tokens: Tokens) -> list[tuple[str, list[int]]]:
    seen: dict[int, list[int]] = {}
    for i, tid in enumerate(tokens.ids):
        seen.setdefault(tid, []).append(i)
    return [(tokens.texts[where[0]], where) for where in seen.values() if len(where) > 1]


def _init_text(c: Config, bias: bool = False) -> str:
    has_bias = bias or c.qkv_bias
    if c.init is Init.linear:
        return "each an nn.Linear's weight: Kaiming uniform, U(−1/√in, 1/√in)" + (", then its bias" if has_bias else "")
    if c.init is Init.uniform:
        return "each torch.rand(out, in), uniform on [0, 1), as in the \"Life is short\" walk-through" + (", then torch.rand(out) for its bias" if has_bias else "")
    return "each torch.randn(out, in), standard normal" + (", then torch.randn(out) for its bias" if has_bias else "")


# -- presentation ----------------------------------------------------------------


def to_text(explanation: Explanation) -> str:
    """Plain text: headings, prose, and grids as aligned columns (never cut)."""
    out: list[str] = []
    for block in explanation.intro:
        out.extend(_text_block(block))
    for step in explanation.steps:
        title = f"{step.number}. {step.title}" + (" (not in this run)" if step.skipped else "")
        out += ["", title, "─" * len(title)]
        for block in step.blocks:
            out.extend(_text_block(block))
    out.append("")
    for block in explanation.outro:
        out.extend(_text_block(block))
    lines = [line for k, line in enumerate(out) if line or (k and out[k - 1])]  # one blank line at most
    return "\n".join(lines).strip("\n") + "\n"


def _text_block(block: Block) -> list[str]:
    if isinstance(block, Line):
        if block.kind == "formula":
            return ["    " + block.text]
        return [block.text]
    widths = [max(len(row[k]) if k < len(row) else 0 for row in (block.header, *block.rows)) for k in range(len(block.header))]
    lines = [] if not block.title else ["", "  " + block.title]
    else_lines = [block.header, *block.rows]
    for n, row in enumerate(else_lines):
        cells = [cell.ljust(w) if k < block.left else cell.rjust(w) for k, (cell, w) in enumerate(zip(row, widths))]
        lines.append(("  " + "  ".join(cells)).rstrip())
        if n == 0:
            lines.append("  " + "  ".join("─" * w for w in widths))
    return lines + [""]


def to_rich(explanation: Explanation) -> Any:
    """Panels, one per step, for a terminal; returns a rich renderable."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    parts: list[Any] = [_rich_block(block) for block in explanation.intro]
    for step in explanation.steps:
        title = Text(f"{step.number} · {step.title}", style="bold" if not step.skipped else "dim")
        body = Group(*(_rich_block(block) for block in step.blocks))
        parts.append(Panel(body, title=title, title_align="left", border_style="dim" if step.skipped else "blue"))
    parts.extend(_rich_block(block) for block in explanation.outro)
    return Group(*parts)


_STYLES = {"text": "", "formula": "bold cyan", "why": "italic", "note": "dim"}


def _rich_block(block: Block) -> Any:
    from rich.text import Text

    if isinstance(block, Line):
        if block.kind == "formula":
            return Text("  " + block.text, style=_STYLES["formula"])
        return Text(block.text, style=_STYLES.get(block.kind, ""))
    return _FitGrid(block)


class _FitGrid:
    """A grid as a rich table that fits the width it is given: body columns that
    do not fit are dropped behind a "…" column (the row labels and the
    ``keep_last`` total columns stay), and a line says how many, and how to see
    them."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def _table(self, columns: list[int]) -> Any:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        grid = self.grid
        table = Table(
            title=grid.title or None,
            title_justify="left",
            title_style="bold",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 0, 0, 1),
        )
        for k in columns:
            header = grid.header[k] if k >= 0 else "…"
            table.add_column(Text(header), justify="left" if 0 <= k < grid.left else "right", no_wrap=True)
        for r, row in enumerate(grid.rows):
            cells = [
                Text(row[k], style="bold reverse" if (r, k) in grid.emphasis else "") if k >= 0 else Text("…")
                for k in columns
            ]
            table.add_row(*cells)
        return table

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.padding import Padding
        from rich.text import Text

        n = len(self.grid.header)
        tail = list(range(n - self.grid.keep_last, n))
        body = n - self.grid.keep_last  # columns 0 .. body-1, the row labels first
        unbounded = options.update_width(1 << 20)
        keep = body
        columns = list(range(n))
        table = self._table(columns)
        while keep > 2 and console.measure(table, options=unbounded).maximum > options.max_width:
            keep -= 1
            columns = list(range(keep)) + [-1] + tail
            table = self._table(columns)
        yield Padding(table, (1, 0, 0, 0))
        if keep < body:
            cut = body - keep
            yield Text(
                f"{cut} column{'s' if cut > 1 else ''} cut to fit the terminal ({options.max_width} wide): "
                "a wider terminal, or --format text, shows them.",
                style="dim",
            )
