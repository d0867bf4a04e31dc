"""The house's budgets, measured: modules over 400 lines, functions over 60, import circles.

    python tools/house.py            # every finding, one a line; exit 1 when there is one
    python tools/house.py --summary  # the counts only

A module's size is its line count (``page.js`` and other non-Python files aside). A
function's size runs from its ``def`` line (decorators excluded) to its last line.
An import circle is a strongly connected set of modules in the graph of every
``import`` and ``from ... import`` in ``attn_cli``, wherever it stands: at the top,
inside a function (a lazy import) or under ``if TYPE_CHECKING`` all count, since each
is a dependency a reader has to hold in mind. ``tests/house/test_house.py`` runs the same
checks.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "attn_cli"
MODULE_LINES = 400
FUNCTION_LINES = 60


@dataclass(frozen=True)
class Finding:
    kind: str  # "module", "function" or "circle"
    where: str  # a path, path:function, or the circle's modules joined by " -> "
    size: int  # lines, or the number of modules in the circle

    def __str__(self) -> str:
        unit = "modules" if self.kind == "circle" else "lines"
        return f"{self.kind} {self.where} ({self.size} {unit})"


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def oversized_modules(root: Path = PACKAGE, limit: int = MODULE_LINES) -> list[Finding]:
    found = []
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            found.append(Finding("module", path.relative_to(root.parent).as_posix(), n))
    return found


def oversized_functions(root: Path = PACKAGE, limit: int = FUNCTION_LINES) -> list[Finding]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    where = f"{path.relative_to(root.parent).as_posix()}:{node.name}"
                    found.append(Finding("function", where, n))
    return found


def imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``path`` imports (``from pkg import mod`` names the module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {name: imported(path, known) - {name} for name, path in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def import_circles(root: Path = PACKAGE) -> list[Finding]:
    return [Finding("circle", " -> ".join(c), len(c)) for c in circles(import_graph(root))]


def findings(root: Path = PACKAGE) -> list[Finding]:
    return oversized_modules(root) + oversized_functions(root) + import_circles(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--summary", action="store_true", help="print the counts only")
    args = parser.parse_args(argv)
    found = findings()
    if not args.summary:
        for f in found:
            print(f)
    counts = {kind: sum(f.kind == kind for f in found) for kind in ("module", "function", "circle")}
    print(f"{counts['module']} modules over {MODULE_LINES} lines, {counts['function']} functions over "
          f"{FUNCTION_LINES}, {counts['circle']} import circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
