"""--hide-tokens: hidden tokens leave the tables and pictures, each kept row is renormalized.

The renormalized weights are checked against w[i, kept] / w[i, kept].sum() written
out in numpy from the model's own weights (which JSON keeps unchanged); pictures
are read back from the Figure (panel shapes, tick labels); the CLI through CliRunner.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from html_support import hand_trace
from invoking import invoke

from attn_cli.formats.document import run_dict
from attn_cli.records.hiding import HideSpec, hide, renormalize
from attn_cli.records.hiding import shown as shown_trace
from attn_cli.records.layers import LayerAttention
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Trace
from attn_cli.render.picture.heatmap import heatmap_figure
from attn_cli.render.picture.model_view import model_view_figure
from attn_cli.render.picture.panels import HeatmapOptions
from attn_cli.render.terminal.cells import View
from attn_cli.render.terminal.tables import human_view
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource



def reference(weights: np.ndarray, kept: list[int]) -> np.ndarray:
    """(H, T, T) -> (H, K, K): the definition, written out with numpy in float64."""
    out = np.empty((weights.shape[0], len(kept), len(kept)))
    for h in range(weights.shape[0]):
        for a, i in enumerate(kept):
            row = weights[h, i, kept].astype(np.float64)
            out[h, a] = row / row.sum()
    return out


def special_trace(**kwargs) -> Trace:
    """[CLS] words [SEP], 3 layers of 4 heads, causal or not (html_support's hand-built trace)."""
    return hand_trace(kwargs.pop("n_tokens", 8), layers=3, heads=4, **kwargs)


# -- the option's value ----------------------------------------------------------

TOKENS = Tokens((101, 7, 8, 7, 102), ("[CLS]", "saw", " a", "saw", "[SEP]"), 200, "hand", special=(True, False, False, False, True))


@pytest.mark.parametrize(
    ("value", "hidden"),
    [
        ("special", (0, 4)),
        ("0,-1", (0, 4)),
        ("[CLS],[SEP]", (0, 4)),
        ("saw", (1, 3)),  # a text hides every token it names
        ("saw#3", (3,)),  # a label, one token
        ("a", (2,)),  # the text without its space
        ("␣a", (2,)),  # with the space made visible
        ("special, 2", (0, 2, 4)),
    ],
)
def test_values_name_positions(value: str, hidden: tuple[int, ...]) -> None:
    spec = HideSpec.parse(value)
    assert spec is not None and spec.positions(TOKENS) == (hidden, None)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("dog", "--hide-tokens 'dog' is not a token of the text: give special, a position 0 to 4 or one of [CLS], saw#1, ␣a, saw#3, [SEP]"),
        ("5", "--hide-tokens 5 is out of range: the text has 5 tokens, positions 0 to 4"),
        ("0,1,2,3,4", "--hide-tokens '0,1,2,3,4' hides every token"),
        ("special,saw,a", "hides every token"),
    ],
)
def test_bad_values_are_usage_errors_listing_the_tokens(value: str, message: str) -> None:
    spec = HideSpec.parse(value)
    with pytest.raises(UsageError, match=re.escape(message)) as err:
        spec.positions(TOKENS)
    assert "[CLS]" in str(err.value)


@pytest.mark.parametrize("value", ["", " ", ",", "0,,1"])
def test_empty_items_fail_when_parsed(value: str) -> None:
    with pytest.raises(UsageError, match="give special, or positions and tokens"):
        HideSpec.parse(value)


def test_special_without_special_tokens_is_a_note() -> None:
    plain = dataclasses.replace(TOKENS, special=())
    hidden, note = HideSpec.parse("special").positions(plain)
    assert hidden == () and "no special tokens" in note


# -- the numbers -------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_renormalized_rows_are_the_kept_weights_over_their_sum(causal: bool) -> None:
    trace = hide(special_trace(causal=causal), HideSpec.parse("special"))
    kept = list(trace.hiding.kept)
    assert kept == list(range(1, 7))
    shown = shown_trace(trace)
    assert shown.tokens.labels == tuple(trace.tokens.labels[i] for i in kept)
    assert shown.tokens.positions == tuple(kept)
    for full, part in zip(trace.layers, shown.layers):
        expected = reference(full.weights.numpy(), kept)
        got = part.weights.double().numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-6)
        assert part.weights.shape == (4, 6, 6) and part.queries.shape[1] == 6 and part.output.shape[0] == 6
        if causal:  # the mask follows the kept tokens: still lower triangular
            assert torch.equal(part.mask, full.mask[kept][:, kept])


