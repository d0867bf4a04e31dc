"""The options the commands share, declared once: the input (TEXT, --file, --lines), the toy
model's, a checkpoint's (--model and its own), --hide-tokens, --from, and the single options
several commands take (--query, --key, --rollout, --norms, --predict, --generate,
--precision, --no-color), each in its --help panel (``attn_cli.cli.panels``).
``attn_cli.cli.options`` builds and validates the source spec from them."""

from __future__ import annotations

import enum
import inspect
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attn_cli.cli.inputs import predict_count
from attn_cli.cli.panels import ANALYSIS, DISPLAY, INPUT, OUTPUT, TOY, TRAINED
from attn_cli.sources.spec import TABLE_HEADS
from attn_cli.sources.toy.config import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_SEED,
    DEFAULT_TOKENIZER,
    NEGATED,
    SHARED_FIELDS,
    Init,
    Positional,
    config_fields,
)


class DType(str, enum.Enum):
    """--dtype: what a checkpoint is computed in (``attn_cli.sources.checkpoint.model.DTYPES``)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Device(str, enum.Enum):
    """--device: where a checkpoint runs."""

    cpu = "cpu"
    cuda = "cuda"


def complete_tokenizer(incomplete: str) -> list[str]:
    """Tab on --tokenizer: words and the tiktoken encodings attn-cli knows the files of."""
    from attn_cli.text.rankfiles import ENCODING_FILES
    from attn_cli.text.tokenizers import WORDS

    return [name for name in (WORDS, *ENCODING_FILES) if name.startswith(incomplete)]


def model_help() -> str:
    """--model's help, naming the model_types the family modules declare (read without torch)."""
    from attn_cli.sources.checkpoint.registry import MODEL_TYPES, SEQ2SEQ_TYPES

    return (
        "A trained checkpoint instead of the seeded toy model: a folder with config.json, *.safetensors and tokenizer "
        f"files, or ORG/NAME from the Hugging Face cache (never downloaded). Its model_type: {', '.join(MODEL_TYPES)}, "
        f"or an encoder-decoder (with --target): {', '.join(SEQ2SEQ_TYPES)}. The families: docs/models.md, "
        "docs/encoder-decoder.md; those on this machine: `attn-cli models`."
    )


def param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


