"""Classifier checkpoints (*ForSequenceClassification, sharpened tiny ones of each family): `--predict`
gives the labels at the position the head reads, equal to transformers' logits and probabilities
(the decoders pooled on the last token that is not padding); JSON, CSV and the table; a classifier
has no language-model head (--generate: exit 3). Controls: the head read at another position, the
pooler left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import classifier as classifier_module

LABELS = {"id2label": {0: "negative", 1: "neutral", 2: "positive"}, "label2id": {"negative": 0, "neutral": 1, "positive": 2}}
TEXT = "the cat sat on the mat, and the dog sat on the log."
BUILDS: dict[str, tuple[Any, dict[str, Any]]] = {
    "bert": (checkpoints.build_encoder, dict(model_type="bert", cls="BertForSequenceClassification")),
    "distilbert": (checkpoints.build_encoder, dict(model_type="distilbert", cls="DistilBertForSequenceClassification")),
    "roberta": (checkpoints.build_encoder, dict(model_type="roberta", cls="RobertaForSequenceClassification")),
    "xlm-roberta": (checkpoints.build_encoder, dict(model_type="xlm-roberta", cls="XLMRobertaForSequenceClassification")),
    "mpnet": (checkpoints.build_encoder, dict(model_type="mpnet", cls="MPNetForSequenceClassification")),
    "modernbert": (checkpoints.build_encoder, dict(model_type="modernbert", cls="ModernBertForSequenceClassification")),
    "modernbert-mean": (checkpoints.build_encoder, dict(model_type="modernbert", cls="ModernBertForSequenceClassification", classifier_pooling="mean")),
    "gpt2": (checkpoints.build_gpt2, dict(cls="GPT2ForSequenceClassification")),
    "llama": (checkpoints.build_llama, dict(model_type="llama", cls="LlamaForSequenceClassification")),
    "mistral": (checkpoints.build_llama, dict(model_type="mistral", cls="MistralForSequenceClassification")),
    "qwen2": (checkpoints.build_llama, dict(model_type="qwen2", cls="Qwen2ForSequenceClassification")),
    "qwen3": (checkpoints.build_decoder, dict(model_type="qwen3", cls="Qwen3ForSequenceClassification")),
    "gemma": (checkpoints.build_decoder, dict(model_type="gemma", cls="GemmaForSequenceClassification")),
    "multi-label": (checkpoints.build_encoder, dict(model_type="bert", cls="BertForSequenceClassification", problem_type="multi_label_classification")),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.builds_maker(tmp_path_factory, "classifier", {k: (b, {**kw, **LABELS, "num_labels": 3}) for k, (b, kw) in BUILDS.items()})


def theirs(folder: Path, ids: tuple[int, ...]) -> torch.Tensor:
    import transformers

    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()  # (N,)


def classify(folder: Path, text: str = TEXT) -> tuple[Any, Any]:
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(text)
    return tokens, ckpt.predict(tokens, [0], 3, "weights")[1]


@pytest.mark.parametrize("name", list(BUILDS))
def test_labels_equal_transformers(folders: Any, name: str) -> None:
    tokens, got = classify(folders(name))
    want = theirs(folders(name), tokens.ids)
    order = want.argsort(descending=True).tolist()
    assert list(got.indices) == order and list(got.labels) == [LABELS["id2label"][i] for i in order]
    torch.testing.assert_close(torch.tensor(got.logits), want[order], atol=1e-5, rtol=1e-5)
    scores = torch.sigmoid(want) if name == "multi-label" else torch.softmax(want, dim=-1)
    torch.testing.assert_close(torch.tensor(got.probs), scores[order], atol=1e-6, rtol=1e-5)
    expected = {"modernbert-mean": None}.get(name, len(tokens) - 1 if name in ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma") else 0)
    assert got.position == expected


def test_a_decoder_pools_the_last_token_that_is_not_padding(folders: Any) -> None:
    """qwen3's tiny config names pad_token_id 0: a text ending in it is pooled before it, as transformers does."""
    ckpt = open_checkpoint(str(folders("qwen3")))
    tokens = ckpt.tokenizer.encode(TEXT)
    padded = ckpt.tokenizer.tokens_from_ids((*tokens.ids, 0, 0), (*(False,) * len(tokens), True, True))
    got = ckpt.predict(padded, [0], 3, "weights")[1]
    assert got.position == len(tokens) - 1
    torch.testing.assert_close(torch.tensor(got.logits), theirs(folders("qwen3"), padded.ids)[list(got.indices)], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, bug", [("llama", "first"), ("bert", "no pooler")])
def test_controls_are_told_apart(folders: Any, name: str, bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if bug == "first":  # the decoder's head read at position 0
        monkeypatch.setattr(classifier_module, "pooled_position", lambda c, ids: 0)
    else:  # BERT's pooler skipped: the classifier reads the raw [CLS] state
        monkeypatch.setitem(classifier_module.LAYOUTS, "bert", (None, "", classifier_module.LAYOUTS["bert"][2]))
    tokens, got = classify(folders(name))
    want = theirs(folders(name), tokens.ids)
    assert not torch.allclose(torch.tensor(got.logits), want[list(got.indices)], atol=1e-3)


def test_cli_json_csv_table_and_no_lm_head(folders: Any, tmp_path: Path) -> None:
    folder = str(folders("gpt2"))
    data = json.loads(invoke("run", TEXT, "--model", folder, "--predict", "2", "-F", "json").stdout)
    p = data["predictions"]
    assert set(p) == {"position", "top"} and len(p["top"]) == 2
    assert set(p["top"][0]) == {"index", "label", "prob", "logit"} and p["top"][0]["label"] in LABELS["label2id"]
    assert p["top"][0]["prob"] >= p["top"][1]["prob"]
    csv = invoke("run", TEXT, "--model", folder, "--predict", "3", "-F", "csv").stdout
    assert sum(line.split(",")[2] == "predictions" for line in csv.splitlines()) == 3
    table = invoke("run", TEXT, "--model", folder, "--predict", "3", "-F", "table").stdout
    assert "Classification" in table and "the classification head reads position" in table
    refused = invoke("run", TEXT, "--model", folder, "--generate", "2", code=3).stderr
    assert "is a sequence classifier" in refused and len(refused.strip().splitlines()) == 1


def test_predict_without_a_count(folders: Any) -> None:
    """--predict with no K: a classifier's every label (at the end, before another option, before the text), a
    language model's five; a count still works, and one out of range is one line (exit 2)."""
    bert, gpt2 = str(folders("bert")), str(folders("gpt2"))
    for args in ((TEXT, "--model", bert, "-F", "json", "--predict"), (TEXT, "--model", bert, "--predict", "-F", "json"), ("--predict", TEXT, "--model", bert, "-F", "json")):
        got = json.loads(invoke("run", *args).stdout)["predictions"]
        assert [entry["label"] for entry in got["top"]] != [] and len(got["top"]) == 3, args
    assert len(json.loads(invoke("run", TEXT, "--model", bert, "--predict", "2", "-F", "json").stdout)["predictions"]["top"]) == 2
    # the GPT-2 classifier's folder has no LM head: a language model's default count is tested on the tests' GPT-2 LM
    err = invoke("run", TEXT, "--model", gpt2, "--predict", "2000", code=2).stderr
    assert err == "attn-cli: error: --predict: 2000 is not in the range 0 to 1000\n"

