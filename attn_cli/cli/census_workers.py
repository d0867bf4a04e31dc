"""`census --workers N`: the missing shards run in N local processes (spawned: a fresh interpreter
each, which opens the model once, its weights memory-mapped), each shard written by the worker
that ran it. The parent only hands out shard numbers and counts what is done.

A worker ends quietly on Ctrl-C (the terminal sends it to the whole process group) and when its
parent is gone (a killed census: a thread looks every PARENT_POLL seconds): what it wrote stays,
whole, and an interrupted shard leaves only a temporary file that ``--resume`` removes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.runtime.errors import AttnCliError

if TYPE_CHECKING:
    from attn_cli.sources.census import Census, Windows
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.text.corpus import Corpus

PARENT_POLL = 0.2  # seconds between a worker's looks at whether its census is still there
_state: dict[str, Any] = {}  # a worker's own: its source, the corpus, the shards, the options


def in_workers(
    spec: SourceSpec, corpus: Corpus, shards: Any, missing: Sequence[int], *, windows: Windows | None, epsilon: float,
    workers: int, progress: Callable[[int, int], None], against: SourceSpec | None = None,
) -> None:  # fmt: skip
    """Run the ``missing`` shards in ``workers`` spawned processes; ``progress(texts, tokens)`` per shard
    done. A worker that dies (the kernel's out-of-memory killer, a crash) ends the run with one line,
    the shards done kept: an executor says so where a ``multiprocessing.Pool`` would wait for ever."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    saved = dict(os.environ)
    os.environ.update(environ_threads(workers))  # the children's torch threads: the CPUs shared out
    initargs = (spec, corpus, shards, windows, epsilon, os.getpid(), against)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start, initargs=initargs) as pool:
            for done in as_completed([pool.submit(_run, k) for k in missing]):
                progress(*done.result())
    except BrokenProcessPool:
        raise AttnCliError(
            f"a census worker ended before its shard was done (out of memory?); the shards done are in {shards.folder}: "
            f"run the same command with --resume {shards.folder} (fewer --workers) to finish"
        ) from None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _start(
    spec: SourceSpec, corpus: Corpus, shards: Any, windows: Windows | None, epsilon: float, parent: int, against: SourceSpec | None
) -> None:
    """A worker's start: Ctrl-C ends it without a word; the model opened once."""
    signal.set_wakeup_fd(-1)  # the entry point's watcher (the console script, imported again here) says nothing for a worker
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    import torch

    from attn_cli.pipeline import open_source
    from attn_cli.runtime.threads import explicit_threads

    torch.set_num_threads(explicit_threads() or 1)  # every step's threads, not only the model's: the CPUs shared out

    _state.update(source=open_source(spec), corpus=corpus, shards=shards, windows=windows, epsilon=epsilon,
                  against=None if against is None else open_source(against))  # fmt: skip


def _watch_parent(parent: int) -> None:
    """End the worker once its census is gone: a signal may reach one of torch's threads, where
    the main thread, waiting for its next shard, would never see it, and the shards' queue never
    closes (every worker holds its write end)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(0)


def _run(k: int) -> tuple[int, int]:
    """Shard ``k``, written; (its texts, its tokens)."""
    made = one_shard(
        _state["source"], _state["corpus"], _state["shards"].shards[k], _state["windows"], _state["epsilon"], None, _state["against"]
    )
    write_shard(_state["shards"], k, made)
    return len(_state["shards"].shards[k]), made.tally.tokens


def one_shard(
    source: Any, corpus: Corpus, texts: Sequence[int], windows: Windows | None, epsilon: float, progress: Any, against: Any = None
) -> Census:
    from attn_cli.sources.census import run_census

    return run_census(source, corpus, windows=windows, epsilon=epsilon, texts=texts, progress=progress, against=against)


def write_shard(shards: Any, k: int, made: Census) -> None:
    from attn_cli.formats.census import shard_dict
    from attn_cli.runtime.files import write_atomic

    shard = {**shard_dict(made.tally, shards.shards[k], made.model), "cut": made.cut}
    write_atomic(shards.path(k), json.dumps(shard).encode("utf-8"))


def cpu_count() -> int:
    """The CPUs this process may use: its affinity, and a cgroup's CPU limit where one is set (cpu.max)."""
    from attn_cli.runtime.threads import default_threads

    count = default_threads()
    for path in ("/sys/fs/cgroup/cpu.max",):
        try:
            quota, period = Path(path).read_text().split()[:2]
        except (OSError, ValueError):
            continue
        if quota != "max" and int(period) > 0:
            count = min(count, max(1, int(quota) // int(period)))
    return count


def environ_threads(workers: int) -> dict[str, str]:
    """Each worker's torch threads: the CPUs shared out, at least one."""
    made = {"PYTHONWARNINGS": "ignore::UserWarning:multiprocessing.resource_tracker"}  # an interrupted pool's semaphores: no warning
    if "ATTN_CLI_THREADS" not in os.environ:
        made["ATTN_CLI_THREADS"] = str(max(1, cpu_count() // max(1, workers)))
    return made
