"""Every command that writes a file with -o says so once, in the same words (issue 34): `wrote
PATH  (DETAIL)`. Where the file holds what stdout would have held (run, heads, compare and explain
writing JSON, CSV or text) the line goes to stderr and stdout stays empty; where the file is a
picture or a page (heatmap, html, the pictures of heads and compare) the path is the command's
result on stdout, alone when piped, in those words on a terminal."""

from __future__ import annotations

import importlib
import struct
import types
from pathlib import Path
from typing import Any

import pytest
import typer
from invoking import check_said_once as _check_said_once, commands, invoke, options


cli_output = importlib.import_module("attn_cli.cli.output")
compare_cli = importlib.import_module("attn_cli.cli.compare")

SAW = ("I saw a saw", "-t", "words")
# (the command line before -o, the file's extension, where the written path is said)
CASES = [
    (("run", *SAW), "json", "stderr"),
    (("run", *SAW), "csv", "stderr"),
    (("run", *SAW), "txt", "stderr"),
    (("run", "--lines", "-t", "words", "-"), "jsonl", "stderr"),  # a batch: one file, one line
    (("heads", *SAW), "json", "stderr"),
    (("heads", *SAW), "csv", "stderr"),
    (("heads", *SAW), "txt", "stderr"),
    (("compare", "I saw a saw", "I saw a cat", "-t", "words"), "json", "stderr"),
    (("compare", "I saw a saw", "I saw a cat", "-t", "words"), "csv", "stderr"),
    (("compare", "I saw a saw", "I saw a cat", "-t", "words"), "txt", "stderr"),
    (("compare", "I saw a saw", "I saw a cat", "-t", "words"), "png", "stdout"),
    (("explain", *SAW), "txt", "stderr"),
    (("explain", *SAW, "-F", "rich"), "txt", "stderr"),
    (("heatmap", *SAW), "png", "stdout"),
    (("html", *SAW), "html", "stdout"),
    (("census", "-", "-t", "words"), "json", "stderr"),
    (("census", "-", "-t", "words"), "csv", "stderr"),
    (("census", "-", "-t", "words"), "txt", "stderr"),
]
BATCH = "I saw a saw\nHello shiny sun\n"
# commands that need a trained model, whose written files are checked with one (by _check_said_once) where its tests build it
ELSEWHERE = {"faithfulness": "tests/analysis/test_faithfulness.py"}
FIRST_OF_EACH = {args[0]: (args, ext) for args, ext, where in reversed(CASES) if where == "stderr"}  # run, heads, compare, explain


@pytest.mark.parametrize("args, ext, where", CASES, ids=[f"{a[0]} .{e}{' --lines' * ('--lines' in a)}{' rich' * ('rich' in a)}" for a, e, _ in CASES])
def test_a_written_file_is_said_once_in_the_same_words(args: tuple[str, ...], ext: str, where: str, tmp_path: Path) -> None:
    _check_said_once(args, ext, where, tmp_path)


@pytest.mark.parametrize("args, fmt", [(("run", *SAW), "json"), (("run", *SAW), "csv"), (("heads", *SAW), "json"), (("explain", *SAW), "text")])
def test_without_o_stdout_is_the_files_bytes_and_nothing_is_said(args: tuple[str, ...], fmt: str, tmp_path: Path) -> None:
    path = tmp_path / "out"
    to_file = invoke(*args, "-F", fmt, "-o", str(path))
    to_stdout = invoke(*args, "-F", fmt)
    assert to_stdout.stdout.encode("utf-8") == path.read_bytes() and "wrote" not in to_stdout.stderr
    assert to_file.stderr.splitlines()[-1].startswith(f"wrote {path}  (")


def _uncovered(cases: list[tuple[tuple[str, ...], str, str]]) -> set[str]:
    """The commands that take -o with no case above: a new one must say what it wrote too."""
    taking = {path[0] for path, command in commands().items() if "--output" in options(command)}
    return taking - {args[0] for args, _, _ in cases} - set(ELSEWHERE)


def test_every_command_that_takes_o_is_checked() -> None:
    assert _uncovered(CASES) == set()


def _png_pixels(data: bytes) -> tuple[int, int]:
    return struct.unpack(">II", data[16:24])  # the IHDR chunk's width and height


def test_a_picture_on_a_terminal_says_wrote_with_its_pixels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare's picture, as heatmap's: `wrote pair.png  (W×H px)` on a terminal (it printed the path alone)."""
    monkeypatch.setattr(cli_output, "stdout_is_terminal", lambda: True)
    out = tmp_path / "pair.png"
    result = invoke("compare", "I saw a saw", "I saw a cat", "-t", "words", "-o", str(out))
    assert result.stdout == "wrote {}  ({}×{} px)\n".format(out, *_png_pixels(out.read_bytes()))


def test_heads_picture_on_a_terminal_says_wrote_with_its_pixels(gpt2_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "stdout_is_terminal", lambda: True)
    out = tmp_path / "ablation.png"
    result = invoke("heads", "The cat sat on the mat", "--model", str(gpt2_folder), "--ablate", "zero", "--no-probe", "-o", str(out))
    assert result.stdout == "wrote {}  ({}×{} px)\n".format(out, *_png_pixels(out.read_bytes()))


# -- negative controls: the checks above fail on the bugs they are for ---------------------------


def _echo(bug: str) -> Any:
    """typer.echo as output.py would call it with ``bug``: the line never said, said on stdout, or said twice."""

    def echo(message: Any = None, err: bool = False, **kwargs: Any) -> None:
        if bug == "silent" and err:
            return
        for _ in range(2 if bug == "twice" and err else 1):
            typer.echo(message, err=err and bug != "on stdout", **kwargs)

    return types.SimpleNamespace(echo=echo)


@pytest.mark.parametrize("bug", ["silent", "on stdout", "twice"])
def test_control_the_check_finds_a_line_missing_misplaced_or_doubled(bug: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "typer", _echo(bug))
    for args, ext in FIRST_OF_EACH.values():
        with pytest.raises(AssertionError):
            _check_said_once(args, ext, "stderr", tmp_path)


def test_control_a_picture_said_twice_or_in_words_when_piped_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "stdout_is_terminal", lambda: True)
    with pytest.raises(AssertionError):
        _check_said_once(("heatmap", *SAW), "png", "stdout", tmp_path)
    monkeypatch.undo()
    monkeypatch.setattr(compare_cli, "report_written", lambda path, detail: (typer.echo(str(path)), typer.echo(str(path), err=True)))
    with pytest.raises(AssertionError):
        _check_said_once(("compare", "I saw a saw", "I saw a cat", "-t", "words"), "png", "stdout", tmp_path)


def test_control_the_path_alone_on_a_terminal_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What compare printed before issue 34."""
    monkeypatch.setattr(compare_cli, "report_written", lambda path, detail: typer.echo(str(path)))
    with pytest.raises(AssertionError):
        test_a_picture_on_a_terminal_says_wrote_with_its_pixels(tmp_path, monkeypatch)


def test_control_a_command_without_a_case_is_found() -> None:
    assert _uncovered([case for case in CASES if case[0][0] != "explain"]) == {"explain"}
