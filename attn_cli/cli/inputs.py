"""Where the text comes from: the TEXT argument, '-', a pipe on stdin, or --file.

Never blocks on an interactive terminal: with no text and a terminal on stdin
the command's help is shown instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

import typer

from attn_cli.errors import InputError, UsageError


def read_texts(ctx: typer.Context, text: str | None, file: Path | None, *, lines: bool) -> list[str]:
    """The texts to run: one, or one per non-empty line with ``lines``."""
    if text is not None and file is not None:
        raise UsageError("give TEXT or --file, not both")
    if file is not None:
        raw = _read_file(file)
    elif text == "-" or (text is None and not _stdin_is_terminal()):
        raw = _read_stream(sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin)
    elif text is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    else:
        raw = text.encode("utf-8", errors="surrogateescape")
    decoded = decode(raw, "the input" if file is None else str(file))
    if lines:
        texts = [line for line in decoded.splitlines() if line.strip()]
        if not texts:
            raise InputError("the input has no non-empty lines; give at least one line of text")
        return texts
    decoded = decoded.rstrip("\r\n")  # the newline echo and files end with is not part of the text
    if not decoded.strip():
        raise InputError("the text is empty; give some words, as an argument, with --file, or on stdin")
    return [decoded]


def decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{where} is not valid UTF-8 (byte 0x{raw[err.start]:02x} at offset {err.start}); "
            f"convert it first, e.g. with iconv -t UTF-8"
        ) from None


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"--file {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"--file {path} is a directory, not a file") from None
    except OSError as err:
        raise InputError(f"cannot read --file {path}: {err.strerror or err}") from None


def _read_stream(stream: BinaryIO) -> bytes:
    data = stream.read()
    return data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is None or sys.stdin.isatty()
    except (AttributeError, ValueError):
        return True
