"""The one place that wires text -> tokens -> a source of attention -> a Trace.

Two sources: ``Pipeline(config)``, the seeded toy model (text -> tokens -> X ->
one layer of attention), and ``CheckpointSource``, a trained model's every
layer (``attn_cli.checkpoint``). Each loads its tokenizer once, so a batch of
texts pays for it once; ``run(text, selection)`` gives a ``Trace`` holding
everything a renderer shows. Nothing here prints: notes for the user (a
tokenizer fallback) travel in ``notes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Protocol

import torch

from attn_cli.analysis.norms import BLOCK_BYTES as NORMS_BLOCK_BYTES, with_norms
from attn_cli.analysis.rollout import RolloutAccumulator, rollout_of
from attn_cli.records.layers import LayerWeights, Projections
from attn_cli.sources.toy.model import make_projections, self_attention
from attn_cli.sources.toy.config import DEFAULT_TOKENIZER, Config, Positional
from attn_cli.sources.toy.embed import embedding_table, load_embeddings, seeded_embeddings, sinusoidal
from attn_cli.runtime.errors import AttnCliError, InputError, TokenizerUnavailable, TooLargeError, UsageError, in_batch
from attn_cli.text.rankfiles import DIR_ENV
from attn_cli.text.tokenizers import WORDS, TiktokenTokenizer, Tokenizer, get_tokenizer
from attn_cli.records.tokens import Tokens
from attn_cli.source import TABLE_HEADS, SourceSpec
from attn_cli.runtime import threads
from attn_cli.runtime.threads import attention_flops, using_threads
from attn_cli.records.trace import TOY, ModelInfo, Run, Trace
from attn_cli.records.selection import IndexSpec, Keep, Selection

__all__ = ["CheckpointSource", "PairSource", "Pipeline", "Run", "Source", "Trace", "open_source", "toy_info"]


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


def open_source(spec: SourceSpec) -> Source:
    if spec.model is None:
        if spec.target is not None:
            raise UsageError("--target is the decoder's text of an encoder-decoder --model (BART, T5, Marian); the toy model has one stack")
        return Pipeline(spec.config)
    from attn_cli.checkpoint.files import locate, read_config
    from attn_cli.checkpoint.registry import is_seq2seq

    if is_seq2seq(read_config(locate(spec.model, spec.revision).folder)):
        return PairSource(spec)
    if spec.target is not None:
        raise UsageError(f"--target is for encoder-decoder models (BART, T5, Marian); {spec.model} has one stack: drop --target")
    return CheckpointSource(spec)


def check_text(text: str) -> None:
    if not text.strip():
        raise InputError("the text is empty; give some words, as an argument, with --file, or on stdin")


def check_length(tokens: Tokens, max_tokens: int) -> Tokens:
    """``tokens``, unless the user's text is over --max-tokens (a probe the command
    builds checks its own length)."""
    if len(tokens) > max_tokens:
        raise TooLargeError(f"the text has {len(tokens)} tokens, over --max-tokens {max_tokens}; shorten it or raise --max-tokens")
    return tokens


class _Batches:
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


def toy_info(config: Config) -> ModelInfo:
    """The toy source's ``ModelInfo`` for a resolved config: one layer of seeded weights."""
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
        config=config,
        input_text="X, the embeddings" + (" plus positions" if config.positional is not Positional.none else ""),
    )


class Pipeline(_Batches):
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
        info, layers = _with_threads(toy_info(config), (layer,), n_threads)
        rollout = rollout_of(layers) if selection is not None and selection.rollout else None
        return Trace(text, tokens, info, layers, chosen_heads=selection.heads if selection else None, rollout=rollout)

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


