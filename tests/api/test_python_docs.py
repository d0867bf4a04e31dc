"""docs/python.md's examples run, in order, in one namespace, in an empty folder: the
page cannot promise what the API does not do."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from conftest import REPO

DOC = REPO / "docs" / "python.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_examples() -> None:
    assert len(blocks()) >= 5


def test_every_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    printed = io.StringIO()
    for number, code in enumerate(blocks(), start=1):
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"docs/python.md block {number}", "exec"), namespace)  # noqa: S102
    out = printed.getvalue()
    # what the comments say the examples print
    assert "('I', 'saw#1', 'a', 'saw#3')" in out
    assert "bert 6 12" in out
    assert out.count("True") >= 2
    assert "causal is an option of the seeded toy model" in out
    for written in ("cat.json", "layer2.png", "head-view.html"):
        assert (tmp_path / written).stat().st_size > 1000, written
