"""What attention x gradient explains (``families.gradient``): a checkpoint's target logit, from the last
layer's output. A classifier's label (``--target-label NAME|INDEX``, default the predicted one) at the
position its head reads; a decoder's next token after the text (``--target-token TEXT``, default the
predicted one); a masked LM's filler of the text's first mask token. A checkpoint with no head for it (a
bare encoder such as all-MiniLM-L6-v2) is ModelUnavailable (exit 3); a masked LM's text without a mask,
a target token of several pieces, a label the model does not have: UsageError (exit 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attn_cli.records.results import Target
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attn_cli.records.tokens import Tokens
    from attn_cli.sources.checkpoint.families.base import Family, Weights
    from attn_cli.sources.checkpoint.families.classifier import Classifier
    from attn_cli.sources.checkpoint.tokenizer import CheckpointTokenizer


class TargetScore:
    """Called with the last layer's output (T, D): the target's logit (a scalar tensor, in autograd's graph);
    ``target`` then says which output it was."""

    def __init__(
        self, model: tuple[Family, Weights, CheckpointTokenizer, Classifier | None], tokens: Tokens, label: str | None = None,
        token: str | None = None,
    ) -> None:  # fmt: skip
        self.family, self.weights, self.tokenizer, self.classifier = model
        self.tokens = tokens
        self.head = None
        self.logit = 0.0
        if self.classifier is not None:
            if token is not None:
                raise UsageError("--target-token names a token; a classifier's target is one of its labels: use --target-label")
            from attn_cli.sources.checkpoint.families.classifier import pooled_position

            self.kind, self.position = "label", pooled_position(self.classifier, tokens.ids)
            self.index = None if label is None else label_index(self.classifier.labels, label)
            return
        if label is not None:
            raise UsageError("--target-label names a classifier's label; this model predicts tokens: use --target-token")
        self.head = self.family.head(self.weights)  # no head: ModelUnavailable (exit 3), before the run
        self.kind = "mask" if self.family.encoder else "next"
        self.position = mask_position(self.tokenizer, tokens) if self.kind == "mask" else len(tokens) - 1
        self.index = None if token is None else token_id(self.tokenizer, token)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        family, weights = self.family, self.weights
        if self.head is None:  # a classifier
            from attn_cli.sources.checkpoint.families.classifier import classifier_logits

            assert self.classifier is not None
            logits = classifier_logits(family, weights, self.classifier, hidden, self.tokens.ids)  # (N,)
        else:
            assert self.position is not None
            row = family.final_norm(weights, hidden[self.position : self.position + 1])  # (1, D)
            logits = family.logits(weights, self.head, row)[0]  # (V,)
        self.predicted = self.index is None
        if self.index is None:
            self.index = int(logits.detach().argmax())
        self.logit = float(logits[self.index].detach())
        return logits[self.index]

    @property
    def target(self) -> Target:
        assert self.index is not None, "the score is called first"
        c = self.classifier
        label = c.labels[self.index] if c is not None else self.tokenizer.id_texts([self.index])[0]
        return Target(self.kind, self.position, self.index, label, self.logit, self.predicted)


def label_index(labels: tuple[str, ...], given: str) -> int:
    """--target-label's label: a name of config.json's id2label, or an index."""
    if given in labels:
        return labels.index(given)
    if given.strip().isdigit() and int(given) < len(labels):
        return int(given)
    raise UsageError(f"--target-label {given}: this classifier's labels are {', '.join(f'{i} {name}' for i, name in enumerate(labels))}")


def mask_position(tokenizer: CheckpointTokenizer, tokens: Tokens) -> int:
    """A masked LM's target position: the text's first mask token."""
    mask = tokenizer.role_id("mask")
    if mask is None or mask not in tokens.ids:
        shown = tokenizer.id_texts([mask])[0] if mask is not None else "its mask token"
        raise UsageError(f"a masked language model's gradient explains the filler of a mask: put {shown} in the text")
    return tokens.ids.index(mask)


def token_id(tokenizer: CheckpointTokenizer, text: str) -> int:
    """--target-token's id: a text the tokenizer makes one token of."""
    if not hasattr(tokenizer, "pieces"):  # Marian's two sentencepiece models
        raise UsageError("--target-token is not available with this tokenizer (Marian's); drop it to explain the predicted token")
    pieces = tokenizer.pieces(text)
    if len(pieces) != 1:
        named = " + ".join(repr(piece) for _, piece in pieces) or "no token"
        raise UsageError(f"--target-token {text!r} is {named}: give one token (a leading space is part of a token in many vocabularies)")
    return pieces[0][0]
