"""`attn-cli heads`: what every head does, as a table, JSON or CSV."""

from __future__ import annotations

import dataclasses
import functools
import enum

from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.panels import ANALYSIS, DISPLAY
from attn_cli.cli.params import GenerateOption, NoColorOption, PrecisionOption
from attn_cli.cli.options import (
    Format,
    FormatOption,
    NoClobberOption,
    OutputOption,
    check_model_only,
    choose_format,
    run_texts,
    shared_options,
)
from attn_cli.cli.output import binary_output, emit_rich, picture_detail, progress, report_written, stdout_is_terminal
from attn_cli.render.picture.kinds import FORMATS
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.spec import SourceSpec
from attn_cli.pipeline import open_source

if TYPE_CHECKING:
    from attn_cli.analysis.headroles import HeadScores, Probe
    from attn_cli.sources.base import Source
    from attn_cli.analysis.headroles import HeadsReport
    from attn_cli.records.selection import Selection
    from attn_cli.records.trace import Trace


class Ablate(str, enum.Enum):
    """--ablate: what a head's output is replaced with."""

    zero = "zero"
    mean = "mean"


# heads' own options
NoProbeOption = Annotated[
    bool,
    typer.Option("--no-probe", help="Score the text only: no induction or duplicate scores.", rich_help_panel=ANALYSIS),
]
ProbeLengthOption = Annotated[
    Optional[int],
    typer.Option(
        "--probe-length",
        help="R: the probe is the leading special tokens, R random token ids (drawn with --seed), then the same R again. "
        "Default: 50, or as many as a model with fewer positions takes.",
        min=2,
        max=4096,
        show_default=False,
        rich_help_panel=ANALYSIS,
    ),
]
TopOption = Annotated[int, typer.Option("--top", help="Heads listed per role in the table.", min=1, max=1000, rich_help_panel=DISPLAY)]
AblateOption = Annotated[
    Optional[Ablate],
    typer.Option(
        "--ablate",
        help="Also each head's change in mean next-token loss (nats) when its output, its slice of W_o's input, "
        "is set to zero or to its mean over the text (decoders with a language-model head). -o NAME.png|svg|pdf "
        "draws the layers x heads grid of the changes.",
        rich_help_panel=ANALYSIS,
        case_sensitive=False,
        show_default=False,
    ),
]


@app.command(cls=AttnCommand)
@shared_options(emit_python=False, saved=True)
def heads(
    spec: SourceSpec,
    texts: list[str],
    format: FormatOption = Format.auto,
    no_probe: NoProbeOption = False,
    probe_length: ProbeLengthOption = None,
    top: TopOption = 5,
    generate: GenerateOption = 0,
    ablate: AblateOption = None,
    output: OutputOption = None,
    no_clobber: NoClobberOption = False,
    precision: PrecisionOption = 3,
    no_color: NoColorOption = False,
) -> None:
    """Score every head of every layer and give it a role: previous, first, self,
    duplicate, induction, broad or mixed.

    On the text: self_mass, previous_mass, first_mass, mean_entropy_bits (as
    `run` defines them) and special_mass. On a probe (random token ids, then the
    same ids again): induction_score and duplicate_score. The roles' thresholds
    are in docs/heads.md.

    \b
    Examples:
      attn-cli heads "The cat sat on the mat" --model "$M"
      attn-cli heads "The cat sat on the mat" --model ~/models/gpt2 --format json | jq '.heads[] | select(.role == "induction")'
      attn-cli heads "I saw a saw" --heads 4 --causal
      attn-cli heads --file texts.txt --lines --model "$M" -o heads.csv
    """
    check_model_only(spec, **{"--generate": generate, "--ablate": ablate is not None})
    picture = output is not None and output.suffix.lower().lstrip(".") in FORMATS
    if picture and ablate is None:
        raise UsageError(f"-o {output}: heads draws a picture of --ablate's losses; add --ablate zero|mean, or write .json, .csv or .txt")
    chosen = Format.json if picture else choose_format(format, output, table_asked=False)
    source = open_source(spec)
    if ablate is not None:
        _check_ablation(source)
    for note in source.notes:
        typer.echo(note, err=True)
    # the scores read the weights, and norm_special_mass the norms (a saved trace has its own, or none)
    # at any length: where the tables do not fit, the scores come from statistics gathered in blocks
    selection = spec.select(source, everything=True, keep="weights", norms=spec.saved is None, generate=generate, tables="fit")
    probe, probe_note = None, "--no-probe" if no_probe else None
    if not no_probe:
        probe, probe_note = _make_probe(source, probe_length, spec.config.seed)
        if probe_note is not None:
            typer.echo(f"note: no probe: {probe_note}; the text's scores still come", err=True)
    live = output is None and stdout_is_terminal()
    numbered = len(texts) > 1
    traces = progress(run_texts(spec, source, texts, selection), len(texts), stdout_is_live=live and chosen is not Format.table)

    reports = functools.partial(_reports, traces, spec.stack, source, selection, probe, probe_note, ablate)
    if picture:
        assert output is not None
        _pictures(list(reports()), output, clobber=not no_clobber)
        return
    _write_reports(reports(), chosen, output, top=top, precision=precision, no_color=no_color, clobber=not no_clobber, numbered=numbered)


