"""Text -> Tokens, with tiktoken encodings or the tutorials' word tokenizer.

``get_tokenizer(name)`` accepts any tiktoken encoding name (``gpt2``,
``cl100k_base``, ...), any model name tiktoken maps to one (``gpt-4o``), or
``words``: punctuation stripped, split on whitespace, ids are positions in the
sorted vocabulary of the text itself (the "Life is short" walk-through).
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

from attn_cli.runtime.errors import InputError, TokenizerError

WORDS = "words"


@dataclasses.dataclass(frozen=True)
class Tokens:
    """A tokenized text. ``texts`` decode each token alone: bytes that are not
    valid UTF-8 on their own are kept as ``\\xNN`` escapes."""

    ids: tuple[int, ...]
    texts: tuple[str, ...]
    vocab_size: int  # rows of the embedding table
    tokenizer: str  # the tokenizer actually used (an encoding name, "words", or a model's tokenizer.json)
    special: tuple[bool, ...] = ()  # (T,) added by the model's tokenizer (BOS, [CLS], [SEP]); () = none
    type_ids: tuple[int, ...] = ()  # (T,) segment of each token (0, or 1 for a --pair); () = all 0
    positions: tuple[int, ...] = ()  # (T,) each token's position in its text, when these are some of its tokens; () = 0..T-1
    given_labels: tuple[str, ...] = ()  # (T,) the labels the full text gave them (``subset``); () = made here
    partial: tuple[str, ...] = ()  # (T,) a token's bytes in hex when they are part of a character, else ""; () = none

    def partial_bytes(self, position: int) -> str:
        """The token's bytes in hex when they are not UTF-8 on their own (part of a
        character split over tokens: its text shows them as \\xNN escapes), else ""."""
        return self.partial[position] if self.partial else ""

    def __len__(self) -> int:
        return len(self.ids)

    def is_special(self, position: int) -> bool:
        return bool(self.special) and self.special[position]

    def position(self, i: int) -> int:
        """Token ``i``'s position in its text (``i`` itself unless this is a ``subset``)."""
        return self.positions[i] if self.positions else i

    def subset(self, kept: Sequence[int]) -> Tokens:
        """The tokens at positions ``kept``, keeping their positions and labels (``--hide-tokens``)."""
        pick = lambda values: tuple(values[i] for i in kept) if values else ()  # noqa: E731
        return dataclasses.replace(
            self,
            ids=pick(self.ids),
            texts=pick(self.texts),
            special=pick(self.special),
            type_ids=pick(self.type_ids),
            partial=pick(self.partial),
            positions=tuple(self.position(i) for i in kept),
            given_labels=pick(self.labels),
        )

    @functools.cached_property
    def labels(self) -> tuple[str, ...]:
        """Display labels: whitespace made visible, and ``#position`` on repeats (computed once)."""
        if self.given_labels:
            return self.given_labels
        shown = [visible(t) for t in self.texts]
        counts = Counter(shown)
        return tuple(f"{s}#{i}" if counts[s] > 1 else s for i, s in enumerate(shown))


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
    from attn_cli.rankfiles import load_encoding

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


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
_ESCAPED = {"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"}  # Zs: every space but " ", handled above


def visible(text: str) -> str:
    """Token text for a label: spaces and line breaks shown, control characters escaped."""
    if text.isascii() and text.isprintable():  # most tokens: only the spaces change
        return text.replace(" ", "␣") or "∅"
    out = []
    for c in text:
        if c in _VISIBLE:
            out.append(_VISIBLE[c])
        elif unicodedata.category(c) in _ESCAPED:
            # Invisible or line-breaking characters (NBSP, U+2028, zero-width
            # joiners, lone surrogates) would hide in a label or break a table row.
            out.append(c.encode("unicode_escape", errors="backslashreplace").decode("ascii"))
        else:
            out.append(c)
    return "".join(out) or "∅"
