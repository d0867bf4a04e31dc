"""Attention x gradient (``families.gradient``: Chefer et al. 2021's rule, as hila-chefer/Transformer-MM-Explainability
computes it) against transformers' autograd through ``output_attentions``: each layer's
Abar = mean_h (dy/dA * A)^+ and R = R + Abar R, y the target's logit (a classifier's label, a decoder's next
token, a masked LM's filler), on tiny sharpened BERT, DistilBERT and GPT-2 classifiers, a BERT masked LM and
a decoder of each rotary kind, to 1e-5. Controls: the gradient's sign kept, another label, the wrong layer;
the targets' refusals; every format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families.gradient import relevance

LABELS = {"num_labels": 3, "id2label": {0: "negative", 1: "neutral", 2: "positive"}, "label2id": {"negative": 0, "neutral": 1, "positive": 2}}
BUILDS: dict[str, tuple[Any, dict[str, Any]]] = {
    "bert": (checkpoints.build_encoder, dict(model_type="bert", cls="BertForSequenceClassification", **LABELS)),
    "distilbert": (checkpoints.build_encoder, dict(model_type="distilbert", cls="DistilBertForSequenceClassification", **LABELS)),
    "gpt2-classifier": (checkpoints.build_gpt2, dict(cls="GPT2ForSequenceClassification", **LABELS)),
    "bert-mlm": (checkpoints.build_encoder, dict(model_type="bert")),
    "modernbert-mlm": (checkpoints.build_encoder, dict(model_type="modernbert")),
}
DECODERS = ["gpt2", "llama", "qwen3", "gemma2", "phi3", "gpt_neox", "olmo2"]  # every kind of rotary decoder step, and GPT-2
TEXT = "the cat sat on the mat and the dog"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    made = checkpoints.builds_maker(tmp_path_factory, "gradient", BUILDS)
    types = checkpoints.one_per_type(tmp_path_factory)
    return lambda name: made(name) if name in BUILDS else types(name)


def theirs(folder: Path, ids: tuple[int, ...], target: Any, sign: bool = False) -> list[torch.Tensor]:
    """Their rule over transformers' eager attentions: grad of the target's logit, (grad * cam).clamp(min=0).mean over heads."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    arch = config.architectures[0]
    auto = (transformers.AutoModelForSequenceClassification if "SequenceClassification" in arch
            else transformers.AutoModelForMaskedLM if "MaskedLM" in arch else transformers.AutoModelForCausalLM)  # fmt: skip
    model = auto.from_pretrained(folder, attn_implementation="eager").eval()
    out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    for a in out.attentions:
        a.retain_grad()
    logits = out.logits[0] if out.logits.dim() == 2 else out.logits[0, target.position]
    one_hot = torch.zeros_like(logits)
    one_hot[target.index] = 1
    (one_hot * logits).sum().backward()
    cams = [a.grad[0] * a[0] for a in out.attentions]
    return [(c if sign else c.clamp(min=0)).mean(dim=0).detach() for c in cams]


def rule(cams: list[torch.Tensor]) -> torch.Tensor:
    r = torch.eye(cams[0].shape[-1])
    for cam in cams:
        r = r + cam @ r
    return r


@pytest.mark.parametrize("name", [*BUILDS, *DECODERS])
def test_attention_gradient_equals_their_rule(folders: Any, name: str) -> None:
    ckpt = open_checkpoint(str(folders(name)))
    text = TEXT.replace("mat", "[MASK]") if name == "bert-mlm" else TEXT.replace("mat", "<mask>") if name == "modernbert-mlm" else TEXT
    tokens = ckpt.tokenizer.encode(text)
    maps, target = ckpt.attention_gradient(tokens)
    want = theirs(folders(name), tokens.ids, target)
    assert target.predicted and target.kind == ("label" if name in ("bert", "distilbert", "gpt2-classifier") else "mask" if "mlm" in name else "next")
    for got, cam in zip(maps, want, strict=True):
        torch.testing.assert_close(got, cam.float(), atol=1e-5, rtol=1e-4)
    combined = relevance(maps, causal=not ckpt._family.encoder)
    torch.testing.assert_close(combined.weights, rule(want).float(), atol=1e-5, rtol=1e-4)
    # controls: the gradient's sign kept, the wrong layer
    assert (rule(theirs(folders(name), tokens.ids, target, sign=True)) - combined.weights).abs().max() > 1e-4
    assert (maps[0] - want[1]).abs().max() > 1e-4


def test_a_target_label_by_name_or_index(folders: Any) -> None:
    ckpt = open_checkpoint(str(folders("bert")))
    tokens = ckpt.tokenizer.encode(TEXT)
    predicted = ckpt.attention_gradient(tokens)[1]
    other = next(i for i in range(3) if i != predicted.index)
    maps, target = ckpt.attention_gradient(tokens, label=LABELS["id2label"][other])
    assert (target.index, target.label, target.predicted) == (other, LABELS["id2label"][other], False)
    for got, cam in zip(maps, theirs(folders("bert"), tokens.ids, target)):
        torch.testing.assert_close(got, cam, atol=1e-5, rtol=1e-4)
    assert ckpt.attention_gradient(tokens, label=str(other))[1].index == other
    assert (ckpt.attention_gradient(tokens)[0][-1] - maps[-1]).abs().max() > 1e-5  # another label: another map


