"""`attn-cli compare`: which heads change between two texts, or between two checkpoints."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.panels import DISPLAY, TRAINED
from attn_cli.cli.params import DpiOption, NoColorOption, PrecisionOption
from attn_cli.cli.options import (
    Format,
    FormatOption,
    NoClobberOption,
    choose_format,
    output_option,
    say_truncated,
    shared_options,
)
from attn_cli.cli.output import binary_output, emit_rich, picture_detail, report_written
from attn_cli.runtime.errors import UsageError
from attn_cli.render.picture.kinds import FORMATS
from attn_cli.sources.spec import SourceSpec
from attn_cli.pipeline import open_source

if TYPE_CHECKING:
    from attn_cli.analysis.compare import Comparison
    from attn_cli.records.trace import Trace


# compare's own arguments and options
TextBArgument = Annotated[
    Optional[str],
    typer.Argument(help="The second text (B), with as many tokens as TEXT (A); not with --other-model.", show_default=False, metavar="B"),
]
OtherModelOption = Annotated[
    Optional[str],
    typer.Option(
        "--other-model",
        help="Compare TEXT through --model (A) and through this checkpoint (B): the same tokenizer, layers and heads.",
        rich_help_panel=TRAINED,
        show_default=False,
    ),
]
TopOption = Annotated[
    Optional[int],
    typer.Option(
        "--top",
        help="List only the N heads that change most: in the table (10 without --top) and in -F json and csv (every head without it).",
        min=1,
        max=10000,
        rich_help_panel=DISPLAY,
        show_default=False,
    ),
]
TABLE_TOP = 10  # heads in the table without --top


@app.command(cls=AttnCommand)
@shared_options(emit_python=False, hide_tokens=False)
def compare(
    spec: SourceSpec,
    texts: list[str],
    lines: bool,
    text_b: TextBArgument = None,
    other_model: OtherModelOption = None,
    format: FormatOption = Format.auto,
    output: output_option(
        "Write here (atomically): .json, .csv, a table as .txt, or a picture (.png, .svg, .pdf) of A, B and B - A "
        "for one layer and head (--layer and --head, else the head that changes most)."
    ) = None,
    no_clobber: NoClobberOption = False,
    top: TopOption = None,
    precision: PrecisionOption = 3,
    no_color: NoColorOption = False,
    dpi: DpiOption = 150,
) -> None:
    """Rank the heads by how much their attention changes between A and B.

    Two texts with the same number of tokens through one model (a minimal pair:
    "he" and "she"), or one text through two checkpoints (--model and
    --other-model). For each head, each query row's total variation distance
    tv = 0.5 * sum over keys of |B - A| (0: the same, 1: nothing in common);
    mean_tv ranks the heads, max_tv says where it peaks.

    \b
    Examples:
      attn-cli compare "The doctor said he was tired" "The doctor said she was tired" --model "$M"
      attn-cli compare "The cat sat" "The dog sat" --heads 4 -F json | jq '.heads | max_by(.mean_tv)'
      attn-cli compare "The doctor said he was tired" "The doctor said she was tired" --model "$M" -o pair.png
      attn-cli compare "The cat sat on the mat" --model base/ --other-model tuned/
    """
    _check_inputs(spec, texts, lines, text_b, other_model)
    picture = output is not None and output.suffix.lower().lstrip(".") in FORMATS
    chosen = Format.table if picture else choose_format(format, output, table_asked=False)

    from attn_cli.analysis.compare import compare as compared

    source = open_source(spec)
    if spec.target is not None or getattr(getattr(source, "info", None), "decoder_layers", None) is not None:
        raise UsageError(
            f"compare ranks the heads of one stack, and {spec.model} is an encoder-decoder: "
            f"`run`, `heatmap`, `html`, `heads` and `explain` with --target show its three stacks"
        )
    for note in source.notes:
        typer.echo(note, err=True)
    selection = spec.select(source, everything=True, keep="weights")
    a, b = _pair(spec, source, selection, texts[0], text_b, other_model)
    say_truncated(a, "A: ")
    say_truncated(b, "B: ")
    comparison = compared(a, b)
    _note_same_ids(a, b)

    if picture:
        assert output is not None
        _picture(comparison, spec, output, dpi, clobber=not no_clobber)
        return
    _write(comparison, chosen, output, top=top, precision=precision, no_color=no_color, clobber=not no_clobber)


def _check_inputs(spec: SourceSpec, texts: list[str], lines: bool, text_b: str | None, other_model: str | None) -> None:
    if lines or len(texts) != 1:
        raise UsageError("compare takes two texts as arguments (A B), or one text with --model and --other-model; drop --lines")
    if other_model is not None:
        if spec.model is None:
            raise UsageError("--other-model compares two checkpoints: give the first with --model")
        if text_b is not None:
            raise UsageError("give B (two texts through one model) or --other-model (one text through two), not both")
    elif text_b is None:
        raise UsageError("compare needs two texts, A and B (with the same number of tokens), or --model M1 --other-model M2")


def _pair(spec: SourceSpec, source: Any, selection: Any, text: str, text_b: str | None, other_model: str | None) -> tuple[Trace, Trace]:
    """A and B: the text through two checkpoints, or two texts through one."""
    from attn_cli.analysis.compare import check_models, check_texts

    if other_model is not None:
        other = open_source(dataclasses.replace(spec, model=other_model))
        for what, x, y in (("layers", source.n_layers, other.n_layers), ("heads", source.n_heads, other.n_heads)):
            if x != y:
                raise UsageError(f"{spec.model} has {x} {what} and {other_model} {y}; compare needs the same {what} in both")
        a = source.run(text, selection)
        b = other.run(text, selection)
        check_models(a, b)
        return a, b
    assert text_b is not None
    tokenize = getattr(source, "tokenize", None)
    if tokenize is not None:  # the toy: both tokenizations checked before anything runs
        check_texts(tokenize(text), tokenize(text_b))
    return source.run(text, selection), source.run(text_b, selection)


def _note_same_ids(a: Trace, b: Trace) -> None:
    if a.tokens.ids == b.tokens.ids and a.model.source == b.model.source and a.text != b.text:
        typer.echo(
            "note: A and B have the same token ids, so the same attention"
            + (" (the 'words' tokenizer numbers each text's own words: use a tiktoken encoding, -t gpt2)" if a.tokens.tokenizer == "words" else ""),
            err=True,
        )


def _write(comparison: Comparison, chosen: Format, output: Path | None, *, top: int | None, precision: int, no_color: bool, clobber: bool) -> None:
    """The ranked table, or compare's JSON or CSV, streamed: the ``top`` heads that change most."""
    if chosen is Format.table:
        from attn_cli.render.terminal.compare import compare_view

        emit_rich([compare_view(comparison, top=TABLE_TOP if top is None else top, precision=precision)], output, no_color=no_color, clobber=clobber)
        return
    from attn_cli.formats.compare import csv_pieces, json_pieces

    with binary_output(output, clobber=clobber) as out:
        pieces = json_pieces(comparison, top) if chosen is Format.json else csv_pieces(comparison, top)
        for piece in pieces:
            out.write(piece.encode("utf-8"))
        if chosen is Format.json:
            out.write(b"\n")


def _picture(comparison: Comparison, spec: SourceSpec, output: Path, dpi: int, *, clobber: bool) -> None:
    from attn_cli.runtime.files import atomic_writer
    from attn_cli.render.picture.compare import compare_figure
    from attn_cli.render.picture.canvas import write_figure

    layers = [layer.layer for layer in comparison.a.layers]
    heads = list(comparison.a.shown_heads)
    if (spec.layers.given and len(layers) > 1) or (spec.heads.given and len(heads) > 1):
        raise UsageError("a picture shows one layer and one head: give a single --layer and --head, or neither (the head that changes most)")
    best = comparison.ranked()[0]
    layer = layers[0] if spec.layers.given else best.layer
    head = heads[0] if spec.heads.given else max(
        (h for h in comparison.heads if h.layer == layer), key=lambda h: h.mean_tv
    ).head  # fmt: skip
    fig = compare_figure(comparison, layer, head, dpi=dpi)
    fmt = output.suffix.lower().lstrip(".")
    with atomic_writer(output, clobber=clobber) as f:
        notes = write_figure(fig, f, fmt)
    for note in notes:
        typer.echo(note, err=True)
    report_written(output, lambda: picture_detail(fig, fmt))
