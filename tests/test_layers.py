"""The layers of the package stay apart (DESIGN.md): computation (tokenize, embed,
attention, checkpoints, the trace) imports nothing from the renderers or the CLI, and
renderers do not care where the attention came from: they import no source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "attn_cli"

# What the renderers may not import: the sources and what loads their data.
SOURCES = ("attn_cli.pipeline", "attn_cli.checkpoint", "attn_cli.source", "attn_cli.text.rankfiles")
# Computation: everything outside render/ and cli/ (and the package's entry points and
# the Python API, a front end like the command line).
ENTRY_POINTS = {"__init__.py", "__main__.py", "entry.py", "api.py"}
# One deliberate exception: a Trace's notebook methods (_repr_html_, heatmap, page,
# to_json) call the Python API, imported lazily inside them.
ALLOWED = {("records/trace.py", "attn_cli.api")}


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


RENDERERS = sorted((PACKAGE / "render").rglob("*.py"))
COMPUTATION = sorted(
    p for p in PACKAGE.rglob("*.py")
    if p.relative_to(PACKAGE).parts[0] not in ("render", "cli") and p.relative_to(PACKAGE).as_posix() not in ENTRY_POINTS
)


def test_the_lists_are_not_empty() -> None:
    assert len(RENDERERS) >= 6 and len(COMPUTATION) >= 12
    assert PACKAGE / "checkpoint" / "model.py" in COMPUTATION and PACKAGE / "render" / "tables.py" in RENDERERS


@pytest.mark.parametrize("path", RENDERERS, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_renderers_import_no_source(path: Path) -> None:
    bad = sorted(m for m in imports(path) if under(m, SOURCES + ("attn_cli.cli",)))
    assert not bad, f"{path.name} imports {bad}: renderers read a Trace, whatever made it"


@pytest.mark.parametrize("path", COMPUTATION, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_computation_imports_no_renderer_or_cli(path: Path) -> None:
    name = path.relative_to(PACKAGE).as_posix()
    bad = sorted(
        m for m in imports(path)
        if under(m, ("attn_cli.render", "attn_cli.cli", "attn_cli.api")) and not any((name, a) == (name, m) or m.startswith(a) for n, a in ALLOWED if n == name)
    )
    assert not bad, f"{name} imports {bad}: computation must not depend on how it is shown"


def test_a_violation_would_be_seen(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from attn_cli.pipeline import Pipeline\n")
    assert any(under(m, SOURCES) for m in imports(bad))
