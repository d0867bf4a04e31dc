"""`attn-cli html`: one self-contained page to explore attention in a browser.

The page is built by ``attn_cli.render.page`` (pure: traces in, a string out);
this command picks the file name, writes it atomically, prints its path on
stdout and, with --open, hands it to the system's browser.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.documents import KeysOption, Pool, PoolOption, QueriesOption, WindowOption, long_selection, span
from attn_cli.cli.heatmap import slug
from attn_cli.cli.panels import OUTPUT
from attn_cli.cli.params import GenerateOption, NormsOption, PredictOption, RolloutOption
from attn_cli.cli.options import (
    MapsOption, NoClobberOption, TargetLabelOption, TargetTokenOption, check_model_only, opened, output_option, run_texts, shared_options,
)  # fmt: skip
from attn_cli.cli.output import byte_size, output_target, replaced_note, replaces_unnamed, report_written
from attn_cli.records.results import attribution_maps
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.spec import SourceSpec

SUFFIXES = (".html", ".htm")
DEFAULT_MAX_MB = 20.0
NOT_REPRODUCED = {"no_clobber", "open_page", "debug", "emit_python"}  # options that do not change the page (-o names it: kept)


# html's own options
OpenOption = Annotated[
    bool,
    typer.Option("--open", help="Open the page in the system's web browser once written.", rich_help_panel=OUTPUT),
]
MaxSizeOption = Annotated[
    float,
    typer.Option(
        "--max-size",
        help="Keep the page under this many MB by leaving out later layers' data (the page says what); 0: no limit.",
        min=0,
        rich_help_panel=OUTPUT,
    ),
]


PageOutputOption = output_option(
    "Write the page here (.html). An existing folder gets the default name inside it. "
    "[default: a name made from the text's first words, .html]"
)


@app.command(cls=AttnCommand)
@shared_options(emit_python=False, saved=True)
def html(
    ctx: typer.Context, spec: SourceSpec, texts: list[str], lines: bool, output: PageOutputOption = None,
    no_clobber: NoClobberOption = False, open_page: OpenOption = False, max_size: MaxSizeOption = DEFAULT_MAX_MB,
    rollout: RolloutOption = False, norms: NormsOption = False, what: MapsOption = None, predict: PredictOption = 0, generate: GenerateOption = 0,
    target_label: TargetLabelOption = None, target_token: TargetTokenOption = None,
    query: QueriesOption = None, pool: PoolOption = Pool.max, window: WindowOption = None, keys: KeysOption = None,
) -> None:  # fmt: skip
    """Write one HTML page to explore attention: no server, no network, any browser.

    Everything is inside the file (data, script, styles), so it can be mailed,
    attached to a bug report or put on a course page. Views: lines from each
    query to its keys (head view), the weights matrix with every cell's numbers,
    an overview of every layer and head, and the toy model step by step; with
    --rollout a rollout view (--what flow: a flow view), with --norms the matrix coloured by ||a f(x)||.
    With --lines, one page with a picker between the texts.

    \b
    Examples:
      attn-cli html "Life is short, eat dessert first"
      attn-cli html "I saw a saw" --tokenizer words --heads 2 --causal -o saw.html --open
      attn-cli html --file sample_texts/tutorials.txt --lines -o tutorials.html
      attn-cli html --file chapter.txt --model ~/models/qwen3 --query last:4 -o chapter.html
    """
    check_model_only(spec, **{"--predict": predict, "--generate": generate})
    path = _target(output, texts[0])
    command = _command_line(ctx, texts, lines)

    from attn_cli.render.page import build

    source = opened(spec)
    asked = set(what or ())
    analyses = {"rollout": rollout or "rollout" in asked, "norms": norms or "norms" in asked, "flow": "flow" in asked, "predict": predict, "generate": generate,
                "maps": attribution_maps(what or ()), "target_label": target_label, "target_token": target_token}  # fmt: skip
    traces = list(run_texts(spec, source, texts, _selection(spec, source, analyses, query, pool, window, keys)))
    if spec.stack is not None and len(traces[0].stacks) == 1:
        traces[0].stack(spec.stack)  # a model of one stack: the one-line usage error
    if query is not None or window is not None or any(_long(t) for t in traces):
        page = _document(traces, command, pool, window, keys, query)
    else:
        page = build(traces, command=command, max_bytes=round(max_size * 2**20) if max_size else None, stack=spec.stack)
    data = page.html.encode("utf-8")
    _write_page(path, data, output, clobber=not no_clobber)
    for note in page.left_out:
        typer.echo(f"note: {note}", err=True)
    tokens = sum(len(t.tokens) for t in traces)
    report_written(path, lambda: f"{len(traces)} text{'s' if len(traces) > 1 else ''}, {tokens} tokens, {byte_size(len(data))}")
    if open_page:
        _open(path)


def _selection(
    spec: SourceSpec, source: Any, analyses: dict[str, Any], query: list[str] | None, pool: Pool, window: str | None, keys: str | None
) -> Any:  # fmt: skip
    """Every layer and head; a long text's statistics, rows and pooled maps where its tables do not fit."""
    tables = "keep" if analyses["rollout"] or analyses["flow"] or analyses["norms"] or analyses["maps"] else "fit"  # the maps read the tables
    return long_selection(spec.select(source, everything=True, **analyses), query, pool, window, keys, tables=tables)


