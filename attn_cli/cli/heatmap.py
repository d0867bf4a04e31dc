"""`attn-cli heatmap`: attention pictures (PNG, SVG, PDF) for slides and papers.

The figure is drawn by ``attn_cli.render.picture.heatmap`` (pure, headless); this
command picks the file names, writes each file atomically and prints the
paths on stdout, one per line, so scripts can capture them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.documents import KeysOption, Pool, PoolOption, QueriesOption, WindowOption, long_selection, span
from attn_cli.cli.panels import DISPLAY, OUTPUT
from attn_cli.cli.params import DpiOption, GenerateOption, RolloutOption
from attn_cli.cli.options import (
    NoClobberOption, TargetLabelOption, TargetTokenOption, check_model_only, opened, output_option, run_texts, shared_options,
)  # fmt: skip
from attn_cli.cli.output import output_target, picture_detail, progress, replaced_note, replaces_unnamed, report_written, stdout_is_terminal
from attn_cli.runtime.errors import UsageError
from attn_cli.render.picture.kinds import ATTRIBUTIONS, COMBINED, FORMATS, What, json_name
from attn_cli.sources.spec import SourceSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from attn_cli.records.trace import Trace

DEFAULT_FORMAT = "png"
SLUG_WORDS = 8
SLUG_CHARS = 60
FALLBACK_STEM = "attention"  # for a text with no ASCII letters or digits


def parse_size(value: Optional[str]) -> Optional[tuple[float, float]]:
    """'8x6' (inches) -> (8.0, 6.0)."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*[x×X,]\s*(\d+(?:\.\d*)?|\.\d+)\s*", value)
    if not match:
        raise typer.BadParameter(f"{value!r} is not WIDTHxHEIGHT in inches, e.g. 8x6 or 10.5x7")
    width, height = float(match.group(1)), float(match.group(2))
    if not (0.5 <= width <= 200 and 0.5 <= height <= 200):
        raise typer.BadParameter(f"{value!r}: each side must be from 0.5 to 200 inches")
    return width, height


# heatmap's own options: the picture
PictureOutputOption = output_option(
    "Write the picture here; the extension picks the format (.png, .svg, .pdf). An existing folder "
    "gets the default name inside it. [default: a name made from the text's first words, .png]"
)
WhatOption = Annotated[
    What,
    typer.Option(
        "--what",
        "-w",
        help="weights: softmax, on a fixed 0..1 scale. scores: raw Q·K^T; scaled: the softmax input; both on a "
        "diverging map centred on 0. all: the three side by side (one column per matrix, one row per head). "
        "norms: value-weighted norms ||a f(x)|| (see --norms; one layer, or the model view). rollout: as --rollout. "
        "flow: attention flow through the layers (Abnar & Zuidema 2020; short texts). value-zeroing: one layer's "
        "value-zeroing map (Mohebbi et al. 2023); value-zeroing-rollout, alti: value zeroing's and ALTI's maps "
        "multiplied through the layers (Ferrando et al. 2022); a trained model's (--model).",
        rich_help_panel=DISPLAY,
        case_sensitive=False,
    ),
]
SplitHeadsOption = Annotated[
    bool,
    typer.Option("--split-heads", help="One file per head (NAME.head0.png, NAME.head1.png, ...) instead of a grid; with several layers, each file is that head's column of layers.", rich_help_panel=DISPLAY),
]
PerHeadScaleOption = Annotated[
    bool,
    typer.Option("--per-head-scale", help="Give each head its own colour scale (default: one scale shared by all heads).", rich_help_panel=DISPLAY),
]
LogOption = Annotated[
    bool,
    typer.Option("--log", help="Weights on a log colour scale: long texts spread their weight thin.", rich_help_panel=DISPLAY),
]
AnnotateOption = Annotated[
    Optional[bool],
    typer.Option(
        "--annotate/--no-annotate",
        help="Write the values in the cells. [default: when the cells are big enough to read them]",
        rich_help_panel=DISPLAY,
        show_default=False,
    ),
]
CmapOption = Annotated[
    Optional[str],
    typer.Option("--cmap", help="A matplotlib colour map. [default: viridis for weights, RdBu_r for scores]", rich_help_panel=DISPLAY, show_default=False),
]
SizeOption = Annotated[
    Optional[str],
    typer.Option("--size", help="Figure size WIDTHxHEIGHT in inches, e.g. 8x6. [default: grows with the text]", rich_help_panel=OUTPUT, show_default=False),
]
OpenOption = Annotated[
    bool,
    typer.Option("--open", help="Open each picture in a window (needs a display); writes a file only with -o.", rich_help_panel=OUTPUT),
]
# --open's first name, kept working for a while: `run --show` picks tables, and one name has one meaning
OldShowOption = Annotated[bool, typer.Option("--show", hidden=True)]
SHOW_NOTE = "note: heatmap --show is now --open; --show will go"


