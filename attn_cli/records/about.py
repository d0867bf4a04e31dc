"""What a source says about the model it ran, in the words each view prints.

The source that makes a trace fills its ``About`` (``ModelInfo.about``): the header's rows, the
heatmap title's phrases, the page's rows, the name of the layer-input table, the flags that
make the source again. The views print them in their order; none asks which source it was.

A row is ``(key, value)``. A value of ``None`` is a slot: the trace's own value for the key,
which each view fills, in its own words, for the trace it draws. Slots hold what the record
already says (the model's name, layers, heads and sizes, which differ between an
encoder-decoder's stacks; the tokenizer, the token count, the scale and the mask of the layer
drawn), so nothing is said twice; a view leaves out a slot the trace has no value for (no
revision, no stack). A value of "" is the key alone: a phrase, a flag without a value.

The defaults describe a trained model by ``ModelInfo``'s fields alone; the toy says more
(``attn_cli.sources.toy.about``), attention from outside attn-cli less
(``attn_cli.sources.outside``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

Row = tuple[str, str | None]  # (key, value); None: the trace's own value (a slot)
Setting = tuple[str, bool | int | float]  # a setting's name and value


@dataclasses.dataclass(frozen=True)
class About:
    """A source's description of itself, as plain rows for each view (see the module's docstring)."""

    # the terminal header's rows (run and explain tables): "key value" pairs
    header: tuple[Row, ...] = (
        ("model", None), ("revision", None), ("architecture", None), ("layers", None), ("heads", None),
        ("head_dim", None), ("d_model", None), ("tokenizer", None), ("tokens", None), ("scale factor", None),
        ("masked", None),
    )  # fmt: skip
    # the sentence under the header: where the numbers come from; None: a trained model's own
    # weights, and the view says which of its layers and heads are shown
    note: str | None = None
    # the heatmap title's phrases about the model, "key value" each; the first names the source
    # (a rollout's title keeps it alone); the view adds the mask and the dropout after them
    title: tuple[Row, ...] = (("model", None), ("layer", None), ("stack", None), ("heads", None), ("head_dim", None))
    # the page's header rows about the model, after its tokenizer, tokens and hidden tokens
    page: tuple[Row, ...] = (
        ("model", None), ("architecture", None), ("layers", None), ("heads", None), ("head size", None),
        ("d_model", None), ("dtype", None),
    )  # fmt: skip
    # the command line's options that make this source again (render/commands.py)
    flags: tuple[Row, ...] = (
        ("--model", None), ("--pair", None), ("--truncate", None), ("--target", None), ("--stack", None), ("--dtype", None),
    )  # fmt: skip
    # the layer-input table: its name, and where its rows come from (a slot: ModelInfo.input_text)
    layer_input: Row = ("Layer input x", None)
    # the layer input's letter in the projections' formulas (Q = x W_q^T), and the name of the
    # output table's width (a trained model's hidden size; the toy's heads side by side)
    input_letter: str = "x"
    output_width: str = "d_model"
    # the page names the model: its title adds the name, its heading says it, and it offers the
    # model overview for one layer too (the page's data calls this "trained"); False: the
    # heading says "the toy model" and one layer has no overview
    names_model: bool = True
    # what the page's "Reproduce" line says when no command makes the source again (attention
    # computed outside attn-cli); None: the command line of ``flags``
    reproduce: str | None = None
    # the settings the page's step-by-step view recomputes the softmax from (the toy's one
    # layer); None: the page has no step-by-step view of this source
    steps: tuple[Setting, ...] | None = None


def filled(rows: Iterable[Row], own: Mapping[str, str | None]) -> list[tuple[str, str]]:
    """``rows`` with each slot given the trace's own value, ``own[key]``; a slot whose value
    is None there (the trace has none) is left out."""
    out = []
    for key, value in rows:
        value = own[key] if value is None else value
        if value is not None:
            out.append((key, value))
    return out
