"""The house's budgets (issue 33): no module over 400 lines, no function over 60, no import
circle, lazy and TYPE_CHECKING imports counted. ``tools/house.py`` measures them.

The debts below are the modules and functions still over budget; each may only shrink. A
new finding fails, a debt that grew fails, and a debt that is paid must leave the list (so
the list says what is left). No import circle is left, and none may come back."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from conftest import REPO

_spec = importlib.util.spec_from_file_location("house", REPO / "tools" / "house.py")
house = importlib.util.module_from_spec(_spec)
sys.modules["house"] = house
_spec.loader.exec_module(house)

# where -> the most lines it may still have
DEBTS: dict[str, int] = {}


def test_no_new_oversized_module_or_function() -> None:
    found = {f.where: f.size for f in house.oversized_modules() + house.oversized_functions()}
    new = sorted(w for w in found if w not in DEBTS)
    grown = sorted(f"{w}: {found[w]} > {DEBTS[w]}" for w in found if w in DEBTS and found[w] > DEBTS[w])
    assert not new, f"over the budget (modules {house.MODULE_LINES} lines, functions {house.FUNCTION_LINES}): {new}"
    assert not grown, f"debts that grew: {grown}"


def test_paid_debts_leave_the_list() -> None:
    found = {f.where for f in house.oversized_modules() + house.oversized_functions()}
    paid = sorted(set(DEBTS) - found)
    assert not paid, f"within the budget now: take them out of DEBTS: {paid}"


def test_no_import_circle() -> None:
    found = house.import_circles()
    assert not found, f"import circles (lazy and TYPE_CHECKING imports count): {[f.where for f in found]}"


def test_the_checks_see_what_they_are_about(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n" + "    x = 1\n" * 60)
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\n")
    (package / "c.py").write_text("from pkg.a import f\n" + "\n" * 400)
    assert [f.where for f in house.oversized_modules(package)] == ["pkg/c.py"]
    assert [f.where for f in house.oversized_functions(package)] == ["pkg/a.py:f"]
    assert [f.where for f in house.import_circles(package)] == ["pkg.a -> pkg.b -> pkg.c"]
    (package / "c.py").write_text("import pkg\n")  # the package itself is not a.py: no circle
    assert house.import_circles(package) == []
