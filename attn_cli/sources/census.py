"""`attn-cli census`: every layer and head of a model over a corpus, as ``analysis.tally.Tally``.

Each text (a long one cut into token windows, each window a text of its own) runs through the
model once; each layer's attention goes, a block of query rows at a time (``sources.blocks``), to
a ``headcensus.TextLayer`` that keeps the text's sums and nothing of size T x T; the sums are
folded into the tally. The toy model keeps its tables: each layer's is given as one block.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.analysis.tally import Tally
    from attn_cli.records.tokens import Tokens
    from attn_cli.sources.base import Source
    from attn_cli.text.corpus import Corpus

BLOCK_BYTES = 64 * 2**20  # one block of a layer's weights and what the census derives from it
BATCH_BYTES = 16 * 2**20  # a batch's (B, H, T, T) float32 tables; a text whose own table is larger runs in blocks
BATCH_TEXTS = 32  # texts a batch holds at most
FLIGHT_BYTES = 256 * 2**20  # a batch's layer in flight (its (B, T, D) and (B, T, F) tensors; Checkpoint.estimate_bytes)
GROUP_TEXTS = 256  # texts 256 k .. 256 k + 255 are batched among themselves (a shard of the CLI's holds one group)


@dataclasses.dataclass(frozen=True)
class Windows:
    """How a text longer than the model's positions is cut: ``size`` tokens (without the special
    tokens), one window every ``stride`` tokens."""

    size: int
    stride: int


@dataclasses.dataclass
class Census:
    """A corpus's census: the tally, and what was read and skipped."""

    tally: Tally
    corpus: Corpus
    model: Any  # ModelInfo
    windows: Windows | None
    cut: int = 0  # texts longer than the positions, cut into windows
    against: str | None = None  # --against: the other model, as it was named

    @property
    def stack(self) -> str | None:
        """"encoder" for an encoder-decoder (its encoder's census), else None: a model of one stack."""
        return "encoder" if self.model is not None and self.model.as_dict().get("decoder_layers") else None

    @property
    def model_name(self) -> str:
        """The model as the pictures, the page and the table name it (an encoder-decoder's: its encoder)."""
        name = getattr(self.model, "name", "the model")
        return f"{name}'s encoder" if self.stack else name

    @property
    def where(self) -> list[str]:
        """Each text's place in the corpus (a line, a file), by index."""
        return [entry.where for entry in self.corpus.entries]


def windows_for(source: Source, size: int | None, stride: int | None) -> Windows | None:
    """--window/--stride for a trained model: the model's positions less its special tokens by
    default; None for the toy (its texts are not cut)."""
    source = one_stack(source)
    checkpoint = getattr(source, "checkpoint", None)
    if checkpoint is None:
        if size is not None or stride is not None:
            raise UsageError("--window and --stride cut a trained model's long texts (--model); the toy model's are not cut")
        return None
    positions = checkpoint.info.max_positions
    specials = len(checkpoint.tokenizer.leading_special_ids()) + len(checkpoint.tokenizer.trailing_special_ids())
    if size is None:
        if positions is None:
            raise UsageError(f"{checkpoint.info.name} names no maximum length: give --window N, the tokens a window holds")
        size = positions - specials
    if size < 1 or (positions is not None and size + specials > positions):
        room = "" if positions is None else f" (at most {positions - specials}: its {positions} positions less {specials} special tokens)"
        raise UsageError(f"--window takes the tokens a window holds, 1 or more{room}, not {size}")
    return Windows(size, size if stride is None else stride)


