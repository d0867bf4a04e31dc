"""Where each token of a checkpoint's tokenizer sits in the text it came from: its text as
the original has it (what it covers, after the whitespace that precedes it there), from a
tokenizer.json's offsets (``covered``) or by following SentencePiece's pieces along the
text (``aligned``, Marian's), and the piece a vocabulary writes for what it lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def covered(
    encoding: Any, originals: tuple[str, str], special: tuple[bool, ...], partial: tuple[str, ...], texts: tuple[str, ...]
) -> tuple[str, ...]:
    """Each token's text as the original under its offsets (``originals``: the text and the
    second segment, by ``encoding.sequence_ids``): the whitespace between the end of what the
    tokens before it in that text covered and its start, then what it covers that they did
    not. A piece that is only Metaspace's '▁' covers whitespace or nothing (its offsets can
    name the next character: the prefix a text's first word gets). Special tokens and pieces
    of a character (``partial``) keep their ``texts``."""
    made, reached = list(texts), [0, 0]  # how far into each text the tokens before have covered
    for i, ((start, end), sequence, piece) in enumerate(zip(encoding.offsets, encoding.sequence_ids, encoding.tokens)):
        if sequence is None or special[i] or (partial and partial[i]):
            if sequence is not None:
                reached[sequence] = max(reached[sequence], end)
            continue
        original, at = originals[sequence], reached[sequence]
        gap, own = original[at:start], original[max(start, at) : end]
        if not piece.replace("\u2581", " ").strip() and not own.isspace():
            own, end = "", at  # a lone '▁' over a word's first character: that character is the next token's
        made[i] = gap[len(gap.rstrip()) :] + own  # the whitespace right before it, then what it covers
        reached[sequence] = max(at, end)
    return tuple(made)


def aligned(original: str, pieces: Sequence[str]) -> list[str]:
    """Each SentencePiece piece's text as ``original`` has it: a piece that starts a word
    ('▁cat') after the whitespace that precedes it there (none before the first word of a
    text that starts with one: that '▁' is the model's own prefix), then what it covers.
    Where the model's normalization changed the text (NFKC, collapsed whitespace) and a
    piece is not found where it should be, every piece is shown as the model writes it."""
    texts, at = [], 0
    for piece in pieces:
        word = piece.replace("\u2581", " ")
        body = word.lstrip(" ")
        start = at
        if body != word:  # a new word: the whitespace before it is its own
            while start < len(original) and original[start].isspace():
                start += 1
        if not original.startswith(body, start):
            return [p.replace("\u2581", " ") for p in pieces]
        texts.append(original[at : start + len(body)])
        at = start + len(body)
    return texts


def unknown_piece(model: dict[str, Any]) -> str | None:
    """The piece a tokenizer.json's model writes for text its vocabulary lacks: WordPiece's
    and BPE's ``unk_token``, Unigram's ``vocab[unk_id]``; None without one."""
    if isinstance(model.get("unk_token"), str):
        return str(model["unk_token"])
    vocab, unk_id = model.get("vocab"), model.get("unk_id")
    if isinstance(vocab, list) and isinstance(unk_id, int) and 0 <= unk_id < len(vocab) and isinstance(vocab[unk_id], list):
        return str(vocab[unk_id][0])
    return None
