"""The model view (`heatmap` with several layers): one picture of layers x heads.

The figure tests read the panels back from the Figure and compare them with the
trace's weights, and for a checkpoint with transformers' eager attention; the
command tests read the files' magic bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from pathlib import Path

import checkpoints
import invoking
import numpy as np
import pytest
import torch

from attn_cli.pipeline import open_source
from attn_cli.records.about import About
from attn_cli.records.selection import IndexSpec
from attn_cli.records.trace import Trace
from attn_cli.render.picture.canvas import write_figure
from attn_cli.render.picture.heatmap import What, heatmap_figure
from attn_cli.render.picture.model_view import MAX_MODEL_PANELS, check_model_view, model_view_figure
from attn_cli.render.picture.panels import SPECIAL_COLOR, HeatmapOptions
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.spec import SourceSpec
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource

invoke = functools.partial(invoking.invoke, code=None, command=("heatmap",))

FOX = "The quick brown fox jumps over the lazy dog"
TEXT = "the cat sat on the mat"


def synthetic(text: str = FOX, layers: int = 12, heads: int = 12, causal: bool = False) -> Trace:
    """A layers x heads trace from toy layers with different seeds: a 12 x 12 model in a second."""
    runs = [ToySource(Config(tokenizer="words", heads=heads, d_model=4 * heads, causal=causal, seed=i)).run(text) for i in range(layers)]
    kept = tuple(dataclasses.replace(run.layers[0], layer=i) for i, run in enumerate(runs))
    return dataclasses.replace(runs[0], layers=kept, model=dataclasses.replace(runs[0].model, layers=layers))


def checkpoint_trace(folder: Path, text: str) -> Trace:
    spec = SourceSpec(Config(), model=str(folder), layers=IndexSpec.parse("all", "--layer"), heads=IndexSpec.parse("all", "--head"))
    source = open_source(spec)
    return source.run_each([text], spec.select(source, everything=False)).__iter__().__next__()


def panels(fig) -> list:
    return [ax for ax in fig.axes if ax.images]


def title(fig) -> str:
    return fig.texts[0].get_text()


def long_text(n_words: int) -> str:
    return " ".join(f"w{i}" for i in range(n_words))


def test_twelve_by_twelve_panels_labelled_on_one_scale_with_the_traces_weights() -> None:
    trace = synthetic(causal=True)
    fig = model_view_figure(trace)
    axes = panels(fig)
    assert [ax.get_label() for ax in axes] == [f"layer{layer}/head{h}" for layer in range(12) for h in range(12)]
    assert [ax.get_title() for ax in axes[:12]] == [f"head {h}" for h in range(12)]
    assert all(ax.get_title() == "" for ax in axes[12:])
    assert [ax.get_ylabel() for ax in axes[::12]] == [f"layer {layer}" for layer in range(12)]
    assert {ax.images[0].get_clim() for ax in axes} == {(0.0, 1.0)}  # one fixed scale
    assert len([ax for ax in fig.axes if not ax.images]) == 1  # one colour bar
    n = len(trace.tokens)
    mask = np.triu(np.ones((n, n), dtype=bool), k=1)
    for ax in axes:
        layer, head = (int(part.removeprefix("layer").removeprefix("head")) for part in ax.get_label().split("/"))
        drawn = ax.images[0].get_array()
        np.testing.assert_array_equal(np.ma.getmaskarray(drawn), mask)
        np.testing.assert_array_equal(drawn.compressed(), trace.layers[layer].weights[head].numpy()[~mask])
    width, height = fig.get_size_inches() * fig.dpi
    assert max(width, height) <= 3000


def test_head_chooses_the_columns_and_token_labels_sit_on_the_edges() -> None:
    trace = synthetic(layers=3, heads=4)
    axes = panels(model_view_figure(trace, HeatmapOptions(heads=(1, 3))))
    assert [ax.get_label() for ax in axes] == ["layer0/head1", "layer0/head3", "layer1/head1", "layer1/head3", "layer2/head1", "layer2/head3"]
    words = FOX.split()
    assert [t.get_text() for t in axes[0].get_yticklabels()] == [w if words.count(w) == 1 else f"{w}#{i}" for i, w in enumerate(words)]
    assert axes[1].get_yticklabels() == [] or all(t.get_text() == "" for t in axes[1].get_yticklabels())
    assert len([t for t in axes[-1].get_xticklabels() if t.get_text()]) == len(words)
    assert all(t.get_text() == "" for t in axes[0].get_xticklabels())


def test_panels_too_small_for_labels_have_none_and_the_text_in_the_title() -> None:
    trace = synthetic(long_text(60), layers=2, heads=3)
    fig = model_view_figure(trace)
    assert all(not t.get_text() for ax in panels(fig) for t in ax.get_xticklabels() + ax.get_yticklabels())
    assert "w0 w1 w2" in title(fig) and "60 tokens" in title(fig)


def test_a_checkpoints_panels_equal_transformers_and_special_tokens_are_marked(bert_folder: Path) -> None:
    trace = checkpoint_trace(bert_folder, TEXT)
    fig = model_view_figure(trace)
    axes = panels(fig)
    assert len(axes) == 3 * 4
    ref = checkpoints.reference(bert_folder, tuple(trace.tokens.ids))
    for ax in axes:
        layer, head = (int(part.removeprefix("layer").removeprefix("head")) for part in ax.get_label().split("/"))
        torch.testing.assert_close(torch.from_numpy(np.ma.getdata(ax.images[0].get_array())), ref.weights[layer][head], atol=1e-5, rtol=0)
    labels = {t.get_text(): t for t in axes[0].get_yticklabels()}
    assert labels["[CLS]"].get_color() == SPECIAL_COLOR and labels["[CLS]"].get_fontstyle() == "italic"
    assert labels["[SEP]"].get_color() == SPECIAL_COLOR
    ordinary = [t for i, t in enumerate(axes[0].get_yticklabels()) if not trace.tokens.is_special(i)]
    assert ordinary and all(t.get_color() != SPECIAL_COLOR for t in ordinary)
    assert "special tokens ([CLS], [SEP])" in title(fig)


def test_without_labels_special_tokens_keep_a_purple_tick(bert_folder: Path) -> None:
    trace = checkpoint_trace(bert_folder, TEXT)
    fig = model_view_figure(trace, HeatmapOptions(size=(4.0, 3.0)))
    first = panels(fig)[0]
    assert all(not t.get_text() for t in first.get_yticklabels())
    special = [i for i in range(len(trace.tokens)) if trace.tokens.is_special(i)]
    assert list(first.get_yticks()) == special
    assert all(tick.tick1line.get_color() == SPECIAL_COLOR for tick in first.yaxis.get_major_ticks())


@pytest.mark.parametrize(
    ("draw", "text", "hint"),
    [
        ("model", long_text(120), True),  # rows of 120 keys: every weight is near 1/120
        ("model", FOX, False),
        ("layer", long_text(120), True),
        ("layer", FOX, False),
    ],
)
def test_a_nearly_one_colour_picture_says_so_and_names_log(draw: str, text: str, hint: bool) -> None:
    if draw == "model":
        trace = synthetic(text, layers=2, heads=2)
        words, logged = title(model_view_figure(trace)), title(model_view_figure(trace, HeatmapOptions(log=True)))
    else:
        trace = ToySource(Config(tokenizer="words", heads=2)).run(text)
        words = heatmap_figure(trace)._suptitle.get_text()
        logged = heatmap_figure(trace, HeatmapOptions(log=True))._suptitle.get_text()
    assert ("nearly one colour" in words and "--log" in words) is hint
    assert "nearly one colour" not in logged  # --log is the cure, so it is not offered again


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (HeatmapOptions(what=What.scores), "draws the weights"),
        (HeatmapOptions(what=What.all), "draws the weights"),
        (HeatmapOptions(per_head_scale=True), "shares one colour scale"),
        (HeatmapOptions(annotate=True), "too small for numbers"),
    ],
)
def test_what_the_model_view_cannot_draw_is_a_usage_error(options: HeatmapOptions, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_model_view(options, 6, 12)


def test_the_panel_cap_lets_12_by_12_through_and_stops_past_it() -> None:
    check_model_view(HeatmapOptions(), 12, 12)
    check_model_view(HeatmapOptions(), 24, 24)
    assert MAX_MODEL_PANELS == 24 * 24
    with pytest.raises(UsageError, match="choose fewer with --layer and --head"):
        check_model_view(HeatmapOptions(), 25, 24)


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_every_format_draws(fmt: str) -> None:
    buffer = io.BytesIO()
    assert write_figure(model_view_figure(synthetic(layers=6)), buffer, fmt) == []
    assert buffer.getvalue()[:5] in (b"\x89PNG\r", b"<?xml", b"%PDF-")


# -- the command -----------------------------------------------------------------------------


@pytest.mark.parametrize(("ext", "magic"), [("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF-")])
def test_layer_all_writes_one_picture_of_every_head(bert_folder: Path, tmp_path: Path, ext: str, magic: bytes) -> None:
    out = tmp_path / f"model.{ext}"
    result = invoke(TEXT, "--model", str(bert_folder), "--layer", "all", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{out}\n"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    assert out.read_bytes().startswith(magic)


def test_split_heads_with_several_layers_writes_a_column_per_head(bert_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.png"
    result = invoke(TEXT, "--model", str(bert_folder), "--layer", "0-1", "--head", "0,2", "--split-heads", "-o", str(out))
    assert result.exit_code == 0, result.output
    names = [tmp_path / "model.head0.png", tmp_path / "model.head2.png"]
    assert result.stdout.splitlines() == [str(p) for p in names]
    assert sorted(tmp_path.iterdir()) == names


@pytest.mark.parametrize(("args", "message"), [(["--what", "scores"], "draws the weights"), (["--per-head-scale"], "shares one colour scale")])
def test_several_layers_refuse_what_they_cannot_draw(bert_folder: Path, tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(TEXT, "--model", str(bert_folder), "--layer", "all", *args, "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", [None, (4.0, 3.0), (6.0, 9.0)])
def test_the_title_fits_the_figure_even_with_a_long_model_name(size: tuple[float, float] | None) -> None:
    trace = synthetic(layers=3, heads=4)
    long_name = "some-organisation/a-rather-long-model-name-finetuned-for-attention-studies-v2"
    trace = dataclasses.replace(trace, model=dataclasses.replace(trace.model, source=long_name, config=None, about=About(), family="gpt2"))
    fig = model_view_figure(trace, HeatmapOptions(size=size))
    fig.canvas.draw()
    box = fig.texts[0].get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, title(fig)
    assert "studies-v2" in title(fig)  # a name too long for the width keeps its end


def test_a_model_view_too_big_for_free_memory_names_layer_and_head(monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError

    trace = synthetic(long_text(1000), layers=4, heads=4)
    monkeypatch.setattr(budget, "available_bytes", lambda: 450 * 2**20)  # one panel would fit
    with pytest.raises(TooLargeError, match="choose fewer layers and heads with --layer and --head"):
        model_view_figure(trace)


def _overlapping(boxes: list) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


@pytest.mark.parametrize("size", [None, (4.0, 3.0), (3.0, 2.5)])
def test_head_and_layer_labels_never_overlap(size: tuple[float, float] | None) -> None:
    """Where "head 11" and "layer 5" do not fit the panels' spacing, numbers do, with
    "head →" and "layer ↓" said once."""
    fig = model_view_figure(synthetic(layers=6, heads=12), HeatmapOptions(size=size))
    fig.canvas.draw()
    axes = panels(fig)
    heads = [ax.title for ax in axes[:12] if ax.get_title()]
    layers = [ax.yaxis.label for ax in axes[::12] if ax.get_ylabel()]
    assert not _overlapping([t.get_window_extent() for t in heads])
    assert not _overlapping([t.get_window_extent() for t in layers])
    captions = [t.get_text() for t in fig.texts[1:]]
    if size is None:
        assert [t.get_text() for t in heads] == [f"head {h}" for h in range(12)] and layers[5].get_text() == "layer 5"
        assert captions == []
    else:
        assert heads[0].get_text() == "0" and layers[0].get_text() == "0" and captions == ["head →", "layer ↓"]
        assert len(heads) >= 6 and len(layers) >= 3  # thinned when even the numbers crowd, never gone
    if size == (4.0, 3.0):
        assert [t.get_text() for t in heads] == [str(h) for h in range(12)]  # the numbers fit: all of them
    for text in fig.texts:  # every caption inside the figure
        box = text.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0 and box.y1 <= fig.bbox.height, text.get_text()
