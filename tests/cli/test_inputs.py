"""Where the text comes from, and which token --query/--key name."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoking import invoke

from attn_cli.cli import inputs
from attn_cli.cli.inputs import read_texts, resolve_position
from attn_cli.runtime.errors import AttnCliError, ExitStatus, InputError, UsageError


def fake_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


# -- read_texts, directly ----------------------------------------------------


@pytest.mark.parametrize(
    ("data", "lines", "expected"),
    [
        (b"The cat sat\n", False, ["The cat sat"]),  # echo's newline is not part of the text
        (b"The cat sat\r\n", False, ["The cat sat"]),
        (b"The cat sat\n\n", False, ["The cat sat\n"]),  # exactly one terminator is dropped
        (b"The cat sat\r", False, ["The cat sat"]),
        (b"The cat sat \n", False, ["The cat sat "]),  # spaces are the text's
        (b"two\nlines\n", False, ["two\nlines"]),  # without --lines, one text with its inner newline
        (b"one\n\n  \ntwo\r\nthree", True, ["one", "two", "three"]),  # blank and whitespace lines skipped
        (b"\xef\xbb\xbfwith a BOM\n", False, ["with a BOM"]),
        ("naïve café 🙂\n".encode(), False, ["naïve café 🙂"]),
    ],
)
def test_stdin_dash(monkeypatch: pytest.MonkeyPatch, data: bytes, lines: bool, expected: list[str]) -> None:
    fake_stdin(monkeypatch, data)
    assert read_texts(None, "-", None, lines=lines) == expected  # type: ignore[arg-type]


def test_no_text_with_a_pipe_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_stdin(monkeypatch, b"piped words\n")
    assert read_texts(None, None, None, lines=False) == ["piped words"]  # type: ignore[arg-type]


def test_file_and_file_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"from a file\nsecond line\n")
    assert read_texts(None, None, path, lines=True) == ["from a file", "second line"]  # type: ignore[arg-type]
    fake_stdin(monkeypatch, b"from stdin")
    assert read_texts(None, None, Path("-"), lines=False) == ["from stdin"]  # type: ignore[arg-type]


def test_the_argument_is_used_as_is() -> None:
    assert read_texts(None, "  I saw a saw  ", None, lines=False) == ["  I saw a saw  "]  # type: ignore[arg-type]
    assert read_texts(None, "two lines\n", None, lines=False) == ["two lines\n"]  # type: ignore[arg-type]
    assert read_texts(None, "\ufeffmarked\r\n", None, lines=False) == ["\ufeffmarked\r\n"]  # type: ignore[arg-type]
    assert read_texts(None, "a\nb", None, lines=True) == ["a", "b"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.txt", "does not exist"),
        (lambda d: d, "is a directory"),
    ],
)
def test_unreadable_files_are_usage_errors(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        read_texts(None, None, make(tmp_path), lines=False)  # type: ignore[arg-type]
    assert err.value.exit_status == ExitStatus.USAGE


@pytest.mark.parametrize("data", [b"", b"   \n\t\n", b"\n\n"])
@pytest.mark.parametrize("lines", [False, True])
def test_empty_input_is_refused(monkeypatch: pytest.MonkeyPatch, data: bytes, lines: bool) -> None:
    fake_stdin(monkeypatch, data)
    with pytest.raises(InputError, match="empty|no non-empty lines"):
        read_texts(None, "-", None, lines=lines)  # type: ignore[arg-type]


def test_invalid_utf8_names_the_byte_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1.txt is not valid UTF-8 \(byte 0xe9 at offset 3\).*iconv"):
        read_texts(None, None, path, lines=False)  # type: ignore[arg-type]


def test_text_and_file_together_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not both"):
        read_texts(None, "x", tmp_path / "f", lines=False)  # type: ignore[arg-type]


def test_dash_with_a_terminal_on_stdin_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "_stdin_is_terminal", lambda: True)
    with pytest.raises(UsageError, match="standard input, but it is a terminal"):
        read_texts(None, "-", None, lines=False)  # type: ignore[arg-type]


def test_a_failing_stdin_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Broken())))
    with pytest.raises(AttnCliError, match="cannot read standard input: Input/output error") as err:
        read_texts(None, "-", None, lines=False)  # type: ignore[arg-type]
    assert err.value.exit_status == ExitStatus.ERROR


# -- through the command line ----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["run", "-"], b"\xff\xfe bad", "the input is not valid UTF-8 (byte 0xff at offset 0)"),
        (["run", "-"], b"   \n", "the text is empty"),
        (["run"], b"", "the text is empty"),
        (["run", "--file", "nope/missing.txt"], b"", "--file nope/missing.txt does not exist"),
        (["run", "x", "--file", "f.txt"], b"", "give TEXT or --file, not both"),
        (["run", "--lines", "-"], b"\n \n", "the input has no non-empty lines"),
        (["run", "-t", "words", "!!! ..."], b"", "the text has no words once punctuation is stripped"),
    ],
)
def test_input_errors_are_one_line_and_exit_2(args: list[str], stdin: bytes, message: str) -> None:
    result = invoke(*args, input=stdin, code=ExitStatus.USAGE)
    assert result.stderr.startswith(f"attn-cli: error: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_no_text_and_a_terminal_prints_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "_stdin_is_terminal", lambda: True)
    result = invoke("run", code=ExitStatus.USAGE)
    assert "Usage: attn-cli run [OPTIONS] [TEXT]" in result.stdout
    assert "--show" in result.stdout


def test_a_real_terminal_on_stdin_never_blocks() -> None:
    """stdin is a pseudo-terminal nobody types into: the command must return at once."""
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    try:
        for args, code, where in ((["run"], 2, "stdout"), (["run", "-"], 2, "stderr")):
            proc = subprocess.run(
                [sys.executable, "-m", "attn_cli", *args],
                stdin=follower,
                capture_output=True,
                text=True,
                timeout=60,
                env=dict(os.environ, COLUMNS="100"),
            )
            assert proc.returncode == code, proc.stderr
            assert ("Usage: attn-cli run" in proc.stdout) if where == "stdout" else ("is a terminal" in proc.stderr)
    finally:
        os.close(leader)
        os.close(follower)


# -- resolve_position ----------------------------------------------------------------

GPT2_LIKE = ("I", " saw", " a", " saw", " The", "3")
GPT2_LABELS = ("I", "␣saw#1", "␣a", "␣saw#3", "␣The", "3")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0", 0),
        ("5", 5),  # a number is a position, even when a token's text is a number
        ("-1", 5),
        ("-6", 0),
        ("␣saw#3", 3),  # a label
        ("saw#1", 1),  # TEXT#POSITION, the text without its space
        (" saw#3", 3),
        ("3#5", 5),  # how to name a token whose text is a number
        ("I", 0),
        (" a", 2),  # the exact text
        ("a", 2),  # without its leading space
        ("␣a", 2),  # with the space made visible
        ("the", 4),  # no exact match: case is ignored
        ("last", 5),  # the last token, as run --query's rows take it
        (" Last ", 5),
    ],
)
def test_resolve_position(spec: str, expected: int) -> None:
    assert resolve_position(spec, GPT2_LIKE, GPT2_LABELS, "--query") == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("saw", "--query 'saw' matches 2 tokens (␣saw#1, ␣saw#3): give one of those labels or a position"),
        ("6", "--query 6 is out of range: the text has 6 tokens, positions 0 to 5"),
        ("-7", "--query -7 is out of range"),
        ("dog", "--query 'dog' is not a token of the text (I, ␣saw#1, ␣a, ␣saw#3, ␣The, 3): give a token or a position 0 to 5"),
        ("saw#2", "--query 'saw#2': the token at position 2 is '␣a', not 'saw'"),
        ("", "is not a token of the text"),
    ],
)
def test_resolve_position_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve_position(spec, GPT2_LIKE, GPT2_LABELS, "--query")
    assert message in str(err.value)
    assert err.value.exit_status == ExitStatus.USAGE


def test_last_is_the_last_token_and_a_token_last_has_its_label() -> None:
    """`last` names the last token even where a token's text is "last" (as --query's rows read it);
    that token is named by TEXT#POSITION or its label."""
    texts, labels = ("the", " last", " word", " last", "."), ("the", "␣last#1", "␣word", "␣last#3", ".")
    assert resolve_position("last", texts, labels, "--query") == 4
    assert resolve_position("last#1", texts, labels, "--query") == 1 and resolve_position("␣last#3", texts, labels, "--key") == 3
    with pytest.raises(UsageError, match="is not a token"):
        resolve_position("last:2", texts, labels, "--query")  # several rows: resolve_queries's, not one position


def test_long_texts_list_only_the_first_tokens_in_the_error() -> None:
    texts = tuple(f"w{i}" for i in range(40))
    with pytest.raises(UsageError) as err:
        resolve_position("zzz", texts, texts, "--key")
    assert "w11, ..." in str(err.value) and "w12" not in str(err.value)


def test_a_checkpoint_sees_the_argument_as_transformers_would(gpt2_folder: Path) -> None:
    """`run --model M $'two lines\\n'`: the tokens of the whole string, its newline too, as
    the model's tokenizer gives them for the same string (the negative control: the
    newline really is a token of its own here, so dropping it would change the ids)."""
    import json

    from tokenizers import Tokenizer

    text = "two lines\n"
    result = invoke("run", "--model", str(gpt2_folder), text, "-F", "json")
    data = json.loads(result.stdout)
    want = Tokenizer.from_file(str(gpt2_folder / "tokenizer.json")).encode(text).ids
    assert data["text"] == text and [t["id"] for t in data["tokens"]] == want
    assert want != Tokenizer.from_file(str(gpt2_folder / "tokenizer.json")).encode(text.rstrip("\n")).ids
