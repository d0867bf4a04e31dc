"""`attn-cli tokenizers`: what is ready offline, and how to add rank files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli import AttnCommand, app

tokenizers_app = typer.Typer(help="List the tokenizers and whether each is ready offline; add rank files.", no_args_is_help=False)
app.add_typer(tokenizers_app, name="tokenizers")


@tokenizers_app.callback(invoke_without_command=True)
def list_tokenizers(ctx: typer.Context) -> None:
    """List every tokenizer, whether it is ready offline, and the files it needs."""
    if ctx.invoked_subcommand is not None:
        return
    import tiktoken

    from attn_cli.rankfiles import DIR_ENV, availability, search_dirs, tiktoken_cache_dir

    typer.echo(f"{'words':<16} ready      needs no files (the tutorials' word tokenizer)")
    for name in tiktoken.list_encoding_names():
        status = availability(name)
        files = ", ".join(f.name for f in status.files)
        state = "ready" if status.ready else ("damaged" if status.corrupt else "missing")
        if status.missing and len(status.missing) < len(status.files):
            files += f" (missing: {', '.join(status.missing)})"
        typer.echo(f"{name:<16} {state:<10} {files}")
        for path in status.corrupt:
            typer.echo(f"{'':<16} {'':<10} {path} does not match tiktoken's SHA-256; replace it")
    typer.echo("")
    typer.echo(f"searched: tiktoken cache {tiktoken_cache_dir() or '(off)'}, " + ", ".join(str(d) for d in search_dirs()))
    typer.echo(f"to add files: attn-cli tokenizers add FILE..., or set ${DIR_ENV} to a folder of them")


@tokenizers_app.command("add", cls=AttnCommand)
def add(files: Annotated[list[Path], typer.Argument(help="Rank files (.tiktoken, vocab.bpe, encoder.json).")]) -> None:
    """Check rank files against tiktoken's hashes and copy them where attn-cli finds them offline.

    Every known file is added, even when others are not (so `attn-cli tokenizers
    add folder/*` works); any that were not make one error line and exit code 2.
    """
    from attn_cli.errors import AttnCliError, InputError
    from attn_cli.rankfiles import add_rank_file, data_dir

    failed: list[str] = []
    for path in files:
        try:
            name, serves = add_rank_file(path)
        except AttnCliError as err:
            failed.append(str(err))
            continue
        typer.echo(f"added {name} ({', '.join(serves)}) to {data_dir() / 'tiktoken'}")
    if len(failed) == 1:
        raise InputError(failed[0])
    if failed:
        raise InputError(f"{len(failed)} of {len(files)} files were not added; the first: {failed[0]}")
