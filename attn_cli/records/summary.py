"""What a layer leaves when its (H, T, S) tables are not kept (a long text): every head's
statistics, gathered from the blocks as they passed (``attn_cli.analysis.rowstats``), and the
query rows a run chose (``--query``). ``HeadStats`` is also what ``attention_stats`` makes of a
whole table (``attn_cli.analysis.stats`` defines each number).

Shapes: T query rows, S keys, H heads, Q chosen query rows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass(frozen=True)
class HeadStats:
    """One head's statistics; the per-row lists hold ``rows`` (R of them), every row (T) by default."""

    head: int
    most_attended: list[int]  # (R,) key position per query
    top_weight: list[float]  # (R,) that key's weight
    entropy_bits: list[float]  # (R,)
    effective_tokens: list[float]  # (R,) 2 ** entropy_bits
    visible_keys: list[int]  # (R,) keys the row may attend to: T, or fewer under a mask (i + 1 when causal)
    self_mass: float | None  # None, with the other masses, for cross-attention (queries and keys of two texts)
    previous_mass: float | None
    first_mass: float | None
    rows: tuple[int, ...] | None = None  # the query rows the lists hold, in order; None: 0 .. T-1
    distance_mass: list[float] | None = None  # (bins,) the mean weight per row in each distance bin; None: cross-attention
    sink_score: float | None = None  # the first token's mean weight over the rows that see it; None: cross-attention

    def row(self, query: int) -> int:
        """Where query ``query``'s numbers are in the per-row lists."""
        return query if self.rows is None else self.rows.index(query)

    @property
    def mean_entropy_bits(self) -> float:
        return math.fsum(self._every_row(self.entropy_bits)) / len(self.entropy_bits)

    @property
    def mean_effective_tokens(self) -> float:
        return math.fsum(self._every_row(self.effective_tokens)) / len(self.effective_tokens)

    def _every_row(self, values: list[float]) -> list[float]:
        if self.rows is not None:
            raise ValueError("a mean over the query rows needs every row: call attention_stats without rows=")
        return values

    def as_dict(self) -> dict[str, object]:
        """The ``stats`` object of a head in the JSON output."""
        self._every_row(self.entropy_bits)
        made: dict[str, object] = {
            "most_attended": self.most_attended,
            "top_weight": self.top_weight,
            "entropy_bits": self.entropy_bits,
            "effective_tokens": self.effective_tokens,
        }
        if self.self_mass is not None:  # cross-attention leaves the masses out: no query is a key
            made.update(self_mass=self.self_mass, previous_mass=self.previous_mass, first_mass=self.first_mass)
        if self.distance_mass is not None:
            made.update(distance_mass=self.distance_mass, sink_score=self.sink_score)
        return made


@dataclasses.dataclass(frozen=True)
class LayerSummary:
    """One layer's attention without its tables: what a run computed in blocks and kept."""

    layer: int  # 0-based index in the model
    stats: tuple[HeadStats, ...]  # every head's, in order
    queries: tuple[int, ...]  # the chosen query rows (--query), in order
    rows: torch.Tensor  # (Q, H, S) float32: those rows' weights, for the heads ``row_heads``
    row_heads: tuple[int, ...]  # the heads ``rows`` holds
    n_keys: int  # S
    divisor: float  # scaled_scores = scores / divisor
    divisor_text: str = ""
    threads: int = 0  # torch's intra-op threads the layer was computed with (0: not recorded)
    cross: bool = False  # cross-attention: queries from one text, keys from another
    causal: bool = False  # whether some key is hidden from some query (a causal mask, a window), as LayerWeights.causal
    special_mass: tuple[float, ...] | None = None  # each head's mean weight on the special tokens; None: not asked, or none
    pooled: torch.Tensor | None = None  # (H', G, C) float32: each pixel the max or mean of a group of weights; None: not asked
    pooled_heads: tuple[int, ...] = ()  # the heads ``pooled`` holds
    pool_sizes: tuple[int, int] = (1, 1)  # the query rows and keys a pixel pools (the largest group)
    row_scores: torch.Tensor | None = None  # (Q, H, S) float32: those rows' raw scores Q K^T (--show scores); None: not asked

    def row(self, query: int, head: int) -> torch.Tensor:
        """(S,) query ``query``'s weights in head ``head``."""
        return self.rows[self.queries.index(query), self.row_heads.index(head)]

    def row_score(self, query: int, head: int) -> torch.Tensor | None:
        """(S,) query ``query``'s raw scores in head ``head``; None where they were not asked for."""
        if self.row_scores is None:
            return None
        return self.row_scores[self.queries.index(query), self.row_heads.index(head)]
