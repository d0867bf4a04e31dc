"""attn_cli.runtime.threads: the toy on one thread, the same bytes whatever the user sets; a checkpoint's
count follows the work and the user's setting, and JSON records it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import MKL_AVX2, SPLIT_SUMS_ON_THREADS
from invoking import invoke

from attn_cli.runtime import threads


@pytest.fixture(autouse=True)
def no_thread_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)


@pytest.mark.parametrize(
    "env, flops, expected",
    [
        ({}, 10_000, 1),
        ({}, 10**12, "default"),
        ({"OMP_NUM_THREADS": "3"}, 10_000, 3),
        ({"OMP_NUM_THREADS": "3", threads.THREADS_ENV: "1"}, 10**12, 1),
        ({"OMP_NUM_THREADS": "zero"}, 10_000, 1),  # not a count: ignored
        ({threads.THREADS_ENV: "0"}, 10**12, "default"),
    ],
)
def test_threads_for(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], flops: int, expected) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    want = threads.default_threads() if expected == "default" else expected
    assert threads.threads_for(flops) == want


def test_using_threads_restores_the_count() -> None:
    before = torch.get_num_threads()
    with threads.using_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_attention_flops_grow_with_the_square_of_the_text() -> None:
    small = threads.attention_flops(100, 16, 1, 16, 16)
    large = threads.attention_flops(1000, 16, 1, 16, 16)
    assert 50 < large / small < 100


# conftest's thread-sensitive BLAS settings; every child also runs SPLIT_SUMS_ON_THREADS first
THREAD_SENSITIVE = MKL_AVX2
LONG = " ".join(f"w{i % 97}" for i in range(160))
# issue 18's two reports, and a causal multi-head one with every table
TOY_CASES = [
    ["-t", "words", "--init", "normal", "--d-model", "64"],
    ["-t", "words", "--init", "uniform", "--qkv-bias", "--d-k", "24", "--d-v", "28"],
    ["-t", "words", "--heads", "4", "--causal", "--out-proj", "--d-model", "32"],
]
# The old rule, for the negative control: the toy on whatever count the user set.
FOLLOW_THE_SETTING = "import attn_cli.runtime.threads as t\nt.toy_threads = lambda: t.explicit_threads() or 1\n"


# Runs each command line through the CLI in one process (a fresh process per thread
# setting, as a user's would be) and prints what each wrote to stdout. CliRunner itself, not
# tests/invoking.py: this is the child's own script, and the child has attn_cli on its path,
# not tests/.
DRIVER = """
import json, sys
from typer.testing import CliRunner
from attn_cli.cli import app
outputs = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    outputs.append(result.stdout)
print(json.dumps(outputs))
"""


def attn_cli_outputs(commands: list[list[str]], env: dict[str, str], patch: str = "") -> list[str]:
    """What `attn-cli ARGS` writes to stdout for each of ``commands``, in a process with
    ``env`` on top of THREAD_SENSITIVE, SPLIT_SUMS_ON_THREADS and then ``patch`` executed first."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", threads.THREADS_ENV)}
    proc = subprocess.run(
        [sys.executable, "-c", SPLIT_SUMS_ON_THREADS + patch + DRIVER, json.dumps(commands)],
        capture_output=True, text=True, env=dict(base, **THREAD_SENSITIVE, **env), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


COMMANDS = [["run", LONG, "--max-tokens", "1000", *case, "-F", "json"] for case in TOY_CASES] + [
    ["run", LONG, "--max-tokens", "1000", *TOY_CASES[1], "-F", "csv"],
    ["run", LONG, "--max-tokens", "1000", *TOY_CASES[0], "-F", "table", "--show", "scaled,context", "--precision", "8"],
]


@pytest.mark.parametrize("variable", [threads.THREADS_ENV, "OMP_NUM_THREADS"])
def test_toy_bytes_are_the_same_at_one_and_two_threads(variable: str) -> None:
    """JSON, CSV and the tables, byte for byte, whichever count the user sets and however
    it is set, with a BLAS that sums differently on two threads (SPLIT_SUMS_ON_THREADS)."""
    one, two = (attn_cli_outputs(COMMANDS + [["run", "I saw a saw", "-t", "words", "-F", "json"]], {variable: n}) for n in ("1", "2"))
    for command, a, b in zip(COMMANDS, one, two):
        assert a == b, command[3:]
    assert json.loads(two[-1])["model"]["threads"] == 1


def test_the_thread_test_would_catch_a_toy_that_follows_the_setting() -> None:
    """The negative control: with the toy on the count the user set (the old rule), the
    same comparison finds different bytes."""
    commands = [COMMANDS[0], COMMANDS[1], COMMANDS[-1]]  # JSON of issue 18's two cases, and the table
    one, two = (attn_cli_outputs(commands, {threads.THREADS_ENV: n}, FOLLOW_THE_SETTING) for n in ("1", "2"))
    assert [a != b for a, b in zip(one, two)] == [True, True, True]


def test_a_checkpoint_records_its_thread_count(gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint runs on the count chosen for its work, or the user's, and JSON says which:
    the same count gives the same bytes."""
    outputs = {}
    for n in ("1", "2", "2"):
        monkeypatch.setenv(threads.THREADS_ENV, n)
        result = invoke("run", "--model", str(gpt2_folder), "The cat sat on the mat", "-F", "json")
        assert json.loads(result.stdout)["model"]["threads"] == int(n)
        outputs.setdefault(n, set()).add(result.stdout)
    assert len(outputs["2"]) == 1
    monkeypatch.delenv(threads.THREADS_ENV)
    result = invoke("run", "--model", str(gpt2_folder), "The cat sat on the mat", "-F", "json")
    assert json.loads(result.stdout)["model"]["threads"] == 1  # a sentence through a tiny model: small work
