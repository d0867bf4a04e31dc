"""The Python API (attn_cli.trace, Trace's methods, from_attentions, head_view,
model_view, load) and `--from FILE.json`: the same numbers, pictures and pages as the
command line, every error one clear line, and no torch on `import attn_cli`."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import invoking
import numpy as np
import pytest
import torch
from html_support import chunk, manifest

import attn_cli
from attn_cli.runtime.errors import ExitStatus, UsageError

invoke = functools.partial(invoking.invoke, code=None)

TEXT = "The cat sat on the mat"


@pytest.fixture(scope="module")
def hf(minilm_path: Path) -> dict[str, Any]:
    """transformers' own eager run of MiniLM: its attentions and tokens."""
    import transformers

    model = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    inputs = tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    return {"attentions": attentions, "tokens": tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])}


@pytest.fixture(scope="module")
def ours(minilm_path: Path) -> Any:
    return attn_cli.trace(TEXT, model=minilm_path)


# -- the package -----------------------------------------------------------------------


def test_import_loads_no_torch_and_lists_the_api() -> None:
    code = "import sys, attn_cli\nassert 'torch' not in sys.modules, 'torch'\nprint(sorted(attn_cli.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names = json.loads(out.replace("'", '"'))
    assert {"trace", "from_attentions", "head_view", "model_view", "Trace"} <= set(names)
    assert "AttentionResult" not in names and "Run" not in names
    assert "run.layers[0]" not in (attn_cli.__doc__ or "")


def test_a_toy_trace_is_the_command_lines_bytes() -> None:
    t = attn_cli.trace("I saw a saw", tokenizer="words", heads=2, causal=True)
    cli = invoke("run", "I saw a saw", "-t", "words", "--heads", "2", "--causal", "-F", "json")
    assert t.to_json() == cli.stdout.rstrip("\n")
    assert t.to_dict() == json.loads(cli.stdout)
    assert t.to_csv() == invoke("run", "I saw a saw", "-t", "words", "--heads", "2", "--causal", "-F", "csv").stdout
    assert t.weights().shape == (2, 4, 4) and t.weights(head=1).shape == (4, 4)
    assert torch.equal(t.weights(layer=0, head=1), t.layers[0].weights[1])


@pytest.mark.parametrize("kind", [str, Path])
def test_repr_html_works_for_a_checkpoint_given_as_str_or_path(kind: type, minilm_path: Path) -> None:
    t = attn_cli.trace(TEXT, model=kind(minilm_path), layer=[4, 5], head=range(3))
    shown = t._repr_html_()
    assert shown.startswith('<iframe class="attn-cli-page" sandbox="allow-scripts"') and "srcdoc=" in shown
    assert [layer.layer for layer in t.layers] == [4, 5] and t.shown_heads == (0, 1, 2)
    assert "attn-cli html" in manifest(t.page())["command"]
    toy = attn_cli.trace("I saw a saw", tokenizer="words")
    assert "srcdoc=" in toy._repr_html_()


def test_heatmap_page_and_census_are_the_command_lines(ours: Any, minilm_path: Path, tmp_path: Path) -> None:
    fig = ours.heatmap(layer=2, head=[0, 1])
    drawn = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    torch.testing.assert_close(torch.tensor(np.array(drawn[0])), ours.weights(layer=2, head=0), atol=1e-7, rtol=0)
    assert ours.heatmap(layer="all").get_size_inches()[0] > 4
    page = ours.page(view="model")
    assert manifest(page)["view"] == "overview"
    census = attn_cli.trace(TEXT, model=minilm_path, norms=True).heads()
    cli = json.loads(invoke("heads", TEXT, "--model", str(minilm_path), "--no-probe", "-F", "json").stdout)["heads"]
    assert census == cli
    without = ours.heads()  # a trace without its norms: everything but the norms' share
    assert [{**h, "norm_special_mass": None} for h in cli] == without and cli[0]["norm_special_mass"] is not None


def test_bad_arguments_are_the_command_lines_errors(minilm_path: Path) -> None:
    with pytest.raises(UsageError, match="causal is an option of the seeded toy model"):
        attn_cli.trace(TEXT, model=minilm_path, causal=True)
    with pytest.raises(UsageError, match="nope: not an option of attn_cli.trace"):
        attn_cli.trace(TEXT, nope=1)
    with pytest.raises(UsageError, match="pair only makes sense with model="):
        attn_cli.trace(TEXT, pair="x")
    with pytest.raises(UsageError, match="layer 9 is out of range"):
        attn_cli.trace(TEXT, model=minilm_path, layer=9)
    with pytest.raises(UsageError, match="layer 3 is not in the trace"):
        attn_cli.trace(TEXT, model=minilm_path, layer=[5]).weights(layer=3)


