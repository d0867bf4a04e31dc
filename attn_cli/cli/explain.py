"""`attn-cli explain`: the tutorial, live, for any sentence."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.panels import OUTPUT
from attn_cli.cli.params import NoColorOption, PrecisionOption, PredictOption, QueryOption
from attn_cli.cli.options import NoClobberOption, OutputOption, check_model_only, opened, say_truncated, shared_options
from attn_cli.cli.output import binary_output, emit_rich, progress, stdout_is_terminal
from attn_cli.runtime.errors import UsageError, in_batch
from attn_cli.sources.spec import SourceSpec
from attn_cli.records.selection import Selection


class Style(str, enum.Enum):
    auto = "auto"
    rich = "rich"
    text = "text"


@app.command(cls=AttnCommand)
@shared_options(hide_tokens=False)
def explain(
    spec: SourceSpec,
    texts: list[str],
    query: QueryOption = None,
    format: Annotated[
        Style,
        typer.Option(
            "--format",
            "-F",
            help="rich: panels (for a terminal); text: plain text. auto: rich on a terminal, text otherwise.",
            rich_help_panel=OUTPUT,
            case_sensitive=False,
        ),
    ] = Style.auto,
    output: OutputOption = None,
    no_clobber: NoClobberOption = False,
    precision: PrecisionOption = 4,
    no_color: NoColorOption = False,
    predict: PredictOption = 0,
) -> None:
    """Walk through attention one step at a time, with this text's own numbers.

    Tokenize, embed, project, raw scores, scale, causal mask, softmax, context
    vectors, heads and output: each step with its formula, the shapes and the
    numbers. Long texts are summarised (a corner of each table and statistics).

    \b
    Examples:
      attn-cli explain "Life is short, eat dessert first" --tokenizer words
      attn-cli explain "Life is short, eat dessert first" --query is
      attn-cli explain "I saw a saw" --causal --heads 2 --out-proj --head 1
      attn-cli explain "The cat sat on the mat" --no-scale       # the saturation ablation
      attn-cli explain "Hello shiny sun!" --emit-python > attention.py
      attn-cli explain "The cat sat on the mat" --model "$M" --layer 2 --head 5
    """
    from attn_cli.cli.inputs import resolve_position
    from attn_cli.render.explain import explain as build, to_rich, to_text

    check_model_only(spec, **{"--predict": predict})
    rich = format is Style.rich or (format is Style.auto and output is None and stdout_is_terminal())
    source = opened(spec)
    layer, head = spec.one(source)
    parts = []
    for i, run in enumerate(progress(source.run_each(texts, Selection((layer,), (head,), predict=predict)), len(texts))):
        say_truncated(run, f"text {i + 1} of {len(texts)}: " if len(texts) > 1 else "")
        run = run.in_stack(spec.stack)  # an encoder-decoder: one head of the stack --stack names
        try:
            position = None if query is None else resolve_position(query, run.tokens.texts, run.tokens.labels, "--query")
        except UsageError as err:
            raise in_batch(err, i, len(texts))
        explanation = build(run, head=head, query=position, precision=precision)
        parts.append(to_rich(explanation) if rich else to_text(explanation))
    if rich:
        emit_rich(parts, output, no_color=no_color, clobber=not no_clobber)
        return
    with binary_output(output, clobber=not no_clobber) as out:
        out.write("\n".join(parts).encode("utf-8"))
