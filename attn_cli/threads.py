"""How many threads torch's CPU operations use, chosen from the size of the work.

torch starts one intra-op thread per core. On the small tensors of a sentence
(a few thousand multiply-adds) handing work to another thread costs more than
the work, and when the other cores are busy it costs far more: bench/threads.py
measures both. So small work runs on one thread, and only work big enough to
pay for the hand-off gets the default count.

The count never changes the numbers: attn-cli's outputs are the same bytes
whatever it is (tests/test_threads.py checks JSON at 1 and 2 threads).

An explicit choice wins: ``OMP_NUM_THREADS`` or ``ATTN_CLI_THREADS`` (a whole
number >= 1) is used as it is, for all work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

THREADS_ENV = "ATTN_CLI_THREADS"
# Below this many floating-point operations one thread is faster (bench/threads.py:
# a 2-core machine breaks even near 2e7 quiet, and well above it when loaded).
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


def threads_for(flops: int) -> int:
    """The intra-op thread count for work of ``flops`` floating-point operations."""
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
