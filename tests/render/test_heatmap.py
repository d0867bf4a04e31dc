"""`attn-cli heatmap`: the figure shows the computed matrices, and the files are real pictures.

The figure tests read the data back from the returned Figure (``ax.images[0]``)
and compare it with the run's own tensors; the file tests read the magic bytes
and the PNG header rather than trusting the extension.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import invoking
import numpy as np
import pytest
from conftest import REPO, skip_or_fail
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attn_cli.cli import heatmap as heatmap_cli
from attn_cli.cli import output as cli_output
from attn_cli.records.about import About
from attn_cli.records.trace import Trace
from attn_cli.render.picture.canvas import (
    FIXED_DRAW_BYTES,
    MAX_ANNOTATED_CELLS,
    annotate_refusal,
    grid_shape,
    picture_bytes,
    shorten,
    tick_step,
    write_figure,
)
from attn_cli.render.picture.heatmap import What, heatmap_figure
from attn_cli.render.picture.panels import MASKED_COLOR, HeatmapOptions
from attn_cli.render.picture.titles import fit_title, text_width
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource

invoke = functools.partial(invoking.invoke, code=None, command=("heatmap",))

FOX = "The quick brown fox jumps over the lazy dog"
LIFE = "Life is short, eat dessert first"


def make_run(text: str = FOX, **config: object) -> Trace:
    return ToySource(Config(tokenizer="words", **config)).run(text)  # type: ignore[arg-type]


def image_axes(fig):
    """The heatmap panels (colour bars draw a mesh, not an image)."""
    return [ax for ax in fig.axes if ax.images]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def long_text(n_words: int = 512) -> str:
    # Distinct-ish words from a fixed recipe: deterministic, and long enough to need thinning.
    syllables = ["ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "pe", "du"]
    return " ".join(syllables[i % 10] + syllables[(i // 10) % 10] + syllables[(i // 100) % 10] for i in range(n_words))


# -- the figure: what is drawn ---------------------------------------------------------------


def test_drawn_matrix_equals_the_computed_weights() -> None:
    run = make_run(LIFE)
    fig = heatmap_figure(run)
    (ax,) = image_axes(fig)
    drawn = ax.images[0].get_array()
    np.testing.assert_array_equal(np.ma.getdata(drawn), run.layers[0].weights[0].numpy())
    assert not np.ma.getmaskarray(drawn).any()
    assert ax.images[0].get_clim() == (0.0, 1.0)  # weights: a fixed 0..1 scale


def test_rows_are_queries_and_columns_keys_labelled_with_tokens() -> None:
    run = make_run("I saw a saw")
    (ax,) = image_axes(heatmap_figure(run))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["I", "saw#1", "a", "saw#3"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["I", "saw#1", "a", "saw#3"]
    assert ax.get_ylabel() == "query" and ax.get_xlabel() == "key"
    # imshow puts row i of the matrix at y = i: the query's row, not its transpose.
    assert ax.images[0].get_array()[1, 0] == pytest.approx(float(run.layers[0].weights[0, 1, 0]))


def test_causal_cells_are_masked_and_painted_grey_not_as_zero() -> None:
    run = make_run(FOX, causal=True)
    fig = heatmap_figure(run)
    (ax,) = image_axes(fig)
    drawn = ax.images[0].get_array()
    n = len(run.tokens)
    expected_mask = np.triu(np.ones((n, n), dtype=bool), k=1)
    np.testing.assert_array_equal(np.ma.getmaskarray(drawn), expected_mask)
    np.testing.assert_array_equal(drawn.compressed(), run.layers[0].weights[0].numpy()[~expected_mask])

    # The pixels: a masked cell has the neutral grey; a visible cell has the colour map's colour.
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())
    height = pixels.shape[0]

    def pixel(row: int, col: int) -> np.ndarray:
        x, y = ax.transData.transform((col, row))
        return pixels[int(height - y), int(x), :3]

    grey = np.array([int(MASKED_COLOR[i : i + 2], 16) for i in (1, 3, 5)])
    np.testing.assert_allclose(pixel(0, n - 1), grey, atol=2)
    zero_colour = np.array(ax.images[0].cmap(0.0)[:3]) * 255
    assert np.abs(pixel(0, n - 1) - zero_colour).max() > 60
    assert np.abs(pixel(n - 1, 0) - grey).max() > 20


def test_multi_head_grid_has_one_panel_per_head_on_a_shared_scale() -> None:
    run = make_run(FOX, heads=4, causal=True)
    fig = heatmap_figure(run)
    panels = image_axes(fig)
    assert len(panels) == 4
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2", "head 3"]
    future = np.triu(np.ones((9, 9), dtype=bool), k=1)
    for h, ax in enumerate(panels):
        drawn = ax.images[0].get_array()
        np.testing.assert_array_equal(np.ma.getmaskarray(drawn), future)
        np.testing.assert_array_equal(drawn.compressed(), run.layers[0].weights[h].numpy()[~future])
        assert ax.images[0].get_clim() == (0.0, 1.0)
    # One colour bar for the whole grid.
    assert len(fig.axes) == 5


def test_per_head_scale_gives_each_head_its_own_limits() -> None:
    run = make_run(FOX, heads=4)
    fig = heatmap_figure(run, HeatmapOptions(per_head_scale=True))
    panels = image_axes(fig)
    tops = [ax.images[0].get_clim()[1] for ax in panels]
    assert tops == pytest.approx([float(run.layers[0].weights[h].max()) for h in range(4)])
    assert len(set(tops)) == 4
    assert len(fig.axes) == 8  # a colour bar per panel


def test_scores_are_on_a_diverging_scale_centred_on_zero() -> None:
    run = make_run(FOX, heads=2)
    shared = image_axes(heatmap_figure(run, HeatmapOptions(what=What.scores)))
    extent = float(run.layers[0].scores.abs().max())
    for h, ax in enumerate(shared):
        np.testing.assert_array_equal(np.ma.getdata(ax.images[0].get_array()), run.layers[0].scores[h].numpy())
        assert ax.images[0].get_clim() == pytest.approx((-extent, extent))
        assert ax.images[0].cmap.name.startswith("RdBu_r")
    own = image_axes(heatmap_figure(run, HeatmapOptions(what=What.scores, per_head_scale=True)))
    for h, ax in enumerate(own):
        top = float(run.layers[0].scores[h].abs().max())
        assert ax.images[0].get_clim() == pytest.approx((-top, top))


def test_what_all_draws_scores_scaled_and_weights_per_head() -> None:
    run = make_run(LIFE, heads=2, causal=True)
    panels = image_axes(heatmap_figure(run, HeatmapOptions(what=What.all)))
    assert [ax.get_label() for ax in panels] == [
        "scores/head0", "scaled/head0", "weights/head0", "scores/head1", "scaled/head1", "weights/head1",
    ]
    n = len(run.tokens)
    mask = np.triu(np.ones((n, n), dtype=bool), k=1)
    scaled = run.layers[0].scaled_scores
    expected = [run.layers[0].scores[0], scaled[0], run.layers[0].weights[0], run.layers[0].scores[1], scaled[1], run.layers[0].weights[1]]
    for ax, matrix in zip(panels, expected):
        drawn = ax.images[0].get_array()
        if ax.get_label().startswith("scores/"):  # raw Q K^T exists for every pair: the mask comes after it
            assert not np.ma.getmaskarray(drawn).any()
            np.testing.assert_allclose(np.ma.getdata(drawn), matrix.numpy(), rtol=1e-6)
            continue
        np.testing.assert_array_equal(np.ma.getmaskarray(drawn), mask)
        np.testing.assert_allclose(drawn.compressed(), matrix.numpy()[~mask], rtol=1e-6)


def test_head_picks_one_head() -> None:
    run = make_run(FOX, heads=4)
    fig = heatmap_figure(run, HeatmapOptions(heads=(2,)))
    (ax,) = image_axes(fig)
    np.testing.assert_array_equal(np.ma.getdata(ax.images[0].get_array()), run.layers[0].weights[2].numpy())
    assert ax.get_title() == "head 2"
    with pytest.raises(UsageError, match="--head 4 is out of range"):
        heatmap_figure(run, HeatmapOptions(heads=(4,)))


def test_title_names_the_configuration() -> None:
    run = make_run(FOX, heads=4, causal=True, seed=7)
    title = heatmap_figure(run)._suptitle.get_text()
    for part in ("Attention weights", FOX, "tokenizer words", "seed 7", "heads 4", "d_k 4", "causal"):
        assert part in title
    assert "not causal" in heatmap_figure(make_run(FOX))._suptitle.get_text()


LONG_MODEL = "/home/someone/experiments/checkpoints/2024-06-runs/gpt2-medium-finetuned-on-support-tickets-v3"


def trained_looking(run: Trace, name: str = LONG_MODEL) -> Trace:
    """A toy run titled as a trained model's (no toy config or words, a long --model path)."""
    return dataclasses.replace(run, model=dataclasses.replace(run.model, config=None, about=About(), source=name, family="gpt2"))


