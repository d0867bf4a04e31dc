"""`attn-cli run`: tables for people, JSON/CSV for scripts."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.documents import NoTablesOption, QueriesOption, TableDtypeOption, TablesFileOption
from attn_cli.cli.panels import DISPLAY
from attn_cli.cli.params import (
    KeyOption,
    NoColorOption,
    NormsOption,
    FittingPrecisionOption,
    GenerateOption,
    PredictOption,
    RolloutOption,
)
from attn_cli.cli.options import (
    opened,
    Format,
    FormatOption,
    MapsOption,
    NoClobberOption,
    OutputOption,
    TargetLabelOption,
    TargetTokenOption,
    check_model_only,
    choose_format,
    run_texts,
    shared_options,
)
from attn_cli.cli.output import binary_output, byte_size, emit_rich, progress, stdout_is_terminal, wrote
from attn_cli.records.results import attribution_maps
from attn_cli.runtime.errors import UsageError, in_batch
from attn_cli.sources.spec import SourceSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from attn_cli.sources.base import Source
    from attn_cli.records.selection import Selection, Tables
    from attn_cli.records.trace import Trace


def _parse_show(values: Optional[list[str]]) -> Optional[frozenset[str]]:
    """--show's table names, None when not given: the tables module (and rich with it)
    loads only when --show is given, not on the way to JSON or CSV."""
    if values is None:
        return None
    from attn_cli.render.terminal.tables import parse_show

    return parse_show(values)


def _check_show(values: Optional[list[str]]) -> Optional[list[str]]:
    try:
        _parse_show(values)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    return values


def _complete_show(incomplete: str) -> list[str]:
    """Tab on --show, comma-aware: "scores,we" completes to "scores,weights"."""
    from attn_cli.render.terminal.cells import SHOW_CHOICES

    done, _, last = incomplete.rpartition(",")
    chosen = set(done.split(",")) if done else set()
    return [f"{done}," * bool(done) + name for name in (*SHOW_CHOICES, "all") if name.startswith(last) and name not in chosen]


# run's own option: the tables the view draws
ShowOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--show",
        help="Tables to draw, comma-separated or repeated: tokens, embeddings, qkv, scores (raw Q K^T), "
        "scaled (softmax input), weights, context, output, stats, or all. "
        "Default tokens,weights,stats (+ output with several heads); with --query/--key, just those.",
        rich_help_panel=DISPLAY,
        metavar="TABLES",
        show_default=False,
        callback=_check_show,
        autocompletion=_complete_show,
    ),
]


@app.command(cls=AttnCommand)
@shared_options
def run(
    spec: SourceSpec,
    texts: list[str],
    format: FormatOption = Format.auto,
    show: ShowOption = None,
    query: QueriesOption = None,
    key: KeyOption = None,
    rollout: RolloutOption = False,
    norms: NormsOption = False,
    what: MapsOption = None,
    target_label: TargetLabelOption = None,
    target_token: TargetTokenOption = None,
    predict: PredictOption = 0,
    generate: GenerateOption = 0,
    output: OutputOption = None,
    no_clobber: NoClobberOption = False,
    precision: FittingPrecisionOption = None,
    no_color: NoColorOption = False,
    no_tables: NoTablesOption = False,
    tables_file: TablesFileOption = None,
    table_dtype: TableDtypeOption = "float32",
) -> None:
    """Tokenize, embed and run attention; print scores, weights and context vectors.

    \b
    Examples:
      attn-cli run "Life is short, eat dessert first"
      attn-cli run "I saw a saw" -t words --heads 2 --causal --show scores,scaled,weights
      attn-cli run "I saw a saw" -t words --query saw#3
      echo "The cat sat on the mat" | attn-cli run - --format json | jq '.layers[0].heads[0].weights'
      attn-cli run --file sample_texts/tutorials.txt --lines -o runs.jsonl
      attn-cli run "Hello shiny sun!" --format csv -o hello.csv
      attn-cli run "The cat sat on the mat" --model "$M" --layer 2 --head 0-3
      attn-cli run "The cat sat on the mat" --model "$M" --rollout --norms -F json -o analyses.json
      attn-cli run "The cat sat on the mat" --model "$M" --what rollout,flow
      attn-cli run "The capital of France is" --model ~/models/gpt2 --predict 5 --layer -1 --head 0
      attn-cli run "Once upon a time" --model ~/models/gpt2 --generate 20 -F json | jq .generated_text
      attn-cli run --file chapter.txt --model ~/models/qwen3 --query last:16 -F json -o rows.json
    """
    check_model_only(spec, **{"--predict": predict, "--generate": generate})
    shown = _parse_show(show)
    # --what and --show name them too (--rollout is --what rollout); asked for, they join the default tables
    rollout, norms, flow, maps = _analyses(set(what or ()) | set(shown or ()), rollout, norms, what)
    chosen = _format_of(spec, format, output, show, query, key, rollout)
    tables = _tables_kept(spec, no_tables, rollout or flow or bool(maps), norms)
    source = opened(spec)
    selection = spec.select(
        source, everything=chosen is not Format.table, rollout=rollout, flow=flow, norms=norms, predict=predict, generate=generate,
        queries=tuple(query or ()), tables=tables, row_scores=shown is not None and "scores" in shown, maps=maps,
        target_label=target_label, target_token=target_token,
    )  # fmt: skip
    if chosen is Format.table:
        write = functools.partial(_tables, spec, source, texts=texts, shown=shown, queries=query, key=key, output=output,
                                  precision=precision, no_color=no_color, clobber=not no_clobber)  # fmt: skip
    else:
        write = functools.partial(_write_machine, spec, source, texts=texts, chosen=chosen, output=output, clobber=not no_clobber)
    if tables_file is None:
        write(selection=selection)
    else:
        _with_tables_file(write, spec, selection, texts, tables_file, table_dtype, clobber=not no_clobber)


def _analyses(asked: set[str], rollout: bool, norms: bool, what: list[str] | None) -> tuple[bool, bool, bool, tuple[str, ...]]:
    """(rollout, norms, flow, the attribution maps) that the flags, --what and --show (``asked``) ask for."""
    return rollout or "rollout" in asked, norms or "norms" in asked, "flow" in asked, attribution_maps(what or ())


def _format_of(
    spec: SourceSpec, format: Format, output: Path | None, show: list[str] | None, query: list[str] | None, key: str | None,
    rollout: bool,
) -> Format:  # fmt: skip
    """The output format, and a note where options that shape the table view meet JSON or CSV."""
    stack_shapes = None if rollout else spec.stack  # with --rollout, --stack also chooses the stack rolled out
    # --show scores with --query also gives JSON and CSV those rows' raw scores
    row_scores = query is not None and show is not None and set(_parse_show(show) or ()) == {"scores"}
    shaping = [flag for flag, value in (("--show", None if row_scores else show), ("--key", key), ("--stack", stack_shapes)) if value is not None]
    chosen = choose_format(format, output, table_asked=bool(shaping) or query is not None or spec.heads.given)
    if chosen is not Format.table and shaping:
        changes = f"{', '.join(shaping)} only change{'s' if len(shaping) == 1 else ''} the table view"
        typer.echo(f"note: {changes}; --format {chosen.value} has every number of the chosen layers and heads", err=True)
    return chosen


def _with_tables_file(
    write: Callable[..., None], spec: SourceSpec, selection: Selection, texts: list[str], path: Path, dtype: str, *,
    clobber: bool,
) -> None:  # fmt: skip
    """--tables FILE: ``write`` the run, one text's chosen layers and heads streamed to the file as
    the blocks pass; the file published when all went well, and gone otherwise."""
    from attn_cli.formats.tablefile import TablesSink

    if spec.model is None or len(texts) != 1 or selection.rollout or selection.flow or selection.norms or selection.maps:
        why = "a trained model's layers (--model)" if spec.model is None else "one text" if len(texts) != 1 else "no --rollout or --norms (nor --what)"
        raise UsageError(f"--tables writes one text's tables, in blocks: it needs {why}")
    sink = TablesSink(path, [(layer, head) for layer in selection.layers for head in selection.heads], dtype, clobber=clobber)
    try:
        write(selection=dataclasses.replace(selection, sink=sink))
    except BaseException:
        sink.abort()
        raise
    typer.echo(wrote(sink.path, byte_size(sink.close())), err=True)


def _tables_kept(spec: SourceSpec, no_tables: bool, rollout: bool, norms: bool) -> Tables:
    """What a run keeps of its layers: --rollout (and flow) and --norms read the tables, so they ask for them."""
    if no_tables and spec.model is None:
        raise UsageError("--no-tables computes a trained model's layers in blocks (--model); the toy model keeps its tables")
    if no_tables and (rollout or norms):
        raise UsageError(f"--no-tables keeps statistics only, and {'--rollout' if rollout else '--norms'} reads the tables: drop one")
    return "omit" if no_tables else "keep" if rollout or norms else "fit"


def _write_machine(
    spec: SourceSpec, source: Source, selection: Selection, texts: list[str], chosen: Format, output: Path | None, *, clobber: bool
) -> None:
    """JSON (a line a text) or CSV, streamed: a table at a time, never the whole text (formats.export)."""
    from attn_cli.formats.export import write_csv, write_json

    live = output is None and stdout_is_terminal()
    with binary_output(output, clobber=clobber) as out:
        for i, result in enumerate(progress(run_texts(spec, source, texts, selection), len(texts), stdout_is_live=live)):
            if chosen is Format.json:
                write_json(result, out)
                out.write(b"\n")
            else:
                write_csv(result, out, header=i == 0, index=i)


def _shown_position(trace: Trace, position: int, flag: str) -> int:
    """A token's place among the tokens the tables show (the same unless --hide-tokens hides some)."""
    hiding = trace.hiding
    if hiding is None or not hiding.active:
        return position
    if position in hiding.hidden:
        raise UsageError(f"{flag}: {trace.tokens.labels[position]} (position {position}) is hidden by --hide-tokens; follow a token that is shown")
    return hiding.kept.index(position)


