"""What a large trace's forward asks of the memory allocator, so that its peak is what it
keeps and little time goes on mapping fresh memory (Linux with glibc only; elsewhere
nothing is asked).

glibc serves a block of 128 KiB or more with a mapping of its own, unmapped when it
is freed, but after the first such free it raises that threshold to the freed
block's size (up to 32 MiB); and whatever the threshold, a block the heap has room
for comes from the heap, which keeps what is freed. A forward that keeps every
layer's (H, T, T) weights frees blocks of a layer's size over and over (the (T, D)
vectors, the MLP's (T, F) activations). Left alone, the kept tables land in the heap
among them, and the holes beside them stay mapped (``bench/checkpoints.py`` measures how much).

So a forward whose kept tables pass ``LARGE_TRACE_BYTES`` (``LayerHeap``):

- writes each layer's float32 weights into an anonymous mapping of its own
  (``LayerHeap.table``), which ``TablePool`` takes back when the trace lets the last
  view of it go;
- leaves the layers' other blocks to the heap (the mmap threshold at a table's size,
  the heap's top kept), so a block one layer frees is the next layer's without a
  page fault;
- gives the heap's free memory back (``malloc_trim``) before a layer only where it
  could raise the peak: when it is more than the tables still to be kept after that
  layer (a later layer's peak holds those anyway);
- keeps the mappings of a dropped trace's tables for the next forward's tables of the
  same size (at most as many as the latest forward kept), marked ``MADV_FREE``: the
  kernel takes their pages whenever it needs memory (``MemAvailable`` counts them, and
  ``attn_cli.runtime.budget`` does not count them against a cgroup's limit; under ``ulimit -v``
  none is kept), and until then the next forward writes into them without faulting
  in fresh pages (a matmul into kept pages is faster than into fresh ones).
  transformers' heap keeps its freed tables too, without telling the kernel.

A threshold fixed low, so that every freed block went back at once, would fault each
layer's blocks in afresh: that time is what this scheme saves (bench/README.md has the
figures against transformers). A streamed export does ask for 1 MiB
(``return_freed_memory``): it frees each of its derived tables once.

Not where the environment already chose (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``) or the C
library lacks ``mallopt``, ``malloc_trim`` or ``mallinfo2`` (not glibc, or a glibc
before 2.33).
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import sys
import weakref
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 2**20  # a streamed export's blocks: 1 MiB and more go back when freed
TRIM_THRESHOLD = 128 * 2**10  # glibc's default: free memory at the heap's top beyond this goes back
KEEP_TOP = 2**31 - 1  # during a forward the heap's top stays for the next layer, until ``LayerHeap.done``
MMAP_THRESHOLD_MAX = 32 * 2**20  # the largest glibc takes on a 64-bit machine (DEFAULT_MMAP_THRESHOLD_MAX)
LARGE_TRACE_BYTES = 256 * 2**20  # kept tables from which a forward manages the heap
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )]  # fmt: skip


@functools.cache
def _libc() -> Any:
    """glibc's malloc controls, or None where attn-cli leaves the allocator alone."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in ENVIRONMENT):
        return None
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim, info = libc.mallopt, libc.malloc_trim, libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    info.argtypes, info.restype = (), _Mallinfo2
    return libc


def mapped_from(nbytes: int, top: int = TRIM_THRESHOLD) -> bool:
    """Blocks of ``nbytes`` and more (clamped to 1-32 MiB) that the heap has no room for each
    get a mapping of their own, unmapped when freed; the others come from the heap, whose
    top goes back to the system when more than ``top`` bytes of it are free. Process
    settings, until the next call (they also stop glibc raising the thresholds). True
    when they are set here."""
    libc = _libc()
    threshold = max(MMAP_THRESHOLD, min(nbytes, MMAP_THRESHOLD_MAX))
    return libc is not None and libc.mallopt(M_MMAP_THRESHOLD, threshold) == 1 == libc.mallopt(M_TRIM_THRESHOLD, top)


def return_freed_memory() -> bool:
    """Every block of 1 MiB and more goes back to the system once freed (a streamed
    export's derived tables). True when it is set here."""
    return mapped_from(MMAP_THRESHOLD)


def heap_free() -> int:
    """Bytes the heap holds free, in every arena (mapped or already given back: an upper bound)."""
    libc = _libc()
    return 0 if libc is None else int(libc.mallinfo2().fordblks)