class HeatmapCommand(AttnCommand):
    """heatmap, whose --show (now --open) takes no value: ``heatmap --show weights``, run's
    --show on heatmap, is one line that names what heatmap takes instead."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _refuse_show_tables(args)
        return super().parse_args(ctx, args)


def _refuse_show_tables(args: list[str]) -> None:
    """A usage error for ``--show NAMES`` or ``--show=NAMES`` where NAMES are run's tables or
    --what's matrices; another word after --show stays the TEXT, as it always was."""
    from attn_cli.render.terminal.tables import parse_show

    matrices = [w.value for w in What]
    for i, arg in enumerate(args):
        if arg == "--":
            return
        value = arg.partition("=")[2] if arg.startswith("--show=") else args[i + 1] if arg == "--show" and i + 1 < len(args) else None
        if value is None:
            continue
        parts = [part.strip().lower() for part in value.split(",")]
        try:
            parse_show([value])
        except ValueError:
            if not all(part in matrices for part in parts):
                continue
        matrix = parts[0] if len(parts) == 1 and parts[0] in matrices else "|".join(matrices)
        raise UsageError(f"heatmap --show {value}: heatmap picks its matrix with --what (--what {matrix}) and opens a window with --open")


@app.command(cls=HeatmapCommand)
@shared_options(saved=True)
def heatmap(
    spec: SourceSpec, texts: list[str], lines: bool, output: PictureOutputOption = None, no_clobber: NoClobberOption = False,
    what: WhatOption = What.weights, split_heads: SplitHeadsOption = False, per_head_scale: PerHeadScaleOption = False,
    log: LogOption = False, annotate: AnnotateOption = None, cmap: CmapOption = None, dpi: DpiOption = 150,
    size: SizeOption = None, open_window: OpenOption = False, show: OldShowOption = False, rollout: RolloutOption = False,
    generate: GenerateOption = 0, query: QueriesOption = None, pool: PoolOption = Pool.max, window: WindowOption = None,
    keys: KeysOption = None, target_label: TargetLabelOption = None, target_token: TargetTokenOption = None,
) -> None:  # fmt: skip
    """Draw attention as a heatmap: query tokens on the rows, key tokens on the columns.

    Prints the path of each file it writes, one per line (just the paths when
    stdout is not a terminal). Masked (future) cells of a causal run are grey.

    With --model and several layers (--layer all, --layer 0-2), one picture of
    the whole model: a row per layer, a column per head (every head unless
    --head chooses), all on the same 0..1 weights scale. It draws the weights
    only (--what, --per-head-scale and --annotate are for one layer);
    --split-heads writes one such column per head (NAME.headH.png).

    \b
    Examples:
      attn-cli heatmap "Life is short, eat dessert first"
      attn-cli heatmap "The quick brown fox jumps over the lazy dog" --heads 4 --causal -o fox.svg
      attn-cli heatmap "I saw a saw" --tokenizer words --what all --head 0 -o saw.pdf
      attn-cli heatmap --file sample_texts/tutorials.txt --lines -o tutorial.png
      attn-cli heatmap "The cat sat on the mat" --model "$M" --layer all -o model.svg
      attn-cli heatmap --from saved.json --layer all -o model.png
      attn-cli heatmap "The cat sat on the mat" --model "$M" --rollout -o rollout.png
      attn-cli heatmap "The cat sat on the mat" --model "$M" --what norms --layer all -o norms.png
      attn-cli heatmap --file chapter.txt --model ~/models/qwen3 --query last:8 -o strips.png
    """
    # Everything the options alone can tell is checked before any computation.
    picture_size = parse_size(size)
    folder, fixed_name, suffix = output_target(output, FORMATS, "a picture format")
    if show:
        typer.echo(SHOW_NOTE, err=True)
    open_window = open_window or show
    if open_window:
        _check_display()

    from attn_cli.render.picture.panels import HeatmapOptions, colour_map

    check_model_only(spec, **{"--generate": generate})
    kind = _kind(what, rollout, split_heads, saved=spec.saved is not None)
    if cmap is not None:
        colour_map(cmap)
    source = opened(spec)
    selection, model_view = _selection(spec, source, kind, generate, (target_label, target_token))
    shown_heads = list(selection.heads)
    options = HeatmapOptions(
        what=kind, per_head_scale=per_head_scale, annotate=annotate, cmap=cmap, size=picture_size, dpi=dpi, log=log
    )
    draw = _drawer(options, len(selection.layers), shown_heads, model_view=model_view, split_heads=split_heads)
    selection, draw = _at_any_length(selection, draw, kind, query, pool, window, keys)
    pictures = [(h, (h,)) for h in shown_heads] if split_heads else [(None, tuple(shown_heads))]
    files = _Files(folder, fixed_name, suffix, output, clobber=not no_clobber, open_window=open_window)
    _write_pictures(run_texts(spec, source, texts, selection), len(texts), files, draw, options, pictures, split_heads=split_heads,
                    stack=spec.stack, numbered=len(texts) > 1 or lines)  # fmt: skip


