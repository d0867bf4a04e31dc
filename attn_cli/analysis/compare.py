"""Two traces side by side: how much each head's attention moves between them.

Either two texts of the same length through one source (a minimal pair: "he" and "she"
in one sentence), or one text through two checkpoints with the same tokenizer, layers
and heads (a base model and its fine-tune). For each kept layer and head, each query
row's total variation distance between the two attention distributions::

    tv_i = 0.5 * sum_j |B_ij - A_ij|          in [0, 1]; 0: the same row, 1: disjoint

``mean_tv`` (over the query rows) ranks the heads that respond to the difference;
``max_tv`` and its row say where. ``difference`` is B - A per layer, (H, T, T).

Shapes: T tokens, H the heads shown. Pure: traces in, tensors and numbers out.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attn_cli.records.tokens import Tokens
    from attn_cli.records.trace import Trace

SHOWN_TOKENS = 30  # tokens listed in an error before "..."


@dataclasses.dataclass(frozen=True)
class HeadChange:
    """One head's total variation between the two runs."""

    layer: int
    head: int
    mean_tv: float  # mean over query rows of tv_i
    max_tv: float  # the largest tv_i
    max_row: int  # the query row where it is (the first of equals)

    def as_dict(self) -> dict[str, float | int]:
        return {"layer": self.layer, "head": self.head, "mean_tv": self.mean_tv, "max_tv": self.max_tv, "max_row": self.max_row}


@dataclasses.dataclass(frozen=True)
class Comparison:
    a: Trace
    b: Trace
    heads: tuple[HeadChange, ...]  # every kept layer's shown heads, in model order
    differences: tuple[torch.Tensor, ...]  # per kept layer, (H_shown, T, T) B - A

    def ranked(self) -> list[HeadChange]:
        """The heads by ``mean_tv``, largest first (model order among equals)."""
        return sorted(self.heads, key=lambda h: -h.mean_tv)

    def ranks(self) -> dict[tuple[int, int], int]:
        """(layer, head) -> its place in ``ranked()``: 1 the head that changes most."""
        return {(h.layer, h.head): rank for rank, h in enumerate(self.ranked(), start=1)}

    def difference(self, layer: int, head: int) -> torch.Tensor:
        """(T, T) B - A of one kept layer and shown head."""
        index = [kept.layer for kept in self.a.layers].index(layer)
        return self.differences[index][list(self.a.shown_heads).index(head)]


def _listed(tokens: Tokens) -> str:
    labels = list(tokens.labels)
    shown = " ".join(labels[:SHOWN_TOKENS])
    return shown + (" ..." if len(labels) > SHOWN_TOKENS else "")


def check_texts(a: Tokens, b: Tokens) -> None:
    """Two texts through one source compare query row by query row: the same number of
    tokens (the ids may differ). UsageError showing both tokenizations otherwise."""
    if len(a) != len(b):
        raise UsageError(
            f"the texts have {len(a)} and {len(b)} tokens; compare needs the same number, position by position "
            f"(A: {_listed(a)} | B: {_listed(b)})"
        )


def check_models(a: Trace, b: Trace) -> None:
    """One text through two checkpoints: the same token ids, layers and heads. UsageError
    naming the first difference otherwise."""
    if a.tokens.ids != b.tokens.ids:
        first = next((i for i, (x, y) in enumerate(zip(a.tokens.ids, b.tokens.ids)) if x != y), min(len(a.tokens), len(b.tokens)))
        raise UsageError(
            f"the two models tokenize the text differently ({len(a.tokens)} and {len(b.tokens)} tokens, first difference at "
            f"position {first}): compare needs one tokenizer (A: {_listed(a.tokens)} | B: {_listed(b.tokens)})"
        )
    for what, x, y in (("layers", a.model.layers, b.model.layers), ("heads", a.model.heads, b.model.heads)):
        if x != y:
            raise UsageError(f"{a.model.name} has {x} {what} and {b.model.name} {y}; compare needs the same {what} in both")


def compare(a: Trace, b: Trace) -> Comparison:
    """The per-head total variation and differences of ``b`` against ``a``: the same kept
    layers and shown heads, and the same number of tokens (``check_texts``/``check_models``)."""
    import torch

    if [layer.layer for layer in a.layers] != [layer.layer for layer in b.layers] or a.shown_heads != b.shown_heads:
        raise UsageError("the two traces keep different layers or heads; compare keeps the same in both")
    check_texts(a.tokens, b.tokens)
    heads = list(a.shown_heads)
    changes: list[HeadChange] = []
    differences = []
    for layer_a, layer_b in zip(a.layers, b.layers):
        chosen = torch.tensor(heads)
        difference = layer_b.weights.index_select(0, chosen) - layer_a.weights.index_select(0, chosen)  # (H, T, T)
        tv = 0.5 * difference.double().abs().sum(dim=-1)  # (H, T, T) -> (H, T)
        for i, h in enumerate(heads):
            row = int(tv[i].argmax())
            changes.append(HeadChange(layer_a.layer, h, tv[i].mean().item(), tv[i, row].item(), row))
        differences.append(difference)
    return Comparison(a, b, tuple(changes), tuple(differences))

