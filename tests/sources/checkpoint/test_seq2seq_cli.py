"""`run --model ENCODER-DECODER --target TEXT` (issue 20): the three stacks in JSON, CSV and tables,
against transformers (its tokenizer for the source ids and the labels, its
prepare_decoder_input_ids_from_labels for the decoder's inputs, its eager attentions for every
layer and head to 1e-5), and the usage errors."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from browser_support import Page, browser  # noqa: F401  (the fixture: headless Chromium)
from invoking import invoke

from attn_cli.pipeline import open_source

SOURCE = "The cat sat on the mat."
TARGET = "the dog sat on the log"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("seq2seq-cli")
    return {"bart": checkpoints.build_bart(root / "bart"), "t5": checkpoints.build_t5(root / "t5", "gated-gelu")}


def reference(folder: Path) -> tuple[list[int], list[int], Any]:
    """transformers' source ids, decoder inputs and attentions for SOURCE and TARGET."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    source = tokenizer(SOURCE)["input_ids"]
    labels = torch.tensor([tokenizer(text_target=TARGET)["input_ids"]])
    decoder = model.prepare_decoder_input_ids_from_labels(labels=labels)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([source]), decoder_input_ids=decoder, output_attentions=True)
    return source, decoder[0].tolist(), out


def transformers_labels(folder: Path) -> list[int]:
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    return list(tokenizer(text_target=TARGET)["input_ids"])


def assert_layers(layers: list[dict[str, Any]], expected: Any) -> None:
    assert len(layers) == len(expected)
    for layer, ref in zip(layers, expected):
        assert len(layer["heads"]) == ref.shape[1]
        for head in layer["heads"]:
            torch.testing.assert_close(torch.tensor(head["weights"]), ref[0, head["head"]], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_json_has_the_three_stacks_as_transformers_computes_them(name: str, folders: dict[str, Path]) -> None:
    data = json.loads(invoke("run", SOURCE, "--model", str(folders[name]), "--target", TARGET, "-F", "json").stdout)
    source, decoder, out = reference(folders[name])
    assert [t["id"] for t in data["tokens"]] == source
    assert [t["id"] for t in data["target_tokens"]] == decoder  # labels shifted right, as transformers builds them
    assert data["target"] == TARGET
    model = data["model"]
    assert (model["layers"], model["decoder_layers"]) == (len(out.encoder_attentions), len(out.decoder_attentions))
    assert (model["heads"], model["decoder_heads"]) == (out.encoder_attentions[0].shape[1], out.decoder_attentions[0].shape[1])
    assert_layers(data["layers"], out.encoder_attentions)
    assert_layers(data["decoder_layers"], out.decoder_attentions)
    assert_layers(data["cross_layers"], out.cross_attentions)
    cross = data["cross_layers"][0]["heads"][0]
    assert len(cross["weights"]) == len(decoder) and len(cross["weights"][0]) == len(source)
    assert len(cross["keys"]) == len(source) and len(cross["queries"]) == len(decoder)
    assert "self_mass" not in cross["stats"] and "self_mass" in data["decoder_layers"][0]["heads"][0]["stats"]
    labels = transformers_labels(folders[name])  # the control: the labels unshifted are not the decoder's inputs
    assert labels != decoder and labels[:-1] == decoder[1:]


def reference_in(folder: Path, dtype: torch.dtype) -> Any:
    """transformers' attentions for SOURCE and TARGET, the model loaded in ``dtype``."""
    import transformers

    source, decoder, _ = reference(folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager", dtype=dtype).eval()
    with torch.inference_mode():
        return model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), output_attentions=True)


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_dtype_runs_the_three_stacks_in_it(name: str, folders: dict[str, Path]) -> None:
    """--dtype bfloat16 on an encoder-decoder: said in the JSON, and each stack's weights are
    transformers' in bfloat16 (the engine's test compares their bits), not float32's."""
    data = json.loads(invoke("run", SOURCE, "--model", str(folders[name]), "--target", TARGET, "--dtype", "bfloat16", "-F", "json").stdout)
    assert data["model"]["dtype"] == "bfloat16"
    half, wide = reference_in(folders[name], torch.bfloat16), reference_in(folders[name], torch.float32)
    for key, stack in (("layers", "encoder_attentions"), ("decoder_layers", "decoder_attentions"), ("cross_layers", "cross_attentions")):
        expected = [layer.float() for layer in getattr(half, stack)]
        assert_layers(data[key], expected)
        with pytest.raises(AssertionError):  # the control: float32's weights are not these
            assert_layers(data[key], getattr(wide, stack))


def test_a_device_that_is_not_there_is_refused_for_an_encoder_decoder_too(folders: dict[str, Path]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: test_cuda_runs_the_three_stacks_as_the_cpu does")
    result = invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "--device", "cuda", code=2)
    assert "--device cuda: torch sees no CUDA" in result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("name", ["bart", "t5"])
def test_cuda_runs_the_three_stacks_as_the_cpu(name: str, folders: dict[str, Path]) -> None:
    on_gpu = json.loads(invoke("run", SOURCE, "--model", str(folders[name]), "--target", TARGET, "--device", "cuda", "-F", "json").stdout)
    _, _, out = reference(folders[name])
    assert_layers(on_gpu["layers"], out.encoder_attentions)
    assert_layers(on_gpu["decoder_layers"], out.decoder_attentions)
    assert_layers(on_gpu["cross_layers"], out.cross_attentions)