def _tables(
    spec: SourceSpec,
    source: Source,
    selection: Selection,
    texts: list[str],
    shown: frozenset[str] | None,
    queries: list[str] | None,
    key: str | None,
    output: Path | None,
    precision: int | None,
    no_color: bool,
    *,
    clobber: bool,
) -> None:
    from attn_cli.cli.inputs import resolve_position
    from attn_cli.records.positions import is_span
    from attn_cli.render.terminal.cells import DEFAULT_PRECISION, DEFAULT_SHOW, FOCUSED_SHOW, View
    from attn_cli.render.terminal.rows import rows_view
    from attn_cli.render.terminal.tables import human_view, more_hint

    # one token (--query TOKEN) focuses the tables on it; several rows, or a range, list each row's strongest keys
    query = queries[0] if queries is not None and len(queries) == 1 and not is_span(queries[0]) else None
    focused = query is not None or key is not None
    base = View(
        # asked for, the rollout and norms join the default tables
        show=shown if shown is not None else FOCUSED_SHOW if focused else DEFAULT_SHOW | {
            name for name, on in (("rollout", selection.rollout), ("norms", selection.norms), ("flow", selection.flow)) if on
        },
        explicit=shown is not None,
        precision=DEFAULT_PRECISION if precision is None else precision,
        fit_precision=precision is None,
    )
    # Runs are computed first (under the progress bar), then printed in one go.
    runs = list(progress(run_texts(spec, source, texts, selection), len(texts)))
    parts = []
    for i, result in enumerate(runs):
        view = base
        result = result.in_stack(spec.stack)  # an encoder-decoder: one stack's tables (JSON and CSV have all)
        if result.tables_omitted is not None or (queries and query is None):
            parts.append(rows_view(result, DEFAULT_PRECISION if precision is None else precision, index=i, total=len(runs)))
            continue
        if focused:
            rows, columns = result.tokens, result.own_stack.key_tokens  # cross-attention: --key names a source token
            try:
                view = dataclasses.replace(
                    base,
                    query=None if query is None else _shown_position(result, resolve_position(query, rows.texts, rows.labels, "--query"), "--query"),
                    key=None if key is None else _shown_position(result, resolve_position(key, columns.texts, columns.labels, "--key"), "--key"),
                )
            except UsageError as err:
                raise in_batch(err, i, len(texts))
        parts.append(human_view(result, view, index=i, total=len(runs)))
    if shown is None and not focused:
        parts.append(more_hint(base))
    emit_rich(parts, output, no_color=no_color, clobber=clobber)

