"""Atomic writes and --no-clobber: the refusal is one step with the write, for every command that writes files."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from invoking import invoke

from attn_cli.runtime import files
from attn_cli.runtime.errors import OutputError
from attn_cli.runtime.files import atomic_writer


def test_no_clobber_writes_a_new_file(tmp_path: Path) -> None:
    target = tmp_path / "new.txt"
    with atomic_writer(target, clobber=False) as f:
        f.write(b"fresh")
    assert target.read_bytes() == b"fresh"
    assert [p.name for p in tmp_path.iterdir()] == ["new.txt"]  # the temporary's name is gone too


def test_no_clobber_refuses_an_existing_file_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "kept.txt"
    target.write_bytes(b"mine")
    with pytest.raises(OutputError, match="kept.txt already exists and --no-clobber keeps it"):
        with atomic_writer(target, clobber=False) as f:
            pytest.fail("the body should not run")  # noqa: PT016 (refused before the work)
            f.write(b"theirs")
    assert target.read_bytes() == b"mine"


@pytest.mark.parametrize("hard_links", [True, False])
def test_a_file_created_while_writing_wins_and_the_writer_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool) -> None:
    """Another process creates the name after the early check: publishing must not replace it."""
    if not hard_links:  # a file system without link(2): the check-then-rename fallback
        def no_link(src: str, dst: str) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_link)
    target = tmp_path / "raced.txt"
    with pytest.raises(OutputError, match="raced.txt already exists"):
        with atomic_writer(target, clobber=False) as f:
            f.write(b"second")
            target.write_bytes(b"first")  # the other writer, between our check and our publish
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["raced.txt"]
    assert not files._temporaries


def test_clobber_replaces_as_before(tmp_path: Path) -> None:
    target = tmp_path / "old.txt"
    target.write_bytes(b"old")
    with atomic_writer(target) as f:
        f.write(b"new")
    assert target.read_bytes() == b"new"


COMMANDS = [
    (["run", "a b", "-t", "words"], "out.json"),
    (["run", "a b", "-t", "words", "--format", "table"], "out.txt"),
    (["heatmap", "a b", "-t", "words"], "out.png"),
    (["explain", "a b", "-t", "words"], "out.txt"),
    (["html", "a b", "-t", "words"], "out.html"),
    (["heads", "a b", "-t", "words", "--format", "json"], "out.json"),
    (["heads", "a b", "-t", "words", "--format", "table"], "out.txt"),
]


@pytest.mark.parametrize(("args", "name"), COMMANDS)
def test_every_command_that_writes_files_honours_no_clobber(tmp_path: Path, args: list[str], name: str) -> None:
    target = tmp_path / name
    target.write_bytes(b"precious")
    result = invoke(*args, "-o", str(target), "--no-clobber", code=1)
    assert f"{target} already exists" in result.stderr and "--no-clobber" in result.stderr
    assert target.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == [name]
    fresh = tmp_path / f"fresh{target.suffix}"
    invoke(*args, "-o", str(fresh), "--no-clobber")
    assert fresh.stat().st_size > 0


@pytest.mark.parametrize(("command", "name"), [("heatmap", "a-b.png"), ("html", "a-b.html")])
def test_replacing_a_default_name_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    first = invoke(command, "a b", "-t", "words", code=None)
    assert first.exit_code == 0 and "replaced" not in first.stderr
    again = invoke(command, "a b", "-t", "words")
    assert f"note: replaced {name}" in again.stderr
    named = invoke(command, "a b", "-t", "words", "-o", name, code=None)  # the user named it: no note
    assert named.exit_code == 0 and "replaced" not in named.stderr
