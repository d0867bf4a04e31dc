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
