"""The house's folders stand in one order along the data flow (DESIGN.md, docs/developing.md),
and each imports only from folders before it (or from itself):

    runtime < records < text < analysis < sources < formats < render < pipeline < api < compat < cli

Every import counts: at the top, inside a function, or under ``if TYPE_CHECKING``. So
computation (everything before formats) imports nothing that shows it, and the renderers
import no source: they read a ``Trace``, whatever made it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "attn_cli"

# A top-level module is a room of its own; __init__ (the lazy public names), __main__ and
# entry (the process's entry point) stand outside the order.
ORDER = ["runtime", "records", "text", "analysis", "sources", "formats", "render", "pipeline", "api", "compat", "cli"]
OUTSIDE = {"__init__", "__main__", "entry"}


def imports(path: Path) -> set[str]:
    """Every module of attn_cli's that ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.startswith("attn_cli.")}


def room(module: str) -> str:
    """The folder (or top-level module) a dotted name of attn_cli's stands in."""
    return module.split(".")[1]


def rank(name: str) -> int:
    return ORDER.index(name)


FILES = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0].removesuffix(".py") not in OUTSIDE)


def test_every_room_is_in_the_order() -> None:
    rooms = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in FILES}
    assert rooms == set(ORDER), f"a folder or module outside the order: {sorted(rooms ^ set(ORDER))}"
    assert len(FILES) >= 60 and PACKAGE / "render" / "terminal" / "tables.py" in FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_only_from_rooms_before_it(path: Path) -> None:
    here = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    later = sorted(m for m in imports(path) if room(m) in ORDER and rank(room(m)) > rank(here))
    assert not later, f"{here}/ imports {later}: a room imports only rooms before it ({' < '.join(ORDER)})"


# What shows a trace reads the trace, whatever made it: formats/ and render/ import no
# source of traces (the toy's config, embeddings and attend stay readable: explain walks
# through the toy's own steps).
SOURCES = ("attn_cli.sources.base", "attn_cli.sources.checkpoint", "attn_cli.sources.spec", "attn_cli.sources.saved",
           "attn_cli.sources.toy.source", "attn_cli.text.rankfiles")
SHOWING = sorted(p for p in FILES if p.relative_to(PACKAGE).parts[0] in ("formats", "render"))


@pytest.mark.parametrize("path", SHOWING, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_what_shows_a_trace_imports_no_source(path: Path) -> None:
    bad = sorted(m for m in imports(path) if any(m == s or m.startswith(s + ".") for s in SOURCES))
    assert not bad, f"{path.name} imports {bad}: formats and renderers read a Trace, whatever made it"


def test_a_violation_would_be_seen(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from attn_cli.render.terminal.tables import x\n"
                   "def f():\n    from attn_cli.pipeline import open_source\n")
    assert {room(m) for m in imports(bad)} == {"render", "pipeline"}
    assert all(rank(room(m)) > rank("sources") for m in imports(bad))
    bad.write_text("def f():\n    from attn_cli.sources.checkpoint.files import locate\n")
    assert any(m.startswith(SOURCES[1]) for m in imports(bad))
