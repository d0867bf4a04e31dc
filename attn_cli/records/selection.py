"""Which layers and heads a run keeps and shows, decided before computing: ``--layer`` and
``--head`` values (``IndexSpec``), the ``Selection`` a source runs, and the keep levels.
No torch: the CLI parses these before anything heavy loads.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from attn_cli.runtime.errors import UsageError

# What a trace keeps of each selected layer: "all" (LayerAttention: weights, queries,
# keys, values, context, output, what every renderer reads) or "weights"
# (LayerWeights: weights, mask, divisor; what `heads` and weight pictures read).
Keep = Literal["all", "weights"]
KEEP_LEVELS: tuple[Keep, ...] = ("all", "weights")
Tables = Literal["keep", "fit", "omit"]


_ITEM = re.compile(r"\s*(-?\d+)\s*(?:-\s*(-?\d+)\s*)?")


@dataclasses.dataclass(frozen=True)
class IndexSpec:
    """An ``--layer``/``--head`` value: ``all``, an index, a comma list, an inclusive
    range ``a-b``; negative indices count from the end (``-1`` is the last)."""

    text: str | None  # None: not given (the command's default applies)
    flag: str

    @classmethod
    def parse(cls, text: str | None, flag: str) -> IndexSpec:
        spec = cls(text, flag)
        if text is not None:
            spec._items()  # a malformed value fails before anything runs
        return spec

    @property
    def given(self) -> bool:
        return self.text is not None

    def _items(self) -> list[tuple[int, int | None]]:
        assert self.text is not None
        if self.text.strip().lower() == "all":
            return []
        items = []
        for part in self.text.split(","):
            match = _ITEM.fullmatch(part)
            if match is None or not part.strip():
                raise UsageError(
                    f"{self.flag} {self.text!r}: give an index (0, -1 for the last), a comma list (0,2), "
                    f"a range (0-3) or all"
                )
            items.append((int(match[1]), None if match[2] is None else int(match[2])))
        return items

    def resolve(self, count: int, what: str, default: Sequence[int] | None = None) -> tuple[int, ...]:
        """The chosen indexes among ``count`` (sorted, each once); ``default`` when not
        given (None: all). Raises UsageError naming the valid range."""
        if self.text is None:
            return tuple(range(count)) if default is None else tuple(default)
        items = self._items()
        if not items:
            return tuple(range(count))
        chosen: set[int] = set()
        for first, last in items:
            lo, hi = self._index(first, count, what), self._index(first if last is None else last, count, what)
            if hi < lo:
                raise UsageError(f"{self.flag} {self.text!r}: the range {first}-{last} runs backwards; write {last}-{first}")
            chosen.update(range(lo, hi + 1))
        return tuple(sorted(chosen))

    def _index(self, value: int, count: int, what: str) -> int:
        if not -count <= value < count:
            plural = what if count == 1 else what + "s"
            raise UsageError(
                f"{self.flag} {value} is out of range: this model has {count} {plural}, "
                f"numbered 0 to {count - 1} (or -1 for the last)"
            )
        return value % count


@dataclasses.dataclass(frozen=True)
class Selection:
    """The layers to run and keep, the heads to show and how much of each kept layer
    to hold, decided before computing."""

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    keep: Keep = "all"  # "weights": a checkpoint's kept layers hold their weights only (see Keep)
    rollout: bool = False  # also roll attention out through layers 0 .. last_layer (Trace.rollout)
    flow: bool = False  # also attention flow through layers 0 .. last_layer (Trace.flow; analysis.flow)
    norms: bool = False  # also the kept layers' value-weighted norms (LayerWeights.norms)
    maps: tuple[str, ...] = ()  # also these attribution maps, by their JSON names (records.results.ATTRIBUTIONS)
    target_label: str | None = None  # attention x gradient's target: a classifier's label (--target-label); None: the predicted one
    target_token: str | None = None  # ... a decoder's next token or a masked LM's filler (--target-token); None: the predicted one
    predict: int = 0  # also every position's top-K predictions (Trace.predictions); 0: none
    generate: int = 0  # first extend the text greedily by up to this many tokens (Trace.prompt_length); 0: none
    everything: bool = False  # JSON, CSV, the page: every layer and head unless chosen, every stack of an encoder-decoder
    queries: tuple[str, ...] = ()  # --query: the query rows to keep whole (``records.positions.resolve_queries``)
    row_scores: bool = False  # --query with --show scores: each chosen row's raw scores Q K^T beside its weights
    # "keep": the kept layers' (H, T, T) tables, or a refusal where they do not fit; "fit": the
    # tables where they fit, else each kept layer's statistics and chosen rows, computed in blocks;
    # "omit": statistics and rows in blocks whatever the length (--no-tables)
    tables: Tables = "keep"
    # --tables FILE: (layer, T, S) -> a consumer that streams each kept layer's blocks to the file
    # (``attn_cli.formats.tablefile.TablesSink``); the run is then in blocks, whatever the length
    sink: Callable[[int, int, int], Any] | None = None
    pool: tuple[int, str] | None = None  # heatmap at any length: (cells, "max" or "mean"), a pooled map of each kept layer

    @property
    def last_layer(self) -> int:
        return max(self.layers)
