"""Tokenizers: the tutorials' word tokenizer, tiktoken on a tiny hand-made
encoding (no data files), and the real encodings when their rank files are here."""

from __future__ import annotations

import pytest
import tiktoken
import tiktoken.registry

from attn_cli.sources.toy.config import Config
from attn_cli.runtime.errors import ExitStatus, InputError, TokenizerError, TokenizerUnavailable
from attn_cli.sources.toy.source import ToySource
from attn_cli.text.tokenizers import TiktokenTokenizer, WordTokenizer, encoding_name, get_tokenizer
from attn_cli.records.tokens import Tokens, visible

HEADLINE = "Life is short, eat dessert first"
EOT = "<|endoftext|>"


@pytest.fixture(autouse=True)
def fresh_tiktoken_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken keeps every encoding it built for the life of the process: give
    each test its own, so one that loads gpt2 cannot hide a missing file from the next."""
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})


@pytest.fixture(scope="module")
def tiny() -> tiktoken.Encoding:
    """The 256 single bytes plus a few merges, and one special token."""
    ranks = {bytes([b]): b for b in range(256)}
    for merged in (b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b"ld", b" world", b"<|"):
        ranks[merged] = len(ranks)
    return tiktoken.Encoding(
        name="tiny",
        pat_str=r"""'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks,
        special_tokens={EOT: len(ranks)},
    )


# --- the word tokenizer ---


WORDS = [
    # (text, words, ids, vocab size)
    (HEADLINE, ("Life", "is", "short", "eat", "dessert", "first"), (0, 4, 5, 2, 1, 3), 6),
    ("I saw a saw", ("I", "saw", "a", "saw"), (0, 2, 1, 2), 3),
    ("Hello shiny sun!", ("Hello", "shiny", "sun"), (0, 1, 2), 3),
    ("The cat sat on the mat", ("The", "cat", "sat", "on", "the", "mat"), (0, 1, 4, 3, 5, 2), 6),
    ("Das Leben ist kurz, iss den Nachtisch zuerst.", ("Das", "Leben", "ist", "kurz", "iss", "den", "Nachtisch", "zuerst"), (0, 1, 5, 6, 4, 3, 2, 7), 8),
    ("  spaced\tout\nlines  ", ("spaced", "out", "lines"), (2, 1, 0), 3),
    ("«Grüße», sagte sie—„schön“!", ("Grüße", "sagte", "sieschön"), (0, 1, 2), 3),
]


@pytest.mark.parametrize(("text", "words", "ids", "vocab_size"), WORDS)
def test_word_tokenizer(text: str, words: tuple[str, ...], ids: tuple[int, ...], vocab_size: int) -> None:
    tokens = WordTokenizer().encode(text)
    assert tokens.texts == words
    assert tokens.ids == ids
    assert tokens.vocab_size == vocab_size
    assert tokens.tokenizer == "words"
    assert len(tokens) == len(words)


def test_word_tokenizer_matches_the_tutorials_dictionary() -> None:
    sentence = HEADLINE
    dc = {s: i for i, s in enumerate(sorted(sentence.replace(",", "").split()))}
    assert WordTokenizer().encode(sentence).ids == tuple(dc[s] for s in sentence.replace(",", "").split())


@pytest.mark.parametrize("text", ["", "   ", "!!! ... ,,,", "—"])
def test_word_tokenizer_with_no_words(text: str) -> None:
    with pytest.raises(InputError, match="no words"):
        WordTokenizer().encode(text)


def test_repeated_words_get_their_position() -> None:
    assert WordTokenizer().encode("I saw a saw").labels == ("I", "saw#1", "a", "saw#3")
    assert WordTokenizer().encode(HEADLINE).labels == ("Life", "is", "short", "eat", "dessert", "first")


# --- tiktoken, on the tiny encoding ---


def test_tiktoken_tokenizer_ids_texts_and_vocab(tiny: tiktoken.Encoding) -> None:
    tokens = TiktokenTokenizer(tiny).encode("hello world")
    assert tokens.ids == (tiny.encode_single_token(b"hello"), tiny.encode_single_token(b" world"))
    assert tokens.texts == ("hello", " world")
    assert tokens.labels == ("hello", "␣world")
    assert tokens.vocab_size == tiny.n_vocab == 267
    assert tokens.tokenizer == "tiny"


