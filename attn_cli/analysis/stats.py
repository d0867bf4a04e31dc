"""Summaries of attention weights, per query row and per head. Pure torch, no I/O.

Shapes: H heads, T tokens; ``weights`` is (H, T, T), rows sum to 1 (a masked
cell is exactly 0).

Per query row i:
  - ``most_attended[i]``: the key with the largest weight (the first one on ties);
  - ``entropy_bits[i]`` = -sum_j w_ij log2 w_ij (0 log 0 = 0): 0 when the row
    puts everything on one key, log2(n) when it spreads evenly over n keys;
  - ``effective_tokens[i]`` = 2 ** entropy_bits[i]: how many keys the row
    attends to "in effect" (n for an even spread over n keys, 1 for one key).

Per head, each the mean over query rows of one weight:
  - ``self_mass``: w_ii, the diagonal, over every row;
  - ``previous_mass``: w_i,i-1, over rows 1 .. T-1 (row 0 has no previous token);
  - ``first_mass``: w_i,0, over rows 1 .. T-1 (row 0's first token is itself,
    already in ``self_mass``).
``previous_mass`` and ``first_mass`` are ``None`` for a one-token text.

Everything is computed in float64 from the float32 weights, so the JSON, the
CSV and the tables (which all call this) show the same numbers. The float64
copies are made a block of rows at a time (``CHUNK_ROWS``), never of the whole
(H, T, T): at 10,000 tokens one head's copy alone would be 800 MB. Each row's
sum is the same whichever block it is in.

The per-row numbers can be asked for some rows only (``rows=``): a table shows 41
of a long text's rows, and the entropy of all 10,000 costs seconds. The head
masses read a diagonal and a column, so they always cover every row; the means
over rows (``mean_entropy_bits``) need every row and are not there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

CHUNK_ROWS = 256  # query rows converted to float64 at a time


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
        return made


def entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(..., T) probability rows -> (...) entropy in bits, in float64, never negative."""
    w = weights.double()  # (..., T)
    nats = -torch.special.xlogy(w, w).sum(dim=-1)  # (...,) xlogy(0, 0) = 0
    # + 0.0 turns the -0.0 of a one-hot row into 0.0
    return (nats / math.log(2)).clamp_min(0.0) + 0.0  # (...,)


def effective_tokens(bits: torch.Tensor) -> torch.Tensor:
    """2 ** entropy: the number of keys an even spread with this entropy would cover."""
    return torch.exp2(bits.double())  # (...,)


def head_masses(weights: torch.Tensor) -> tuple[float | None, float | None, float | None]:
    """(T, T) -> (self, previous-token, first-token) mean weights, as defined above; none of
    them for (T, S) cross-attention, whose queries and keys are tokens of two texts."""
    n_tokens = weights.shape[-1]
    if weights.shape[-2] != n_tokens:
        return None, None, None
    self_mass = weights.diagonal().double().mean().item()  # (T,)
    if n_tokens < 2:
        return self_mass, None, None
    previous = weights.diagonal(offset=-1).double().mean().item()  # (T-1,) w[i, i-1] for i = 1 .. T-1
    first = weights[1:, 0].double().mean().item()  # (T-1,) -> ()
    return self_mass, previous, first


def _row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(H, R, T) -> (H, R) entropy in bits, CHUNK_ROWS query rows at a time."""
    if weights.shape[-2] <= CHUNK_ROWS:  # one block: every row's sum as the blocks would give it
        return entropy_bits(weights)
    return torch.stack(
        [
            torch.cat([entropy_bits(head[i : i + CHUNK_ROWS]) for i in range(0, head.shape[0], CHUNK_ROWS)])  # (R,)
            for head in weights
        ]
    )  # (H, R)


def attention_stats(
    weights: torch.Tensor, *, mask: torch.Tensor | None = None, rows: Sequence[int] | None = None, cross: bool = False
) -> list[HeadStats]:
    """(H, T, T) weights -> one HeadStats per head; ``mask`` (T, T) True = hidden key;
    ``rows``: the query rows to give per-row numbers for (None: every row); ``cross``:
    cross-attention's (H, T, S), whose masses are not defined (None), even where S = T."""
    n_tokens = weights.shape[-1]
    picked = weights if rows is None else weights[:, list(rows)]  # (H, T, T), or (H, R, T): a copy of those rows
    top_key = picked.argmax(dim=-1)  # (H, R) argmax picks the first of equal maxima
    top_weight = picked.gather(-1, top_key.unsqueeze(-1)).squeeze(-1)  # (H, R, 1) -> (H, R)
    bits = _row_entropy_bits(picked)  # (H, R)
    effective = effective_tokens(bits)  # (H, R)
    n_rows = picked.shape[-2]
    visible = [n_tokens] * n_rows if mask is None else (~(mask if rows is None else mask[list(rows)])).sum(dim=-1).tolist()  # (R,)
    stats = []
    for h in range(weights.shape[0]):
        self_mass, previous, first = (None, None, None) if cross else head_masses(weights[h])
        stats.append(
            HeadStats(
                head=h,
                most_attended=top_key[h].tolist(),
                top_weight=top_weight[h].tolist(),
                entropy_bits=bits[h].tolist(),
                effective_tokens=effective[h].tolist(),
                visible_keys=visible,
                self_mass=self_mass,
                previous_mass=previous,
                first_mass=first,
                rows=None if rows is None else tuple(rows),
            )
        )
    return stats
