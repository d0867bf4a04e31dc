"""attn_cli.runtime.budget: the smallest of MemAvailable, RLIMIT_AS and the cgroup's limit,
and the one check that names the biggest part and its fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from attn_cli.runtime import budget
from attn_cli.runtime.errors import ExitStatus, TooLargeError

GiB = 2**30


def test_check_names_the_biggest_part_and_its_fix() -> None:
    parts = {"matrices": 6 * GiB, "table": 1 * GiB}
    describe = {"matrices": "the T x T matrices", "table": "the embedding table"}
    fixes = {"matrices": "use a shorter text", "table": "lower --d-model"}
    with pytest.raises(TooLargeError) as info:
        budget.check(parts, describe, fixes, available=4 * GiB)
    assert str(info.value) == (
        "this run needs about 7.0 GiB, mostly for the T x T matrices, but 4.0 GiB is free; use a shorter text"
    )
    assert info.value.exit_status == ExitStatus.TOO_LARGE
    budget.check(parts, describe, fixes, available=9 * GiB)  # fits within the 80% share


@pytest.mark.parametrize(
    "meminfo, rlimit_left, cgroup_left, expected",
    [
        (8 * GiB, None, None, 8 * GiB),
        (8 * GiB, 2 * GiB, None, 2 * GiB),
        (8 * GiB, 3 * GiB, 1 * GiB, 1 * GiB),
        (None, None, None, None),
    ],
)
def test_available_is_the_smallest_known_limit(monkeypatch, meminfo, rlimit_left, cgroup_left, expected) -> None:
    monkeypatch.setattr(budget, "mem_available", lambda: meminfo)
    monkeypatch.setattr(budget, "address_space_left", lambda: rlimit_left)
    monkeypatch.setattr(budget, "cgroup_left", lambda: cgroup_left)
    assert budget.available_bytes() == expected


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cgroup_limit_less_usage(tmp_path: Path, monkeypatch, version: str) -> None:
    proc = tmp_path / "cgroup"
    root = tmp_path / "sys"
    if version == "v2":
        proc.write_text("0::/box\n")
        (root / "box").mkdir(parents=True)
        (root / "box" / "memory.max").write_text(f"{3 * GiB}\n")
        (root / "box" / "memory.current").write_text(f"{1 * GiB}\n")
    else:
        proc.write_text("4:memory:/box\n1:cpu:/\n")
        (root / "memory" / "box").mkdir(parents=True)
        (root / "memory" / "box" / "memory.limit_in_bytes").write_text(f"{3 * GiB}\n")
        (root / "memory" / "box" / "memory.usage_in_bytes").write_text(f"{1 * GiB}\n")
    monkeypatch.setattr(budget, "_PROC_CGROUP", proc)
    monkeypatch.setattr(budget, "_CGROUP_ROOT", root)
    monkeypatch.setattr(budget, "_SMAPS_ROLLUP", tmp_path / "none")  # no lazily freed pages
    assert budget.cgroup_left() == 2 * GiB
    # pages this process marked MADV_FREE (kept table mappings) are the kernel's to take
    # back under the cgroup's pressure: not counted as used
    rollup = tmp_path / "smaps_rollup"
    rollup.write_text(f"Rss:  {2 * GiB // 1024} kB\nLazyFree:  {GiB // 2 // 1024} kB\n")
    monkeypatch.setattr(budget, "_SMAPS_ROLLUP", rollup)
    assert budget.cgroup_left() == 2 * GiB + GiB // 2


def test_an_unlimited_cgroup_is_no_limit(tmp_path: Path, monkeypatch) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    (tmp_path / "memory.max").write_text("max\n")
    monkeypatch.setattr(budget, "_PROC_CGROUP", proc)
    monkeypatch.setattr(budget, "_CGROUP_ROOT", tmp_path)
    assert budget.cgroup_left() is None


def test_meminfo_is_read(tmp_path: Path, monkeypatch) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684092 kB\nMemAvailable:    2048 kB\n")
    monkeypatch.setattr(budget, "_MEMINFO", meminfo)
    assert budget.mem_available() == 2048 * 1024


def run_limited(code: str, limit: int) -> subprocess.CompletedProcess:
    """Run ``code`` in a child whose address space is capped at ``limit`` bytes."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )


def test_rlimit_as_is_the_budget_in_a_limited_process() -> None:
    result = run_limited(
        """
        from attn_cli.runtime import budget
        left = budget.address_space_left()
        print(left, budget.available_bytes())
        """,
        3 * GiB,
    )
    assert result.returncode == 0, result.stderr
    left, available = map(int, result.stdout.split())
    assert 0 < left < 3 * GiB and available <= left


