"""Machine formats, written: JSON (one object per text) and tidy long CSV.

Both are built from the same ``layer_dict`` (document.py; rows.py for the CSV), so the numbers cannot depend on the
format. A table's float32 values are written rounded to 9 significant digits
(``float32_value``), exactly enough for every float32 to come back bit for bit
when read as float32, and half the text of the float64 repr (JSON is written
about twice as fast); the statistics, computed in float64, are at Python's
shortest repr, except ``top_weight``, a float32 weight written as in its table.
``run_dict`` holds the same numbers the JSON has (``json.loads(to_json(run)) ==
run_dict(run)``). Masked softmax inputs are ``null`` in JSON and ``-inf`` in CSV.
The schema is documented in the README ("JSON schema"); ``SCHEMA_VERSION``
changes when a key is renamed or removed, not when one is added.

``write_json`` and ``write_csv`` stream: each table is formatted a block of rows
at a time (``BLOCK_NUMBERS``) and the text is written about ``WRITE_CHARS`` at a
time, so what they hold beyond the trace is one layer's derived tables, never the
text: a JSON of hundreds of megabytes is written in the memory of its T x T tables.
The tables a trace does not keep (the raw scores, the softmax input,
``weights_shown``) are made one layer, or one block of rows, at a time, with the
same operations as the whole tensors, so the bytes are the same. ``to_json``,
``to_csv``, ``csv_rows`` and ``run_dict`` return the whole text or data, for the
Python API and the tests.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

from attn_cli.formats.document import json_pieces
from attn_cli.formats.numbers import STREAM_BYTES, check_export_size, export_bytes
from attn_cli.formats.rows import CSV_COLUMNS, csv_batches
from attn_cli.records.trace import Trace

if TYPE_CHECKING:
    pass


# From this much derived beside the trace (the raw scores, the entropy's float64 rows), a
# streamed export has glibc give freed blocks back (attn_cli.runtime.allocator): otherwise the
# heap keeps the entropy's blocks, and a long text's JSON peaks higher (bench/json_memory.py).
LARGE_EXPORT_BYTES = 16 * 2**20
WRITE_CHARS = 2**20  # text gathered before one write


def write_json(run: Trace, out: IO[bytes]) -> None:
    """Write the run's JSON line (no newline) to ``out`` as UTF-8, streamed: what it
    holds is one layer's derived tables and a block of text, not the text."""
    _before_streaming(run)
    _write(json_pieces(run), out)


def _before_streaming(run: Trace) -> None:
    check_export_size(run, whole=False)
    if export_bytes(run) - STREAM_BYTES >= LARGE_EXPORT_BYTES:
        from attn_cli.runtime.allocator import return_freed_memory

        return_freed_memory()


def to_json(run: Trace) -> str:
    """The run as one line of JSON (the schema of ``run_dict``)."""
    check_export_size(run)
    return "".join(json_pieces(run))


def _write(pieces: Iterable[str], out: IO[bytes]) -> None:
    """Write text to a binary file about ``WRITE_CHARS`` at a time."""
    gathered: list[str] = []
    size = 0
    for piece in pieces:
        gathered.append(piece)
        size += len(piece)
        if size >= WRITE_CHARS:
            out.write("".join(gathered).encode("utf-8"))
            gathered, size = [], 0
    if gathered:
        out.write("".join(gathered).encode("utf-8"))


def csv_pieces(run: Trace, *, header: bool = True, index: int = 0) -> Iterator[str]:
    """The CSV text of ``csv_rows`` (with the header line when ``header``), about
    ``WRITE_CHARS`` a piece."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    for rows in csv_batches(run, index):
        writer.writerows(rows)
        if buffer.tell() >= WRITE_CHARS // 4:  # a StringIO holds 4 bytes a character
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def write_csv(run: Trace, out: IO[bytes], *, header: bool = True, index: int = 0) -> None:
    """Write the run's CSV rows (after the header line when ``header``) to ``out`` as
    UTF-8, streamed like ``write_json``."""
    _before_streaming(run)
    _write(csv_pieces(run, header=header, index=index), out)


def to_csv(run: Trace, *, header: bool = True, index: int = 0) -> str:
    check_export_size(run)
    return "".join(csv_pieces(run, header=header, index=index))
