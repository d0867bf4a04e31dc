"""Greedy decoding through the one layer loop: each step runs the whole stack over the ids so
far (no cache) and takes the argmax of the last position's logits, with no logits
processors, whatever generation_config.json says.

Shapes: T the ids so far, S an encoder's output rows, D d_model, V the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from attn_cli.records.tokens import Tokens
from attn_cli.sources.checkpoint.families.base import Family, Weights
from attn_cli.sources.checkpoint.families.loop import forward


class IdsToTokens(Protocol):
    def tokens_from_ids(self, ids: tuple[int, ...], special: tuple[bool, ...]) -> Tokens: ...


def greedy(
    family: Family, weights: Weights, tokenizer: IdsToTokens, ids: Sequence[int], n: int, eos_ids: frozenset[int],
    memory: torch.Tensor | None = None, device: torch.device | str = "cpu",
) -> tuple[int, ...]:  # fmt: skip
    """Up to ``n`` new ids after ``ids``, each the first of the last position's equal maxima,
    stopping after one of ``eos_ids``. ``memory`` (S, D): an encoder's output, which a
    decoder stack's cross-attention reads. ``device``: where the weights are read to."""
    head = family.head(weights)  # ModelUnavailable, naming what is missing, before anything runs
    so_far, made = list(ids), []
    with torch.inference_mode():
        for _ in range(n):
            tokens = tokenizer.tokens_from_ids(tuple(so_far), (False,) * len(so_far))
            done = forward(family, weights, tokens, (), device, "weights", whole=True, memory=memory)
            assert done.hidden is not None
            last = family.final_norm(weights, done.hidden[-1:])  # (1, D)
            chosen = int(family.logits(weights, head, last)[0].float().argmax())  # (1, V) -> the first of equal maxima
            so_far.append(chosen)
            made.append(chosen)
            if chosen in eos_ids:
                break
    return tuple(made)