def test_csv_names_the_decoder_and_cross_tables(folders: dict[str, Path]) -> None:
    text = invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-F", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    data = json.loads(invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-F", "json").stdout)
    source = [t["label"] for t in data["tokens"]]
    target = [t["label"] for t in data["target_tokens"]]
    tables = {row["table"] for row in rows}
    assert {"weights", "decoder.weights", "cross.weights", "decoder.token_id", "cross.most_attended"} <= tables
    cross = [row for row in rows if row["table"] == "cross.weights" and row["layer"] == "1" and row["head"] == "0"]
    assert len(cross) == len(target) * len(source)
    for row in cross:
        i, j = int(row["row"]), int(row["col"])
        assert (row["row_token"], row["col_token"]) == (target[i], source[j])
        assert float(row["value"]) == data["cross_layers"][1]["heads"][0]["weights"][i][j]
    decoder = [row for row in rows if row["table"] == "decoder.weights"]
    assert {row["col_token"] for row in decoder} <= set(target)


def test_tables_show_cross_attention_by_default_and_another_stack_when_asked(folders: dict[str, Path]) -> None:
    folder = str(folders["bart"])
    table = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "table", "--show", "weights").stdout
    assert "stack cross-attention (target rows x source columns)" in table and "␣mat" in table  # a source token among the columns
    header = next(line for line in table.splitlines() if "query \\ key" in line)
    assert "␣mat" in header and "</s>" in header
    decoder = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "table", "--stack", "decoder", "--show", "weights").stdout
    assert "decoder self-attention" in decoder and "·" in decoder  # causal
    header = next(line for line in decoder.splitlines() if "query \\ key" in line)
    assert "␣mat" not in header
    encoder = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "table", "--stack", "encoder", "--show", "weights").stdout
    assert "encoder self-attention" in encoder and "␣dog" not in encoder
    for shown in (table, decoder, encoder):  # the rule on top names both texts, whichever stack is shown
        assert f"{SOURCE} → {TARGET}" in shown.splitlines()[0]