def _at_any_length(
    selection: Any, draw: Callable[..., Any], kind: What, query: list[str] | None, pool: Pool, window: str | None, keys: str | None
) -> tuple[Any, Callable[..., Any]]:  # fmt: skip
    """The weights of a long text: its tables where they fit, else a pooled map of each head computed
    in blocks; drawn pooled past POOL_ABOVE tokens, as strips of the --query rows, or a --window."""
    from attn_cli.render.picture.pooled import POOL_ABOVE, LongView, long_figure

    asked = query is not None or window is not None
    if kind is not What.weights:
        if asked:
            raise UsageError(f"--query and --window draw the weights; --what {kind.value} draws the whole table: drop one")
        if keys is not None:
            raise UsageError("--keys chooses the columns of a --window: give --window A:B too")
        return selection, draw
    selection = long_selection(selection, query, pool, window, keys)

    def drawn(trace: Trace, options: Any, new_figure: Any = None) -> Any:
        summary = bool(trace.layers) and not hasattr(trace.layers[0], "weights")  # its tables were not kept
        if not (asked or summary or len(trace.tokens) > POOL_ABOVE):
            return draw(trace, options, new_figure=new_figure)
        n = len(trace.tokens)
        view = LongView(how=pool.value, window=span(window, n, "--window"), keys=span(keys, len(trace.own_stack.key_tokens), "--keys"))
        return long_figure(trace, options, view, new_figure=new_figure)

    return selection, drawn


def _kind(what: What, rollout: bool, split_heads: bool, *, saved: bool) -> What:
    """What the picture draws: --what, or the rollout with --rollout; the combinations refused."""
    kind = what
    if rollout:
        if what not in (What.weights, What.rollout):
            raise UsageError(f"--rollout draws the rollout, and --what {what.value} another matrix: drop one of them")
        kind = What.rollout
    if kind in COMBINED and split_heads:
        raise UsageError(f"--split-heads: the {kind.value} is one matrix for every head together; drop --split-heads")
    if saved and kind not in (What.weights, What.norms, *COMBINED):
        raise UsageError(f"--what {kind.value}: --from re-draws a saved trace from its weights; drop --what")
    return kind


def _drawer(options: Any, n_layers: int, shown_heads: list[int], *, model_view: bool, split_heads: bool) -> Callable[..., Any]:
    """The figure maker, its options checked before anything runs: the model view, or one layer's heads."""
    if model_view:
        from attn_cli.render.picture.model_view import check_model_view, model_view_figure

        check_model_view(options, n_layers, 1 if split_heads else len(shown_heads))
        return model_view_figure
    from attn_cli.render.picture.heatmap import check_options, heatmap_figure

    check_options(options, shown_heads[:1] if split_heads else shown_heads)
    return heatmap_figure


@dataclasses.dataclass(frozen=True)
class _Files:
    """Where the pictures go: a folder, and a fixed name or one made from each text."""

    folder: Path
    fixed_name: str | None
    suffix: str
    output: Path | None
    clobber: bool
    open_window: bool


