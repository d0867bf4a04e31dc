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
"""

from __future__ import annotations

import dataclasses
import math

import torch

CHUNK_ROWS = 256  # query rows converted to float64 at a time


@dataclasses.dataclass(frozen=True)
class HeadStats:
    head: int
    most_attended: list[int]  # (T,) key position per query
    top_weight: list[float]  # (T,) that key's weight
    entropy_bits: list[float]  # (T,)
    effective_tokens: list[float]  # (T,) 2 ** entropy_bits
    visible_keys: list[int]  # (T,) keys the row may attend to: T, or fewer under a mask (i + 1 when causal)
    self_mass: float
    previous_mass: float | None
    first_mass: float | None

    @property
    def mean_entropy_bits(self) -> float:
        return math.fsum(self.entropy_bits) / len(self.entropy_bits)

    @property
    def mean_effective_tokens(self) -> float:
        return math.fsum(self.effective_tokens) / len(self.effective_tokens)

    def as_dict(self) -> dict[str, object]:
        """The ``stats`` object of a head in the JSON output."""
        return {
            "most_attended": self.most_attended,
            "top_weight": self.top_weight,
            "entropy_bits": self.entropy_bits,
            "effective_tokens": self.effective_tokens,
            "self_mass": self.self_mass,
            "previous_mass": self.previous_mass,
            "first_mass": self.first_mass,
        }


def entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(..., T) probability rows -> (...) entropy in bits, in float64, never negative."""
    w = weights.double()  # (..., T)
    nats = -torch.special.xlogy(w, w).sum(dim=-1)  # (...,) xlogy(0, 0) = 0
    # + 0.0 turns the -0.0 of a one-hot row into 0.0
    return (nats / math.log(2)).clamp_min(0.0) + 0.0  # (...,)


def effective_tokens(bits: torch.Tensor) -> torch.Tensor:
    """2 ** entropy: the number of keys an even spread with this entropy would cover."""
    return torch.exp2(bits.double())  # (...,)


def head_masses(weights: torch.Tensor) -> tuple[float, float | None, float | None]:
    """(T, T) -> (self, previous-token, first-token) mean weights, as defined above."""
    n_tokens = weights.shape[-1]
    self_mass = weights.diagonal().double().mean().item()  # (T,)
    if n_tokens < 2:
        return self_mass, None, None
    previous = weights.diagonal(offset=-1).double().mean().item()  # (T-1,) w[i, i-1] for i = 1 .. T-1
    first = weights[1:, 0].double().mean().item()  # (T-1,) -> ()
    return self_mass, previous, first


def _row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(H, T, T) -> (H, T) entropy in bits, CHUNK_ROWS query rows at a time."""
    return torch.stack(
        [
            torch.cat([entropy_bits(head[i : i + CHUNK_ROWS]) for i in range(0, head.shape[0], CHUNK_ROWS)])  # (T,)
            for head in weights
        ]
    )  # (H, T)


def attention_stats(weights: torch.Tensor, *, mask: torch.Tensor | None = None) -> list[HeadStats]:
    """(H, T, T) weights -> one HeadStats per head; ``mask`` (T, T) True = hidden key."""
    n_tokens = weights.shape[-1]
    top_key = weights.argmax(dim=-1)  # (H, T) argmax picks the first of equal maxima
    top_weight = weights.gather(-1, top_key.unsqueeze(-1)).squeeze(-1)  # (H, T, 1) -> (H, T)
    bits = _row_entropy_bits(weights)  # (H, T)
    effective = effective_tokens(bits)  # (H, T)
    visible = [n_tokens] * n_tokens if mask is None else (~mask).sum(dim=-1).tolist()  # (T, T) -> (T,)
    stats = []
    for h in range(weights.shape[0]):
        self_mass, previous, first = head_masses(weights[h])
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
            )
        )
    return stats
