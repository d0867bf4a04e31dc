"""Where the text comes from: the TEXT argument, '-', a pipe on stdin, or --file;
and which token a ``--query``/``--key`` value names.

Never blocks on an interactive terminal: with no text and a terminal on stdin
the command's help is shown instead, and ``-`` with a terminal on stdin is a
usage error rather than a wait for typing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

import typer

from attn_cli.records.positions import resolve_position
from attn_cli.runtime.errors import AttnCliError, InputError, TooLargeError, UsageError
from attn_cli.text.corpus import drop_final_newline

__all__ = ["read_texts", "resolve_position"]

BOM = "\ufeff"
MAX_TEXT_BYTES = 64 * 2**20  # far past any --max-tokens; /dev/zero or a disk image stops here


def read_texts(ctx: typer.Context, text: str | None, file: Path | None, *, lines: bool) -> list[str]:
    """The texts to run: one, or one per non-empty line with ``lines``."""
    if text is not None and file is not None:
        raise UsageError("give TEXT or --file, not both")
    from_stdin = text == "-" or str(file) == "-" or (text is None and file is None and not _stdin_is_terminal())
    if from_stdin:
        if _stdin_is_terminal():
            raise UsageError(
                "'-' reads standard input, but it is a terminal: pipe the text in "
                "(echo 'some text' | attn-cli ...) or give it as TEXT"
            )
        raw = _read_stream(sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin)
    elif file is not None:
        raw = _read_file(file)
    elif text is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    else:
        raw = text.encode("utf-8", errors="surrogateescape")
    decoded = decode(raw, str(file) if file is not None and not from_stdin else "the input")
    from_argument = text is not None and text != "-"
    if not from_argument:  # an argument is the text exactly as given
        decoded = decoded.removeprefix(BOM)  # a byte-order mark is not part of a file's text
    if lines:
        texts = [line for line in decoded.splitlines() if line.strip()]
        if not texts:
            raise InputError("the input has no non-empty lines; give at least one line of text")
        return texts
    if not from_argument:
        decoded = drop_final_newline(decoded)
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
        with path.open("rb") as f:
            return _read_bounded(f, f"--file {path}")
    except FileNotFoundError:
        raise InputError(f"--file {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"--file {path} is a directory, not a file") from None
    except OSError as err:
        raise InputError(f"cannot read --file {path}: {err.strerror or err}") from None


def _read_stream(stream: BinaryIO) -> bytes:
    try:
        data = _read_bounded(stream, "standard input")
    except OSError as err:
        raise AttnCliError(f"cannot read standard input: {err.strerror or err}") from None
    return data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data


def _read_bounded(stream: BinaryIO, where: str) -> bytes:
    """At most MAX_TEXT_BYTES; more is refused (exit 4) without reading on."""
    data = stream.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise TooLargeError(
            f"{where} holds more than {MAX_TEXT_BYTES // 2**20} MiB of text, far more than --max-tokens allows; "
            f"give less text (the limit is for the whole input, --lines too)"
        )
    return data


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is None or sys.stdin.isatty()
    except (AttributeError, ValueError):
        return True


BARE_PREDICT = "all"  # what --predict with no count stands for (AttnCommand.parse_args puts it there)
ALL_PREDICTIONS = -1  # --predict with no count: a classifier's every label, a language model's PREDICT_DEFAULT


def predict_count(value: str) -> int:
    """--predict's K: 0 to 1000, or ``BARE_PREDICT`` (no count given)."""
    if value == BARE_PREDICT:
        return ALL_PREDICTIONS
    try:
        count = int(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a count: give K, a whole number from 0 to 1000, or no value") from None
    if not 0 <= count <= 1000:
        raise typer.BadParameter(f"{count} is not in the range 0 to 1000")
    return count
