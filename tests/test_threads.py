"""attn_cli.threads: the count follows the work and the user's setting, never the numbers."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from attn_cli import threads
from attn_cli.cli import app


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


@pytest.mark.skipif(threads.default_threads() < 2, reason="one core: nothing to compare")
@pytest.mark.parametrize("args", [["--heads", "4", "--causal"], ["--d-model", "64", "--heads", "2", "--out-proj"]])
def test_json_bytes_are_the_same_at_one_and_two_threads(args: list[str]) -> None:
    text = " ".join(f"word{i % 97}" for i in range(400))
    outputs = []
    for n in (1, 2):
        with threads.using_threads(n):
            result = CliRunner().invoke(app, ["run", text, "-t", "words", "-F", "json", "--max-tokens", "1000", *args])
        assert result.exit_code == 0, result.stderr
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