def test_special_token_text_is_ordinary_text(tiny: tiktoken.Encoding) -> None:
    text = f"hello{EOT} world"
    with pytest.raises(ValueError):  # what plain tiktoken does with it
        tiny.encode(text)
    tokens = TiktokenTokenizer(tiny).encode(text)
    assert tiny.eot_token not in tokens.ids
    assert "".join(tokens.texts) == text
    assert tiny.decode(list(tokens.ids)) == text


def test_bytes_that_are_not_utf8_alone_are_escaped(tiny: tiktoken.Encoding) -> None:
    tokens = TiktokenTokenizer(tiny).encode("é€")  # no merges: one token per byte
    assert tokens.ids == (0xC3, 0xA9, 0xE2, 0x82, 0xAC)
    assert tokens.texts == ("\\xc3", "\\xa9", "\\xe2", "\\x82", "\\xac")
    assert tokens.labels == tokens.texts


def test_repeated_tokens_get_their_position(tiny: tiktoken.Encoding) -> None:
    tokens = TiktokenTokenizer(tiny).encode("hello hello world")  # no " hello" merge: " " is its own token
    assert tokens.texts == ("hello", " ", "hello", " world")
    assert tokens.labels == ("hello#0", "␣", "hello#2", "␣world")
    assert TiktokenTokenizer(tiny).encode("a\n\nb").labels == ("a", "↵#1", "↵#2", "b")


def test_text_with_no_tokens(tiny: tiktoken.Encoding) -> None:
    with pytest.raises(InputError, match="no tokens"):
        TiktokenTokenizer(tiny).encode("")


@pytest.mark.parametrize(
    ("text", "label"),
    [
        (" a", "␣a"),
        ("\n", "↵"),
        ("\t", "⇥"),
        ("\r\n", "␍↵"),
        ("\x00", "\\x00"),
        ("\x1b[31m", "\\x1b[31m"),
        ("\xa0", "\\xa0"),
        ("\u2028", "\\u2028"),
        ("a\u200db", "a\\u200db"),
        ("[b]", "[b]"),
        ("ü", "ü"),
        ("", "∅"),
    ],
)
def test_visible(text: str, label: str) -> None:
    assert visible(text) == label
    assert "\n" not in visible(text)


def test_labels_with_repeats_in_a_hand_built_tokens() -> None:
    tokens = Tokens(ids=(1, 2, 1), texts=(" x", "y", " x"), vocab_size=3, tokenizer="t")
    assert tokens.labels == ("␣x#0", "y", "␣x#2")


# --- names ---


@pytest.mark.parametrize(
    ("name", "encoding"),
    [("gpt2", "gpt2"), ("cl100k_base", "cl100k_base"), ("gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base"),
     ("gpt-3.5-turbo", "cl100k_base"), ("text-davinci-003", "p50k_base"), ("o200k_harmony", "o200k_harmony")],
)  # fmt: skip
def test_encoding_name(name: str, encoding: str) -> None:
    assert encoding_name(name) == encoding


@pytest.mark.parametrize("name", ["gpt5-nope", "GPT2", "word"])
def test_unknown_tokenizer(name: str) -> None:
    with pytest.raises(TokenizerError) as info:
        get_tokenizer(name)
    assert f"unknown tokenizer {name!r}" in str(info.value) and "words" in str(info.value)
    assert info.value.exit_status == ExitStatus.USAGE


def test_words_needs_no_files() -> None:
    assert isinstance(get_tokenizer("words"), WordTokenizer)


# --- offline behaviour (conftest: no rank files anywhere, downloads off) ---


def test_default_tokenizer_falls_back_to_words_with_one_note() -> None:
    pipeline = ToySource(Config())
    assert len(pipeline.notes) == 1
    note = pipeline.notes[0]
    assert "\n" not in note and "gpt2" in note and "'words'" in note
    assert "attn-cli tokenizers add" in note and "ATTN_CLI_TIKTOKEN_DIR" in note
    run = pipeline.run(HEADLINE)
    assert run.tokens.tokenizer == "words" and run.tokens.ids == (0, 4, 5, 2, 1, 3)


