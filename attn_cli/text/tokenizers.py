"""Text -> Tokens, with tiktoken encodings or the tutorials' word tokenizer.

``get_tokenizer(name)`` accepts any tiktoken encoding name (``gpt2``,
``cl100k_base``, ...), any model name tiktoken maps to one (``gpt-4o``), or
``words``: punctuation stripped, split on whitespace, ids are positions in the
sorted vocabulary of the text itself (the "Life is short" walk-through).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import Protocol

from attn_cli.records.tokens import Tokens
from attn_cli.runtime.errors import InputError, TokenizerError

WORDS = "words"


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> Tokens: ...


class WordTokenizer:
    """The tutorials' tokenizer: vocabulary = sorted unique words of the text."""

    name = WORDS

    def encode(self, text: str) -> Tokens:
        words = strip_punctuation(text).split()
        if not words:
            raise InputError("the text has no words once punctuation is stripped; give some words")
        vocabulary = sorted(set(words))
        index = {w: i for i, w in enumerate(vocabulary)}
        return Tokens(tuple(index[w] for w in words), tuple(words), len(vocabulary), WORDS)


class TiktokenTokenizer:
    def __init__(self, encoding) -> None:  # tiktoken.Encoding
        self._encoding = encoding
        self.name: str = encoding.name

    def encode(self, text: str) -> Tokens:
        # disallowed_special=() makes "<|endoftext|>" in user text ordinary text.
        ids = self._encoding.encode(text, allowed_special=set(), disallowed_special=())
        if not ids:
            raise InputError("the text gives no tokens; give some text")
        return self.tokens_from_ids(ids)

    def tokens_from_ids(self, ids: Sequence[int]) -> Tokens:
        """Tokens for ids chosen directly (the `heads` probe), labelled as encode labels them."""
        single = self._encoding.decode_single_token_bytes
        texts, partial = pieces_text(single(i) for i in ids)
        return Tokens(tuple(ids), texts, self._encoding.n_vocab, self.name, partial=partial)

    def ordinary_ids(self) -> range:
        """The byte-pair tokens, without the special ones (which tiktoken numbers after them)."""
        specials = [self._encoding.encode_single_token(s) for s in self._encoding.special_tokens_set]
        return range(min(specials, default=self._encoding.n_vocab))


def encoding_name(name: str) -> str:
    """An encoding name for ``name``, which may be a model name; raises TokenizerError."""
    import tiktoken
    import tiktoken.model

    if name in tiktoken.list_encoding_names():
        return name
    try:
        return tiktoken.model.encoding_name_for_model(name)
    except KeyError:
        known = ", ".join([WORDS, *tiktoken.list_encoding_names()])
        raise TokenizerError(
            f"unknown tokenizer {name!r}: use one of {known}, or a model name such as gpt-4o"
        ) from None


def get_tokenizer(name: str) -> Tokenizer:
    """The tokenizer called ``name``; raises TokenizerError or TokenizerUnavailable."""
    if name == WORDS:
        return WordTokenizer()
    from attn_cli.text.rankfiles import load_encoding

    return TiktokenTokenizer(load_encoding(encoding_name(name)))


def piece_text(raw: bytes) -> tuple[str, str]:
    """A token's text, and its bytes in hex when they are not UTF-8 on their own
    (then the text shows them as \\xNN escapes, as Python's backslashreplace does)."""
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="backslashreplace"), raw.hex()


def pieces_text(raws: Iterable[bytes]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``piece_text`` for each token: (texts, partial), partial () when every token is whole."""
    decoded = [piece_text(raw) for raw in raws]
    texts = tuple(text for text, _ in decoded)
    partial = tuple(hexed for _, hexed in decoded)
    return texts, partial if any(partial) else ()


def strip_punctuation(text: str) -> str:
    return "".join(c for c in text if not unicodedata.category(c).startswith("P"))
