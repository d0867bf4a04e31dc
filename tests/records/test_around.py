"""The text around a key (``Tokens.around``), as `run --query`'s table view and a document's page
show it beside each strongest key: a character a byte-level tokenizer split over tokens is drawn
whole, not as the \\xNN escapes of each piece; every other text is the tokens' texts joined, as
before. Controls: the pieces' own texts joined (what the views showed before) keep the escapes."""

from __future__ import annotations

import html
from pathlib import Path

import checkpoints
import pytest
from hypothesis import given
from hypothesis import strategies as st
from invoking import invoke

from attn_cli.records.tokens import Tokens, separator
from attn_cli.render.terminal.rows import AROUND, snippet
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint import source as checkpoint_source

# "cat 🐈🐈 語 dog 日本語日本語" as the tiny checkpoints' byte-level tokenizer cuts it
TEXTS = (
    "<s>", "cat", " 🐈", "\\xf0\\x9f", "\\x90\\x88", " ", "\\xe8", "\\xaa\\x9e", " dog", " 日本\\xe8", "\\xaa\\x9e",
    "\\xe6\\x97", "\\xa5本\\xe8", "\\xaa\\x9e",
)  # fmt: skip
PARTIAL = ("", "", "", "f09f", "9088", "", "e8", "aa9e", "", "20e697a5e69cace8", "aa9e", "e697", "a5e69cace8", "aa9e")
SPLIT = Tokens(ids=tuple(range(len(TEXTS))), texts=TEXTS, vocab_size=99, tokenizer="test", partial=PARTIAL)


def old_around(texts: tuple[str, ...], key: int, n: int) -> tuple[str, str, str]:
    """What the views joined before: each token's own text."""
    sep = separator(texts)
    before = sep.join(texts[max(0, key - n) : key]) + (sep if key else "")
    after = (sep if key + 1 < len(texts) else "") + sep.join(texts[key + 1 : key + 1 + n])
    return before, texts[key], after


@pytest.mark.parametrize(
    ("key", "n", "want"),
    [
        (3, 1, (" 🐈", "🐈", "", 2, 5)),  # the first half of an emoji: the key widened to the whole emoji
        (4, 1, ("", "🐈", " ", 3, 6)),  # its second half: the key widened back over the first half's token
        (7, 0, ("", "語", "", 6, 8)),  # no context asked: still the whole character
        (10, 1, (" 日本", "語", "日本語", 9, 14)),  # a piece of a token that holds whole characters too: only its character;
        # the window's last token ends inside 日, whose next token ends inside 語: both taken
        (12, 1, ("", "日本語", "", 11, 14)),  # a token that ends one character and begins another: both whole
        (8, 1, ("語", " dog", " 日本語", 6, 11)),  # a whole token between split characters: their texts whole
        (2, 1, ("cat", " 🐈", "🐈", 1, 5)),  # the window's edge inside an emoji: the token with its other half taken
    ],
)
def test_a_split_character_is_whole(key: int, n: int, want: tuple[str, str, str, int, int]) -> None:
    got = SPLIT.around(key, n)
    assert tuple(got) == want
    assert "\\x" in "".join(old_around(TEXTS, key, n))  # control: the pieces' own texts show escapes


def test_the_snippet_reads_as_the_text() -> None:
    shown = [snippet(SPLIT, key).plain for key in range(len(TEXTS))]
    assert not any("\\x" in s for s in shown)
    assert shown[7] == "…🐈 [語] dog 日本語…" and shown[0] == "[<s>]cat 🐈🐈…" and shown[13] == "… 日本語日本[語]"
    assert sum("\\x" in snippet_of_old(key) for key in range(len(TEXTS))) > 8  # control: before, most had escapes


def snippet_of_old(key: int) -> str:
    before, own, after = old_around(TEXTS, key, AROUND)
    return f"{before}[{own}]{after}"


def test_bytes_no_character_completes_stay_escapes() -> None:
    lone = Tokens(ids=(0, 1, 2), texts=("\\xaa", " a", "\\xe8"), vocab_size=9, tokenizer="test", partial=("aa", "", "e8"))
    assert tuple(lone.around(1, 1)) == ("\\xaa", " a", "\\xe8", 0, 3)
    assert tuple(lone.around(0, 0)) == ("", "\\xaa", "", 0, 1)
    # a run of more continuation bytes than a character holds: the window stops after 3 tokens a side
    many = Tokens(ids=tuple(range(6)), texts=("\\xaa",) * 5 + (" b",), vocab_size=9, tokenizer="test", partial=("aa",) * 5 + ("",))
    assert many.around(5, 1).low == 1 and many.around(5, 1).before == "\\xaa" * 4


words = st.lists(st.sampled_from(["the", "cat", "sat", " on", " ", "\n", "mat", "日本", "🐈", ""]), min_size=1, max_size=12)


@given(words, st.integers(0, 11), st.integers(0, 4))
def test_without_split_characters_the_text_is_the_tokens_joined(texts: list[str], key: int, n: int) -> None:
    """Every text whose tokens are whole characters: the same strings as before, the model
    tokenizers' texts (joined by nothing) and the words tokenizer's (joined by a space)."""
    key = key % len(texts)
    tokens = Tokens(ids=tuple(range(len(texts))), texts=tuple(texts), vocab_size=9, tokenizer="test")
    got = tokens.around(key, n)
    assert (got.before, got.own, got.after) == old_around(tuple(texts), key, n)
    assert (got.low, got.high) == (max(0, key - n), min(len(texts), key + 1 + n))


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.one_per_type(tmp_path_factory)("mistral")


TEXT = "cat 🐈🐈 語 dog 日本語日本語 and 語語語語"


def test_run_and_the_page_show_the_characters(mistral: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's own tokenizer splits these characters; `run --query`'s table view and a
    document's page list every strongest key with its text whole."""
    tokens = open_checkpoint(str(mistral)).tokenizer.encode(TEXT)
    assert sum(bool(p) for p in tokens.partial) > 8  # the text is cut inside its characters
    out = invoke("run", TEXT, "--model", str(mistral), "--no-tables", "--query", "last", "--query", "3", env={"COLUMNS": "200"}).stdout
    listed = [line for line in out.splitlines() if "…" in line or "[" in line]
    assert len(listed) >= 10 and not any("\\x" in line for line in listed), out
    assert any("[語]" in line for line in listed) and any("🐈" in line for line in listed)
    monkeypatch.setattr(checkpoint_source, "fits_at_hand", lambda parts, device: False)
    page = tmp_path / "doc.html"
    invoke("html", TEXT, "--model", str(mistral), "--layer", "1", "--query", "last", "-o", str(page))
    strongest = page.read_text(encoding="utf-8").split("its strongest keys", 1)[1]
    assert "<b class=key>" in strongest and "\\x" not in strongest and html.escape("語") in strongest
