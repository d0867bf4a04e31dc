"""The steps every walk-through shares, and the tools that lay out their numbers.

``Walkthrough`` holds one head of one layer of a ``Trace`` and writes steps 4 to
9 (raw scores, scale, mask, softmax, context, heads and output) from the trace
alone; a subclass per source (``toy.py``, ``trained.py``) writes the steps that
differ (where the tokens, the layer's input and the weights come from) through
the hooks below. What a summary hides but a later line refers to is shown where
it is used: the K and V rows of the keys a followed query's tables list, and
each head's block of a concat too wide to show whole.

Shapes: T tokens, D d_model, H heads, Dk/Dv per-head query-key/value sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from attn_cli.records.layers import softmax_input_of
from attn_cli.sources.attend import split_heads
from attn_cli.runtime.errors import UsageError
from attn_cli.render.explain.document import CORNER, FULL_D, FULL_T, Block, Explanation, Grid, Line, Step
from attn_cli.render.terminal.fit import spans
from attn_cli.analysis.stats import HeadStats, attention_stats
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Trace

_HEAD_BLOCKS = 8  # step 9 shows at most this many heads' context blocks when concat is summarised


def resolve_head(run: Trace, head: int | None) -> int:
    heads = run.layers[0].n_heads
    if head is None:
        return 0
    if not 0 <= head < heads:
        raise UsageError(f"--head {head} does not exist: this run has {heads} head{'s' if heads > 1 else ''} (0 to {heads - 1})")
    return head


class Walkthrough:
    """One head's walk-through; subclasses give ``intro``, ``outro`` and ``steps``."""

    weights_hint = ""  # where to see a summarised weight matrix whole

    def __init__(self, run: Trace, head: int, query: int | None, precision: int) -> None:
        self.run = run
        self.layer = run.layers[0]
        self.h = head
        self.q = query
        self.p = precision
        self.labels = run.tokens.labels
        self.T = len(run.tokens)
        # the keys: the same tokens, or cross-attention's source tokens (S of them)
        self.cross = run.key_tokens is not None
        self.key_labels = run.columns.labels
        self.S = len(run.columns)
        self.H = self.layer.n_heads
        self.d_k = run.model.head_dim
        self.d_v = run.model.value_dim
        self.one = self.layer.head(head)
        self.hidden = self.layer.mask  # (T, T) True = masked, or None
        self._hidden_cells = None if self.hidden is None else self.hidden.tolist()

    def build(self) -> Explanation:
        return Explanation(self.intro(), tuple(self.steps()), self.outro())

    def intro(self) -> tuple[Block, ...]:
        raise NotImplementedError

    def steps(self) -> list[Step]:
        """Steps 1 to 3 are the source's own; 4 to 9 read the trace alone."""
        shared = [self.raw_scores(), self.scale(), self.mask(), self.softmax(), self.context(), self.heads()]
        return [*self.source_steps(), *shared, *self.closing_steps()]

    def source_steps(self) -> list[Step]:
        """Where the tokens, the layer's input and the head's weights come from."""
        raise NotImplementedError

    def closing_steps(self) -> list[Step]:
        return []

    def outro(self) -> tuple[Block, ...]:
        raise NotImplementedError

    # hooks for the steps that read differently per source ---------------------

    def scale_text(self, factor: float) -> str:
        """Step 5's first line: where the factor comes from."""
        return f"factor = 1/{self.layer.divisor_text or '1'} = {factor:.6g}"

    def standard_scaling(self) -> bool:
        """Whether the divisor is plain sqrt(d_k), so step 5 can compare with no scaling."""
        return self.layer.divisor_text == f"sqrt({self.d_k})"

    def mask_off(self) -> Step:
        return Step(6, "Causal mask", (Line("None: every query sees every key."),), skipped=True)

    def softmax_extra(self) -> list[Block]:
        return []

    def dropout_blocks(self, mixing: torch.Tensor) -> list[Block]:
        return []

    def one_head_skip(self) -> str:
        return f"One head and no output projection: output = context ({self.T} × {self.d_v})."

    def out_proj_text(self, shape: str) -> str:
        return f"Output projection: W_o ({shape}) and b_o; it mixes the heads' features."

    def head_columns_note(self) -> str:
        return "each head's own steps 4 to 8: --head N"

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
        row_idx = list(range(n_rows)) if n_rows <= FULL_T else _corner_rows(self.q)
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
            shown = []
            if len(row_idx) < n_rows:
                shown.append(f"rows {spans(row_idx, dash='–')}")
            if cut_cols:
                shown.append(f"columns {spans(col_idx, dash='–')}")
            reasons = []
            if len(row_idx) < n_rows or (cut_cols and cols == "tokens"):
                reasons.append(f"T = {self.T} > {FULL_T} tokens")
            if cut_cols and cols != "tokens":
                reasons.append(f"{n_cols} > {FULL_D} dimensions")
            blocks.append(
                Line(
                    f"Summarised ({', '.join(reasons)}): showing {' and '.join(shown)}. {_stats(m, self.f)}. "
                    "The JSON of the command at the end has every number.",
                    "note",
                )
            )
        return blocks

    # the steps ----------------------------------------------------------------

    def projection_blocks(self, x: str, D: int, *, bias_flag: str = "") -> list[Block]:
        """Step 3's common part: Q, K, V from ``x`` (T, D) through the head's rows of
        W_q, W_k, W_v (nn.Linear's (out, in)), and the K, V rows a followed query uses.
        With grouped-query attention, K and V come from the key/value head the query
        head shares; where the family rotates queries and keys (RoPE), Q and K are
        shown before and after the rotation."""
        one, H, dk, dv = self.one, self.H, self.d_k, self.d_v
        Hkv, g = self.kv_heads, self.kv_head
        proj = self.layer.projections
        assert proj.query is not None and proj.key is not None and proj.value is not None
        has_bias = proj.query.bias is not None
        bias = (" + b_q", " + b_k", " + b_v") if has_bias else ("", "", "")
        m, S = ("m", self.S) if self.cross else (x, self.T)  # cross-attention: keys and values from the encoder's output m
        blocks: list[Block] = []
        blocks += [
            Line(f"Q = {x} W_qᵀ{bias[0]}   ({self.T} × {D}) · ({D} × {H * dk}) → {self.T} × {H * dk}", "formula"),
            Line(f"K = {m} W_kᵀ{bias[1]}   ({S} × {D}) · ({D} × {Hkv * dk}) → {S} × {Hkv * dk}", "formula"),
            Line(f"V = {m} W_vᵀ{bias[2]}   ({S} × {D}) · ({D} × {Hkv * dv}) → {S} × {Hkv * dv}", "formula"),
        ]
        blocks.append(
            Line(
                "Each weight matrix is stored as nn.Linear stores it, (out × in): row d of W_q makes column d of Q, "
                f"Q[i, d] = Σ_e {x}[i, e] W_q[d, e]" + (" + b_q[d]" if has_bias else "") + f", row i of {x} (step 2) against row d of W_q; "
                "likewise K and V."
                + (f" The biases b_q, b_k, b_v{bias_flag} are the last column of each weight table: one number per row, added for every token." if has_bias else ""),
            )
        )
        if H > 1:
            q_rows, kv_rows, v_rows = self._rows(self.h, dk), self._rows(g, dk), self._rows(g, dv)
            if Hkv < H:
                blocks.append(
                    Line(
                        f"Grouped-query attention: the {H} query heads share {Hkv} key/value heads, {H // Hkv} each, so W_k and W_v "
                        f"have {Hkv * dk} rows, not {H * dk}. Query head {self.h} takes columns {q_rows} of Q (rows {q_rows} of W_q) "
                        f"and the keys and values of key/value head {g} = {self.h} // {H // Hkv}: columns {kv_rows} of K and {v_rows} of V "
                        f"(rows {kv_rows} of W_k, {v_rows} of W_v), which query heads {self._sharing()} use too. Head {self.h}'s parts:"
                    )
                )
            else:
                blocks.append(
                    Line(
                        f"With {H} heads, head {self.h} takes columns {q_rows} of Q and K and {v_rows} of V (step 9), so it needs only "
                        f"rows {q_rows} of W_q and W_k and rows {v_rows} of W_v. Head {self.h}'s parts"
                        + (f" (column d of its Q is made by row {self.h * dk} + d of W_q; likewise K, and V with row {self.h * dv} + d of W_v):" if self.h else ":")
                    )
                )
        rotary = self.run.model.anatomy.rotary if self.run.model.anatomy is not None else None
        before = self._projected() if rotary else {}
        for name, w, d, first, result in (
            ("q", proj.query, dk, self.h * dk, one.queries),
            ("k", proj.key, dk, g * dk, one.keys),
            ("v", proj.value, dv, g * dv, one.values),
        ):
            blocks += self.weight(f"W_{name}", w.weight[first : first + d], None if w.bias is None else w.bias[first : first + d], f"b_{name}", first)  # (d, D)
            if name in before:
                normed = proj.query_norm if name == "q" else proj.key_norm
                when = f"after {name}_norm (RMSNorm), before the rotation" if normed is not None else "before the rotation"
                blocks += self.matrix(f"{name.upper()} {when}{self.head_note}", before[name], cols="dims")
            else:
                blocks += self.matrix(f"{name.upper()}{self.head_note}", result, cols="dims", key_rows=name != "q" and self.cross)
        if rotary:
            blocks.append(Line(f"Then positions: {rotary}. The scores (step 4) use the rotated Q and K:", "formula"))
            blocks += self.matrix(f"Q{self.head_note}, rotated", one.queries, cols="dims")
            blocks += self.matrix(f"K{self.head_note}, rotated", one.keys, cols="dims")
        if self.q is not None and self.S > FULL_T:
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
        return blocks

    @property
    def kv_heads(self) -> int:
        """Hkv, the key/value heads (H without grouped-query attention)."""
        return self.run.model.kv_heads

    @property
    def kv_head(self) -> int:
        """The key/value head this query head shares."""
        return self.run.model.kv_head(self.h)

    def _sharing(self) -> str:
        group = self.H // self.kv_heads
        return spans([q for q in range(self.kv_head * group, (self.kv_head + 1) * group) if q != self.h])

    @staticmethod
    def _rows(head: int, d: int) -> str:
        return f"{head * d}…{(head + 1) * d - 1}"

    def _projected(self) -> dict[str, torch.Tensor]:
        """This head's Q and K before the family's rotation: the layer's own projections
        (the engine's Linear objects, and its q/k norms where it has them) applied to its
        input x again, split as the engine splits."""
        proj, x = self.layer.projections, self.layer.x
        assert x is not None
        queries, keys = proj.queries_keys(x)  # (T, D) -> (T, H*Dk), (T, Hkv*Dk)
        return {
            "q": split_heads(queries, self.H)[self.h],  # (T, H*Dk) -> (H, T, Dk) -> (T, Dk)
            "k": split_heads(keys, self.kv_heads)[self.kv_head],  # (T, Hkv*Dk) -> (Hkv, T, Dk) -> (T, Dk)
        }

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
        shared = self.kv_heads < self.H and name in ("W_k", "W_v")
        whose = f" (key/value head {self.kv_head}, for query head {self.h})" if shared else f" (head {self.h})"
        part = f" rows {lo}…{lo + n_rows - 1}" + (whose if self.H > 1 and name != "W_o" else "")
        if lo == 0 and (self.H == 1 or name == "W_o"):
            part = ""
        blocks: list[Block] = [Grid(f"{name}{part}   {n_rows} × {n_cols}", tuple(header), tuple(rows), keep_last=1 if bias is not None else 0)]
        if len(row_idx) < n_rows or len(col_idx) < n_cols:
            shown = []
            if len(row_idx) < n_rows:
                shown.append(f"rows {spans([lo + d for d in row_idx], dash='–')}")
            if len(col_idx) < n_cols:
                shown.append(f"columns {spans(col_idx, dash='–')}")
            wide = max(n_rows, n_cols)
            blocks.append(
                Line(
                    f"Summarised ({wide} > {FULL_D} dimensions): showing {' and '.join(shown)}. {name} {_lower(_stats(w, self.f))}. "
                    + (f"{bias_name} {_lower(_stats(bias, self.f))}. " if bias is not None else "")
                    + self.weights_hint,
                    "note",
                )
            )
        return blocks

    def raw_scores(self) -> Step:
        one, dk, T, S = self.one, self.d_k, self.T, self.S
        s = one.scores
        blocks: list[Block] = [
            Line(f"S = Q Kᵀ   ({T} × {dk}) · ({dk} × {S}) → {T} × {S}", "formula"),
            Line(f"S[i, j] = q_i · k_j = Σ_d Q[i, d] K[j, d], a sum of d_k = {dk} products: how well query i matches key j."),
        ]
        if self.q is None and S > 1:
            i, j = 0, 1
            blocks.append(Line(f"For example S[{i}, {j}] = Q[{self.labels[i]}] · K[{self.key_labels[j]}] = {self.f(s[i, j].item())}.", "note"))
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
            rows.append((self.key_labels[j], *cells, total(j)))
        blocks: list[Block] = [Grid("", tuple(header), tuple(rows), keep_last=1)]
        if len(keys) < self.S:
            blocks.append(self.query_keys_note)
        return blocks

    def scale(self) -> Step:
        one = self.one
        s, z = one.scores, one.scores / self.run.layers[0].divisor  # (T, T), (T, T) before any mask
        factor = 1.0 / self.run.layers[0].divisor
        blocks: list[Block] = []
        text = self.scale_text(factor)
        blocks += [Line(text), Line(f"Z = S × {factor:.6g}   {self.T} × {self.S}", "formula")]
        blocks.append(
            Line(
                f"Spread of the scores: std {self.f(_std(s))} → {self.f(_std(z))}, max − min "
                f"{self.f(_span(s))} → {self.f(_span(z))}."
            )
        )
        blocks.append(
            Line(
                f"Why: each score adds up d_k = {self.d_k} products, so its spread grows like √d_k; big softmax inputs push "
                "each row towards one-hot (saturation), where the weights barely respond to the scores and training "
                "gradients vanish. Dividing by √d_k brings the spread back to that of a single product.",
                "why",
            )
        )
        if self.standard_scaling() and self.T > 1:
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
        blocks += self.score_modifiers()
        if self.q is not None:
            q = self.q
            rows = tuple(
                (self.key_labels[j], self.f(s[q, j].item()), f"× {factor:.6g}", self.f(z[q, j].item()))
                for j in self.query_keys
            )
            blocks.append(Line(f"Query {self.ql()}: its scores from step 4, scaled:"))
            blocks.append(Grid("", ("key", f"S[{q}, j]", "", f"Z[{q}, j]"), rows))
            if self.S > FULL_T:
                blocks.append(self.query_keys_note)
        return Step(5, "Scale", tuple(blocks))

    def score_modifiers(self) -> list[Block]:
        """What the family does to Z before the mask and the softmax, when it does
        anything: an added relative position bias (MPNet), soft-capping (Gemma 2). The
        softmax (step 7) reads the result, as the model did."""
        layer = self.layer
        if layer.bias is None and layer.softcap is None:
            return []
        blocks: list[Block] = []
        if layer.bias is not None:
            bias = layer.bias[self.h % layer.bias.shape[0]]  # (T, T)
            blocks += [
                Line("Then the relative position bias: Z ← Z + B, B[i, j] a learned number for head "
                     f"{self.h} and the bucket of the distance j − i (exact for small distances, logarithmic beyond), "
                     "the same in every layer.", "formula"),
            ]  # fmt: skip
            blocks += self.matrix(f"B, position bias{self.head_note}", bias)
        if layer.softcap is not None:
            cap = layer.softcap
            blocks.append(
                Line(
                    f"Then soft-capping: Z ← {cap:g} · tanh(Z / {cap:g}), which keeps every softmax input within "
                    f"±{cap:g} (small scores pass almost unchanged, large ones flatten).",
                    "formula",
                )
            )
        blocks += self.matrix(f"Z, what the softmax reads{self.head_note}", self.one.scaled_scores, masked_as="-inf")
        return blocks

    def mask(self) -> Step:
        if not self.layer.causal:
            return self.mask_off()
        T = self.T
        mask = self.layer.mask
        assert mask is not None
        upper = torch.ones_like(mask).triu(1)  # (T, T) True above the diagonal: the later keys
        later_hidden = bool(mask[upper].all())
        width = int((~mask).sum(-1).max())  # the most keys any query sees
        why = Line("exp(−inf) = 0, so the softmax gives those keys weight exactly 0, and the diagonal keeps every row non-empty.", "why")
        if later_hidden and not bool(mask.tril(-1).any()):
            title, blocks = "Causal mask", [
                Line("Causal: query i may only look at keys 0…i, never at later tokens. The cells above the diagonal become −inf:"),
                Line("Z[i, j] = −inf for j > i", "formula"),
                why,
            ]
        elif later_hidden:
            title, blocks = "Causal mask, sliding window", [
                Line(f"Causal with a sliding window: query i looks only at keys i − {width - 1}…i, the {width} latest "
                     "tokens (itself included); later and older keys become −inf:"),
                Line(f"Z[i, j] = −inf for j > i or j ≤ i − {width}", "formula"),
                why,
            ]  # fmt: skip
        else:
            half = (width - 1) // 2
            title, blocks = "Mask, local window", [
                Line(f"A local window: query i looks only at keys within {half} positions either way; the others become −inf:"),
                Line(f"Z[i, j] = −inf for |i − j| > {half}", "formula"),
                why,
            ]
        blocks += self.matrix(f"Z masked{self.head_note}", self.one.scaled_scores, masked_as="-inf")
        if self.q is not None:
            seen = [j for j in range(T) if not bool(mask[self.q, j])]
            hidden = T - len(seen)
            if hidden:
                blocks.append(Line(f"Query {self.ql()} sees keys {seen[0]}…{seen[-1]}; the other {hidden} key{'s are' if hidden != 1 else ' is'} hidden."))
            elif self.q == T - 1:
                blocks.append(Line(f"Query {self.ql()} is the last token: it sees every key, nothing is hidden."))
            else:
                blocks.append(Line(f"Query {self.ql()} sees every key: nothing is hidden."))
        return Step(6, title, tuple(blocks))

    def softmax(self) -> Step:
        one, T = self.one, self.T
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
                (self.key_labels[j], self.f(z[j].item()), self.f(z[j].item() - m), self.f(e[j].item()), self.f(one.weights[q, j].item()))
                for j in keys
            )
            blocks.append(Grid("", ("key", f"Z[{q}, j]", "− m", "exp", "÷ Σ = weight"), rows))
            if self.S > FULL_T:
                blocks.append(self.query_keys_note)
        blocks += self.softmax_extra()
        return Step(7, "Softmax", tuple(blocks))

    def context(self) -> Step:
        one, T, dv, S = self.one, self.T, self.d_v, self.S
        result = self.run.layers[0]
        blocks: list[Block] = [
            Line(f"context = weights · V   ({T} × {S}) · ({S} × {dv}) → {T} × {dv}", "formula"),
            Line("context[i] = Σ_j weights[i, j] V[j]: each query's weighted average of the value vectors."),
        ]
        mixing = one.weights
        if result.dropped_weights is not None:
            mixing = result.dropped_weights[self.h]  # (T, T)
            blocks += self.dropout_blocks(mixing)
        if self.q is None and S <= FULL_T:
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
                (self.key_labels[j], self.f(mixing[q, j].item()), *(self.f(weighted[j, d].item()) for d in cols), *(["…"] if len(cols) < n else []))
                for j in keys
            ]
            rows.append((f"Σ = context[{q}]", self.f(mixing[q].sum().item()), *(self.f(one.context[q, d].item()) for d in cols), *(["…"] if len(cols) < n else [])))
            blocks.append(Grid("", tuple(header), tuple(rows), frozenset({(len(rows) - 1, k) for k in range(1, len(header))})))
            if len(keys) < S:
                blocks.append(self.query_keys_note)
        return Step(8, "Context vectors", tuple(blocks))

    def heads(self) -> Step:
        result, T = self.run.layers[0], self.T
        H, dk, dv = self.H, self.d_k, self.d_v
        out = result.projections.out
        if H == 1 and out is None:
            return Step(
                9,
                "Heads and output",
                (Line(self.one_head_skip()),),
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
            for st in attention_stats(result.weights, mask=result.mask, cross=result.cross):  # run's statistics, head by head
                if follow is not None:
                    best = st.most_attended[follow]
                    summary_rows.append((str(st.head), self.key_labels[best], self.f(st.top_weight[follow]), self.f(st.entropy_bits[follow])))
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
            blocks.append(Line(f"Where each head's context goes ({self.head_columns_note()}):"))
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
        if out is not None:
            d_out, width = out.weight.shape  # (out, in)
            blocks += [
                Line(self.out_proj_text(f"{d_out} × {width}")),
                Line(f"output = concat W_oᵀ + b_o   ({T} × {width}) · ({width} × {d_out}) → {T} × {d_out}", "formula"),
                Line("output[i, d] = Σ_e concat[i, e] W_o[d, e] + b_o[d]: row i of concat against row d of W_o, plus b_o[d] (the last column)."),
            ]
            blocks += self.weight("W_o", out.weight, out.bias, "b_o", 0)
            blocks += self.matrix("output", result.output, cols="dims")
        else:
            blocks.append(Line(f"No output projection (--out-proj adds one): output = concat, {T} × {H * dv}."))
        return Step(9, "Heads and output", tuple(blocks))


# -- numbers -------------------------------------------------------------------


def _softmax(scores: torch.Tensor, divisor: float, mask: torch.Tensor | None) -> torch.Tensor:
    """The weights the scores ``S`` (T, T) would give under ``divisor``: the engine's
    softmax input (scaled, masked), then its softmax."""
    return torch.softmax(softmax_input_of(scores, divisor, mask), dim=-1)  # (T, T)


def _head_stats(weights: torch.Tensor, mask: torch.Tensor | None) -> HeadStats:
    """``run``'s statistics (``attn_cli.analysis.stats``) of one (T, T) weight matrix,
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


def _repeats(tokens: Tokens) -> list[tuple[str, list[int]]]:
    seen: dict[int, list[int]] = {}
    for i, tid in enumerate(tokens.ids):
        seen.setdefault(tid, []).append(i)
    return [(tokens.texts[where[0]], where) for where in seen.values() if len(where) > 1]