def resident() -> int:
    """The process's resident set in bytes (Linux's /proc/self/statm)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def give_back() -> None:
    """Unmap the pages of the heap's free blocks (glibc's ``malloc_trim(0)``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class LayerHeap:
    """The heap across one forward's layers (see the module's text): kept tables of
    ``table_bytes`` each, ``kept`` of them in all."""

    def __init__(self, table_bytes: int, kept: int) -> None:
        self.table_bytes, self.kept = table_bytes, kept
        self.active = kept * table_bytes >= LARGE_TRACE_BYTES and mapped_from(table_bytes, KEEP_TOP)
        self.released: int | None = None  # what the latest give-back released, once one has
        self.free_after = 0  # glibc's count of free memory just after it
        if self.active:
            _POOL.serve(table_bytes, kept)

    def before_layer(self, kept_before: int) -> bool:
        """Before a layer's attention, ``kept_before`` tables kept so far: give the heap's free
        memory back when it is more than the tables still to come after this layer (the
        peak of a later layer, the last kept one's at the latest, holds those). True when given.

        How much of the free memory is mapped: glibc counts its free blocks, mapped or not
        (``heap_free``), so until the first give-back that count is the estimate (an upper
        bound); from then on, what the latest give-back released (the resident set before
        and after) plus what the count grew by since (the heap growing where small blocks
        split its holes), not the whole count, whose blocks given back stay in it unmapped."""
        if not self.active:
            return False
        to_come = (self.kept - 1 - kept_before) * self.table_bytes
        free = heap_free()
        estimate = free if self.released is None else self.released + max(0, free - self.free_after)
        if estimate <= to_come:
            return False
        before = resident()
        give_back()
        self.released, self.free_after = max(0, before - resident()), heap_free()
        return True

    def table(self, shape: tuple[int, ...], dtype: Any, device: Any = "cpu") -> Any:
        """An empty float32 block of ``shape`` for a layer's weights, in a mapping of its own
        (a dropped table's, or a new one; ``TablePool`` takes it back when the last tensor
        using it goes), or None: glibc serves even a block above the threshold from the
        heap when the heap has room for it, and a kept table there is a hole's worth of
        heap the next layers' blocks cannot reuse (the heap grew a layer at a time, each
        layer faulting in fresh memory)."""
        import torch

        count = math.prod(shape)
        on_cpu = torch.device(device).type == "cpu"
        if not self.active or not on_cpu or dtype != torch.float32 or count * 4 != self.table_bytes:
            return None
        block = _POOL.take() or mmap.mmap(-1, count * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        table = torch.frombuffer(block, dtype=torch.float32, count=count).view(shape)
        # the storage outlives every view of the table; when it goes, so has torch's hold on the block
        weakref.finalize(table.untyped_storage(), _POOL.give, block).atexit = False
        return table

    def done(self) -> None:
        """After the forward: the heap's top trimmed again as glibc does. What it holds free
        stays (at most the last layer's blocks, given back just before that layer): the
        renderers' blocks and the next forward's reuse it without a page fault."""
        if self.active:
            mapped_from(self.table_bytes)


class TablePool:
    """Mappings of dropped tables kept for the next forward's tables (see the module's
    text): of one size, at most as many as the latest forward that asked for that size
    kept. A forward with tables of another size unmaps them. Where the kernel cannot be
    told (no ``MADV_FREE``), a dropped table's mapping is unmapped as before."""

    def __init__(self) -> None:
        self.free: list[mmap.mmap] = []  # MADV_FREE'd, no tensor on them, each of ``size`` bytes
        self.size, self.limit = 0, 0

    def serve(self, table_bytes: int, kept: int) -> None:
        """The coming forward's tables: ``kept`` of ``table_bytes`` each."""
        if table_bytes != self.size:
            self.free.clear()  # no tensor holds them: dropping the last reference unmaps
        self.size, self.limit = table_bytes, kept
        del self.free[kept:]

    def take(self) -> mmap.mmap | None:
        """A kept mapping for a table, or None."""
        while self.free:
            block = self.free.pop()
            # only this frame holds it (a tensor on it would hold one more reference):
            # always so where torch drops a storage's Python object with the storage
            if sys.getrefcount(block) <= _ONLY_HERE:
                return block
        return None

    def give(self, block: mmap.mmap) -> None:
        """A table's storage has gone: keep its mapping, or let it be unmapped."""
        # Returning drops the last reference beside the caller's, which unmaps the block.
        # Under ``ulimit -v`` a kept mapping would hold address space no kernel takes back.
        if len(self.free) >= self.limit or not hasattr(mmap, "MADV_FREE") or _address_space_limited():
            return
        try:
            if len(block) == self.size:
                block.madvise(mmap.MADV_FREE)
                self.free.append(block)
        except (OSError, ValueError):  # a kernel before 4.5; a block closed already
            pass


def _address_space_limited() -> bool:
    """Whether the process has an address-space limit (``RLIMIT_AS``, ``ulimit -v``)."""
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def _references_of_a_popped_item() -> int:
    """What ``sys.getrefcount`` says of an object only the calling frame holds, popped from
    a list as ``TablePool.take`` pops (the count differs between Python versions)."""
    items = [object()]
    item = items.pop()
    return sys.getrefcount(item)


_ONLY_HERE = _references_of_a_popped_item()
_POOL = TablePool()
