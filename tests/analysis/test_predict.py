"""--predict: the whole forward (every layer, the final norm, the family's head) against
transformers' *ForCausalLM / *ForMaskedLM logits on sharpened tiny checkpoints: the top-K
ids equal and their probabilities to 1e-5; negative controls drop the step each family
adds (the final norm, Gemma 2's soft-cap)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

TEXT = "the quick brown fox jumps over the lazy dog"
K = 5

BUILDS: dict[str, tuple[Any, dict[str, Any]]] = {
    "llama-tied": (checkpoints.build_llama, dict(tie_word_embeddings=True)),
    "llama-lm_head": (checkpoints.build_llama, dict(tie_word_embeddings=False)),
    "gemma2": (checkpoints.build_decoder, dict(model_type="gemma2")),
    "gpt_neox": (checkpoints.build_decoder, dict(model_type="gpt_neox")),
    "bert": (checkpoints.build_encoder, dict(model_type="bert")),
    "roberta": (checkpoints.build_encoder, dict(model_type="roberta")),
    "distilbert": (checkpoints.build_encoder, dict(model_type="distilbert")),
    "modernbert": (checkpoints.build_encoder, dict(model_type="modernbert")),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.builds_maker(tmp_path_factory, "predict", BUILDS)


def reference_top(folder: Path, ids: tuple[int, ...], k: int = K) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' (T, K) top ids and probabilities: softmax in float32 of its logits."""
    import transformers

    config = json.loads((folder / "config.json").read_text())
    auto = transformers.AutoModelForMaskedLM if "MaskedLM" in config["architectures"][0] else transformers.AutoModelForCausalLM
    model = auto.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()  # (T, V)
    top = torch.softmax(logits, dim=-1).topk(k)
    return top.indices, top.values


def ours(folder: Path, text: str = TEXT) -> Any:
    from attn_cli.sources.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(str(folder))
    tokens = checkpoint.tokenizer.encode(text)
    return tokens, checkpoint.predict(tokens, [0], K)[1]


def assert_top_matches(folder: Path) -> None:
    tokens, predictions = ours(folder)
    ids, probs = reference_top(folder, tokens.ids)
    assert torch.equal(predictions.ids, ids), "top-K ids differ"
    torch.testing.assert_close(predictions.probs, probs, atol=1e-5, rtol=0)
    assert predictions.probs[:, 0].min() > 0.05  # sharpened: far from uniform, so a bug cannot hide


@pytest.mark.parametrize("name", ["gpt2", *BUILDS])
def test_top_k_equals_transformers(name: str, folders: Any, gpt2_folder: Path) -> None:
    assert_top_matches(gpt2_folder if name == "gpt2" else folders(name))


