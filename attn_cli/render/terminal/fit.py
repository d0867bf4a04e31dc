"""The rule for cutting a table's columns to a width: every column if they fit, else
the leading columns that fit beside a ``…`` column and the trailing ``keep_last``
columns. Widths are asked for lazily, so a table of 10,000 columns measures a few
dozen. (run's matrices are cut; explain's grids, already summarised to a few
columns, are stacked in blocks instead, so that no number of the walk-through is lost.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def fit_columns(
    n: int, width: Callable[[int], int], room: int, *, keep_last: int = 1, keep_first: int = 0, ellipsis: int = 4
) -> list[int | None]:
    """Column indexes to draw out of ``n``, ``None`` standing for the ``…`` column.

    ``width(j)`` is column j's width with its padding and divider; ``ellipsis`` the
    ``…`` column's. The first ``keep_first`` columns (row labels) and the last
    ``keep_last`` (a total) are always drawn; at least one column is cut when any is.
    With no room for even those, ``[None]`` (just the marker) when nothing is kept
    first, else the kept ones regardless.
    """
    used = 0
    for j in range(n):
        used += width(j)
        if used > room:
            break
    else:
        return list(range(n))
    if n - keep_last < 2 and keep_first == 0:
        return [None]
    tail = list(range(n - keep_last, n))
    used = ellipsis + sum(width(j) for j in tail) + sum(width(j) for j in range(keep_first))
    keep = keep_first
    while keep < n - keep_last - 1 and used + width(keep) <= room:
        used += width(keep)
        keep += 1
    if used > room and keep_first == 0:
        return [None]
    return [*range(keep), None, *tail]


def spans(numbers: Sequence[int], dash: str = "-") -> str:
    """Sorted numbers as runs, for notes that say which columns, heads or rows:
    [0, 1, 2, 3, 8, 11] -> '0-3, 8, 11'."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}{dash}{run[-1]}" for run in runs)