def test_the_usage_errors(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = str(folders["bart"])
    gpt2 = str(checkpoints.built(tmp_path_factory, "seq2seq-cli-gpt2", checkpoints.build_gpt2))
    cases = [
        (["compare", SOURCE, SOURCE, "--model", folder, "--target", TARGET], "with --target show its three stacks"),
        (["run", SOURCE, "--model", folder], "--target"),
        (["run", SOURCE, "--model", gpt2, "--target", TARGET], "has one stack"),
        (["run", SOURCE, "--target", TARGET], "--model"),
        (["run", SOURCE, "--model", gpt2, "--stack", "cross", "-F", "table"], "one stack"),
        (["run", SOURCE, "--model", folder, "--target", TARGET, "--stack", "middle"], "choose encoder"),
        (["run", SOURCE, "--model", folder, "--target", TARGET, "--layer", "2"], "encoder stack"),
        (["run", SOURCE, "--model", folder, "--target", TARGET, "--head", "3"], "decoder stack"),
        (["run", SOURCE, "--model", folder, "--target", TARGET, "--lines"], "drop --lines"),
        (["run", SOURCE, "--model", folder, "--target", TARGET, "--truncate"], "--truncate is not available"),
        (["run", SOURCE, "--model", folder, "--target", TARGET, "--rollout"], "roll out --stack encoder or --stack decoder"),
        (["html", SOURCE, "--model", gpt2, "--stack", "cross", "-o", str(tmp_path_factory.mktemp("x") / "a.html")], "one stack"),
    ]
    for args, words in cases:
        result = invoke(*args, code=2)
        assert words in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
    # tables show one stack: --layer 2 is the decoder's and cross-attention's last, which the (unshown) encoder lacks
    table = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--layer", "2", "-F", "table", "--show", "weights").stdout
    assert "layer 2 of 3 shown" in table and "stack cross-attention" in table
    shown = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--layer", "2", "--stack", "encoder", "-F", "table", code=2)
    assert "(the encoder stack)" in shown.stderr
    # --layer 1: both stacks have it (the encoder 2 layers, the decoder 3)
    data = json.loads(invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--layer", "1", "-F", "json").stdout)
    assert [layer["layer"] for layer in data["layers"] + data["decoder_layers"] + data["cross_layers"]] == [1, 1, 1]


def test_a_pair_that_cannot_fit_is_refused_first(folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget
    from attn_cli.sources.checkpoint import pair

    ran: list[bool] = []
    real = pair.PairCheckpoint.trace
    monkeypatch.setattr(pair.PairCheckpoint, "trace", lambda *a, **k: ran.append(True) or real(*a, **k))
    monkeypatch.setattr(budget, "available_bytes", lambda: 1000)
    result = invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-F", "json", code=4)
    assert "three stacks" in result.stderr or "weights" in result.stderr
    assert not ran
    monkeypatch.setattr(budget, "available_bytes", lambda: 10**12)  # the control: room enough, it runs
    invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-F", "json")
    assert ran


@pytest.mark.parametrize("stack", ["cross", "decoder", "encoder"])
def test_heatmaps_draw_each_stack_with_its_own_axes(stack: str, folders: dict[str, Path]) -> None:
    import numpy as np

    from attn_cli.render.picture.heatmap import heatmap_figure
    from attn_cli.render.picture.kinds import What
    from attn_cli.render.picture.model_view import model_view_figure
    from attn_cli.render.picture.panels import HeatmapOptions
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.sources.toy.config import Config

    spec = SourceSpec(Config(), model=str(folders["bart"]), target=TARGET)
    trace = open_source(spec).run(SOURCE).stack(stack)
    data = json.loads(invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-F", "json").stdout)
    key = {"cross": "cross_layers", "decoder": "decoder_layers", "encoder": "layers"}[stack]
    rows = [t["label"] for t in (data["tokens"] if stack == "encoder" else data["target_tokens"])]
    columns = [t["label"] for t in (data["target_tokens"] if stack == "decoder" else data["tokens"])]
    fig = heatmap_figure(trace, HeatmapOptions(what=What.weights, heads=(0,)))
    (ax,) = [a for a in fig.axes if a.images and a.get_label().startswith("weights")]
    drawn = np.asarray(ax.images[0].get_array().filled(0.0))
    assert drawn.shape == (len(rows), len(columns))
    shown = next(layer for layer in data[key] if layer["layer"] == trace.layers[0].layer)  # the layer a one-layer picture draws
    np.testing.assert_allclose(drawn, np.array(shown["heads"][0]["weights"]), atol=1e-6)
    assert [t.get_text() for t in ax.get_xticklabels()] == columns and [t.get_text() for t in ax.get_yticklabels()] == rows
    if stack == "cross":
        assert "cross-attention" in fig._suptitle.get_text() and "” ← “The cat sat on the mat.”" in fig._suptitle.get_text()  # target ← source
    model = model_view_figure(trace, HeatmapOptions(what=What.weights))
    panels = [a for a in model.axes if a.images]
    assert len(panels) == len(trace.layers) * len(trace.shown_heads)
    bottom = [a for a in panels if a.get_xticklabels() and a.get_xticklabels()[0].get_text()]
    assert [t.get_text() for t in bottom[0].get_xticklabels()] == columns


def test_heatmap_command_writes_the_cross_attention_picture(folders: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cross.png"
    invoke("heatmap", SOURCE, "--model", str(folders["t5"]), "--target", TARGET, "-o", str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"
    every = tmp_path / "every.png"
    invoke("heatmap", SOURCE, "--model", str(folders["t5"]), "--target", TARGET, "--layer", "all", "--stack", "decoder", "-o", str(every))
    assert every.read_bytes()[:4] == b"\x89PNG"


def test_key_names_a_source_token_in_cross_attention_and_from_refuses_the_file(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = str(folders["bart"])
    table = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "table", "--key", "mat").stdout
    assert "Key ␣mat (position 6)" in table  # the source's token, which the target has not
    saved = tmp_path / "pair.json"
    invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "json", "-o", str(saved))
    result = invoke("heatmap", "--from", str(saved), "-o", str(tmp_path / "x.png"), code=2)
    assert "encoder-decoder" in result.stderr and not (tmp_path / "x.png").exists()


@pytest.fixture(scope="module")
def t5_v1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """T5 v1.0: ReLU, tied embeddings, so the decoder's output is scaled by d_model ** -0.5 before the head."""
    return checkpoints.build_t5(tmp_path_factory.mktemp("seq2seq-t5-v1") / "t5", "relu")


def head_broken(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bugs the head's own steps guard against: BART's final_logits_bias left out, T5's rescaling left out."""
    import dataclasses

    from attn_cli.sources.checkpoint.families import bart, t5

    family = bart.Bart if kind == "bart" else t5.T5
    real = family.head
    change = {"bias": None} if kind == "bart" else {"input_scale": None}
    monkeypatch.setattr(family, "head", lambda self, weights: dataclasses.replace(real(self, weights), **change))


@pytest.mark.parametrize("name", ["bart", "t5", "t5-v1"])
def test_predictions_equal_transformers_logits(name: str, folders: dict[str, Path], t5_v1: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    folder = t5_v1 if name == "t5-v1" else folders[name]
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "--predict", "3", "-F", "json").stdout)
    source, decoder, _ = reference(folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder])).logits[0]  # (T, V)
    probs = torch.softmax(logits.float(), dim=-1)
    top = torch.topk(probs, 3, dim=-1)
    assert [entry["position"] for entry in data["predictions"]] == list(range(len(decoder)))
    for entry, ids, values in zip(data["predictions"], top.indices.tolist(), top.values):
        assert [t["id"] for t in entry["top"]] == ids
        torch.testing.assert_close(torch.tensor([t["prob"] for t in entry["top"]]), values, atol=1e-5, rtol=0)
    kind = "bart" if name == "bart" else "t5" if name == "t5-v1" else None
    if kind is not None:  # the negative control: the family's own step left out changes the predictions
        head_broken(kind, monkeypatch)
        broken = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "--predict", "3", "-F", "json").stdout)
        assert [e["top"][0]["prob"] for e in broken["predictions"]] != pytest.approx([e["top"][0]["prob"] for e in data["predictions"]], abs=1e-5)


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_generate_writes_the_target_as_transformers_generate(name: str, folders: dict[str, Path]) -> None:
    import transformers

    folder = folders[name]
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--generate", "6", "-F", "json").stdout)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    config = json.loads((folder / "config.json").read_text())
    start = config.get("decoder_start_token_id", config.get("pad_token_id"))
    generation = transformers.GenerationConfig(
        eos_token_id=config["eos_token_id"], pad_token_id=config["pad_token_id"], decoder_start_token_id=start
    )
    source = [t["id"] for t in data["tokens"]]
    with torch.inference_mode():
        # use_cache=False: transformers 5 sizes its cache by the encoder's layers, and this BART has fewer of them than decoder layers
        sequence = model.generate(torch.tensor([source]), generation_config=generation, do_sample=False, max_new_tokens=6, use_cache=False)[0].tolist()
    made = sequence[1:]  # after decoder_start_token_id
    decoder = [t["id"] for t in data["target_tokens"]]
    assert decoder == [start, *made[:-1]]  # the generated tokens read back teacher-forced: row t predicts made[t]
    assert data["generated_text"] == data["target"]
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), output_attentions=True)
    assert_layers(data["cross_layers"], out.cross_attentions)
    assert_layers(data["decoder_layers"], out.decoder_attentions)
    result = invoke("run", SOURCE, "--model", str(folder), "--generate", "2", "--target", TARGET, code=2)
    assert "drop --target" in result.stderr