def test_a_row_with_no_weight_left_is_nan_and_null() -> None:
    # query 1 puts everything on the hidden token 0 (exactly 0 elsewhere, as a float32 softmax can)
    weights = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.25, 0.25]]])  # (1, 3, 3)
    shown = renormalize(weights, [1, 2])
    assert torch.isnan(shown[0, 0]).all() and torch.allclose(shown[0, 1], torch.tensor([0.5, 0.5]))
    trace = hide(_trace_of(weights), HideSpec.parse("0"))
    data = run_dict(trace)
    head = data["layers"][0]["heads"][0]
    assert head["weights"] == weights[0].tolist()  # the model's own, unchanged
    assert head["weights_shown"] == [[None, None, None], [None, None, None], [None, 0.5, 0.5]]
    json.dumps(data, allow_nan=False)  # no NaN reaches the JSON
    fig = heatmap_figure(trace)
    (panel,) = [ax for ax in fig.axes if ax.images]
    drawn = panel.images[0].get_array()
    assert drawn.shape == (2, 2) and drawn.mask[0].all() and not drawn.mask[1].any()
    assert "grey rows: all their weight was on hidden tokens" in fig._suptitle.get_text()


def _trace_of(weights: torch.Tensor) -> Trace:
    """A one-layer trace holding exactly ``weights`` (1, T, T)."""
    base = ToySource(Config(tokenizer="words", heads=1, d_model=4)).run("a b c")
    n = weights.shape[-1]
    layer = dataclasses.replace(base.layers[0], weights=weights, mask=None, dropped_weights=None)
    assert isinstance(layer, LayerAttention) and len(base.tokens) == n
    return dataclasses.replace(base, layers=(layer,))


# -- renderers -------------------------------------------------------------------


def test_tables_lose_the_hidden_rows_and_columns() -> None:
    from rich.console import Console

    trace = hide(special_trace(n_tokens=6, causal=False), HideSpec.parse("special"))
    console = Console(width=200, record=True, color_system=None)
    console.print(human_view(dataclasses.replace(trace, layers=trace.layers[-1:]), View(heads=(0,))))
    text = console.export_text()
    tokens, rest = text.split("Hidden: ", 1)
    assert "[CLS]" in tokens and "hidden" in tokens  # the tokens table lists and flags them
    assert "[CLS], [SEP] (positions 0, 5) are left out of every table below" in rest
    weights = rest.split("Attention weights", 1)[1].split("Statistics", 1)[0]
    assert "[CLS], [SEP] hidden; rows renormalized" in weights
    body = weights.split("rows are queries")[0]
    assert "[CLS]" not in body.split("hidden; rows renormalized", 1)[1] and "[SEP]" not in body.split("hidden; rows renormalized", 1)[1]
    shown = shown_trace(trace).layers[-1].weights[0]
    first_row = next(line for line in body.splitlines() if line.strip().startswith("the ") or line.strip().startswith("the\t"))
    assert [float(v) for v in first_row.split()[1:]] == pytest.approx([round(v, 4) for v in shown[0].tolist()], abs=1e-4)


def test_one_layer_heatmap_draws_the_kept_tokens_renormalized() -> None:
    trace = hide(special_trace(), HideSpec.parse("[CLS],[SEP]"))
    trace = dataclasses.replace(trace, layers=trace.layers[:1], chosen_heads=(0, 1))
    fig = heatmap_figure(trace, HeatmapOptions())
    axes = [ax for ax in fig.axes if ax.images]
    kept = list(trace.hiding.kept)
    expected = reference(trace.layers[0].weights.numpy(), kept)
    for h, ax in enumerate(axes):
        drawn = ax.images[0].get_array()
        assert drawn.shape == (6, 6)
        np.testing.assert_allclose(np.ma.filled(drawn, 0.0), np.where(np.ma.getmaskarray(drawn), 0.0, expected[h]), atol=1e-6)
    labels = [t.get_text() for t in axes[0].get_yticklabels()]
    assert labels == [trace.tokens.labels[i] for i in kept] and "[CLS]" not in labels
    assert "[CLS], [SEP] hidden; rows renormalized over the 6 tokens shown" in fig._suptitle.get_text()


