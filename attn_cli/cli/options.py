"""The options every command shares, defined once.

``@shared_options`` adds the input options (TEXT, --file, --lines), the source
options (the toy model's, or --model's), and --layer/--head to a command's
signature, builds and validates the ``SourceSpec``, reads the texts, and calls
the command with ``spec`` and ``texts``. Commands declare only what is theirs
(output format, picture size).
"""

from __future__ import annotations

import enum
import functools
import gc
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from attn_cli.cli.inputs import read_texts
from attn_cli.cli.params import (
    CONFIG_PARAMS,
    HIDE_PARAMS,
    INPUT_PARAMS,
    MODEL_ONLY,
    OUTPUT,
    SAVED_PARAMS,
    SHARED_NAMES,
    TOY_ONLY,
    TRAINED_PARAMS,
    Device,
    DType,
)
from attn_cli.cli.panels import ANALYSIS
from attn_cli.records.hiding import HideSpec
from attn_cli.records.selection import IndexSpec
from attn_cli.records.trace import ENDED_AT_ONCE, STACKS
from attn_cli.runtime.errors import UsageError, in_batch
from attn_cli.runtime.files import output_path
from attn_cli.sources.spec import SourceSpec, check_source_options
from attn_cli.sources.toy.config import NEGATED, Config, config_fields

if TYPE_CHECKING:
    from attn_cli.records.selection import Selection
    from attn_cli.records.trace import Trace
    from attn_cli.sources.base import Source


def build_config(**values: Any) -> Config:
    """The toy's Config from the command line's values (``--no-scale`` is ``scale=False``)."""
    config = Config(**{f: not values[NEGATED[f]] if f in NEGATED else values[f] for f in config_fields()})
    if config.embeddings is None:
        config.resolved()  # bad sizes fail now, before torch loads
    return config