def title_extent(fig) -> tuple[float, float, float]:
    """(left, right, figure width) of the drawn title, in pixels."""
    fig.canvas.draw()
    box = fig._suptitle.get_window_extent()
    return box.x0, box.x1, fig.bbox.width


@pytest.mark.parametrize(
    ("run_config", "options"),
    [
        ({"causal": True}, HeatmapOptions(size=(4, 3))),
        ({"heads": 4}, HeatmapOptions(heads=(1,), size=(4, 3))),
        ({"heads": 4, "causal": True}, HeatmapOptions(heads=(2,))),  # what --split-heads draws per file
        ({"causal": True, "scale": False}, HeatmapOptions(what=What.scaled, size=(4, 3))),
        ({"heads": 2}, HeatmapOptions(what=What.all, size=(5, 6))),
        ({"heads": 4, "trained": True}, HeatmapOptions()),
        ({"heads": 4, "trained": True}, HeatmapOptions(heads=(3,), size=(4, 3))),
    ],
)
def test_the_title_fits_the_figure(run_config: dict, options: HeatmapOptions) -> None:
    config = dict(run_config)
    trained = config.pop("trained", False)
    run = make_run("The quick brown fox jumps", **config)
    fig = heatmap_figure(trained_looking(run) if trained else run, options)
    left, right, width = title_extent(fig)
    assert 0 <= left and right <= width, fig._suptitle.get_text()
    if trained:  # a path too long for the width keeps its end, the model's name
        assert "support-tickets-v3" in fig._suptitle.get_text()