class CheckpointSource(_Batches):
    """A trained checkpoint (``--model``): its tokenizer, then every layer up to the
    last selected one, computed by ``attn_cli.checkpoint``."""

    def __init__(self, spec: SourceSpec) -> None:
        from attn_cli.checkpoint import open_checkpoint

        assert spec.model is not None
        self.spec = spec
        self.notes: list[str] = []
        self.checkpoint = open_checkpoint(spec.model, revision=spec.revision, dtype=spec.dtype, device=spec.device)
        self.info = self.checkpoint.info
        self.n_layers = self.info.layers
        self.n_heads = self.info.heads

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        check_text(text)
        spec = self.spec
        max_length = self.info.max_positions if spec.truncate else None
        try:
            tokens = self.checkpoint.tokenizer.encode(text, spec.pair, max_length=max_length)
        except TooLargeError as err:  # over the model's positions: the flag that helps is ours
            raise TooLargeError(f"{err}; or add --truncate") from None
        tokens = check_length(tokens, spec.config.max_tokens)
        if selection is not None and selection.generate:
            return self._generated(text, tokens, selection)
        return self._trace(text, tokens, selection, spec.pair)

    def _generated(self, text: str, prompt: Tokens, selection: Selection) -> Trace:
        """--generate: the prompt extended greedily, then the whole sequence traced."""
        import dataclasses

        n, info = selection.generate, self.info
        if self.spec.pair is not None:
            raise UsageError("--generate continues one text; drop --pair")
        if self.checkpoint.encoder:
            raise UsageError(f"--generate: {info.name} is an encoder (a masked LM); greedy generation needs a decoder")
        most = min(self.spec.config.max_tokens, info.max_positions or self.spec.config.max_tokens)
        if len(prompt) + n > most:
            which = "--max-tokens" if most == self.spec.config.max_tokens else f"the model's {most} positions"
            raise TooLargeError(f"the prompt's {len(prompt)} tokens and --generate {n} make {len(prompt) + n}, over {which}; generate fewer")
        with using_threads(threads.threads_for(16 * len(prompt) * info.d_model**2)):
            made = self.checkpoint.generate(prompt, n)
        tokenizer = self.checkpoint.tokenizer
        special = prompt.special or (False,) * len(prompt)
        ids = prompt.ids + made
        tokens = tokenizer.tokens_from_ids(ids, tuple(special) + tuple(tid in tokenizer.special_ids() for tid in made))
        before, after = tokenizer.decode(prompt.ids), tokenizer.decode(ids)
        continued = after[len(before) :] if after.startswith(before) else tokenizer.decode(made)  # a leading space kept
        trace = self._trace(text, tokens, dataclasses.replace(selection, generate=0), None)
        return dataclasses.replace(trace, prompt_length=len(prompt), generated_text=continued)

    def probe_pool(self) -> tuple[tuple[int, ...], Sequence[int]]:
        tokenizer = self.checkpoint.tokenizer
        return tokenizer.leading_special_ids(), tokenizer.ordinary_ids()

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace:
        leading = self.checkpoint.tokenizer.leading_special_ids()
        special = tuple(i < len(leading) and tid == leading[i] for i, tid in enumerate(ids))
        tokens = self.checkpoint.tokenizer.tokens_from_ids(tuple(ids), special)
        return self._trace(PROBE_TEXT, tokens, selection, None)

    def _trace(self, text: str, tokens: Tokens, selection: Selection | None, pair: str | None) -> Trace:
        spec = self.spec
        if selection is None:
            selection = Selection(tuple(range(self.n_layers)), tuple(range(self.n_heads)))
        parts = self.checkpoint.estimate_bytes(
            len(tokens), selection.layers, selection.keep, norms=selection.norms, rollout=selection.rollout,
            predict=bool(selection.predict),
        )  # fmt: skip
        check_budget(parts, _checkpoint_culprits(len(tokens), selection, self.info))
        # Threads follow the size of one layer's operations, not the whole model's:
        # a sentence through 12 small layers is still small work for each matmul.
        info = self.info
        per_layer = attention_flops(len(tokens), info.d_model, info.heads, info.head_dim, info.value_dim) + 16 * len(tokens) * info.d_model**2
        n_threads = threads.threads_for(per_layer)
        rollout = RolloutAccumulator() if selection.rollout else None
        predictions = None
        with using_threads(n_threads):
            if selection.predict:
                layers, predictions = self.checkpoint.predict(
                    tokens, selection.layers, selection.predict, selection.keep, norms=selection.norms, rollout=rollout
                )  # fmt: skip
            else:
                layers = self.checkpoint.trace(tokens, selection.layers, selection.keep, norms=selection.norms, rollout=rollout)
        info, layers = _with_threads(self.info, layers, n_threads)
        return Trace(
            text, tokens, info, layers, chosen_heads=selection.heads, pair=pair, rollout=rollout.result() if rollout else None,
            predictions=predictions,
        )  # fmt: skip


