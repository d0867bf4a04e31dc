"""allocator.return_freed_memory: blocks a forward frees go back to the system (glibc)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from attn_cli.allocator import ENVIRONMENT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc policy, read from /proc")

# What a forward does to the heap: a large block freed (glibc then serves blocks up
# to its size from the heap), then layer-sized blocks with small live allocations
# between them (Python objects, small tensors), so freeing the blocks leaves holes
# below the heap's top that glibc keeps.
CHILD = textwrap.dedent(
    """
    import sys, torch
    from attn_cli.allocator import return_freed_memory
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    print(return_freed_memory() if sys.argv[1] == "fixed" else None)
    big = torch.ones(6_000_000)  # 24 MB
    del big
    before = rss()
    blocks, pins = [], []
    for _ in range(40):
        blocks.append(torch.ones(1_000_000))  # 4 MB
        pins.append(torch.ones(16_000))  # a small (64 kB) allocation after it
    del blocks
    print((rss() - before) // 2**20)
    """
)


def retained_mb(mode: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    set_here, retained = out.stdout.split()
    return set_here, int(retained)


def test_freed_blocks_go_back_to_the_system() -> None:
    set_here, retained = retained_mb("fixed")
    if set_here != "True":
        pytest.skip("this C library has no mallopt (not glibc)")
    assert retained < 16  # of the 160 MB allocated and freed
    # the control: without it, glibc keeps the freed blocks (so the case above can fail)
    assert retained_mb("default")[1] > 100


def test_the_environment_s_choice_is_kept() -> None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    code = "from attn_cli.allocator import return_freed_memory; print(return_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
