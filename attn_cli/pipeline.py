"""The wiring: a ``SourceSpec`` (plain data, from the options) opened as the source it names.

``open_source(spec)`` is the one dispatch: a saved trace (``--from``), the seeded toy model,
or a trained checkpoint, an encoder-decoder's when its config.json says so. Each source
loads its tokenizer once, so a batch of texts pays for it once; ``run(text, selection)``
gives a ``Trace`` holding everything a renderer shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.records.selection import Selection
    from attn_cli.records.trace import Trace
    from attn_cli.sources.base import Source
    from attn_cli.sources.spec import SourceSpec


def open_source(spec: SourceSpec) -> Source:
    """The source ``spec`` names (imports torch; a checkpoint reads its config and tokenizer).
    A checkpoint that is not there says so before torch loads (1-2 s)."""
    if spec.saved is not None:
        from attn_cli.sources.saved import SavedSource

        return SavedSource(spec.saved)
    if spec.model is None:
        if spec.target is not None:
            raise UsageError("--target is the decoder's text of an encoder-decoder --model (BART, T5, Marian); the toy model has one stack")
        from attn_cli.sources.toy.source import ToySource

        return ToySource(spec.config)
    from attn_cli.sources.checkpoint.files import find
    from attn_cli.sources.checkpoint.registry import is_seq2seq

    found = find(spec.model, spec.revision)  # located and its config.json read once, before torch loads
    from attn_cli.sources.checkpoint.pair_source import PairSource
    from attn_cli.sources.checkpoint.source import CheckpointSource

    if is_seq2seq(found.config):
        return PairSource(spec, found)
    if spec.target is not None:
        raise UsageError(f"--target is for encoder-decoder models (BART, T5, Marian); {spec.model} has one stack: drop --target")
    return CheckpointSource(spec, found)


def with_queries(trace: Trace, selection: Selection | None) -> Trace:
    """The trace with --query's positions among its tokens: a checkpoint resolves them before it
    computes (it keeps those rows whole in blocks); the toy's and a saved trace's are resolved here."""
    if selection is None or not selection.queries or trace.queries:
        return trace
    import dataclasses

    from attn_cli.records.positions import resolve_queries

    tokens = trace.tokens
    queries = resolve_queries(selection.queries, tokens.texts, tokens.labels)
    return dataclasses.replace(trace, queries=queries, row_scores=selection.row_scores)