def axis_labels_outside(fig: Figure) -> list[tuple[str, float, float, float, float]]:
    """Each panel's "key" and "query" label that does not lie wholly inside the figure, as drawn last."""
    renderer = fig.canvas.get_renderer()
    outside = []
    for ax in image_axes(fig):
        for label in (ax.xaxis.label, ax.yaxis.label):
            box = label.get_window_extent(renderer)
            if label.get_text() and not (box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height):
                outside.append((label.get_text(), *box.extents))
    return outside


@pytest.mark.parametrize(
    ("text", "options"),
    [
        (" ".join(["extraordinarily"] * 30), HeatmapOptions(what=What.all)),  # long tick labels under three panels
        (" ".join(["x"] * 16), HeatmapOptions()),  # one panel: the first pass leaves "key" a pixel low
    ],
)
def test_the_axis_labels_stay_inside_the_picture(text: str, options: HeatmapOptions) -> None:
    fig = heatmap_figure(make_run(text), options)
    write_figure(fig, io.BytesIO(), "png")
    assert [ax.get_xlabel() for ax in image_axes(fig)] == ["key"] * len(image_axes(fig))
    assert axis_labels_outside(fig) == []
    # the control: saved as it was, with the one pass of constrained layout a draw runs, the
    # key label falls off the bottom edge
    old = heatmap_figure(make_run(text), options)
    old.savefig(io.BytesIO(), format="png", dpi=old.dpi)
    assert [label for label, *_ in axis_labels_outside(old)][:1] == ["key"]


def test_no_scale_is_named_in_the_title() -> None:
    assert "unscaled" in heatmap_figure(make_run(LIFE, scale=False))._suptitle.get_text()
    assert "unscaled" not in heatmap_figure(make_run(LIFE))._suptitle.get_text()


def test_a_small_figure_labels_every_token_at_a_smaller_font() -> None:
    run = make_run("one two three four five six")
    (ax,) = image_axes(heatmap_figure(run, HeatmapOptions(size=(4, 3))))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["one", "two", "three", "four", "five", "six"]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    assert ax.get_yticklabels()[0].get_fontsize() < 10  # the default at this length


@pytest.mark.parametrize(
    ("lines", "width", "expected"),
    [
        ([["Attention weights: “The quick brown fox jumps over the lazy dog”"]], 150, "…”"),  # the quote stays closed
        ([["a/long/path/to/the/model-name", "heads 4"]], 90, "…"),
        ([["nearly one colour: 99% of the weights are under 0.05; --log shows their differences"]], 120, "--log"),
    ],
)
def test_fit_title_wraps_between_parts_and_shortens_only_what_cannot_wrap(lines: list, width: float, expected: str) -> None:
    fitted = fit_title(lines, width, 10)
    assert all(text_width(line, 10) <= width for line in fitted.split("\n"))
    assert expected in fitted
    if "path" in lines[0][0]:
        assert fitted.split("\n")[0].endswith("model-name") and fitted.split("\n")[1] == "heads 4"
    if "--log" in lines[0][0]:  # prose wraps: every word is kept
        assert fitted.replace("\n", " ") == lines[0][0]


