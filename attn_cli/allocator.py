"""Freed memory goes back to the system, so a large trace's peak is what it holds (glibc only).

glibc's malloc serves a block of 128 KiB or more with its own mmap and unmaps it
when it is freed, but after the first such free it raises that threshold to the
freed block's size (up to 32 MiB) and serves later blocks below it from the heap,
which it keeps when they are freed, in holes between blocks still in use. A
checkpoint's forward frees blocks of one layer's size over and over (the (T, D)
vectors, the MLP's (T, F) activations): at GPT-2-small's 1,024 tokens the heap
kept about 100 MB of them beside the 604 MB of kept attention weights
(``bench/checkpoints.py``). Fixing the threshold at 1 MiB
(``mallopt(M_MMAP_THRESHOLD)``, which also stops the raising) unmaps every such
block once freed; the cost is the page faults of mapping it afresh, about 9% of
that forward's time (measured: 128 KiB cost 13%, 4 MiB kept the holes).

A process setting: the forward of a trace whose kept tables pass
``LARGE_TRACE_BYTES`` sets it, once (small traces, whose peak is small, keep
glibc's faster default); not where the environment already chose
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``MALLOC_MMAP_MAX_``) or the C library has no ``mallopt`` (not glibc).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 2**20  # blocks of 1 MiB and more: a (T, D) vector from T = 342 at D = 768
LARGE_TRACE_BYTES = 256 * 2**20  # kept tables from which the memory matters more than 9% of the time
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
