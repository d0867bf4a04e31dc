"""What every source of attention is and checks: the ``Source`` protocol (a text or a batch of
texts in, a ``Trace`` out; token ids for the heads' probe), the text and length checks,
and the one memory check every source makes before it allocates (``check_budget``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Protocol

from attn_cli.records.layers import LayerWeights
from attn_cli.records.selection import Selection
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import ModelInfo, Trace
from attn_cli.runtime.errors import AttnCliError, InputError, TooLargeError, in_batch


class Source(Protocol):
    """A source of attention: the toy model or a checkpoint. A selection's ``keep`` is
    the least its caller reads: a checkpoint at "weights" keeps LayerWeights; the toy
    (one small layer) always keeps a LayerAttention, which is one too."""

    notes: list[str]
    n_layers: int
    n_heads: int

    def run(self, text: str, selection: Selection | None = None) -> Trace: ...

    def run_each(self, texts: Sequence[str], selection: Selection | None = None) -> Iterator[Trace]: ...

    def probe_pool(self) -> tuple[tuple[int, ...], Sequence[int]] | str: ...

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace: ...


PROBE_TEXT = "(probe)"  # a probe trace's text: its tokens are ids drawn at random, not a text


def check_text(text: str) -> None:
    if not text.strip():
        raise InputError("the text is empty; give some words, as an argument, with --file, or on stdin")


def check_length(tokens: Tokens, max_tokens: int) -> Tokens:
    """``tokens``, unless the user's text is over --max-tokens (a probe the command
    builds checks its own length)."""
    if len(tokens) > max_tokens:
        raise TooLargeError(f"the text has {len(tokens)} tokens, over --max-tokens {max_tokens}; shorten it or raise --max-tokens")
    return tokens


class Batches:
    """What every source does with a batch of texts, given its ``run``."""

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        raise NotImplementedError

    def run_each(self, texts: Sequence[str], selection: Selection | None = None) -> Iterator[Trace]:
        """Each text's trace, in order; in a batch, an error names the text it came from."""
        for i, text in enumerate(texts):
            try:
                yield self.run(text, selection)
            except AttnCliError as err:
                raise in_batch(err, i, len(texts))


def with_threads(info: ModelInfo, layers: Sequence[LayerWeights], n_threads: int) -> tuple[ModelInfo, tuple[LayerWeights, ...]]:
    """The trace's model and layers marked with the thread count that computed them:
    JSON says it, and the raw scores a renderer derives later use it too."""
    return dataclasses.replace(info, threads=n_threads), tuple(dataclasses.replace(layer, threads=n_threads) for layer in layers)


def check_budget(parts: dict[str, int], culprits: dict[str, tuple[str, str]]) -> None:
    """Refuse work whose estimated ``parts`` (bytes) would not fit in the memory at hand,
    naming the biggest part (``culprits``: what it is, and the fix); ``attn_cli.runtime.budget``
    decides what "at hand" is."""
    from attn_cli.runtime import budget

    describe = {name: what for name, (what, _) in culprits.items()}
    fixes = {name: fix for name, (_, fix) in culprits.items()}
    budget.check(parts, describe, fixes)


def check_device_budget(parts: dict[str, int], culprits: dict[str, tuple[str, str]], device: str) -> None:
    """On a GPU, refuse work whose weights and activations (``parts``'s "weights" and
    "activations": what the layers compute there; the kept tables come back to the CPU) would
    not fit in the GPU's free memory, before anything is read onto it. Nothing on the CPU."""
    from attn_cli.runtime import budget

    have = budget.device_available_bytes(device)
    if have is None:
        return
    on_device = {name: parts[name] for name in ("weights", "activations") if name in parts}
    describe = {name: f"{what} on the GPU" for name, (what, _) in culprits.items()}
    fixes = {name: f"{fix}, or use --device cpu" for name, (_, fix) in culprits.items()}
    budget.check(on_device, describe, fixes, doing="this run on the GPU", available=have)
