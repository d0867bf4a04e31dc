"""`census` against the measures recomputed here from transformers' output_attentions, text by
text in float64 with plain loops (not attn-cli's code), over 160 texts of mixed lengths (five
batches' worth): on the real all-MiniLM-L6-v2 (BERT) and a tiny sharpened GPT-2. Negative controls: the same reference
with a measure averaged over texts instead of rows, the sink score over rows 1 .. T-1, and the
previous token off by one, each of which the comparison tells apart."""

from __future__ import annotations

import functools
import json
import math
import random
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

WORDS = ("the cat sat on mat dog ran far away , . and then it was warm because sun shone over hills where "
         "birds sang songs of old ; children played games").split()  # fmt: skip
TOL = 1e-6


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    """n texts of 1 to 40 words, punctuation among them, deterministic."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    texts = corpus(160)
    path = tmp_path_factory.mktemp("census") / "corpus.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path, texts


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.built(tmp_path_factory, "gpt2-census", checkpoints.build_gpt2, n_positions=512)  # every text fits


@functools.lru_cache(maxsize=4)
def eager(folder: Path, texts: tuple[str, ...]) -> tuple[set[int], list[tuple[list[int], list[str], Any]]]:
    """transformers' eager attentions of each text (its ids, its pieces), and the separator ids."""
    import transformers
    from tokenizers import Tokenizer

    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    if model.config.is_encoder_decoder:  # a census reads the encoder's self-attention
        model = model.get_encoder()
    eos = {model.config.eos_token_id} if getattr(model.config, "eos_token_id", None) is not None else set()
    if (folder / "source.spm").is_file():  # Marian: transformers' own tokenizer of the source
        marian = transformers.MarianTokenizer(vocab=str(folder / "vocab.json"), source_spm=str(folder / "source.spm"),
                                              target_spm=str(folder / "target.spm"))  # fmt: skip
        encode = lambda text: (ids := marian(text)["input_ids"], marian.convert_ids_to_tokens(ids))  # noqa: E731
        trailing = {marian.eos_token_id}
    else:
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        encode = lambda text: ((e := tokenizer.encode(text)).ids, e.tokens)  # noqa: E731
        trailing = _trailing(tokenizer)
    made = []
    for text in texts:
        ids, pieces = encode(text)
        with torch.no_grad():
            attentions = model(torch.tensor([ids]), output_attentions=True).attentions
        made.append((ids, pieces, [a[0].double() for a in attentions]))
    return trailing | eos, made


def reference(folder: Path, texts: list[str], *, bug: str | None = None) -> dict[tuple[int, int], dict[str, float]]:
    """Each (layer, head)'s measures from transformers' eager attentions, as docs/census.md defines them."""
    separators, eagerly = eager(folder, tuple(texts))
    rows: dict[tuple[int, int], dict[str, list[float]]] = {}
    per_text: dict[tuple[int, int], dict[str, list[float]]] = {}
    for ids, pieces, attentions in eagerly:
        for layer, a in enumerate(attentions):
            every_head = _text_rows(a, ids, pieces, separators, bug)  # name -> each head's row values
            for head in range(a.shape[0]):
                mine = rows.setdefault((layer, head), {})
                texts_of = per_text.setdefault((layer, head), {})
                for name, heads in every_head.items():
                    got = heads[head]
                    mine.setdefault(name, []).extend(got)
                    texts_of.setdefault(name, []).append(sum(got) / len(got))
    made = {}
    for key, mine in rows.items():
        means = {name: (sum(v) / len(v) if bug != "per text" else sum(per_text[key][name]) / len(per_text[key][name])) for name, v in mine.items()}
        means["positional"] = max(means.pop("top_previous"), means.pop("top_next"))
        means["sink_score"] = sum(per_text[key]["sink"]) / len(texts)
        means.pop("sink")
        means["sink_rate"] = sum(s > 0.3 for s in per_text[key]["sink"]) / len(texts)
        for name in ("cls", "entropy_nats", "sink"):  # se: the per-text values' standard deviation (ddof 1) over sqrt(n)
            values = per_text[key][name]
            mean = sum(values) / len(values)
            se = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
            means[f"se:{'sink_score' if name == 'sink' else name}"] = se
        made[key] = means
    return made


def _trailing(tokenizer: Any) -> set[int]:
    encoding = tokenizer.encode("a")
    out = set()
    for tid, special in zip(reversed(encoding.ids), reversed(encoding.special_tokens_mask)):
        if not special:
            break
        out.add(tid)
    return out


