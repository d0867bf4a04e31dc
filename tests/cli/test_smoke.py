"""The headline command works end to end, offline, through a real process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def attn(*args: str, input: str | None = None, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "attn_cli", *args], input=input, capture_output=True, text=True, env=env, timeout=120
    )


def test_headline_sentence_falls_back_to_words_offline() -> None:
    proc = attn("run", "Life is short, eat dessert first", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tokenizer"] == "words"
    assert [t["id"] for t in data["tokens"]] == [0, 4, 5, 2, 1, 3]
    assert "words" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.integration
def test_headline_sentence_with_gpt2(rank_dir) -> None:
    proc = attn("run", "Life is short, eat dessert first", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tokenizer"] == "gpt2"
    assert [t["id"] for t in data["tokens"]] == [14662, 318, 1790, 11, 4483, 23084, 717]
    assert proc.stderr == ""


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``attn-cli ARGV``."""
    code = (
        f"import sys; from attn_cli.cli import app; sys.argv = {['attn-cli', *argv]!r}\n"
        "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(' '.join(sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.splitlines()[-1].split())  # the last line: the JSON (or help) comes before it


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in ("torch", "matplotlib"))


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["heatmap", "--help"]], ids=" ".join)
def test_help_does_not_import_torch(argv: list[str]) -> None:
    """Not even --model's help, which names the model_types the family modules declare."""
    assert heavy(imported_by(*argv)) == []


def test_the_import_check_sees_torch_where_a_command_loads_it() -> None:
    """The negative control: a run of the toy loads torch, and the check says so."""
    assert "torch" in heavy(imported_by("run", "I saw a saw", "-t", "words", "-F", "json"))


def test_json_output_does_not_import_rich() -> None:
    """JSON is written as bytes: the tables module, and rich with it, load only for tables."""
    loaded = {m for m in imported_by("run", "I saw a saw", "-t", "words", "-F", "json") if m.split(".")[0] == "rich"}
    assert not loaded, sorted(loaded)
