"""What attention does: the model's predictions at every position (``--predict``) and the
next-token loss that ablating a head changes (``heads --ablate``).

The forward runs on after the last kept layer (every layer, the final norm, the head;
``checkpoint.families.loop.forward``); this module turns the last hidden states into
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
# float32 logits of one block of rows for the loss, worked on in place and reused from call
# to call: bigger blocks make the head's matmul faster (GPT-2's 50,257-row head: 210 GFLOP/s
# at 166 rows, 250 at 333, 295 at 756: a layer's 12 ablations at T = 64 in one block)
LOSS_BLOCK_BYTES = 256 * 2**20


def block_rows(vocab: int) -> int:
    """Positions whose logits are made at once: ``LOGIT_BLOCK_BYTES`` of (rows, V) float32, twice."""
    return max(1, LOGIT_BLOCK_BYTES // (2 * 4 * max(vocab, 1)))


def loss_rows(vocab: int) -> int:
    """Rows whose logits ``next_token_losses`` makes at once: ``LOSS_BLOCK_BYTES`` of (rows, V) float32."""
    return max(1, LOSS_BLOCK_BYTES // (4 * max(vocab, 1)))


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


def next_token_losses(
    logits_of: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    ids: Sequence[int],
    texts: int,
    vocab: int,
    scratch: list[torch.Tensor] | None = None,
) -> list[float]:
    """Each of ``texts`` texts' mean next-token cross-entropy (nats): in each, position i
    predicts token i + 1 of ``ids`` (the same ids in every text; an ablation changes the
    states, not the tokens), for i in 0 .. T-2. ``logits_of(rows, out)`` -> (R, V) logits of
    flat rows ``b * T + i``, written into ``out`` (R, V) when it is not None; blocks of at
    most ``loss_rows`` rows, of equal size (texts together: one bigger matmul), every block
    into one tensor, kept in ``scratch`` (a list holding it, or empty) for the next call with
    the same list. The log-softmax of the target, logit - max - log(sum(exp(logits - max))), is
    worked out in float32 in that tensor, in place (``torch.log_softmax`` and
    ``torch.logsumexp`` each allocate a fresh (R, V) block, whose page faults were a fifth of
    an ablation's time in ``bench/ablation.py``), each sum in float64."""
    if len(ids) < 2:
        return [0.0] * texts
    return token_losses(logits_of, ids[1:], len(ids), texts, vocab, scratch)


def batch_losses(
    logits: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor], targets: Sequence[int], vocab: int
) -> Callable[[torch.Tensor], list[float]]:
    """An ablation's ``losses``: a batch of the last layer's normed outputs (B, N, D) -> each one's
    mean cross-entropy of ``targets`` (position i predicting ``targets[i]``; none: 0), with
    ``logits(hidden_rows, out)`` -> (R, V), one block of logits kept from call to call."""
    scratch: list[torch.Tensor] = []

    def losses(normed: torch.Tensor) -> list[float]:
        if not targets:
            return [0.0] * normed.shape[0]
        flat = normed.reshape(-1, normed.shape[-1])  # (B*N, D)
        return token_losses(lambda rows, out: logits(flat[rows], out), targets, normed.shape[-2], normed.shape[0], vocab, scratch)

    return losses


def token_losses(
    logits_of: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    targets_of_rows: Sequence[int],
    n: int,
    texts: int,
    vocab: int,
    scratch: list[torch.Tensor] | None = None,
) -> list[float]:
    """Each text's mean cross-entropy (nats) of ``targets_of_rows``: position i of each text's
    ``n`` predicts ``targets_of_rows[i]``, for i below their count (a decoder's next tokens, from
    ``next_token_losses``; an encoder-decoder's labels, one per decoder position, as
    transformers' seq2seq loss). ``logits_of``, ``scratch``: as ``next_token_losses``."""
    import torch

    p = len(targets_of_rows)
    rows = torch.tensor([b * n + i for b in range(texts) for i in range(p)], dtype=torch.long)  # (B*P,)
    targets = torch.tensor(list(targets_of_rows) * texts, dtype=torch.long)  # (B*P,)
    sums = torch.zeros(texts, dtype=torch.float64)  # (B,)
    step = -(-len(rows) // -(-len(rows) // loss_rows(vocab)))  # the fewest blocks, of equal size
    scratch = [] if scratch is None else scratch
    for start in range(0, len(rows), step):
        chosen = rows[start : start + step]  # (R,)
        fits = scratch and scratch[0].shape[0] >= len(chosen)
        logits = logits_of(chosen, scratch[0][: len(chosen)] if fits else None)  # (R, V) the model's dtype
        if not fits:
            scratch[:] = [logits]
        block = logits.float()  # (R, V) itself when float32: overwritten below
        picked = block.gather(-1, targets[start : start + step, None].to(block.device))[:, 0]  # (R,) the target's logit
        top = block.amax(dim=-1)  # (R,)
        total = block.sub_(top[:, None]).exp_().sum(dim=-1)  # (R,) sum of exp(logit - max)
        sums.index_add_(0, chosen // n, (picked - top - total.log()).double().cpu())  # log p(target), each row to its text
    return (-sums / p).tolist()


@dataclasses.dataclass(frozen=True)
class Ablation:
    """``heads --ablate``: the change in mean next-token loss when each head is ablated."""

    method: str  # "zero" or "mean"
    clean_loss: float  # nats
    deltas: tuple[tuple[float, ...], ...]  # (L, H) ablated loss - clean loss

    def delta(self, layer: int, head: int) -> float:
        return self.deltas[layer][head]
