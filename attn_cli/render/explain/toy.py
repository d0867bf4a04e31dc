"""The seeded toy model's walk-through: the words or tiktoken tokenizer, the seeded
embedding table (or the user's vectors), and W_q, W_k, W_v drawn from the seed;
steps 4 to 9 are the shared ones (``steps.py``) with the toy's own words: its
--no-scale and --temperature ablation, --causal, --dropout, --out-proj.
"""

from __future__ import annotations

import math

import torch

from attn_cli.records.tokens import visible
from attn_cli.render.commands import command_line
from attn_cli.render.explain.document import CORNER, FULL_T, Block, Grid, Line, Step
from attn_cli.render.explain.layout import head_stats_of, mean_top, repeats_of, softmax_of
from attn_cli.render.explain.steps import Walkthrough
from attn_cli.render.terminal.fit import spans
from attn_cli.sources.toy.config import Config, Init, Positional
from attn_cli.text.tokenizers import WORDS


class ToyWalkthrough(Walkthrough):
    weights_hint = "--emit-python prints a script that draws every weight."

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.c: Config = self.run.model.config

    def source_steps(self) -> list[Step]:
        return [self.tokenize(), self.embed(), self.project()]

    # the shared steps in the toy's words ---------------------------------------

    def scale_text(self, factor: float) -> str:
        c = self.c
        if c.scale:
            text = f"factor = 1/√d_k = 1/√{c.d_k} = {1 / math.sqrt(c.d_k):.6g}"
            if c.temperature != 1.0:
                text += f", and 1/temperature = 1/{c.temperature:g}: factor = 1/(√{c.d_k} × {c.temperature:g}) = {factor:.6g}"
                text += " (step 7 compares the softmax under each scaling)"
        else:
            text = "--no-scale: the scores are not divided by √d_k"
            text += f"; only by the temperature: factor = 1/{c.temperature:g} = {factor:.6g}" if c.temperature != 1.0 else ": factor = 1"
            text += " (step 7 compares the softmax with and without)"
        return text

    def standard_scaling(self) -> bool:
        return self.c.scale and self.c.temperature == 1.0

    def mask_off(self) -> Step:
        return Step(6, "Causal mask", (Line("Off: every query sees every key (--causal hides the keys after each query)."),), skipped=True)

    def softmax_extra(self) -> list[Block]:
        return self.ablation() if not self.standard_scaling() else []

    def dropout_blocks(self, mixing: torch.Tensor) -> list[Block]:
        c = self.c
        return [
            Line(
                f"Dropout {c.dropout:g} first: each weight is zeroed with probability {c.dropout:g} and the survivors are "
                f"multiplied by 1/(1 − {c.dropout:g}) = {1 / (1 - c.dropout):.6g} (seeded: the generator carries on "
                "after the weight draws). These dropped weights mix the values:"
            ),
            *self.matrix(f"dropped weights{self.head_note}", mixing, masked_as="0"),
        ]

    def one_head_skip(self) -> str:
        return super().one_head_skip()[:-1] + ". --heads N and --out-proj add this step."

    def out_proj_text(self, shape: str) -> str:
        return f"Output projection: W_o ({shape}) and b_o, drawn after W_v ({_init_text(self.c, bias=True)}); it mixes the heads' features."

    # the toy's own steps ----------------------------------------------------------

    def intro(self) -> tuple[Block, ...]:
        parts = self.c.describe(self.run.tokens.tokenizer)
        blocks: list[Block] = [
            Line(f"Self-attention, step by step, for {self.run.text!r}" if len(self.run.text) <= 80 else f"Self-attention, step by step, for a text of {len(self.run.text)} characters"),
            Line("  ".join(parts), "note"),
            Line(self.c.weights_origin(), "note"),
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
        repeats = repeats_of(tokens)
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
            from attn_cli.sources.toy.embed import sinusoidal

            pe = sinusoidal(self.T, c.d_model)  # (T, D)
            base = self.run.layers[0].x - pe  # (T, D)
            blocks += self.matrix("E[ids]" if c.embeddings is None else "file rows", base, cols="dims")
            blocks += [
                Line("Positions: PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(pos / 10000^(2i/D)) (\"Attention Is All You Need\").", "formula"),
                *self.matrix("PE", pe, cols="dims"),
                Line("X = " + ("E[ids]" if c.embeddings is None else "file rows") + " + PE", "formula"),
                *self.matrix("X", self.run.layers[0].x, cols="dims"),
            ]
        else:
            blocks += self.matrix(source, self.run.layers[0].x, cols="dims")
        return Step(2, "Embed", tuple(blocks))

    def project(self) -> Step:
        c = self.c
        one = self.one
        dk, H = c.d_k, self.H
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
        blocks += self.projection_blocks("X", c.d_model, bias_flag=" (--qkv-bias)")
        return Step(3, "Project", tuple(blocks))

    def ablation(self) -> list[Block]:
        """Max weight and entropy per query under each scaling: the saturation point."""
        c, one = self.c, self.one
        variants: list[tuple[str, float]] = [("no scaling", 1.0), (f"1/√{c.d_k}", math.sqrt(c.d_k))]
        mine = self.run.layers[0].divisor
        name = "this run" + (f" (1/{c.temperature:g})" if not c.scale else f" (1/(√{c.d_k}·{c.temperature:g}))")
        if all(abs(mine - d) > 1e-12 * d for _, d in variants):
            variants.append((name, mine))
        else:
            variants = [(n + (" = this run" if abs(mine - d) <= 1e-12 * d else ""), d) for n, d in variants]
        stats = [head_stats_of(softmax_of(one.scores, d, self.hidden), self.hidden) for _, d in variants]
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
            mean += [self.f(mean_top(st)), self.f(st.mean_entropy_bits)]
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
            *([Line(f"Summarised (T = {self.T} > {FULL_T} tokens): queries {spans(list(keys), dash='–')} shown; the mean is over all {self.T}.", "note")] if self.T > FULL_T else []),
        ]

    def outro(self) -> tuple[Block, ...]:
        return (
            Line(
                f"Every number, full precision: `{command_line(self.run, 'run', '--format', 'json')}`. "
                f"A plain PyTorch script that recomputes them: `{command_line(self.run, 'run', '--emit-python')}`.",
                "note",
            ),
        )


def _init_text(c: Config, bias: bool = False) -> str:
    has_bias = bias or c.qkv_bias
    if c.init is Init.linear:
        return "each an nn.Linear's weight: Kaiming uniform, U(−1/√in, 1/√in)" + (", then its bias" if has_bias else "")
    if c.init is Init.uniform:
        return "each torch.rand(out, in), uniform on [0, 1), as in the \"Life is short\" walk-through" + (", then torch.rand(out) for its bias" if has_bias else "")
    return "each torch.randn(out, in), standard normal" + (", then torch.randn(out) for its bias" if has_bias else "")