@pytest.mark.parametrize(
    ("n_tokens", "n_panels", "n_kinds", "fix"),
    [
        (60, 1, 1, "at most 50 tokens (this one has 60)"),  # one head already: --head cannot help
        (30, 4, 1, "--head N"),
        (30, 6, 3, "--what weights"),  # --what all of two heads: one matrix of one head fits
        (30, 3, 3, "--what weights"),  # --what all of one head
    ],
)
def test_the_annotate_refusal_names_what_would_fit(n_tokens: int, n_panels: int, n_kinds: int, fix: str) -> None:
    message = annotate_refusal(n_tokens, n_panels, n_kinds)
    assert fix in message and "drop --annotate" in message
    if n_tokens * n_tokens > MAX_ANNOTATED_CELLS:
        assert "--head" not in message


@pytest.mark.parametrize(
    ("text", "heads", "annotate", "expected"),
    [
        (LIFE, 1, None, 36),  # small: every cell gets its number
        (LIFE, 1, False, 0),
        ("a b c", 1, None, 9),
    ],
)
def test_cell_annotations(text: str, heads: int, annotate: bool | None, expected: int) -> None:
    fig = heatmap_figure(make_run(text, heads=heads), HeatmapOptions(annotate=annotate))
    (ax,) = image_axes(fig)
    assert len(ax.texts) == expected
    if expected:
        weights = make_run(text, heads=heads).layers[0].weights[0]
        assert ax.texts[1].get_text() == f"{float(weights[0, 1]):.2f}"


def test_causal_annotations_skip_masked_cells() -> None:
    (ax,) = image_axes(heatmap_figure(make_run(LIFE, causal=True)))
    assert len(ax.texts) == 6 * 7 // 2


def test_forced_annotations_on_a_huge_matrix_are_refused_not_hung() -> None:
    run = make_run(long_text(60))
    assert 60 * 60 > MAX_ANNOTATED_CELLS
    with pytest.raises(UsageError, match="drop --annotate"):
        heatmap_figure(run, HeatmapOptions(annotate=True))


def test_a_512_token_text_is_one_image_with_thinned_labels_and_no_cell_text() -> None:
    run = make_run(long_text(512), causal=True)
    assert len(run.tokens) == 512
    fig = heatmap_figure(run)
    (ax,) = image_axes(fig)
    assert ax.images[0].get_array().shape == (512, 512)
    assert len(ax.texts) == 0 and len(ax.patches) == 0  # one image, no per-cell artists
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert 10 <= len(labels) <= 100
    step = int(labels[1].split()[0])
    assert step > 1 and labels[1] == f"{step} {run.tokens.texts[step]}"  # thinned labels lead with the position
    # And it really draws.
    buffer = io.BytesIO()
    write_figure(fig, buffer, "png")
    assert buffer.getvalue()[:4] == b"\x89PNG"


def test_figure_grows_with_the_text_within_bounds() -> None:
    small = heatmap_figure(make_run("a b c")).get_size_inches()
    medium = heatmap_figure(make_run(FOX)).get_size_inches()
    big = heatmap_figure(make_run(long_text(200))).get_size_inches()
    assert small[0] < medium[0] < big[0] <= 20.5
    assert small[1] < medium[1] < big[1] <= 20.5


