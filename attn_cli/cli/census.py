"""`attn-cli census`: per-head statistics over a corpus, as the papers define them."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.options import Format, FormatOption, NoClobberOption, OutputOption, choose_format, shared_options
from attn_cli.cli.panels import ANALYSIS, INPUT, OUTPUT
from attn_cli.cli.params import NoColorOption, PrecisionOption
from attn_cli.render.picture.kinds import FORMATS
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.spec import SourceSpec

if TYPE_CHECKING:
    from attn_cli.sources.census import Census

CorpusArgument = Annotated[
    str,
    typer.Argument(
        help="The corpus: a text file (one text per line), JSON Lines (.jsonl, .ndjson; the text in --field), a folder of "
        ".txt/.md files (one text each), a Parquet file (the --field column), or '-' for standard input (one text per line).",
        show_default=False,
    ),
]
FieldOption = Annotated[str, typer.Option("--field", help="JSON Lines and Parquet: the field that holds the text.", rich_help_panel=INPUT)]
LimitOption = Annotated[
    Optional[int], typer.Option("--limit", help="Only the first N texts.", min=1, show_default=False, rich_help_panel=INPUT)
]
SampleOption = Annotated[
    Optional[int],
    typer.Option("--sample", help="A sample of N texts, drawn with --seed, in corpus order.", min=1, show_default=False, rich_help_panel=INPUT),
]
WindowTokensOption = Annotated[
    Optional[int],
    typer.Option(
        "--window",
        help="A text longer than the model's positions is cut into windows of N tokens (default: the positions less the "
        "special tokens), each wrapped in the special tokens and counted as a text.",
        min=1, show_default=False, rich_help_panel=INPUT,
    ),  # fmt: skip
]
StrideOption = Annotated[
    Optional[int],
    typer.Option("--stride", help="A window every S tokens (default: --window's N; less overlaps them).", min=1, show_default=False, rich_help_panel=INPUT),
]
MergeFolderArgument = Annotated[
    Optional[str], typer.Argument(help="With CORPUS 'merge': the folder of shards to merge again.", show_default=False)
]
ShardsOption = Annotated[
    Optional[Path],
    typer.Option("--shards", help="Where each shard of texts is written as it is done (default: beside -o, NAME.shards/; "
                 "without -o a temporary folder, kept if the run is interrupted).", show_default=False, rich_help_panel=OUTPUT),
]  # fmt: skip
ResumeOption = Annotated[
    Optional[Path],
    typer.Option("--resume", help="Finish the census whose shards are in DIR: only the missing shards run.", show_default=False,
                 rich_help_panel=OUTPUT),
]  # fmt: skip
ShardSizeOption = Annotated[
    int,
    typer.Option("--shard-size", help="Texts a shard holds: what a worker runs at once, batching texts of similar lengths, "
                 "and what --resume runs again.", min=1, rich_help_panel=OUTPUT),
]  # fmt: skip
WorkersOption = Annotated[
    Optional[int],
    typer.Option("--workers", help="Local processes that run the shards, each opening the model once (default: the CPUs this "
                 "process may use, cgroup limits included; 1 runs them here).", min=1, show_default=False, rich_help_panel=ANALYSIS),
]  # fmt: skip
AgainstOption = Annotated[
    Optional[str],
    typer.Option("--against", help="A second checkpoint of the same tokenizer, layers and heads (a base and its fine-tune): each "
                 "head's cosine of the flattened maps and its rows' total variation from it, and the heads that changed most.",
                 show_default=False, rich_help_panel=ANALYSIS),
]  # fmt: skip
RayOption = Annotated[
    bool,
    typer.Option("--ray", help="Run the shards as tasks on a Ray cluster (--ray-address, else RAY_ADDRESS, else a local Ray); "
                 "--workers actors, default the cluster's CPUs. Needs pip install 'attn-cli[ray]'.", rich_help_panel=ANALYSIS),
]  # fmt: skip
RayAddressOption = Annotated[
    Optional[str], typer.Option("--ray-address", help="With --ray: the cluster to join (ray://HOST:PORT or auto).", show_default=False,
                                rich_help_panel=ANALYSIS),
]  # fmt: skip
EpsilonOption = Annotated[
    float,
    typer.Option("--epsilon", help="A text's sink score above it counts toward the sink rate (Gu et al. 2024).", min=0.0, max=1.0, rich_help_panel=ANALYSIS),
]
PROGRESS_EVERY = 10.0  # seconds between plain progress lines when stderr is not a terminal


@app.command(cls=AttnCommand)
@shared_options(emit_python=False, hide_tokens=False, corpus=True)
def census(
    ctx: typer.Context,
    spec: SourceSpec,
    corpus: CorpusArgument,
    merge_folder: MergeFolderArgument = None,
    field: FieldOption = "text",
    limit: LimitOption = None,
    sample: SampleOption = None,
    window: WindowTokensOption = None,
    stride: StrideOption = None,
    epsilon: EpsilonOption = 0.3,
    against: AgainstOption = None,
    workers: WorkersOption = None,
    ray: RayOption = False,
    ray_address: RayAddressOption = None,
    shards: ShardsOption = None,
    shard_size: ShardSizeOption = 256,
    resume: ResumeOption = None,
    format: FormatOption = Format.auto,
    output: OutputOption = None,
    no_clobber: NoClobberOption = False,
    precision: PrecisionOption = 3,
    no_color: NoColorOption = False,
) -> None:
    """Every head of every layer over a corpus: the measures of Clark et al. 2019 (attention to
    [CLS], [SEP], punctuation, the previous and next token, entropy), Gu et al. 2024 (sink score and
    rate), Voita et al. 2019 (confidence, positional heads) and the distance profile, averaged over
    every query row of every text, with standard errors, flags and examples (docs/census.md). An
    encoder-decoder (BART, T5, Marian) is read through its encoder, each text its source.

    \b
    Examples:
      attn-cli census sample_texts/tutorials.txt --model "$M" -o census.json
      attn-cli census corpus.jsonl --field body --model ~/models/gpt2 --sample 1000 --seed 7 -F csv -o heads.csv
      attn-cli census docs/ --model "$M" --limit 200
      attn-cli census merge census.shards -o census.json      # the shards of a run, merged again
    """
    from attn_cli.cli.census_shards import merged

    drawn = output is not None and output.suffix.lower().lstrip(".") in (*FORMATS, "html")
    chosen = Format.json if drawn else choose_format(format, output, table_asked=False)
    if corpus == "merge" or merge_folder is not None:
        if corpus != "merge" or merge_folder is None:
            raise UsageError("census takes one CORPUS; `census merge DIR` merges a folder of shards")
        _write(merged(Path(merge_folder)), chosen, output, precision=precision, no_color=no_color, clobber=not no_clobber, ctx=ctx)
        return
    _check_spec(spec)
    if ray_address is not None and not ray:
        raise UsageError("--ray-address names the Ray cluster of --ray: add --ray")
    engine = (ray, ray_address, workers)
    made = _run(spec, corpus, (field, limit, sample, window, stride, epsilon, against), engine, (shards, shard_size), resume, output)
    _write(made, chosen, output, precision=precision, no_color=no_color, clobber=not no_clobber, ctx=ctx)


def _check_spec(spec: SourceSpec) -> None:
    if spec.layers.given or spec.heads.given:
        raise UsageError("census reads every layer and head; drop --layer and --head (pick heads from its JSON with jq)")
    if spec.pair is not None or spec.target is not None or spec.truncate:
        raise UsageError("census reads each text alone: drop --pair, --target and --truncate (long texts are cut into --window's windows)")


def _run(
    spec: SourceSpec, corpus: str, options: tuple[Any, ...], engine: tuple[bool, str | None, int | None],
    sharding: tuple[Path | None, int], resume: Path | None, output: Path | None,
) -> Census:  # fmt: skip
    """The census, its shards written as they are done (and kept, with a line that says how to go on,
    where the run is interrupted), then merged."""
    import attn_cli.cli.census_shards as census_shards
    import attn_cli.cli.census_workers as census_workers
    from attn_cli.pipeline import open_source
    from attn_cli.runtime import interrupts
    from attn_cli.sources.census import windows_for
    from attn_cli.text.corpus import read_corpus

    field, limit, sample, window, stride, epsilon, against = options
    shards, shard_size = sharding
    read = read_corpus(corpus, field=field, limit=limit, sample=sample, seed=spec.config.seed)
    source = open_source(spec)
    other = _against(spec, source, against)
    windows = windows_for(source, window, stride)
    if read.skipped or read.empty:
        typer.echo(f"note: {len(read.entries)} texts kept; skipped {read.empty} empty and {len(read.skipped)} unreadable "
                   f"(listed in the JSON's skipped)", err=True)  # fmt: skip
    folder, keep = (resume, True) if resume is not None else census_shards.shard_folder_for(output, shards)
    made = {"field": field, "limit": limit, "sample": sample, "seed": spec.config.seed, "epsilon": epsilon, "model": spec.model,
            "dtype": spec.dtype, "window": None if windows is None else [windows.size, windows.stride], "against": against}  # fmt: skip
    manifest = census_shards.manifest_of(read, made, windows, shard_size)
    folder_of = census_shards.prepare(folder, manifest, resume=resume is not None, fresh=shards is None and resume is None)
    again = f"census: the shards done are in {folder}; run the same command with --resume {folder} to finish\n".encode()
    ray, address, workers = engine
    count = (0 if ray else census_workers.cpu_count()) if workers is None else workers
    missing = sum(len(folder_of.shards[k]) for k in folder_of.missing())  # texts a resumed run has left
    with interrupts.undo_on_exit(again), Progress(len(read.entries), done=len(read.entries) - missing) as bar:
        census_shards.run_shards(spec, source, read, folder_of, windows=windows, epsilon=epsilon, workers=count, progress=bar.update,
                                   against=other, ray=(ray, address))
    result = census_shards.merged(folder)
    census_shards.finish(folder, keep)
    if result.cut:
        typer.echo(f"note: {result.cut} texts were longer than a window and cut into windows of {windows.size} tokens", err=True)  # type: ignore[union-attr]
    return result


def _write(made: Census, chosen: Format, output: Path | None, *, precision: int, no_color: bool, clobber: bool, ctx: Any = None) -> None:
    import json

    from attn_cli.cli.output import binary_output, emit_rich
    from attn_cli.formats.census import census_csv, census_dict

    if output is not None and output.suffix.lower().lstrip(".") in (*FORMATS, "html"):
        _draw(made, output, clobber=clobber, command=_command_line(ctx))
        return
    if chosen is Format.table:
        from attn_cli.render.terminal.census import census_view

        emit_rich([census_view(made, precision=precision)], output, no_color=no_color, clobber=clobber)
        return
    text = json.dumps(census_dict(made), ensure_ascii=False) + "\n" if chosen is Format.json else census_csv(made)
    with binary_output(output, clobber=clobber) as out:
        out.write(text.encode("utf-8"))


def _against(spec: SourceSpec, source: Any, against: str | None) -> tuple[SourceSpec, Any] | None:
    """--against M2: its spec (for the workers) and its source, checked against the model's shape."""
    import dataclasses

    from attn_cli.pipeline import open_source
    from attn_cli.sources.census import check_against

    if against is None:
        return None
    if spec.model is None:
        raise UsageError("--against compares two trained models: give --model too")
    other_spec = dataclasses.replace(spec, model=against, revision=None)
    other = open_source(other_spec)
    check_against(source, other)
    return other_spec, other


