"""`census --ray` on a local Ray: the same shard files and the same bytes as the local workers
(the shards and their merge are one code on every engine); without Ray installed, one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from invoking import invoke
from test_census_measures import corpus


def test_ray_gives_the_local_workers_bytes(minilm_path: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(corpus(70, seed=11)) + "\n", encoding="utf-8")  # 3 shards
    local, on_ray = tmp_path / "local.json", tmp_path / "ray.json"
    invoke("census", str(path), "--model", str(minilm_path), "--shard-size", "32", "--workers", "1", "-o", str(local))
    result = invoke("census", str(path), "--model", str(minilm_path), "--shard-size", "32", "--ray", "--workers", "2", "-o", str(on_ray))
    assert on_ray.read_bytes() == local.read_bytes()
    assert result.stderr.strip().splitlines()[-1].startswith("wrote ")  # Ray's own start-up lines are not shown
    for name in ("shard-00000.json", "shard-00001.json", "shard-00002.json"):
        assert (tmp_path / "ray.shards" / name).read_bytes() == (tmp_path / "local.shards" / name).read_bytes()


def test_without_ray_one_line(minilm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    path = tmp_path / "corpus.txt"
    path.write_text("one text\nanother\n", encoding="utf-8")
    result = invoke("census", str(path), "--model", str(minilm_path), "--ray", code=2)
    assert "--ray needs Ray: pip install 'attn-cli[ray]'" in result.stderr and "Traceback" not in result.stderr
    assert "add --ray" in invoke("census", str(path), "--ray-address", "auto", code=2).stderr
