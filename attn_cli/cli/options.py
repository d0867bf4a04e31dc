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
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from attn_cli.runtime.files import output_path
from attn_cli.sources.toy.config import DEFAULT_D_MODEL, DEFAULT_MAX_TOKENS, DEFAULT_SEED, DEFAULT_TOKENIZER, Config, Init, Positional
from attn_cli.cli.inputs import read_texts
from attn_cli.runtime.errors import UsageError, in_batch
from attn_cli.records.hiding import HideSpec
from attn_cli.sources.spec import TABLE_HEADS, SourceSpec
from attn_cli.records.trace import STACKS
from attn_cli.records.selection import IndexSpec

if TYPE_CHECKING:
    from attn_cli.sources.base import Source
    from attn_cli.records.selection import Selection
    from attn_cli.records.trace import Trace

class DType(str, enum.Enum):
    """--dtype: what a checkpoint is computed in (``attn_cli.sources.checkpoint.model.DTYPES``)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Device(str, enum.Enum):
    """--device: where a checkpoint runs."""

    cpu = "cpu"
    cuda = "cuda"


INPUT = "Input"
MODEL = "Toy model (seeded weights)"
TRAINED = "Trained model"
OUTPUT = "Output"
ANALYSIS = "Beyond the weights"


def complete_tokenizer(incomplete: str) -> list[str]:
    """Tab on --tokenizer: words and the tiktoken encodings attn-cli knows the files of."""
    from attn_cli.text.rankfiles import ENCODING_FILES
    from attn_cli.text.tokenizers import WORDS

    return [name for name in (WORDS, *ENCODING_FILES) if name.startswith(incomplete)]


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


INPUT_PARAMS = [
    _param(
        "text",
        Annotated[
            Optional[str],
            typer.Argument(
                help="The text; '-' (or no TEXT with a pipe on stdin) reads standard input.",
                show_default=False,
                metavar="TEXT",
            ),
        ],
        None,
    ),
    _param(
        "file",
        Annotated[
            Optional[Path],
            typer.Option("--file", "-f", help="Read the text from this file.", rich_help_panel=INPUT, show_default=False),
        ],
        None,
    ),
    _param(
        "lines",
        Annotated[
            bool,
            typer.Option("--lines", help="Treat each non-empty line of the input as its own text.", rich_help_panel=INPUT),
        ],
        False,
    ),
]

CONFIG_PARAMS = [
    _param(
        "tokenizer",
        Annotated[
            Optional[str],
            typer.Option(
                "--tokenizer",
                "-t",
                autocompletion=complete_tokenizer,
                help=f"'words', a tiktoken encoding (gpt2, cl100k_base, o200k_base, ...) or a model name (gpt-4o). "
                f"Default {DEFAULT_TOKENIZER}, or 'words' when its files are not on this machine.",
                rich_help_panel=MODEL,
                show_default=False,
            ),
        ],
        None,
    ),
    _param("seed", Annotated[int, typer.Option("--seed", "-s", help="Seeds the embeddings, then again the projections.", rich_help_panel=MODEL)], DEFAULT_SEED),
    _param(
        "d_model",
        Annotated[
            Optional[int],
            typer.Option("--d-model", help="Embedding width D [default: 16, or the --embeddings file's width].", rich_help_panel=MODEL, show_default=False),
        ],
        None,
    ),
    _param(
        "d_k",
        Annotated[Optional[int], typer.Option("--d-k", help="Query/key size per head [default: d_model / heads].", rich_help_panel=MODEL, show_default=False)],
        None,
    ),
    _param(
        "d_v",
        Annotated[Optional[int], typer.Option("--d-v", help="Value size per head [default: d_model / heads].", rich_help_panel=MODEL, show_default=False)],
        None,
    ),
    _param("heads", Annotated[int, typer.Option("--heads", "-H", help="Number of heads.", rich_help_panel=MODEL)], 1),
    _param("causal", Annotated[bool, typer.Option("--causal", help="Mask each query's future keys before the softmax.", rich_help_panel=MODEL)], False),
    _param("no_scale", Annotated[bool, typer.Option("--no-scale", help="Do not divide the scores by sqrt(d_k).", rich_help_panel=MODEL)], False),
    _param("temperature", Annotated[float, typer.Option("--temperature", help="Divide the softmax input by this too.", rich_help_panel=MODEL)], 1.0),
    _param("dropout", Annotated[float, typer.Option("--dropout", help="Dropout on the weights before they mix the values (seeded).", rich_help_panel=MODEL)], 0.0),
    _param("qkv_bias", Annotated[bool, typer.Option("--qkv-bias", help="Bias in the query, key and value projections.", rich_help_panel=MODEL)], False),
    _param("out_proj", Annotated[bool, typer.Option("--out-proj", help="Output projection W_o after the heads are concatenated.", rich_help_panel=MODEL)], False),
    _param(
        "init",
        Annotated[Init, typer.Option("--init", help="linear: nn.Linear; uniform: torch.rand; normal: torch.randn.", rich_help_panel=MODEL, case_sensitive=False)],
        Init.linear,
    ),
    _param("no_projections", Annotated[bool, typer.Option("--no-projections", help="Naive attention: Q = K = V = X.", rich_help_panel=MODEL)], False),
    _param(
        "positional",
        Annotated[Positional, typer.Option("--positional", help="Add positional encodings to X.", rich_help_panel=MODEL, case_sensitive=False)],
        Positional.none,
    ),
    _param(
        "embeddings",
        Annotated[
            Optional[Path],
            typer.Option("--embeddings", help="Use these vectors (JSON list of lists, CSV or .npy; one row per token).", rich_help_panel=MODEL, show_default=False),
        ],
        None,
    ),
    _param("max_tokens", Annotated[int, typer.Option("--max-tokens", help="Refuse texts with more tokens than this.", rich_help_panel=MODEL)], DEFAULT_MAX_TOKENS),
    _param(
        "emit_python",
        Annotated[
            bool,
            typer.Option(
                "--emit-python",
                help="Print a standalone PyTorch script that reproduces this run (the first text, with --lines) instead of running.",
                rich_help_panel=OUTPUT,
            ),
        ],
        False,
    ),
    _param("debug", Annotated[bool, typer.Option("--debug", help="Show a traceback on errors (also before the command: attn-cli --debug run ...).", rich_help_panel=OUTPUT)], False),
]

TRAINED_PARAMS = [
    _param(
        "model",
        Annotated[
            Optional[str],
            typer.Option(
                "--model",
                "-m",
                help="A trained checkpoint instead of the seeded toy model: a folder with config.json, *.safetensors and "
                "tokenizer files, or ORG/NAME from the Hugging Face cache (never downloaded). GPT-2, BERT-style and "
                "Llama-style (Llama, Mistral, Qwen2) models; `attn-cli models` lists those on this machine.",
                rich_help_panel=TRAINED,
                show_default=False,
            ),
        ],
        None,
    ),
    _param(
        "revision",
        Annotated[
            Optional[str],
            typer.Option("--revision", help="With --model ORG/NAME: the cached branch, tag or commit [default: main].", rich_help_panel=TRAINED, show_default=False),
        ],
        None,
    ),
    _param(
        "pair",
        Annotated[
            Optional[str],
            typer.Option("--pair", help="A second text, for encoders (BERT): segment B, token type 1.", rich_help_panel=TRAINED, show_default=False),
        ],
        None,
    ),
    _param(
        "target",
        Annotated[
            Optional[str],
            typer.Option(
                "--target",
                help="For an encoder-decoder --model (BART, T5, Marian): the decoder's text, read teacher-forced "
                "(its labels shifted right), beside the source TEXT.",
                rich_help_panel=TRAINED,
                show_default=False,
            ),
        ],
        None,
    ),
    _param(
        "stack",
        Annotated[
            Optional[str],
            typer.Option(
                "--stack",
                help="With --target: the stack tables and pictures show: encoder (source x source), decoder (target x target) "
                "or cross (target rows x source columns, the default). JSON and CSV have all three.",
                rich_help_panel=TRAINED,
                show_default=False,
                metavar="encoder|decoder|cross",
            ),
        ],
        None,
    ),
    _param(
        "truncate",
        Annotated[bool, typer.Option("--truncate", help="Cut a text longer than the model's positions instead of refusing it.", rich_help_panel=TRAINED)],
        False,
    ),
    _param(
        "dtype",
        Annotated[
            DType,
            typer.Option(
                "--dtype",
                help="With --model: compute in float32, bfloat16 or float16 (as transformers does for that dtype; "
                "the numbers shown are float32 either way).",
                rich_help_panel=TRAINED,
                case_sensitive=False,
            ),
        ],
        DType.float32,
    ),
    _param(
        "device",
        Annotated[
            Device,
            typer.Option("--device", help="With --model: cpu, or cuda when torch sees a GPU.", rich_help_panel=TRAINED, case_sensitive=False),
        ],
        Device.cpu,
    ),
    _param(
        "layer",
        Annotated[
            Optional[str],
            typer.Option(
                "--layer",
                "-l",
                help="Layers to run and show: an index, a list (0,2), a range (0-3) or all; -1 is the last. Later layers are "
                f"never run. [default: JSON/CSV all; tables and pictures the last]",
                rich_help_panel=OUTPUT,
                show_default=False,
            ),
        ],
        None,
    ),
    _param(
        "head",
        Annotated[
            Optional[str],
            typer.Option(
                "--head",
                help="Heads to show: an index, a list (0,2), a range (0-3) or all; -1 is the last. "
                f"[default: every head; a trained model's tables and pictures: 0-{TABLE_HEADS - 1}]",
                rich_help_panel=OUTPUT,
                show_default=False,
            ),
        ],
        None,
    ),
]

HIDE_PARAMS = [
    _param(
        "hide_tokens",
        Annotated[
            Optional[str],
            typer.Option(
                "--hide-tokens",
                help="Leave these tokens' rows and columns out of tables and pictures and renormalize each other row "
                "over the keys shown: special (BOS, [CLS], [SEP]), and/or positions and tokens, comma-separated "
                "(0,-1 or '[CLS],[SEP]'). JSON and CSV keep the model's weights and add the renormalized ones.",
                rich_help_panel=OUTPUT,
                show_default=False,
            ),
        ],
        None,
    ),
]

# The toy model's own options: with --model each is a usage error.
TOY_ONLY = (
    "tokenizer", "d_model", "d_k", "d_v", "heads", "causal", "no_scale", "temperature", "dropout",
    "qkv_bias", "out_proj", "init", "no_projections", "positional", "embeddings",
)  # fmt: skip
MODEL_ONLY = ("revision", "pair", "target", "stack", "truncate", "dtype", "device")

# --from FILE: heatmap, html and heads re-draw a saved trace instead of running a source
SAVED_PARAMS = [
    _param(
        "saved",
        Annotated[
            Optional[Path],
            typer.Option(
                "--from",
                help="Re-draw the attention a schema-2 JSON holds (run -F json, Trace.to_json(), or any file with "
                "tokens[] and layers[].heads[].weights) instead of computing it; no TEXT, no model options.",
                rich_help_panel=INPUT,
                show_default=False,
                metavar="FILE.json",
            ),
        ],
        None,
    ),
]

_SHARED = INPUT_PARAMS + CONFIG_PARAMS + TRAINED_PARAMS + HIDE_PARAMS + SAVED_PARAMS
_SHARED_NAMES = {p.name for p in _SHARED}


def build_config(**values: Any) -> Config:
    config = Config(
        tokenizer=values["tokenizer"],
        seed=values["seed"],
        d_model=values["d_model"],
        d_k=values["d_k"],
        d_v=values["d_v"],
        heads=values["heads"],
        causal=values["causal"],
        scale=not values["no_scale"],
        temperature=values["temperature"],
        dropout=values["dropout"],
        qkv_bias=values["qkv_bias"],
        out_proj=values["out_proj"],
        init=values["init"],
        projections=not values["no_projections"],
        positional=values["positional"],
        embeddings=values["embeddings"],
        max_tokens=values["max_tokens"],
    )
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
    if model is not None:
        if not model.strip():
            raise UsageError("--model is empty: give a checkpoint folder or ORG/NAME")
        toy = _given(ctx, TOY_ONLY)
        if toy:
            raise UsageError(
                f"{', '.join(toy)} {'is an option' if len(toy) == 1 else 'are options'} of the seeded toy model; "
                f"--model {model} brings its own tokenizer, sizes and weights: drop {'it' if len(toy) == 1 else 'them'}"
            )
        if shared["emit_python"]:
            raise UsageError("--emit-python reproduces the seeded toy model; it cannot be used with --model")
        if shared["target"] is not None and shared["lines"]:
            raise UsageError("--target pairs one source with one target: drop --lines (one pair per run)")
    else:
        trained = _given(ctx, MODEL_ONLY)
        if trained:
            raise UsageError(f"{', '.join(trained)} only make{'s' if len(trained) == 1 else ''} sense with --model; add --model or drop {'it' if len(trained) == 1 else 'them'}")
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
    command: Callable[..., Any] | None = None, *, emit_python: bool = True, hide_tokens: bool = True, saved: bool = False
) -> Any:
    """Give ``command(spec=..., texts=..., **own)`` the shared options.

    A command that also declares ``lines: bool`` is told whether --lines was given,
    and one that declares ``ctx`` gets the click context. ``@shared_options(
    emit_python=False)`` leaves --emit-python off a command that has no script to
    emit (heads, html); ``hide_tokens=False`` leaves --hide-tokens off one that
    cannot honour it (explain): an option a command lists, it takes. ``saved=True``
    adds --from FILE (heatmap, html, heads: the commands that draw saved weights).
    """
    if command is None:
        return functools.partial(shared_options, emit_python=emit_python, hide_tokens=hide_tokens, saved=saved)
    left_out = ({"emit_python"} if not emit_python else set()) | ({"hide_tokens"} if not hide_tokens else set())
    left_out |= set() if saved else {"saved"}
    defaults = {"emit_python": False, "hide_tokens": None, "saved": None}
    signature = inspect.signature(command, eval_str=True)
    given = {"spec", "texts", "lines", "ctx"}
    own = [p for name, p in signature.parameters.items() if name not in given]
    wants_lines = "lines" in signature.parameters
    wants_ctx = "ctx" in signature.parameters

    @functools.wraps(command)
    def wrapper(ctx: typer.Context, **kwargs: Any) -> Any:
        shared = {name: kwargs.pop(name) for name in list(kwargs) if name in _SHARED_NAMES}
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

    ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    params = [ctx_param, *INPUT_PARAMS, *SAVED_PARAMS, *own, *CONFIG_PARAMS, *TRAINED_PARAMS, *HIDE_PARAMS]
    params = [p for p in params if p.name not in left_out]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p is not ctx_param else p for p in params]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must see the new signature, not the command's
    return wrapper


def run_texts(spec: SourceSpec, source: Source, texts: list[str], selection: Selection | None) -> Iterator[Trace]:
    """Each text's trace, its --hide-tokens tokens marked (a note about them on stderr, once)."""
    from attn_cli.records.hiding import hide

    if len(texts) > 1:
        # What start-up made (torch's, the tokenizer's, the model's objects) lives as long as the
        # process: out of the collector's sight, it is not walked again for each text's garbage
        # (about a tenth of a --lines JSON batch's time).
        gc.freeze()
    said: set[str] = set()
    for i, trace in enumerate(source.run_each(texts, selection)):
        try:
            trace = hide(trace, spec.hide)
        except UsageError as err:
            raise in_batch(err, i, len(texts))
        note = trace.hiding.note if trace.hiding is not None else None
        if note is not None and note not in said:
            said.add(note)
            typer.echo(note, err=True)
        yield trace


