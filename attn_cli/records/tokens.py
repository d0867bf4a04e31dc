"""A tokenized text as every stage hands it on (``Tokens``), and its labels as tables and
pictures show them: whitespace made visible, repeats numbered. No torch.
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple


@dataclasses.dataclass(frozen=True)
class Truncation:
    """What --truncate cut from a text longer than the model's positions. The tokenizer's own
    cut keeps the first tokens, with the special tokens its template puts around them, and
    drops the rest from the end; a --pair's two segments lose theirs from their ends, the
    longer segment first. JSON writes it as ``{"from": original, "to": kept}``."""

    original: int  # the text's tokens before the cut, the tokenizer's special tokens included
    kept: int  # the tokens left: the model's positions

    @property
    def dropped(self) -> int:
        return self.original - self.kept

    def sentence(self, *, pair: bool = False) -> str:
        """What was cut, for a note or a page's header: the counts and from where."""
        if pair:
            return (
                f"the text and its pair are {self.original} tokens; --truncate kept {self.kept} (the model's positions) "
                f"and dropped {self.dropped} from the ends of the two segments, the longer one's first"
            )
        return f"the text is {self.original} tokens; --truncate kept the first {self.kept} (the model's positions) and dropped the last {self.dropped}"

    def rows(self, *, pair: bool = False) -> tuple[tuple[str, str], tuple[str, str]]:
        """The same as a header's two rows, (key, value) each: the counts, and what was dropped from where."""
        return (
            ("truncated", f"from {self.original} tokens to {self.kept} (the model's positions)"),
            ("dropped", f"{self.dropped} from the ends of the text and its pair" if pair else f"the last {self.dropped}"),
        )


class Around(NamedTuple):
    """A token's text with the text around it (``Tokens.around``): tokens ``low`` .. ``high`` - 1."""

    before: str
    own: str
    after: str
    low: int
    high: int


def _continuation(byte: int) -> bool:
    """A UTF-8 byte 10xxxxxx: one that continues a character, never its first."""
    return byte & 0xC0 == 0x80


def _continues(hex_bytes: str) -> bool:
    """A partial token whose first byte continues a character begun in the token before it."""
    return bool(hex_bytes) and _continuation(int(hex_bytes[:2], 16))


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
    unknown: tuple[str, ...] = ()  # (T,) the vocabulary's name for a token it lacks ("[UNK]"), its text what it replaced, else ""; () = none
    truncated: Truncation | None = None  # what --truncate cut from the text (these are its first tokens); None: nothing

    def unknown_name(self, position: int) -> str:
        """The vocabulary's name for token ``position`` when it stands for text the vocabulary
        lacks ("[UNK]", "<unk>"; its text is the characters it replaced), else ""."""
        return self.unknown[position] if self.unknown else ""

    def partial_bytes(self, position: int) -> str:
        """The token's bytes in hex when they are not UTF-8 on their own (part of a
        character split over tokens: its text shows them as \\xNN escapes), else ""."""
        return self.partial[position] if self.partial else ""

    def __len__(self) -> int:
        return len(self.ids)

    def around(self, key: int, n: int) -> Around:
        """The text of the ``n`` tokens before token ``key``, its own, and of the ``n`` after, each
        joined as the text joins them. Where a character is split over tokens (``partial``), the window
        takes the tokens that hold the rest of its edge characters (at most 3 more a side: UTF-8's longest
        character is 4 bytes) and its bytes are decoded together, the key's part widened to the whole
        characters its bytes belong to; bytes no character completes stay \\xNN escapes."""
        low, high, sep = max(0, key - n), min(len(self.texts), key + 1 + n), self.joiner
        if not any(self.partial[low:high]):
            after = (sep if key + 1 < len(self.texts) else "") + sep.join(self.texts[key + 1 : high])
            return Around(sep.join(self.texts[low:key]) + (sep if key else ""), self.texts[key], after, low, high)
        for _ in range(3):  # a window edge inside a character: the tokens that hold its other bytes
            if low > 0 and _continues(self.partial[low]):
                low -= 1
            if high < len(self.texts) and _continues(self.partial[high]):
                high += 1
        pieces = [bytes.fromhex(b) if b else t.encode() for b, t in zip(self.partial[low:high], self.texts[low:high])]
        joined = sep.encode().join(pieces)
        start = sum(len(piece) + len(sep) for piece in pieces[: key - low])
        end = start + len(pieces[key - low])
        while 0 < start < len(joined) and _continuation(joined[start]):  # back to its character's first byte
            start -= 1
        while end < len(joined) and _continuation(joined[end]):
            end += 1
        text = lambda part: part.decode("utf-8", errors="backslashreplace")  # noqa: E731
        return Around(text(joined[:start]), text(joined[start:end]), text(joined[end:]), low, high)

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
            unknown=pick(self.unknown),
            positions=tuple(self.position(i) for i in kept),
            given_labels=pick(self.labels),
        )

    @functools.cached_property
    def joiner(self) -> str:
        """What joins the tokens into text (``separator``), found once: it reads every token."""
        return separator(self.texts)

    @functools.cached_property
    def labels(self) -> tuple[str, ...]:
        """Display labels: whitespace made visible, an unknown token's name with what it replaced
        ("[UNK](␣猫)"), and ``#position`` on repeats (computed once)."""
        if self.given_labels:
            return self.given_labels
        shown = [f"{self.unknown[i]}({visible(t)})" if self.unknown and self.unknown[i] else visible(t) for i, t in enumerate(self.texts)]
        counts = Counter(shown)
        return tuple(f"{s}#{i}" if counts[s] > 1 else s for i, s in enumerate(shown))


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


def separator(texts: Sequence[str]) -> str:
    """What joins tokens into text: nothing where they carry their own spaces (a model's
    tokenizer), a space where none does (the words tokenizer's words)."""
    return "" if any(t[:1].isspace() or t[-1:].isspace() for t in texts) else " "
