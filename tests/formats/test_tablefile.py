"""TableFile, fed the blocks of attend_in_blocks, against attend's whole table: the .npy read by
numpy.load and the .safetensors by the safetensors library (numpy and torch), for a causal mask
and a window, blocks of 1, 7 and every row, float32 and float16. The file appears at its name
only when close succeeds; abort, an exception or a missing block leave nothing, not even the
temporary file. Controls: rows written one row down, the last block missing."""

from __future__ import annotations

import collections
import errno
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy
import torch

from attn_cli.formats import tablefile
from attn_cli.formats.tablefile import METADATA, TableFile, tensor_name
from attn_cli.records.band import Band
from attn_cli.runtime import files
from attn_cli.runtime.errors import OutputError, TooLargeError, UsageError
from attn_cli.sources.attend import attend
from attn_cli.sources.blocks import attend_in_blocks

T, HEADS, DK = 37, 3, 8
DIVISOR = DK**0.5
BANDS = {"causal": Band(after=0), "window": Band(before=4, after=0)}
BLOCK_ROWS = [1, 7, T]


def inputs(layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's seeded queries, keys (H, T, Dk) and values (H, T, Dk), sharp enough for small weights."""
    gen = torch.Generator().manual_seed(100 + layer)
    queries = torch.randn(HEADS, T, DK, generator=gen) * 3  # (H, T, Dk)
    return queries, torch.randn(HEADS, T, DK, generator=gen), torch.randn(HEADS, T, DK, generator=gen)


def whole(layer: int, band: Band) -> np.ndarray:
    """(H, T, T) attend's weights of the whole table, float32."""
    queries, keys, values = inputs(layer)
    return attend(queries, keys, values, divisor=DIVISOR, mask=band.table(T))[1].numpy()  # (H, T, T)


def feed(out: TableFile, band: Band, block_rows: int, drop_last: bool = False, heads_at_once: int | None = None) -> None:
    """Every layer of ``out``, its blocks of ``block_rows`` query rows as attend_in_blocks gives them."""
    for layer in out.layers:
        write = out.consumer(layer)
        last = (T - 1) // block_rows * block_rows  # the last block's first row

        def consumer(start: int, weights: torch.Tensor, first: int, head: int, write=write, last=last) -> None:
            if not (drop_last and start == last):
                write(start, weights, first, head)

        attend_in_blocks(
            *inputs(layer), divisor=DIVISOR, mask=band, block_rows=block_rows, consumers=[consumer], heads_at_once=heads_at_once
        )


def written(
    path: Path, tables: list[tuple[int, int]], band: Band, block_rows: int, dtype: str = "float32", heads_at_once: int | None = None
) -> None:
    with TableFile(path, tables, T, T, dtype) as out:
        feed(out, band, block_rows, heads_at_once=heads_at_once)


def assert_table(table: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    """``table`` (T, S) is ``expected`` (T, S) float32 within 1e-6, or within float16 rounding of it."""
    assert table.shape == expected.shape and table.dtype == np.dtype(tablefile.DTYPES[dtype].numpy)
    if dtype == "float32":
        np.testing.assert_allclose(table, expected, rtol=0, atol=1e-6)
    else:  # a block's float32 weight can differ from the whole table's in its last bit: one float16 step at most
        np.testing.assert_allclose(table.astype(np.float32), expected.astype(np.float16).astype(np.float32), rtol=2**-10, atol=2**-24)
    assert (np.asarray(table)[expected == 0] == 0).all()  # the keys outside the band: exactly 0


def left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
@pytest.mark.parametrize("band", BANDS.values(), ids=BANDS.keys())
def test_npy_is_the_whole_table(tmp_path: Path, band: Band, block_rows: int, dtype: str) -> None:
    path = tmp_path / "table.npy"
    written(path, [(0, 2)], band, block_rows, dtype)
    assert_table(np.load(path, mmap_mode="r"), whole(0, band)[2], dtype)
    with open(path, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0)
        shape, fortran_order, descr = np.lib.format.read_array_header_1_0(f)
        assert (shape, fortran_order, descr.str) == ((T, T), False, tablefile.DTYPES[dtype].numpy)
        assert f.tell() % 64 == 0  # the table starts aligned, as numpy writes it
    assert left(tmp_path) == ["table.npy"]


@pytest.mark.parametrize("heads_at_once", [None, 1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("block_rows", BLOCK_ROWS)
@pytest.mark.parametrize("band", BANDS.values(), ids=BANDS.keys())
def test_safetensors_holds_every_table_named_and_in_order(
    tmp_path: Path, band: Band, block_rows: int, dtype: str, heads_at_once: int | None
) -> None:
    path = tmp_path / "tables.safetensors"
    tables = [(1, 2), (0, 0), (1, 0), (0, 2)]  # two layers, several heads, not sorted
    written(path, tables, band, block_rows, dtype, heads_at_once)
    expected = {layer: whole(layer, band) for layer in (0, 1)}
    loaded = safetensors.numpy.load_file(path)
    assert set(loaded) == {tensor_name(layer, head) for layer, head in tables}
    assert tensor_name(1, 2) == "layer.1.head.2"
    for layer, head in tables:
        assert_table(loaded[tensor_name(layer, head)], expected[layer][head], dtype)
    with safetensors.safe_open(path, framework="pt") as f:
        assert f.metadata() == METADATA
        for layer, head in tables:
            tensor = f.get_tensor(tensor_name(layer, head))
            assert tensor.dtype == tablefile.DTYPES[dtype].torch and tensor.shape == (T, T)
            assert_table(tensor.numpy(), expected[layer][head], dtype)
    assert left(tmp_path) == ["tables.safetensors"]


def test_safetensors_header_lays_the_tables_back_to_back_in_the_order_given(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    tables = [(3, 1), (0, 2), (3, 0)]
    with TableFile(path, tables, T, 5, "float16") as out:
        assert out.size == TableFile.size_bytes(path, tables, T, 5, "float16")
        for layer in out.layers:
            out.consumer(layer)(0, torch.rand(HEADS, T, 5), 0)  # (H, T, S) every row in one block
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length], object_pairs_hook=collections.OrderedDict)
    assert length % 8 == 0 and data[8 : 8 + length].endswith((b"}", b" "))
    assert list(header) == ["__metadata__", "layer.3.head.1", "layer.0.head.2", "layer.3.head.0"]
    table_bytes = T * 5 * 2
    for i, name in enumerate(list(header)[1:]):
        assert header[name] == {"dtype": "F16", "shape": [T, 5], "data_offsets": [i * table_bytes, (i + 1) * table_bytes]}
    assert len(data) == 8 + length + 3 * table_bytes == out.size


@pytest.mark.parametrize("suffix", [".npy", ".safetensors"])
def test_size_bytes_is_the_file_size(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"t{suffix}"
    tables = [(0, 1)] if suffix == ".npy" else [(0, 1), (0, 0)]
    written(path, tables, BANDS["causal"], 7, "float16")
    assert path.stat().st_size == TableFile.size_bytes(path, tables, T, T, "float16")


def test_bfloat16_blocks_are_written_exactly_as_float32(tmp_path: Path) -> None:
    weights = torch.softmax(torch.randn(HEADS, T, T, generator=torch.Generator().manual_seed(3)), -1).to(torch.bfloat16)  # (H, T, T)
    path = tmp_path / "b.npy"
    with TableFile(path, [(0, 1)], T, T) as out:
        for start in range(0, T, 7):
            out.consumer(0)(start, weights[:, start : start + 7, 2:].contiguous(), 2)  # (H, R, T - 2) keys 2 .. T - 1
    expected = weights.float().numpy()[1]  # (T, T)
    expected[:, :2] = 0
    assert np.array_equal(np.load(path), expected)


def test_npy_holds_one_table_and_other_suffixes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\.npy, which holds one table, not 2; write several heads to a \.safetensors"):
        TableFile(tmp_path / "t.npy", [(0, 0), (0, 1)], T, T)
    for bad in ("t.pt", "t.npz", "tables"):
        with pytest.raises(UsageError, match=r"give a name ending in \.npy or \.safetensors"):
            TableFile(tmp_path / bad, [(0, 0)], T, T)
    with pytest.raises(UsageError, match="float32 or float16"):
        TableFile(tmp_path / "t.safetensors", [(0, 0)], T, T, "bfloat16")
    assert left(tmp_path) == []


@pytest.mark.parametrize("name", ["t.npy", "t.safetensors"])
def test_abort_and_an_exception_leave_nothing(tmp_path: Path, name: str) -> None:
    out = TableFile(tmp_path / name, [(0, 0)], T, T)
    feed(out, BANDS["causal"], 7)
    assert len(left(tmp_path)) == 1 and left(tmp_path)[0].startswith(f".{name}.")  # the temporary, beside it
    out.abort()
    out.close()  # after abort: nothing to publish
    assert left(tmp_path) == []
    with pytest.raises(RuntimeError, match="a failing layer"):
        with TableFile(tmp_path / name, [(0, 0)], T, T) as out:
            feed(out, BANDS["causal"], 7)
            raise RuntimeError("a failing layer")
    assert left(tmp_path) == []


def test_an_existing_file_is_untouched_until_close(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(b"precious")
    with pytest.raises(KeyboardInterrupt):
        with TableFile(path, [(0, 0)], T, T) as out:
            feed(out, BANDS["window"], 7)
            raise KeyboardInterrupt
    assert path.read_bytes() == b"precious" and left(tmp_path) == ["t.safetensors"]
    out = TableFile(path, [(0, 0)], T, T)
    feed(out, BANDS["window"], 7)
    assert path.read_bytes() == b"precious"  # every row written, not yet published
    out.close()
    assert_table(safetensors.numpy.load_file(path)["layer.0.head.0"], whole(0, BANDS["window"])[0], "float32")
    assert left(tmp_path) == ["t.safetensors"]


def test_no_clobber_keeps_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    path.write_bytes(b"mine")
    with pytest.raises(OutputError, match="already exists and --no-clobber keeps it"):
        TableFile(path, [(0, 0)], T, T, clobber=False)
    assert path.read_bytes() == b"mine" and left(tmp_path) == ["t.npy"]


def test_too_little_free_space_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.safetensors"
    tables = [(layer, head) for layer in range(4) for head in range(HEADS)]
    size = TableFile.size_bytes(path, tables, T, T)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10 * size, 9 * size, size - 1))
    with pytest.raises(TooLargeError, match=rf"t\.safetensors needs {size} bytes but .* has {size - 1} bytes free; free some space"):
        TableFile(path, tables, T, T)
    assert left(tmp_path) == []
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(2**40, 2**40 - 2**31, 2**31))
    with pytest.raises(TooLargeError, match=r"needs 4\.0 GiB but .* has 2\.0 GiB free"):
        TableFile(path, [(0, 0)], 2**15, 2**15)
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10 * size, 9 * size, size))
    TableFile(path, tables, T, T).abort()  # exactly enough
    assert left(tmp_path) == []


