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
        last = self.selection.last_layer
        through: dict[str, Rollout] = {}
        if self.visit is not None:
            layers, through = self.checkpoint.attached(self.visit, layers, self.selection.maps, last)
        if self.gradients:
            layers = with_gradients(layers, self.gradients, through, last, causal=not self.checkpoint._family.encoder)
        return layers, through


def encoder_maps(
    pair: Any, source: Tokens, decoder: Tokens, selection: Selection, stack: str | None, kept: Sequence[Any]
) -> tuple[list[Any], dict[str, Rollout], Rollout | None, Target | None]:  # fmt: skip
    """An encoder-decoder's maps over its encoder's stack: value zeroing's and ALTI's (the encoder run again alone,
    ``PairCheckpoint.encoder_checkpoint``, with the maps' visitor), attention x gradient's (the decoder's next
    token after its inputs explained, an autograd run of both stacks) and the flow: the ``kept`` encoder layers
    with their maps, the maps through the last of them, the flow, the gradient's target. Another ``stack``:
    UsageError."""
    from attn_cli.analysis.flow import check_size, flow_of
    from attn_cli.runtime.errors import UsageError
    from attn_cli.sources.base import check_budget
    from attn_cli.sources.checkpoint.families.attribution import attributions_bytes

    if stack not in (None, "encoder"):
        named = "flow" if selection.flow else selection.maps[0].replace("_", "-")
        raise UsageError(f"--what {named} reads an encoder-decoder's encoder (its source): give --stack encoder, or no --stack")
    encoder = pair.encoder_checkpoint()
    layers = [layer.layer for layer in kept]
    last = max(layers)
    every = list(range(last + 1))
    work = attributions_bytes(encoder._family, selection.maps, len(source), last + 1)
    check_budget({"attributions": work}, {"attributions": (f"the attribution maps of {len(source)} source tokens", "use a shorter text")})
    visited = [name for name in selection.maps if name != GRADIENT]
    made, through, flow, target = list(kept), {}, None, None
    if visited or selection.flow:
        if selection.flow:
            check_size(len(source), last + 1)
        visitor = encoder.attributions(visited, layers) if visited else None
        traced = encoder.trace(source, every, "weights", visit=visitor)
        flow = flow_of(traced) if selection.flow else None
        if visitor is not None:
            made, through = encoder.attached(visitor, made, visited, last)
    if GRADIENT in selection.maps:
        gradients, target = pair.attention_gradient(source, decoder, selection.target_token)
        made = with_gradients(made, gradients, through, last, causal=False)
    return made, through, flow, target


def with_gradients(layers: Sequence[Any], gradients: Sequence[Any], through: dict[str, Rollout], last: int, *, causal: bool) -> list[Any]:
    """The kept ``layers`` with their attention x gradient maps, and (into ``through``) the relevance through ``last``."""
    from attn_cli.sources.checkpoint.families.gradient import relevance

    through[GRADIENT] = relevance(gradients[: last + 1], causal=causal)
    return [dataclasses.replace(layer, maps={**layer.maps, GRADIENT: gradients[layer.layer]}) for layer in layers]
