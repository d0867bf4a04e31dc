"""The seeded toy model as a source: text -> tokens -> X -> one layer of attention -> a
``Trace``. The tokenizer loads once, and a batch of texts draws the embedding table and
the projections once (the same numbers the seed contract draws every time). Nothing here
prints: a tokenizer fallback is a note in ``notes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attn_cli.analysis.norms import BLOCK_BYTES as NORMS_BLOCK_BYTES, with_norms
from attn_cli.analysis.flow import flow_of
from attn_cli.analysis.rollout import rollout_of
from attn_cli.records.layers import Projections
from attn_cli.records.selection import Selection
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import TOY, ModelInfo, Trace
from attn_cli.runtime import threads
from attn_cli.runtime.errors import TokenizerUnavailable, UsageError
from attn_cli.runtime.threads import using_threads
from attn_cli.sources.base import PROBE_TEXT, Batches, check_budget, check_length, check_text, with_threads
from attn_cli.sources.toy.about import toy_about
from attn_cli.sources.toy.config import DEFAULT_TOKENIZER, Config, Positional
from attn_cli.sources.toy.embed import embedding_table, load_embeddings, seeded_embeddings, sinusoidal
from attn_cli.sources.toy.model import make_projections, self_attention
from attn_cli.text.rankfiles import DIR_ENV
from attn_cli.text.tokenizers import WORDS, TiktokenTokenizer, Tokenizer, get_tokenizer


def toy_info(config: Config, vocab_size: int) -> ModelInfo:
    """The toy source's ``ModelInfo`` for a resolved config: one layer of seeded weights;
    ``vocab_size``: the tokenizer's, the rows of the seeded embedding table."""
    assert config.d_model is not None and config.d_k is not None and config.d_v is not None, "resolve the config first"
    return ModelInfo(
        source=TOY,
        architecture=TOY,
        family=TOY,
        layers=1,
        heads=config.heads,
        kv_heads=config.heads,
        head_dim=config.d_k,
        d_model=config.d_model,
        d_v=config.d_v,
        qkv_bias=config.qkv_bias,
        out_proj=config.out_proj,
        projections=config.projections,
        dropout=config.dropout,
        config=config,
        about=toy_about(config, vocab_size),
        input_text="X, the embeddings" + (" plus positions" if config.positional is not Positional.none else ""),
    )


class ToySource(Batches):
    def __init__(self, config: Config) -> None:
        self.config = config
        self.notes: list[str] = []
        self.tokenizer = self._load_tokenizer()
        self._tables: dict[tuple[int, int, int], torch.Tensor] = {}
        self._drawn: dict[tuple[Config, int], tuple[Projections, torch.Tensor]] = {}

    def _load_tokenizer(self) -> Tokenizer:
        try:
            return get_tokenizer(self.config.tokenizer_name)
        except TokenizerUnavailable as err:
            if self.config.tokenizer is not None:
                raise
            self.notes.append(
                f"note: {DEFAULT_TOKENIZER} is not available offline ({err.reason}), so the "
                f"'{WORDS}' tokenizer is used; get {DEFAULT_TOKENIZER} with `attn-cli tokenizers add "
                f"vocab.bpe encoder.json` or by pointing ${DIR_ENV} at a folder of rank files"
            )
            return get_tokenizer(WORDS)

    def tokenize(self, text: str) -> Tokens:
        check_text(text)
        return check_length(self.tokenizer.encode(text), self.config.max_tokens)

    n_layers = 1

    @property
    def n_heads(self) -> int:
        return self.config.heads

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        return self._trace(text, self.tokenize(text), selection)

    # The `heads` probe traces token ids chosen directly, not a text.
    def probe_pool(self) -> tuple[tuple[int, ...], Sequence[int]] | str:
        """(leading special ids, the ordinary ids to draw from), or why there is no probe."""
        if self.config.embeddings is not None:
            return "--embeddings gives vectors for its own text's tokens, not for token ids"
        if not isinstance(self.tokenizer, TiktokenTokenizer):
            return f"the '{WORDS}' tokenizer has no fixed vocabulary to draw token ids from; use a tiktoken encoding (-t gpt2)"
        return (), self.tokenizer.ordinary_ids()

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace:
        assert isinstance(self.tokenizer, TiktokenTokenizer), "probe_pool says when there is no probe"
        return self._trace(PROBE_TEXT, self.tokenizer.tokens_from_ids(ids), selection)

    def _trace(self, text: str, tokens: Tokens, selection: Selection | None) -> Trace:
        config = self.config
        x = load_embeddings(config.embeddings, len(tokens)) if config.embeddings else None  # (T, D)
        config = config.resolved(x.shape[1] if x is not None else None)
        check_memory(config, len(tokens), tokens.vocab_size if x is None else 0, selection)
        if x is None:
            x = seeded_embeddings(tokens, config.d_model, config.seed, self._table(tokens.vocab_size, config))  # (T, D)
        if config.positional is Positional.sinusoidal:
            x = x + sinusoidal(len(tokens), x.shape[1])  # (T, D)
        n_threads = threads.toy_threads()  # one: the same bytes on every machine (attn_cli.runtime.threads)
        with using_threads(n_threads):
            layer = self_attention(x, config, self._projections(config, x.shape[1]))
            if selection is not None and selection.norms:
                layer = with_norms(layer)
        info, layers = with_threads(toy_info(config, tokens.vocab_size), (layer,), n_threads)
        if selection is not None and selection.maps:
            raise UsageError(f"--what {selection.maps[0].replace('_', '-')} runs a trained model's layers again (its MLP, its norms): give --model")
        rollout = rollout_of(layers) if selection is not None and selection.rollout else None
        flow = flow_of(layers) if selection is not None and selection.flow else None
        return Trace(text, tokens, info, layers, chosen_heads=selection.heads if selection else None, rollout=rollout, flow=flow)

    # A batch runs one configuration over many texts: the seeded embedding table
    # and projections are the same every time, so they are drawn once. Both are
    # exactly what the seed contract draws; only the redrawing is skipped.
    def _table(self, vocab_size: int, config: Config) -> torch.Tensor:
        key = (vocab_size, config.d_model, config.seed)
        if key not in self._tables:
            if len(self._tables) >= 8:  # the words tokenizer's vocabulary changes with each text
                self._tables.pop(next(iter(self._tables)))
            self._tables[key] = embedding_table(vocab_size, config.d_model, config.seed)  # (V, D)
        return self._tables[key]

    def _projections(self, config: Config, d_in: int) -> Projections:
        key = (config, d_in)
        if key not in self._drawn:
            projections = make_projections(config, d_in)
            self._drawn = {key: (projections, torch.get_rng_state())}
        projections, rng_after = self._drawn[key]
        torch.set_rng_state(rng_after)  # dropout carries on from the draw, as if it had just happened
        return projections