@pytest.mark.parametrize("step", ["pwrite", "fsync"])
def test_a_full_disk_while_writing_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    path = tmp_path / "t.npy"
    path.write_bytes(b"old")
    out = TableFile(path, [(0, 0)], T, T)
    real, calls = getattr(os, step), []
    after = 3 if step == "pwrite" else 0  # a few rows written first; close's one fsync

    def full(fd: int, *args: object) -> object:
        calls.append(fd)
        if len(calls) > after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *args)

    monkeypatch.setattr(os, step, full)
    with pytest.raises(OutputError, match=r"cannot write .*t\.npy: No space left on device"):
        with out:
            feed(out, BANDS["causal"], 1)
    assert path.read_bytes() == b"old" and left(tmp_path) == ["t.npy"] and not files._temporaries
    with pytest.raises(OSError):
        os.fstat(calls[0])  # the descriptor was closed


@pytest.mark.parametrize("block_rows", [7, T])  # a band's rows one at a time; whole rows in one write
@pytest.mark.parametrize("suffix", [".npy", ".safetensors"])
def test_control_rows_written_one_row_down_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, block_rows: int
) -> None:
    offset = tablefile._cell_offset

    def one_row_down(table: int, row: int, column: int, n_keys: int, itemsize: int) -> int:
        return offset(table, row + 1, column, n_keys, itemsize)

    monkeypatch.setattr(tablefile, "_cell_offset", one_row_down)
    path = tmp_path / f"t{suffix}"
    band = BANDS["causal"] if block_rows == 7 else Band()
    written(path, [(0, 1)], band, block_rows)
    os.truncate(path, TableFile.size_bytes(path, [(0, 1)], T, T))  # the last row went past the end; safetensors would refuse the file
    table = np.load(path) if suffix == ".npy" else safetensors.numpy.load_file(path)["layer.0.head.1"]
    with pytest.raises(AssertionError):
        assert_table(table, whole(0, band)[1], "float32")


