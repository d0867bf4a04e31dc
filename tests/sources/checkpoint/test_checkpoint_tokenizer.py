"""A checkpoint's own tokenizer: the ids transformers gives, token texts as the
decoder makes them, padding and truncation off unless asked, and the length limit."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

import checkpoints
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.records.tokens import Truncation
from attn_cli.runtime.errors import ExitStatus, InputError, TooLargeError, UsageError

LONG = " ".join(["the cat sat on the mat"] * 6)  # 36 words: past tokenizer.json's 24, under the model's 64




def without(folder: Path, target: Path, *names: str) -> Path:
    shutil.copytree(folder, target)
    for name in names:
        (target / name).unlink()
    return target


def test_bert_padding_and_truncation_in_the_file_are_off(bert_folder: Path) -> None:
    tokenizer = open_checkpoint(str(bert_folder)).tokenizer
    short = tokenizer.encode("the cat")
    assert short.texts == ("[CLS]", "the", " cat", "[SEP]")
    assert short.special == (True, False, False, True) and short.type_ids == (0, 0, 0, 0)
    assert len(tokenizer.encode(LONG)) == 36 + 2 > checkpoints.BERT_MAX_IN_FILE


@pytest.mark.parametrize(
    ("text", "pair", "max_length", "expected"),
    [
        (LONG, None, 10, ("[CLS]", "the", " cat", " sat", " on", " the", " mat", " the", " cat", "[SEP]")),
        (LONG, "the dog sat", 9, ("[CLS]", "the", " cat", " sat", "[SEP]", "the", " dog", " sat", "[SEP]")),
        ("the cat", None, 10, ("[CLS]", "the", " cat", "[SEP]")),
    ],
)
def test_max_length_truncates_inside_cls_and_sep(bert_folder: Path, text, pair, max_length, expected) -> None:
    tokens = open_checkpoint(str(bert_folder)).tokenizer.encode(text, pair, max_length=max_length)
    assert tokens.texts == expected
    assert tokens.special == tuple(t in ("[CLS]", "[SEP]") for t in expected)


def test_a_text_past_the_position_table_is_too_large_unless_truncated(bert_folder: Path, gpt2_folder: Path) -> None:
    for folder in (bert_folder, gpt2_folder):
        ckpt = open_checkpoint(str(folder))
        with pytest.raises(TooLargeError, match=r"^the text is \d+ tokens but this model takes at most 64 \(its position table\): shorten it$") as caught:
            ckpt.tokenizer.encode(LONG * 2)
        assert caught.value.exit_status == ExitStatus.TOO_LARGE == 4
        tokens = ckpt.tokenizer.encode(LONG * 2, max_length=64)
        assert len(tokens) == 64 and len(ckpt.trace(tokens, [2])) == 1
    with pytest.raises(UsageError, match="give 3 or more"):
        open_checkpoint(str(bert_folder)).tokenizer.encode("the cat", max_length=2)


def raw_length(folder: Path, text: str, pair: str | None = None) -> int:
    """The text's tokens by the ``tokenizers`` library itself, nothing cut (the reference)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()  # BERT's file truncates at 24
    tokenizer.no_padding()
    return len(tokenizer.encode(text, pair).ids)


@pytest.mark.parametrize(("name", "pair"), [("gpt2", None), ("bert", None), ("bert", "the dog sat on the log " * 8)])
def test_a_cut_text_reports_how_many_tokens_it_had(request: pytest.FixtureRequest, name: str, pair: str | None) -> None:
    folder = request.getfixturevalue(f"{name}_folder")
    tokenizer = open_checkpoint(str(folder)).tokenizer
    original = raw_length(folder, LONG * 2, pair)
    assert original > 64
    tokens = tokenizer.encode(LONG * 2, pair, max_length=64)
    assert tokens.truncated == Truncation(original=original, kept=64) and len(tokens) == 64
    assert tokens.truncated.dropped == original - 64
    # the control: a text that fits, with or without a maximum length, was not cut
    assert raw_length(folder, "the cat sat", pair) < 64
    assert tokenizer.encode("the cat sat", pair, max_length=64).truncated is None
    assert tokenizer.encode("the cat sat", pair).truncated is None
    # --hide-tokens' subset keeps what the whole text was
    assert tokens.subset([0, 1]).truncated == tokens.truncated


def test_truncation_in_words() -> None:
    cut = Truncation(original=1028, kept=512)
    assert cut.sentence() == "the text is 1028 tokens; --truncate kept the first 512 (the model's positions) and dropped the last 516"
    assert cut.rows() == (("truncated", "from 1028 tokens to 512 (the model's positions)"), ("dropped", "the last 516"))
    assert cut.sentence(pair=True) == (
        "the text and its pair are 1028 tokens; --truncate kept 512 (the model's positions) "
        "and dropped 516 from the ends of the two segments, the longer one's first"
    )
    assert cut.rows(pair=True)[1] == ("dropped", "516 from the ends of the text and its pair")


def test_gpt2_takes_no_pair_and_no_empty_text(gpt2_folder: Path) -> None:
    tokenizer = open_checkpoint(str(gpt2_folder)).tokenizer
    with pytest.raises(UsageError, match="--pair is for encoders"):
        tokenizer.encode("the cat", "a pair")
    with pytest.raises(InputError, match="no tokens"):
        tokenizer.encode("")


def test_byte_level_texts_are_the_tokens_bytes(gpt2_folder: Path) -> None:
    tokens = open_checkpoint(str(gpt2_folder)).tokenizer.encode("The cat sat.\n Ünïcode 🐈")
    assert tokens.texts[:4] == ("The", " cat", " sat", ".")
    assert tokens.special == (False,) * len(tokens)
    assert tokens.type_ids == (0,) * len(tokens)
    assert tokens.tokenizer == "checkpoint-gpt2 tokenizer.json"
    # pieces of a multi-byte character show its bytes as \xNN, as attn-cli's tiktoken path does
    pieces = [t for t in tokens.texts if "\\x" in t]
    assert pieces, tokens.texts
    joined = "".join(tokens.texts).encode("utf-8")
    assert joined.decode("unicode_escape").encode("latin-1").decode("utf-8") == "The cat sat.\n Ünïcode 🐈"


def test_gpt2_vocab_and_merges_alone_tokenize_as_tokenizer_json(gpt2_folder: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    bare = without(gpt2_folder, tmp_path / "bare", "tokenizer.json")
    reference = AutoTokenizer.from_pretrained(gpt2_folder)
    full, alone = open_checkpoint(str(gpt2_folder)).tokenizer, open_checkpoint(str(bare)).tokenizer
    for text in ("The cat sat on the mat.", "café  naïve 日本語 🐈\n\ttabs", "<|endoftext|> after"):
        assert alone.encode(text).ids == full.encode(text).ids == tuple(reference(text)["input_ids"])
        assert alone.encode(text).texts == full.encode(text).texts
    assert alone.encode("x").tokenizer == "bare vocab.json+merges.txt"


def test_bert_vocab_txt_alone_tokenizes_as_tokenizer_json(bert_folder: Path, tmp_path: Path) -> None:
    bare = without(bert_folder, tmp_path / "bare", "tokenizer.json")
    full, alone = open_checkpoint(str(bert_folder)).tokenizer, open_checkpoint(str(bare)).tokenizer
    for text, pair in (("The Cat sat on the MAT.", None), ("café naïve", "Attention weights sum to one!")):
        ours = alone.encode(text, pair)
        assert dataclasses.replace(ours, tokenizer="") == dataclasses.replace(full.encode(text, pair), tokenizer="")
    assert ours.tokenizer == "bare vocab.txt"
