"""Freed memory goes back to the system, so a trace's peak is what it holds (glibc only).

glibc's malloc serves a block of 128 KiB or more with its own mmap and unmaps it
when it is freed, but after the first such free it raises that threshold to the
freed block's size (up to 32 MiB) and serves later blocks below it from the heap,
which it keeps when they are freed. A checkpoint's forward frees blocks of one
layer's size over and over (the MLP's (T, F) activations, the (T, D) vectors, a
(T, T) softmax block): at GPT-2-small's 1,024 tokens the heap kept about 110 MB of
them beside the 604 MB of kept attention weights (``bench/checkpoints.py``).
Fixing the threshold (``mallopt(M_MMAP_THRESHOLD, 128 KiB)``, which also stops the
raising) keeps every large block unmapped once freed; the cost is the page faults
of mapping it afresh, a few percent of a forward that large.

A process setting: ``return_freed_memory`` sets it once, where a checkpoint's
forward begins, unless the environment already chose (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``) or the C
library has no ``mallopt`` (not glibc: nothing to do).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept from moving
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


@functools.cache
def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold, once per process. True when it is set here."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