def _print_script(config: Config, texts: list[str], output: Any) -> None:
    """--emit-python: the script on stdout, notes on stderr; the command itself does not run."""
    if output is not None:
        raise UsageError("--emit-python prints the script on stdout: drop -o and redirect it, e.g. > attention.py")
    from attn_cli.sources.toy.emit import script_for_texts

    from attn_cli.cli.output import stdout_errors

    script, notes = script_for_texts(config, texts)
    for note in notes:
        typer.echo(note, err=True)
    with stdout_errors():
        typer.echo(script, nl=False)


# Options several commands take; each defined here once and used as
# ``query: QueryOption = None`` in the commands that want it.
QueryOption = Annotated[
    Optional[str],
    typer.Option("--query", "-q", help="Follow one query: a position (0-based) or a token's text.", rich_help_panel=OUTPUT, show_default=False),
]
KeyOption = Annotated[
    Optional[str],
    typer.Option("--key", "-k", help="Who attends to this key: a position (0-based) or a token's text.", rich_help_panel=OUTPUT, show_default=False),
]
RolloutOption = Annotated[
    bool,
    typer.Option(
        "--rollout",
        help="Also attention rollout (Abnar & Zuidema 2020): through layers 0 to the last --layer, each layer's mean "
        "over all heads, half residual, multiplied; how much of each input token reaches each position. Rows sum to 1.",
        rich_help_panel=ANALYSIS,
    ),
]
NormsOption = Annotated[
    bool,
    typer.Option(
        "--norms",
        help="Also value-weighted norms (Kobayashi et al. 2020): ||a_ij f_h(x_j)|| per head and ||sum_h a_ij f_h(x_j)|| "
        "per layer, f_h(x_j) being what key j sends through head h and W_o: how much each weight moves.",
        rich_help_panel=ANALYSIS,
    ),
]
PredictOption = Annotated[
    int,
    typer.Option(
        "--predict",
        help="With --model: also each position's K most likely next tokens (decoders) or fillers (masked LMs), "
        "running every layer, the final norm and the model's head. 0: none.",
        min=0,
        max=1000,
        rich_help_panel=ANALYSIS,
    ),
]
GenerateOption = Annotated[
    int,
    typer.Option(
        "--generate",
        help="With --model (a decoder): first extend the text by up to N tokens, greedily (the most likely token "
        "each time, no sampling, stopping at the model's end-of-sequence), then show the whole sequence's attention.",
        min=0,
        max=4096,
        rich_help_panel=ANALYSIS,
        metavar="N",
    ),
]
PrecisionOption = Annotated[int, typer.Option("--precision", help="Digits after the point in tables.", min=0, max=12, rich_help_panel=OUTPUT)]
NoColorOption = Annotated[
    bool,
    typer.Option("--no-color", help="No colour (also when NO_COLOR is set or stdout is not a terminal).", rich_help_panel=OUTPUT),
]
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