def _long(trace: Any) -> bool:
    """A text whose page is a document's: its tables were not kept, or it is past POOL_ABOVE tokens."""
    from attn_cli.render.picture.pooled import POOL_ABOVE

    return trace.tables_omitted is not None or len(trace.tokens) > POOL_ABOVE


def _document(traces: list[Any], command: str, pool: Pool, window: str | None, keys: str | None, query: list[str] | None) -> Any:
    """A long text's page (``render.page.document``): pooled maps, statistics, the chosen rows, a window."""
    from attn_cli.render.page import Page
    from attn_cli.render.page.document import document_page
    from attn_cli.render.picture.pooled import LongView

    if len(traces) != 1:
        raise UsageError("a page of a long text (or with --query or --window) holds one text: write each text's page alone")
    from attn_cli.records.positions import resolve_queries

    # the strips are the --query rows; a --window's rows are drawn as the window
    trace = dataclasses.replace(traces[0], queries=resolve_queries(query, traces[0].tokens.texts, traces[0].tokens.labels) if query else ())
    n = len(trace.tokens)
    view = LongView(how=pool.value, window=span(window, n, "--window"), keys=span(keys, len(trace.own_stack.key_tokens), "--keys"))
    return Page(document_page(trace, command=command, view=view), ())


def _write_page(path: Path, data: bytes, output: Optional[Path], *, clobber: bool) -> None:
    """The page written in one step, saying when it replaced a file of the default name."""
    from attn_cli.runtime.files import write_atomic

    replacing = replaces_unnamed(path, output)
    write_atomic(path, data, clobber=clobber)
    if replacing:
        typer.echo(replaced_note(path), err=True)


def _target(output: Optional[Path], first_text: str) -> Path:
    """The file to write; every problem with -o is found before anything runs."""
    folder, stem, suffix = output_target(output, tuple(s.lstrip(".") for s in SUFFIXES), "a page (.html)")
    return folder / f"{stem or slug(first_text)}.{suffix}"


def _command_line(ctx: typer.Context, texts: list[str], lines: bool) -> str:
    """The command that makes this page again: the text and every option not left
    at its default, whatever options the command has (the shared ones included)."""
    params = ctx.params
    text, file = params.get("text"), params.get("file")
    from_stdin = params.get("saved") is None and (text == "-" or str(file) == "-" or (text is None and file is None))
    args = ["attn-cli", ctx.info_name or "html"]
    if from_stdin and not lines:
        args.append(texts[0])  # the text itself: the page should say what made it
    elif text is not None:
        args.append(text)
    for param in ctx.command.params:
        if param.param_type_name != "option" or param.name in NOT_REPRODUCED or (param.name == "file" and from_stdin):
            continue
        args += option_words(param, params.get(param.name))
    line = shlex.join(args)
    return line + "  # the texts on standard input" if from_stdin and lines else line


def option_words(param: Any, value: Any) -> list[str]:  # a click Option, from whichever click typer uses
    plain = value.value if isinstance(value, enum.Enum) else value
    default = param.default.value if isinstance(param.default, enum.Enum) else param.default
    if value is None or plain == default:
        return []
    longest = max(param.opts, key=len)
    if isinstance(plain, (list, tuple)):  # a repeated option (--query): the flag before each value
        return [part for item in plain for part in (longest, str(item))]
    if param.is_flag:
        if plain:
            return [longest]
        return [max(param.secondary_opts, key=len)] if param.secondary_opts else []
    return [longest, str(plain)]


def _open(path: Path) -> None:
    """Hand the page to a graphical browser; where there is none, say where the file is."""
    where = path.resolve()
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        typer.echo(f"note: no graphical browser here ($DISPLAY is not set); open {where} in a browser", err=True)
        return
    import webbrowser

    if not webbrowser.open(where.as_uri()):
        typer.echo(f"note: no web browser found; open {where} in a browser", err=True)
