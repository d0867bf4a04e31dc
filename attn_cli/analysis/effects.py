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


def next_token_losses(logits_of: Callable[[torch.Tensor], torch.Tensor], ids: Sequence[int], texts: int, vocab: int) -> list[float]:
    """Each of ``texts`` texts' mean next-token cross-entropy (nats): in each, position i
    predicts token i + 1 of ``ids`` (the same ids in every text; an ablation changes the
    states, not the tokens), for i in 0 .. T-2. ``logits_of(rows)`` -> (R, V) logits of
    flat rows ``b * T + i``; a block of rows at a time (texts together: one bigger
    matmul), log-softmax in float32 (torch's logsumexp took 5x as long on CPU), each sum in
    float64."""
    import torch

    n = len(ids)
    if n < 2:
        return [0.0] * texts
    rows = torch.tensor([b * n + i for b in range(texts) for i in range(n - 1)], dtype=torch.long)  # (B*(T-1),)
    targets = torch.tensor(list(ids[1:]) * texts, dtype=torch.long)  # (B*(T-1),)
    sums = torch.zeros(texts, dtype=torch.float64)  # (B,)
    step = block_rows(vocab)
    for start in range(0, len(rows), step):
        chosen = rows[start : start + step]  # (R,)
        log_probs = torch.log_softmax(logits_of(chosen).float(), dim=-1)  # (R, V)
        picked = log_probs.gather(-1, targets[start : start + step, None])[:, 0]  # (R,) log p(target)
        sums.index_add_(0, chosen // n, picked.double())  # each row to its text
    return (-sums / (n - 1)).tolist()


@dataclasses.dataclass(frozen=True)
class Ablation:
    """``heads --ablate``: the change in mean next-token loss when each head is ablated."""

    method: str  # "zero" or "mean"
    clean_loss: float  # nats
    deltas: tuple[tuple[float, ...], ...]  # (L, H) ablated loss - clean loss

    def delta(self, layer: int, head: int) -> float:
        return self.deltas[layer][head]
