"""`attn-cli tokenizers`: what is ready offline, and how to add rank files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli.app import AttnCommand, AttnSubgroup, app
from attn_cli.cli.output import stdout_errors

tokenizers_app = typer.Typer(
    cls=AttnSubgroup, help="List the tokenizers and whether each is ready offline; add rank files.", no_args_is_help=False
)
app.add_typer(tokenizers_app, name="tokenizers")


@tokenizers_app.callback(invoke_without_command=True)
def list_tokenizers(ctx: typer.Context) -> None:
    """List every tokenizer, whether it is ready offline, and the files it needs."""
    if ctx.invoked_subcommand is not None:
        return
    import tiktoken

    from attn_cli.text.rankfiles import DIR_ENV, availability, search_dirs, tiktoken_cache_dir

    lines = [f"{'words':<16} ready      needs no files (the tutorials' word tokenizer)"]
    for name in tiktoken.list_encoding_names():
        status = availability(name)
        files = ", ".join(f.name for f in status.files) or "files unknown to attn-cli: tiktoken fetches them itself"
        state = "ready" if status.ready else ("damaged" if status.corrupt else "missing")
        if status.missing and len(status.missing) < len(status.files):
            files += f" (missing: {', '.join(status.missing)})"
        if name == "gpt2" and not status.ready:
            files += "; or r50k_base.tiktoken alone"
        lines.append(f"{name:<16} {state:<10} {files}")
        lines += [f"{'':<16} {'':<10} {path} does not match tiktoken's SHA-256; replace it" for path in status.corrupt]
    lines.append("")
    lines.append(f"searched: tiktoken cache {tiktoken_cache_dir() or '(off)'}, " + ", ".join(str(d) for d in search_dirs()))
    lines.append(f"to add files: attn-cli tokenizers add FILE_OR_FOLDER..., or set ${DIR_ENV} to a folder of them")
    with stdout_errors():
        typer.echo("\n".join(lines))


@tokenizers_app.command("add", cls=AttnCommand)
def add(
    files: Annotated[
        list[Path], typer.Argument(help="Rank files (.tiktoken, vocab.bpe, encoder.json), or folders holding them.")
    ],
) -> None:
    """Check rank files against tiktoken's hashes and copy them where attn-cli finds them offline.

    A folder adds every file in it named like a rank file (r50k_base.tiktoken,
    vocab.bpe, ...). Every known file is added, even when others are not (so
    `attn-cli tokenizers add folder/*` works); any that were not make one error
    line and exit code 2. A data folder that cannot be written stops at once (exit 1).

    \b
    Examples:
      attn-cli tokenizers add ~/Downloads/r50k_base.tiktoken
      attn-cli tokenizers add /data/tiktoken
    """
    from attn_cli.runtime.errors import InputError
    from attn_cli.text.rankfiles import add_rank_file, data_dir, known_files_in

    paths: list[Path] = []
    for path in files:
        if path.is_dir():
            found = known_files_in(path)
            if not found:
                raise InputError(f"{path} holds no file named like a rank file (r50k_base.tiktoken, vocab.bpe, ...)")
            paths += found
        else:
            paths.append(path)
    failed: list[str] = []
    for path in paths:
        try:
            name, serves = add_rank_file(path)
        except InputError as err:  # this file; an unwritable data folder (OutputError) stops everything
            failed.append(str(err))
            continue
        with stdout_errors():
            typer.echo(f"added {name} ({', '.join(serves)}) to {data_dir() / 'tiktoken'}")
    if len(failed) == 1:
        raise InputError(failed[0])
    if failed:
        raise InputError(f"{len(failed)} of {len(paths)} files were not added; the first: {failed[0]}")
