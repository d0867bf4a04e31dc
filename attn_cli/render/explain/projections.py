"""Step 3 of a walk-through: the head's projections, W_q, W_k and W_v with their biases, the
rows of a grouped head's shared key/value projection, and Q, K, V themselves.

Shapes: T tokens, D d_model, H heads, Hkv key/value heads, Dk/Dv per-head sizes.
"""

from __future__ import annotations

import torch

from attn_cli.render.explain.document import CORNER, FULL_D, FULL_T, Block, Grid, Line
from attn_cli.render.explain.layout import lowered, stats_text
from attn_cli.render.terminal.fit import spans
from attn_cli.sources.attend import split_heads


class ProjectionSteps:
    """The projection step and its weights (a mixin of ``Walkthrough``)."""

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
            blocks.append(self._head_parts(H, Hkv, g, dk, dv))
        rotary = self.run.model.anatomy.rotary if self.run.model.anatomy is not None else None
        before = self.projected() if rotary else {}
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
            blocks += self._followed_rows()
        return blocks

    def _head_parts(self, H: int, Hkv: int, g: int, dk: int, dv: int) -> Line:
        """Which rows of W_q, W_k, W_v (and columns of Q, K, V) this head takes."""
        q_rows, kv_rows, v_rows = self._rows(self.h, dk), self._rows(g, dk), self._rows(g, dv)
        if Hkv < H:
            return Line(
                f"Grouped-query attention: the {H} query heads share {Hkv} key/value heads, {H // Hkv} each, so W_k and W_v "
                f"have {Hkv * dk} rows, not {H * dk}. Query head {self.h} takes columns {q_rows} of Q (rows {q_rows} of W_q) "
                f"and the keys and values of key/value head {g} = {self.h} // {H // Hkv}: columns {kv_rows} of K and {v_rows} of V "
                f"(rows {kv_rows} of W_k, {v_rows} of W_v), which query heads {self._sharing()} use too. Head {self.h}'s parts:"
            )
        return Line(
            f"With {H} heads, head {self.h} takes columns {q_rows} of Q and K and {v_rows} of V (step 9), so it needs only "
            f"rows {q_rows} of W_q and W_k and rows {v_rows} of W_v. Head {self.h}'s parts"
            + (f" (column d of its Q is made by row {self.h * dk} + d of W_q; likewise K, and V with row {self.h * dv} + d of W_v):" if self.h else ":")
        )

    def _followed_rows(self) -> list[Block]:
        """The K and V rows of the keys a followed query's tables list (a long text's)."""
        one, keys = self.one, self.query_keys
        blocks: list[Block] = [
            Line(
                f"The tables that follow query {self.ql()} in steps 4 to 8 list only the {len(keys)} keys it weights "
                f"most (positions {', '.join(map(str, keys))}); here are their rows of K and V, so those tables can be checked "
                "against this step:"
            ),
            self.picked_rows(f"K{self.head_note}, the rows query {self.q} uses", one.keys, keys),
            self.picked_rows(f"V{self.head_note}, the rows query {self.q} uses", one.values, keys),
        ]
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

    def projected(self) -> dict[str, torch.Tensor]:
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
                    f"Summarised ({wide} > {FULL_D} dimensions): showing {' and '.join(shown)}. {name} {lowered(stats_text(w, self.f))}. "
                    + (f"{bias_name} {lowered(stats_text(bias, self.f))}. " if bias is not None else "")
                    + self.weights_hint,
                    "note",
                )
            )
        return blocks
