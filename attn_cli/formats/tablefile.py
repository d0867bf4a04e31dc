"""Whole attention tables streamed to a file as a layer's blocks of query rows pass
(``attn_cli.sources.blocks``): a NumPy ``.npy`` of one (layer, head), or a ``.safetensors`` of
several, one tensor per (layer, head). Each table is T x S, its rows written at their offsets
as the blocks come; nothing but one head's block is held in memory.

Shapes: T query rows, S keys, H heads, R rows in a block, K the keys a block reads.

The file is a temporary beside the name given (``attn_cli.runtime.files.open_temporary``),
sized whole before the first block (a sparse file of zeros, so a key a block leaves out, outside
its band, is a weight of 0 without being written) and renamed onto the name only by ``close``,
once every row of every table came: a run that fails or is interrupted leaves nothing half
written there, and a file that was there untouched. The folder must have room for the whole
file before it starts (TooLargeError). Rows go in with ``os.pwrite`` (a whole block in one call
where its rows are whole), not through a memory map: a disk that fills up anyway is then an
OSError, turned into an OutputError, where a store through a map into a sparse file's hole on a
full disk is a SIGBUS that kills the process.

Layout, little-endian, C order:

- ``.npy``: NumPy's format 1.0 header (2.0 where the header needs it; numpy writes it), then the
  (T, S) table, ``<f4`` or ``<f2``.
- ``.safetensors``: 8 bytes of header length, the JSON header (``__metadata__`` then one
  ``layer.{L}.head.{H}`` entry per table, in the order given, each {"dtype": "F32" or "F16",
  "shape": [T, S], "data_offsets": [begin, end]}) padded with spaces to a multiple of 8 bytes,
  then the tables back to back in that order.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from attn_cli.runtime.budget import gib
from attn_cli.runtime.errors import OutputError, TooLargeError, UsageError
from attn_cli.runtime.files import discard_temporary, open_temporary, publish_temporary
from attn_cli.sources.blocks import BlockConsumer

SUFFIXES = (".npy", ".safetensors")
METADATA = {"format": "pt", "written_by": "attn-cli"}


class FileDtype(NamedTuple):
    """A table's number type, as torch, numpy and safetensors name it."""

    torch: torch.dtype
    numpy: str  # the .npy descr: little-endian
    safetensors: str
    itemsize: int


DTYPES = {
    "float32": FileDtype(torch.float32, "<f4", "F32", 4),
    "float16": FileDtype(torch.float16, "<f2", "F16", 2),
}


def tensor_name(layer: int, head: int) -> str:
    """The .safetensors name of one (layer, head)'s table."""
    return f"layer.{layer}.head.{head}"


