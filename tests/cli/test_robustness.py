"""Bad input, tried on purpose, through the command line.

Every case must end with no traceback, exactly one ``attn-cli: error:`` line
on stderr, the documented exit code (``ExitStatus``, README "Exit codes"), and,
when ``-o`` is given, no file left half-written: the folder holds what it held
before, byte for byte. Most cases run in-process (CliRunner); the ones that
need a real process (bytes on stdin, argv bytes, Ctrl-C, a 5 MB pipe) run one.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import invoking
import numpy as np
import pytest
from conftest import REPO

import attn_cli.runtime.files
from attn_cli.runtime.errors import ExitStatus
from attn_cli.sources.toy.config import DEFAULT_MAX_TOKENS

invoke = functools.partial(invoking.invoke, code=None, input=b"")

TEXT = "a b c"  # three tokens with the words tokenizer
WORDS = ["--tokenizer", "words"]
OK, USAGE, ERROR, TOO_LARGE, INTERRUPTED = 0, 2, 1, 4, 130


def error_line(result, code: int, *, required: bool = True) -> str:
    """The one stderr line of a clean failure with exit ``code``; with
    ``required=False`` (Ctrl-C) a silent exit passes too."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code == code, f"exit {result.exit_code}, wanted {code}; stderr: {result.stderr!r}"
    lines = result.stderr.splitlines()
    if not required and not lines:
        return ""
    assert len(lines) == 1, f"stderr must be one line, got {result.stderr!r}"
    assert lines[0].startswith("attn-cli: error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} | {
        p.name + "/": b"" for p in folder.iterdir() if p.is_dir()
    }