def test_the_page_holds_the_three_stacks_and_opens_on_cross_attention(folders: dict[str, Path], tmp_path: Path) -> None:
    from html_support import chunk, manifest

    out = tmp_path / "pair.html"
    folder = str(folders["bart"])
    invoke("html", SOURCE, "--model", folder, "--target", TARGET, "-o", str(out))
    html = out.read_text()
    data = manifest(html)
    reference_json = json.loads(invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "json").stdout)
    assert [t["stack"] for t in data["traces"]] == ["encoder", "decoder", "cross"] and data["start"] == 2
    cross = data["traces"][2]
    assert cross["keys"]["labels"] == [t["label"] for t in reference_json["tokens"]]  # the source's tokens, the columns
    assert cross["tokens"]["labels"] == [t["label"] for t in reference_json["target_tokens"]]
    assert data["traces"][0]["keys"] is None and data["traces"][1]["keys"] is None
    for layer, expected in zip(cross["layers"], reference_json["cross_layers"]):
        weights = chunk(html, layer["weights"])  # (H, T_target, T_source) uint16 = round(w * 10^4)
        assert weights.shape == (2, len(cross["tokens"]["labels"]), len(cross["keys"]["labels"]))
        np_expected = [[[round(w * 10_000) for w in row] for row in head["weights"]] for head in expected["heads"]]
        assert weights.tolist() == np_expected
    opened = tmp_path / "decoder.html"
    invoke("html", SOURCE, "--model", folder, "--target", TARGET, "--stack", "decoder", "-o", str(opened))
    assert manifest(opened.read_text())["start"] == 1


