"""A trained checkpoint's walk-through (``--model``): one real head of one layer.

The model's own tokenizer (its special tokens marked), the layer's input x (what
its projections read: ``ModelInfo.input_text``), the head's rows of the
checkpoint's W_q, W_k, W_v with their biases; then the shared steps 4 to 9 on
the head's numbers, and a last step on which roles of `attn-cli heads` the head
shows in this text.
"""

from __future__ import annotations

from attn_cli.analysis.headroles import BROAD, THRESHOLDS, role_scores, text_scores
from attn_cli.records.results import Classification
from attn_cli.render.commands import command_line
from attn_cli.render.explain.document import FULL_T, Block, Grid, Line, Step
from attn_cli.render.explain.layout import repeats_of
from attn_cli.render.explain.steps import Walkthrough


class TrainedWalkthrough(Walkthrough):
    weights_hint = "They are the checkpoint's own tensors, read as float32."

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.model = self.run.model
        self.index = self.layer.layer  # the layer's index in the model
        assert self.model.anatomy is not None, "a checkpoint's ModelInfo carries its family's anatomy"
        self.anatomy = self.model.anatomy

    def source_steps(self) -> list[Step]:
        return [self.tokenize(), self.layer_input(), self.project()]

    def closing_steps(self) -> list[Step]:
        return [self.roles(), *([self.predictions()] if self.run.predictions is not None else [])]

    def intro(self) -> tuple[Block, ...]:
        m, text = self.model, self.run.text
        what = f"{text!r}" if len(text) <= 80 else f"a text of {len(text)} characters"
        blocks: list[Block] = [
            Line(f"Attention in layer {self.index}, head {self.h} of {m.source}, step by step, for {what}"),
            Line(
                f"{m.architecture} ({m.family}): {m.layers} layers × {m.heads} heads, d_model {m.d_model}, "
                f"head size {m.head_dim}" + (f", revision {m.revision[:12]}" if m.revision else ""),
                "note",
            ),
            Line(
                "The weights are the checkpoint's, trained: these are the numbers the model computes. "
                f"Steps 2 to 8 follow head {self.h} (--head N shows another, --layer L another layer); step 9 puts the "
                f"layer's {self.H} heads together.",
                "note",
            ),
        ]
        if self.run.pair is not None:
            blocks.append(Line(f"Second segment (--pair, token type 1): {self.run.pair!r}", "note"))
        stack = self.run.view_stack
        if stack is not None and stack.texts is not None:
            source, target = stack.texts
            blocks.append(Line(f"An encoder-decoder, one stack of three: {STACK_WORDS[stack.name]} (--stack chooses). "
                               f"Source {source!r}; target {target!r}.", "note"))  # fmt: skip
        if self.q is not None:
            blocks.append(Line(f"Following query {self.ql()} through every step: its row of each matrix, and its sums term by term.", "note"))
        return tuple(blocks)

    def outro(self) -> tuple[Block, ...]:
        every_number = command_line(self.run, "run", "--layer", str(self.index), "--format", "json")
        return (
            Line(f"Every number, full precision: `{every_number}`. Every head's role: `{command_line(self.run, 'heads')}`.", "note"),
        )

    # the steps that differ --------------------------------------------------------

    def tokenize(self) -> Step:
        tokens, cut = self.run.tokens, self.run.truncated
        truncation = "truncation off" if cut is None else "truncation at the model's positions (--truncate)"
        blocks: list[Block] = [
            Line(
                f"The model's own tokenizer ({tokens.tokenizer}), padding off, {truncation}: each id indexes its "
                f"vocabulary of {tokens.vocab_size} tokens. ␣ shows a token's leading space; ★ marks a special token the "
                "tokenizer adds ([CLS], [SEP], BOS): tokens like any other for attention, often where a head parks its weight."
            ),
            Line(f"T = {self.T} token{'s' if self.T != 1 else ''}", "formula"),
        ]
        if cut is not None:
            sentence = cut.sentence(pair=self.run.pair is not None)
            blocks.append(Line(sentence[0].upper() + sentence[1:] + ".", "note"))
        shown = range(min(self.T, FULL_T * 2))
        pair = bool(tokens.type_ids) and any(tokens.type_ids)
        header = ("position", "token", "id", "special") + (("segment",) if pair else ())
        rows = tuple(
            (str(i), self.labels[i], str(tokens.ids[i]), "★" if tokens.is_special(i) else "")
            + ((str(tokens.type_ids[i]),) if pair else ())
            for i in shown
        )
        blocks.append(Grid("Tokens" if not self.cross else "Tokens: the decoder's inputs (the queries)", header, rows, left=2))
        if self.T > len(shown):
            blocks.append(Line(f"Summarised: the first {len(shown)} of {self.T} tokens are listed.", "note"))
        if self.cross:  # the keys are the source's tokens
            source = self.run.own_stack.key_tokens
            listed = range(min(self.S, FULL_T * 2))
            blocks.append(Grid("Source tokens (the keys)", ("position", "token", "id", "special"),
                               tuple((str(j), self.key_labels[j], str(source.ids[j]), "★" if source.is_special(j) else "") for j in listed), left=2))  # fmt: skip
        repeats = repeats_of(tokens)
        if repeats:
            text, where = repeats[0]
            blocks.append(
                Line(
                    f"{text!r} appears at positions {', '.join(map(str, where))}: one id, one row of the embedding table; "
                    + (
                        "the rotation of queries and keys in every layer (step 3) tells the copies apart."
                        if self.anatomy.rotary
                        else "the position embeddings added before layer 0 tell the copies apart."
                    ),
                    "why",
                )
            )
        return Step(1, "Tokenize", tuple(blocks))

    def layer_input(self) -> Step:
        m, L = self.model, self.index
        if self.cross:
            assert self.layer.x is not None and self.layer.source is not None
            cross: list[Block] = [
                Line(f"Cross-attention in decoder layer {L}: its queries read x, the decoder's hidden state after this layer's "
                     "self-attention block (normed first where the family norms before a block); its keys and values read m, the "
                     "encoder's output, the same m for every decoder layer."),  # fmt: skip
                Line(f"Q from x ({self.T} × {m.d_model}); K, V from m ({self.S} × {m.d_model})", "formula"),
            ]
            cross += self.matrix(f"x, decoder layer {L}'s queries' input", self.layer.x, cols="dims")
            cross += self.matrix("m, the encoder's output", self.layer.source, cols="dims", key_rows=True)
            return Step(2, "The layer's inputs", tuple(cross))
        blocks: list[Block] = [Line(self.anatomy.first_hidden, "formula")]
        if L > 0:
            blocks.append(
                Line(
                    f"Layers 0 to {L - 1} ran first, each adding its attention and MLP to the residual stream; "
                    f"attn-cli computes them exactly (their numbers: --layer 0-{L - 1}). Layer {L} reads:"
                )
            )
        else:
            blocks.append(Line("Layer 0 reads it directly:"))
        blocks.append(Line(self.anatomy.layer_input, "formula"))
        assert self.layer.x is not None
        blocks += self.matrix(f"x, layer {L}'s input", self.layer.x, cols="dims")
        blocks.append(Line(f"Every head of layer {L} reads this same x ({self.T} × {m.d_model}); they differ in their weights.", "why"))
        return Step(2, "The layer's input", tuple(blocks))

    def project(self) -> Step:
        m, h = self.model, self.h
        blocks: list[Block] = [Line(self.anatomy.weights_note)] if self.anatomy.weights_note else []
        blocks += self.projection_blocks("x", m.d_model)
        shared = f" (W_k and W_v: those of key/value head {self.kv_head})" if self.kv_heads < self.H else ""
        blocks.append(
            Line(
                f"Head {h} reads only its own rows of W_q, W_k and W_v{shared}: the {self.H} heads see the same x through "
                "different weights, and each learns its own question (Q), label (K) and message (V).",
                "why",
            )
        )
        return Step(3, "Project", tuple(blocks))

    def mask_off(self) -> Step:
        if self.cross:
            return Step(6, "Mask", (Line("None: cross-attention, every decoder input sees every source token (one text each, no padding)."),), skipped=True)
        return Step(
            6,
            "Mask",
            (
                Line(
                    f"None: {self.model.architecture} is an encoder, every query sees every key, before and after it "
                    "(one text, no batch, so no padding to hide either)."
                ),
            ),
            skipped=True,
        )

    def out_proj_text(self, shape: str) -> str:
        name = self.anatomy.out_proj
        return (
            f"Output projection: W_o ({shape}) and b_o, the checkpoint's {name}; it mixes the heads' features into "
            "the attention block's output, which the layer then adds to the residual stream."
        )

    def head_columns_note(self) -> str:
        return "each head's own steps 2 to 8: --head N"

    def roles(self) -> Step:
        scores = text_scores(self.layer.weights, layer=self.index, special=self.run.own_stack.key_tokens.special, mask=self.layer.mask, cross=self.layer.cross)
        mine = scores[self.h]
        rows = []
        for name, value in role_scores(mine).items():
            rows.append((name, f"{name}_mass", self.f(value), self.f(THRESHOLDS[name]), "yes" if value >= THRESHOLDS[name] else ""))
        rows.append(("broad", "entropy / most", self.f(mine.spread), self.f(BROAD), "yes" if mine.spread >= BROAD else ""))
        blocks: list[Block] = [
            Line(
                f"`attn-cli heads` gives every head a role from scores over the text (and a repeated probe); head {self.h}'s "
                "on this text, against the documented thresholds:"
            ),
            Grid("", ("role", "score", "value", "threshold", "reached"), tuple(rows), left=2),
            Line(
                f"mean entropy {self.f(mine.mean_entropy_bits)} bits"
                + ("" if mine.special_mass is None else f"; weight on special tokens {self.f(mine.special_mass)} on average"),
                "note",
            ),
            Line(f"On this text alone, head {self.h} reads as: {mine.role}.", "formula"),
            Line(
                "Induction and duplicate heads only show on a repeated sequence: `attn-cli heads` runs its probe "
                "(random tokens, then the same again) for those.",
                "note",
            ),
        ]
        others = [s for s in scores if s.head != self.h and s.role == mine.role]
        if others:
            blocks.append(Line(f"Other heads of layer {self.index} with the same role here: {', '.join(str(s.head) for s in others)}.", "note"))
        return Step(10, "What this head does", tuple(blocks))

    def predictions(self) -> Step:
        """--predict: what the whole model makes of it, at the followed query or every position."""
        p = self.run.predictions
        assert p is not None
        if isinstance(p, Classification):
            labels = ", ".join(f"{label} {self.f(v)}" for label, v in zip(p.labels, p.scores))
            return Step(11, "What the model predicts", (Line(f"Past layer {self.index}, the model runs to its last layer; its classification head reads {p.where}: {labels}."),))
        n = len(self.run.tokens)
        positions = [self.q] if self.q is not None else list(range(min(n, PREDICTION_ROWS)))
        probs = p.probs.tolist()
        rows = tuple(
            (str(i), self.run.tokens.labels[i], *(f"{p.labels[i][r]} {self.f(probs[i][r])}" for r in range(p.k))) for i in positions
        )
        causal = self.layer.causal
        blocks: list[Block] = [
            Line(
                f"Past layer {self.index}, the model runs to its last layer, its final norm and its head; the softmax of each "
                f"position's logits gives its most likely {'next tokens' if causal else 'fillers (a [MASK] shows it best)'}:"
            ),
            Grid("", ("pos", "token", *(str(r + 1) for r in range(p.k))), rows, left=2),
        ]
        if self.q is None and len(positions) < n:
            blocks.append(Line(f"… the first {len(positions)} of {n} positions; --query follows one, `run --predict -F json` has all.", "note"))
        return Step(11, "What the model predicts", tuple(blocks))


PREDICTION_ROWS = 12  # positions listed when no --query is followed
STACK_WORDS = {
    "encoder": "the encoder's self-attention over the source",
    "decoder": "the decoder's causal self-attention over its inputs (the target shifted right)",
    "cross": "cross-attention, from the decoder's inputs (queries) to the source's tokens (keys)",
}