def _given(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` that the command line set (not left at their default).
    By the source's name: typer 0.26+ vendors click, with its own ParameterSource enum."""
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    given = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name != "DEFAULT":
            given.append(flags[name])
    return given


def build_spec(ctx: typer.Context, shared: dict[str, Any]) -> SourceSpec:
    """The SourceSpec the options describe; a conflict between them is a usage error."""
    model = shared["model"]
    if shared["emit_python"] and shared["hide_tokens"] is not None:
        raise UsageError("--hide-tokens changes what is shown, and --emit-python prints the computation, which it does not change: drop --hide-tokens")
    if model is not None and not model.strip():
        raise UsageError("--model is empty: give a checkpoint folder or ORG/NAME")
    trained = _given(ctx, MODEL_ONLY)
    check_source_options(
        _given(ctx, TOY_ONLY), trained, model, model_named=f"--model {model}",
        trained_fix=f"--model; add --model or drop {'it' if len(trained) == 1 else 'them'}",
    )  # fmt: skip
    if model is not None:
        if shared["emit_python"]:
            raise UsageError("--emit-python reproduces the seeded toy model; it cannot be used with --model")
        if shared["target"] is not None and shared["lines"]:
            raise UsageError("--target pairs one source with one target: drop --lines (one pair per run)")
    return SourceSpec(
        config=build_config(**shared) if model is None else Config(seed=shared["seed"], max_tokens=shared["max_tokens"]),
        model=model,
        revision=shared["revision"],
        pair=shared["pair"],
        truncate=shared["truncate"],
        dtype=DType(shared["dtype"]).value,
        device=Device(shared["device"]).value,
        layers=IndexSpec.parse(shared["layer"], "--layer"),
        heads=IndexSpec.parse(shared["head"], "--head"),
        hide=HideSpec.parse(shared["hide_tokens"]),
        target=shared["target"],
        stack=_stack(shared["stack"]),
        max_tokens_given=bool(_given(ctx, ("max_tokens",))),
    )


def _stack(value: str | None) -> str | None:
    if value is not None and value not in STACKS:
        raise UsageError(f"--stack {value}: choose {', '.join(STACKS[:-1])} or {STACKS[-1]}")
    return value


def saved_spec(ctx: typer.Context, shared: dict[str, Any]) -> SourceSpec:
    """The SourceSpec of --from FILE: a saved trace, with nothing that would compute one."""
    path = shared["saved"]
    given = [flag for flag, on in (("TEXT", shared["text"] is not None), ("--file", shared["file"] is not None),
                                   ("--lines", shared["lines"])) if on]  # fmt: skip
    given += _given(ctx, ("model", "seed", "max_tokens", *TOY_ONLY, *MODEL_ONLY))
    if given:
        raise UsageError(
            f"--from {path} re-draws attention already computed, with its own text and model: drop {', '.join(given)}"
        )
    return SourceSpec(
        config=Config(),
        saved=str(path),
        layers=IndexSpec.parse(shared["layer"], "--layer"),
        heads=IndexSpec.parse(shared["head"], "--head"),
        hide=HideSpec.parse(shared["hide_tokens"]),
    )


def shared_options(
    command: Callable[..., Any] | None = None, *, emit_python: bool = True, hide_tokens: bool = True, saved: bool = False,
    corpus: bool = False,
) -> Any:
    """Give ``command(spec=..., texts=..., **own)`` the shared options.

    A command that also declares ``lines: bool`` is told whether --lines was given,
    and one that declares ``ctx`` gets the click context. ``@shared_options(
    emit_python=False)`` leaves --emit-python off a command that has no script to
    emit (heads, html); ``hide_tokens=False`` leaves --hide-tokens off one that
    cannot honour it (explain): an option a command lists, it takes. ``saved=True``
    adds --from FILE (heatmap, html, heads: the commands that draw saved weights). ``corpus=True``:
    a command that reads its own texts (census): no TEXT, --file or --lines, and no ``texts``.
    """
    if command is None:
        return functools.partial(shared_options, emit_python=emit_python, hide_tokens=hide_tokens, saved=saved, corpus=corpus)
    left_out = ({"emit_python"} if not emit_python else set()) | ({"hide_tokens"} if not hide_tokens else set())
    left_out |= (set() if saved else {"saved"}) | ({"text", "file", "lines"} if corpus else set())
    defaults = {"emit_python": False, "hide_tokens": None, "saved": None, "text": None, "file": None, "lines": False}
    signature = inspect.signature(command, eval_str=True)
    given = {"spec", "texts", "lines", "ctx"}
    own = [p for name, p in signature.parameters.items() if name not in given]
    wants_lines = "lines" in signature.parameters
    wants_ctx = "ctx" in signature.parameters

    @functools.wraps(command)
    def wrapper(ctx: typer.Context, **kwargs: Any) -> Any:
        shared = {name: kwargs.pop(name) for name in list(kwargs) if name in SHARED_NAMES}
        shared.update({name: defaults[name] for name in left_out})
        ctx.meta["debug"] = shared["debug"] or ctx.meta.get("debug", False)  # `attn-cli --debug run` set it already
        if shared["saved"] is not None:
            if wants_lines:
                kwargs["lines"] = False
            if wants_ctx:
                kwargs["ctx"] = ctx
            spec = saved_spec(ctx, shared)
            from attn_cli.sources.saved import load_json

            return command(spec=spec, texts=[load_json(spec.saved).text], **kwargs)  # the file's text (default names)
        spec = build_spec(ctx, shared)
        if corpus:
            return command(spec=spec, **kwargs, **({"ctx": ctx} if wants_ctx else {}))
        texts = read_texts(ctx, shared["text"], shared["file"], lines=shared["lines"])
        if shared["emit_python"]:
            return _print_script(spec.config, texts, kwargs.get("output"))
        if spec.model is None:  # the toy's heads are known now: a bad --head fails before torch loads
            spec.heads.resolve(spec.config.heads, "head")
            spec.layers.resolve(1, "layer")
        if wants_lines:
            kwargs["lines"] = shared["lines"]
        if wants_ctx:
            kwargs["ctx"] = ctx
        return command(spec=spec, texts=texts, **kwargs)

    return _with_shared_signature(wrapper, own, left_out)


def _with_shared_signature(wrapper: Any, own: list[inspect.Parameter], left_out: set[str]) -> Any:
    """``wrapper`` with the signature typer reads: the context, the shared options but ``left_out``, the command's ``own``."""
    ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    params = [ctx_param, *INPUT_PARAMS, *SAVED_PARAMS, *own, *CONFIG_PARAMS, *TRAINED_PARAMS, *HIDE_PARAMS]
    params = [p for p in params if p.name not in left_out]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p is not ctx_param else p for p in params]
    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must see the new signature, not the command's
    return wrapper


def run_texts(spec: SourceSpec, source: Source, texts: list[str], selection: Selection | None) -> Iterator[Trace]:
    """Each text's trace, its --hide-tokens tokens marked (a note about them on stderr, once),
    and a note for each text --truncate cut."""
    from attn_cli.pipeline import with_queries
    from attn_cli.records.hiding import hide

    if len(texts) > 1:
        # What start-up made (torch's, the tokenizer's, the model's objects) lives as long as the
        # process: out of the collector's sight, it is not walked again for each text's garbage
        # (about a tenth of a --lines JSON batch's time).
        gc.freeze()
    said: set[str] = set()
    for i, trace in enumerate(source.run_each(texts, selection)):
        try:
            trace = hide(with_queries(trace, selection), spec.hide)
        except UsageError as err:
            raise in_batch(err, i, len(texts))
        note = trace.hiding.note if trace.hiding is not None else None
        if note is not None and note not in said:
            said.add(note)
            typer.echo(note, err=True)
        where = f"text {i + 1} of {len(texts)}: " if len(texts) > 1 else ""
        say_truncated(trace, where)
        if trace.ended_at_once:
            typer.echo(f"note: {where}{ENDED_AT_ONCE}", err=True)
        if trace.tables_omitted is not None and (selection is None or (selection.tables != "omit" and selection.sink is None)):
            typer.echo(f"note: {where}{trace.tables_omitted}", err=True)
        yield trace



def say_truncated(trace: Trace, where: str = "") -> None:
    """A note on stderr when --truncate cut the text (``where``: which text of several)."""
    if trace.truncated is not None:
        typer.echo(f"note: {where}{trace.truncated.sentence(pair=trace.pair is not None)}", err=True)


def _print_script(config: Config, texts: list[str], output: Any) -> None:
    """--emit-python: the script on stdout, notes on stderr; the command itself does not run."""
    if output is not None:
        raise UsageError("--emit-python prints the script on stdout: drop -o and redirect it, e.g. > attention.py")
    from attn_cli.cli.output import stdout_errors
    from attn_cli.sources.toy.emit import script_for_texts

    script, notes = script_for_texts(config, texts)
    for note in notes:
        typer.echo(note, err=True)
    with stdout_errors():
        typer.echo(script, nl=False)


def choose_format(format: Format, output: Path | None, *, table_asked: bool) -> Format:
    """auto: what the -o file's suffix says; else a table on a terminal or when a
    table-only option is given (``table_asked``); else JSON. jsonl is json.

    An -o name must end in one of SUFFIX_FORMATS' suffixes, or in none (JSON): a .tsv or
    .xlsx would get JSON under a name that promises something else. With an explicit
    format that the name contradicts, the format wins and a note says so."""
    from attn_cli.cli.output import stdout_is_terminal

    named = None
    if output is not None and output.suffix:
        named = SUFFIX_FORMATS.get(output.suffix.lower())
        if named is None:
            listed = ", ".join(SUFFIX_FORMATS)
            raise UsageError(f"-o {output}: '{output.suffix}' is not a format run and heads write; end the name in {listed}, or in none for JSON")
    if format is Format.jsonl:
        format = Format.json
    if format is not Format.auto:
        if named is not None and named is not format:
            typer.echo(f"note: -o {output}: writing {format.value.upper()} as --format says, though the name says {named.value.upper()}", err=True)
        return format
    if named is not None:
        return named
    return Format.table if table_asked or (output is None and stdout_is_terminal()) else Format.json


def check_model_only(spec: SourceSpec, **options: Any) -> None:
    """Options that need a trained model's head (``--predict``, ``--generate``): a usage error
    on the toy, which has no vocabulary to predict from, and with --from, naming the option."""
    given = [flag for flag, value in options.items() if value]
    if given and spec.saved is not None:
        raise UsageError(f"{given[0]} runs the model, and --from re-draws a saved trace: give TEXT and --model instead")
    if given and spec.model is None:
        raise UsageError(f"{given[0]} needs a trained model (--model): the toy model has no vocabulary head")


def output_option(help: str = "Write here (atomically) instead of stdout.") -> Any:
    """The one ``-o/--output`` option, with the help of the command that takes it: a PATH read
    by ``output_path`` (a name ending in '/' that is not a folder is refused)."""
    return Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help=help, rich_help_panel=OUTPUT, show_default=False, parser=output_path, metavar="PATH"),
    ]


OutputOption = output_option()
NoClobberOption = Annotated[
    bool,
    typer.Option(
        "--no-clobber",
        help="Never replace an existing file: stop with exit 1 naming it. Checked as the file is created, "
        "so two runs writing one name cannot both pass.",
        rich_help_panel=OUTPUT,
    ),
]


class Format(str, enum.Enum):
    """The output formats of the commands that print results (run, heads)."""

    auto = "auto"
    table = "table"
    json = "json"
    jsonl = "jsonl"  # what people type for JSON Lines: the same output as json (one object per line)
    csv = "csv"


# -o FILE with --format auto: the format its name says, JSON otherwise
SUFFIX_FORMATS = {".json": Format.json, ".jsonl": Format.json, ".ndjson": Format.json, ".csv": Format.csv, ".txt": Format.table}
FormatOption = Annotated[
    Format,
    typer.Option(
        "--format",
        "-F",
        help="table for people; json (JSON Lines with --lines; jsonl says the same) or csv for scripts. "
        "auto: what the -o file's suffix says (.json, .jsonl, .csv, .txt), else table on a terminal "
        "(or with an option only tables use, such as run's --show/--head/--query/--key), else json.",
        rich_help_panel=OUTPUT,
        case_sensitive=False,
    ),
]


def _check_maps(values: Optional[list[str]]) -> Optional[list[str]]:
    """--what's names, comma-separated or repeated, each one of ``records.results.MAPS``."""
    from attn_cli.records.results import what_names

    if values is None:
        return None
    try:
        return list(what_names(values))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


MapsOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--what",
        help="The maps to compute, comma-separated or repeated: weights (always), rollout (as --rollout), norms (as --norms), "
        "flow (attention flow, Abnar & Zuidema 2020: the max flow through every layer's mixed weights, as the authors' "
        "code; short texts: T^4 x layers is refused past 2e7), value-zeroing (each kept layer's map, Mohebbi et al. 2023), "
        "value-zeroing-rollout (their product through the layers), alti (each kept layer's and the product through "
        "them, Ferrando et al. 2022). docs/attribution.md has each definition.",
        rich_help_panel=ANALYSIS, metavar="MAPS", show_default=False, callback=_check_maps,
    ),
]  # fmt: skip


TargetLabelOption = Annotated[
    Optional[str],
    typer.Option(
        "--target-label",
        help="--what attention-gradient on a classifier: the label whose logit it explains, a name of config.json's "
        "id2label or an index. [default: the predicted label]",
        rich_help_panel=ANALYSIS, metavar="LABEL", show_default=False,
    ),
]  # fmt: skip
TargetTokenOption = Annotated[
    Optional[str],
    typer.Option(
        "--target-token",
        help="--what attention-gradient on a decoder (its next token) or a masked LM (the filler of the text's first "
        "mask): the token whose logit it explains, a text of one token (a leading space is part of many tokens). "
        "[default: the predicted token]",
        rich_help_panel=ANALYSIS, metavar="TEXT", show_default=False,
    ),
]  # fmt: skip


def opened(spec: SourceSpec) -> Any:
    """The run's source (``pipeline.open_source``), its notes said on stderr first (a tokenizer's fallback, ...)."""
    from attn_cli.pipeline import open_source

    source = open_source(spec)
    for note in source.notes:
        typer.echo(note, err=True)
    return source