def _text_rows(w: torch.Tensor, ids: list[int], pieces: list[str], separators: set[int], bug: str | None) -> dict[str, list[list[float]]]:
    """(H, T, T) a layer's float64 weights -> each measure's row values, a list per head (torch, row by row in meaning)."""
    n = len(ids)
    sep = [j for j in range(1, n) if ids[j] in separators]
    punct = [j for j, p in enumerate(pieces) if p.strip().strip("\u2581\u0120#").strip() in (".", ",")]
    shift = 2 if bug == "previous" else 1
    top = w.argmax(dim=-1)  # (H, T) the first of equal maxima
    positions = torch.arange(n)
    made = {
        "cls": w[..., 0], "sep": w[..., sep].sum(dim=-1), "punct": w[..., punct].sum(dim=-1), "self": w.diagonal(dim1=-2, dim2=-1),
        "entropy_nats": -torch.where(w > 0, w * w.clamp_min(1e-300).log(), 0.0).sum(dim=-1),
        "confidence": w.max(dim=-1).values, "top_previous": (top == positions - 1).double(), "top_next": (top == positions + 1).double(),
        "sink": w[:, 1:, 0] if bug == "sink" else w[..., 0], "previous": w.diagonal(offset=-shift, dim1=-2, dim2=-1),
        "next": w.diagonal(offset=1, dim1=-2, dim2=-1), "first_mass": w[:, 1:, 0],
    }  # fmt: skip
    return {k: v.tolist() for k, v in made.items() if v.numel()}


def census_json(folder: Path, corpus_path: Path) -> dict[str, Any]:
    return json.loads(invoke("census", str(corpus_path), "--model", str(folder), "-F", "json").stdout)


def assert_census(got: dict[str, Any], want: dict[tuple[int, int], dict[str, float]]) -> None:
    for head in got["heads"]:
        expected = want[(head["layer"], head["head"])]
        for name, value in expected.items():
            part, name = ("se", name[3:]) if name.startswith("se:") else ("measures", name)
            assert head[part][name] == pytest.approx(value, abs=TOL), (head["layer"], head["head"], part, name)


@pytest.mark.parametrize("model", ["minilm", "gpt2"])
def test_every_measure_is_transformers_recomputed(model: str, texts_file: tuple[Path, list[str]], request: pytest.FixtureRequest) -> None:
    folder = request.getfixturevalue("minilm_path" if model == "minilm" else "gpt2")
    path, texts = texts_file
    got = census_json(folder, path)
    assert got["texts"] == len(texts) == 160 and got["skipped"] == [] and got["empty"] == 0
    assert_census(got, reference(folder, texts))
    if model == "minilm":  # layer 0 head 2 is a previous-token head: its examples are the corpus's strongest rows
        assert got["heads"][2]["flags"][0] == "previous"
        _, eagerly = eager(folder, tuple(texts))
        rows = [(float(a[0][2, q, q - 1]), -t, -q) for t, (_, _, a) in enumerate(eagerly) for q in range(1, a[0].shape[-1])]
        fifth = sorted(rows, reverse=True)[4][0]
        of = {(-t, -q): v for v, t, q in rows}  # (text, query) -> transformers' weight on the previous token
        examples = got["heads"][2]["examples"]
        # the five strongest rows, largest first; where several are equal to float32's last bit (1.0: a saturated
        # softmax), a batch of padded texts may round one of them a bit below, so equal means within 1e-6
        assert len(examples) == 5 and len({(e["text"], e["query"]) for e in examples}) == 5
        for e in examples:
            assert e["value"] == pytest.approx(of[(e["text"], e["query"])], abs=1e-6) and e["value"] >= fifth - 1e-6
        assert [e["value"] for e in examples] == sorted((e["value"] for e in examples), reverse=True)
        assert {e["measure"] for e in examples} == {"previous"} and examples[0]["where"] == f"line {examples[0]['text'] + 1}"
    for bug in ("per text", "previous", "sink"):  # controls: each reference bug is told apart
        with pytest.raises(AssertionError):
            assert_census(got, reference(folder, texts, bug=bug))


@pytest.mark.parametrize("name", ["bart", "t5", "marian"])
def test_an_encoder_decoder_s_census_is_its_encoder_s(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """BART's, T5's and Marian's encoders over 40 texts, against transformers' encoder attentions
    (T5 names no maximum length: --window; Marian's source through transformers' MarianTokenizer)."""
    folder = checkpoints.one_per_type(tmp_path_factory)(name)
    texts = [" ".join(text.split()[:12]) for text in corpus(40, seed=9)]  # each within the tiny models' positions
    path = tmp_path_factory.mktemp("census-pair") / "corpus.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    window = ["--window", "200"] if name == "t5" else []
    got = json.loads(invoke("census", str(path), "--model", str(folder), *window, "-F", "json").stdout)
    assert got["stack"] == "encoder" and got["model"]["decoder_layers"] and got["texts"] == 40 and got["cut"] == 0
    assert_census(got, reference(folder, texts))
    with pytest.raises(AssertionError):  # control: a text's measures averaged per text first are told apart
        assert_census(got, reference(folder, texts, bug="per text"))