@pytest.mark.parametrize("block_rows", [1, 7])
def test_control_a_missing_last_block_makes_close_raise(tmp_path: Path, block_rows: int) -> None:
    path = tmp_path / "t.safetensors"
    out = TableFile(path, [(0, 0), (1, 2)], T, T)
    feed(out, BANDS["causal"], block_rows, drop_last=True)
    first_missing = 36 if block_rows == 1 else 35
    with pytest.raises(ValueError, match=rf"layer 0's rows {first_missing} \.\. 36 \({T - first_missing} of {T}\) never came"):
        out.close()
    assert left(tmp_path) == []
    with pytest.raises(ValueError, match="never came"):
        with TableFile(path, [(0, 0)], T, T) as out:
            feed(out, BANDS["causal"], block_rows, drop_last=True)
    assert left(tmp_path) == []


def test_a_block_for_a_layer_or_head_not_in_the_file_is_a_bug(tmp_path: Path) -> None:
    with TableFile(tmp_path / "t.safetensors", [(0, 4)], 2, 2) as out:
        with pytest.raises(ValueError, match="layer 1 has no table"):
            out.consumer(1)
        with pytest.raises(ValueError, match="outside a 2 x 2 table"):
            out.consumer(0)(1, torch.zeros(5, 2, 2), 0)
        out.consumer(0)(0, torch.zeros(5, 2, 2), 0)
    with pytest.raises(ValueError, match="is closed"):
        out.consumer(0)(0, torch.zeros(5, 2, 2), 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_blocks(tmp_path: Path, dtype: str) -> None:
    band = BANDS["window"]
    path = tmp_path / "t.safetensors"
    with TableFile(path, [(0, 0), (0, 2)], T, T, dtype) as out:
        queries, keys, values = (x.cuda() for x in inputs(0))
        attend_in_blocks(queries, keys, values, divisor=DIVISOR, mask=band, block_rows=7, consumers=[out.consumer(0)])
    loaded = safetensors.numpy.load_file(path)
    for head in (0, 2):
        assert_table(loaded[tensor_name(0, head)], whole(0, band)[head], dtype)