def test_an_embeddings_file_too_big_for_the_rlimit_is_exit_4_not_memoryerror(tmp_path: Path) -> None:
    rows = tmp_path / "big.json"
    row = "[" + ",".join(["0.5"] * 2000) + "]"
    rows.write_text("[" + ",".join([row] * 2) + "]")  # 2 tokens x 2000 numbers: small on disk...
    result = run_limited(
        f"""
        import sys
        from attn_cli.sources.toy import embed
        embed._BYTES_PER_PARSED_NUMBER = 10**6  # ...but as if each number took a megabyte
        from attn_cli.cli import app
        app(["run", "I saw", "-t", "words", "--embeddings", {str(rows)!r}, "-F", "json"], prog_name="attn-cli")
        """,
        3 * GiB,
    )
    assert result.returncode == ExitStatus.TOO_LARGE, result.stderr
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr
    assert "give a smaller embeddings file" in result.stderr


def test_a_batch_reuses_a_fresh_answer(monkeypatch) -> None:
    """Reading /proc before every text of a batch cost more than its attention."""
    calls = []
    monkeypatch.setattr(budget, "FRESH_SECONDS", 60.0)
    monkeypatch.setattr(budget, "_last", None)
    monkeypatch.setattr(budget, "mem_available", lambda: calls.append(1) or 2**30)
    monkeypatch.setattr(budget, "address_space_left", lambda: None)
    monkeypatch.setattr(budget, "cgroup_left", lambda: None)
    assert [budget.available_bytes() for _ in range(5)] == [2**30] * 5
    assert len(calls) == 1
    monkeypatch.setattr(budget, "FRESH_SECONDS", 0.0)
    budget.available_bytes()
    assert len(calls) == 2


# -- a GPU's memory, and an allocation the estimate let through ---------------------------


def test_a_gpus_part_is_checked_against_the_gpus_free_memory(monkeypatch) -> None:
    """On cuda, the weights and activations (what the layers compute there) against what the GPU
    has free; the kept tables, which come back to the CPU, are not counted there. The CPU is
    not asked. The control: enough free on the GPU passes."""
    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.sources.base import check_device_budget

    parts = {"weights": 6 * 2**30, "tables": 50 * 2**30, "activations": 2**30}
    culprits = {name: (f"the {name}", "use less") for name in parts}
    asked: list[str] = []
    monkeypatch.setattr(budget, "device_available_bytes", lambda device: asked.append(device) or (4 * 2**30 if device == "cuda" else None))
    with pytest.raises(TooLargeError, match=r"this run on the GPU needs about 7\.0 GiB, mostly for the weights on the GPU, but 4\.0 GiB is free; use less, or use --device cpu"):
        check_device_budget(parts, culprits, "cuda")
    check_device_budget(parts, culprits, "cpu")  # the CPU's budget is check_budget's
    assert asked == ["cuda", "cpu"]
    monkeypatch.setattr(budget, "device_available_bytes", lambda device: 10 * 2**30)
    check_device_budget(parts, culprits, "cuda")  # the control: 7 GiB fits in 10 (the tables' 50 are the CPU's)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ("cuda", "the GPU ran out of memory (torch: CUDA out of memory); use a shorter text, fewer layers (--layer) or a smaller --dtype, or --device cpu"),
        ("memory", "ran out of memory (an allocation failed); use a shorter text or fewer layers (--layer), or free some memory"),
        ("cpu", "ran out of memory (torch could not allocate); use a shorter text or fewer layers (--layer), or free some memory"),
    ],
)  # fmt: skip
def test_an_allocation_that_fails_is_one_line_and_exit_4(error: str, said: str, gpt2_folder, monkeypatch) -> None:
    """Where the estimate let a run through and an allocation failed all the same (the GPU's,
    which a lent GPU shows for real in test_cuda.py): one line, exit 4, no traceback."""
    import torch
    from invoking import invoke

    from attn_cli.sources.checkpoint.model import Checkpoint

    raised = {
        "cuda": torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        "memory": MemoryError(),
        "cpu": RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"),
    }[error]

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(Checkpoint, "trace", fail)
    result = invoke("run", "The cat sat", "--model", str(gpt2_folder), code=4)
    assert result.stderr == f"attn-cli: error: {said}\n"


def test_control_another_runtime_error_is_not_called_out_of_memory(gpt2_folder, monkeypatch) -> None:
    from invoking import invoke

    from attn_cli.sources.checkpoint.model import Checkpoint

    def fail(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(Checkpoint, "trace", fail)
    result = invoke("run", "The cat sat", "--model", str(gpt2_folder), code=None)
    assert result.exit_code != 4 and isinstance(result.exception, RuntimeError) and "out of memory" not in result.stderr
