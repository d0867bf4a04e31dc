"""Standard output that fails: a full disk is one line and exit 1, a reader that
went away (`| head`) ends the command quietly with success."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys

import pytest
from invoking import invoke

from attn_cli.cli import app

FULL_DISK_COMMANDS = [
    ["run", "I saw a saw", "-t", "words", "-F", "json"],
    ["run", "I saw a saw", "-t", "words", "-F", "table"],
    ["explain", "I saw a saw", "-t", "words"],
    ["run", "I saw a saw", "-t", "words", "--emit-python"],
]


class FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    @property
    def buffer(self):  # noqa: D401  (binary writes fail the same way)
        return self

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("args", FULL_DISK_COMMANDS, ids=lambda a: " ".join(a[:1] + a[-1:]))
def test_a_full_disk_on_stdout_is_one_line_and_exit_1(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stdout", FullDisk())
    monkeypatch.setattr(sys, "stderr", stderr)
    code = app(args, standalone_mode=False)
    assert code == 1
    lines = stderr.getvalue().splitlines()
    assert lines[-1] == "attn-cli: error: cannot write standard output: No space left on device"
    assert "Traceback" not in stderr.getvalue()


def test_heatmap_path_on_a_full_disk(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stdout", FullDisk())
    monkeypatch.setattr(sys, "stderr", stderr)
    code = app(["heatmap", "I saw a saw", "-t", "words", "-o", str(tmp_path / "x.png")], standalone_mode=False)
    assert code == 1 and stderr.getvalue().endswith("cannot write standard output: No space left on device\n")


def test_a_reader_that_goes_away_ends_the_batch_quietly(tmp_path) -> None:
    lines = tmp_path / "many.txt"
    lines.write_text("".join(f"line {i} of a batch about attention\n" for i in range(400)))
    pipe = subprocess.run(
        f"{sys.executable} -m attn_cli run --file {lines} --lines -t words -F json | head -c 100 > /dev/null; "
        "echo ${PIPESTATUS[0]}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
    )
    assert pipe.stdout.strip() == "0", pipe.stderr
    assert pipe.stderr == ""


def test_cli_runner_still_sees_normal_output() -> None:
    result = invoke("run", "I saw a saw", "-t", "words", "-F", "json", code=None)
    assert result.exit_code == 0 and result.stdout.startswith("{")


# -- a long text is streamed (formats.export.write_json): failures in the middle of it --

LONG = ["run", " ".join(["attention"] * 400), "-t", "words", "--max-tokens", "1000"]  # JSON ~7 MB, CSV ~25 MB


class FillsUp:
    """A binary file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, inner, room: int) -> None:
        self.inner, self.room, self.taken = inner, room, 0

    def write(self, data: bytes) -> int:
        if self.taken + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.taken += len(data)
        return self.inner.write(data)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.inner.close()


class StdoutFillsUp(io.StringIO):
    def __init__(self, room: int) -> None:
        super().__init__()
        self.buffer = FillsUp(io.BytesIO(), room)

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_stdout_filling_up_mid_table_is_one_line_and_exit_1(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stdout, stderr = StdoutFillsUp(3 * 2**20), io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert app([*LONG, "-F", fmt], standalone_mode=False) == 1
    assert stdout.buffer.taken > 2**20  # it failed part way, after writing
    assert stderr.getvalue() == "attn-cli: error: cannot write standard output: No space left on device\n"


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_file_filling_up_mid_table_is_one_line_and_leaves_the_old_file(fmt: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / f"out.{fmt}"
    target.write_text("before\n")
    real = os.fdopen
    opened: list[FillsUp] = []

    def fdopen(fd, *args, **kwargs):
        opened.append(FillsUp(real(fd, *args, **kwargs), 3 * 2**20))
        return opened[-1]

    monkeypatch.setattr(os, "fdopen", fdopen)
    result = invoke(*LONG, "-o", str(target), code=1)
    assert opened and opened[0].taken > 2**20
    assert result.stderr == f"attn-cli: error: cannot write {target}: No space left on device\n"
    assert target.read_text() == "before\n" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no .part


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_reader_that_goes_away_mid_table_ends_quietly(fmt: str) -> None:
    pipe = subprocess.run(
        f"{sys.executable} -m attn_cli {' '.join(LONG[:1])} \"$TEXT\" {' '.join(LONG[2:])} -F {fmt} | head -c 100 > /dev/null; "
        "echo ${PIPESTATUS[0]}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120, env={**os.environ, "TEXT": LONG[1]},
    )
    assert pipe.stdout.strip() == "0", pipe.stderr
    assert pipe.stderr == ""
