"""Which keys each query of a self-attention layer sees, as a rule rather than a (T, T) table:
``Band``, what a block of query rows reads its mask from (``attn_cli.sources.blocks``), at any length.

Shapes: T tokens, R rows in a block, K the keys a block reads.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Band:
    """Which keys each query sees: key j of query i where i - before <= j <= i + after (None: no
    limit on that side). A causal mask is ``after=0``; a decoder's sliding window of W keys
    ``before=W - 1, after=0``; ModernBERT's local window ``before=after=W // 2``; nothing hidden
    ``Band()``. Self-attention only: queries and keys are positions of one text."""

    before: int | None = None
    after: int | None = None

    def keys(self, start: int, end: int, n_keys: int) -> tuple[int, int]:
        """The keys (first, stop) rows start .. end - 1 can see between them."""
        first = 0 if self.before is None else max(0, start - self.before)
        stop = n_keys if self.after is None else min(n_keys, end + self.after)
        return first, stop

    def hidden(self, start: int, end: int, first: int, stop: int) -> torch.Tensor | None:
        """(R, K) True where row start + r may not see key first + k; None where it sees them all."""
        if self.before is None and self.after is None:
            return None
        distance = torch.arange(first, stop)[None, :] - torch.arange(start, end)[:, None]  # (R, K) j - i
        hidden = torch.zeros(distance.shape, dtype=torch.bool)  # (R, K)
        if self.before is not None:
            hidden |= distance < -self.before
        if self.after is not None:
            hidden |= distance > self.after
        return hidden if bool(hidden.any()) else None

    def hidden_span(self, start: int, end: int, first: int, stop: int) -> tuple[int, torch.Tensor] | None:
        """The narrowest run of keys first .. stop - 1 that holds every key some row start .. end - 1
        may not see: (its first key less ``first``, its (R, K') ``hidden``); None where every row sees
        every key. A causal block's run is its last R - 1 keys, not all of them."""
        run = self.hidden_run(start, end, first, stop)
        hidden = None if run is None else self.hidden(start, end, *run)  # (R, K')
        return None if hidden is None else (run[0] - first, hidden)

    def hidden_run(self, start: int, end: int, first: int, stop: int) -> tuple[int, int] | None:
        """``hidden_span``'s run of keys (lo, hi): lo .. hi - 1, or None; no tensor made."""
        parts = []
        if self.before is not None:  # keys j < i - before, for the last row at most
            parts.append((first, min(stop, end - 1 - self.before)))
        if self.after is not None:  # keys j > i + after, for the first row at least
            parts.append((max(first, start + 1 + self.after), stop))
        parts = [(lo, hi) for lo, hi in parts if lo < hi]
        return (min(p[0] for p in parts), max(p[1] for p in parts)) if parts else None

    def visible(self, start: int, end: int, n_keys: int) -> list[int]:
        """How many keys each row start .. end - 1 sees."""
        rows = torch.arange(start, end)  # (R,)
        first = torch.zeros_like(rows) if self.before is None else (rows - self.before).clamp_min(0)
        stop = torch.full_like(rows, n_keys) if self.after is None else (rows + self.after + 1).clamp_max(n_keys)
        return (stop - first).tolist()

    def hides(self, n_tokens: int) -> bool:
        """Whether some query of a text of ``n_tokens`` may not see some key."""
        return any(side is not None and side < n_tokens - 1 for side in (self.before, self.after))

    def table(self, n_tokens: int) -> torch.Tensor | None:
        """(T, T) the whole mask, True = hidden (None where nothing is): what a family's mask is."""
        return self.hidden(0, n_tokens, 0, n_tokens)
