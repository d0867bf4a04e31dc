"""Tokens -> X: the seed contract, user embeddings files, positional encodings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attn_cli.sources.toy.config import Config, Positional
from attn_cli.sources.toy.embed import load_embeddings, seeded_embeddings, sinusoidal
from attn_cli.runtime.errors import ConfigError, EmbeddingsError, ExitStatus, TooLargeError
from attn_cli.sources.toy.source import ToySource
from attn_cli.records.tokens import Tokens

ROWS = [[0.5, -1.0, 2.0], [1e-3, 3.0, -0.25]]


def tokens(ids: tuple[int, ...], vocab_size: int) -> Tokens:
    return Tokens(ids, tuple(f"t{i}" for i in ids), vocab_size, "test")


# --- the seed contract ---


def test_seeded_embeddings_are_rows_of_nn_embedding_after_manual_seed() -> None:
    torch.manual_seed(99)
    table = torch.nn.Embedding(7, 5)
    expected = table.weight.detach()[[3, 0, 3, 6]]  # (4, 5)
    torch.manual_seed(0)  # the function seeds for itself
    x = seeded_embeddings(tokens((3, 0, 3, 6), 7), d_model=5, seed=99)
    assert x.shape == (4, 5) and x.dtype == torch.float32
    assert torch.equal(x, expected)
    assert torch.equal(x[0], x[2])


def test_the_table_has_the_tokenizers_vocab_size() -> None:
    # torch's normal_ draws in blocks, so row 1 of a (50, 4) table differs from
    # row 1 of a (2, 4) one: the contract's V must be the tokenizer's.
    large = seeded_embeddings(tokens((1,), 50), 4, seed=5)
    torch.manual_seed(5)
    assert torch.equal(large[0], torch.nn.Embedding(50, 4).weight.detach()[1])
    assert not torch.equal(seeded_embeddings(tokens((1,), 2), 4, seed=5), large)
    assert not torch.equal(seeded_embeddings(tokens((1,), 50), 4, seed=6), large)


def test_table_too_large_is_refused_before_allocating() -> None:
    with pytest.raises(TooLargeError, match="--d-model") as info:
        seeded_embeddings(tokens((0,), 200_000), d_model=1 << 20, seed=1)
    assert info.value.exit_status == ExitStatus.TOO_LARGE


# --- embeddings files: happy paths ---


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_json_file(tmp_path: Path) -> None:
    x = load_embeddings(write(tmp_path, "x.json", json.dumps(ROWS)), 2)
    assert x.dtype == torch.float32 and x.shape == (2, 3)
    assert torch.equal(x, torch.tensor(ROWS))


def test_json_with_integers_and_a_byte_order_mark(tmp_path: Path) -> None:
    x = load_embeddings(write(tmp_path, "x.json", "\ufeff[[1, 2], [3, 4.5]]"), 2)
    assert torch.equal(x, torch.tensor([[1.0, 2.0], [3.0, 4.5]]))


def test_csv_file_with_blank_lines_and_spaces(tmp_path: Path) -> None:
    x = load_embeddings(write(tmp_path, "x.CSV", "0.5, -1, 2\n\n0.001,3,-0.25\n"), 2)
    assert torch.equal(x, torch.tensor(ROWS))


def test_npy_file(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.array(ROWS, dtype=np.float64))
    assert torch.equal(load_embeddings(path, 2), torch.tensor(ROWS))
    np.save(path, np.arange(6, dtype=np.int32).reshape(2, 3))
    assert torch.equal(load_embeddings(path, 2), torch.arange(6, dtype=torch.float32).reshape(2, 3))


def test_pipeline_takes_d_model_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "x.json", json.dumps([[0.1 * i, 1.0, -0.5, 2.0] for i in range(3)]))
    run = ToySource(Config(tokenizer="words", embeddings=path, heads=2)).run("a b c")
    assert run.model.config.d_model == 4 and run.model.config.d_k == 2 and run.model.config.d_v == 2
    assert torch.equal(run.layers[0].x, load_embeddings(path, 3))


def test_pipeline_d_model_that_disagrees_with_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "x.json", json.dumps([[1.0, 2.0]] * 3))
    with pytest.raises(ConfigError, match="--d-model 8 does not match"):
        ToySource(Config(tokenizer="words", embeddings=path, d_model=8)).run("a b c")


# --- embeddings files: every way to be wrong ---

NUMPY_HEADER = b"\x93NUMPY"

BAD_FILES = [
    # (name, content, n_tokens, words in the message)
    ("rows.json", json.dumps(ROWS), 3, "has 2 rows but the text has 3 tokens"),
    ("one.json", json.dumps(ROWS[:1]), 2, "has 1 row but the text has 2 tokens"),
    ("ragged.json", "[[1, 2, 3], [4, 5]]", 2, "row 1 has 2 numbers, row 0 has 3"),
    ("ragged.csv", "1,2,3\n4,5\n", 2, "row 1 has 2 numbers"),
    ("nan.json", "[[1, NaN], [1, 2]]", 2, "row 0 holds nan"),
    ("inf.json", "[[1, 2], [Infinity, 2]]", 2, "row 1 holds inf"),
    ("big.json", "[[1e400, 2], [1, 2]]", 2, "finite"),
    ("bigint.json", "[[" + "9" * 400 + ", 2], [1, 2]]", 2, "very large integer"),
    ("hugeint.json", "[[" + "9" * 5000 + ", 2], [1, 2]]", 2, "not usable JSON"),
    ("f32.json", "[[1e39, 2], [1, 2]]", 2, "overflows float32"),
    ("nan.csv", "1,nan\n1,2\n", 2, "holds nan"),
    ("inf.csv", "1,2\n-inf,2\n", 2, "holds -inf"),
    ("text.json", '[[1, "two"], [3, 4]]', 2, "holds 'two', which is not a number"),
    ("bool.json", "[[1, true], [3, 4]]", 2, "holds True, which is not a number"),
    ("null.json", "[[1, null], [3, 4]]", 2, "holds None"),
    ("nested.json", "[[[1]], [[2]]]", 2, "which is not a number"),
    ("deep.json", "[" * 100_000, 1, "nests lists too deeply"),
    ("flat.json", "[1, 2, 3]", 3, "expected a non-empty list of rows"),
    ("object.json", '{"rows": [[1]]}', 1, "expected a non-empty list of rows"),
    ("empty.json", "", 1, "is not valid JSON"),
    ("emptylist.json", "[]", 1, "expected a non-empty list of rows"),
    ("emptyrows.json", "[[], []]", 2, "rows are empty"),
    ("broken.json", "[[1, 2], [3, 4]", 2, "is not valid JSON"),
    ("header.csv", "a,b\n1,2\n", 1, "line 1 has a cell that is not a number"),
    ("late.csv", "1,2\n\n3,x\n", 2, "line 3 has a cell"),
    ("empty.csv", "", 1, "expected a non-empty list of rows"),
    ("latin1.json", "[[1, 2]] \xe9".encode("latin-1"), 1, "is not UTF-8"),
    ("latin1.csv", "1,2 \xe9\n".encode("latin-1"), 1, "is not UTF-8"),
    ("empty.npy", b"", 1, "is not a .npy file"),
    ("text.npy", b"[[1, 2]]", 1, "is not a .npy file"),
    ("cut.npy", None, 2, "is not a readable .npy file"),
    ("vector.npy", None, 3, "1-d float64 array"),
    ("complex.npy", None, 1, "complex128"),
    ("object.npy", None, 1, "is not a readable .npy file"),
]


def _npy_bytes(name: str) -> bytes:
    import io

    buffer = io.BytesIO()
    if name == "cut.npy":
        np.save(buffer, np.ones((2, 3)))
        return buffer.getvalue()[:-5]
    if name == "vector.npy":
        np.save(buffer, np.ones(3))
    elif name == "complex.npy":
        np.save(buffer, np.array([[1 + 2j]]))
    else:
        np.save(buffer, np.array([[1, 2]], dtype=object), allow_pickle=True)
    return buffer.getvalue()


@pytest.mark.parametrize(("name", "content", "n_tokens", "message"), BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_bad_embeddings_file(tmp_path: Path, name: str, content, n_tokens: int, message: str) -> None:
    path = write(tmp_path, name, content if content is not None else _npy_bytes(name))
    with pytest.raises(EmbeddingsError) as info:
        load_embeddings(path, n_tokens)
    text = str(info.value)
    assert message in text
    assert "\n" not in text and len(text) < 300
    assert info.value.exit_status == ExitStatus.USAGE


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_embeddings_path_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nothing.json"
    if kind == "directory":
        path.mkdir()
    with pytest.raises(EmbeddingsError, match="does not exist or is not a file"):
        load_embeddings(path, 1)


def test_bad_file_through_the_pipeline(tmp_path: Path) -> None:
    path = write(tmp_path, "x.json", json.dumps(ROWS))
    with pytest.raises(EmbeddingsError, match="has 2 rows but the text has 6 tokens"):
        ToySource(Config(tokenizer="words", embeddings=path)).run("Life is short, eat dessert first")


# --- positional encodings ---


def test_sinusoidal_matches_the_formula() -> None:
    for n_tokens, d_model in ((6, 16), (5, 7), (3, 1), (1, 2)):
        pe = sinusoidal(n_tokens, d_model)
        assert pe.shape == (n_tokens, d_model)
        for pos in range(n_tokens):
            for i in range(d_model):
                angle = pos / 10000 ** (2 * (i // 2) / d_model)
                expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
                assert pe[pos, i].item() == pytest.approx(expected, abs=1e-5), (n_tokens, d_model, pos, i)


def test_positional_sinusoidal_is_added_to_x() -> None:
    text = "I saw a saw"
    plain = ToySource(Config(tokenizer="words")).run(text)
    with_pe = ToySource(Config(tokenizer="words", positional=Positional.sinusoidal)).run(text)
    assert torch.equal(plain.layers[0].x[1], plain.layers[0].x[3])  # "saw" twice: same row without positions
    torch.testing.assert_close(with_pe.layers[0].x, plain.layers[0].x + sinusoidal(4, 16), atol=0, rtol=0)
    assert not torch.equal(with_pe.layers[0].x[1], with_pe.layers[0].x[3])


# -- hostile .npy headers, through the command line (issue 18) ------------------------------


def npy_with_header(path: Path, header: bytes, data: int = 96) -> Path:
    """A file with numpy's magic and version 1.0, then ``header`` as its header text."""
    import struct

    header = header + b" " * (63 - (len(header) + 10) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * data)
    return path


