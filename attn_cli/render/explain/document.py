"""The walk-through as a document: numbered ``Step``s of ``Line``s and ``Grid``s,
numbers already formatted, so the text and rich presentations show the same thing.

Long texts are summarised, and the output says so: past ``FULL_T`` tokens a
token-indexed table shows its first ``CORNER`` rows and columns (and the
followed query's row), past ``FULL_D`` dimensions its first ``CORNER`` columns
(a weight matrix: rows too), each with statistics over every cell.
"""

from __future__ import annotations

import dataclasses

FULL_T = 12  # token-indexed tables up to this many tokens are shown whole
FULL_D = 16  # vector tables up to this many dimensions are shown whole
CORNER = 6  # rows/columns shown of a summarised table


@dataclasses.dataclass(frozen=True)
class Line:
    """A line of prose. ``kind``: text, formula, why (the reason for a step) or note."""

    text: str
    kind: str = "text"


@dataclasses.dataclass(frozen=True)
class Grid:
    """A table of pre-formatted cells; the first column holds the row labels."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    emphasis: frozenset[tuple[int, int]] = frozenset()  # (row, column) cells to stress, e.g. a row's max
    keep_last: int = 0  # trailing columns (a total) kept when a narrow terminal cuts columns
    left: int = 1  # leading columns aligned left (labels); numbers align right


Block = Line | Grid


@dataclasses.dataclass(frozen=True)
class Step:
    number: int
    title: str
    blocks: tuple[Block, ...]
    skipped: bool = False  # does not apply to this run; kept so the numbering never moves


@dataclasses.dataclass(frozen=True)
class Explanation:
    intro: tuple[Block, ...]
    steps: tuple[Step, ...]
    outro: tuple[Block, ...]