def estimate_bytes(config: Config, n_tokens: int, vocab_size: int = 0, selection: Selection | None = None) -> int:
    """Peak float32 bytes of one attention run (resolved config), within a small factor."""
    return sum(_memory_parts(config, n_tokens, vocab_size, selection).values())


def _memory_parts(config: Config, n_tokens: int, vocab_size: int, selection: Selection | None = None) -> dict[str, int]:
    heads, d_k, d_v, d_model = config.heads, config.d_k or 0, config.d_v or 0, config.d_model or 0
    # The engine keeps one T x T tensor per head (the weights); outputs that show the
    # raw scores cache them and derive the softmax input from them, so three at the peak.
    square = heads * n_tokens * n_tokens
    vectors = n_tokens * (d_model + heads * (2 * d_k + 3 * d_v))
    # W_q, W_k, W_v (and W_o) grow with d_model x heads x d_k, whatever the text's length.
    weights = (d_model * heads * (2 * d_k + d_v) if config.projections else 0) + ((heads * d_v) ** 2 if config.out_proj else 0)
    analyses = 0
    if selection is not None and selection.norms:  # analysis.norms: (H, T, T) + (T, T) kept, Gram matrices and a block
        analyses += 4 * (square + n_tokens**2) + 8 * n_tokens * heads**2 + 3 * NORMS_BLOCK_BYTES
    if selection is not None and selection.rollout:  # analysis.rollout: float64 (T, T) products
        analyses += 3 * 8 * n_tokens**2
    return {
        "matrices": 4 * (4 if config.dropout else 3) * square + analyses,
        "vectors": 4 * 2 * vectors,
        "weights": 4 * weights,
        "table": 4 * vocab_size * d_model,  # the seeded nn.Embedding(vocab_size, d_model)
    }


_MEMORY_FIX = {
    "matrices": "use a shorter text or fewer heads",
    "vectors": "use a shorter text, fewer heads or smaller --d-k/--d-v",
    "weights": "lower --d-model, --d-k, --d-v or --heads",
    "table": "lower --d-model or use a smaller tokenizer",
}


def check_memory(config: Config, n_tokens: int, vocab_size: int = 0, selection: Selection | None = None) -> None:
    heads = f"{config.heads} head{'s' if config.heads != 1 else ''}"
    what = {
        "matrices": f"the T x T matrices of {n_tokens} tokens x {heads}",
        "vectors": f"the query, key and value vectors of {n_tokens} tokens x {heads}",
        "weights": f"the projection weights (d_model {config.d_model}, {heads}, d_k {config.d_k}, d_v {config.d_v})",
        "table": f"the {vocab_size} x {config.d_model} embedding table",
    }
    check_budget(_memory_parts(config, n_tokens, vocab_size, selection), {k: (v, _MEMORY_FIX[k]) for k, v in what.items()})
