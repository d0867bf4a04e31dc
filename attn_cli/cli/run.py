"""`attn-cli run`: tables for people, JSON/CSV for scripts."""

from __future__ import annotations

import enum
import sys
from typing import Annotated

import typer

from attn_cli.cli import app
from attn_cli.cli.options import OUTPUT, NoColorOption, OutputOption, PrecisionOption, shared_options
from attn_cli.cli.output import emit, progress
from attn_cli.config import Config


class Format(str, enum.Enum):
    auto = "auto"
    table = "table"
    json = "json"
    csv = "csv"


@app.command()
@shared_options
def run(
    config: Config,
    texts: list[str],
    format: Annotated[
        Format,
        typer.Option("--format", "-F", help="table for people; json (JSON Lines with --lines) or csv for scripts. auto: table on a terminal, json otherwise.", rich_help_panel=OUTPUT, case_sensitive=False),
    ] = Format.auto,
    output: OutputOption = None,
    precision: PrecisionOption = 4,
    no_color: NoColorOption = False,
) -> None:
    """Tokenize, embed and run attention; print scores, weights and context vectors.

    \b
    Examples:
      attn-cli run "Life is short, eat dessert first"
      attn-cli run "I saw a saw" --tokenizer words --heads 2 --causal
      echo "The cat sat on the mat" | attn-cli run - --format json | jq '.heads[0].weights'
      attn-cli run --file sample_texts/tutorials.txt --lines --format json > runs.jsonl
    """
    from attn_cli.pipeline import Pipeline

    chosen = format
    if chosen is Format.auto:
        chosen = Format.table if (output is None and sys.stdout.isatty()) else Format.json
    pipeline = Pipeline(config)
    for note in pipeline.notes:
        typer.echo(note, err=True)
    runs = (pipeline.run(text) for text in texts)

    if chosen is Format.table:
        from attn_cli.render.tables import human_view

        emit([human_view(r, precision) for r in progress(runs, len(texts))], output, rich=True, no_color=no_color)
    elif chosen is Format.json:
        from attn_cli.render.export import to_json

        emit(["".join(to_json(r) + "\n" for r in progress(runs, len(texts)))], output)
    else:
        from attn_cli.render.export import to_csv

        emit([to_csv(r, header=i == 0) for i, r in enumerate(progress(runs, len(texts)))], output)
