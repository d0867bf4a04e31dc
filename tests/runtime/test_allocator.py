"""attn_cli.runtime.allocator: what a large forward and a streamed export ask of glibc's malloc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from attn_cli.runtime import allocator
from attn_cli.runtime.allocator import ENVIRONMENT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc policy, read from /proc")

MB = 2**20

# Each case runs in a child of its own: the malloc settings are the process's.
PRELUDE = textwrap.dedent(
    """
    import json, resource, sys, torch
    from attn_cli.runtime import allocator
    rss = allocator.resident
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    if allocator._libc() is None:
        print(json.dumps(None)); sys.exit()
    """
)

# What a forward does to the heap: a large block freed (glibc then serves blocks up
# to its size from the heap), then layer-sized blocks with small live allocations
# between them (Python objects, small tensors), so freeing the blocks leaves holes
# below the heap's top that glibc keeps.
HOLES = textwrap.dedent(
    """
    big = torch.ones(6_000_000)  # 24 MB
    del big
    before = rss()
    blocks, pins = [], []
    for _ in range(40):
        blocks.append(torch.ones(1_000_000))  # 4 MB
        pins.append(torch.ones(16_000))  # a small (64 kB) allocation after it
    del blocks
    """
)


def child(code: str, *args: str) -> object:
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    if result is None:
        pytest.skip("this C library lacks mallopt, malloc_trim or mallinfo2 (not glibc 2.33 or later)")
    return result


def test_an_export_s_freed_blocks_go_back_to_the_system() -> None:
    code = "fixed = sys.argv[1] == 'fixed' and allocator.return_freed_memory()\n" + HOLES + "print((rss() - before) // 2**20)"
    assert child(code, "fixed") < 16  # of the 160 MB allocated and freed
    assert child(code, "default") > 100  # the control: glibc keeps the freed blocks (so the case above can fail)


LAYERS = """
heap = allocator.LayerHeap(16 * 2**20, 20) if sys.argv[1] == "heap" else allocator.return_freed_memory()
def layer():
    x = torch.ones(1_000_000)
    for _ in range(4):
        x = x + 1.0  # a chain of 4 MB transients, each freed once the next exists
    return x.sum()
