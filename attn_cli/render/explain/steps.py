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

import torch

from attn_cli.analysis.stats import attention_stats
from attn_cli.records.layers import LayerAttention
from attn_cli.records.trace import Trace
from attn_cli.render.explain.document import CORNER, FULL_D, FULL_T, Block, Explanation, Grid, Line, Step
from attn_cli.render.explain.layout import (
    Layout,
    head_stats_of,
    mean_top,
    softmax_of,
    span_of,
    std_of,
)
from attn_cli.render.explain.projections import ProjectionSteps

_HEAD_BLOCKS = 8  # step 9 shows at most this many heads' context blocks when concat is summarised


class Walkthrough(Layout, ProjectionSteps):
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
        self.cross = run.own_stack.cross
        self.key_labels = run.own_stack.key_tokens.labels
        self.S = len(run.own_stack.key_tokens)
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


    # the steps ----------------------------------------------------------------


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
            blocks += self.key_table(products, lambda j: self.f(s[q, j].item()), f"Σ = S[{q}, j]")
        return Step(4, "Raw scores", tuple(blocks))


    def scale(self) -> Step:
        one = self.one
        s, z = one.scores, one.scores / self.run.layers[0].divisor  # (T, T), (T, T) before any mask
        factor = 1.0 / self.run.layers[0].divisor
        blocks: list[Block] = []
        text = self.scale_text(factor)
        blocks += [Line(text), Line(f"Z = S × {factor:.6g}   {self.T} × {self.S}", "formula")]
        blocks.append(
            Line(
                f"Spread of the scores: std {self.f(std_of(s))} → {self.f(std_of(z))}, max − min "
                f"{self.f(span_of(s))} → {self.f(span_of(z))}."
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
            unscaled = head_stats_of(softmax_of(s, 1.0, self.hidden), self.hidden)
            scaled = head_stats_of(one.weights, self.hidden)
            blocks.append(
                Line(
                    f"Here, without the scaling the largest weight per row would average {self.f(mean_top(unscaled))} "
                    f"instead of {self.f(mean_top(scaled))}, and the entropy {self.f(unscaled.mean_entropy_bits)} bits "
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
        one = self.one
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
            return Step(9, "Heads and output", (Line(self.one_head_skip()),), skipped=True)
        blocks: list[Block] = []
        if H > 1:
            blocks += [
                Line(
                    f"Split (before step 4): Q and K ({T} × {H * dk}) become {H} heads of {T} × {dk}, head h taking columns "
                    f"h·{dk} … h·{dk}+{dk - 1}; V ({T} × {H * dv}) likewise, {dv} columns each. Each head then runs steps 4 to 8 "
                    f"on its own (shown above for head {self.h})."
                ),
            ]
            blocks += self._heads_in_brief(result)
            blocks += self._concat_blocks(result)
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

    def _heads_in_brief(self, result: LayerAttention) -> list[Block]:
        """Every head's weights in one line each: what the followed query does, or averages."""
        blocks: list[Block] = []
        follow = self.q
        summary_rows = []
        for st in attention_stats(result.weights, mask=result.mask, cross=result.cross):  # run's statistics, head by head
            if follow is not None:
                best = st.most_attended[follow]
                summary_rows.append((str(st.head), self.key_labels[best], self.f(st.top_weight[follow]), self.f(st.entropy_bits[follow])))
            else:
                summary_rows.append((str(st.head), self.f(mean_top(st)), self.f(st.mean_entropy_bits)))
        if follow is not None:
            blocks.append(Line(f"What query {self.ql()} does in each head:"))
            blocks.append(Grid("", ("head", "most attended key", "its weight", "entropy bits"), tuple(summary_rows)))
        else:
            blocks.append(Line("Each head's weights, in brief (averaged over the queries):"))
            blocks.append(Grid("", ("head", "mean max weight", "mean entropy bits"), tuple(summary_rows)))
        return blocks

    def _concat_blocks(self, result: LayerAttention) -> list[Block]:
        """Where each head's context goes in concat, and the heads' blocks when concat is too wide."""
        T, H, dk, dv = self.T, self.H, self.d_k, self.d_v
        blocks: list[Block] = []
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
        return blocks