# -- attention from anywhere --------------------------------------------------------------


def test_from_attentions_gives_the_checkpoints_numbers_page_and_picture(hf: dict, ours: Any) -> None:
    outside = attn_cli.from_attentions(hf["attentions"], hf["tokens"], model_name="all-MiniLM-L6-v2")
    assert outside.model.family == "external" and list(outside.tokens.texts) == hf["tokens"]  # as given
    for layer in range(6):
        assert torch.equal(outside.weights(layer=layer), hf["attentions"][layer][0])  # the numbers given, unchanged
        # and the checkpoint's, as attn-cli computes them: equal to transformers' to 1e-5 (the engine's promise;
        # 1e-6 failed on an AMD EPYC, whose BLAS rounds MiniLM's sums a little differently)
        torch.testing.assert_close(outside.weights(layer=layer), ours.weights(layer=layer), atol=1e-5, rtol=0)
    a, b = outside.page(), ours.page()
    for la, lb in zip(manifest(a)["traces"][0]["layers"], manifest(b)["traces"][0]["layers"]):
        assert np.abs(chunk(a, la["weights"]).astype(int) - chunk(b, lb["weights"]).astype(int)).max() <= 1  # 4 decimals
    pictures = [t.heatmap(layer=3) for t in (outside, ours)]
    arrays = [[np.array(ax.images[0].get_array()) for ax in fig.axes if ax.images] for fig in pictures]
    for x, y in zip(*arrays):
        np.testing.assert_allclose(x, y, atol=1e-5)
    # numpy arrays and (H, T, T) layers too
    same = attn_cli.from_attentions([a[0].numpy() for a in hf["attentions"]], hf["tokens"])
    assert torch.equal(same.weights(layer=5), outside.weights(layer=5))


def test_from_attentions_finds_a_causal_mask() -> None:
    t = attn_cli.trace("I saw a saw again", tokenizer="words", heads=2, causal=True)
    outside = attn_cli.from_attentions([t.weights()], list(t.tokens.texts))
    assert torch.equal(outside.layers[0].mask, t.layers[0].mask)
    plain = attn_cli.from_attentions([attn_cli.trace("I saw a saw", tokenizer="words").weights()], ["I", "saw", "a", "saw"])
    assert plain.layers[0].mask is None  # a negative control: nothing hidden, nothing masked


def good() -> list[torch.Tensor]:
    return [torch.rand(1, 2, 3, 3).softmax(-1) for _ in range(2)]


@pytest.mark.parametrize(
    ("attentions", "tokens", "message"),
    [
        (good(), ["a", "b", "c"], None),  # the control: accepted
        ([torch.rand(2, 3, 3)], ["a", "b", "c"], "sums to .*not 1"),
        ([torch.rand(3, 3).softmax(-1)], ["a", "b", "c"], "has 2 dimensions"),
        ([torch.rand(2, 2, 3, 3).softmax(-1)], ["a", "b", "c"], "batch of 2"),
        ([*good(), torch.rand(1, 3, 3, 3).softmax(-1)], ["a", "b", "c"], "layer 2 is 3 x 3 x 3 but layer 0 is 2 x 3 x 3"),
        (good(), ["a", "b"], "3 x 3 but there are 2 tokens"),
        ([torch.rand(1, 2, 3, 4).softmax(-1)], ["a", "b", "c"], "not square"),
        ([], ["a"], "attentions is empty"),
        ([[["x"]]], ["a"], "not a table of numbers"),
    ],
    ids=["valid", "not-softmax", "rank-2", "batch", "sizes-differ", "token-count", "not-square", "empty", "not-numbers"],
)
def test_from_attentions_says_what_is_wrong(attentions: list, tokens: list[str], message: str | None) -> None:
    if message is None:
        assert len(attn_cli.from_attentions(attentions, tokens).layers) == 2
        return
    with pytest.raises(UsageError, match=message):
        attn_cli.from_attentions(attentions, tokens)


def test_head_view_and_model_view_take_bertvizs_arguments(hf: dict, tmp_path: Path) -> None:
    view = attn_cli.head_view(hf["attentions"], hf["tokens"], include_layers=[1, 2])
    assert "srcdoc=" in view._repr_html_()
    assert [layer["index"] for layer in manifest(view.html)["traces"][0]["layers"]] == [1, 2]
    html = attn_cli.model_view(hf["attentions"], hf["tokens"], include_heads=[0, 3], html_action="return")
    assert isinstance(html, str) and manifest(html)["view"] == "overview"
    view.save(tmp_path / "v.html")
    assert (tmp_path / "v.html").read_text(encoding="utf-8") == view.html
    with pytest.raises(UsageError, match="include_layers: layers \\[9\\]"):
        attn_cli.head_view(hf["attentions"], hf["tokens"], include_layers=[9])
    with pytest.raises(UsageError, match="sentence_b_start=0"):
        attn_cli.head_view(hf["attentions"], hf["tokens"], sentence_b_start=0)


