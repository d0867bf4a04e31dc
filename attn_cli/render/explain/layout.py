"""The tools a walk-through lays out its numbers with: a matrix or vector summarised to what a
terminal shows (the corner, the followed query's row, the keys it weights most), a table of
keys, numbers formatted to the chosen precision; and the small statistics the steps quote.

Shapes: T tokens (S keys for cross-attention), D d_model, H heads, Dk/Dv per-head sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from attn_cli.analysis.stats import HeadStats, attention_stats
from attn_cli.records.layers import softmax_input_of
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Trace
from attn_cli.render.explain.document import CORNER, FULL_D, FULL_T, Block, Grid, Line
from attn_cli.render.terminal.fit import spans
from attn_cli.runtime.errors import UsageError


class Layout:
    """Formatting and laying out a walk-through's numbers (a mixin of ``Walkthrough``)."""

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
        if self.S <= FULL_T or self.q is None:
            return list(range(min(self.S, FULL_T)))
        top = torch.topk(self.one.weights[self.q], CORNER).indices.tolist()
        return sorted(top)

    @property
    def query_keys_note(self) -> Line:
        return Line(
            f"Summarised ({'S' if self.cross else 'T'} = {self.S} > {FULL_T} tokens): keys {spans(self.query_keys, dash='–')} shown, "
            f"the {CORNER} this query weights most; the sums run over all {self.S} keys.",
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
        key_rows: bool = False,
    ) -> list[Block]:
        """A (T, n) tensor as a grid: rows are tokens (the keys' with ``key_rows``: cross-attention's
        K and V are the source's), columns the keys or dimensions; summarised (a corner plus
        statistics) past FULL_T tokens or FULL_D dimensions."""
        row_labels = self.key_labels if key_rows else self.labels
        values = m.tolist()
        n_rows, n_cols = len(values), len(values[0]) if values else 0
        row_idx = list(range(n_rows)) if n_rows <= FULL_T else corner_rows(self.q)
        col_limit = FULL_T if cols == "tokens" else FULL_D
        col_idx = list(range(n_cols)) if n_cols <= col_limit else list(range(CORNER))
        if cols == "tokens":
            header = [self.key_labels[j] for j in col_idx]
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
                if masked_as is not None and self._hidden_cells is not None and self._hidden_cells[i][j]:
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
            rows.append((row_labels[i], *cells))
        blocks: list[Block] = [
            Grid(f"{title}   {n_rows} × {n_cols}", ("",) + tuple(header), tuple(rows), frozenset(emphasis), 1 if row_sums else 0)
        ]
        if len(row_idx) < n_rows or cut_cols:
            blocks.append(self._summary_note(m, row_idx, col_idx, cols))
        return blocks

    def _summary_note(self, m: torch.Tensor, row_idx: Sequence[int], col_idx: Sequence[int], cols: str) -> Line:
        """What a summarised grid shows of its rows and columns, why, and the tensor's statistics."""
        n_rows, n_cols = m.shape[0], m.shape[1] if m.dim() > 1 else 0
        cut_rows, cut_cols = len(row_idx) < n_rows, len(col_idx) < n_cols
        shown = []
        if cut_rows:
            shown.append(f"rows {spans(row_idx, dash='–')}")
        if cut_cols:
            shown.append(f"columns {spans(col_idx, dash='–')}")
        reasons = []
        if cut_rows or (cut_cols and cols == "tokens"):
            reasons.append(f"T = {self.T} > {FULL_T} tokens")
        if cut_cols and cols != "tokens":
            reasons.append(f"{n_cols} > {FULL_D} dimensions")
        return Line(
            f"Summarised ({', '.join(reasons)}): showing {' and '.join(shown)}. {stats_text(m, self.f)}. "
            "The JSON of the command at the end has every number.",
            "note",
        )

    def picked_rows(self, title: str, m: torch.Tensor, idx: Sequence[int]) -> Grid:
        """Rows ``idx`` of a (T, n) tensor, each with its position; columns as ``matrix`` cuts them."""
        n = m.shape[1]
        cols = list(range(n)) if n <= FULL_D else list(range(CORNER))
        values = m.tolist()
        header = ["", "position", *(str(d) for d in cols)] + (["…"] if len(cols) < n else [])
        rows = tuple(
            (self.key_labels[j], str(j), *(self.f(values[j][d]) for d in cols), *(["…"] if len(cols) < n else []))
            for j in idx
        )
        return Grid(f"{title}   {len(rows)} of {m.shape[0]} × {n}", tuple(header), rows)

    def key_table(self, per_key: torch.Tensor, total: Any, total_name: str, first: Sequence[tuple[str, Any]] = ()) -> list[Block]:
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
            rows.append((self.key_labels[j], *cells, total(j)))
        blocks: list[Block] = [Grid("", tuple(header), tuple(rows), keep_last=1)]
        if len(keys) < self.S:
            blocks.append(self.query_keys_note)
        return blocks


def softmax_of(scores: torch.Tensor, divisor: float, mask: torch.Tensor | None) -> torch.Tensor:
    """The weights the scores ``S`` (T, T) would give under ``divisor``: the engine's
    softmax input (scaled, masked), then its softmax."""
    return torch.softmax(softmax_input_of(scores, divisor, mask), dim=-1)  # (T, T)


def head_stats_of(weights: torch.Tensor, mask: torch.Tensor | None) -> HeadStats:
    """``run``'s statistics (``attn_cli.analysis.stats``) of one (T, T) weight matrix,
    so both commands print the same entropy for the same row."""
    return attention_stats(weights.unsqueeze(0), mask=mask)[0]  # (T, T) -> (1, T, T)


def mean_top(stats: HeadStats) -> float:
    """The largest weight per row, averaged over the rows."""
    return math.fsum(stats.top_weight) / len(stats.top_weight)


def std_of(m: torch.Tensor) -> float:
    return m.double().std(correction=0).item()


def span_of(m: torch.Tensor) -> float:
    return (m.max() - m.min()).item()


def stats_text(m: torch.Tensor, f: Any) -> str:
    finite = m[torch.isfinite(m)].double()
    if finite.numel() == 0:
        return "No finite values"
    where = f"Over all {m.numel()} cells" if finite.numel() == m.numel() else f"Over its {finite.numel()} unmasked cells"
    return (
        f"{where}: min {f(finite.min().item())}, max {f(finite.max().item())}, mean {f(finite.mean().item())}, "
        f"std {f(finite.std(correction=0).item())}"
    )


def lowered(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


def corner_rows(query: int | None) -> list[int]:
    rows = list(range(CORNER))
    if query is not None and query >= CORNER:
        rows.append(query)
    return rows


def repeats_of(tokens: Tokens) -> list[tuple[str, list[int]]]:
    seen: dict[int, list[int]] = {}
    for i, tid in enumerate(tokens.ids):
        seen.setdefault(tid, []).append(i)
    return [(tokens.texts[where[0]], where) for where in seen.values() if len(where) > 1]


def resolve_head(run: Trace, head: int | None) -> int:
    heads = run.layers[0].n_heads
    if head is None:
        return 0
    if not 0 <= head < heads:
        raise UsageError(f"--head {head} does not exist: this run has {heads} head{'s' if heads > 1 else ''} (0 to {heads - 1})")
    return head