class PairSource(_Batches):
    """An encoder-decoder checkpoint (``--model`` with ``--target``): the text through the
    encoder, the target's labels shifted right through the decoder (``attn_cli.checkpoint.pair``);
    the trace holds the three stacks (``Trace.stack`` shows one)."""

    def __init__(self, spec: SourceSpec) -> None:
        from attn_cli.checkpoint.pair import open_pair_checkpoint

        assert spec.model is not None
        self.spec = spec
        self.notes: list[str] = []
        self.checkpoint = open_pair_checkpoint(spec.model, revision=spec.revision, dtype=spec.dtype, device=spec.device)
        self.info = self.checkpoint.info
        # --layer and --head choose within each stack (``_resolve``): any index one of them has passes here
        self.n_layers = max(self.info.layers, self.info.decoder_layers or 0)
        self.n_heads = max(self.info.heads, self.info.decoder_heads or 0)
        self._source: Tokens | None = None

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        check_text(text)
        spec, info = self.spec, self.info
        if spec.pair is not None or spec.truncate:
            flag = "--pair" if spec.pair is not None else "--truncate"
            raise UsageError(f"{flag} is not available with an encoder-decoder model yet; drop it")
        rollout_stack = spec.stack or "cross"
        if selection is not None and selection.rollout and rollout_stack == "cross":
            raise UsageError(
                "--rollout multiplies a stack's layers from its input up, and cross-attention's rows and columns are two texts: "
                "roll out --stack encoder or --stack decoder"
            )
        tokenizer = self.checkpoint.tokenizer
        source = check_length(tokenizer.encode(text), spec.config.max_tokens)
        self._source = source  # what the encoder reads under the heads' probe (``trace_ids``)
        generate = selection.generate if selection is not None else 0
        keep = selection.keep if selection is not None else "all"
        predict = selection.predict if selection is not None else 0
        norms = selection is not None and selection.norms
        target = spec.target
        if generate:  # the target is the model's own: greedy, from decoder_start_token_id
            if target is not None:
                raise UsageError("--generate writes the target itself: drop --target, or drop --generate to read yours")
            most = min(spec.config.max_tokens, info.max_positions or spec.config.max_tokens)
            if generate + 1 > most:
                raise TooLargeError(f"--generate {generate} and the decoder's start token make {generate + 1}, over {most}; generate fewer")
            self._check_budget(len(source), generate + 1, keep, predict=True, norms=norms)  # the longest target it may write
            made = self.checkpoint.generate(source, generate)
            target = tokenizer.decode(made)
            labels = tokenizer.tokens_from_ids(made, tuple(i in tokenizer.special_ids() for i in made))
        else:
            if target is None:
                raise UsageError(
                    f"{info.name} is an encoder-decoder ({info.family}): give the decoder's text with --target "
                    f"(`attn-cli run TEXT --model MODEL --target TARGET`), or let it write one with --generate N"
                )
            if not target.strip():
                raise UsageError("--target is empty: give the decoder's text (the translation or summary to read)")
            labels = self.checkpoint.encode_target(target)
        decoder = check_length(self.checkpoint.decoder_tokens(labels), spec.config.max_tokens)
        self._check_budget(len(source), len(decoder), keep, predict=bool(predict), norms=norms)
        n = max(len(source), len(decoder))
        n_threads = threads.threads_for(attention_flops(n, info.d_model, info.heads, info.head_dim, info.value_dim) + 16 * n * info.d_model**2)
        with using_threads(n_threads):
            stacks, predictions = self.checkpoint.trace(source, decoder, keep, predict=predict, norms=norms)
        info = dataclasses.replace(info, threads=n_threads)
        heads = {"encoder": info.heads, "decoder": info.decoder_heads or 0}
        layers = {"encoder": info.layers, "decoder": info.decoder_layers or 0}
        # JSON, CSV and the page hold every stack, each with every layer and head unless --layer/--head say
        # otherwise; tables, pictures and explain show one stack, where alone the indexes must exist
        everything = selection is None or selection.everything
        shown = None if everything else ({"encoder"} if spec.stack == "encoder" else {"decoder", "cross"})

        def pick(index: IndexSpec, count: int, what: str, stack: str, default: Sequence[int] | None) -> tuple[int, ...]:
            if shown is None or stack in shown:
                return self._resolve(index, count, what, stack, default)
            try:  # a stack not shown: what it has of the indexes, else its last
                return index.resolve(count, what, default=default)
            except UsageError:
                return (count - 1,)

        def chosen(stack: str, kept: Sequence[LayerWeights]) -> tuple[LayerWeights, ...]:
            count = layers["decoder" if stack == "cross" else stack]
            wanted = pick(spec.layers, count, "layer", stack, None if everything else [count - 1])
            return tuple(dataclasses.replace(kept[i], threads=n_threads) for i in wanted)

        def default_heads(count: int) -> Sequence[int] | None:
            """Unless --head chose: every head (JSON), or those the command asked for that the stack has (the model view: all)."""
            if everything:
                return None
            asked = [h for h in (selection.heads if selection is not None else ()) if h < count]
            return asked or range(min(TABLE_HEADS, count))

        encoder_heads = pick(spec.heads, heads["encoder"], "head", "encoder", default_heads(heads["encoder"]))
        decoder_heads = pick(spec.heads, heads["decoder"], "head", "decoder", default_heads(heads["decoder"]))
        kept = {"encoder": chosen("encoder", stacks.encoder), "decoder": chosen("decoder", stacks.decoder), "cross": chosen("cross", stacks.cross)}
        rollout = None
        if selection is not None and selection.rollout:  # through the last layer the stack keeps, from every layer before it
            rollout = rollout_of(getattr(stacks, rollout_stack), kept[rollout_stack][-1].layer)
        return Trace(
            text, source, info, kept["encoder"], chosen_heads=encoder_heads, target=target,
            target_tokens=decoder, decoder_layers=kept["decoder"], cross_layers=kept["cross"],
            decoder_chosen_heads=decoder_heads, predictions=predictions, generated_text=target if generate else None,
            rollout=rollout, rollout_stack=rollout_stack if rollout is not None else None,
        )  # fmt: skip

    def _check_budget(self, n_source: int, n_target: int, keep: Keep, *, predict: bool, norms: bool) -> None:
        """Refuse, before anything runs, three stacks over these lengths that would not fit."""
        check_budget(
            self.checkpoint.estimate_bytes(n_source, n_target, keep, predict=predict, norms=norms),
            {
                "weights": ("the weights of both stacks", "use a smaller model"),
                "tables": (f"the tables of {n_source} source and {n_target} target tokens in every layer of three stacks", "use shorter texts"),
                "activations": ("the hidden states of both texts", "use shorter texts"),
            },
        )

    @staticmethod
    def _resolve(index: IndexSpec, count: int, what: str, stack: str, default: Sequence[int] | None) -> tuple[int, ...]:
        """``--layer``/``--head`` within one stack; an index the stack lacks names the stack."""
        try:
            return index.resolve(count, what, default=default)
        except UsageError as err:
            raise UsageError(f"{err} (the {stack} stack)") from None

    def probe_pool(self) -> tuple[tuple[int, ...], Sequence[int]] | str:
        """The repeated-token probe reads the decoder's self-attention: its inputs are
        ``decoder_start_token_id`` and the probe's ids (the encoder reads the text, see ``trace_ids``)."""
        if self.spec.stack != "decoder":
            return "the repeated-token probe reads a decoder's self-attention: heads --stack decoder runs it"
        return (self.checkpoint.model.decoder_start,), self.checkpoint.tokenizer.ordinary_ids()

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace:
        """The decoder over ``ids`` as its inputs (the probe), the encoder over the last text run."""
        if self._source is None:
            raise UsageError("an encoder-decoder's probe reads the decoder over the ids, with a text in the encoder: run a text first")
        tokenizer = self.checkpoint.tokenizer
        decoder = tokenizer.tokens_from_ids(tuple(ids), tuple(i == 0 for i in range(len(ids))))
        keep = selection.keep if selection is not None else "all"
        with using_threads(threads.threads_for(16 * len(ids) * self.info.d_model**2)):
            stacks, _ = self.checkpoint.trace(self._source, decoder, keep)
        return Trace(
            PROBE_TEXT, self._source, self.info, stacks.encoder, target=PROBE_TEXT, target_tokens=decoder,
            decoder_layers=stacks.decoder, cross_layers=stacks.cross,
        )  # fmt: skip