# -- --from FILE.json ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("saved")
    result = invoke("run", TEXT, "--model", str(minilm_path), "-F", "json")
    assert result.exit_code == 0, result.output
    (folder / "cat.json").write_text(result.stdout)
    return folder / "cat.json"


@pytest.mark.parametrize("args", [[], ["--layer", "all"], ["--layer", "1", "--head", "2,5"], ["--hide-tokens", "special"]])
def test_heatmap_from_a_saved_trace_is_the_same_picture(args: list[str], saved: Path, minilm_path: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "from.png", tmp_path / "text.png"
    assert invoke("heatmap", "--from", str(saved), *args, "-o", str(a)).exit_code == 0
    assert invoke("heatmap", TEXT, "--model", str(minilm_path), *args, "-o", str(b)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_html_and_heads_from_a_saved_trace(saved: Path, minilm_path: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "from.html", tmp_path / "text.html"
    assert invoke("html", "--from", str(saved), "-o", str(a)).exit_code == 0
    assert invoke("html", TEXT, "--model", str(minilm_path), "-o", str(b)).exit_code == 0
    pa, pb = a.read_text(encoding="utf-8"), b.read_text(encoding="utf-8")
    la, lb = manifest(pa)["traces"][0]["layers"], manifest(pb)["traces"][0]["layers"]
    assert [x["index"] for x in la] == [x["index"] for x in lb]
    for x, y in zip(la, lb):  # the same page data: weights, the file's raw scores, the softmax input derived alike
        assert np.array_equal(chunk(pa, x["weights"]), chunk(pb, y["weights"]))
        assert np.array_equal(chunk(pa, x["scores"]), chunk(pb, y["scores"]))
        assert (x["scaled"], x["divisorText"]) == (y["scaled"], y["divisorText"]) == ("derived", "sqrt(32)")
    assert manifest(pa)["command"] == f"attn-cli html --from {saved} --output {a}"
    from_file = invoke("heads", "--from", str(saved), "-F", "json")
    assert "no probe: the attention comes from" in from_file.stderr
    text = invoke("heads", TEXT, "--model", str(minilm_path), "--no-probe", "-F", "json")
    # the same census; the file was saved without --norms, so it has no norm_special_mass
    saved_heads, text_heads = json.loads(from_file.stdout)["heads"], json.loads(text.stdout)["heads"]
    assert all(h["norm_special_mass"] is None for h in saved_heads) and text_heads[0]["norm_special_mass"] is not None
    assert saved_heads == [{**h, "norm_special_mass": None} for h in text_heads]
    assert attn_cli.load(saved).to_dict()["layers"][0]["heads"][0]["weights"] == json.loads(saved.read_text())["layers"][0]["heads"][0]["weights"]


def test_a_page_from_a_file_without_scores_shows_the_weights(saved: Path, tmp_path: Path) -> None:
    data = json.loads(saved.read_text())
    for layer in data["layers"]:
        for head in layer["heads"]:
            del head["scores"]
    path = tmp_path / "weights-only.json"
    path.write_text(json.dumps(data))
    assert invoke("html", "--from", str(path), "-o", str(tmp_path / "w.html")).exit_code == 0
    assert all(layer["scores"] is None for layer in manifest((tmp_path / "w.html").read_text())["traces"][0]["layers"])


def test_a_minimal_file_is_enough(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"tokens": [{"text": "a"}, {"text": "b"}], "layers": [{"heads": [{"weights": [[1, 0], [0.25, 0.75]]}]}]}))
    assert invoke("heatmap", "--from", str(path), "-o", str(tmp_path / "m.png")).exit_code == 0
    t = attn_cli.load(path)
    assert t.layers[0].mask is not None  # nothing above the diagonal: drawn as causal


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 1, "tokens": [], "layers": []}', "schema_version 1"),
        ('{"schema": "compare", "schema_version": 1, "heads": [], "layers": []}', "a 'compare' document, not a trace"),
        ("[1, 2]", "not a schema-2 trace"),
        ("{nope", "not JSON"),
        ('{"tokens": [{"text": "a"}], "layers": []}', "no layers"),
        ('{"tokens": [{"text": "a"}, {"text": "b"}], "layers": [{"heads": [{"weights": [[1]]}]}]}', "weights is 1 x 1, but there are 2 tokens"),
        ('{"tokens": [{"text": "a"}], "layers": [{"heads": [{"weights": [[0.5]]}]}]}', "sums to 0.5"),
        ('{"tokens": [{"text": "a"}], "layers": [{"heads": [{"weights": [[1]]}]}, {"heads": [{"head": 1, "weights": [[1]]}]}]}', "same heads"),
    ],
    ids=["old-schema", "another-document", "not-an-object", "not-json", "no-layers", "sizes", "not-softmax", "heads-differ"],
)
def test_a_malformed_file_is_exit_2_one_line_nothing_written(content: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    for command in ("heatmap", "html", "heads"):
        out = tmp_path / f"out-{command}"
        result = invoke(command, "--from", str(path), "-o", str(out) + (".png" if command == "heatmap" else ".html" if command == "html" else ".json"))
        assert result.exit_code == ExitStatus.USAGE, result.output
        assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert not list(tmp_path.glob("out-*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heatmap", "some text", "--from", "X"], "drop TEXT"),
        (["heatmap", "--from", "X", "--model", "m"], "drop --model"),
        (["html", "--from", "X", "--causal"], "drop --causal"),
        (["heatmap", "--from", "X", "--what", "scores"], "--what scores: --from re-draws"),
        (["heatmap", "--from", "missing.json"], "missing.json: no such file"),
    ],
)
def test_from_takes_no_text_or_model_options(args: list[str], message: str, saved: Path) -> None:
    args = [str(saved) if a == "X" else a for a in args]
    result = invoke(*args)
    assert result.exit_code == ExitStatus.USAGE and message in result.stderr, result.output