class TableFile:
    """A file of whole (T, S) attention tables, one per (layer, head) of ``tables``, written a
    block of query rows at a time by ``consumer(layer)`` and published by ``close``.

    ``with TableFile(...) as tables:`` closes on a clean exit and aborts on an exception."""

    def __init__(
        self, path: Path, tables: Sequence[tuple[int, int]], n_queries: int, n_keys: int, dtype: str = "float32", *,
        clobber: bool = True,
    ) -> None:  # fmt: skip
        self.path = Path(path)
        self.tables = tuple((int(layer), int(head)) for layer, head in tables)
        self.n_queries, self.n_keys = n_queries, n_keys
        self.dtype = _file_dtype(dtype)
        header, offsets = _layout(self.path, self.tables, n_queries, n_keys, self.dtype)
        self.size = len(header) + len(self.tables) * n_queries * n_keys * self.dtype.itemsize
        _check_target(self.path, self.size)
        self._clobber = clobber
        self._target, fd, self._tmp = open_temporary(self.path, clobber=clobber)
        self._fd: int | None = fd
        self.closed = False  # published (close) or given up (abort)
        self._heads: dict[int, list[tuple[int, int]]] = {}  # layer -> its (head, table's byte offset), in file order
        for (layer, head), offset in zip(self.tables, offsets):
            self._heads.setdefault(layer, []).append((head, offset))
        # layer -> (its tables, T): each table's rows written
        self._written = {layer: np.zeros((len(heads), n_queries), dtype=bool) for layer, heads in self._heads.items()}
        try:
            os.ftruncate(fd, self.size)  # the whole file: zeros, sparse where the file system can
            _write_at(fd, header, 0)
        except OSError as err:
            self.abort()
            raise OutputError(f"cannot write {self.path}: {err.strerror or err}") from None

    @staticmethod
    def size_bytes(path: Path, tables: Sequence[tuple[int, int]], n_queries: int, n_keys: int, dtype: str = "float32") -> int:
        """The bytes the file ``TableFile(path, tables, n_queries, n_keys, dtype)`` takes, header included."""
        file_dtype = _file_dtype(dtype)
        header, _ = _layout(Path(path), tuple(tables), n_queries, n_keys, file_dtype)
        return len(header) + len(tuple(tables)) * n_queries * n_keys * file_dtype.itemsize

    @property
    def layers(self) -> tuple[int, ...]:
        """The layers with a table in the file, in file order: the ones ``consumer`` takes."""
        return tuple(self._heads)

    def consumer(self, layer: int) -> BlockConsumer:
        """The block consumer of ``layer``'s (H, R, K) weights: writes each of its heads' rows."""
        if layer not in self._heads:
            raise ValueError(f"layer {layer} has no table in {self.path} (its layers: {list(self._heads)})")

        def write(start: int, weights: torch.Tensor, first: int = 0, head: int = 0) -> None:
            self._write_block(layer, start, weights, first, head)

        return write

    def _write_block(self, layer: int, start: int, weights: torch.Tensor, first: int, head: int = 0) -> None:
        """Rows start .. start + R - 1 of ``weights`` (H', R, K) of heads head .. head + H' - 1, keys
        first .. first + K - 1, into each of ``layer``'s tables of those heads."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed: no block may come after close or abort")
        if weights.dim() != 3:
            raise ValueError(f"a block of weights is (H, R, K), not {tuple(weights.shape)}")
        heads, rows, keys = weights.shape
        if start < 0 or start + rows > self.n_queries or first < 0 or first + keys > self.n_keys:
            raise ValueError(f"rows {start}+{rows}, keys {first}+{keys} outside a {self.n_queries} x {self.n_keys} table")
        try:
            for at, (table_head, offset) in enumerate(self._heads[layer]):
                if not head <= table_head < head + heads:
                    continue
                block = weights[table_head - head].detach().to(device="cpu", dtype=self.dtype.torch)  # (R, K) on the CPU
                cells = np.ascontiguousarray(block.numpy()).astype(self.dtype.numpy, copy=False)  # (R, K) little-endian
                _write_rows(self._fd, cells, offset, start, first, self.n_keys)
                self._written[layer][at, start : start + rows] = True
        except OSError as err:
            self.abort()
            raise OutputError(f"cannot write {self.path}: {err.strerror or err}; free some space or write it elsewhere") from None

    def close(self) -> None:
        """Publish the file at ``path`` in one step. ValueError (a bug in the caller) where some
        table's rows never came; the temporary file is removed then, and on any failure."""
        if self.closed:
            return
        missing = [(layer, np.flatnonzero(~written.all(axis=0))) for layer, written in self._written.items() if not written.all()]
        if missing:
            self.abort()
            layer, rows = missing[0]
            raise ValueError(
                f"{self.path}: layer {layer}'s rows {rows[0]} .. {rows[-1]} ({len(rows)} of {self.n_queries}) never came; "
                "every block must pass before close"
            )
        try:
            os.fsync(self._fd)  # the rows on disk before the name: a crash leaves the old file or the whole new one
            fd, self._fd = self._fd, None
            os.close(fd)
            publish_temporary(self._tmp, self._target, self.path, clobber=self._clobber)
        except OSError as err:
            self.abort()
            raise OutputError(f"cannot write {self.path}: {err.strerror or err}") from None
        except BaseException:
            self.abort()
            raise
        self.closed = True

    def abort(self) -> None:
        """Give up: remove the temporary file; whatever is at ``path`` stays as it was."""
        if self.closed:
            return
        self.closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        discard_temporary(self._tmp)

    def __enter__(self) -> TableFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def _file_dtype(dtype: str) -> FileDtype:
    if dtype not in DTYPES:
        raise UsageError(f"tables are written as {' or '.join(DTYPES)}, not {dtype!r}; choose one of those")
    return DTYPES[dtype]


def _layout(path: Path, tables: tuple[tuple[int, int], ...], n_queries: int, n_keys: int, dtype: FileDtype) -> tuple[bytes, list[int]]:
    """The file's header and each table's byte offset in the file."""
    if not tables:
        raise ValueError("a table file needs at least one (layer, head)")
    if len(set(tables)) != len(tables) or min(min(t) for t in tables) < 0 or min(n_queries, n_keys) < 0:
        raise ValueError(f"tables {list(tables)} of {n_queries} x {n_keys}: each (layer, head) once, none negative")
    suffix = path.suffix.lower()
    table_bytes = n_queries * n_keys * dtype.itemsize
    if suffix == ".npy":
        if len(tables) != 1:
            raise UsageError(f"{path} is a .npy, which holds one table, not {len(tables)}; write several heads to a .safetensors")
        header = _npy_header((n_queries, n_keys), dtype.numpy)
        return header, [len(header)]
    if suffix == ".safetensors":
        header = _safetensors_header(tables, (n_queries, n_keys), dtype.safetensors, table_bytes)
        return header, [len(header) + i * table_bytes for i in range(len(tables))]
    raise UsageError(f"cannot tell how to write tables to {path}: give a name ending in {' or '.join(SUFFIXES)}")