def test_the_page_draws_cross_attention_in_a_browser(folders: dict[str, Path], tmp_path: Path, browser: Any) -> None:
    """The head view lists the source on the right, the matrix is T_target x T_source with the
    source's token in the tooltip, and the picker opens the decoder's stack."""
    out = tmp_path / "pair.html"
    invoke("html", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-o", str(out))
    data = json.loads(invoke("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "-F", "json", "--layer", "0").stdout)
    source = [t["label"] for t in data["tokens"]]
    target = [t["label"] for t in data["target_tokens"]]
    p = Page(browser, out)
    assert p.page.locator(".left .tok").count() == len(target) and p.page.locator(".right .tok").count() == len(source)
    assert [b.inner_text() for b in p.page.locator(".right .tok").all()] == source
    p.page.hover(".left .tok[data-i='2']")
    assert p.text("#detail-title").startswith(target[2])
    assert p.page.locator("#detail-table tbody tr").count() == len(source)
    p.view("matrix")
    label = p.page.locator("#matrix").get_attribute("aria-label")
    assert f"{len(target)} queries by {len(source)} keys" in label
    tip = p.hover_cell(3, len(source) - 1)
    weight = data["cross_layers"][0]["heads"][0]["weights"][3][len(source) - 1]
    assert tip["key-(source)"].startswith(source[-1]) and tip["weight"] == f"{weight:.4f}"
    p.page.select_option("#text-picker", "1")
    p.ready()
    assert f"{len(target)} queries by {len(target)} keys" in p.page.locator("#matrix").get_attribute("aria-label")  # the decoder's own
    assert not p.problems, p.problems
    p.context.close()


@pytest.mark.parametrize("stack", ["cross", "decoder", "encoder"])
def test_heads_scores_one_stack(stack: str, folders: dict[str, Path]) -> None:
    """heads --stack: the masses of a self-attention stack from its weights; cross-attention has
    no masses, its alignment is each row's argmax and its special_mass is on the source's specials."""
    folder = str(folders["bart"])
    data = json.loads(invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "json").stdout)
    report = json.loads(invoke("heads", SOURCE, "--model", folder, "--target", TARGET, "--stack", stack, "-F", "json").stdout)
    key = {"cross": "cross_layers", "decoder": "decoder_layers", "encoder": "layers"}[stack]
    keys = data["tokens"] if stack != "decoder" else data["target_tokens"]
    special = [t["special"] for t in keys]
    assert report["stack"] == stack and len(report["heads"]) == sum(len(layer["heads"]) for layer in data[key])
    for entry in report["heads"]:
        weights = torch.tensor(next(layer for layer in data[key] if layer["layer"] == entry["layer"])["heads"][entry["head"]]["weights"], dtype=torch.float64)
        expected_special = weights[:, torch.tensor(special)].sum(dim=-1).mean().item()
        assert entry["special_mass"] == pytest.approx(expected_special, abs=1e-6)
        if stack == "cross":
            assert entry["self_mass"] is None and entry["previous_mass"] is None and entry["first_mass"] is None
            assert entry["alignment"] == weights.argmax(dim=-1).tolist()
        else:
            assert entry["self_mass"] == pytest.approx(weights.diagonal().mean().item(), abs=1e-6) and "alignment" not in entry
    if stack == "cross":
        assert [t["label"] for t in report["source_tokens"]] == [t["label"] for t in data["tokens"]]
        table = invoke("heads", SOURCE, "--model", folder, "--target", TARGET, "-F", "table").stdout
        assert "Alignment, layer 2" in table


@pytest.fixture(scope="module")
def marians(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("seq2seq-marian")
    return {"shared": checkpoints.build_marian(root / "shared"), "separate": checkpoints.build_marian(root / "separate", shared=False)}


def marian_reference(folder: Path, source: str, target: str) -> tuple[list[int], list[int]]:
    import transformers

    separate = (folder / "target_vocab.json").is_file()
    tokenizer = transformers.MarianTokenizer(
        vocab=str(folder / "vocab.json"), source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
        separate_vocabs=separate, target_vocab_file=str(folder / "target_vocab.json") if separate else None,
    )  # fmt: skip
    return tokenizer(source)["input_ids"], tokenizer(text_target=target)["input_ids"]


@pytest.mark.parametrize("kind", ["shared", "separate"])
def test_marian_reads_its_sentencepiece_models_as_transformers(kind: str, marians: dict[str, Path]) -> None:
    """Source ids from source.spm, labels from target.spm (and target_vocab.json when separate),
    </s> after each, unknown pieces as <unk>, a >>xx<< code kept whole; the stacks over them."""
    import transformers

    folder = marians[kind]
    target = ">>fr<< the dog sat on the log, quietly!"  # a language code, and a word the tiny vocabularies lack pieces for
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", target, "-F", "json").stdout)
    source_ids, labels = marian_reference(folder, SOURCE, target)
    assert [t["id"] for t in data["tokens"]] == source_ids
    pad = json.loads((folder / "config.json").read_text())["pad_token_id"]
    assert [t["id"] for t in data["target_tokens"]] == [pad, *labels[:-1]]
    assert labels != source_ids and data["tokenizer"].endswith("source.spm+target.spm")
    model = transformers.MarianMTModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([[pad, *labels[:-1]]]), output_attentions=True)
    assert_layers(data["cross_layers"], out.cross_attentions)
    assert_layers(data["decoder_layers"], out.decoder_attentions)


def test_marian_without_sentencepiece_says_what_to_install(marians: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import fails as when it is not installed
    result = invoke("run", SOURCE, "--model", str(marians["shared"]), "--target", TARGET, code=3)
    assert 'pip install "attn-cli[sentencepiece]"' in result.stderr and result.stderr.count("\n") == 1


def test_marian_control_the_target_through_the_source_side_differs(marians: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: a target read with the source's SentencePiece model and vocabulary
    does not give transformers' labels, so the test above tells the sides apart."""
    from attn_cli.sources.checkpoint.marian import MarianTokenizer

    folder = marians["separate"]
    monkeypatch.setattr(MarianTokenizer, "encode_target", lambda self, text: self._encode(text, "source"))
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "-F", "json").stdout)
    _, labels = marian_reference(folder, SOURCE, TARGET)
    assert [t["id"] for t in data["target_tokens"]][1:] != labels[:-1]


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_rollout_of_a_stack_equals_a_direct_rollout_of_transformers_attentions(stack: str, folders: dict[str, Path]) -> None:
    folder = folders["bart"]
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "--rollout", "--stack", stack, "-F", "json").stdout)
    _, _, out = reference(folder)
    attentions = out.encoder_attentions if stack == "encoder" else out.decoder_attentions
    product = None
    for layer in attentions:  # 0.5 * mean over heads + 0.5 * I, rows renormalized, multiplied from layer 0 up
        a = 0.5 * layer[0].double().mean(dim=0) + 0.5 * torch.eye(layer.shape[-1], dtype=torch.float64)
        a = a / a.sum(dim=-1, keepdim=True)
        product = a if product is None else a @ product
    assert data["rollout"]["stack"] == stack and data["rollout"]["through_layer"] == len(attentions) - 1
    torch.testing.assert_close(torch.tensor(data["rollout"]["weights"], dtype=torch.float64), product, atol=1e-5, rtol=0)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_a_stacks_rollout_hides_that_stacks_tokens(stack: str, folders: dict[str, Path]) -> None:
    """--hide-tokens special with a stack's rollout: weights_shown leaves out that stack's hidden
    tokens (the decoder's </s> <s> for the decoder's; it once used the source's) and renormalizes
    the rows over the rest. The control: the other stack's hidden positions differ."""
    args = ("run", SOURCE, "--model", str(folders["bart"]), "--target", TARGET, "--rollout", "--stack", stack)
    data = json.loads(invoke(*args, "--hide-tokens", "special", "-F", "json").stdout)
    own, other = ("tokens", "target_tokens") if stack == "encoder" else ("target_tokens", "tokens")
    hidden = {t["position"] for t in data[own] if t["hidden"]}
    assert hidden and hidden != {t["position"] for t in data[other] if t["hidden"]}
    for i, row in enumerate(data["rollout"]["weights_shown"]):
        if i in hidden:
            assert all(v is None for v in row)
        else:
            assert {j for j, v in enumerate(row) if v is None} == hidden and sum(v for v in row if v is not None) == pytest.approx(1.0)


