"""The model's side of the deletion test (``analysis.faithfulness``): the target's probability after a text's
tokens are deleted, replaced by the tokenizer's mask token (else its pad, else its unknown token;
``--delete-with mask|pad|unk|remove``, remove: taken out). Each variant runs the whole model once, no grad.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.analysis.faithfulness import Curve
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.records.results import Target
    from attn_cli.records.tokens import Tokens
    from attn_cli.sources.checkpoint.model import Checkpoint

DELETE_WITH = ("mask", "pad", "unk", "remove")


class Deletions:
    """One text's deletions through ``checkpoint``, the ``target`` (``attention_gradient``'s) measured."""

    def __init__(self, checkpoint: Checkpoint, tokens: Tokens, target: Target, how: str) -> None:
        self.checkpoint, self.tokens, self.target, self.how = checkpoint, tokens, target, how
        self.replacement = replacement_id(checkpoint, how)
        self.special = checkpoint.tokenizer.special_ids()
        self.mask = checkpoint.tokenizer.role_id("mask")
        self.head = None if checkpoint.classifier is not None else checkpoint._family.head(checkpoint._weights)
        self.base = self.probability(tokens.ids)

    def candidates(self) -> list[int]:
        """The positions that may be deleted: the tokens that are not special (the target's position neither)."""
        return [i for i, special in enumerate(self.tokens.special) if not special and i != self.target.position]

    def curve(self, method: str, order: Sequence[int], sizes: Sequence[int]) -> Curve:
        """The drops p(target | text) - p(target | text without order[:k]) for each k of ``sizes``."""
        return Curve(method, tuple(self.base - self.probability(self.deleted(order[:k])) for k in sizes))

    def deleted(self, positions: Sequence[int]) -> tuple[int, ...]:
        gone = set(positions)
        if self.replacement is None:
            return tuple(tid for i, tid in enumerate(self.tokens.ids) if i not in gone)
        return tuple(self.replacement if i in gone else tid for i, tid in enumerate(self.tokens.ids))

    def probability(self, ids: Sequence[int]) -> float:
        """The target's probability (a regression head's value: its logit) with the text's tokens ``ids``."""
        import torch

        from attn_cli.sources.checkpoint.families import forward
        from attn_cli.sources.checkpoint.families.classifier import classifier_logits, label_scores

        ckpt, target = self.checkpoint, self.target
        family, weights, c = ckpt._family, ckpt._weights, ckpt.classifier
        tokens = ckpt.tokenizer.tokens_from_ids(tuple(ids), tuple(tid in self.special for tid in ids))
        hidden = forward(family, weights, tokens, (), weights.device, "weights", whole=True).hidden
        assert hidden is not None
        with torch.inference_mode():
            if c is not None:
                logits = classifier_logits(family, weights, c, hidden, tokens.ids)  # (N,)
                scores = label_scores(c, logits)
                return float((scores if scores is not None else logits)[target.index])
            position = len(ids) - 1 if target.kind == "next" else (list(ids).index(self.mask) if self.how == "remove" else target.position)
            assert position is not None
            row = family.final_norm(weights, hidden[position : position + 1])  # (1, D)
            assert self.head is not None
            return float(torch.softmax(family.logits(weights, self.head, row)[0].float(), dim=-1)[target.index])


def replacement_id(checkpoint: Checkpoint, how: str) -> int | None:
    """--delete-with's token id: "mask" the mask token, else the pad, else the unknown one; None for "remove"."""
    if how == "remove":
        return None
    tokenizer = checkpoint.tokenizer
    roles = ("mask", "pad", "unk") if how == "mask" else (how,)
    for role in roles:
        found = tokenizer.role_id(role)
        if found is not None:
            return found
    raise UsageError(f"--delete-with {how}: this tokenizer has no {' or '.join(roles)} token; use --delete-with remove")