faulted = []
for _ in range(8):
    start = faults()
    layer()
    faulted.append((faults() - start) * 4096 // 2**20)
print(json.dumps(faulted))
"""


def test_a_layer_s_blocks_are_reused_from_the_heap() -> None:
    """Mapped afresh, each layer's transients cost their page faults; kept in the heap, a
    block freed by one layer is the next one's without a fault."""
    faulted = child(LAYERS, "heap")  # MB faulted in per layer
    # a layer of 16 MB of blocks: the first faults them in, the later ones fault little (the machine's own
    # noise, a few MB in one layer now and then, allowed: a quarter of what the six would fault unheld)
    assert faulted[0] >= 8 and sorted(faulted[2:])[3] <= 4 and sum(faulted[2:]) <= 24, faulted
    faulted = child(LAYERS, "fixed")  # the control: a 1 MiB threshold maps them afresh in every layer
    assert min(faulted) >= 12, faulted


POOL = """
import mmap
allocator.LARGE_TRACE_BYTES = 0
if sys.argv[1] == "unpooled":
    allocator.TablePool.give = lambda self, block: None
if sys.argv[1] == "limited":  # ulimit -v: 4 GiB more than is mapped now
    from attn_cli.runtime.budget import _mapped_bytes
    resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + 2**32, resource.getrlimit(resource.RLIMIT_AS)[1]))
def lazy_free():  # MB the kernel may take back without asking (MADV_FREE)
    from attn_cli.runtime.budget import lazy_free
    return lazy_free() // 2**20
def forward(n_tables, size=4 * 2**20):
    heap = allocator.LayerHeap(size, n_tables)
    start, tables = faults(), []
    for _ in range(n_tables):
        tables.append(heap.table((size // 4,), torch.float32))
        tables[-1].fill_(float(len(tables)))
    return tables, (faults() - start) * 4096 // 2**20
first, faulted_first = forward(8)  # 32 MB
lazy = lazy_free()
held = first[3][:10]  # a view keeps table 3's mapping
addresses = {t.data_ptr() for t in first}
del first
lazy_after = lazy_free()
second, faulted_second = forward(8)
reused = sum(t.data_ptr() in addresses for t in second)
survives = bool((held == 4.0).all())
del second
third, _ = forward(2)  # at most as many kept as the latest forward kept
del third
kept_after_two = len(allocator._POOL.free)
other, faulted_other = forward(8, 2 * 2**20)  # tables of another size: the kept mappings go
print(json.dumps([faulted_first, lazy_after - lazy, faulted_second, reused, survives, kept_after_two,
                  len(allocator._POOL.free), faulted_other]))
"""


def test_a_dropped_trace_s_table_mappings_are_the_next_forward_s() -> None:
    """A dropped trace's tables stay mapped, marked for the kernel to take when it needs
    the memory (LazyFree), and the next forward of that table size writes into them
    without faulting in fresh pages; a table a view still holds is never handed out."""
    first, lazy, second, reused, survives, kept, emptied, other = child(POOL, "pooled")
    assert first >= 30 and 24 <= lazy <= 32  # 8 tables of 4 MB faulted in; 7 marked (one is held)
    assert second <= 6 and reused == 7 and survives  # the held table's mapping was not reused
    assert kept == 2 and emptied == 0 and other >= 14
    first, lazy, second, reused, survives, kept, emptied, other = child(POOL, "unpooled")  # the control
    assert first >= 30 and lazy < 4 and second >= 30 and survives and kept == 0
    # under ulimit -v a kept mapping would hold address space the kernel never takes back
    first, lazy, second, reused, survives, kept, emptied, other = child(POOL, "limited")
    assert first >= 30 and lazy < 4 and second >= 30 and survives and kept == 0


GIVE_BACK = """
heap = allocator.LayerHeap(16 * 2**20, 20)
pins, blocks = [], []
for _ in range(20):
    blocks.append(torch.ones(1_000_000))  # 4 MB
    pins.append(torch.ones(16_000))
del blocks
free, before = allocator.heap_free(), rss()
given = heap.before_layer(int(sys.argv[1]))
print(json.dumps([free // 2**20, given, (before - rss()) // 2**20]))
"""


def test_the_heap_s_free_memory_goes_back_only_where_it_could_raise_the_peak() -> None:
    free, given, released = child(GIVE_BACK, "19")  # the last layer: no table is still to come
    assert free >= 76 and given and released >= 70  # 80 MB freed into holes, unmapped
    free, given, released = child(GIVE_BACK, "10")  # nine tables (144 MiB) to come cover the 80 MB
    assert free >= 76 and not given and released < 8


@pytest.mark.parametrize(
    ("released", "growth", "given_at"), [(40, 0, [16, 17, 18, 19]), (10, 0, [16, 19]), (10, 8, [11, 16, 18, 19])]
)
def test_the_rule(monkeypatch: pytest.MonkeyPatch, released: int, growth: int, given_at: list[int]) -> None:
    """The first give-back comes once glibc's count of free memory (50 MiB, an upper bound)
    passes the tables still to come after the layer, (19 - k) * 16 MiB; later ones once
    what the latest give-back released (the resident set before and after), plus what the
    count grew by since (``growth`` MiB a layer), passes them."""
    rss, free = [2**40], [50 * MB]
    monkeypatch.setattr(allocator, "mapped_from", lambda nbytes, top=0: True)
    monkeypatch.setattr(allocator, "heap_free", lambda: free[-1])
    monkeypatch.setattr(allocator, "give_back", lambda: rss.append(rss[-1] - released * MB))
    monkeypatch.setattr(allocator, "resident", lambda: rss[-1])
    heap = allocator.LayerHeap(16 * MB, 20)  # 320 MiB of tables
    given = []
    for k in range(20):
        if heap.before_layer(k):
            given.append(k)
        free.append(free[-1] + growth * MB)
    assert given == given_at
    small = allocator.LayerHeap(16 * MB, 15)  # 240 MiB: below LARGE_TRACE_BYTES, glibc left alone
    assert not small.active and not small.before_layer(14)


def test_a_table_is_mapped_on_the_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward on another device writes its weights where its tensors are (a CPU block
    handed to a CUDA matmul as ``out`` would fail): no table for it; the control, the CPU's."""
    import torch

    monkeypatch.setattr(allocator, "mapped_from", lambda nbytes, top=0: True)
    heap = allocator.LayerHeap(16 * MB, 20)
    assert heap.table((16, 512, 512), torch.float32, torch.device("cuda")) is None
    assert heap.table((16, 512, 512), torch.float32, "cpu").shape == (16, 512, 512)


def test_the_environment_s_choice_is_kept() -> None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    code = "from attn_cli.runtime import allocator; print(allocator.return_freed_memory(), allocator.LayerHeap(2**30, 1).active)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
