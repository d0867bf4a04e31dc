"""`attn-cli census` as a user runs it: a long text cut into windows (each wrapped in the special
tokens, counted as a text, never truncated), the toy model, the CSV and the table, the refusals."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import checkpoints
import pytest
from invoking import invoke

from attn_cli.sources.census import run_census, windows_for
from attn_cli.pipeline import open_source
from attn_cli.sources.spec import SourceSpec
from attn_cli.sources.toy.config import Config
from attn_cli.text.corpus import read_corpus


@pytest.fixture(scope="module")
def short_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT whose 24 positions a long text overflows."""
    return checkpoints.built(tmp_path_factory, "bert-24", checkpoints.build_bert, max_position_embeddings=24)


def corpus_file(tmp_path: Path, *texts: str) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path


def test_a_long_text_is_cut_into_windows_each_wrapped_and_counted(short_bert: Path, tmp_path: Path) -> None:
    long = " ".join(["the cat sat on the mat"] * 12)
    path = corpus_file(tmp_path, "a short one", long)
    source = open_source(SourceSpec(Config(), model=str(short_bert)))
    windows = windows_for(source, None, None)
    assert (windows.size, windows.stride) == (22, 22)  # 24 positions less [CLS] and [SEP]
    pieces = source.checkpoint.tokenizer.windows(long, 22, 22)
    assert len(pieces) > 1 and all(len(p) <= 24 for p in pieces)
    assert all(p.texts[0] == "[CLS]" and p.texts[-1] == "[SEP]" for p in pieces)
    from tokenizers import Tokenizer

    plain = Tokenizer.from_file(str(short_bert / "tokenizer.json"))
    plain.no_truncation()
    whole = plain.encode(long, add_special_tokens=False).ids
    assert [i for p in pieces for i in p.ids[1:-1]] == whole  # stride = size: every token once, in order
    overlapping = source.checkpoint.tokenizer.windows(long, 10, 5)
    assert [p.ids[1:6] for p in overlapping[1:]] == [p.ids[6:11] for p in overlapping[:-1]]  # each window starts 5 tokens on
    result = invoke("census", str(path), "--model", str(short_bert), "-F", "json")
    data = json.loads(result.stdout)
    assert data["texts"] == 1 + len(pieces) and data["corpus_texts"] == 2 and data["cut"] == 1
    assert data["tokens"] == len(source.checkpoint.tokenizer.encode("a short one")) + sum(len(p) for p in pieces)
    assert "note: 1 texts were longer than a window and cut into windows of 22 tokens" in result.stderr
    overlapping = json.loads(invoke("census", str(path), "--model", str(short_bert), "--window", "10", "--stride", "5", "-F", "json").stdout)
    assert overlapping["window"] == {"size": 10, "stride": 5} and overlapping["texts"] > data["texts"]