def _with_threads(info: ModelInfo, layers: Sequence[LayerWeights], n_threads: int) -> tuple[ModelInfo, tuple[LayerWeights, ...]]:
    """The trace's model and layers marked with the thread count that computed them:
    JSON says it, and the raw scores a renderer derives later use it too."""
    return dataclasses.replace(info, threads=n_threads), tuple(dataclasses.replace(layer, threads=n_threads) for layer in layers)


def _checkpoint_culprits(n_tokens: int, selection: Selection, info: ModelInfo) -> dict[str, tuple[str, str]]:
    kept = len(selection.layers)
    return {
        "weights": (
            f"the weights of layers 0 to {selection.last_layer}",
            "choose an earlier --layer (later layers are never read)",
        ),
        "tables": (
            f"the T x T tables of {n_tokens} tokens x {kept} layer{'s' if kept != 1 else ''} x {info.heads} heads",
            "keep fewer layers with --layer, or use a shorter text",
        ),
        "activations": (f"the hidden states of {n_tokens} tokens", "use a shorter text"),
    }


def check_budget(parts: dict[str, int], culprits: dict[str, tuple[str, str]]) -> None:
    """Refuse work whose estimated ``parts`` (bytes) would not fit in the memory at hand,
    naming the biggest part (``culprits``: what it is, and the fix); ``attn_cli.runtime.budget``
    decides what "at hand" is."""
    from attn_cli.runtime import budget

    describe = {name: what for name, (what, _) in culprits.items()}
    fixes = {name: fix for name, (_, fix) in culprits.items()}
    budget.check(parts, describe, fixes)


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
