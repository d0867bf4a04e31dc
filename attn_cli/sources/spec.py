"""Which source of attention a command runs, decided from the options alone.

``SourceSpec`` is what the shared options build: the seeded toy model's
``Config``, or a ``--model`` checkpoint with its revision, pair and truncation;
and the ``--layer``/``--head`` selection. No torch here: bad options fail before
anything heavy loads; ``attn_cli.pipeline.open_source`` opens the source it names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.runtime.errors import UsageError
from attn_cli.sources.toy.config import Config
from attn_cli.records.hiding import HideSpec
from attn_cli.records.selection import IndexSpec, Keep, Selection, Tables

if TYPE_CHECKING:
    from attn_cli.sources.base import Source

TABLE_HEADS = 4  # a checkpoint's tables and pictures show this many heads unless --head says otherwise


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    config: Config  # the toy model's options (and --max-tokens, --seed for every source)
    model: str | None = None  # --model PATH|ORG/NAME; None: the seeded toy model
    revision: str | None = None
    pair: str | None = None  # a second segment, token type 1 (encoders)
    truncate: bool = False  # cut a text longer than the model's positions instead of refusing it
    dtype: str = "float32"  # what a checkpoint computes in: float32, bfloat16, float16
    device: str = "cpu"  # where: cpu, cuda
    layers: IndexSpec = IndexSpec(None, "--layer")
    heads: IndexSpec = IndexSpec(None, "--head")
    hide: HideSpec | None = None  # --hide-tokens: left out of tables and pictures, rows renormalized
    saved: str | None = None  # --from FILE: re-draw the trace a schema-2 JSON holds; no model runs
    target: str | None = None  # --target: an encoder-decoder's decoder text (teacher-forced)
    stack: str | None = None  # --stack: the stack tables show (encoder, decoder, cross); None: cross
    max_tokens_given: bool = False  # --max-tokens was given; else a trained model's limit is its positions

    def token_limit(self, positions: int | None) -> int:
        """The most tokens a text may have: --max-tokens as given, else for a trained model its
        ``positions`` (max_position_embeddings; --max-tokens' value where it has none), for the
        toy model --max-tokens' default."""
        if self.max_tokens_given or positions is None:
            return self.config.max_tokens
        return positions

    @property
    def trained(self) -> bool:
        return self.model is not None

    def select(
        self, source: Source, *, everything: bool, keep: Keep = "all", rollout: bool = False, norms: bool = False,
        predict: int = 0, generate: int = 0, queries: tuple[str, ...] = (), tables: Tables = "keep",
        pool: tuple[int, str] | None = None, row_scores: bool = False, flow: bool = False, maps: tuple[str, ...] = (),
        target_label: str | None = None, target_token: str | None = None,
    ) -> Selection:  # fmt: skip
        """The layers and heads to run and show. ``everything`` (JSON, CSV): all of them
        unless --layer/--head say otherwise; for people (tables, pictures) a checkpoint
        shows its last layer and first ``TABLE_HEADS`` heads by default. ``keep``:
        "weights" for a command that reads nothing but the weights (a kept layer then
        holds no per-head vectors, and the memory budget counts none). ``rollout``, ``flow``, ``norms``, ``maps`` (with
        attention x gradient's ``target_label`` or ``target_token``),
        ``predict``, ``generate``: what to compute beside the weights; ``queries``, ``tables``: the
        rows to keep whole (with their raw scores: ``row_scores``), and whether the tables may give
        way to statistics (and a pooled map, ``pool``) (``Selection``)."""
        n_layers, n_heads = source.n_layers, source.n_heads
        few = not everything and (self.trained or bool(getattr(source, "trained", False)))
        # a saved trace offers the layers and heads it holds (--from FILE); a model, all of them
        have_layers = getattr(source, "kept_layers", None) or tuple(range(n_layers))
        have_heads = getattr(source, "kept_heads", None) or tuple(range(n_heads))
        layers = self.layers.resolve(n_layers, "layer", default=have_layers[-1:] if few else have_layers)
        heads = self.heads.resolve(n_heads, "head", default=have_heads[:TABLE_HEADS] if few else have_heads)
        return Selection(
            layers, heads, keep, rollout=rollout, flow=flow, norms=norms, predict=predict, generate=generate, everything=everything,
            queries=queries, tables=tables, pool=pool, row_scores=row_scores and bool(queries), maps=maps,
            target_label=target_label, target_token=target_token,
        )  # fmt: skip

    def one(self, source: Source, *, layer_default: int = -1) -> tuple[int, int]:
        """The single layer and head a walk-through follows (default: the last layer, head 0)."""
        n_layers, n_heads = source.n_layers, source.n_heads
        layers = self.layers.resolve(n_layers, "layer", default=[layer_default % n_layers])
        heads = self.heads.resolve(n_heads, "head", default=[0])
        for chosen, spec in ((layers, self.layers), (heads, self.heads)):
            if len(chosen) != 1:
                from attn_cli.runtime.errors import UsageError

                raise UsageError(f"{spec.flag} {spec.text}: this command follows one {spec.flag[2:]}; give a single index")
        return layers[0], heads[0]


def check_source_options(toy: Sequence[str], trained: Sequence[str], model: str | None, *, model_named: str, trained_fix: str) -> None:
    """The toy's options with a checkpoint, or a checkpoint's without one: the command line's
    and the Python API's one check (``model_named``: how the caller names the model it was
    given, ``--model M`` or ``model=M``; ``trained_fix``: what the second error adds)."""
    if model is not None and toy:
        raise UsageError(
            f"{', '.join(toy)} {'is an option' if len(toy) == 1 else 'are options'} of the seeded toy model; "
            f"{model_named} brings its own tokenizer, sizes and weights: drop {'it' if len(toy) == 1 else 'them'}"
        )
    if model is None and trained:
        raise UsageError(f"{', '.join(trained)} only make{'s' if len(trained) == 1 else ''} sense with {trained_fix}")