INPUT_PARAMS = [
    param(
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
    param("file", Annotated[Optional[Path], typer.Option("--file", "-f", help="Read the text from this file.", rich_help_panel=INPUT, show_default=False)], None),
    param("lines", Annotated[bool, typer.Option("--lines", help="Treat each non-empty line of the input as its own text.", rich_help_panel=INPUT)], False),
]
CONFIG_PARAMS = [
    param(
        "tokenizer",
        Annotated[
            Optional[str],
            typer.Option(
                "--tokenizer",
                "-t",
                autocompletion=complete_tokenizer,
                help=f"'words', a tiktoken encoding (gpt2, cl100k_base, o200k_base, ...) or a model name (gpt-4o). "
                f"Default {DEFAULT_TOKENIZER}, or 'words' when its files are not on this machine.",
                rich_help_panel=TOY,
                show_default=False,
            ),
        ],
        None,
    ),
    param("seed", Annotated[int, typer.Option("--seed", "-s", help="Seeds the embeddings, then again the projections.", rich_help_panel=TOY)], DEFAULT_SEED),
    param(
        "d_model",
        Annotated[
            Optional[int],
            typer.Option("--d-model", help="Embedding width D [default: 16, or the --embeddings file's width].", rich_help_panel=TOY, show_default=False),
        ],
        None,
    ),
    param(
        "d_k",
        Annotated[Optional[int], typer.Option("--d-k", help="Query/key size per head [default: d_model / heads].", rich_help_panel=TOY, show_default=False)],
        None,
    ),
    param(
        "d_v",
        Annotated[Optional[int], typer.Option("--d-v", help="Value size per head [default: d_model / heads].", rich_help_panel=TOY, show_default=False)],
        None,
    ),
    param("heads", Annotated[int, typer.Option("--heads", "-H", help="Number of heads.", rich_help_panel=TOY)], 1),
    param("causal", Annotated[bool, typer.Option("--causal", help="Mask each query's future keys before the softmax.", rich_help_panel=TOY)], False),
    param("no_scale", Annotated[bool, typer.Option("--no-scale", help="Do not divide the scores by sqrt(d_k).", rich_help_panel=TOY)], False),
    param("temperature", Annotated[float, typer.Option("--temperature", help="Divide the softmax input by this too.", rich_help_panel=TOY)], 1.0),
    param("dropout", Annotated[float, typer.Option("--dropout", help="Dropout on the weights before they mix the values (seeded).", rich_help_panel=TOY)], 0.0),
    param("qkv_bias", Annotated[bool, typer.Option("--qkv-bias", help="Bias in the query, key and value projections.", rich_help_panel=TOY)], False),
    param("out_proj", Annotated[bool, typer.Option("--out-proj", help="Output projection W_o after the heads are concatenated.", rich_help_panel=TOY)], False),
    param(
        "init",
        Annotated[Init, typer.Option("--init", help="linear: nn.Linear; uniform: torch.rand; normal: torch.randn.", rich_help_panel=TOY, case_sensitive=False)],
        Init.linear,
    ),
    param("no_projections", Annotated[bool, typer.Option("--no-projections", help="Naive attention: Q = K = V = X.", rich_help_panel=TOY)], False),
    param(
        "positional",
        Annotated[Positional, typer.Option("--positional", help="Add positional encodings to X.", rich_help_panel=TOY, case_sensitive=False)],
        Positional.none,
    ),
    param(
        "embeddings",
        Annotated[
            Optional[Path],
            typer.Option("--embeddings", help="Use these vectors (JSON list of lists, CSV or .npy; one row per token).", rich_help_panel=TOY, show_default=False),
        ],
        None,
    ),
    param(
        "max_tokens",
        Annotated[int, typer.Option(
            "--max-tokens", help=f"Refuse texts with more tokens than this. [default: {DEFAULT_MAX_TOKENS}; with --model, the model's positions]",
            rich_help_panel=INPUT, show_default=False,
        )],
        DEFAULT_MAX_TOKENS,
    ),  # fmt: skip
    param(
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
    param("debug", Annotated[bool, typer.Option("--debug", help="Show a traceback on errors (also before the command: attn-cli --debug run ...).", rich_help_panel=OUTPUT)], False),
]
TRAINED_PARAMS = [
    param(
        "model",
        Annotated[
            Optional[str],
            typer.Option(
                "--model",
                "-m",
                help=model_help(),
                rich_help_panel=TRAINED,
                show_default=False,
            ),
        ],
        None,
    ),
    param(
        "revision",
        Annotated[
            Optional[str],
            typer.Option("--revision", help="With --model ORG/NAME: the cached branch, tag or commit [default: main].", rich_help_panel=TRAINED, show_default=False),
        ],
        None,
    ),
    param(
        "pair",
        Annotated[
            Optional[str],
            typer.Option("--pair", help="A second text, for encoders (BERT): segment B, token type 1.", rich_help_panel=TRAINED, show_default=False),
        ],
        None,
    ),
    param(
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
    param(
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
    param(
        "truncate",
        Annotated[bool, typer.Option("--truncate", help="Cut a text longer than the model's positions instead of refusing it.", rich_help_panel=TRAINED)],
        False,
    ),
    param(
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
    param(
        "device",
        Annotated[
            Device,
            typer.Option("--device", help="With --model: cpu, or cuda when torch sees a GPU.", rich_help_panel=TRAINED, case_sensitive=False),
        ],
        Device.cpu,
    ),
    param(
        "layer",
        Annotated[
            Optional[str],
            typer.Option(
                "--layer",
                "-l",
                help="Layers to run and show: an index, a list (0,2), a range (0-3) or all; -1 is the last. Later layers are "
                "never run. [default: JSON/CSV all; tables and pictures the last]",
                rich_help_panel=DISPLAY,
                show_default=False,
            ),
        ],
        None,
    ),
    param(
        "head",
        Annotated[
            Optional[str],
            typer.Option(
                "--head",
                help="Heads to show: an index, a list (0,2), a range (0-3) or all; -1 is the last. "
                f"[default: every head; a trained model's tables and pictures: 0-{TABLE_HEADS - 1}]",
                rich_help_panel=DISPLAY,
                show_default=False,
            ),
        ],
        None,
    ),
]
HIDE_PARAMS = [
    param(
        "hide_tokens",
        Annotated[
            Optional[str],
            typer.Option(
                "--hide-tokens",
                help="Leave these tokens' rows and columns out of tables and pictures and renormalize each other row "
                "over the keys shown: special (BOS, [CLS], [SEP]), and/or positions and tokens, comma-separated "
                "(0,-1 or '[CLS],[SEP]'). JSON and CSV keep the model's weights and add the renormalized ones.",
                rich_help_panel=DISPLAY,
                show_default=False,
            ),
        ],
        None,
    ),
]
# The toy model's own options: with --model each is a usage error.
TOY_ONLY = tuple(NEGATED.get(f, f) for f in config_fields() if f not in SHARED_FIELDS)  # the parameters' names
MODEL_ONLY = ("revision", "pair", "target", "stack", "truncate", "dtype", "device")
# --from FILE: heatmap, html and heads re-draw a saved trace instead of running a source
SAVED_PARAMS = [
    param(
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
SHARED = INPUT_PARAMS + CONFIG_PARAMS + TRAINED_PARAMS + HIDE_PARAMS + SAVED_PARAMS
SHARED_NAMES = {p.name for p in SHARED}
# Options several commands take; each defined here once and used as
# ``query: QueryOption = None`` in the commands that want it.
QueryOption = Annotated[
    Optional[str],
    typer.Option("--query", "-q", help="Follow one query: a position (0-based; -1 or last the last token) or a token's text.", rich_help_panel=DISPLAY, show_default=False),
]
KeyOption = Annotated[
    Optional[str],
    typer.Option("--key", "-k", help="Who attends to this key: a position (0-based) or a token's text.", rich_help_panel=DISPLAY, show_default=False),
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
        "running every layer, the final norm and the model's head; a classifier's K most likely labels. Without K: "
        "a classifier's every label, a language model's 5. 0: none.",
        parser=predict_count,
        rich_help_panel=ANALYSIS,
        metavar="[K]",
    ),
]
GenerateOption = Annotated[
    int,
    typer.Option(
        "--generate",
        help="With --model (a decoder): first extend the text by up to N tokens, greedily (the most likely token "
        "each time, no sampling, stopping at the model's end-of-sequence), then show the whole sequence's attention.",
        min=0,
        rich_help_panel=ANALYSIS,
        metavar="N",
    ),
]
DpiOption = Annotated[
    int, typer.Option("--dpi", help="Pixels per inch of a picture (PNG; the resolution of the image inside SVG and PDF).", min=20, max=1200, rich_help_panel=OUTPUT)
]  # heatmap's and compare's
PrecisionOption = Annotated[int, typer.Option("--precision", help="Digits after the point in tables.", min=0, max=12, rich_help_panel=OUTPUT)]
# run's: not given, a weights (or any matrix) table that is too wide at 4 digits rounds to as few as 2 before it drops columns
FittingPrecisionOption = Annotated[
    Optional[int],
    typer.Option(
        "--precision",
        help="Digits after the point in tables. Not given: 4, or as few as 2 where that lets a table show every column.",
        min=0,
        max=12,
        rich_help_panel=OUTPUT,
        show_default=False,
    ),
]
NoColorOption = Annotated[
    bool,
    typer.Option("--no-color", help="No colour (also when NO_COLOR is set or stdout is not a terminal).", rich_help_panel=OUTPUT),
]
