"""``attention_stats`` built from blocks of query rows as they pass (``sources.blocks``), so a
layer's statistics exist at any length without its (H, T, S) weights. Pure torch, no I/O.

Shapes: H heads, T query rows, S keys, R rows in a block.

The numbers are stats.py's to the bit: each row's argmax, top weight and entropy sum are
computed on that row alone (the same float64 operations, whichever block the row is in); the
element-wise steps whose result can depend on where an element stands in a tensor (2 ** bits,
vectorised) and the means over rows (one float64 sum over T values) run at the end, on tensors
of the shapes stats.py gives them. What is kept is O(H x T): the diagonal, the previous-token
diagonal and the first column of the weights, and the per-row lists.
"""

from __future__ import annotations

import torch

from attn_cli.analysis.stats import HeadStats, effective_tokens, entropy_bits


class RowStats:
    """A block consumer that gathers ``attention_stats(weights, mask=mask, cross=cross)`` of every row."""

    def __init__(self, heads: int, n_queries: int, n_keys: int, *, mask: torch.Tensor | None = None, cross: bool = False):
        self.mask = mask  # (T, S) True = hidden, read a block of rows at a time
        self.masses = not cross and n_queries == n_keys  # stats.py's head masses: self-attention only
        self.n_keys = n_keys
        self.seen = 0  # rows gathered so far: the blocks come in order
        self.top_key = torch.empty(heads, n_queries, dtype=torch.long)  # (H, T)
        self.top_weight = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) exact copies of the weights
        self.bits = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T)
        self.visible: list[int] = []  # (T,)
        self.diagonal = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, i]
        self.previous = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, i-1], row 0 unused
        self.first = torch.empty(heads, n_queries, dtype=torch.float64)  # (H, T) w[i, 0], row 0 unused

    def __call__(self, start: int, weights: torch.Tensor) -> None:
        """Gather query rows start .. start + R - 1 of (H, R, S) weights."""
        if start != self.seen:
            raise ValueError(f"rows from {start} after {self.seen} rows: the blocks must come in order")
        end = start + weights.shape[-2]
        top_key = weights.argmax(dim=-1)  # (H, R) the first of equal maxima
        self.top_key[:, start:end] = top_key
        self.top_weight[:, start:end] = weights.gather(-1, top_key.unsqueeze(-1)).squeeze(-1)  # (H, R, 1) -> (H, R)
        self.bits[:, start:end] = entropy_bits(weights)  # (H, R, S) -> (H, R)
        block_mask = None if self.mask is None else self.mask[start:end]  # (R, S)
        self.visible += [self.n_keys] * (end - start) if block_mask is None else (~block_mask).sum(dim=-1).tolist()
        if self.masses:
            rows = torch.arange(end - start)  # (R,) positions in the block
            self.diagonal[:, start:end] = weights[:, rows, rows + start]  # (H, R)
            self.previous[:, start:end] = weights[:, rows, (rows + start - 1).clamp_min(0)]  # (H, R) row 0's unused
            self.first[:, start:end] = weights[:, :, 0]  # (H, R)
        self.seen = end

    def result(self) -> list[HeadStats]:
        """One HeadStats per head, as ``attention_stats`` gives them for every row."""
        n_queries = self.top_key.shape[-1]
        if self.seen != n_queries:
            raise ValueError(f"{self.seen} of {n_queries} query rows were gathered: every block must pass")
        effective = effective_tokens(self.bits)  # (H, T), the shape stats.py exponentiates
        return [
            HeadStats(
                head=h, most_attended=self.top_key[h].tolist(), top_weight=self.top_weight[h].tolist(),
                entropy_bits=self.bits[h].tolist(), effective_tokens=effective[h].tolist(), visible_keys=self.visible,
                **self._masses(h),
            )  # fmt: skip
            for h in range(self.top_key.shape[0])
        ]

    def _masses(self, head: int) -> dict[str, float | None]:
        """stats.head_masses's means: one float64 mean over each gathered (T,) or (T-1,) vector."""
        if not self.masses:
            return {"self_mass": None, "previous_mass": None, "first_mass": None}
        self_mass = self.diagonal[head].mean().item()
        if self.n_keys < 2:
            return {"self_mass": self_mass, "previous_mass": None, "first_mass": None}
        return {
            "self_mass": self_mass,
            "previous_mass": self.previous[head, 1:].clone().mean().item(),  # a fresh (T-1,), as stats.py's copy
            "first_mass": self.first[head, 1:].clone().mean().item(),
        }
