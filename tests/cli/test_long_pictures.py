"""heatmap at any length: pooled maps built from blocks against the same pooling of transformers'
weights; the overview, the --query strips and a --window drawn alike from blocks and from tables;
the refusals. The memory at hand is made small by monkeypatch, so the texts stay short."""

from __future__ import annotations

from pathlib import Path

import checkpoints
import numpy as np
import pytest
import torch
from browser_support import Page, browser  # noqa: F401  (the fixture: headless Chromium)
from invoking import invoke

from attn_cli.analysis.pooling import PooledMap
from attn_cli.render.picture.panels import HeatmapOptions
from attn_cli.render.picture.pooled import LongView, long_figure
from attn_cli.sources.blocks import BlockPlan
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint import source as checkpoint_source

TEXT = checkpoints.LONG


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.one_per_type(tmp_path_factory)("mistral")


@pytest.mark.parametrize("how", ["max", "mean"])
def test_pooled_maps_from_blocks_equal_transformers_pooled(mistral: Path, how: str) -> None:
    ckpt = open_checkpoint(str(mistral))
    tokens = ckpt.tokenizer.encode(TEXT)
    layers = ckpt.trace(tokens, [0, 2], "weights", blocks=BlockPlan(rows=7, heads=(1, 2), pool=(20, how)))
    ref = checkpoints.reference(mistral, tokens.ids)
    for summary in layers:
        want = PooledMap([1, 2], len(tokens), len(tokens), 20, 20, how)
        want(0, ref.weights[summary.layer].float(), 0)
        assert summary.pooled_heads == (1, 2) and summary.pool_sizes == (want.row_size, want.column_size)
        torch.testing.assert_close(summary.pooled, want.result(), atol=1e-5, rtol=0)


def images(fig: object) -> list[np.ndarray]:
    return [np.asarray(ax.images[0].get_array()) for ax in fig.axes if ax.images]  # type: ignore[attr-defined]


@pytest.mark.parametrize("view", ["overview", "strips", "window"])
def test_blocks_and_tables_draw_the_same_picture(mistral: Path, view: str) -> None:
    import attn_cli

    query = {"overview": None, "strips": ["last:3", "0"], "window": "10:30"}[view]
    drawn = LongView(cells=40, window=(10, 30) if view == "window" else None, keys=(0, 30) if view == "window" else None)
    whole = attn_cli.trace(TEXT, model=mistral, layer=1, head=[0, 3], query=query)
    ckpt = open_checkpoint(str(mistral))
    tokens = ckpt.tokenizer.encode(TEXT)
    plan = BlockPlan(rows=9, queries=whole.queries, heads=(0, 3), pool=(40, "max"))
    blocked = whole.__class__(**{**vars(whole), "layers": tuple(ckpt.trace(tokens, [1], "weights", blocks=plan))})
    got, want = images(long_figure(blocked, HeatmapOptions(), drawn)), images(long_figure(whole, HeatmapOptions(), drawn))
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5)  # a band's softmax sums fewer zeros: 1e-6 apart


@pytest.mark.parametrize("view", ["overview", "strips", "window"])
def test_a_long_model_name_keeps_the_title_inside_the_picture(mistral: Path, view: str) -> None:
    """The title wraps between words where it is wider than the picture (a --window of one head cut
    its title at both sides); the control: the same title unwrapped overflows."""
    import dataclasses

    import attn_cli

    query = {"overview": None, "strips": ["last:3"], "window": "10:30"}[view]
    drawn = LongView(cells=40, window=(10, 30) if view == "window" else None, keys=(0, 30) if view == "window" else None)
    run = attn_cli.trace(TEXT, model=mistral, layer=1, head=0, query=query)
    run = dataclasses.replace(run, model=dataclasses.replace(run.model, source="some-org/" + "a-long-checkpoint-name-" * 2, path=None))
    fig = long_figure(run, HeatmapOptions(), drawn)
    fig.canvas.draw()
    title = fig._suptitle  # type: ignore[attr-defined]
    inside = fig.bbox
    box = title.get_window_extent()
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and "\n" in title.get_text()
    title.set_text(title.get_text().replace("\n", " "))
    assert title.get_window_extent().width > inside.width  # the control


def test_heatmap_without_room(mistral: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_source, "fits_at_hand", lambda parts, device: False)
    for args in ([], ["--query", "last:4"], ["--window", "100:140", "--keys", "90:140"], ["--pool", "mean", "--layer", "all"]):
        out = tmp_path / f"p{len(args)}.png"
        result = invoke("heatmap", TEXT, "--model", str(mistral), "--head", "0-1", *args, "-o", str(out))
        assert "note: the T x T tables of" in result.stderr and out.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--keys", "0:4"], "--keys chooses the columns of a --window"),
        (["--query", "last", "--what", "scores"], "--query and --window draw the weights"),
        (["--window", "5:2"], "B after A"),
        (["--window", "x"], "give A:B"),
    ],
)
def test_heatmap_refusals(mistral: Path, tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("heatmap", TEXT, "--model", str(mistral), *args, "-o", str(tmp_path / "x.png"), code=2)
    assert message in result.stderr and not (tmp_path / "x.png").exists()


def test_html_of_a_long_text(mistral: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: object) -> None:  # noqa: F811
    """The page where the tables do not fit: pooled maps, the heads' statistics as `heads` scores
    them, each chosen query's strongest keys as `run` finds them, a window; no script, no request."""
    import json

    rows = json.loads(invoke("run", TEXT, "--model", str(mistral), "--layer", "1", "--head", "0-1", "--query", "last", "-F", "json").stdout)
    monkeypatch.setattr(checkpoint_source, "fits_at_hand", lambda parts, device: False)
    page = tmp_path / "doc.html"
    args = ("--layer", "1", "--head", "0-1", "--query", "last", "--window", "100:130", "-o", str(page))
    result = invoke("html", TEXT, "--model", str(mistral), *args)
    assert "note: the T x T tables of" in result.stderr
    text = page.read_text()
    assert "<script" not in text and text.count("data:image/png;base64,") == 3  # the maps, the strips, the window
    assert "--query last --window 100:130" in text
    loaded = Page(browser, page, wait=False)  # type: ignore[arg-type]
    assert loaded.page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 300)")
    heads = [r.split("\t") for r in loaded.text("table").splitlines()[1:]]
    want = [rows["layers"][0]["heads"][h]["stats"] for h in (0, 1)]
    assert [float(cells[6]) for cells in heads] == pytest.approx([w["sink_score"] for w in want], abs=1e-3)
    strongest = int(loaded.page.locator("table").nth(1).locator("tr").nth(1).locator("td").nth(1).inner_text())
    weights = rows["layers"][0]["heads"][0]["rows"][0]["weights"]
    assert strongest == max(range(len(weights)), key=weights.__getitem__)
    # each picture zooms to its own resolution when clicked, and back: a CSS :target, no script
    window = "document.querySelector('#window img')"
    shown = loaded.page.evaluate(f"[{window}.clientWidth, {window}.naturalWidth]")
    assert shown[0] < shown[1]  # at the page's width, smaller than the picture
    loaded.page.click("#window a.in")
    zoomed = loaded.page.evaluate(f"[{window}.clientWidth, getComputedStyle(document.querySelector('#window')).position]")
    assert zoomed == [shown[1], "fixed"]
    loaded.page.click("#window a.out")
    assert loaded.page.evaluate(f"{window}.clientWidth") == pytest.approx(shown[0])
    loaded.close()
