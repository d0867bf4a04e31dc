"""How many threads torch's CPU operations use.

The toy model always computes on one thread. A BLAS may sum a matrix product in
another order when it has more threads (MKL's AVX2 code path does, for products
as small as a sentence's: scores moved by up to 3e-4 between 1 and 2 threads),
and the toy promises the same bytes everywhere, and numbers that its emitted
script, which also sets one thread, reproduces exactly. Its work is a sentence's
few thousand multiply-adds, where a second thread costs more than it saves.

A checkpoint's layers run on a count chosen from the size of one layer's work:
on the small tensors of a sentence handing work to another thread costs more
than the work, and when the other cores are busy it costs far more
(bench/threads.py measures both), so small work runs on one thread and only
work big enough to pay for the hand-off gets the default count. One thread for
every text would slow a long text's run several-fold on several cores, so a
checkpoint's numbers are the same bytes for the same count (JSON's
``model.threads`` records it), and may differ in the last bits across counts
(bench/determinism.py measures by how much).

An explicit choice for checkpoints: ``ATTN_CLI_THREADS`` or ``OMP_NUM_THREADS``
(a whole number >= 1), used as it is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

THREADS_ENV = "ATTN_CLI_THREADS"
# Below this many floating-point operations one thread is faster (bench/threads.py finds
# where one thread and two break even, quiet and loaded).
PARALLEL_FLOPS = 50_000_000


def explicit_threads() -> int | None:
    """The count the user set, through ATTN_CLI_THREADS or OMP_NUM_THREADS, if any."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return None


def default_threads() -> int:
    """The cores this process may run on (torch's own default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


TOY_THREADS = 1  # the toy's count, whatever the settings (see the module docstring)


def toy_threads() -> int:
    """The intra-op thread count for the toy model's work: always TOY_THREADS."""
    return TOY_THREADS


def threads_for(flops: int) -> int:
    """The intra-op thread count for a checkpoint's work of ``flops`` floating-point operations."""
    explicit = explicit_threads()
    if explicit is not None:
        return explicit
    return 1 if flops < PARALLEL_FLOPS else default_threads()


def attention_flops(n_tokens: int, d_model: int, heads: int, d_k: int, d_v: int) -> int:
    """Roughly what one self-attention run costs: projections, scores, softmax, context."""
    projections = 2 * n_tokens * d_model * heads * (2 * d_k + d_v)
    squares = 2 * heads * n_tokens * n_tokens * (d_k + d_v) + 5 * heads * n_tokens * n_tokens
    return projections + squares


@contextlib.contextmanager
def using_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the block, then put back."""
    import torch

    before = torch.get_num_threads()
    if n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