HOSTILE_HEADERS = {
    "a-call": b"{'descr': foo(), 'fortran_order': False, 'shape': (3, 4), }",
    "garbage-bytes": b"garbage \xff\xfe not python",
    "deeply-nested": b"{'descr': '<f4', 'fortran_order': False, 'shape': " + b"(" * 3000 + b")" * 3000 + b", }",
    "a-list": b"[1, 2, 3]",
    "missing-keys": b"{'descr': '<f4'}",
    "a-lambda": b"{'descr': (lambda: 1)(), 'fortran_order': False, 'shape': (3, 4)}",
}


@pytest.mark.parametrize("name", HOSTILE_HEADERS)
def test_an_npy_header_that_is_not_numpys_is_one_short_line_and_exit_2(tmp_path: Path, name: str) -> None:
    from invoking import invoke

    path = npy_with_header(tmp_path / f"{name}.npy", HOSTILE_HEADERS[name])
    result = invoke("run", "one two three", "-t", "words", "--embeddings", str(path), code=ExitStatus.USAGE)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attn-cli: error: {path} is not a readable .npy file"), result.stderr
    assert len(lines[0]) < 300 + len(str(path)) and " at 0x" not in lines[0]


@pytest.mark.parametrize("raised", [RecursionError("maximum recursion depth exceeded"), MemoryError(), KeyError("descr")])
def test_whatever_numpys_header_parser_raises_is_the_files_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException) -> None:
    """numpy versions differ in what their parser raises on bad bytes (the traceback issue 18
    saw): every exception from it means the file is unreadable."""
    np.save(tmp_path / "x.npy", np.zeros((3, 4), dtype=np.float32))

    def fails(*args, **kwargs):
        raise raised

    monkeypatch.setattr(np.lib.format, "read_array_header_1_0", fails)
    with pytest.raises(EmbeddingsError, match="is not a readable .npy file"):
        load_embeddings(tmp_path / "x.npy", 3)


def test_a_large_npy_under_an_address_space_limit_is_exit_4(tmp_path: Path) -> None:
    """A well-formed header promising 3 x 2**27 float64 (a sparse 3 GiB file), read by a
    process limited to 4 GiB of address space (`ulimit -v 4194304`): refused before it is read."""
    import os
    import resource
    import subprocess
    import sys

    from conftest import REPO

    path = npy_with_header(tmp_path / "big.npy", b"{'descr': '<f8', 'fortran_order': False, 'shape': (3, 134217728), }", data=0)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size + 3 * 134217728 * 8)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "attn_cli", "run", "one two three", "-t", "words", "--embeddings", str(path), "--d-model", "8"],
        capture_output=True, text=True, env=env, timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30)),
    )  # fmt: skip
    assert proc.returncode == ExitStatus.TOO_LARGE, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and "big.npy" in proc.stderr