def test_cross_attention_norms_equal_a_direct_computation_from_transformers(folders: dict[str, Path]) -> None:
    """||a_ij f_h(x_j)|| with f_h(x_j) = (x_j W_v^h + b_v^h) W_o^h, x the encoder's output, from the
    model's own encoder_attn weights in float64; per layer ||sum_h a_ij f_h(x_j)||."""
    import transformers

    folder = folders["bart"]
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "--norms", "-F", "json").stdout)
    source, decoder, out = reference(folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    memory = out.encoder_last_hidden_state[0].double()  # (S, D)
    for index, layer in enumerate(data["cross_layers"]):
        attn = model.model.decoder.layers[index].encoder_attn
        heads, d_v = attn.num_heads, attn.head_dim
        values = (memory @ attn.v_proj.weight.double().T + attn.v_proj.bias.double()).view(-1, heads, d_v).transpose(0, 1)  # (H, S, Dv)
        w_o = attn.out_proj.weight.double().view(-1, heads, d_v).transpose(0, 1)  # (H, D, Dv)
        sent = values @ w_o.transpose(1, 2)  # (H, S, D)
        a = out.cross_attentions[index][0].double()  # (H, T, S)
        moved = a[..., None] * sent[:, None]  # (H, T, S, D)
        expected_heads, expected_layer = moved.norm(dim=-1), moved.sum(dim=0).norm(dim=-1)
        scale = expected_layer.max().item()
        for head in layer["heads"]:
            torch.testing.assert_close(torch.tensor(head["norms"], dtype=torch.float64), expected_heads[head["head"]], atol=1e-5 * scale, rtol=0)
        torch.testing.assert_close(torch.tensor(layer["norms"], dtype=torch.float64), expected_layer, atol=1e-5 * scale, rtol=0)


def test_hide_tokens_in_either_sequence(folders: dict[str, Path], tmp_path: Path) -> None:
    """--hide-tokens hides what it names in the source and in the decoder's inputs: cross-attention
    loses hidden rows (decoder inputs) and columns (source tokens) apart, each row renormalized over
    the source tokens shown; the decoder's self-attention over its own shown tokens."""
    import numpy as np

    folder = str(folders["bart"])
    data = json.loads(invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--hide-tokens", "special,mat", "-F", "json").stdout)
    source_hidden = [t["hidden"] for t in data["tokens"]]
    target_hidden = [t["hidden"] for t in data["target_tokens"]]
    assert source_hidden == [t["special"] or t["label"] == "␣mat" for t in data["tokens"]]
    assert target_hidden == [t["special"] for t in data["target_tokens"]] and any(target_hidden)
    rows = [i for i, h in enumerate(target_hidden) if not h]
    for key, columns in (("cross_layers", [j for j, h in enumerate(source_hidden) if not h]), ("decoder_layers", rows)):
        head = data[key][-1]["heads"][0]
        w = torch.tensor(head["weights"], dtype=torch.float64)
        shown = torch.tensor([[math.nan if v is None else v for v in row] for row in head["weights_shown"]], dtype=torch.float64)
        part = w[rows][:, columns]
        torch.testing.assert_close(shown[rows][:, columns], part / part.sum(dim=-1, keepdim=True), atol=1e-6, rtol=0, equal_nan=True)
        hidden_cols = [j for j in range(w.shape[1]) if j not in columns]
        assert torch.isnan(shown[:, hidden_cols]).all() and torch.isnan(shown[[i for i in range(w.shape[0]) if i not in rows]]).all()
    table = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--hide-tokens", "special", "-F", "table", "--show", "weights").stdout
    assert "Hidden: target rows" in table and "source columns" in table
    out = tmp_path / "hidden.png"
    invoke("heatmap", SOURCE, "--model", folder, "--target", TARGET, "--hide-tokens", "special", "--head", "0", "-o", str(out))
    from attn_cli.records.hiding import HideSpec, hide
    from attn_cli.render.picture.heatmap import heatmap_figure
    from attn_cli.render.picture.kinds import What
    from attn_cli.render.picture.panels import HeatmapOptions
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.sources.toy.config import Config

    trace = hide(open_source(SourceSpec(Config(), model=folder, target=TARGET)).run(SOURCE), HideSpec.parse("special"))
    fig = heatmap_figure(trace.stack("cross"), HeatmapOptions(what=What.weights, heads=(0,)))
    (ax,) = [a for a in fig.axes if a.images]
    assert np.asarray(ax.images[0].get_array()).shape == (sum(not h for h in target_hidden), sum(not t["special"] for t in data["tokens"]))
    result = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--hide-tokens", "zebra", code=2)
    assert "not a token of the source or the target" in result.stderr


def test_the_probe_reads_the_decoders_self_attention(folders: dict[str, Path]) -> None:
    """heads --stack decoder: the repeated-token probe as the decoder's inputs (after
    decoder_start_token_id), the text in the encoder; induction and duplicate scores from
    transformers' decoder_attentions over the same ids. Other stacks: no probe, a note."""
    import transformers

    folder = folders["bart"]
    report = json.loads(invoke("heads", SOURCE, "--model", str(folder), "--target", TARGET, "--stack", "decoder", "-F", "json").stdout)
    probe = report["probe"]
    assert probe["ids"][0] == 2 and probe["start"] == 1  # BART's decoder_start_token_id
    r, start, ids = probe["repeat_length"], probe["start"], probe["ids"]
    assert ids[start : start + r] == ids[start + r : start + 2 * r]
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([tokenizer(SOURCE)["input_ids"]]), decoder_input_ids=torch.tensor([ids]), output_attentions=True)
    second = torch.arange(start + r, start + 2 * r)
    for entry in report["heads"]:
        w = out.decoder_attentions[entry["layer"]][0, entry["head"]].double()
        assert entry["induction_score"] == pytest.approx(w[second, second - r + 1].mean().item(), abs=1e-5)
        assert entry["duplicate_score"] == pytest.approx(w[second, second - r].mean().item(), abs=1e-5)
    cross = invoke("heads", SOURCE, "--model", str(folder), "--target", TARGET, "-F", "json")
    assert json.loads(cross.stdout)["probe"] is None and "--stack decoder runs it" in cross.stderr


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_explain_follows_one_cross_attention_head(name: str, folders: dict[str, Path]) -> None:
    """explain --model ENCODER-DECODER --target: one cross-attention head, its queries from the
    decoder's input x and its keys and values from the encoder's output m; the numbers are the
    trace's (JSON), the keys the source's tokens, no mask; --stack decoder follows the causal stack."""
    folder = str(folders[name])
    text = invoke("explain", SOURCE, "--model", folder, "--target", TARGET, "--head", "1", "--query", "2", "-F", "text").stdout
    data = json.loads(invoke("run", SOURCE, "--model", folder, "--target", TARGET, "-F", "json").stdout)
    source = [t["label"] for t in data["tokens"]]
    target = [t["label"] for t in data["target_tokens"]]
    layer = data["cross_layers"][-1]
    assert f"Attention in layer {layer['layer']}, head 1" in text and "cross-attention, from the decoder's inputs" in text
    assert "Source tokens (the keys)" in text and "m, the encoder's output" in text
    assert f"K = m W_kᵀ" in text and f"({len(source)} × " in text
    assert "None: cross-attention, every decoder input sees every source token" in text
    weights = layer["heads"][1]["weights"][2]  # query 2's row
    softmax = text.split("7. Softmax")[1].split("8. Context")[0].split("Query 2")[1]  # the followed query's table
    table = softmax.split("÷ Σ = weight")[1].split("\n\n")[0].splitlines()[2:]  # the rows under the header's rule
    assert len(table) == min(len(source), 12) or "Summarised (S" in softmax
    for line in table:  # the followed query's keys are source tokens, each with its weight from the trace
        label, *_, weight = line.split()
        assert weight == f"{weights[source.index(label)]:.4f}", line
    assert f"--target '{TARGET}' --stack cross" in text  # the suggested commands reproduce the stack
    decoder = invoke("explain", SOURCE, "--model", folder, "--target", TARGET, "--stack", "decoder", "-F", "text").stdout
    assert "decoder's causal self-attention" in decoder and "Causal mask" in decoder and "Source tokens" not in decoder


def test_generate_is_refused_before_generating_when_it_cannot_fit(folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget
    from attn_cli.sources.checkpoint import pair

    made: list[bool] = []
    real = pair.PairCheckpoint.generate
    monkeypatch.setattr(pair.PairCheckpoint, "generate", lambda *a, **k: made.append(True) or real(*a, **k))
    monkeypatch.setattr(budget, "available_bytes", lambda: 1000)
    invoke("run", SOURCE, "--model", str(folders["bart"]), "--generate", "5", "-F", "json", code=4)
    assert not made
    monkeypatch.setattr(budget, "available_bytes", lambda: 10**12)  # the control
    invoke("run", SOURCE, "--model", str(folders["bart"]), "--generate", "5", "-F", "json")
    assert made


@pytest.mark.parametrize(("name", "over"), [("bart", "the model's 64 positions"), ("t5", "--max-tokens")])  # T5's positions are relative
def test_a_generation_past_the_positions_is_too_large(name: str, over: str, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.sources.checkpoint import pair

    made: list[bool] = []
    real = pair.PairCheckpoint.generate
    monkeypatch.setattr(pair.PairCheckpoint, "generate", lambda *a, **k: made.append(True) or real(*a, **k))
    for n in ("64", "100000"):
        result = invoke("run", SOURCE, "--model", str(folders[name]), "--generate", n, "--max-tokens", "64" if name == "t5" else "4096", code=4)
        assert f"the decoder's start token and --generate {n} make {int(n) + 1}, over {over}" in result.stderr
        assert result.stderr.count("\n") == 1 and not made
    invoke("run", SOURCE, "--model", str(folders[name]), "--generate", "2", "-F", "json")  # the control: a small one is generated
    assert made


def ending_at_once(name: str, folder: Path, copy: Path) -> int:
    """``folder`` copied to ``copy``, its first greedy token made the end-of-sequence; that token's
    id. BART: its final_logits_bias raised at its own </s>, a real ending; T5: generation_config.json
    names the token it writes first, as test_generate.py does for GPT-2."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, copy)
    if name == "bart":
        eos = json.loads((folder / "config.json").read_text())["eos_token_id"]
        weights = load_file(copy / "model.safetensors")
        weights["final_logits_bias"][0, eos] = 1e4
        save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
        return eos
    free = json.loads(invoke("run", SOURCE, "--model", str(folder), "--generate", "2", "-F", "json").stdout)
    first = free["target_tokens"][1]["id"]  # after the start token: the first token the model wrote
    (copy / "generation_config.json").write_text(json.dumps({"eos_token_id": first}))
    return first


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_a_target_ended_at_once_is_said(name: str, folders: dict[str, Path], tmp_path: Path) -> None:
    import transformers

    folder = tmp_path / name
    eos = ending_at_once(name, folders[name], folder)
    result = invoke("run", SOURCE, "--model", str(folder), "--generate", "4", "-F", "json")
    data = json.loads(result.stdout)
    start = json.loads((folder / "config.json").read_text())["decoder_start_token_id"]
    # the target's text: its end-of-sequence decoded as transformers does (nothing for BART's </s>; T5's here is
    # whichever token the model wrote first, special or not, as the tiny tokenizer's training made it)
    decoded = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json")).decode([eos], skip_special_tokens=True)
    assert data["ended_at_once"] is True and [t["id"] for t in data["target_tokens"]] == [start]
    assert data["generated_text"] == decoded and (name == "t5" or decoded == "")
    assert result.stderr == "note: the model ended the target at once (its first token was end-of-sequence), so the decoder reads only its start token\n"
    table = invoke("run", SOURCE, "--model", str(folder), "--generate", "4", "--layer", "0", "--head", "0", env={"COLUMNS": "80"}).stdout
    assert "generated nothing: the first token was end-of-sequence" in table
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    config = transformers.GenerationConfig(eos_token_id=eos, pad_token_id=model.config.pad_token_id, decoder_start_token_id=start)
    with torch.inference_mode():
        made = model.generate(torch.tensor([[t["id"] for t in data["tokens"]]]), generation_config=config, do_sample=False, max_new_tokens=4, use_cache=False)
    assert made[0].tolist() == [start, eos]  # transformers ends it at once too
    # the control: the model as built writes a target, and nothing is said about an ending
    result = invoke("run", SOURCE, "--model", str(folders[name]), "--generate", "4", "-F", "json")
    assert json.loads(result.stdout)["ended_at_once"] is False and "at once" not in result.stderr
    table = invoke("run", SOURCE, "--model", str(folders[name]), "--generate", "4", "--layer", "0", "--head", "0", env={"COLUMNS": "80"}).stdout
    assert "generated the target (greedy): '" in table and "end-of-sequence" not in table


def test_the_python_api_takes_a_target(folders: dict[str, Path]) -> None:
    """attn_cli.trace(..., target=): the three stacks, each a trace (weights, heatmap, JSON), the page a picker."""
    from html_support import manifest

    import attn_cli

    folder = folders["bart"]
    t = attn_cli.trace(SOURCE, model=folder, target=TARGET)
    data = json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "-F", "json").stdout)
    cross = t.stack("cross")
    expected = torch.tensor(data["cross_layers"][-1]["heads"][1]["weights"])
    torch.testing.assert_close(cross.weights(layer=-1, head=1), expected, atol=0, rtol=0)
    assert json.loads(t.to_json())["cross_layers"][-1]["heads"][1]["weights"] == data["cross_layers"][-1]["heads"][1]["weights"]
    assert [tr["stack"] for tr in manifest(t.page())["traces"]] == ["encoder", "decoder", "cross"]
    fig = cross.heatmap(head=(0,))
    assert [a for a in fig.axes if a.images][0].images[0].get_array().shape == tuple(expected.shape)


def test_hiding_only_source_tokens_names_them(folders: dict[str, Path]) -> None:
    """A token only the source has: cross-attention's titles and the page name it (the decoder's rows hide nothing)."""
    folder = str(folders["bart"])
    table = invoke("run", SOURCE, "--model", folder, "--target", TARGET, "--hide-tokens", "mat", "-F", "table", "--show", "weights").stdout
    assert "␣mat hidden; rows renormalized" in " ".join(table.split()) and ",  hidden" not in table
    assert "Hidden: source columns ␣mat" in " ".join(table.split())
