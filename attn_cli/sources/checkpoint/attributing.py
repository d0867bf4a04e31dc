"""A checkpoint run's attribution maps (``Selection.maps``), around its forward: value zeroing's and ALTI's
from a visitor of the forward (``families.attribution``), attention x gradient's from an autograd run of
its own before it (``families.gradient``, the target from ``targets``), each kept layer's maps and the
maps through the layers attached after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.records.results import Rollout, Target

if TYPE_CHECKING:
    from attn_cli.records.selection import Selection
    from attn_cli.records.tokens import Tokens
    from attn_cli.sources.checkpoint.model import Checkpoint

GRADIENT = "attention_gradient"


class Attributing:
    """One text's attribution maps, as ``selection`` asks for them."""

    def __init__(self, checkpoint: Checkpoint, tokens: Tokens, selection: Selection) -> None:
        self.checkpoint, self.tokens, self.selection = checkpoint, tokens, selection
        visited = [name for name in selection.maps if name != GRADIENT]
        self.visit = checkpoint.attributions(visited, selection.layers) if visited else None
        self.gradients: list[Any] = []
        self.target: Target | None = None

    def bytes(self) -> int:
        """What the maps and their work hold beside the run (the autograd run's graph: every layer's
        tensors kept for the backward)."""
        from attn_cli.sources.checkpoint.families.attribution import attributions_bytes

        family, n, layers = self.checkpoint._family, len(self.tokens), self.selection.last_layer + 1
        total = attributions_bytes(family, self.selection.maps, n, layers)
        if GRADIENT in self.selection.maps:
            per_layer = 4 * (4 * family.heads * n * n + n * (12 * family.d_model + 4 * family.d_ffn))
            total += per_layer * family.layers + 4 * n * n * layers
        return total

    def before(self) -> None:
        """Attention x gradient's autograd run, when asked for (the no-grad forward comes after)."""
        if GRADIENT in self.selection.maps:
            s = self.selection
            self.gradients, self.target = self.checkpoint.attention_gradient(self.tokens, s.target_label, s.target_token)

    def after(self, layers: list[Any]) -> tuple[list[Any], dict[str, Rollout]]:
        """The kept ``layers`` with their maps, and the maps through the last kept layer."""
        from attn_cli.sources.checkpoint.families.gradient import relevance

        last = self.selection.last_layer
        through: dict[str, Rollout] = {}
        if self.visit is not None:
            layers, through = self.checkpoint.attached(self.visit, layers, self.selection.maps, last)
        if self.gradients:
            layers = [dataclasses.replace(layer, maps={**layer.maps, GRADIENT: self.gradients[layer.layer]}) for layer in layers]
            through[GRADIENT] = relevance(self.gradients[: last + 1], causal=not self.checkpoint._family.encoder)
        return layers, through


def encoder_maps(pair: Any, source: Tokens, selection: Selection, stack: str | None, kept: Sequence[Any]) -> tuple[list[Any], dict[str, Rollout]]:
    """An encoder-decoder's attribution maps (value zeroing's, ALTI's), over its encoder's stack: the encoder run
    again alone (``PairCheckpoint.encoder_checkpoint``) with the maps' visitor, the ``kept`` encoder layers given
    their maps, and the maps through the last of them. Attention x gradient (an output of the decoder) and
    another ``stack``: UsageError."""
    from attn_cli.runtime.errors import UsageError
    from attn_cli.sources.base import check_budget

    named = selection.maps[0].replace("_", "-")
    if GRADIENT in selection.maps:
        raise UsageError("--what attention-gradient explains an output of a model of one stack; an encoder-decoder's is not computed yet")
    if stack not in (None, "encoder"):
        raise UsageError(f"--what {named} reads an encoder-decoder's encoder (its source): give --stack encoder, or no --stack")
    encoder = pair.encoder_checkpoint()
    layers = [layer.layer for layer in kept]
    from attn_cli.sources.checkpoint.families.attribution import attributions_bytes

    work = attributions_bytes(encoder._family, selection.maps, len(source), max(layers) + 1)
    check_budget({"attributions": work}, {"attributions": (f"the attribution maps of {len(source)} source tokens", "use a shorter text")})
    visitor = encoder.attributions(list(selection.maps), layers)
    encoder.trace(source, layers, "weights", visit=visitor)
    made, through = encoder.attached(visitor, list(kept), selection.maps, max(layers))
    return made, through
