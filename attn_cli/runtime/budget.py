"""How much memory attn-cli may still allocate, and the one check every estimate goes through.

The budget is the smallest of three limits, each of which ends a run that goes
over it (the kernel's OOM killer, a MemoryError, the container's OOM killer):

- the machine's ``MemAvailable`` (``/proc/meminfo``);
- the process's address-space limit ``RLIMIT_AS`` (``ulimit -v``), less what the
  process has already mapped (``/proc/self/statm``);
- the cgroup's limit (v2 ``memory.max``, or v1 ``memory.limit_in_bytes``), less
  what the cgroup already uses, not counting this process's pages marked
  ``MADV_FREE`` (a dropped large trace's tables, kept by ``attn_cli.runtime.allocator``): the
  kernel takes those back under the cgroup's own pressure before anything fails.

A limit that cannot be read is left out; with none readable the budget is
unknown (``None``) and nothing is refused.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from attn_cli.runtime.errors import TooLargeError

# Estimates are within a small factor; refuse when one passes this share of the budget.
SHARE = 0.8
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC_CGROUP = Path("/proc/self/cgroup")
_MEMINFO = Path("/proc/meminfo")
_SMAPS_ROLLUP = Path("/proc/self/smaps_rollup")
_NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a huge page-aligned number


# A batch asks before every text; reading /proc and the cgroup files each time cost
# more than a short text's attention. An answer is reused for this long.
FRESH_SECONDS = 0.25
_last: tuple[float, int | None] | None = None


def available_bytes() -> int | None:
    """The bytes this process can still allocate: the smallest known limit (read
    afresh at most every FRESH_SECONDS)."""
    global _last
    now = time.monotonic()
    if _last is not None and now - _last[0] < FRESH_SECONDS:
        return _last[1]
    limits = [limit for limit in (mem_available(), address_space_left(), cgroup_left()) if limit is not None]
    _last = (now, min(limits) if limits else None)
    return _last[1]


def mem_available() -> int | None:
    """The kernel's estimate of memory available without swapping."""
    available = _kib_field(_MEMINFO, "MemAvailable:")
    if available is not None:
        return available
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def address_space_left() -> int | None:
    """``RLIMIT_AS`` less the address space already mapped; None when unlimited."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - _mapped_bytes())


def cgroup_left() -> int | None:
    """The cgroup's memory limit less its usage (this process's lazily freed pages not
    counted); None without a limit."""
    left, lazy = [], None
    for limit_file, usage_file in _cgroup_files():
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and limit < _NO_LIMIT:
            lazy = lazy_free() if lazy is None else lazy
            left.append(max(0, limit - max(0, (usage or 0) - lazy)))
    return min(left, default=None)


def lazy_free() -> int:
    """Bytes of this process's pages marked ``MADV_FREE`` that the kernel has not taken
    back yet (``LazyFree`` in ``/proc/self/smaps_rollup``); 0 where it cannot be read."""
    return _kib_field(_SMAPS_ROLLUP, "LazyFree:") or 0


def _kib_field(path: Path, name: str) -> int | None:
    """Bytes of the ``name  N kB`` line of a /proc file, or None where it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(name):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check(
    parts: Mapping[str, int],
    describe: Mapping[str, str],
    fixes: Mapping[str, str],
    *,
    doing: str = "this run",
    available: int | None = None,
) -> None:
    """Raise TooLargeError when ``parts`` (bytes by name) would not fit the budget.

    The message names the total, the biggest part (``describe[name]``) and what to
    change (``fixes[name]``), e.g. "this run needs about 9.0 GiB, mostly for the
    T x T matrices of 30000 tokens x 1 head, but 6.1 GiB is free; use a shorter text".
    ``available`` overrides the measured budget (for tests and callers that measured it).
    """
    need = sum(parts.values())
    have = available if available is not None else available_bytes()
    if have is None or need <= have * SHARE or not parts:
        return
    biggest = max(parts, key=parts.__getitem__)
    raise TooLargeError(
        f"{doing} needs about {gib(need)}, mostly for {describe.get(biggest, biggest)}, "
        f"but {gib(have)} is free; {fixes.get(biggest, 'ask for less')}"
    )


def fits(parts: Mapping[str, int], available: int | None = None) -> bool:
    """Whether ``check`` would let ``parts`` run (``available``: as there)."""
    have = available if available is not None else available_bytes()
    return have is None or sum(parts.values()) <= have * SHARE


def device_available_bytes(device: str) -> int | None:
    """What a run may still allocate on ``device``: for cuda, the GPU's free memory and what
    torch's caching allocator holds unused (``torch.cuda.mem_get_info``, ``memory_reserved``
    less ``memory_allocated``); None for the CPU (``available_bytes`` is its budget) or where
    it cannot be read."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    except (RuntimeError, AssertionError, AttributeError):  # no CUDA after all: the run's own check says so
        return None


def out_of_memory(err: BaseException) -> str | None:
    """The one line to say when ``err`` is an allocation that failed (torch's CUDA or CPU
    out-of-memory error, a MemoryError), else None. Reads no torch: only the error's class."""
    name = type(err).__name__
    if isinstance(err, MemoryError):
        return "ran out of memory (an allocation failed); use a shorter text or fewer layers (--layer), or free some memory"
    if name == "OutOfMemoryError" and type(err).__module__.startswith("torch"):
        return (
            "the GPU ran out of memory (torch: CUDA out of memory); use a shorter text, fewer layers (--layer) "
            "or a smaller --dtype, or --device cpu"
        )
    if isinstance(err, RuntimeError) and "can't allocate memory" in str(err):  # torch's CPU allocator
        return "ran out of memory (torch could not allocate); use a shorter text or fewer layers (--layer), or free some memory"
    return None


def gib(n: int) -> str:
    """Bytes for people: '9.0 GiB', '512 MiB'."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{max(1, round(n / 2**20))} MiB"


def _mapped_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; an underestimate of mappings


def _cgroup_files() -> list[tuple[Path, Path]]:
    """(limit, usage) file pairs of this process's cgroup: v2 first, then v1."""
    pairs = []
    try:
        lines = _PROC_CGROUP.read_text(encoding="ascii").splitlines()
    except OSError:
        lines = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if hierarchy == "0" and controllers == "":
            for base in (_CGROUP_ROOT / relative, _CGROUP_ROOT):
                pairs.append((base / "memory.max", base / "memory.current"))
        elif "memory" in controllers.split(","):
            for base in (_CGROUP_ROOT / "memory" / relative, _CGROUP_ROOT / "memory"):
                pairs.append((base / "memory.limit_in_bytes", base / "memory.usage_in_bytes"))
    return pairs


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None