def _command_line(ctx: Any) -> str:
    """The command that makes this census again: its arguments and every option not at its default."""
    import shlex

    from attn_cli.cli.html import option_words

    params = ctx.params
    args = ["attn-cli", "census", params["corpus"], *([params["merge_folder"]] if params.get("merge_folder") else [])]
    for param in ctx.command.params:
        if param.param_type_name == "option" and param.name not in ("no_clobber", "debug"):
            args += option_words(param, params.get(param.name))
    return shlex.join(args)


def _draw(made: Census, output: Path, *, clobber: bool, command: str) -> None:
    """-o NAME.png|svg|pdf: the census's pictures; -o NAME.html: its page."""
    import functools

    from attn_cli.cli.output import byte_size, picture_detail, report_written
    from attn_cli.formats.census import census_dict
    from attn_cli.render.picture.canvas import write_figure
    from attn_cli.render.picture.census import census_figure
    from attn_cli.runtime.files import atomic_writer, write_atomic

    data, name = census_dict(made), made.model_name
    fig = census_figure(data, name)
    fmt = output.suffix.lower().lstrip(".")
    if fmt == "html":
        from attn_cli.render.page.census import census_page

        page = census_page(data, name, fig, command=command).encode("utf-8")
        write_atomic(output, page, clobber=clobber)
        report_written(output, lambda: byte_size(len(page)))
        return
    with atomic_writer(output, clobber=clobber) as f:
        notes = write_figure(fig, f, fmt)
    for note in dict.fromkeys(notes):
        typer.echo(note, err=True)
    report_written(output, functools.partial(picture_detail, fig, fmt))