def _write_pictures(
    traces: Iterator[Trace], n_texts: int, files: _Files, draw: Callable[..., Any], options: Any, pictures: list[tuple[int | None, tuple[int, ...]]],
    *, split_heads: bool, stack: str | None, numbered: bool,
) -> None:  # fmt: skip
    """Each text's pictures, drawn, written and reported one at a time; with --open, in windows too."""
    new_figure = None
    if files.open_window:
        import matplotlib.pyplot as plt

        new_figure = plt.figure
    fmt = files.suffix.lower()
    width = max(3, len(str(n_texts)))
    said: set[str] = set()  # notes already on stderr: a batch says each once
    # On a terminal the "wrote ..." lines are the progress; a bar goes with piped stdout only.
    for index, trace in enumerate(progress(traces, n_texts, stdout_is_live=stdout_is_terminal()), start=1):
        stem = files.fixed_name or slug(trace.text)
        drawn = pictures
        if len(trace.stacks) > 1 or stack is not None:  # an encoder-decoder: one stack drawn, its heads
            trace = trace.in_stack(stack)
            drawn = [(h, (h,)) for h in trace.shown_heads] if split_heads else [(None, tuple(trace.shown_heads))]
        if numbered:
            stem = f"{stem}-{index:0{width}d}"
        for split_head, heads in drawn:
            fig = draw(trace, dataclasses.replace(options, heads=heads), new_figure=new_figure)
            if files.open_window and files.output is None:
                continue
            head_part = f".head{split_head}" if split_head is not None else ""
            name = f"{stem}{head_part}.{files.suffix}"
            path = files.folder / name if str(files.folder) not in ("", ".") else Path(name)
            replacing = replaces_unnamed(path, files.output)
            _save(fig, path, fmt, said, clobber=files.clobber)
            if replacing:
                typer.echo(replaced_note(path), err=True)
            report_written(path, functools.partial(picture_detail, fig, fmt))
            if not files.open_window:
                fig.clear()  # a batch keeps one figure alive at a time
    if files.open_window:
        plt.show()


def _selection(spec: SourceSpec, source: Any, kind: What, generate: int, target: tuple[str | None, str | None]) -> tuple[Any, bool]:
    """(what to run and keep, whether the picture is the model view: several layers, not a rollout)."""
    keep = "weights" if kind in (What.weights, What.norms, *COMBINED) else "all"
    selection = spec.select(
        source, everything=False, keep=keep, rollout=kind is What.rollout, flow=kind is What.flow, norms=kind is What.norms, generate=generate,
        maps=(json_name(kind),) if kind in ATTRIBUTIONS else (), target_label=target[0], target_token=target[1],
    )
    if kind is What.value_zeroing and len(selection.layers) > 1:
        raise UsageError("--what value-zeroing draws one layer's map: give one --layer (value-zeroing-rollout multiplies them)")
    model_view = len(selection.layers) > 1 and kind not in COMBINED  # a rollout or flow through the last kept layer is one matrix
    if model_view and not spec.heads.given:
        # The model view compares every head at a glance; --head still chooses.
        selection = dataclasses.replace(selection, heads=tuple(range(source.n_heads)))
    return selection, model_view


def slug(text: str) -> str:
    """Safe file stem from the first words: 'Life is short, eat...' -> 'life-is-short-eat...'."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    words = re.findall(r"[a-z0-9]+", plain)[:SLUG_WORDS]
    stem = ""
    for word in words:
        longer = f"{stem}-{word}" if stem else word
        if len(longer) > SLUG_CHARS:
            break
        stem = longer
    if not stem and words:
        stem = words[0][:SLUG_CHARS]
    return stem or FALLBACK_STEM


def _save(fig: Figure, path: Path, fmt: str, said: set[str], *, clobber: bool) -> None:
    from attn_cli.runtime.files import atomic_writer
    from attn_cli.render.picture.fonts import MISSING_GLYPHS
    from attn_cli.render.picture.canvas import write_figure

    with atomic_writer(path, clobber=clobber) as f:
        notes = write_figure(fig, f, fmt)
    for note in notes:
        # The missing-font note names the first picture's characters; the advice is the same for all.
        key = MISSING_GLYPHS if note.startswith(MISSING_GLYPHS) else note
        if key not in said:
            said.add(key)
            typer.echo(note, err=True)


def _check_display() -> None:
    """--open needs a screen and a GUI toolkit; say so at once rather than hang or do nothing."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise UsageError("--open needs a display, and this session has none ($DISPLAY is not set); drop --open to write a file")
    import matplotlib

    backend = matplotlib.get_backend().lower()
    if backend in ("agg", "pdf", "svg", "ps", "cairo", "pgf", "template") or backend.startswith("module://matplotlib_inline"):
        raise UsageError(
            f"--open cannot open a window: matplotlib found no usable display or GUI toolkit (backend {backend}); "
            f"drop --open to write a file"
        )