def _check_ablation(source: Source) -> None:
    """--ablate changes a decoder's loss (a decoder-only model's next-token loss, an encoder-decoder's
    target's): an encoder is refused before anything runs."""
    if getattr(getattr(source, "checkpoint", None), "encoder", False):
        raise UsageError(f"--ablate: {source.info.name} is an encoder; the loss it changes is a decoder's next-token loss")


def _reports(
    traces: Iterator[Trace], stack: str | None, source: Source, selection: Selection, probe: Probe | None, probe_note: str | None,
    ablate: Ablate | None,
) -> Iterator[HeadsReport]:  # fmt: skip
    """Each text's head scores; the probe's scores computed with the first (they are the same for every text)."""
    probe_scores = None
    for trace in traces:
        ablation = source.ablate(trace, ablate.value) if ablate is not None else None  # type: ignore[attr-defined]
        trace = trace.in_stack(stack)  # an encoder-decoder: the stack --stack names
        if probe is not None and probe_scores is None:
            probe_scores = _probe_scores(source, probe, selection)
        yield dataclasses.replace(_report(trace, probe, probe_note, probe_scores), ablation=ablation)


def _write_reports(
    reports: Iterator[HeadsReport], chosen: Format, output: Path | None, *, top: int, precision: int, no_color: bool, clobber: bool,
    numbered: bool,
) -> None:  # fmt: skip
    """The reports as the table (computed under the progress bar, then printed in one go), JSON or CSV."""
    from attn_cli.formats import heads as formats
    from attn_cli.render.terminal.heads import heads_view

    if chosen is Format.table:
        done = list(reports)
        parts = [heads_view(r, top=top, precision=precision, index=i, total=len(done)) for i, r in enumerate(done)]
        emit_rich(parts, output, no_color=no_color, clobber=clobber)
        return
    with binary_output(output, clobber=clobber) as out:
        for i, report in enumerate(reports):
            if chosen is Format.json:
                out.write(formats.to_json(report, i if numbered else None).encode("utf-8") + b"\n")
            else:
                out.write(formats.to_csv(report, header=i == 0, index=i).encode("utf-8"))


def _make_probe(source: Source, length: int | None, seed: int) -> tuple[Probe | None, str | None]:
    """The probe of ``length`` repeated ids; None: PROBE_LENGTH, or as many as the model's
    positions take (a default must work on every model; a length asked for is checked)."""
    from attn_cli.analysis.headroles import PROBE_LENGTH, make_probe

    pool = source.probe_pool()
    if isinstance(pool, str):
        return None, pool
    leading, ordinary = pool
    limit = getattr(getattr(source, "info", None), "max_positions", None)
    most = None if limit is None else (limit - len(leading)) // 2
    if length is None:
        length = PROBE_LENGTH if most is None else min(PROBE_LENGTH, most)
        if length < 2:
            return None, f"the model takes {limit} positions, too few for a repeated probe"
    probe = make_probe(leading, ordinary, length, seed)
    if limit is not None and len(probe.ids) > limit:
        raise UsageError(f"--probe-length {length} makes a probe of {len(probe.ids)} tokens; the model takes {limit}: give {most} or less")
    return probe, None


def _probe_scores(source: Source, probe: Probe, selection: Selection) -> dict[int, tuple[list[float], list[float]]]:
    """Per layer: (induction, duplicate) per head, from one run over the probe."""
    from attn_cli.analysis.headroles import probe_scores

    trace = source.trace_ids(probe.ids, dataclasses.replace(selection, norms=False, generate=0))  # the probe's scores read the weights
    stacks = trace.stacks
    layers = stacks["decoder"].layers if len(stacks) > 1 else trace.layers  # an encoder-decoder: the decoder's
    return {layer.layer: probe_scores(layer.weights, probe) for layer in layers}


def _report(
    trace: Trace, probe: Probe | None, probe_note: str | None, scored: dict[int, tuple[list[float], list[float]]] | None
) -> HeadsReport:
    from attn_cli.analysis.headroles import HeadsReport, summary_scores, text_scores, with_probe
    from attn_cli.records.summary import LayerSummary

    heads: list[HeadScores] = []
    for layer in trace.layers:
        chosen = list(trace.shown_heads)
        scores = summary_scores(layer) if isinstance(layer, LayerSummary) else text_scores(
            layer.weights, layer=layer.layer, special=trace.own_stack.key_tokens.special, mask=layer.mask, norms=layer.norms, cross=layer.cross
        )  # fmt: skip
        if scored is not None:
            scores = with_probe(scores, *scored[layer.layer])
        heads += [scores[h] for h in chosen]
    return HeadsReport(trace, tuple(heads), probe, probe_note)


def _pictures(reports: list[HeadsReport], output: Path, *, clobber: bool) -> None:
    """--ablate -o NAME.png: one picture per text (NAME-001.png ... for several)."""
    from attn_cli.runtime.files import atomic_writer
    from attn_cli.render.picture.heads import ablation_figure
    from attn_cli.render.picture.canvas import write_figure

    fmt = output.suffix.lower().lstrip(".")
    for i, report in enumerate(reports, start=1):
        path = output if len(reports) == 1 else output.with_name(f"{output.stem}-{i:03d}{output.suffix}")
        fig = ablation_figure(report)
        with atomic_writer(path, clobber=clobber) as f:
            notes = write_figure(fig, f, fmt)
        for note in dict.fromkeys(notes):
            typer.echo(note, err=True)
        report_written(path, functools.partial(picture_detail, fig, fmt))
