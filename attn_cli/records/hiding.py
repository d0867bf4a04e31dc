"""``--hide-tokens``: take some tokens out of the tables and pictures, renormalizing the rest.

Trained models park much of their attention on a few tokens (BOS, ``[CLS]``,
``[SEP]``); on the fixed 0..1 scale everything else is then one colour. Hiding
those tokens removes their rows and columns, and each remaining row is divided
by its weight on the keys still shown::

    shown[i, j] = w[i, j] / sum_{k kept} w[i, k]      for kept i, j

A row whose kept keys carry no weight at all (everything went to hidden tokens,
down to float32's last bit) has nothing to renormalize: its shown weights are
NaN, drawn as masked cells and written as ``null``.

Shapes: H heads, T tokens, K kept tokens. ``HideSpec`` is parsed with the
command's options (no torch); ``hide(trace, spec)`` marks a trace's hidden
tokens, and ``shown(trace)`` is the trace the tables and pictures draw: the
kept tokens only, their weights renormalized. The model's own weights are never
changed: JSON and CSV keep them and add the renormalized ones.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.records.trace import Hiding
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerWeights
    from attn_cli.records.tokens import Tokens
    from attn_cli.records.trace import Trace

FLAG = "--hide-tokens"
SPECIAL = "special"
_POSITION = re.compile(r"[+-]?\d+")
LISTED_TOKENS = 30  # tokens named in an error before "..."


@dataclasses.dataclass(frozen=True)
class HideSpec:
    """A ``--hide-tokens`` value: ``special`` (the tokens the model's tokenizer added) and/or
    positions (``-1`` is the last) and token labels or texts, comma-separated."""

    text: str
    items: tuple[str, ...]

    @classmethod
    def parse(cls, text: str | None) -> HideSpec | None:
        if text is None:
            return None
        items = tuple(part.strip() for part in text.split(","))
        if not text.strip() or not all(items):
            raise UsageError(
                f"{FLAG} {text!r}: give special, or positions and tokens separated by commas, e.g. 0,-1 or '[CLS],[SEP]'"
            )
        return cls(text, items)

    def positions(self, tokens: Tokens) -> tuple[tuple[int, ...], str | None]:
        """(the positions to hide, sorted; a note for the user or None). A position or
        token that matches nothing, or hiding every token, is a UsageError listing the tokens."""
        chosen, unmatched, note = self._matches(tokens)
        if unmatched:
            self._refuse(unmatched[0], tokens)
        self._leave_one(chosen, tokens)
        return tuple(sorted(chosen)), note

    def pair_positions(self, source: Tokens, target: Tokens) -> tuple[tuple[int, ...], tuple[int, ...], str | None]:
        """An encoder-decoder's (source positions, target positions, note): each item hides what
        it names in either sequence (``special`` and a position in both); an item that matches
        neither, or hiding every token of one, is a UsageError."""
        in_source, missed_source, note = self._matches(source)
        in_target, missed_target, _ = self._matches(target)
        for item in missed_source:
            if item in missed_target:
                if _POSITION.fullmatch(item):
                    raise UsageError(f"{FLAG} {item} is out of range: the source has {len(source)} tokens and the target {len(target)}")
                raise UsageError(f"{FLAG} {item!r} is not a token of the source or the target: give special, a position or one of "
                                 f"{_listed(source.labels)} / {_listed(target.labels)}")  # fmt: skip
        self._leave_one(in_source, source, "source")
        self._leave_one(in_target, target, "target")
        return tuple(sorted(in_source)), tuple(sorted(in_target)), note

    def _matches(self, tokens: Tokens) -> tuple[set[int], list[str], str | None]:
        """(the positions the items name, the items that name none, a note or None)."""
        from attn_cli.records.tokens import visible

        n = len(tokens)
        labels = tokens.labels
        chosen: set[int] = set()
        unmatched: list[str] = []
        note = None
        for item in self.items:
            if item.lower() == SPECIAL:
                special = [i for i in range(n) if tokens.is_special(i)]
                if not special:
                    note = f"note: {FLAG} special: this text has no special tokens (the tokenizer added none); nothing is hidden"
                chosen.update(special)
                continue
            if _POSITION.fullmatch(item):
                position = int(item)
                if -n <= position < n:
                    chosen.add(position % n)
                else:
                    unmatched.append(item)
                continue
            found = [i for i in range(n) if item in (labels[i], tokens.texts[i], visible(tokens.texts[i])) or item == tokens.texts[i].strip()]
            if not found:
                unmatched.append(item)
            chosen.update(found)
        return chosen, unmatched, note

    def _refuse(self, item: str, tokens: Tokens) -> None:
        n, labels = len(tokens), tokens.labels
        if _POSITION.fullmatch(item):
            raise UsageError(f"{FLAG} {item} is out of range: the text has {n} tokens, positions 0 to {n - 1} ({_listed(labels)})")
        raise UsageError(f"{FLAG} {item!r} is not a token of the text: give special, a position 0 to {n - 1} or one of {_listed(labels)}")

    def _leave_one(self, chosen: set[int], tokens: Tokens, what: str = "") -> None:
        if len(chosen) == len(tokens):
            whose = f" of the {what}" if what else ""
            raise UsageError(f"{FLAG} {self.text!r} hides every token{whose} ({_listed(tokens.labels)}): leave at least one to show")


# The attribution maps whose rows are shares summing to 1 (renormalized over the shown keys, as weights);
# attention x gradient's relevance is not: its hidden rows and columns are left out, nothing renormalized
SHARES = ("value_zeroing", "value_zeroing_rollout", "alti")

def _listed(labels: Sequence[str]) -> str:
    shown = ", ".join(labels[:LISTED_TOKENS])
    return shown + (", ..." if len(labels) > LISTED_TOKENS else "")


def hide(trace: Trace, spec: HideSpec | None) -> Trace:
    """``trace`` with ``spec``'s tokens marked hidden (the same trace when ``spec`` is None); an
    encoder-decoder's in the source (its encoder's rows and cross-attention's columns) and in the
    decoder's inputs (the decoder's rows and columns and cross-attention's rows)."""
    if spec is None:
        return trace
    if trace.others:  # an encoder-decoder's whole trace: the source and the decoder's inputs
        target = trace.stacks["decoder"].tokens
        in_source, in_target, note = spec.pair_positions(trace.tokens, target)
        source_hiding, target_hiding = _hiding(trace.tokens, in_source, note), _hiding(target, in_target, None)
        others = tuple(
            dataclasses.replace(stack, hiding=target_hiding, key_hiding=source_hiding if stack.cross else target_hiding)
            for stack in trace.others
        )  # fmt: skip
        return dataclasses.replace(trace, hiding=source_hiding, others=others)
    hidden, note = spec.positions(trace.tokens)
    return dataclasses.replace(trace, hiding=_hiding(trace.tokens, hidden, note))


def _hiding(tokens: Tokens, hidden: Sequence[int], note: str | None) -> Hiding:
    kept = tuple(i for i in range(len(tokens)) if i not in set(hidden))
    return Hiding(tuple(hidden), kept, tuple(tokens.labels[i] for i in hidden), note)


def cut(trace: Trace) -> list[Hiding]:
    """What a ``shown()`` trace left out: its rows' hiding and, for cross-attention, its columns'
    (the source's), the active ones; none for a trace that is not ``shown()``."""
    if not trace.renormalized:
        return []
    stack = trace.own_stack
    return [h for h in ((stack.hiding, stack.key_hiding) if stack.cross else (stack.hiding,)) if h is not None and h.active]


def hidden_text(trace: Trace) -> str | None:
    """'[CLS], [SEP] hidden; rows renormalized' for a ``shown()`` trace with hidden tokens, else None."""
    hidden = cut(trace)
    if not hidden:
        return None
    return f"{', '.join(dict.fromkeys(label for h in hidden for label in h.labels))} hidden; rows renormalized"


def renormalize(weights: torch.Tensor, kept: Sequence[int], rows: Sequence[int] | None = None) -> torch.Tensor:
    """(H, T, T) weights -> (H, K, K): the kept rows and columns, each row divided by its
    sum over the kept keys (in float64, returned as float32); NaN rows where that sum is 0.
    ``rows``: only these query rows (R of them, -> (H, R, K)); each row's numbers are the
    same whichever rows come with it (the JSON makes them a block of rows at a time)."""
    import torch

    index = torch.tensor(list(kept), dtype=torch.long)  # (K,)
    queries = index if rows is None else torch.tensor(list(rows), dtype=torch.long)  # (R,)
    part = weights.index_select(-2, queries).index_select(-1, index).double()  # (H, T, T) -> (H, R, K)
    mass = part.sum(dim=-1, keepdim=True)  # (H, R, 1)
    shown = torch.where(mass > 0, part / mass, torch.full_like(part, float("nan")))  # (H, R, K)
    return shown.to(weights.dtype)


def shown(trace: Trace) -> Trace:
    """The trace the tables and pictures draw: without its hidden tokens (rows and
    columns), each kept row renormalized. A trace with nothing hidden is returned as is.
    Cross-attention (its ``key_hiding``: the source's hidden tokens) loses its hidden rows
    (the decoder's inputs) and columns (the source's) separately."""
    stack = trace.own_stack
    hiding, key_hiding = stack.hiding, stack.key_hiding if stack.cross else None
    rows_cut = hiding is not None and hiding.active
    if trace.renormalized or not (rows_cut or (key_hiding is not None and key_hiding.active)):
        return trace
    if stack.cross:  # cross-attention: rows and columns are two texts
        rows = hiding.kept if hiding is not None and rows_cut else tuple(range(len(stack.tokens)))
        columns = key_hiding.kept if key_hiding is not None and key_hiding.active else tuple(range(len(stack.key_tokens)))
        cross = tuple(_with_norms_cut(_layer(layer, columns, rows), columns, rows) for layer in stack.layers)
        assert trace.view is not None
        view = dataclasses.replace(trace.view, key_tokens=stack.key_tokens.subset(columns))
        return dataclasses.replace(trace, tokens=stack.tokens.subset(rows), view=view, layers=cross, renormalized=True)
    assert hiding is not None
    tokens = trace.tokens.subset(hiding.kept)
    layers = tuple(_with_norms_cut(_layer(layer, hiding.kept), hiding.kept) for layer in trace.layers)
    def cut(combined: Any) -> Any:  # rows of the rollout and the flow sum to 1 like weights: hidden and renormalized the same way
        if combined is None:
            return None
        return dataclasses.replace(
            combined, weights=renormalize(combined.weights[None], hiding.kept)[0], mask=_pairs(combined.mask, hiding.kept)
        )  # (T, T) -> (K, K)

    maps = {name: cut(m) if name in SHARES else dataclasses.replace(m, weights=_pairs(m.weights, hiding.kept), mask=_pairs(m.mask, hiding.kept))
            for name, m in trace.maps.items()}  # fmt: skip
    return dataclasses.replace(trace, tokens=tokens, layers=layers, renormalized=True, rollout=cut(trace.rollout), flow=cut(trace.flow), maps=maps)


def _pairs(table: torch.Tensor | None, kept: Sequence[int], kept_rows: Sequence[int] | None = None) -> torch.Tensor | None:
    """(..., T, T) -> (..., K, K): the kept tokens' rows and columns (None stays None);
    ``kept_rows``: other rows than columns (cross-attention's)."""
    import torch

    if table is None:
        return None
    index = torch.tensor(list(kept), dtype=torch.long)  # (K,)
    rows = index if kept_rows is None else torch.tensor(list(kept_rows), dtype=torch.long)  # (R,)
    return table.index_select(-2, rows).index_select(-1, index)


def _with_norms_cut(layer: LayerWeights, kept: Sequence[int], kept_rows: Sequence[int] | None = None) -> LayerWeights:
    """The layer's value-weighted norms without the hidden tokens' rows and columns: they
    are magnitudes of what moved, not shares of a row, so nothing is renormalized."""
    maps = {name: renormalize(m[None], kept)[0] if name in SHARES else _pairs(m, kept, kept_rows) for name, m in layer.maps.items()}
    if layer.norms is None and layer.layer_norms is None:
        return dataclasses.replace(layer, maps=maps) if maps else layer
    return dataclasses.replace(layer, norms=_pairs(layer.norms, kept, kept_rows), layer_norms=_pairs(layer.layer_norms, kept, kept_rows), maps=maps)


def _layer(layer: LayerWeights, kept: Sequence[int], kept_rows: Sequence[int] | None = None) -> LayerWeights:
    """The layer without the hidden tokens: its weights renormalized over the kept keys,
    its mask (and, for a full LayerAttention, its per-token vectors) cut to the kept rows.
    ``kept_rows``: the query rows kept when they are not the keys (cross-attention's)."""
    import torch

    from attn_cli.records.layers import LayerAttention, SavedScores

    index = torch.tensor(list(kept), dtype=torch.long)  # (K,)
    row_index = index if kept_rows is None else torch.tensor(list(kept_rows), dtype=torch.long)  # (R,)
    mask = None if layer.mask is None else layer.mask.index_select(0, row_index).index_select(1, index)  # (R, K)
    # a family's additive position bias (MPNet) is per pair of tokens, like the mask
    bias = None if layer.bias is None else layer.bias.index_select(-2, row_index).index_select(-1, index)  # (H or 1, R, K)
    renormalized = lambda w: renormalize(w, kept, rows=kept_rows)  # noqa: E731  (H, T, T) -> (H, R, K)
    if isinstance(layer, SavedScores):  # a saved trace's scores are per pair of tokens too
        pairs = lambda t: t.index_select(-2, row_index).index_select(-1, index)  # noqa: E731  (H, T, T) -> (H, R, K)
        return dataclasses.replace(
            layer, weights=renormalized(layer.weights), mask=mask, bias=bias,
            scores=pairs(layer.scores), scaled_scores=pairs(layer.scaled_scores),
        )  # fmt: skip
    if not isinstance(layer, LayerAttention):  # keep="weights": there is nothing else to cut
        return dataclasses.replace(layer, weights=renormalized(layer.weights), mask=mask, bias=bias)
    rows = lambda t: t.index_select(-2, row_index)  # noqa: E731  (H, T, d) -> (H, R, d), (T, d) -> (R, d)
    keys = lambda t: t.index_select(-2, index)  # noqa: E731  the keys' and values' rows: the source's for cross-attention
    return dataclasses.replace(
        layer,
        queries=rows(layer.queries),
        keys=keys(layer.keys),
        values=keys(layer.values),
        weights=renormalized(layer.weights),
        dropped_weights=None if layer.dropped_weights is None else renormalized(layer.dropped_weights),
        context=rows(layer.context),
        concat=rows(layer.concat),
        output=rows(layer.output),
        mask=mask,
        bias=bias,
        x=None if layer.x is None else rows(layer.x),
        source=None if layer.source is None else keys(layer.source),
    )
