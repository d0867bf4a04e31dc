"""An encoder-decoder checkpoint as a source (``--model`` with ``--target`` or ``--generate``):
the text through the encoder and the target through the decoder, the three stacks in its trace
(``attn_cli.sources.checkpoint.pair``). It checks the memory its run needs before it allocates;
where the source's tables would not fit, or --no-tables asks, the encoder runs in blocks
(``attn_cli.sources.blocks``) and its layers are summaries, the decoder's and cross-attention's
tables kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.analysis.rollout import rollout_of
from attn_cli.records.layers import LayerWeights
from attn_cli.records.positions import resolve_queries
from attn_cli.records.selection import IndexSpec, Selection
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Trace, encoder_decoder_trace
from attn_cli.runtime import threads
from attn_cli.runtime.errors import UsageError
from attn_cli.runtime.threads import attention_flops, using_threads
from attn_cli.sources.base import PROBE_TEXT, Batches, check_budget, check_device_budget, check_length, check_text
from attn_cli.sources.checkpoint.attributing import encoder_maps
from attn_cli.sources.checkpoint.files import Found
from attn_cli.sources.checkpoint.source import block_bytes_for, check_room, fits_at_hand
from attn_cli.sources.spec import TABLE_HEADS, SourceSpec

if TYPE_CHECKING:
    from attn_cli.analysis.effects import Ablation
    from attn_cli.sources.blocks import BlockPlan, LayerSink
    from attn_cli.sources.checkpoint.pair import PairLayers


class PairSource(Batches):
    """An encoder-decoder checkpoint (``--model`` with ``--target``): the text through the
    encoder, the target's labels shifted right through the decoder (``attn_cli.sources.checkpoint.pair``);
    the trace holds the three stacks (``Trace.stack`` shows one)."""

    def __init__(self, spec: SourceSpec, found: Found | None = None) -> None:
        from attn_cli.sources.checkpoint import open_checkpoint
        from attn_cli.sources.checkpoint.pair import PairCheckpoint

        assert spec.model is not None
        self.spec = spec
        self.notes: list[str] = []
        opened = open_checkpoint(spec.model, revision=spec.revision, dtype=spec.dtype, device=spec.device, found=found, pairs=True)
        assert isinstance(opened, PairCheckpoint), "open_source sends encoder-decoders here"
        self.checkpoint = opened
        self.info = self.checkpoint.info
        # --layer and --head choose within each stack (``_resolve``): any index one of them has passes here
        self.n_layers = max(self.info.layers, self.info.decoder_layers or 0)
        self.n_heads = max(self.info.heads, self.info.decoder_heads or 0)
        self._source: Tokens | None = None
        self._labels: tuple[int, ...] = ()  # the last text's target, as the decoder's labels (``ablate``)
        self._encoder_plan: BlockPlan | None = None  # the last text's encoder in blocks, as the probe reads it again

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        check_text(text)
        spec, info = self.spec, self.info
        if spec.pair is not None or spec.truncate:
            raise UsageError(f"{'--pair' if spec.pair is not None else '--truncate'} is not available with an encoder-decoder model yet; drop it")
        rollout_stack = spec.stack or "cross"
        if selection is not None and selection.rollout and rollout_stack == "cross":
            raise UsageError(
                "--rollout multiplies a stack's layers from its input up, and cross-attention's rows and columns are two texts: "
                "roll out --stack encoder or --stack decoder"
            )
        source = check_length(self.checkpoint.tokenizer.encode(text), spec.token_limit(info.max_positions))
        self._source = source  # what the encoder reads under the heads' probe (``trace_ids``)
        keep = selection.keep if selection is not None else "all"
        predict = selection.predict if selection is not None else 0
        norms = selection is not None and selection.norms
        generate = selection.generate if selection is not None else 0
        target, labels = self._target(source, generate, selection)
        self._labels = labels.ids
        ended_at_once = bool(generate) and len(labels) == 1 and labels.ids[0] in self.checkpoint.eos_ids
        decoder = check_length(self.checkpoint.decoder_tokens(labels), spec.token_limit(info.max_positions))
        blocks, omitted = self._plan(source, len(decoder), selection, predict=bool(predict))
        norms = norms and blocks is None  # in blocks, no norms (heads' norm_special_mass is None), as for one stack
        self._encoder_plan = None if blocks is None else dataclasses.replace(blocks, sink=None, queries=(), pool=None)
        n = max(len(source), len(decoder))
        n_threads = threads.threads_for(attention_flops(n, info.d_model, info.heads, info.head_dim, info.value_dim) + 16 * n * info.d_model**2)
        with using_threads(n_threads):
            stacks, predictions = self.checkpoint.trace(source, decoder, keep, predict=predict, norms=norms, blocks=blocks)
        kept, encoder_heads, decoder_heads = self._chosen(stacks, selection, n_threads)
        encoder_layers, maps, flow, explained = kept["encoder"], {}, None, None
        if selection is not None and (selection.maps or selection.flow):  # the encoder's (attributing.encoder_maps)
            encoder_layers, maps, flow, explained = encoder_maps(self.checkpoint, source, decoder, selection, spec.stack, kept["encoder"])
        rollout = None
        if selection is not None and selection.rollout:  # through the last layer the stack keeps, from every layer before it
            rollout = rollout_of(getattr(stacks, rollout_stack), kept[rollout_stack][-1].layer)
        encoder = Trace(
            text, source, dataclasses.replace(info, threads=n_threads), tuple(encoder_layers), chosen_heads=encoder_heads, maps=maps,
            flow=flow, explained=explained,
            predictions=predictions, generated_text=target if generate else None, ended_at_once=ended_at_once,
            rollout=rollout if rollout_stack == "encoder" else None, tables_omitted=omitted, queries=blocks.queries if blocks else (),
            row_scores=blocks is not None and blocks.scores,
        )  # fmt: skip
        decoder_rollout = rollout if rollout_stack == "decoder" else None
        return encoder_decoder_trace(encoder, target, decoder, kept["decoder"], kept["cross"], decoder_heads, decoder_rollout)

    def _target(self, source: Tokens, generate: int, selection: Selection | None) -> tuple[str, Tokens]:
        """(the target's text, its labels): --target's, or with --generate the model's own,
        greedy from decoder_start_token_id."""
        spec, info, tokenizer = self.spec, self.info, self.checkpoint.tokenizer
        target = spec.target
        if generate:
            if target is not None:
                raise UsageError("--generate writes the target itself: drop --target, or drop --generate to read yours")
            check_room(spec, info, "the decoder's start token", 1, generate)
            blocks, _ = self._plan(source, generate + 1, selection, predict=True)  # the longest target it may write
            made = self.checkpoint.generate(source, generate, None if blocks is None else dataclasses.replace(blocks, stats=False))
            return tokenizer.decode(made), tokenizer.tokens_from_ids(made, tuple(i in tokenizer.special_ids() for i in made))
        if target is None:
            raise UsageError(
                f"{info.name} is an encoder-decoder ({info.family}): give the decoder's text with --target "
                f"(`attn-cli run TEXT --model MODEL --target TARGET`), or let it write one with --generate N"
            )
        if not target.strip():
            raise UsageError("--target is empty: give the decoder's text (the translation or summary to read)")
        return target, self.checkpoint.encode_target(target)

    def _chosen(
        self, stacks: PairLayers, selection: Selection | None, n_threads: int
    ) -> tuple[dict[str, tuple[LayerWeights, ...]], tuple[int, ...], tuple[int, ...]]:
        """Each stack's layers the trace keeps, and the encoder's and the decoder's heads. JSON,
        CSV and the page hold every stack, each with every layer and head unless --layer/--head
        say otherwise; tables, pictures and explain show one stack, where alone the indexes must exist."""
        spec, info = self.spec, self.info
        heads = {"encoder": info.heads, "decoder": info.decoder_heads or 0}
        layers = {"encoder": info.layers, "decoder": info.decoder_layers or 0}
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
        kept = {stack: chosen(stack, getattr(stacks, stack)) for stack in ("encoder", "decoder", "cross")}
        return kept, encoder_heads, decoder_heads

    def ablate(self, trace: Trace, method: str) -> Ablation:
        """``heads --ablate``: each head of the stack --stack names (cross-attention's by default)
        and its change in the target's loss (``PairCheckpoint.ablate``), for the trace ``run`` made last."""
        stacks = trace.stacks
        assert len(stacks) > 1 and self._labels, "run the text first"
        return self.checkpoint.ablate(trace.tokens, stacks["decoder"].tokens, self._labels, method, self.spec.stack or "cross")

    def _plan(self, source: Tokens, n_target: int, selection: Selection | None, *, predict: bool) -> tuple[BlockPlan | None, str | None]:
        """The encoder's plan of blocks where --no-tables or --tables FILE asks, or where the three
        stacks' tables would not fit and nothing reads them (rollout, flow, attributions);
        None to keep every table. Either way the run is refused here, before anything runs, if it
        would not fit (on a GPU, its part there too); with blocks, the note that says what was kept."""
        s, keep = len(source), selection.keep if selection is not None else "all"
        norms = selection is not None and selection.norms
        parts = self.checkpoint.estimate_bytes(s, n_target, keep, predict=predict, norms=norms)
        culprits = {
            "weights": ("the weights of both stacks", "use a smaller model"),
            "tables": (f"the tables of {s} source and {n_target} target tokens in every layer of three stacks", "use shorter texts"),
            "activations": ("the hidden states of both texts", "use shorter texts"),
        }
        reads = selection is None or selection.rollout or selection.flow or bool(selection.maps)  # norms: dropped in blocks
        asked = selection is not None and (selection.tables == "omit" or selection.sink is not None)
        if reads or not (asked or (selection.tables == "fit" and not fits_at_hand(parts, self.spec.device))):
            check_budget(parts, culprits)
            check_device_budget(parts, culprits, self.spec.device)
            return None, None
        block_bytes = block_bytes_for(self.spec.device)
        plan, omitted = self._blocks(source, selection, parts["tables"], block_bytes)
        rows = len(plan.queries) * (2 if plan.scores else 1)  # each chosen row's weights, and with --show scores its scores
        parts = self.checkpoint.estimate_bytes(s, n_target, keep, predict=predict, blocks=(block_bytes, rows))
        culprits["tables"] = (f"the decoder's tables over {s} source tokens, and the encoder's statistics and rows", "use shorter texts")
        check_budget(parts, culprits)
        check_device_budget(parts, culprits, self.spec.device)
        return plan, omitted

    def _sink(self, selection: Selection) -> LayerSink | None:
        """--tables FILE's writer for the encoder's chosen layers (every encoder layer runs in blocks)."""
        sink = selection.sink
        if sink is None:
            return None
        if self.spec.stack != "encoder":
            raise UsageError("--tables writes an encoder-decoder's encoder tables (the source's, in blocks): add --stack encoder")
        info, tables = self.info, tuple(getattr(sink, "tables", ()))
        outside = [(layer, head) for layer, head in tables if layer >= info.layers or head >= info.heads]
        if outside:
            raise UsageError(
                f"--tables: the encoder has {info.layers} layers of {info.heads} heads, and layer {outside[0][0]} head {outside[0][1]} "
                "is chosen: choose --layer and --head within them"
            )
        chosen = {layer for layer, _ in tables}
        return lambda layer, n_queries, n_keys: sink(layer, n_queries, n_keys) if layer in chosen else _skip

    def _blocks(self, source: Tokens, selection: Selection, tables: int, block_bytes: int) -> tuple[BlockPlan, str]:
        """The encoder's plan of blocks (the --query rows are the source's) and the note that says what was kept."""
        from attn_cli.runtime import budget
        from attn_cli.sources.blocks import BlockPlan

        info, s = self.info, len(source)
        rows, group = self.checkpoint.encoder_checkpoint().block_shape(s, block_bytes)
        queries = resolve_queries(selection.queries, source.texts, source.labels) if selection.queries else ()
        every_head = tuple(h for h in selection.heads if h < info.heads) == tuple(range(info.heads))
        special = tuple(source.special) if source.special and any(source.special) else None
        plan = BlockPlan(
            rows=rows, heads_at_once=group, queries=queries, scores=selection.row_scores, special=special, sink=self._sink(selection),
            heads=None if every_head else tuple(h for h in selection.heads if h < info.heads), pool=selection.pool,
        )  # fmt: skip
        chosen = f" and its {len(queries)} --query row{'s' if len(queries) != 1 else ''}" if queries else ""
        kept = f"the encoder's statistics{chosen}, computed in blocks"
        if selection.sink is not None:
            return plan, f"--tables: the encoder's tables went to their file; kept here {kept}"
        if selection.tables == "omit":
            return plan, f"--no-tables: kept {kept}"
        return plan, (
            f"the tables of {s} source tokens x {info.layers} encoder layers x {info.heads} heads would take {budget.gib(tables)} with the "
            f"decoder's, more than the memory at hand: kept {kept} (the decoder's and cross-attention's tables whole)"
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
        return (self.checkpoint.model.decoder.decoder_start,), self.checkpoint.tokenizer.ordinary_ids()

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace:
        """The decoder over ``ids`` as its inputs (the probe), the encoder over the last text run."""
        if self._source is None:
            raise UsageError("an encoder-decoder's probe reads the decoder over the ids, with a text in the encoder: run a text first")
        tokenizer = self.checkpoint.tokenizer
        decoder = tokenizer.tokens_from_ids(tuple(ids), tuple(i == 0 for i in range(len(ids))))
        keep = selection.keep if selection is not None else "all"
        with using_threads(threads.threads_for(16 * len(ids) * self.info.d_model**2)):
            stacks, _ = self.checkpoint.trace(self._source, decoder, keep, blocks=self._encoder_plan)
        encoder = Trace(PROBE_TEXT, self._source, self.info, stacks.encoder)
        return encoder_decoder_trace(encoder, PROBE_TEXT, decoder, stacks.decoder, stacks.cross)


def _skip(start: int, weights: object, first: int = 0, head: int = 0) -> None:
    """A block consumer of a layer --tables does not write."""