def test_model_view_panels_are_kept_by_kept() -> None:
    trace = hide(special_trace(), HideSpec.parse("special"))
    fig = model_view_figure(trace)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 3 * 4 and all(ax.images[0].get_array().shape == (6, 6) for ax in panels)
    first = panels[0]
    assert [t.get_text() for t in first.get_yticklabels()] == [trace.tokens.labels[i] for i in trace.hiding.kept]
    assert "[CLS], [SEP] hidden; rows renormalized" in fig.texts[0].get_text()


def test_the_one_colour_hint_reads_the_renormalized_weights() -> None:
    # 80 tokens: each row spreads its weight evenly, so renormalized the weights are 1/79: one colour
    n = 80
    weights = torch.full((1, n, n), 1.0 / n)  # (1, T, T)
    base = _trace_of_text(" ".join(f"w{i}" for i in range(n)), weights)
    trace = hide(base, HideSpec.parse("0"))
    assert "nearly one colour" in heatmap_figure(trace)._suptitle.get_text()
    # a head parked on token 0 (0.95) is one colour until token 0 is hidden: then the rest spreads 1/30 .. 2/30
    n = 21
    parked = torch.tensor([0.95] + [0.05 * (2 if j % 2 else 1) / 30 for j in range(1, n)]).repeat(1, n, 1)  # (1, T, T)
    text = " ".join(f"w{i}" for i in range(n))
    assert "nearly one colour" in heatmap_figure(_trace_of_text(text, parked))._suptitle.get_text()
    hidden = hide(_trace_of_text(text, parked), HideSpec.parse("0"))
    assert "nearly one colour" not in heatmap_figure(hidden)._suptitle.get_text()


def _trace_of_text(text: str, weights: torch.Tensor) -> Trace:
    base = ToySource(Config(tokenizer="words", heads=1, d_model=4)).run(text)
    layer = dataclasses.replace(base.layers[0], weights=weights, mask=None, dropped_weights=None)
    return dataclasses.replace(base, layers=(layer,))


# -- the commands ------------------------------------------------------------------

SAW = ["I saw a saw", "-t", "words", "--heads", "2", "--causal"]


def test_json_keeps_the_model_weights_and_adds_the_renormalized_ones() -> None:
    plain = json.loads(invoke("run", *SAW, "-F", "json").stdout)
    data = json.loads(invoke("run", *SAW, "-F", "json", "--hide-tokens", "0").stdout)
    assert [t["hidden"] for t in data["tokens"]] == [True, False, False, False]
    assert [t["hidden"] for t in plain["tokens"]] == [False] * 4
    for head, before in zip(data["layers"][0]["heads"], plain["layers"][0]["heads"]):
        assert head["weights"] == before["weights"] and "weights_shown" not in before
        w = np.array(head["weights"])
        expected = reference(w[None], [1, 2, 3])[0]
        shown = head["weights_shown"]
        assert shown[0] == [None] * 4 and all(row[0] is None for row in shown)
        np.testing.assert_allclose(np.array([row[1:] for row in shown[1:]], dtype=float), expected, atol=1e-6)