@pytest.mark.parametrize("name, bug", [("llama-tied", "final_norm"), ("bert", "final_norm"), ("gemma2", "softcap")])
def test_a_missing_last_step_is_caught(name: str, bug: str, folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from attn_cli.sources.checkpoint import open_checkpoint

    folder = folders(name)
    family = type(open_checkpoint(str(folder))._family)
    if bug == "final_norm":
        monkeypatch.setattr(family, "final_norm", lambda self, weights, hidden: hidden)
    else:
        real = family.head
        assert real(open_checkpoint(str(folder))._family, open_checkpoint(str(folder))._weights).softcap == 30.0
        monkeypatch.setattr(family, "head", lambda self, weights: dataclasses.replace(real(self, weights), softcap=None))
    with pytest.raises(AssertionError):
        assert_top_matches(folder)


def test_run_predict_in_json_csv_and_tables(gpt2_folder: Path) -> None:
    data = json.loads(invoke("run", TEXT, "--model", str(gpt2_folder), "--predict", "3", "--layer", "0", "-F", "json").stdout)
    tokens, _ = ours(gpt2_folder)
    ids, probs = reference_top(gpt2_folder, tokens.ids, 3)
    assert [p["position"] for p in data["predictions"]] == list(range(len(tokens)))
    for entry in data["predictions"]:
        top = entry["top"]
        assert [t["id"] for t in top] == ids[entry["position"]].tolist()
        assert [t["prob"] for t in top] == pytest.approx(probs[entry["position"]].tolist(), abs=1e-5)
        assert set(top[0]) == {"id", "text", "label", "prob", "logit"} and top[0]["logit"] >= top[1]["logit"]
    assert [layer["layer"] for layer in data["layers"]] == [0]  # the forward ran on; the trace keeps what --layer says
    rows = list(csv.DictReader(io.StringIO(invoke("run", TEXT, "--model", str(gpt2_folder), "--predict", "3", "-F", "csv").stdout)))
    predicted = [r for r in rows if r["table"] == "predictions"]
    assert len(predicted) == 3 * len(tokens) and {r["col"] for r in predicted} == {"0", "1", "2"}
    table = invoke("run", TEXT, "--model", str(gpt2_folder), "--predict", "2", "-F", "table").stdout
    assert "Predictions  top 2" in table and "the next token after each position" in table
    plain = json.loads(invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json").stdout)
    assert "predictions" not in plain


def test_no_head_and_the_toy_are_refused(minilm_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = invoke("run", TEXT, "--model", str(minilm_path), "--predict", "3", "-o", str(out), code=3)
    assert "no masked-LM head (cls.predictions.transform.dense.weight)" in result.stderr
    assert result.stderr.count("\n") == 1 and not out.exists()
    result = invoke("run", TEXT, "-t", "words", "--predict", "3", code=2)
    assert "--predict needs a trained model" in result.stderr


def test_the_memory_estimate_counts_the_head(gpt2_folder: Path) -> None:
    from attn_cli.sources.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(str(gpt2_folder))
    plain = checkpoint.estimate_bytes(20, [0])
    predicting = checkpoint.estimate_bytes(20, [0], predict=True)
    assert predicting["weights"] > plain["weights"]  # every layer's weights: the forward runs to the end
    vocab, width = checkpoint._weights.entry("wte.weight").shape
    # the head's matrix, and 20 positions' float32 logits and softmax
    assert predicting["activations"] - plain["activations"] == vocab * width * 4 + 2 * 4 * 20 * vocab


def test_the_page_and_the_walkthrough_show_them(gpt2_folder: Path, tmp_path: Path) -> None:
    from html_support import manifest

    data = json.loads(invoke("run", TEXT, "--model", str(gpt2_folder), "--predict", "2", "-F", "json").stdout)
    page = tmp_path / "p.html"
    invoke("html", TEXT, "--model", str(gpt2_folder), "--predict", "2", "-o", str(page))
    (m,) = manifest(page.read_text(encoding="utf-8"))["traces"]
    assert m["predictions"]["next"] and m["predictions"]["k"] == 2
    for entry, labels, probs in zip(data["predictions"], m["predictions"]["labels"], m["predictions"]["probs"]):
        assert labels == [t["label"] for t in entry["top"]] and probs == [f"{t['prob']:.4f}" for t in entry["top"]]
    plain = tmp_path / "plain.html"
    invoke("html", TEXT, "--model", str(gpt2_folder), "-o", str(plain))
    assert manifest(plain.read_text(encoding="utf-8"))["traces"][0]["predictions"] is None
    walk = invoke("explain", TEXT, "--model", str(gpt2_folder), "--predict", "2", "--query", "fox", "-F", "text").stdout
    fox = next(e for e in data["predictions"] if e["position"] == 4)
    assert "11. What the model predicts" in walk and f"{fox['top'][0]['label']} {fox['top'][0]['prob']:.4f}" in walk
    assert "--predict needs a trained model" in invoke("explain", TEXT, "-t", "words", "--predict", "2", code=2).stderr


def test_predict_without_a_count_gives_five(folders: Any) -> None:
    """--predict with no K on a language model: each position's five most likely tokens, the same as --predict 5."""
    bare = json.loads(invoke("run", TEXT, "--model", str(folders("llama-tied")), "-F", "json", "--predict").stdout)["predictions"]
    five = json.loads(invoke("run", TEXT, "--model", str(folders("llama-tied")), "--predict", "5", "-F", "json").stdout)["predictions"]
    assert bare == five and len(bare[0]["top"]) == 5