@pytest.mark.parametrize(("name", "missing"), [("gpt2", "vocab.bpe"), ("cl100k_base", "cl100k_base.tiktoken"), ("gpt-4o", "o200k_base.tiktoken")])
def test_a_chosen_tokenizer_that_is_not_here_is_an_error(name: str, missing: str) -> None:
    with pytest.raises(TokenizerUnavailable) as info:
        ToySource(Config(tokenizer=name))
    message = str(info.value)
    assert missing in message and "ATTN_CLI_TIKTOKEN_DIR" in message and "attn-cli tokenizers add" in message
    assert "\n" not in message
    assert info.value.exit_status == ExitStatus.TOKENIZER_UNAVAILABLE == 3


def test_words_chosen_explicitly_gives_no_note() -> None:
    assert ToySource(Config(tokenizer="words")).notes == []


# --- the real encodings ---


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "encoding", "ids"),
    [
        ("gpt2", "gpt2", (14662, 318, 1790, 11, 4483, 23084, 717)),
        ("r50k_base", "r50k_base", (14662, 318, 1790, 11, 4483, 23084, 717)),
        ("p50k_base", "p50k_base", (14662, 318, 1790, 11, 4483, 23084, 717)),
        ("cl100k_base", "cl100k_base", (26833, 374, 2875, 11, 8343, 43849, 1176)),
        ("gpt-4o", "o200k_base", (27182, 382, 4022, 11, 11237, 47296, 1577)),
    ],
)
def test_real_encodings(rank_dir, name: str, encoding: str, ids: tuple[int, ...]) -> None:
    tokens = get_tokenizer(name).encode(HEADLINE)
    assert tokens.ids == ids
    assert tokens.tokenizer == encoding
    assert tokens.texts == ("Life", " is", " short", ",", " eat", " dessert", " first")
    assert tokens.labels[1] == "␣is"


@pytest.mark.integration
def test_gpt2_special_tokens_and_partial_bytes(rank_dir) -> None:
    gpt2 = get_tokenizer("gpt2")
    tokens = gpt2.encode(f"a{EOT}b")
    assert 50256 not in tokens.ids and "".join(tokens.texts) == f"a{EOT}b"
    assert tokens.vocab_size == 50257
    emoji = gpt2.encode("🙂")  # four UTF-8 bytes, split across tokens by gpt2's ranks
    assert len(emoji) > 1 and all(text.startswith("\\x") for text in emoji.texts)


@pytest.mark.integration
def test_default_tokenizer_is_gpt2_when_its_files_are_here(rank_dir) -> None:
    pipeline = ToySource(Config())
    assert pipeline.notes == []
    assert pipeline.run(HEADLINE).tokens.ids == (14662, 318, 1790, 11, 4483, 23084, 717)


@pytest.mark.parametrize(
    ("raw", "text", "hexed"),
    [
        (b" cat", " cat", ""),
        (b"\xe7", "\\xe7", "e7"),  # the first byte of a character split over tokens
        (b"\xa7\x98", "\\xa7\\x98", "a798"),
        ("日".encode(), "日", ""),
        (b"\\xe7", "\\xe7", ""),  # a real backslash text: the same text, but not partial
    ],
)
def test_a_piece_of_a_character_is_told_from_text_that_looks_like_one(raw: bytes, text: str, hexed: str) -> None:
    from attn_cli.text.tokenizers import piece_text

    assert piece_text(raw) == (text, hexed)
    if hexed:
        assert bytes.fromhex(hexed) == raw


@pytest.mark.integration
def test_gpt2_pieces_of_characters_carry_their_bytes(rank_dir) -> None:
    from attn_cli.text.tokenizers import get_tokenizer

    tokens = get_tokenizer("gpt2").encode("猫 sat")
    assert any(tokens.partial)
    raw = b"".join(bytes.fromhex(tokens.partial_bytes(i)) if tokens.partial_bytes(i) else t.encode() for i, t in enumerate(tokens.texts))
    assert raw == "猫 sat".encode()
