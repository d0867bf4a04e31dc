"""`attn-cli models`: the checkpoints --model can load offline, from the Hugging Face cache."""

from __future__ import annotations

import enum
import json
import os
from typing import Annotated

import typer

from attn_cli.cli.app import AttnCommand, app
from attn_cli.cli.panels import OUTPUT


class ListFormat(str, enum.Enum):
    text = "text"
    json = "json"


def _human(count: int | None, units: tuple[str, ...], step: int) -> str:
    if count is None:
        return "?"
    value, unit = float(count), units[0]
    for unit in units:
        if value < step or unit == units[-1]:
            break
        value /= step
    return f"{value:.1f}{unit}" if unit != units[0] else f"{int(value)}{unit}"


@app.command("models", cls=AttnCommand)
def models(
    format: Annotated[ListFormat, typer.Option("--format", "-F", help="text, or json (a list of objects).", rich_help_panel=OUTPUT, case_sensitive=False)] = ListFormat.text,
) -> None:
    """List the checkpoints in the Hugging Face cache that --model can load offline:
    family, size, and whether attn-cli computes them.

    \b
      attn-cli models
      attn-cli models --format json | jq -r '.[] | select(.supported) | .name'
      attn-cli run "The cat sat." --model sentence-transformers/all-MiniLM-L6-v2
    """
    from attn_cli.sources.checkpoint.catalog import cached_models

    found, searched = cached_models(os.environ)
    if format is ListFormat.json:
        typer.echo(json.dumps([m.as_dict() for m in found], indent=2))
        return
    if not found:
        typer.echo("no models with config.json in the Hugging Face cache")
    width = max([len(m.name) for m in found] + [4])
    if found:
        typer.echo(f"{'name':<{width}}  {'type':<8} {'params':>7} {'size':>8}  status")
    for m in found:
        status = "ready" if m.supported else m.why
        params = _human(m.parameters, ("", "K", "M", "B"), 1000)
        size = _human(m.bytes, ("B", "KB", "MB", "GB"), 1000)
        typer.echo(f"{m.name:<{width}}  {str(m.model_type):<8} {params:>7} {size:>8}  {status}")
    typer.echo("")
    typer.echo("searched: " + "; ".join(searched))
    typer.echo("a folder with config.json, *.safetensors and tokenizer files works too: attn-cli run TEXT --model PATH")