def run_json(args: list[str], input: bytes | str | None = b"") -> dict:
    result = invoke(*["run", *WORDS, "--format", "json", *args], input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- texts


@pytest.mark.parametrize(
    "args, input, code, says",
    [
        (["--", ""], b"", USAGE, "empty"),
        (["--", "   \t  "], b"", USAGE, "empty"),
        (["-"], b"", USAGE, "empty"),
        (["-"], b"\n\n  \n", USAGE, "empty"),
        (["--lines", "-"], b"\n   \n\t\n", USAGE, "no non-empty lines"),
        (["--", "!!! ... ???"], b"", USAGE, "no words"),
        (["-"], b"caf\xe9 au lait", USAGE, "UTF-8"),
        (["-"], b"ok\xff\xfe", USAGE, "UTF-8"),
        (["--lines", "-"], b"fine line\nbad \xc3\x28 line\n", USAGE, "UTF-8"),
    ],
    ids=["empty-arg", "whitespace-arg", "empty-stdin", "blank-stdin", "blank-lines", "punctuation-only",
         "latin1-stdin", "bad-bytes-stdin", "bad-utf8-in-batch"],
)
def test_unusable_text_is_a_usage_error(tmp_path: Path, args: list[str], input: bytes, code: int, says: str) -> None:
    (tmp_path / "keep.json").write_text("old")
    before = snapshot(tmp_path)
    result = invoke(*["run", *WORDS, "--format", "json", "-o", str(tmp_path / "keep.json"), *args], input=input)
    assert says in error_line(result, code)
    assert snapshot(tmp_path) == before


def test_single_token_attends_only_to_itself() -> None:
    data = run_json(["--", "hello"])
    assert [t["text"] for t in data["tokens"]] == ["hello"]
    assert data["layers"][0]["heads"][0]["weights"] == [[1.0]]


def test_single_token_causal_with_heads() -> None:
    data = run_json(["--heads", "4", "--causal", "--", "x"])
    assert [h["weights"] for h in data["layers"][0]["heads"]] == [[[1.0]]] * 4


@pytest.mark.parametrize("text", ["\x00", "a\x00b", "\x1b[2J", "<|endoftext|>", "👩‍👩‍👧 שלום e\u0301", "\u202eevil"])
def test_odd_characters_are_ordinary_text(text: str) -> None:
    result = invoke(*["run", *WORDS, "--format", "json", "-"], input=text.encode("utf-8"))
    if result.exit_code == 0:
        data = json.loads(result.stdout)
        assert data["text"] == text
        assert all(not any(ord(c) < 32 for c in t["label"]) for t in data["tokens"])
    else:  # a text of nothing but controls has no words
        assert "no words" in error_line(result, USAGE)


def test_endoftext_in_user_text_is_not_the_special_token(rank_dir: Path) -> None:
    data = run_json(["--tokenizer", "gpt2", "--", "Life <|endoftext|> short"])
    ids = [t["id"] for t in data["tokens"]]
    assert 50256 not in ids and "".join(t["text"] for t in data["tokens"]) == "Life <|endoftext|> short"


def test_ten_thousand_tokens_over_the_default_limit_is_refused(tmp_path: Path) -> None:
    text = " ".join(f"w{i}" for i in range(10_000))
    out = tmp_path / "out.json"
    result = invoke(*["run", *WORDS, "-o", str(out), "-"], input=text)
    line = error_line(result, TOO_LARGE)
    assert "10000" in line and str(DEFAULT_MAX_TOKENS) in line and "--max-tokens" in line
    assert list(tmp_path.iterdir()) == []


def test_one_long_line_in_a_batch_is_refused_by_number(tmp_path: Path) -> None:
    lines = "short one\n" + " ".join(["w"] * 5000) + "\nanother\n"
    out = tmp_path / "runs.jsonl"
    result = invoke(*["run", *WORDS, "--lines", "-o", str(out), "-"], input=lines)
    assert "text 2 of 3" in error_line(result, TOO_LARGE)
    assert list(tmp_path.iterdir()) == [], "the texts before the bad one must not be left as a partial file"


def test_a_long_texts_table_builds_only_the_cells_it_can_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is fitted to the terminal (a few columns of T), so its cost must
    grow with the rows shown, not with T x T: at 10,000 tokens (--max-tokens
    10000) building every cell first took over 5 minutes and 14 GB here.
    Counted as rich Text objects made, for T = 25 and T = 250 (ten times the
    rows, the same columns fit): a table that builds only what it shows makes
    about ten times as many; one that builds all T x T cells, about a hundred."""
    import rich.text

    made = 0
    original = rich.text.Text.__init__

    def counting(self, *args, **kwargs):
        nonlocal made
        made += 1
        original(self, *args, **kwargs)

    monkeypatch.setattr(rich.text.Text, "__init__", counting)
    counts = {}
    for n_tokens in (25, 250):
        made = 0
        text = " ".join(f"w{i}" for i in range(n_tokens))
        result = invoke(*["run", *WORDS, "--format", "table", "--show", "weights", "--", text])
        assert result.exit_code == 0, result.stderr
        counts[n_tokens] = made
    assert counts[250] < 20 * counts[25], f"rich Text objects made: {counts} (quadratic in T)"


def test_max_tokens_one_refuses_two_tokens() -> None:
    result = invoke(*["run", *WORDS, "--max-tokens", "1", "--", "two words"])
    assert "--max-tokens 1" in error_line(result, TOO_LARGE)


# --------------------------------------------------------------------------- options

BAD_NUMBERS = [
    ("--heads", ["0", "-1", "99999999999999999999", "abc", "1.5", ""]),
    ("--d-model", ["0", "-1", "99999999999999999999", "abc", "1e3"]),
    ("--d-k", ["0", "-1", "99999999999999999999", "abc"]),
    ("--d-v", ["0", "-1", "99999999999999999999", "abc"]),
    ("--seed", ["-1", str(2**63), "99999999999999999999999", "abc", "1.5"]),
    ("--temperature", ["0", "-1", "-0", "inf", "-inf", "nan", "1e999", "abc", ""]),
    ("--dropout", ["1", "-0.1", "1.5", "nan", "inf", "abc"]),
    ("--max-tokens", ["0", "-1", "99999999999999999999", "abc"]),
    ("--precision", ["-1", "13", "99999999999999999999", "abc"]),
    ("--head", ["-2", "1", "abc", "0-", "1,,2"]),
]


@pytest.mark.parametrize(
    "flag, value", [(flag, value) for flag, values in BAD_NUMBERS for value in values], ids=lambda v: v or "empty"
)
def test_bad_numeric_option_is_one_usage_line(tmp_path: Path, flag: str, value: str) -> None:
    out = tmp_path / "out.json"
    result = invoke(*["run", *WORDS, "--format", "json", "-o", str(out), f"{flag}={value}", "--", TEXT])
    line = error_line(result, USAGE)
    assert flag in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--seed", "0"],
        ["--seed", str(2**63 - 1)],
        ["--temperature", "1e-30"],
        ["--temperature", "1e300"],
        ["--dropout", "0"],
        ["--dropout", "0.999"],
        ["--max-tokens", "3"],
        ["--precision", "0"],
        ["--precision", "12"],
        ["--heads", "3", "--d-k", "5", "--d-v", "2"],
        ["--d-model", "1"],
    ],
    ids=" ".join,
)
def test_edge_values_that_are_valid_run(args: list[str]) -> None:
    result = invoke(*["run", *WORDS, "--format", "json", *args, "--", TEXT])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert all(abs(sum(row) - 1) < 1e-5 for h in data["layers"][0]["heads"] for row in h["weights"])


@pytest.mark.parametrize(
    "args, code, says",
    [
        (["--heads", "3"], USAGE, "--heads 3 does not divide"),
        (["--heads", "5", "--d-model", "12"], USAGE, "does not divide"),
        (["--heads", "2", "--no-projections", "--d-k", "3"], USAGE, "--no-projections"),
        (["--qkv-bias", "--no-projections"], USAGE, "--qkv-bias"),
        (["--temperature", "1e-300"], USAGE, "--temperature"),
        # Valid on their own, but each would need far more memory than any machine has:
        (["--d-model", str(2**20)], TOO_LARGE, ""),
        (["--heads", "4096", "--d-k", str(2**20), "--d-v", str(2**20)], TOO_LARGE, ""),
    ],
    ids=["heads-3-of-16", "heads-5-of-12", "no-proj-dk", "bias-no-proj", "tiny-temperature",
         "d-model-2^20", "heads-4096-dk-2^20"],
)
def test_configurations_that_do_not_add_up(tmp_path: Path, args: list[str], code: int, says: str) -> None:
    out = tmp_path / "out" / "x.json"
    out.parent.mkdir()
    result = invoke(*["run", *WORDS, "--format", "json", "-o", str(out), *args, "--", "Life is short eat dessert first"])
    assert says in error_line(result, code)
    assert list(out.parent.iterdir()) == []


def test_gpt2_embedding_table_too_large_for_memory(tmp_path: Path, rank_dir: Path) -> None:
    """nn.Embedding(50257, 2**20) would be 196 GiB."""
    out = tmp_path / "x.json"
    result = invoke(*["run", "--tokenizer", "gpt2", "--d-model", str(2**20), "-o", str(out), "--", "Life is short"])
    assert "GiB" in error_line(result, TOO_LARGE)
    assert list(tmp_path.iterdir()) == [rank_dir]


# --------------------------------------------------------------------------- embeddings files


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


GOOD_ROWS = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
BAD_EMBEDDINGS = {
    "truncated-json": ("e.json", b"[[1, 2], [3"),
    "empty-file": ("e.json", b""),
    "not-utf8": ("e.json", b"[[1, 2]]\xff"),
    "object": ("e.json", b'{"a": [1, 2]}'),
    "flat-list": ("e.json", b"[1, 2, 3]"),
    "empty-list": ("e.json", b"[]"),
    "empty-rows": ("e.json", b"[[], [], []]"),
    "ragged": ("e.json", b"[[1, 2], [3], [4, 5]]"),
    "strings": ("e.json", b'[["1", "2"], [3, 4], [5, 6]]'),
    "booleans": ("e.json", b"[[true, false], [3, 4], [5, 6]]"),
    "nested-deeper": ("e.json", b"[[[1]], [[2]], [[3]]]"),
    "too-few-rows": ("e.json", json.dumps(GOOD_ROWS[:2]).encode()),
    "too-many-rows": ("e.json", json.dumps(GOOD_ROWS * 2).encode()),
    "nan": ("e.json", b"[[NaN, 1], [2, 3], [4, 5]]"),
    "infinity": ("e.json", b"[[Infinity, 1], [2, 3], [4, 5]]"),
    "float32-overflow": ("e.json", b"[[1e39, 1], [2, 3], [4, 5]]"),
    "huge-int": ("e.json", b"[[" + b"9" * 400 + b", 1], [2, 3], [4, 5]]"),
    "deep-nesting": ("e.json", b"[" * 100_000 + b"]" * 100_000),
    "csv-header": ("e.csv", b"x,y\n1,2\n3,4\n5,6\n"),
    "csv-nan": ("e.csv", b"1,2\nnan,4\n5,6\n"),
    "csv-inf": ("e.csv", b"1,2\n3,inf\n5,6\n"),
    "csv-ragged": ("e.csv", b"1,2\n3\n5,6\n"),
    "csv-words": ("e.csv", b"one,two\n"),
    "npy-garbage": ("e.npy", b"definitely not numpy"),
    "npy-truncated": ("e.npy", _npy(np.ones((3, 2), dtype=np.float32))[:-5]),
    "npy-3d": ("e.npy", _npy(np.ones((3, 2, 1), dtype=np.float32))),
    "npy-1d": ("e.npy", _npy(np.ones(3, dtype=np.float32))),
    "npy-strings": ("e.npy", _npy(np.array([["a", "b"]] * 3))),
    "npy-nan": ("e.npy", _npy(np.array([[np.nan, 1.0], [2, 3], [4, 5]]))),
    "npy-inf": ("e.npy", _npy(np.array([[np.inf, 1.0], [2, 3], [4, 5]]))),
    "npy-wrong-rows": ("e.npy", _npy(np.ones((4, 2)))),
    "npy-complex": ("e.npy", _npy(np.ones((3, 2), dtype=np.complex64))),
}


@pytest.mark.parametrize("name", list(BAD_EMBEDDINGS))
def test_bad_embeddings_file_is_a_usage_error(tmp_path: Path, name: str) -> None:
    filename, content = BAD_EMBEDDINGS[name]
    source = tmp_path / "in"
    source.mkdir()
    (source / filename).write_bytes(content)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = invoke(*["run", *WORDS, "--format", "json", "-o", str(out_dir / "r.json"), "--embeddings", str(source / filename), "--", TEXT])
    line = error_line(result, USAGE)
    assert filename in line or "embeddings" in line, line
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_embeddings_path_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "vectors.json"
    if kind == "directory":
        path.mkdir()
    result = invoke(*["run", *WORDS, "--embeddings", str(path), "--", TEXT])
    assert str(path) in error_line(result, USAGE)


def test_embeddings_so_large_that_the_scores_overflow(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps([[3e30, 3e30], [3e30, -3e30], [1.0, 2.0]]))
    result = invoke(*["run", *WORDS, "--no-projections", "--embeddings", str(path), "--", TEXT])
    assert "overflow" in error_line(result, USAGE)


@pytest.mark.parametrize("suffix", [".json", ".csv", ".npy"])
def test_good_embeddings_file_in_each_format_gives_the_same_weights(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"e{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(GOOD_ROWS))
    elif suffix == ".csv":
        path.write_text("\n".join(",".join(map(str, r)) for r in GOOD_ROWS) + "\n")
    else:
        np.save(path, np.array(GOOD_ROWS))
    data = run_json(["--embeddings", str(path), "--", TEXT])
    assert np.array_equal(np.array(data["layers"][0]["input"], dtype=np.float32), np.array(GOOD_ROWS, dtype=np.float32))


# --------------------------------------------------------------------------- input files and -o


@pytest.mark.parametrize("kind", ["missing", "directory", "latin1"])
def test_bad_input_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "text.txt"
    if kind == "directory":
        path.mkdir()
    elif kind == "latin1":
        path.write_bytes("café".encode("latin-1"))
    result = invoke(*["run", *WORDS, "--file", str(path)])
    line = error_line(result, USAGE)
    assert str(path) in line or "UTF-8" in line


@pytest.mark.parametrize("kind", ["missing-folder", "is-a-folder"])
def test_output_that_cannot_be_written_is_a_runtime_error(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "nope" / "out.json" if kind == "missing-folder" else tmp_path / "folder"
    if kind == "is-a-folder":
        target.mkdir()
    before = snapshot(tmp_path)
    result = invoke(*["run", *WORDS, "--format", "json", "-o", str(target), "--", TEXT])
    error_line(result, ERROR)
    assert snapshot(tmp_path) == before


def test_output_to_a_named_pipe_is_written_through_it(tmp_path: Path) -> None:
    """`-o /dev/stdout`, `-o >(gzip > x.gz)` and FIFOs are not regular files:
    renaming a temporary file over one would replace the pipe, and nobody
    reading it would get the results."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = invoke(*["run", *WORDS, "--format", "json", "-o", str(fifo), "--", TEXT])
        assert result.exit_code == 0, result.stderr
        assert stat.S_ISFIFO(fifo.stat().st_mode), "-o replaced the pipe with a regular file"
        assert json.loads(os.read(reader, 1 << 20))["text"] == TEXT
    finally:
        os.close(reader)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


class FailingFile:
    """Wraps the atomic writer's file: the ``fail_on``-th write puts half its
    bytes on disk, then raises ``error``."""

    def __init__(self, real, error: BaseException, fail_on: int) -> None:
        self._real, self._error, self._left = real, error, fail_on

    def write(self, data: bytes) -> int:
        self._left -= 1
        if self._left == 0:
            self._real.write(data[: len(data) // 2])
            self._real.flush()
            raise self._error
        return self._real.write(data)

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def __enter__(self):
        self._real.__enter__()
        return self

    def __exit__(self, *exc):
        return self._real.__exit__(*exc)


@pytest.mark.parametrize(
    "error, code",
    [(OSError(28, "No space left on device"), ERROR), (KeyboardInterrupt(), INTERRUPTED)],
    ids=["disk-full", "ctrl-c"],
)
@pytest.mark.parametrize("format, suffix", [("json", ".jsonl"), ("csv", ".csv"), ("table", ".txt")])
def test_failure_mid_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, code: int, format: str, suffix: str
) -> None:
    target = tmp_path / f"runs{suffix}"
    target.write_bytes(b"the previous results\n")
    before = snapshot(tmp_path)
    real_fdopen = os.fdopen
    fail_on = 1 if format == "table" else 2  # tables are written in one piece
    wrapped = []

    def fdopen(fd, *args, **kwargs):
        f = FailingFile(real_fdopen(fd, *args, **kwargs), error, fail_on)
        wrapped.append(f)
        return f

    monkeypatch.setattr(attn_cli.runtime.files.os, "fdopen", fdopen)
    texts = "first text here\nsecond text\nthird one\n"
    result = invoke(*["run", *WORDS, "--lines", "--format", format, "-o", str(target), "-"], input=texts)
    monkeypatch.undo()
    assert wrapped, "the output did not go through attn_cli.runtime.files.atomic_writer"
    line = error_line(result, code, required=code != INTERRUPTED)
    if code == ERROR:
        assert "No space left on device" in line and str(target) in line
    assert snapshot(tmp_path) == before


def test_ctrl_c_says_interrupted_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """AttnGroup.main means to print "interrupted" (its KeyboardInterrupt branch);
    a Ctrl-C in the middle of the work must reach it."""
    import attn_cli.sources.toy.source

    def interrupted(self, text, selection=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(attn_cli.sources.toy.source.ToySource, "run", interrupted)
    result = invoke(*["run", *WORDS, "--format", "json", "--", TEXT])
    assert error_line(result, INTERRUPTED) == "attn-cli: error: interrupted"


def test_successful_write_replaces_the_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "runs.jsonl"
    target.write_text("old\n")
    result = invoke(*["run", *WORDS, "--lines", "-o", str(target), "-"], input="one two\nthree four five\n")
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["runs.jsonl"]
    assert [len(json.loads(line)["tokens"]) for line in target.read_text().splitlines()] == [2, 3]


# --------------------------------------------------------------------------- real processes


def attn_process(args: list[str], stdin=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "attn_cli", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )


def finish(proc: subprocess.Popen, stdin: bytes = b"", timeout: float = 120) -> tuple[int, bytes, bytes]:
    out, err = proc.communicate(stdin, timeout=timeout)
    return proc.returncode, out, err


def assert_clean_process_failure(code: int, err: bytes, wanted: int, *, required: bool = True) -> str:
    text = err.decode("utf-8", errors="replace")
    assert code == wanted, f"exit {code}, wanted {wanted}: {text!r}"
    assert "Traceback" not in text
    lines = text.splitlines()
    if not required and not lines:
        return ""
    assert len(lines) == 1 and lines[0].startswith("attn-cli: error: "), text
    return lines[0]


def test_invalid_utf8_on_a_real_stdin() -> None:
    code, out, err = finish(attn_process(["run", *WORDS, "-"]), b"na\xefve caf\xe9\n")
    line = assert_clean_process_failure(code, err, USAGE)
    assert "UTF-8" in line and "offset 2" in line
    assert out == b""


def test_invalid_utf8_in_argv() -> None:
    # Linux passes argv as bytes; Python hands undecodable ones over as surrogates.
    proc = subprocess.run(
        [sys.executable.encode(), b"-m", b"attn_cli", b"run", b"--tokenizer", b"words", b"caf\xe9"],
        capture_output=True, timeout=120, env=dict(os.environ),
    )
    assert "UTF-8" in assert_clean_process_failure(proc.returncode, proc.stderr, USAGE)


def test_five_megabyte_line_is_answered_quickly(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    line = b"word " * 1_000_000  # 5 MB, one line, a million tokens
    code, _, err = finish(attn_process(["run", *WORDS, "-o", str(out), "-"]), line, timeout=120)
    assert "1000000 tokens" in assert_clean_process_failure(code, err, TOO_LARGE)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_a_batch_exits_130_and_leaves_no_partial_file(tmp_path: Path) -> None:
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    words = "the cat sat on the mat and looked at every other token in turn".split()
    batch = inputs / "batch.txt"
    batch.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(8)) for i in range(20_000)) + "\n")
    target = outputs / "runs.jsonl"
    target.write_bytes(b"previous\n")
    with batch.open("rb") as stdin:
        proc = attn_process(["run", *WORDS, "--lines", "--format", "json", "-o", str(target), "-"], stdin=stdin)
    # Wait until the batch is clearly under way: its temporary file exists and has results in it.
    deadline = time.monotonic() + 120
    temporaries: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        temporaries = [p for p in outputs.iterdir() if p.name != "runs.jsonl"]
        if temporaries and _size(temporaries[0]) > 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the batch finished before it could be interrupted; make it longer"
    assert temporaries, "no temporary file appeared beside the target within 120 s"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert_clean_process_failure(proc.returncode, err, INTERRUPTED, required=False)
    assert [p.name for p in outputs.iterdir()] == ["runs.jsonl"], "the temporary file was left behind"
    assert target.read_bytes() == b"previous\n"
    assert out == b""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# --------------------------------------------------------------------------- documentation


def test_the_documented_exit_code_table_matches_the_code() -> None:
    reference = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = reference.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\|\s*(\d+)\s*\|", section, flags=re.MULTILINE)}
    assert documented == {int(status) for status in ExitStatus}
