"""A census's shards: written as they are done, merged in shard order, so that one worker, two
workers, a run resumed after shards went missing, one interrupted by Ctrl-C and resumed, and
`census merge DIR` all give the same JSON, byte for byte; the refusals that keep shards from
being mixed up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from invoking import invoke
from test_census_measures import corpus


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "corpus.txt"
    path.write_text("\n".join(corpus(150, seed=5)) + "\n", encoding="utf-8")  # 5 shards of 32 (--shard-size 32)
    return path


def census(minilm: Path, corpus_path: Path, *args: str, code: int = 0) -> Any:
    return invoke("census", str(corpus_path), "--model", str(minilm), "--shard-size", "32", *args, code=code)


def test_workers_resume_and_merge_give_the_same_bytes(minilm_path: Path, corpus_path: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    census(minilm_path, corpus_path, "--workers", "1", "-o", str(one))
    shards = tmp_path / "one.shards"
    assert sorted(p.name for p in shards.iterdir()) == ["manifest.json"] + [f"shard-0000{k}.json" for k in range(5)]
    census(minilm_path, corpus_path, "--workers", "2", "-o", str(two))
    assert one.read_bytes() == two.read_bytes()
    (shards / "shard-00001.json").unlink()
    (shards / "shard-00004.json").unlink()
    resumed = tmp_path / "resumed.json"
    census(minilm_path, corpus_path, "--resume", str(shards), "-o", str(resumed))
    assert resumed.read_bytes() == one.read_bytes()
    merged = invoke("census", "merge", str(shards), "-F", "json").stdout
    assert merged.encode("utf-8") == one.read_bytes()
    assert json.loads(merged)["texts"] == 150


def test_shards_are_not_mixed_up(minilm_path: Path, corpus_path: Path, tmp_path: Path) -> None:
    shards = tmp_path / "mine"
    census(minilm_path, corpus_path, "--limit", "40", "--shards", str(shards), "-F", "json")
    assert "holds a census's shards already: add --resume" in census(minilm_path, corpus_path, "--limit", "40", "--shards", str(shards), code=2).stderr
    other = census(minilm_path, corpus_path, "--limit", "41", "--resume", str(shards), code=2).stderr
    assert "its shards were made with another corpus" in other
    assert "another set of options" in census(minilm_path, corpus_path, "--limit", "40", "--epsilon", "0.5", "--resume", str(shards), code=2).stderr
    (shards / "shard-00000.json").unlink()
    missing = invoke("census", "merge", str(shards), code=2).stderr
    assert "1 of 2 shards are missing (the first: shard-00000.json)" in missing and f"--resume {shards}" in missing
    assert "holds no census shards" in invoke("census", "merge", str(tmp_path), code=2).stderr
    assert "--resume" in invoke("census", str(corpus_path), "--resume", str(tmp_path / "none"), code=2).stderr
    assert "census takes one CORPUS" in invoke("census", str(corpus_path), str(shards), code=2).stderr


def test_without_o_the_shards_are_temporary(minilm_path: Path, corpus_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    census(minilm_path, corpus_path, "--limit", "5", "-F", "json")
    assert list(tmp_path.glob("attn-cli-census-*")) == []


def test_ctrl_c_keeps_the_shards_done_and_resume_finishes(minilm_path: Path, corpus_path: Path, tmp_path: Path) -> None:
    """The whole process group interrupted (as a terminal does) once a shard is on disk: exit 130,
    one line naming the command that goes on, the shards kept, no worker left; resumed, the bytes
    of a run straight through."""
    out = tmp_path / "out.json"
    args = [sys.executable, "-m", "attn_cli", "census", str(corpus_path), "--model", str(minilm_path), "--shard-size", "32", "--workers", "2", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)
    shards = tmp_path / "out.shards"
    deadline = time.monotonic() + 60
    while not list(shards.glob("shard-*.json")) and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    lines = err.decode().strip().splitlines()
    assert lines[-2:] == [f"census: the shards done are in {shards}; run the same command with --resume {shards} to finish",
                          "attn-cli: error: interrupted"]  # fmt: skip
    done = len(list(shards.glob("shard-*.json")))
    assert 1 <= done < 5 and not out.exists()
    left = deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-g", str(child.pid)], capture_output=True).stdout
        if not left:
            break
        time.sleep(0.1)
    assert left == b""  # no worker left: each ends once its census is gone
    subprocess.run([*args[:-2], "--resume", str(shards), "-o", str(out)], check=True, env=env, capture_output=True)
    straight = tmp_path / "straight.json"
    census(minilm_path, corpus_path, "--workers", "1", "-o", str(straight))
    assert out.read_bytes() == straight.read_bytes()