def test_dollar_signs_in_tokens_stay_literal_text() -> None:
    run = make_run("costs $5 or $6")
    fig = heatmap_figure(run)
    (ax,) = image_axes(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["costs", "$5", "or", "$6"]
    write_figure(fig, io.BytesIO(), "png")  # mathtext would choke on "$5 or $"


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_same_run_same_bytes(fmt: str) -> None:
    def picture() -> bytes:
        buffer = io.BytesIO()
        write_figure(heatmap_figure(make_run("a b c", causal=True)), buffer, fmt)
        return buffer.getvalue()

    assert picture() == picture()


def test_log_scale_is_for_weights_only() -> None:
    run = make_run(FOX)
    (ax,) = image_axes(heatmap_figure(run, HeatmapOptions(log=True)))
    low, high = ax.images[0].get_clim()
    assert high == 1.0 and 0 < low <= float(run.layers[0].weights.min())
    with pytest.raises(UsageError, match="drop --log"):
        heatmap_figure(run, HeatmapOptions(what=What.scores, log=True))


@pytest.mark.parametrize(
    ("label", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("supercalifragilistic", 10, "supercali…"),
        ("supercalifragilistic#12", 10, "superc…#12"),
        ("␣dessert", 8, "␣dessert"),
    ],
)
def test_shorten(label: str, limit: int, expected: str) -> None:
    assert shorten(label, limit) == expected
    assert len(shorten(label, limit)) <= max(limit, len(label) if len(label) <= limit else limit)


@pytest.mark.parametrize(("n", "shape"), [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (5, (2, 3)), (6, (2, 3)), (8, (2, 4)), (16, (4, 4))])
def test_grid_shape(n: int, shape: tuple[int, int]) -> None:
    assert grid_shape(n) == shape
    assert shape[0] * shape[1] >= n


@pytest.mark.parametrize(("n", "room", "step"), [(7, 40, 1), (512, 50, 11), (100, 100, 1), (101, 100, 2)])
def test_tick_step(n: int, room: int, step: int) -> None:
    assert tick_step(n, room) == step
    assert len(range(0, n, step)) <= room


# -- the command: files, names, stdout -------------------------------------------------------


def test_png_is_a_png_of_dpi_times_size(tmp_path: Path) -> None:
    out = tmp_path / "life.png"
    result = invoke(LIFE, "--tokenizer", "words", "-o", str(out), "--size", "6x4", "--dpi", "100")
    assert result.exit_code == 0, result.output
    assert png_size(out.read_bytes()) == (600, 400)
    assert result.stdout == f"{out}\n"


@pytest.mark.parametrize(("ext", "magic"), [("svg", b"<?xml"), ("pdf", b"%PDF-"), ("PNG", b"\x89PNG")])
def test_format_comes_from_the_extension(tmp_path: Path, ext: str, magic: bytes) -> None:
    out = tmp_path / f"fox.{ext}"
    result = invoke(FOX, "--tokenizer", "words", "--heads", "2", "-o", str(out))
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert data.startswith(magic)
    if ext == "svg":
        assert b"<svg" in data[:2000]


def test_default_name_comes_from_the_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(LIFE, "--tokenizer", "words")
    assert result.exit_code == 0, result.output
    assert result.stdout == "life-is-short-eat-dessert-first.png\n"
    assert (tmp_path / "life-is-short-eat-dessert-first.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("text", "stem"),
    [
        (LIFE, "life-is-short-eat-dessert-first"),
        ("Café crème: ça va?", "cafe-creme-ca-va"),
        ("../../etc/passwd", "etc-passwd"),
        ("日本語", "attention"),
        ("one two three four five six seven eight nine ten", "one-two-three-four-five-six-seven-eight"),
        ("x" * 200, "x" * 60),
    ],
)
def test_slug(text: str, stem: str) -> None:
    assert heatmap_cli.slug(text) == stem


def test_existing_folder_gets_the_default_name(tmp_path: Path) -> None:
    result = invoke(FOX, "--tokenizer", "words", "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{tmp_path / 'the-quick-brown-fox-jumps-over-the-lazy'}.png\n"


def test_terminal_gets_a_friendlier_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "stdout_is_terminal", lambda: True)
    out = tmp_path / "x.png"
    result = invoke(FOX, "--tokenizer", "words", "-o", str(out), "--size", "5x4", "--dpi", "80")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {out}  (400×320 px)\n"


def test_lines_give_numbered_files_one_path_per_line(tmp_path: Path) -> None:
    out = tmp_path / "batch.png"
    result = invoke("--lines", "--tokenizer", "words", "-o", str(out), input="one two\n\nthree four five\nsix\n")
    assert result.exit_code == 0, result.output
    names = [tmp_path / f"batch-{i:03d}.png" for i in (1, 2, 3)]
    assert result.stdout.splitlines() == [str(p) for p in names]
    assert sorted(tmp_path.iterdir()) == names
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in names)


