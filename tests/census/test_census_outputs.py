"""A census's pictures (-o NAME.png|svg|pdf), its page (-o NAME.html) and the Python API
(``attn_cli.census``), each the same numbers as the JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from invoking import invoke

import attn_cli
from attn_cli.render.picture.census import GRIDS, census_figure

TEXTS = ["The cat sat on the mat.", "He said, hello there.", "A dog barked at the moon, loudly.", "Then it was quiet."]


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("outputs") / "corpus.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


def test_the_picture(minilm_path: Path, corpus_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "census.png"
    result = invoke("census", str(corpus_path), "--model", str(minilm_path), "-o", str(out))
    assert result.stdout == f"{out}\n" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(invoke("census", "merge", str(tmp_path / "census.shards"), "-F", "json").stdout)
    fig = census_figure(data, "MiniLM")
    axes = fig.get_axes()
    curves = axes[0]
    assert [line.get_label() for line in curves.get_lines()] == ["[CLS] / first token", "[SEP] / EOS", '". " or ", "']
    cls_by_layer = [sum(h["measures"]["cls"] for h in data["heads"] if h["layer"] == layer) / 12 for layer in range(6)]
    assert list(curves.get_lines()[0].get_ydata()) == pytest.approx(cls_by_layer)
    grids = [ax for ax in axes if ax.get_images()]
    assert [ax.get_title() for ax in grids] == [title for _, title, _, _ in GRIDS]
    previous = grids[0].get_images()[0].get_array()
    assert previous[0, 2] == pytest.approx(data["heads"][2]["measures"]["previous"])  # layer 0, head 2
    for fmt in ("svg", "pdf"):
        invoke("census", str(corpus_path), "--model", str(minilm_path), "-o", str(tmp_path / f"c.{fmt}"))
        assert (tmp_path / f"c.{fmt}").stat().st_size > 1000


def test_the_page(minilm_path: Path, corpus_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "census.html"
    invoke("census", str(corpus_path), "--model", str(minilm_path), "-o", str(out))
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "default-src 'none'" in page and "data:image/png;base64," in page
    assert len(re.findall(r"<tr><td>\d+</td><td>\d+</td>", page)) == 6 * 12
    assert "a census of 4 texts" in page and "Made by <code>attn-cli census" in page


def test_the_python_api(minilm_path: Path, corpus_path: Path) -> None:
    made = attn_cli.census(TEXTS, model=minilm_path)
    cli = json.loads(invoke("census", str(corpus_path), "--model", str(minilm_path), "-F", "json").stdout)
    for mine, theirs in zip(made.heads, cli["heads"]):
        assert mine["measures"] == theirs["measures"] and mine["se"] == theirs["se"] and mine["flags"] == theirs["flags"]
    assert made.sink_rate == cli["sink_rate"] and made.to_csv().startswith("layer,head,cls,cls_se")
    assert json.loads(made.to_json())["texts"] == 4 and "<table>" in made._repr_html_()
    from_path = attn_cli.census(corpus_path, model=minilm_path)
    assert from_path.heads[5]["measures"] == made.heads[5]["measures"]
    toy = attn_cli.census(["the cat sat", "", "a dog ran"], heads=2, causal=True)
    assert toy.to_dict()["empty"] == 1 and toy.heads[0]["measures"]["first_row_entropy_nats"] == 0.0
    with pytest.raises(attn_cli.api.census.UsageError):
        attn_cli.census([1, 2])  # type: ignore[list-item]
    from attn_cli.text.corpus import CorpusError

    with pytest.raises(CorpusError):
        attn_cli.census(["", "  "])
