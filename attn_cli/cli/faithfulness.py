"""`attn-cli faithfulness`: which map a model's own predictions agree with, by deleting the tokens each map
ranks first (``analysis.faithfulness``; the deletions through the model: ``sources.checkpoint.deletion``)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.output import binary_output, emit_rich, picture_detail, progress, report_written
from attn_cli.cli.options import (
    Format, FormatOption, NoClobberOption, TargetLabelOption, TargetTokenOption, choose_format, opened, output_option, shared_options,
)  # fmt: skip
from attn_cli.cli.panels import ANALYSIS
from attn_cli.cli.params import DpiOption, NoColorOption
from attn_cli.runtime.errors import TooLargeError, UsageError
from attn_cli.render.picture.kinds import FORMATS
from attn_cli.sources.spec import SourceSpec


def _methods(values: Optional[list[str]]) -> Optional[list[str]]:
    from attn_cli.analysis.faithfulness import METHODS
    from attn_cli.records.results import what_names

    if values is None:
        return None
    try:
        names = what_names(values, METHODS)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if not names:
        raise typer.BadParameter(f"nothing: choose from {', '.join(METHODS)}")
    return list(names)


MethodsOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--methods",
        help="The maps to rank, comma-separated or repeated: weights (the last layer's, mean over heads), rollout, "
        "norms (the last layer's), flow, value-zeroing-rollout, alti, attention-gradient. [default: all (flow where "
        "the text is short enough)]",
        rich_help_panel=ANALYSIS, metavar="MAPS", show_default=False, callback=_methods,
    ),
]  # fmt: skip
class DeleteWith(str, enum.Enum):
    mask = "mask"
    pad = "pad"
    unk = "unk"
    remove = "remove"


DeleteWithOption = Annotated[
    DeleteWith,
    typer.Option(
        "--delete-with",
        help="What a deleted token becomes: mask (the tokenizer's mask token, else its pad, else its unknown one), "
        "pad, unk, or remove (taken out of the text).",
        rich_help_panel=ANALYSIS, case_sensitive=False,
    ),
]  # fmt: skip


@app.command(cls=AttnCommand)
@shared_options(emit_python=False, hide_tokens=False)
def faithfulness(
    spec: SourceSpec, texts: list[str], methods: MethodsOption = None, delete_with: DeleteWithOption = DeleteWith.mask,
    target_label: TargetLabelOption = None, target_token: TargetTokenOption = None, format: FormatOption = Format.auto,
    output: output_option("Write here (atomically): .json, .csv, a table as .txt, or a picture of the curves (.png, .svg, .pdf).") = None,
    no_clobber: NoClobberOption = False, no_color: NoColorOption = False, dpi: DpiOption = 150,
) -> None:  # fmt: skip
    """Rank the maps by how faithful they are to the model's own prediction: a deletion test.

    For each map, the row at the position that makes the prediction ranks the text's
    tokens that are not special; the top 1, 5, 10, 20 and 50% are deleted (--delete-with)
    and the drop in the predicted (or --target-label / --target-token) output's probability
    measured. AOPC, the mean of the five drops (DeYoung et al. 2020), ranks the maps; a
    random ranking (10 drawn with seed 0) is the baseline. With --lines or --file, every
    text's drops are averaged. docs/attribution.md has each map and the test.

    \b
    Examples:
      attn-cli faithfulness "a gripping, beautifully made film" --model ~/models/sst2-distilbert
      attn-cli faithfulness "The capital of France is" --model ~/models/gpt2 --target-token " Paris"
      attn-cli faithfulness --file reviews.txt --lines --model "$C" -F json -o faithful.json
      attn-cli faithfulness "The cat [MASK] on the mat." --model ~/models/bert -o curves.png
    """
    if spec.model is None:
        raise UsageError("faithfulness deletes tokens and runs a trained model again: give --model")
    picture = output is not None and output.suffix.lower().lstrip(".") in FORMATS
    chosen = Format.table if picture else choose_format(format, output, table_asked=False)
    source = opened(spec)
    if getattr(source.info, "decoder_layers", None) is not None:
        raise UsageError(f"{spec.model} is an encoder-decoder: faithfulness tests a model of one stack (an encoder or a decoder)")
    result = _tested(spec, source, texts, methods, delete_with.value, (target_label, target_token))
    if picture:
        assert output is not None
        _picture(result, output, dpi, clobber=not no_clobber)
    elif chosen is Format.table:
        from attn_cli.render.terminal.faithfulness import faithfulness_view

        emit_rich([faithfulness_view(result, len(texts))], output, no_color=no_color, clobber=not no_clobber)
    else:
        from attn_cli.formats.faithfulness import csv_text, json_text

        with binary_output(output, clobber=not no_clobber) as out:
            out.write((json_text(result) if chosen is Format.json else csv_text(result)).encode("utf-8"))


def _tested(spec: SourceSpec, source: Any, texts: list[str], methods: list[str] | None, how: str, target: tuple[str | None, str | None]) -> Any:
    """Every text's deletion test, the curves averaged over the texts."""
    from attn_cli.analysis import faithfulness as f
    from attn_cli.analysis.flow import check_size
    from attn_cli.sources.checkpoint.deletion import Deletions

    asked = list(methods or f.METHODS)
    per_text: list[list[Any]] = []
    randoms, targets = [], []
    for text in progress(texts, len(texts)):
        tokens = source.checkpoint.tokenizer.encode(text)
        chosen = [m for m in asked if m != "flow" or methods or _fits(check_size, len(tokens), source.n_layers)]
        maps = tuple(m.replace("-", "_") for m in chosen if m in ("value-zeroing-rollout", "alti")) + ("attention_gradient",)
        selection = spec.select(
            source, everything=True, keep="weights", rollout="rollout" in chosen, flow="flow" in chosen, norms="norms" in chosen,
            maps=maps, target_label=target[0], target_token=target[1],
        )  # fmt: skip
        trace = source.run(text, selection)
        assert trace.explained is not None
        deletions = Deletions(source.checkpoint, trace.tokens, trace.explained, how)
        candidates = deletions.candidates()
        if not candidates:
            raise UsageError(f"{text!r} has no token to delete but special ones and the target's position")
        sizes = f.cut_sizes(len(candidates))
        per_text.append([deletions.curve(m, f.ranking(f.map_row(trace, m, trace.explained.position), candidates), sizes) for m in chosen])
        randoms.append(f.averaged("random", [deletions.curve("random", r, sizes) for r in f.random_rankings(candidates)]))
        targets.append(trace.explained)
    names = [c.method for c in per_text[0]]
    curves = [f.averaged(name, [curves[i] for curves in per_text]) for i, name in enumerate(names)]
    return f.Faithfulness(tuple(f.ranked(curves)), f.averaged("random", randoms), tuple(targets), how)


def _fits(check: Any, n_tokens: int, n_layers: int) -> bool:
    """Whether attention flow is quick enough for this text (the default methods leave it out otherwise, with a note)."""
    try:
        check(n_tokens, n_layers)
    except TooLargeError:
        typer.echo(f"note: flow left out: {n_tokens} tokens through {n_layers} layers would take too long (--methods flow asks for it)", err=True)
        return False
    return True


def _picture(result: Any, output: Path, dpi: int, *, clobber: bool) -> None:
    from attn_cli.render.picture.canvas import write_figure
    from attn_cli.render.picture.faithfulness import curves_figure
    from attn_cli.runtime.files import atomic_writer

    fig = curves_figure(result, dpi=dpi)
    fmt = output.suffix.lower().lstrip(".")
    with atomic_writer(output, clobber=clobber) as out:
        write_figure(fig, out, fmt)
    report_written(output, lambda: picture_detail(fig, fmt))
