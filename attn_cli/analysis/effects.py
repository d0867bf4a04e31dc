"""What attention does: the model's predictions at every position (``--predict``) and the
next-token loss that ablating a head changes (``heads --ablate``).

The forward runs on after the last kept layer (every layer, the final norm, the head;
``checkpoint.families.base.forward``); this module turns the last hidden states into
each position's K most likely next tokens (decoders) or fillers (masked LMs): the
softmax of that position's logits in float32, most likely first; or into the mean
next-token cross-entropy. Logits are made a block of positions at a time, so what is
held is (block, V), never (T, V).

Shapes: T tokens, D d_model, V the vocabulary, K the predictions kept per position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

LOGIT_BLOCK_BYTES = 64 * 2**20  # float32 logits of one block of positions (and their softmax)


@dataclasses.dataclass(frozen=True)
class Predictions:
    """The top ``k`` of every position."""

    ids: torch.Tensor  # (T, K) long: token ids, most likely first
    probs: torch.Tensor  # (T, K) float32: softmax of the position's logits
    logits: torch.Tensor  # (T, K) float32
    texts: tuple[tuple[str, ...], ...]  # (T, K) each id's text, as the tokenizer decodes it
    labels: tuple[tuple[str, ...], ...]  # (T, K) the same, drawn printable (tables, pictures)

    @property
    def k(self) -> int:
        return self.ids.shape[-1]


def block_rows(vocab: int) -> int:
    """Positions whose logits are made at once: ``LOGIT_BLOCK_BYTES`` of (rows, V) float32, twice."""
    return max(1, LOGIT_BLOCK_BYTES // (2 * 4 * max(vocab, 1)))


def top_k(logits_of: Callable[[slice], torch.Tensor], n: int, k: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, probs, logits), each (T, K), from ``logits_of(rows)`` -> (R, V) logits of
    positions ``rows``, a block of rows at a time; the softmax in float32."""
    import torch

    k = min(k, vocab)
    ids, probs, logits = [], [], []
    step = block_rows(vocab)
    for start in range(0, n, step):
        block = logits_of(slice(start, start + step)).float()  # (R, V)
        top = torch.topk(block, k, dim=-1)  # (R, K) the largest logits, most likely first
        chosen = torch.softmax(block, dim=-1).gather(-1, top.indices)  # (R, V) -> (R, K)
        ids.append(top.indices)
        probs.append(chosen)
        logits.append(top.values)
    return torch.cat(ids), torch.cat(probs), torch.cat(logits)


def next_token_loss(logits_of: Callable[[slice], torch.Tensor], ids: Sequence[int], vocab: int) -> float:
    """Mean next-token cross-entropy (nats) over the text: position i predicts token i + 1,
    for i in 0 .. T-2, from ``logits_of(rows)`` -> (R, V), a block of positions at a time;
    log-softmax in float32, the mean in float64."""
    import torch

    n = len(ids) - 1
    if n < 1:
        return 0.0
    targets = torch.tensor(list(ids[1:]), dtype=torch.long)  # (T-1,)
    total = 0.0
    step = block_rows(vocab)
    for start in range(0, n, step):
        rows = slice(start, min(start + step, n))
        log_probs = torch.log_softmax(logits_of(rows).float(), dim=-1)  # (R, V)
        total -= float(log_probs.gather(-1, targets[rows, None]).double().sum())  # (R, 1)
    return total / n


@dataclasses.dataclass(frozen=True)
class Ablation:
    """``heads --ablate``: the change in mean next-token loss when each head is ablated."""

    method: str  # "zero" or "mean"
    clean_loss: float  # nats
    deltas: tuple[tuple[float, ...], ...]  # (L, H) ablated loss - clean loss

    def delta(self, layer: int, head: int) -> float:
        return self.deltas[layer][head]