def test_lines_without_output_name_each_file_after_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("--lines", "--tokenizer", "words", input="Hello world\nGood night moon\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["hello-world-001.png", "good-night-moon-002.png"]


def test_split_heads_writes_one_file_per_head(tmp_path: Path) -> None:
    out = tmp_path / "fox.svg"
    result = invoke(FOX, "--tokenizer", "words", "--heads", "4", "--causal", "--split-heads", "-o", str(out))
    assert result.exit_code == 0, result.output
    names = [tmp_path / f"fox.head{h}.svg" for h in range(4)]
    assert result.stdout.splitlines() == [str(p) for p in names]
    assert sorted(tmp_path.iterdir()) == names
    assert all(p.read_bytes().startswith(b"<?xml") for p in names)


def test_head_option_writes_one_panel(tmp_path: Path) -> None:
    one = tmp_path / "one.png"
    grid = tmp_path / "grid.png"
    assert invoke(FOX, "--tokenizer", "words", "--heads", "4", "--head", "1", "--dpi", "50", "-o", str(one)).exit_code == 0
    assert invoke(FOX, "--tokenizer", "words", "--heads", "4", "--dpi", "50", "-o", str(grid)).exit_code == 0
    assert png_size(one.read_bytes())[0] < png_size(grid.read_bytes())[0]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["-o", "{tmp}/x.jpg"], 2, "'.jpg' is not a picture format"),
        (["-o", "{tmp}/x"], 2, "has no extension"),
        (["-o", "{tmp}/missing/x.png"], 1, "does not exist"),
        (["-o", "{tmp}/afile.txt/x.png"], 1, "is not a folder"),
        (["--heads", "2", "--head", "2", "-o", "{tmp}/x.png"], 2, "--head 2 is out of range"),
        (["--cmap", "nope", "-o", "{tmp}/x.png"], 2, "unknown colour map"),
        (["--size", "8by6", "-o", "{tmp}/x.png"], 2, "WIDTHxHEIGHT"),
        (["--what", "scores", "--log", "-o", "{tmp}/x.png"], 2, "drop --log"),
        (["--size", "100x100", "--dpi", "600", "-o", "{tmp}/x.png"], 2, "lower --dpi"),
    ],
)
def test_errors_are_one_line_and_leave_no_file(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    (tmp_path / "afile.txt").write_text("not a folder")
    result = invoke(FOX, "--tokenizer", "words", *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == code
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("attn-cli: error: ")
    assert result.stdout == ""
    assert [p.name for p in tmp_path.iterdir()] == ["afile.txt"]


def test_a_size_too_small_for_the_labels_is_a_note_not_a_failure(tmp_path: Path) -> None:
    out = tmp_path / "tiny.png"
    result = invoke(FOX, "--tokenizer", "words", "--size", "1x1", "--dpi", "100", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert png_size(out.read_bytes()) == (100, 100)
    assert result.stderr == "note: the picture is too small for its labels, so they may overlap; give a larger --size\n"


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import attn_cli.render.picture.canvas as render

    def half_then_fail(fig, file, fmt):
        file.write(b"\x89PNG half a picture")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render, "write_figure", half_then_fail)
    out = tmp_path / "x.png"
    result = invoke(FOX, "--tokenizer", "words", "-o", str(out))
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_survives_a_failed_run(tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    out.write_bytes(b"old")
    result = invoke("", "--tokenizer", "words", "-o", str(out))
    assert result.exit_code == 2
    assert out.read_bytes() == b"old"


def test_open_without_a_display_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    result = invoke(FOX, "--tokenizer", "words", "--open", "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert result.stderr == "attn-cli: error: --open needs a display, and this session has none ($DISPLAY is not set); drop --open to write a file\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "flag, note",
    [(["--open"], ""), (["--show"], heatmap_cli.SHOW_NOTE + "\n"), ([], "")],
    ids=["--open", "--show, its old name", "neither (the control)"],
)
def test_open_and_its_old_name_show_the_pictures_and_only_the_old_name_says_so(
    flag: list[str], note: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`heatmap --show` was --open before `run --show` gave the name another meaning: it still
    opens the windows, with one note on stderr."""
    import matplotlib.pyplot as plt

    shown: list[int] = []
    monkeypatch.setattr(heatmap_cli, "_check_display", lambda: None)
    monkeypatch.setattr(plt, "show", lambda: shown.append(len(plt.get_fignums())))
    result = invoke(FOX, "--tokenizer", "words", "--heads", "2", "--split-heads", *flag, "-o", str(tmp_path / "x.png"), code=0)
    plt.close("all")
    assert result.stderr == note
    assert shown == ([2] if flag else [])  # one window per picture, shown once at the end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.head0.png", "x.head1.png"]


@pytest.mark.parametrize(
    "args, what",
    [
        ([FOX, "--show", "weights"], "--show weights: heatmap picks its matrix with --what (--what weights)"),
        (["--show", "scores,weights", FOX], "--show scores,weights: heatmap picks its matrix with --what (--what weights|scores|scaled|all|norms|rollout|flow|value-zeroing|value-zeroing-rollout|alti|attention-gradient)"),
        ([FOX, "--show=tokens"], "--show tokens: heatmap picks its matrix with --what (--what weights|scores|scaled|all|norms|rollout|flow|value-zeroing|value-zeroing-rollout|alti|attention-gradient)"),
    ],
    ids=["a matrix", "two, before TEXT", "a table of run's"],
)
def test_runs_show_on_heatmap_is_one_line_that_names_what_and_open(args: list[str], what: str, tmp_path: Path) -> None:
    result = invoke(*args, "-t", "words", "-o", str(tmp_path / "x.png"), code=2)
    assert result.stderr == f"attn-cli: error: heatmap {what} and opens a window with --open\n"
    assert list(tmp_path.iterdir()) == []


def test_a_text_after_the_old_show_is_still_the_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the check above: only run's table names after --show are refused; any
    other word is TEXT, as it was (here it reaches the display check)."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    result = invoke("--show", "weights of a fox", "-t", "words", code=2)
    assert result.stderr.splitlines() == [heatmap_cli.SHOW_NOTE, "attn-cli: error: --open needs a display, and this session has none ($DISPLAY is not set); drop --open to write a file"]


def test_real_process_prints_only_the_path_and_never_touches_pyplot(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from attn_cli.cli import app\n"
        "try:\n    app()\nexcept SystemExit as e:\n    code = e.code\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
        "sys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MPLBACKEND")}
    proc = subprocess.run(
        [sys.executable, "-c", code, "heatmap", "-", "--tokenizer", "words", "--heads", "2", "--causal"],
        input=FOX, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "the-quick-brown-fox-jumps-over-the-lazy.png\n"
    assert proc.stderr == ""
    assert png_size((tmp_path / proc.stdout.strip()).read_bytes())[0] > 500


@pytest.mark.integration
def test_gpt2_labels_show_the_leading_spaces(rank_dir: Path) -> None:
    run = ToySource(Config(tokenizer="gpt2")).run(LIFE)
    (ax,) = image_axes(heatmap_figure(run))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Life", "␣is", "␣short", ",", "␣eat", "␣dessert", "␣first"]


# -- fonts: CJK and emoji tokens --------------------------------------------------------------

CJK_EMOJI = "猫 🦊 cat"


def font_with(chars: str) -> bool:
    from attn_cli.render.picture import fonts

    return all(any(ord(c) in fonts._charmap(path) for _name, path in fonts._candidates()) for c in chars)


def test_cjk_and_emoji_tokens_are_drawn_with_an_installed_font_that_has_them(recwarn: pytest.WarningsRecorder) -> None:
    if not font_with("猫🦊"):
        skip_or_fail("no installed font has 猫 and 🦊 (Debian: fonts-wqy-microhei, fonts-symbola)")
    fig = heatmap_figure(make_run(CJK_EMOJI))
    (ax,) = image_axes(fig)
    family = ax.get_yticklabels()[0].get_fontfamily()
    notes = write_figure(fig, io.BytesIO(), "png")
    assert notes == []  # matplotlib warns for every glyph no font in the chain has: none
    assert not [w for w in recwarn if "missing from font" in str(w.message)]

    # Two different characters drawn the same are two boxes (a last-resort font "has" every glyph).
    def drawn(text: str) -> np.ndarray:
        figure = Figure(figsize=(0.6, 0.6), dpi=100)
        FigureCanvasAgg(figure)
        figure.text(0.1, 0.2, text, fontfamily=family, fontsize=30)
        figure.canvas.draw()
        return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()

    for one, other in (("猫", "犬"), ("🦊", "🍰")):
        assert not np.array_equal(drawn(one), drawn(other)), (one, other, family)


def test_without_a_font_for_them_one_note_names_the_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.render.picture import fonts

    monkeypatch.setattr(fonts, "_candidates", lambda: [])
    fonts._covering.cache_clear()
    try:
        notes = write_figure(heatmap_figure(make_run(CJK_EMOJI)), io.BytesIO(), "png")
    finally:
        fonts._covering.cache_clear()
    assert len(notes) == 1
    assert notes[0].startswith("note: no installed font has ") and "U+732B" in notes[0] and "U+1F98A" in notes[0]


def test_a_batch_says_the_missing_font_note_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.render.picture import fonts

    monkeypatch.setattr(fonts, "_candidates", lambda: [])
    fonts._covering.cache_clear()
    try:
        result = invoke("--lines", "--tokenizer", "words", "-o", str(tmp_path / "cats.png"), input="猫 cat\n🦊 fox\n")
    finally:
        fonts._covering.cache_clear()
    assert result.exit_code == 0, result.output
    assert result.stderr.count("no installed font has") == 1
    assert "U+732B" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cats-001.png", "cats-002.png"]


# -- memory: a picture that would not fit is refused before it is drawn ------------------------

MiB = 2**20


@pytest.mark.parametrize(
    ("n_words", "heads", "options", "between", "fix"),
    [
        # ``between``: where the free memory sits, from what any picture takes (0) to this one (1)
        (1000, 1, HeatmapOptions(), 0.5, "use a shorter text (about"),
        (1000, 4, HeatmapOptions(), "one head", "draw one head with --head N, or one file per head with --split-heads"),
        (1000, 4, HeatmapOptions(), 0.1, "use a shorter text (about"),  # not even one head fits
        (20, 1, HeatmapOptions(size=(12, 12), dpi=1200), 0.5, "lower --dpi or give a smaller --size"),
    ],
)
def test_a_picture_too_big_for_free_memory_is_refused_naming_what_fits(
    monkeypatch: pytest.MonkeyPatch, n_words: int, heads: int, options: HeatmapOptions, between: float | str, fix: str
) -> None:
    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError

    run = make_run(long_text(n_words), heads=heads)
    monkeypatch.setattr(budget, "available_bytes", lambda: 64 * 2**30)
    size = tuple(heatmap_figure(run, options).get_size_inches())  # with room, it draws
    need = sum(picture_bytes(n_words, heads, size, options.dpi).values())
    if between == "one head":
        one = sum(picture_bytes(n_words, 1, size, options.dpi).values())
        free = (one + need) / 2 / budget.SHARE
    else:
        base = FIXED_DRAW_BYTES + picture_bytes(0, heads, size, options.dpi)["canvas"]
        free = (base + between * (need - base)) / budget.SHARE
        if "dpi" in fix:
            free = need / 2 / budget.SHARE
    monkeypatch.setattr(budget, "available_bytes", lambda: int(free))
    with pytest.raises(TooLargeError, match="this picture needs about") as info:
        heatmap_figure(run, options)
    assert fix in str(info.value)
    if "about" in fix:  # the suggested length really fits
        fits = int(str(info.value).split("about ")[-1].split(" tokens")[0].replace(",", ""))
        assert 0 < fits < n_words
        heatmap_figure(make_run(long_text(fits), heads=heads), options)


def test_the_command_refuses_with_exit_4_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget

    monkeypatch.setattr(budget, "available_bytes", lambda: 270 * MiB)  # 216 MiB to spend: about 700 tokens
    result = invoke(long_text(1000), "-t", "words", "-o", str(tmp_path / "big.png"))
    assert result.exit_code == 4, result.output
    assert "this picture needs about" in result.stderr and "shorter text" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_under_an_address_space_limit_a_big_picture_is_exit_4_not_a_memory_error(tmp_path: Path) -> None:
    """Before the check, 3,000 tokens under this limit died in matplotlib with a MemoryError traceback
    (past POOL_ABOVE tokens the picture is pooled now: 2,000 tokens drawn cell by cell, a tighter limit)."""
    picture = tmp_path / "big.png"
    code = f"""
import resource
import torch, matplotlib.figure, matplotlib.backends.backend_agg  # mapped before the limit, as in a real run
from attn_cli.runtime import budget
from attn_cli.cli import app
text = " ".join(f"w{{i}}" for i in range(2000))
limit = budget._mapped_bytes() + 400 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
app(["heatmap", text, "-t", "words", "--max-tokens", "5000", "-o", {str(picture)!r}], prog_name="attn-cli")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert "this picture needs about" in result.stderr and "tokens fit" in result.stderr
    assert not picture.exists()


@pytest.mark.parametrize(("size", "dpi"), [("5.55x5.05", 150), ("9.45x7.3", 150), ("14.73x12.1", 150), ("6x4", 100), ("3.33x2.21", 97)])
def test_the_size_said_on_a_terminal_is_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str, dpi: int) -> None:
    """`wrote x.png  (832×757 px)`: the PNG's own header, not the size rounded (which said
    758 for 757.5 pixels, issue 18)."""
    monkeypatch.setattr(cli_output, "stdout_is_terminal", lambda: True)
    out = tmp_path / "x.png"
    result = invoke(FOX, "--tokenizer", "words", "--heads", "2", "-o", str(out), "--size", size, "--dpi", str(dpi))
    assert result.exit_code == 0, result.output
    width, height = png_size(out.read_bytes())
    assert result.stdout == f"wrote {out}  ({width}×{height} px)\n"


def test_rounding_the_size_would_have_been_wrong() -> None:
    """The negative control for the test above: for its first size, rounding the figure's
    size in pixels says another height than the file has."""
    width_in, height_in = 5.55, 5.05
    assert round(height_in * 150) == 758 and int(Figure(figsize=(width_in, height_in), dpi=150).bbox.size[1]) == 757