def test_attention_from_elsewhere_is_saved_and_drawn_again(hf: dict, tmp_path: Path) -> None:
    outside = attn_cli.from_attentions(hf["attentions"], hf["tokens"], special=[t in ("[CLS]", "[SEP]") for t in hf["tokens"]])
    path = tmp_path / "outside.json"
    path.write_text(outside.to_json())
    again = attn_cli.load(path)
    for layer in range(6):
        assert torch.equal(again.weights(layer=layer), outside.weights(layer=layer))
    assert again.tokens.special == outside.tokens.special and again.tokens.special[0]
    assert "weights" in outside.to_csv() and "queries" not in outside.to_csv()
    assert invoke("heatmap", "--from", str(path), "--hide-tokens", "special", "-o", str(tmp_path / "o.png")).exit_code == 0
    assert "computed outside attn-cli" in manifest(outside.page())["command"]


def test_default_names_come_from_the_saved_text(saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert invoke("html", "--from", str(saved)).exit_code == 0
    assert invoke("heatmap", "--from", str(saved)).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["the-cat-sat-on-the-mat.html", "the-cat-sat-on-the-mat.png"]


def test_a_saved_toy_run_is_drawn_as_the_toy(tmp_path: Path) -> None:
    """The toy's JSON carries its config: the picture from the file is the run's, title included."""
    args = ["I saw a saw", "-t", "words", "--heads", "2", "--causal"]
    saved = tmp_path / "saw.json"
    saved.write_text(invoke("run", *args, "-F", "json").stdout)
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    assert invoke("heatmap", "--from", str(saved), "-o", str(a)).exit_code == 0
    assert invoke("heatmap", *args, "-o", str(b)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    loaded = attn_cli.load(saved)
    assert loaded.model.config is not None and loaded.model.config.causal and loaded.layers[0].causal


def test_the_first_release_names_still_work() -> None:
    """attn_cli.compat: Pipeline, Run, AttentionResult and trace.result/config/x, as docs/html.md
    and docs/models.md show them; a Pipeline's trace draws itself in a notebook as it did."""
    from attn_cli.records.layers import LayerAttention
    from attn_cli.sources.toy.source import ToySource

    config = attn_cli.Config(tokenizer="words", heads=2, causal=True)
    t = attn_cli.Pipeline(config).run("I saw a saw")
    assert isinstance(t, attn_cli.Trace) and t._repr_html_().startswith("<iframe")
    assert t.result is t.layers[0] and t.config.heads == 2 and torch.equal(t.x, t.layers[0].x)
    assert attn_cli.Run is attn_cli.Trace and attn_cli.AttentionResult is LayerAttention
    assert torch.equal(t.weights(), ToySource(config).run("I saw a saw").layers[0].weights)
    # the control: the toy source under its own name gives the record, which draws nothing itself
    assert not hasattr(ToySource(config).run("I saw a saw"), "_repr_html_")