def _npy_header(shape: tuple[int, int], descr: str) -> bytes:
    """NumPy's own header of a C-order array of ``shape``: format 1.0, or 2.0 where 1.0's 65535 bytes are not enough."""
    fields = {"descr": descr, "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buffer, fields)
    except ValueError:
        buffer = io.BytesIO()
        np.lib.format.write_array_header_2_0(buffer, fields)
    return buffer.getvalue()


def _safetensors_header(tables: tuple[tuple[int, int], ...], shape: tuple[int, int], code: str, table_bytes: int) -> bytes:
    """The length and JSON header of tables laid out back to back in the given order."""
    entries: dict[str, object] = {"__metadata__": METADATA}
    for i, (layer, head) in enumerate(tables):
        begin = i * table_bytes  # from the first byte after the header
        entries[tensor_name(layer, head)] = {"dtype": code, "shape": list(shape), "data_offsets": [begin, begin + table_bytes]}
    text = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the tables start 8-byte aligned
    return struct.pack("<Q", len(text)) + text


def _check_target(path: Path, size: int) -> None:
    """UsageError where ``path`` is not a file's name, TooLargeError where its folder has less free
    space than the whole file takes (the old file, if any, stays until the new one is whole)."""
    folder = Path(os.path.realpath(path)).parent
    if not folder.is_dir():
        return  # open_temporary names the missing folder
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"cannot write tables to {path}: it is not a regular file; give a file name")
    free = shutil.disk_usage(folder).free
    if size > free:
        raise TooLargeError(
            f"{path} needs {_amount(size)} but {folder} has {_amount(free)} free; free some space, write elsewhere, "
            "write fewer layers or heads, or write float16"
        )


def _amount(n: int) -> str:
    return gib(n) if n >= 2**20 else f"{n} bytes"


def _write_rows(fd: int, cells: np.ndarray, table: int, start: int, first: int, n_keys: int) -> None:
    """Rows start .. start + R - 1 of ``cells`` (R, K), keys first .. first + K - 1, into the table at byte ``table``."""
    rows, keys = cells.shape
    if keys == n_keys:  # whole rows: one stretch of the file
        _write_at(fd, cells, _cell_offset(table, start, 0, n_keys, cells.itemsize))
        return
    for r in range(rows):  # a band: each row's K keys, the rest of the row left 0
        _write_at(fd, cells[r], _cell_offset(table, start + r, first, n_keys, cells.itemsize))


def _cell_offset(table: int, row: int, column: int, n_keys: int, itemsize: int) -> int:
    """The byte offset of cell (row, column) of a C-order table starting at byte ``table``."""
    return table + (row * n_keys + column) * itemsize


def _write_at(fd: int, data: bytes | np.ndarray, offset: int) -> None:
    """All of ``data`` at ``offset``: pwrite may write less than asked (2 GiB at most on Linux)."""
    view = memoryview(data if isinstance(data, bytes) else data.reshape(-1).view(np.uint8))  # (bytes,) of a C-order array
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class TablesSink:
    """``--tables FILE``: one run's TableFile, opened when the first kept layer's size is known
    (``BlockPlan.sink``: called with the layer, T and S, it gives that layer's consumer)."""

    def __init__(self, path: Path, tables: Sequence[tuple[int, int]], dtype: str = "float32", *, clobber: bool = True) -> None:
        check_tables(path, tables, dtype)
        self.path, self.tables, self.dtype, self.clobber = Path(path), tuple(tables), dtype, clobber
        self.file: TableFile | None = None

    def __call__(self, layer: int, n_queries: int, n_keys: int) -> BlockConsumer:
        if self.file is None:
            self.file = TableFile(self.path, self.tables, n_queries, n_keys, self.dtype, clobber=self.clobber)
        return self.file.consumer(layer)

    def close(self) -> int:
        """Publish the file; its size in bytes."""
        if self.file is None:
            raise ValueError("no layer reached the tables' file: nothing to publish")
        self.file.close()
        return self.file.size

    def abort(self) -> None:
        if self.file is not None and not self.file.closed:
            self.file.abort()


def check_tables(path: Path, tables: Sequence[tuple[int, int]], dtype: str) -> None:
    """The refusals ``TableFile`` would make of these, before anything runs."""
    _file_dtype(dtype)
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f"--tables {path}: name a .npy file (one layer and head) or a .safetensors file (several)")
    if suffix == ".npy" and len(tables) != 1:
        raise UsageError(
            f"--tables {path}: a .npy holds one table, and {len(tables)} are chosen (layers x heads); choose one --layer "
            f"and one --head, or write a .safetensors"
        )