def run_census(
    source: Source, corpus: Corpus, *, windows: Windows | None, epsilon: float = 0.3,
    texts: Sequence[int] | None = None, progress: Callable[[int, int], None] | None = None, against: Source | None = None,
) -> Census:  # fmt: skip
    """The census of ``corpus`` (its ``texts`` by index only, for a shard), ``progress(texts, tokens)``
    called as texts are done; with ``against``, each head's attention compared with that model's.
    Texts run in batches of similar lengths drawn from one group of GROUP_TEXTS (``_batches``): a text's
    numbers depend on its group's texts only (to float32's last bits: a batch rounds its products a little
    differently), so any split of the corpus into whole groups gives one run's numbers."""
    from attn_cli.analysis.tally import Tally

    source = one_stack(source)
    if against is not None:
        against = one_stack(against)
        check_against(source, against)
    tally = Tally(source.n_layers, source.n_heads, epsilon)
    cut, model = 0, None
    chosen = sorted(range(len(corpus.entries)) if texts is None else texts)
    for _, group in itertools.groupby(chosen, key=lambda index: index // GROUP_TEXTS):
        parts = [part for index in group for part in _parts(source, corpus, index, windows, against)]
        cut += len({part.text for part in parts if part.window > 0})
        for batch in _batches(source, parts, one_at_a_time=against is not None):
            made, model = _layers(source, batch, against)
            for layer, result in enumerate(made):
                tally.add(layer, [(part.text, part.window) for part in batch], result)
            for part in batch:
                tally.count_text(len(part.tokens))
            if progress is not None:
                progress(sum(part.last for part in batch), sum(len(part.tokens) for part in batch))
    checkpoint = getattr(source, "checkpoint", None)
    other = None if against is None else against.checkpoint.info.source
    return Census(tally, corpus, checkpoint.info if checkpoint is not None else model, windows, cut, other)


@dataclasses.dataclass(frozen=True)
class Part:
    """A text, or one window of a long text's, as the model reads it."""

    text: int  # its index in the corpus
    window: int
    tokens: Tokens
    last: bool  # the text's last window
    content: str = ""  # the toy's text (its run tokenizes it again)


def _parts(source: Source, corpus: Corpus, index: int, windows: Windows | None, against: Source | None) -> list[Part]:
    """Text ``index``'s windows (the whole text where it fits; the toy's text as it is), with --against
    each checked to give the other model the same ids."""
    text = corpus.entries[index].text
    checkpoint = getattr(source, "checkpoint", None)
    if checkpoint is None:
        return [Part(index, 0, source.tokenize(text), True, text)]  # type: ignore[attr-defined]
    assert windows is not None
    made = checkpoint.tokenizer.windows(text, windows.size, windows.stride)
    if against is not None:
        others = against.checkpoint.tokenizer.windows(text, windows.size, windows.stride)  # type: ignore[attr-defined]
        if len(others) != len(made) or any(a.ids != b.ids for a, b in zip(made, others)):
            raise UsageError(f"--against: text {index} gives other token ids through {against.checkpoint.info.name}'s tokenizer; "  # type: ignore[attr-defined]
                             "compare models that share a tokenizer")  # fmt: skip
    return [Part(index, window, tokens, window == len(made) - 1) for window, tokens in enumerate(made)]


def _batches(source: Source, parts: list[Part], *, one_at_a_time: bool) -> Iterator[list[Part]]:
    """The parts in batches that run together: a trained model's texts of similar lengths (sorted by
    length within a length class, as many as BATCH_BYTES of (H, T, T) float32 tables and FLIGHT_BYTES
    of a layer in flight hold, at most BATCH_TEXTS), a longer one alone (in blocks); the toy's, and
    ``one_at_a_time`` (--against), one by one."""
    checkpoint = getattr(source, "checkpoint", None)
    if checkpoint is None or one_at_a_time:
        yield from ([part] for part in parts)
        return
    batch: list[Part] = []
    for part in sorted(parts, key=lambda p: (checkpoint.length_class(len(p.tokens)), len(p.tokens), p.text, p.window)):
        n = len(part.tokens)
        fits = len(batch) < BATCH_TEXTS and (len(batch) + 1) * source.n_heads * 4 * n * n <= BATCH_BYTES  # (B, H, T, T) float32
        fits = fits and (len(batch) + 1) * checkpoint.estimate_bytes(n, [0], "weights")["activations"] <= FLIGHT_BYTES
        if batch and (not fits or checkpoint.length_class(n) != checkpoint.length_class(len(batch[0].tokens))):
            yield batch
            batch = []
        batch.append(part)
    if batch:
        yield batch


def _layers(source: Source, batch: list[Part], against: Source | None) -> tuple[list[dict[str, Any]], Any]:
    """Every layer's ``TextLayer`` result over a batch (with ``against``, a text compared with that
    model's), and the model's ModelInfo."""
    checkpoint = getattr(source, "checkpoint", None)
    if checkpoint is None:
        return _toy(source, batch[0].content)
    if against is not None:
        return _compared_layers(checkpoint, against.checkpoint, batch[0].tokens), checkpoint.info  # type: ignore[attr-defined]
    tokens = [part.tokens for part in batch]
    if len(batch) == 1 and source.n_heads * 4 * len(tokens[0]) ** 2 > BATCH_BYTES:
        return _blocked_layers(checkpoint, tokens[0]), checkpoint.info
    return _batched_layers(checkpoint, tokens), checkpoint.info


def _batched_layers(checkpoint: Any, texts: list[Tokens]) -> list[dict[str, Any]]:
    """Every layer's census sums of a batch of texts run together, padded to the longest."""
    from attn_cli.runtime import threads

    info, n = checkpoint.info, max(len(tokens) for tokens in texts)
    keys = [_keys(tokens, separator_ids(checkpoint)) for tokens in texts]
    lengths = [len(tokens) for tokens in texts]
    made: list[dict[str, Any]] = []

    def visit(index: int, hidden: Any, t: Any, layer: Any) -> None:  # each layer's (B, H, T, T) weights as it passes, none kept
        made.append(_table_sums(layer.weights, checkpoint.band(index), lengths, keys))

    with threads.using_threads(threads.threads_for(len(texts) * _flops(info, n))):
        checkpoint.trace_batch(texts, [info.layers - 1], visit=visit)
    return made


def _blocked_layers(checkpoint: Any, tokens: Tokens) -> list[dict[str, Any]]:
    """Every layer's census sums of one long text, computed in blocks (no (H, T, T) table)."""
    from attn_cli.analysis.headcensus import TextLayer
    from attn_cli.runtime import threads
    from attn_cli.sources.blocks import BlockPlan

    info, n = checkpoint.info, len(tokens)
    sep, punct = _keys(tokens, separator_ids(checkpoint))
    layers: dict[int, TextLayer] = {}

    def sink(layer: int, n_queries: int, n_keys: int) -> TextLayer:
        layers[layer] = TextLayer(info.heads, [n_queries], band=checkpoint.band(layer), sep=[sep], punct=[punct])
        return layers[layer]

    rows, group = checkpoint.block_shape(n, BLOCK_BYTES)
    with threads.using_threads(threads.threads_for(_flops(info, n))):
        checkpoint.trace(tokens, list(range(info.layers)), "weights", blocks=BlockPlan(rows=rows, heads_at_once=group, sink=sink, stats=False))
    return [layers[layer].result() for layer in range(info.layers)]


def _flops(info: Any, n_tokens: int) -> int:
    """Roughly a text's work through every layer's products, per layer: what sets the run's threads."""
    return 16 * n_tokens * info.d_model**2 + 4 * n_tokens * n_tokens * info.d_model


@dataclasses.dataclass(frozen=True)
class EncoderStack:
    """An encoder-decoder's encoder as a census reads it: one stack of self-attention over each text
    (its decoder's attention needs a target text, which a corpus does not give)."""

    checkpoint: Any  # a Checkpoint of the encoder alone (PairCheckpoint.encoder_checkpoint)

    @property
    def n_layers(self) -> int:
        return int(self.checkpoint.info.layers)

    @property
    def n_heads(self) -> int:
        return int(self.checkpoint.info.heads)


def one_stack(source: Source) -> Any:
    """The one stack of self-attention a census reads: the model's, or an encoder-decoder's encoder."""
    from attn_cli.sources.checkpoint.pair_source import PairSource

    if not isinstance(source, PairSource):
        return source
    return EncoderStack(source.checkpoint.encoder_checkpoint())


def check_against(source: Source, against: Source) -> None:
    """--against needs two checkpoints of the same layers and heads."""
    mine, theirs = getattr(one_stack(source), "checkpoint", None), getattr(one_stack(against), "checkpoint", None)
    if mine is None or theirs is None:
        raise UsageError("--against compares two trained models (--model and --against)")
    if (mine.info.layers, mine.info.heads) != (theirs.info.layers, theirs.info.heads):
        raise UsageError(f"--against: {theirs.info.name} has {theirs.info.layers} layers of {theirs.info.heads} heads, "
                         f"{mine.info.name} {mine.info.layers} of {mine.info.heads}; compare models of the same shape")  # fmt: skip


def _compared_layers(checkpoint: Any, other: Any, tokens: Tokens) -> list[dict[str, Any]]:
    """Every layer's census sums of one text from its tables, each head compared with ``other``'s
    tables of the same tokens: the cosine of the flattened maps (Kovaleva et al. 2019) and each row's
    total variation, 0.5 sum_j |w - w'|, summed over the rows."""
    import torch

    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError

    info, n = checkpoint.info, len(tokens)
    need = 2 * info.layers * info.heads * n * n * 4
    if need > (budget.available_bytes() or need) // 2:
        raise TooLargeError(f"--against keeps both models' tables of {n} tokens ({budget.gib(need)}); give a smaller --window")
    sep, punct = _keys(tokens, separator_ids(checkpoint))
    layers = list(range(info.layers))
    mine, theirs = checkpoint.trace(tokens, layers, "weights"), other.trace(tokens, layers, "weights")
    made = []
    for layer, a, b in zip(layers, mine, theirs):
        x, y = a.weights.double(), b.weights.double()  # (H, T, T)
        cosine = torch.nn.functional.cosine_similarity(x.flatten(1), y.flatten(1), dim=-1)  # (H,)
        tv = 0.5 * (x - y).abs().sum(dim=-1).sum(dim=-1)  # (H,) summed over the rows
        sums = _table_sums(a.weights, checkpoint.band(layer), [n], [(sep, punct)])
        made.append({**sums, "against": {"cosine": cosine[None], "tv": tv[None]}})  # (1, H) each: a batch of one
    return made


def _table_sums(weights: Any, band: Any, lengths: list[int], keys: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """A layer's (H, T, T) table, or a batch's (B, H, T, T) padded to the longest, given to a ``TextLayer``
    as one block: its census sums. ``keys``: each text's (separator, punctuation) positions."""
    from attn_cli.analysis.headcensus import TextLayer

    gathered = TextLayer(weights.shape[-3], lengths, band=band, sep=[k[0] for k in keys], punct=[k[1] for k in keys])
    gathered(0, weights, 0, 0)
    return gathered.result()


def _toy(source: Source, text: str) -> tuple[list[dict[str, Any]], Any]:
    """The toy's every layer, its tables given as one block each."""
    from attn_cli.records.band import Band
    from attn_cli.records.selection import Selection
    from attn_cli.sources.attend import causal_mask

    trace = source.run(text, Selection(tuple(range(source.n_layers)), tuple(range(source.n_heads)), keep="weights"))
    sep, punct = _keys(trace.tokens, frozenset())
    made = []
    for layer in trace.layers:
        if layer.mask is not None and not bool((layer.mask == causal_mask(layer.weights.shape[-1])).all()):
            raise UsageError("census reads a causal mask or none; this mask is neither")
        made.append(_table_sums(layer.weights, Band() if layer.mask is None else Band(after=0), [len(trace.tokens)], [(sep, punct)]))
    return made, trace.model


def separator_ids(checkpoint: Any) -> frozenset[int]:
    """The separator and end-of-sequence ids: the special tokens the tokenizer puts after a text, and the model's EOS."""
    return frozenset(checkpoint.tokenizer.trailing_special_ids()) | frozenset(checkpoint.eos_ids)


def _keys(tokens: Tokens, separators: frozenset[int]) -> tuple[list[int], list[int]]:
    """(positions > 0 whose id is a separator, positions of "." and "," tokens)."""
    from attn_cli.analysis.headcensus import punctuation_keys

    return [i for i, tid in enumerate(tokens.ids) if i > 0 and tid in separators], punctuation_keys(tokens.texts)