def test_marian_cuts_a_long_source_as_the_tokenizers_library_cuts_a_text(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """Marian's source (SentencePiece, not the tokenizers library) cut into the windows the library's
    truncation with overflow gives for the same pieces (a word-level tokenizer over them, </s> after
    each window), a language code the first window's; the census counts them as texts."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    folder = checkpoints.one_per_type(tmp_path_factory)("marian")
    source = open_source(SourceSpec(Config(), model=str(folder)))
    long = ">>fr<< " + " ".join(["the cat sat on the mat, then it ran"] * 12)
    marian = transformers.MarianTokenizer(vocab=str(folder / "vocab.json"), source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"))
    ids = marian(long)["input_ids"]
    assert len(ids) > 64 and ids[-1] == marian.eos_token_id  # longer than the tiny model's 64 positions
    words = Tokenizer(models.WordLevel({str(i): i for i in set(ids)}, unk_token=str(ids[0])))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.post_processor = processors.TemplateProcessing(single=f"$A {ids[-1]}", special_tokens=[(str(ids[-1]), ids[-1])])
    windows = windows_for(source, None, None)
    assert (windows.size, windows.stride) == (63, 63)  # 64 positions less </s>
    for size, stride in ((63, 63), (10, 4), (10, 10), (7, 1)):
        words.enable_truncation(size + 1, stride=size - stride)
        encoding = words.encode(" ".join(map(str, ids[:-1])))
        want = [tuple(e.ids) for e in (encoding, *encoding.overflowing)]
        got = source.checkpoint.tokenizer.windows(long, size, stride)
        assert [w.ids for w in got] == want, (size, stride)
        assert all(w.texts[-1] == "</s>" and w.special[-1] for w in got)
    assert got[0].texts[0] == ">>fr<<"
    blank = "\u200b\u200b"  # not empty to str.strip, nothing to SentencePiece: </s> alone, as transformers encodes it
    assert [w.ids for w in source.checkpoint.tokenizer.windows(blank, 63, 63)] == [tuple(marian(blank)["input_ids"])] == [(ids[-1],)]
    path = corpus_file(tmp_path, "the cat sat", blank, long)
    data = json.loads(invoke("census", str(path), "--model", str(folder), "-F", "json").stdout)
    assert data["stack"] == "encoder" and data["cut"] == 1 and data["texts"] == 2 + len(source.checkpoint.tokenizer.windows(long, 63, 63))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--stride", "30", "--window", "20"), "--stride takes 1 to --window's 20 tokens"),
        (("--window", "23"), "--window takes the tokens a window holds, 1 or more (at most 22"),
        (("--layer", "0"), "census reads every layer and head"),
    ],
)
def test_refusals(short_bert: Path, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    path = corpus_file(tmp_path, " ".join(["word"] * 40))
    result = invoke("census", str(path), "--model", str(short_bert), *args, code=2)
    assert message in result.stderr and "Traceback" not in result.stderr


def test_the_toy_model_for_teaching(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, "the cat sat on the mat", "a dog barked , then it ran .")
    data = json.loads(invoke("census", str(path), "--heads", "2", "--causal", "-F", "json").stdout)
    assert data["texts"] == 2 and len(data["heads"]) == 2 and data["window"] is None
    for head in data["heads"]:
        assert head["measures"]["first_row_entropy_nats"] == 0.0  # a causal first row sees one key
        assert head["measures"]["next"] == 0.0 and head["measures"]["sink_score"] == pytest.approx(head["measures"]["cls"])
    assert "the toy model's are not cut" in invoke("census", str(path), "--window", "5", code=2).stderr


def test_csv_and_table(minilm_path: Path, tmp_path: Path) -> None:
    path = corpus_file(tmp_path, "The cat sat on the mat.", "He said, hello there.", "A dog barked at the moon, loudly.")
    rows = list(csv.DictReader(io.StringIO(invoke("census", str(path), "--model", str(minilm_path), "-F", "csv").stdout)))
    assert len(rows) == 6 * 12 and rows[0]["layer"] == "0" and rows[0]["head"] == "0"
    assert {"cls", "cls_se", "sink_rate", "positional", "distance_mass_0", "distance_mass_0_se", "flags"} <= set(rows[0])
    data = json.loads(invoke("census", str(path), "--model", str(minilm_path), "-F", "json").stdout)
    assert float(rows[5]["sep"]) == data["heads"][5]["measures"]["sep"]
    out = invoke("census", str(path), "--model", str(minilm_path), "-F", "table", env={"COLUMNS": "160"}).stdout
    assert "3 texts" in out and "sink rate" in out and "positional" in out
    example = data["heads"][0]["examples"][0]
    assert set(example) == {"text", "window", "query", "measure", "value", "where"} and example["where"].startswith("line ")


def test_run_census_of_some_texts(minilm_path: Path, tmp_path: Path) -> None:
    """A shard: the texts it is given, by index, and only those."""
    path = corpus_file(tmp_path, "one two", "three four five", "six")
    source = open_source(SourceSpec(Config(), model=str(minilm_path)))
    made = run_census(source, read_corpus(str(path)), windows=windows_for(source, None, None), texts=[2, 0])
    assert made.tally.texts == 2 and made.tally.tokens == 3 + 4  # [CLS] six [SEP], [CLS] one two [SEP]