class Progress:
    """Texts done, texts/s, tokens/s and the time left on stderr: a bar on a terminal, else one
    plain line every PROGRESS_EVERY seconds."""

    def __init__(self, total: int, done: int = 0) -> None:
        self.total, self.texts, self.tokens, self.done = total, 0, 0, done  # done: texts a resumed run finds done
        self.start = self.last = time.monotonic()
        self.bar: Any = None

    def __enter__(self) -> Progress:
        from attn_cli.cli.output import _isatty

        if _isatty(sys.stderr):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self.bar = Bar(TextColumn("texts"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                           TimeRemainingColumn(), console=Console(stderr=True), transient=True, redirect_stdout=False,
                           redirect_stderr=False)  # fmt: skip
            self.bar.__enter__()
            self.task = self.bar.add_task("texts", total=self.total, completed=self.done, rate="")
        return self

    def update(self, texts: int, tokens: int) -> None:
        self.texts += texts
        self.tokens += tokens
        now = time.monotonic()
        seconds = max(now - self.start, 1e-9)
        rate = f"{self.texts / seconds:,.1f} texts/s, {self.tokens / seconds:,.0f} tokens/s"
        if self.bar is not None:
            self.bar.update(self.task, advance=texts, rate=rate)
        elif now - self.last >= PROGRESS_EVERY:
            self.last = now
            left = (self.total - self.done - self.texts) / max(self.texts / seconds, 1e-9)
            print(f"census: {self.done + self.texts}/{self.total} texts, {rate}, about {left:,.0f} s left", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
