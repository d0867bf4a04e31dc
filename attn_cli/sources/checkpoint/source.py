"""A trained checkpoint as a source (``--model``): ``CheckpointSource`` runs a decoder or an
encoder, every layer up to the last selected one (an encoder-decoder's is ``pair_source.PairSource``).
It checks the memory its run needs before it allocates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.analysis.flow import attention_flow, check_size
from attn_cli.analysis.rollout import RolloutAccumulator
from attn_cli.records.positions import resolve_queries
from attn_cli.records.selection import Selection
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import ModelInfo, Trace
from attn_cli.runtime import threads
from attn_cli.runtime.errors import TooLargeError, UsageError
from attn_cli.runtime.threads import attention_flops, using_threads
from attn_cli.sources.base import PROBE_TEXT, Batches, check_budget, check_device_budget, check_length, check_text, with_threads
from attn_cli.sources.checkpoint.attributing import Attributing
from attn_cli.sources.checkpoint.files import Found
from attn_cli.sources.spec import SourceSpec

if TYPE_CHECKING:
    from attn_cli.analysis.effects import Ablation
    from attn_cli.sources.blocks import BlockPlan


class CheckpointSource(Batches):
    """A trained checkpoint (``--model``): its tokenizer, then every layer up to the
    last selected one, computed by ``attn_cli.sources.checkpoint``."""

    def __init__(self, spec: SourceSpec, found: Found | None = None) -> None:
        from attn_cli.sources.checkpoint import open_checkpoint

        assert spec.model is not None
        self.spec = spec
        self.notes: list[str] = []
        self.checkpoint = open_checkpoint(spec.model, revision=spec.revision, dtype=spec.dtype, device=spec.device, found=found)
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
            raise TooLargeError(f"{err}, or add --truncate to keep the first {self.info.max_positions}") from None
        tokens = check_length(tokens, spec.token_limit(self.info.max_positions))
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
        if prompt.truncated is not None:
            raise TooLargeError(
                f"--truncate cut the prompt to the model's {len(prompt)} positions, which leaves no room for --generate {n}: "
                f"shorten the text"
            )
        check_room(self.spec, info, f"the prompt's {len(prompt)} tokens", len(prompt), n)
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

    def ablate(self, trace: Trace, method: str) -> Ablation:
        """``heads --ablate``: each head's change in the text's next-token loss (``Checkpoint.ablate``)."""
        return self.checkpoint.ablate(trace.tokens, method)

    def probe_pool(self) -> tuple[tuple[int, ...], Sequence[int]]:
        tokenizer = self.checkpoint.tokenizer
        return tokenizer.leading_special_ids(), tokenizer.ordinary_ids()

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace:
        leading = self.checkpoint.tokenizer.leading_special_ids()
        special = tuple(i < len(leading) and tid == leading[i] for i, tid in enumerate(ids))
        tokens = self.checkpoint.tokenizer.tokens_from_ids(tuple(ids), special)
        return self._trace(PROBE_TEXT, tokens, selection, None)

    def _trace(self, text: str, tokens: Tokens, selection: Selection | None, pair: str | None) -> Trace:
        if selection is None:
            selection = Selection(tuple(range(self.n_layers)), tuple(range(self.n_heads)))
        queries = resolve_queries(selection.queries, tokens.texts, tokens.labels) if selection.queries else ()
        combined = selection.rollout or selection.flow  # every layer's weights folded in as they pass
        if selection.flow:
            check_size(len(tokens), selection.last_layer + 1)
        parts = self.checkpoint.estimate_bytes(
            len(tokens), selection.layers, selection.keep, norms=selection.norms, rollout=combined,
            predict=bool(selection.predict),
        )  # fmt: skip
        culprits = _checkpoint_culprits(len(tokens), selection, self.info)
        blocks, omitted = None, None
        attributing = Attributing(self.checkpoint, tokens, selection) if selection.maps else None
        if attributing is not None:  # value zeroing, ALTI, attention x gradient: their maps and their work
            parts["attributions"] = attributing.bytes()
            culprits["attributions"] = (f"the attribution maps of {len(tokens)} tokens through {selection.last_layer + 1} layers", "use a shorter text")
        omit = selection.tables == "omit" or selection.sink is not None or (selection.tables == "fit" and not fits_at_hand(parts, self.spec.device))
        if omit and not (combined or selection.maps):
            # without tables there are no norms (heads' norm_special_mass is None then); run asks for tables with --norms
            blocks, omitted, parts = self._blocked(tokens, selection, queries, parts)
            fewer = "keep fewer layers with --layer" if len(selection.layers) > 1 else "choose fewer --query rows" if queries else "use a shorter text"
            culprits["tables"] = (f"the statistics and {len(queries)} chosen rows of {len(tokens)} tokens", fewer)
        check_budget(parts, culprits)
        check_device_budget(parts, culprits, self.spec.device)
        # Threads follow the size of one layer's operations, not the whole model's:
        # a sentence through 12 small layers is still small work for each matmul.
        info = self.info
        per_layer = attention_flops(len(tokens), info.d_model, info.heads, info.head_dim, info.value_dim) + 16 * len(tokens) * info.d_model**2
        n_threads = threads.threads_for(per_layer)
        rollout = RolloutAccumulator(keep=selection.flow) if combined else None
        predictions, norms = None, selection.norms and blocks is None
        visit = attributing.visit if attributing is not None else None
        with using_threads(n_threads):
            if attributing is not None:
                attributing.before()
            if selection.predict:
                layers, predictions = self.checkpoint.predict(
                    tokens, selection.layers, selection.predict, selection.keep, norms=norms, rollout=rollout, blocks=blocks, visit=visit
                )  # fmt: skip
            else:
                layers = self.checkpoint.trace(tokens, selection.layers, selection.keep, norms=norms, rollout=rollout, blocks=blocks, visit=visit)
        layers, through = attributing.after(layers) if attributing is not None else (layers, {})
        info, layers = with_threads(self.info, layers, n_threads)
        return Trace(
            text, tokens, info, layers, chosen_heads=selection.heads, pair=pair, rollout=rollout.result() if selection.rollout and rollout else None,
            flow=attention_flow(rollout.mixed) if selection.flow and rollout and rollout.mixed else None,
            predictions=predictions, queries=queries, row_scores=selection.row_scores, tables_omitted=omitted, maps=through,
            explained=attributing.target if attributing is not None else None,
        )  # fmt: skip

    def _blocked(
        self, tokens: Tokens, selection: Selection, queries: tuple[int, ...], whole: dict[str, int]
    ) -> tuple[BlockPlan, str, dict[str, int]]:
        """A run whose tables do not fit (``whole``: its estimate with them): its plan of blocks, the
        sentence that says so, and its memory estimate."""
        from attn_cli.runtime import budget
        from attn_cli.sources.blocks import BlockPlan

        info, n_tokens = self.info, len(tokens)
        block_bytes = block_bytes_for(self.spec.device)
        rows, group = self.checkpoint.block_shape(n_tokens, block_bytes)
        every_head = tuple(selection.heads) == tuple(range(info.heads))
        special = tuple(tokens.special) if tokens.special and any(tokens.special) else None
        plan = BlockPlan(
            rows=rows, heads_at_once=group, queries=queries, scores=selection.row_scores, heads=None if every_head else tuple(selection.heads), special=special, sink=selection.sink,
            pool=selection.pool,
        )  # fmt: skip
        parts = self.checkpoint.estimate_blocked_bytes(
            n_tokens, selection.layers, block_bytes=block_bytes, rows=len(queries), predict=bool(selection.predict)
        )  # fmt: skip
        kept = len(selection.layers)
        rows_kept = f" and the {len(queries)} --query row{'s' if len(queries) != 1 else ''}" if queries else ""
        if selection.sink is not None:
            return plan, f"--tables: the tables went to their file; kept here each head's statistics{rows_kept}", parts
        if selection.tables == "omit":
            return plan, f"--no-tables: kept each head's statistics{rows_kept}, computed in blocks", parts
        omitted = (
            f"the T x T tables of {n_tokens} tokens x {kept} layer{'s' if kept != 1 else ''} x {info.heads} heads would take "
            f"{budget.gib(whole['tables'])}, more than the memory at hand: kept each head's statistics{rows_kept}; "
            + _tables_advice(_layers_that_fit(whole, kept, self.spec.device), bool(queries))
        )
        return plan, omitted, parts


def _layers_that_fit(whole: dict[str, int], kept: int, device: str) -> int:
    """How many of the ``kept`` layers' tables would fit the memory at hand (``whole``: the estimate of all of them)."""
    return next((n for n in range(kept - 1, 0, -1) if fits_at_hand({**whole, "tables": whole["tables"] * n // kept}, device)), 0)


def _tables_advice(fitting: int, queries: bool) -> str:
    """What would get a run's tables that did not fit: fewer layers where ``fitting`` layers' would fit,
    rows of --query where it chose none, and the tables written to disk, which any length may."""
    ways = [f"keep at most {fitting} layer{'s' if fitting != 1 else ''} (--layer) for the tables"] if fitting else []
    ways += [] if queries else ["choose rows to keep whole with --query"]
    ways.append("write the chosen heads' tables to disk with run --tables FILE.safetensors")
    return ways[0] if len(ways) == 1 else ", ".join(ways[:-1]) + ("," if len(ways) > 2 else "") + " or " + ways[-1]


def fits_at_hand(parts: dict[str, int], device: str) -> bool:
    """Whether ``parts`` fit the memory at hand, and on a GPU its part there."""
    from attn_cli.runtime import budget

    on_device = budget.device_available_bytes(device)
    gpu = {name: parts[name] for name in ("weights", "activations")}
    return budget.fits(parts) and (on_device is None or budget.fits(gpu, on_device))


# the most one block of a layer's weights, and what its consumers derive, may take: at 32,768 keys
# 564 rows of one head a block (blocks.block_rows_for), whose products ran 1-layer Qwen3-0.6B-shaped
# runs in 61-64 s against 66-70 s at 256 MiB (282 rows) and 71-73 s at 768 (847 rows), an AMD EPYC,
# 2026-11-28; a block's weights and scores take 150 MB of it there (the rest is each row's bound)
BLOCK_BYTES = 512 * 2**20


def block_bytes_for(device: str) -> int:
    """One block's bytes on ``device``: ``BLOCK_BYTES``, or an eighth of the memory at hand where that is less."""
    from attn_cli.runtime import budget

    return min(BLOCK_BYTES, (budget.device_available_bytes(device) or budget.available_bytes() or BLOCK_BYTES) // 8)


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


def check_room(spec: SourceSpec, info: ModelInfo, what: str, before: int, n: int) -> None:
    """--generate N after ``before`` tokens (a decoder's prompt, an encoder-decoder's start token)
    must fit the model's positions and --max-tokens: TooLargeError (exit 4) before anything is
    generated otherwise, however large N is."""
    max_tokens = spec.token_limit(info.max_positions)
    most = min(max_tokens, info.max_positions or max_tokens)
    if before + n > most:
        which = f"the model's {most} positions" if most == info.max_positions else "--max-tokens"
        raise TooLargeError(f"{what} and --generate {n} make {before + n}, over {which}; generate fewer")