def test_csv_has_the_hidden_tokens_and_the_shown_weights() -> None:
    out = invoke("run", *SAW, "-F", "csv", "--hide-tokens", "saw#1").stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["row"], r["row_token"]) for r in rows if r["table"] == "hidden"] == [("1", "saw#1")]
    shown = [r for r in rows if r["table"] == "weights_shown"]
    assert len(shown) == 2 * 3 * 3  # heads x kept x kept, hidden cells left out
    assert {r["row"] for r in shown} == {"0", "2", "3"} and {r["col"] for r in shown} == {"0", "2", "3"}
    for h in ("0", "1"):
        for i in ("0", "2", "3"):
            values = [r["value"] for r in shown if r["head"] == h and r["row"] == i]
            assert math.isclose(sum(float(v) for v in values), 1.0, abs_tol=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hide-tokens", "dog"], "--hide-tokens 'dog' is not a token of the text"),
        (["--hide-tokens", "0,1,2,3"], "--hide-tokens '0,1,2,3' hides every token (I, saw#1, a, saw#3)"),
        (["--hide-tokens", "9"], "--hide-tokens 9 is out of range"),
        (["--hide-tokens", "0", "--emit-python"], "--hide-tokens changes what is shown"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = invoke("run", *SAW, "-F", "json", *args, code=2)
    assert result.stderr.startswith(f"attn-cli: error: {message}"), result.stderr


def test_query_follows_a_shown_token_by_its_position_in_the_text() -> None:
    out = invoke("run", *SAW, "--hide-tokens", "0", "--query", "2", "--head", "0", "--format", "table").stdout
    assert "Query a (position 2)" in out and "I " not in out.split("Query a (position 2)")[1].split("entropy")[0]
    result = invoke("run", *SAW, "--hide-tokens", "0", "--query", "I", "--format", "table", code=2)
    assert "--query: I (position 0) is hidden by --hide-tokens" in result.stderr


def test_a_notebook_page_reproduces_the_hiding() -> None:
    from attn_cli.render.page import reproduce_command

    trace = hide(special_trace(), HideSpec.parse("special"))
    assert reproduce_command(trace).endswith("--hide-tokens 0,7")


def test_explain_does_not_offer_it() -> None:
    """explain narrates the model's own softmax, which hiding would change: it has no such option."""
    result = invoke("explain", *SAW, "--hide-tokens", "0", code=2)
    assert "no such option: --hide-tokens" in result.stderr
    assert "--hide-tokens" not in invoke("explain", "--help").stdout


@pytest.mark.parametrize("command", ["heads", "html"])
def test_commands_without_a_script_do_not_offer_emit_python(command: str) -> None:
    result = invoke(command, *SAW, "--emit-python", code=2)
    assert "no such option: --emit-python" in result.stderr


def test_special_on_the_toy_is_a_note_not_an_error() -> None:
    result = invoke("run", *SAW, "-F", "json", "--hide-tokens", "special")
    assert "no special tokens" in result.stderr
    assert not any(t["hidden"] for t in json.loads(result.stdout)["tokens"])


def test_a_batch_error_names_the_text(tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("a b c\nsaw it\n")
    result = invoke("run", "-f", str(texts), "--lines", "-t", "words", "-F", "json", "--hide-tokens", "saw", code=2)
    assert "text 1 of 2" in result.stderr and "'saw' is not a token" in result.stderr


def test_heatmap_and_html_take_it(tmp_path: Path) -> None:
    picture = tmp_path / "saw.png"
    invoke("heatmap", *SAW, "--hide-tokens", "0", "-o", str(picture))
    assert picture.read_bytes()[:4] == b"\x89PNG"
    page = tmp_path / "saw.html"
    invoke("html", *SAW, "--hide-tokens", "0", "-o", str(page))
    text = page.read_text()
    assert "--hide-tokens 0" in text and '"positions":[1,2,3]' in text


def test_heads_flags_the_tokens_and_scores_the_model_weights(bert_folder: Path) -> None:
    args = ["heads", "the cat sat", "--model", str(bert_folder), "-F", "json", "--no-probe"]
    plain = json.loads(invoke(*args).stdout)
    hidden = json.loads(invoke(*args, "--hide-tokens", "special").stdout)
    assert [t["hidden"] for t in hidden["tokens"]] == [t["special"] for t in hidden["tokens"]]
    assert any(t["hidden"] for t in hidden["tokens"])
    assert hidden["heads"] == plain["heads"]  # the definitions: the model's own weights
    table = invoke(*args[:-3], "--no-probe", "-F", "table", "--hide-tokens", "special").stdout
    assert "the scores use the model's own weights" in table
