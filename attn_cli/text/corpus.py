"""A corpus for `attn-cli census`: its texts, and what was skipped and why. No model, no torch.

The forms a corpus comes in:
  - a text file, one text per line (split on "\\n" only; a "\\r" before it dropped);
  - JSON Lines (.jsonl, .ndjson), one record per line, the text in ``field`` (default ``text``);
  - a folder: every .txt and .md file under it, searched recursively in path order, one text each
    (one final line terminator dropped);
  - a Parquet file (.parquet), the ``field`` column (pyarrow, an optional extra);
  - ``-``: standard input, one text per line.

An empty text is skipped and counted (``empty``); a line that is not UTF-8, a JSON line that
does not parse, a record without the field or whose field is not a string is skipped and listed
in ``skipped`` with where it was and why. Where nothing is left, ``CorpusError`` (exit 2) says why
in one line (for JSON Lines, the keys its records had).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

from attn_cli.runtime.errors import InputError, UsageError

SUFFIXES = (".txt", ".md")  # the files of a folder that are texts
JSON_LINES = (".jsonl", ".ndjson")


class CorpusError(InputError):
    """A corpus with nothing to run (exit 2)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One text of a corpus and where it came from: ``where`` a line number (1-based) or a file."""

    text: str
    where: str


@dataclasses.dataclass(frozen=True)
class Skipped:
    where: str  # "line 7", or a file's path
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class Corpus:
    entries: tuple[Entry, ...]
    skipped: tuple[Skipped, ...] = ()
    empty: int = 0  # empty texts, skipped
    source: str = ""  # the corpus as the user named it

    @property
    def texts(self) -> list[str]:
        return [entry.text for entry in self.entries]


def read_corpus(path: str, *, field: str = "text", limit: int | None = None, sample: int | None = None, seed: int = 0) -> Corpus:
    """The corpus at ``path`` (a file, a folder, or "-"), its first ``limit`` texts or a ``sample``
    of that many drawn with ``seed`` (in corpus order); CorpusError where no text is left."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit takes a number of texts, 1 or more, not {limit}")
    if sample is not None and sample < 1:
        raise UsageError(f"--sample takes a number of texts, 1 or more, not {sample}")
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    empty = 0
    keys: set[str] = set()
    for item in _items(path, field, keys):
        if isinstance(item, Skipped):
            skipped.append(item)
        elif not item.text.strip():
            empty += 1
        else:
            entries.append(item)
    if not entries:
        raise CorpusError(_nothing(path, field, keys, empty, skipped))
    if sample is not None and sample < len(entries):
        chosen = sorted(random.Random(seed).sample(range(len(entries)), sample))
        entries = [entries[i] for i in chosen]
    if limit is not None:
        entries = entries[:limit]
    return Corpus(tuple(entries), tuple(skipped), empty, path)


def _nothing(path: str, field: str, keys: set[str], empty: int, skipped: list[Skipped]) -> str:
    """Why a corpus has no text to run, in one line."""
    if keys and all(s.reason.startswith("no field") for s in skipped):
        return f"{path}: no record has the field {field!r} (the records' keys: {', '.join(sorted(keys))}); choose one with --field"
    found = f"{empty} empty" + (f", {len(skipped)} skipped ({skipped[0].where}: {skipped[0].reason})" if skipped else "")
    return f"{path} holds no text to run ({found}); give a corpus with some text"


def _items(path: str, field: str, keys: set[str]) -> Iterator[Entry | Skipped]:
    if path == "-":
        yield from _lines(_stdin_bytes(), field=None, keys=keys)
        return
    where = Path(path)
    if where.is_dir():
        yield from _folder(where)
        return
    if not where.exists():
        raise InputError(f"the corpus {path} does not exist")
    suffix = where.suffix.lower()
    if suffix == ".parquet":
        yield from _parquet(where, field)
        return
    yield from _lines(_read(where), field=field if suffix in JSON_LINES else None, keys=keys)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read the corpus {path}: {err.strerror or err}") from None


def _stdin_bytes() -> bytes:
    try:
        return sys.stdin.buffer.read()
    except (OSError, AttributeError, ValueError) as err:
        raise InputError(f"cannot read standard input: {err}") from None


def _lines(raw: bytes, *, field: str | None, keys: set[str]) -> Iterator[Entry | Skipped]:
    """One text per line ("\\n"; a "\\r" before it dropped), or per JSON line's ``field``."""
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":  # the file's final line terminator ends the last line
        lines.pop()
    for number, line in enumerate(lines, start=1):
        where = f"line {number}"
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            yield Skipped(where, f"not UTF-8 (byte 0x{line[err.start]:02x} at column {err.start + 1})")
            continue
        yield Entry(text, where) if field is None else _record(text, field, where, keys)


def _record(line: str, field: str, where: str, keys: set[str]) -> Entry | Skipped:
    if not line.strip():
        return Entry("", where)  # an empty line: counted as empty
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return Skipped(where, f"not JSON ({err.msg} at column {err.colno})")
    if not isinstance(record, dict):
        return Skipped(where, f"not a JSON object but a {type(record).__name__}")
    keys.update(record)
    if field not in record:
        return Skipped(where, f"no field {field!r}")
    value = record[field]
    if not isinstance(value, str):
        return Skipped(where, f"the field {field!r} is a {type(value).__name__}, not a string")
    return Entry(value, where)


def _folder(folder: Path) -> Iterator[Entry | Skipped]:
    """Every .txt and .md file under ``folder``, in path order: one text each."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise CorpusError(f"the folder {folder} holds no .txt or .md file; give a folder of texts, or a file")
    for path in files:
        where = str(path.relative_to(folder))
        try:
            raw = path.read_bytes()
        except OSError as err:
            yield Skipped(where, f"cannot be read: {err.strerror or err}")
            continue
        try:
            yield Entry(drop_final_newline(raw.decode("utf-8")), where)
        except UnicodeDecodeError as err:
            yield Skipped(where, f"not UTF-8 (byte 0x{raw[err.start]:02x} at offset {err.start})")


def drop_final_newline(text: str) -> str:
    """``text`` without the one line terminator that echo and text files end with (a
    second one, or a blank line, is part of the text)."""
    for ending in ("\r\n", "\n", "\r"):
        if text.endswith(ending):
            return text[: -len(ending)]
    return text


def _parquet(path: Path, field: str) -> Iterator[Entry | Skipped]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("reading Parquet needs pyarrow: pip install 'attn-cli[parquet]'") from None
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow's own errors: not a Parquet file, damaged
        raise InputError(f"cannot read the Parquet file {path}: {err}") from None
    if field not in table.column_names:
        raise CorpusError(f"{path} has no column {field!r} (its columns: {', '.join(table.column_names)}); choose one with --field")
    for number, value in enumerate(table.column(field).to_pylist(), start=1):
        where = f"row {number}"
        if isinstance(value, str):
            yield Entry(value, where)
        elif value is None:
            yield Entry("", where)
        else:
            yield Skipped(where, f"the column {field!r} holds a {type(value).__name__}, not a string")