def test_run_what_attention_gradient_every_format_and_refusals(folders: Any, minilm_path: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    bert, gpt2 = str(folders("bert")), str(folders("gpt2"))
    data = json.loads(invoke("run", TEXT, "--model", bert, "--what", "attention-gradient", "--target-label", "neutral", "-F", "json").stdout)
    target = data["attention_gradient"]["target"]
    assert target["label"] == "neutral" and target["index"] == 1 and target["position"] == 0 and target["predicted"] is False
    ckpt = open_checkpoint(bert)
    maps, _ = ckpt.attention_gradient(ckpt.tokenizer.encode(TEXT), label="neutral")
    assert torch.allclose(torch.tensor(data["layers"][-1]["attention_gradient"]), maps[-1], atol=1e-6)
    assert torch.allclose(torch.tensor(data["attention_gradient"]["weights"]), relevance(maps, causal=False).weights, atol=1e-6)
    csv = invoke("run", TEXT, "--model", bert, "--what", "attention-gradient", "--layer", "1", "-F", "csv").stdout
    assert sum(line.split(",")[2] == "attention_gradient" for line in csv.splitlines()) == 2 * len(data["tokens"]) ** 2
    table = invoke("run", TEXT, "--model", gpt2, "--what", "attention-gradient", "--head", "0").stdout
    assert "Attention x gradient" in table and "not shares of a row" in table
    invoke("heatmap", TEXT, "--model", gpt2, "--what", "attention-gradient", "-o", str(tmp_path / "g.png"))
    assert (tmp_path / "g.png").stat().st_size > 0
    refusals = [
        ((TEXT, "--model", bert, "--target-label", "joyful"), 2, "this classifier's labels are 0 negative, 1 neutral, 2 positive"),
        ((TEXT, "--model", gpt2, "--target-token", "the cat"), 2, "give one token"),
        ((TEXT, "--model", gpt2, "--target-label", "0"), 2, "use --target-token"),
        ((TEXT, "--model", str(folders("bert-mlm"))), 2, "put [MASK] in the text"),
        ((TEXT, "--model", str(minilm_path)), 3, "masked-LM head"),
        ((TEXT, "-t", "words"), 2, "give --model"),
    ]
    for args, code, said in refusals:
        err = invoke("run", *args, "--what", "attention-gradient", "-F", "json", code=code).stderr
        assert said in err and len(err.strip().splitlines()) == 1, err


def test_the_python_api_gives_attention_gradient(folders: Any) -> None:
    import attn_cli

    traced = attn_cli.trace(TEXT, model=folders("gpt2"), what="attention-gradient", target_token=" the")
    assert traced.explained is not None and traced.explained.label == " the" and not traced.explained.predicted
    assert traced.combined("attention_gradient").causal and "attention_gradient" in traced.layers[0].maps


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_an_encoder_decoders_encoder_gradient(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    """An encoder-decoder's attention x gradient is over its encoder: the gradient of the decoder's next-token logit
    after the target with respect to each encoder layer's weights (transformers' autograd through
    encoder_attentions, their rule, 1e-5); `run --target --what attention-gradient,flow` in JSON."""
    import transformers

    folder = checkpoints.one_per_type(tmp_path_factory)(name)
    pair = open_checkpoint(str(folder), pairs=True)
    source = pair.tokenizer.encode("the cat sat on the mat")
    decoder = pair.decoder_tokens(pair.tokenizer.encode_target("a cat"))
    maps, target = pair.attention_gradient(source, decoder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    out = model(input_ids=torch.tensor([source.ids]), decoder_input_ids=torch.tensor([decoder.ids]), output_attentions=True)
    for a in out.encoder_attentions:
        a.retain_grad()
    out.logits[0, -1, target.index].backward()
    assert target.kind == "next" and target.position == len(decoder) - 1 and target.index == int(out.logits[0, -1].argmax())
    cams = [(a.grad[0] * a[0]).clamp(min=0).mean(dim=0).detach() for a in out.encoder_attentions]
    for got, cam in zip(maps, cams, strict=True):
        torch.testing.assert_close(got, cam, atol=1e-5, rtol=1e-4)
    data = json.loads(invoke("run", "the cat sat on the mat", "--model", str(folder), "--target", "a cat", "--what", "attention-gradient,flow", "-F", "json").stdout)
    assert data["attention_gradient"]["stack"] == "encoder" and data["flow"]["stack"] == "encoder"
    torch.testing.assert_close(torch.tensor(data["attention_gradient"]["weights"]), relevance(maps, causal=False).weights, atol=1e-6, rtol=0)
