"""A checkpoint's own tokenizer: tokenizer.json (or GPT-2's vocab.json + merges.txt,
or BERT's vocab.txt) through the ``tokenizers`` library, padding and truncation off.

Each token's text is what it covers of the text: byte-level pieces ('Ġcat') go back to
their bytes and are decoded as UTF-8 with ``\\xNN`` escapes for bytes that are not whole
characters on their own (as attn-cli's tiktoken tokenizers show them), and so do
SentencePiece's byte-fallback pieces ('<0xE6>'); every other token (WordPiece, Metaspace,
Unigram) is the original text under its offsets, with the whitespace that precedes it there
('cat' in "The cat's" is ' cat', its "'" and 's' none; the case as written, not as
lower-cased). A token the vocabulary lacks ([UNK]) is the text it replaced, its name kept
beside it (``Tokens.unknown``). Tokens the tokenizer added ([CLS], [SEP], BOS) show as
themselves. Ids chosen directly (the heads' probe, generated tokens, predictions) have no
text under them: they show what the tokenizer's decoder makes of them in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import json
import re
from pathlib import Path
from typing import Any

from attn_cli.runtime.errors import InputError, ModelUnavailable, TooLargeError, UsageError
from attn_cli.records.tokens import Tokens, Truncation
from attn_cli.sources.checkpoint.spans import covered, unknown_piece
from attn_cli.text.tokenizers import piece_text

TOKENIZER_JSON = "tokenizer.json"
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (the inverse of bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shift = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + shift)
            shift += 1
    return {chr(c): b for b, c in zip(printable, chars)}


_BYTES = _byte_decoder()


def check_stride(size: int, stride: int) -> None:
    """--stride within --window: a larger one would skip text."""
    if not 1 <= stride <= size:
        raise UsageError(f"--stride takes 1 to --window's {size} tokens (more would skip text), not {stride}")


class CheckpointTokenizer:
    """Text (and an optional second segment) -> Tokens, the checkpoint's way."""

    def __init__(self, tokenizer: Any, name: str, *, max_positions: int | None, pairs: bool) -> None:
        tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128 and truncates there: neither, here
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self.name = name
        self.max_positions = max_positions
        self.pairs = pairs
        described = json.loads(tokenizer.to_str())
        self._byte_level = "ByteLevel" in json.dumps(described.get("decoder") or {})
        self._unknown = unknown_piece(described.get("model") or {})

    def encode(self, text: str, pair: str | None = None, *, max_length: int | None = None) -> Tokens:
        """The text's tokens; with ``max_length``, cut to that many when longer, and
        ``Tokens.truncated`` says how many there were."""
        if pair is not None and not self.pairs:
            raise UsageError("--pair is for encoders (BERT-style models); this model reads one text: drop --pair")
        if max_length is not None:
            least = self._tokenizer.num_special_tokens_to_add(pair is not None) + 1
            if max_length < least:
                raise UsageError(f"a maximum length of {max_length} tokens leaves no room for the text; give {least} or more")
        encoding = self._tokenizer.encode(text, pair)
        if not encoding.ids:
            raise InputError("the text gives no tokens; give some text")
        truncated = None
        if max_length is not None and len(encoding.ids) > max_length:
            original = len(encoding.ids)
            encoding = self._truncated(text, pair, max_length)
            truncated = Truncation(original, len(encoding.ids))
        if self.max_positions is not None and len(encoding.ids) > self.max_positions:
            raise TooLargeError(too_long(len(encoding.ids), self.max_positions))
        return self._tokens_of(encoding, (text, pair or ""), truncated)

    def windows(self, text: str, size: int, stride: int) -> list[Tokens]:
        """A long text as windows of ``size`` tokens starting every ``stride`` tokens (the last what is
        left), each wrapped in the special tokens a text of its own gets (the library's truncation with
        overflow); one window where the text fits."""
        check_stride(size, stride)
        self._tokenizer.enable_truncation(size + self._tokenizer.num_special_tokens_to_add(False), stride=size - stride)
        try:
            encoding = self._tokenizer.encode(text)
        finally:
            self._tokenizer.no_truncation()
        if not encoding.ids:
            raise InputError("the text gives no tokens; give some text")
        return [self._tokens_of(part, (text, ""), None) for part in (encoding, *encoding.overflowing)]

    def _tokens_of(self, encoding: Any, text: tuple[str, str], truncated: Truncation | None) -> Tokens:
        """The library's encoding of ``text`` (a text and its pair, "" for none) as Tokens."""
        special = tuple(bool(s) for s in encoding.special_tokens_mask)
        placed = None if self._byte_level else tuple(s is not None for s in encoding.sequence_ids)  # what ``covered`` writes
        texts, partial = self._texts(encoding.tokens, special, placed)
        if not self._byte_level:
            texts = covered(encoding, text, special, partial, texts)
        unknown = tuple(piece if piece == self._unknown and not s else "" for piece, s in zip(encoding.tokens, special))
        return Tokens(
            ids=tuple(encoding.ids),
            texts=texts,
            partial=partial,
            vocab_size=self._tokenizer.get_vocab_size(with_added_tokens=True),
            tokenizer=self.name,
            special=special,
            type_ids=tuple(encoding.type_ids),
            unknown=unknown if any(unknown) else (),
            truncated=truncated,
        )

    def encode_target(self, text: str) -> Tokens:
        """An encoder-decoder's target (its labels): the same tokenizer as the source's (BART, T5)."""
        return self.encode(text)

    # The `heads` probe: ids chosen directly, not text (small additions for it).
    def leading_special_ids(self) -> tuple[int, ...]:
        """The special tokens the tokenizer puts before a text (BOS, [CLS]); () for none."""
        return self._edge_special_ids(reverse=False)

    def trailing_special_ids(self) -> tuple[int, ...]:
        """The special tokens the tokenizer puts after a text ([SEP], </s>); () for none."""
        return self._edge_special_ids(reverse=True)

    def _edge_special_ids(self, *, reverse: bool) -> tuple[int, ...]:
        """The run of special tokens at one end of a one-word text's encoding, in text order."""
        encoding = self._tokenizer.encode("a")
        pairs = list(zip(encoding.ids, encoding.special_tokens_mask))
        run = []
        for tid, special in reversed(pairs) if reverse else pairs:
            if not special:
                break
            run.append(tid)
        return tuple(reversed(run)) if reverse else tuple(run)

    def ordinary_ids(self) -> list[int]:
        """Every id of the vocabulary but the special tokens."""
        special = {tid for tid, token in self._tokenizer.get_added_tokens_decoder().items() if token.special}
        return [tid for tid in range(self._tokenizer.get_vocab_size(with_added_tokens=True)) if tid not in special]

    def special_ids(self) -> frozenset[int]:
        """The ids of the special tokens (BOS, EOS, [CLS], ...)."""
        return frozenset(tid for tid, token in self._tokenizer.get_added_tokens_decoder().items() if token.special)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens left out), as the tokenizer decodes it."""
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))

    def pieces(self, text: str) -> list[tuple[int, str]]:
        """``text``'s tokens as (id, piece) without the special tokens the tokenizer adds around a text."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return list(zip(encoding.ids, encoding.tokens))

    def role_id(self, role: str) -> int | None:
        """The id of the tokenizer's "mask", "pad" or "unk" token (BERT's [MASK], RoBERTa's <mask>, ...), or None."""
        names = {"mask": ("[MASK]", "<mask>"), "pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>")}[role]
        found = [self._tokenizer.token_to_id(name) for name in names]
        return next((tid for tid in found if tid is not None), None)

    def id_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id's text on its own (a prediction's), as ``encode`` would show that token
        at the start of a text; special tokens as they are."""
        special = self.special_ids()
        return [self._texts([self._tokenizer.id_to_token(tid) or "?"], (tid in special,))[0][0] for tid in ids]

    def tokens_from_ids(self, ids: tuple[int, ...], special: tuple[bool, ...]) -> Tokens:
        """Tokens for ids chosen directly, labelled as ``encode`` labels them."""
        pieces = [self._tokenizer.id_to_token(tid) or "?" for tid in ids]
        texts, partial = self._texts(pieces, special)
        return Tokens(
            ids=tuple(ids),
            texts=texts,
            partial=partial,
            vocab_size=self._tokenizer.get_vocab_size(with_added_tokens=True),
            tokenizer=self.name,
            special=special,
        )

    def _truncated(self, text: str, pair: str | None, max_length: int) -> Any:
        """The text encoded again, cut to ``max_length`` tokens by the library's own truncation,
        which keeps the template's [CLS] ... [SEP] around what is left and drops from the end
        (from the ends of a pair's two segments, the longer first)."""
        self._tokenizer.enable_truncation(max_length)
        try:
            return self._tokenizer.encode(text, pair)
        finally:
            self._tokenizer.no_truncation()

    def _texts(
        self, tokens: list[str], special: tuple[bool, ...], placed: tuple[bool, ...] | None = None
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(texts, partial): each token's text, and its bytes in hex where they are
        part of a character (``attn_cli.text.tokenizers.piece_text``); partial () when none is.
        ``placed``: the tokens whose text ``covered`` takes from the offsets instead (left "" here)."""
        texts, partial = [], []
        for i, token in enumerate(tokens):
            hexed = ""
            if special[i]:
                text = token
            elif self._byte_level:
                text, hexed = piece_text(bytes(_BYTES.get(c, ord("?")) for c in token))
            elif (byte := _BYTE_FALLBACK.fullmatch(token)) is not None:
                text, hexed = piece_text(bytes([int(byte[1], 16)]))
            elif placed is not None and placed[i]:
                text = ""
            else:
                previous = tokens[i - 1] if i > 0 and not special[i - 1] else None
                text = self._in_place(previous, token)
            texts.append(text)
            partial.append(hexed)
        return tuple(texts), tuple(partial) if any(partial) else ()

    def _in_place(self, previous: str | None, token: str) -> str:
        """The text the decoder adds for ``token`` after ``previous`` (None: first of its segment)."""
        decode = self._tokenizer.decoder.decode if self._tokenizer.decoder is not None else " ".join
        if previous is None:
            return decode([token])
        alone, both = decode([previous]), decode([previous, token])
        return both[len(alone) :] if both.startswith(alone) else decode([token])


def too_long(n_tokens: int, max_positions: int) -> str:
    """The refusal of a text past the model's position table (a source adds what else helps)."""
    return f"the text is {n_tokens} tokens but this model takes at most {max_positions} (its position table): shorten it"


def load_tokenizer(folder: Path, name: str, *, family: str, max_positions: int | None, pairs: bool) -> CheckpointTokenizer:
    """The folder's tokenizer; raises ModelUnavailable saying which file is missing."""
    from tokenizers import Tokenizer

    path = folder / TOKENIZER_JSON
    try:
        if path.is_file():
            return CheckpointTokenizer(
                Tokenizer.from_file(str(path)), f"{name} {TOKENIZER_JSON}", max_positions=max_positions, pairs=pairs
            )
        if family == "gpt2" and (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            return CheckpointTokenizer(
                _byte_level_bpe(folder), f"{name} vocab.json+merges.txt", max_positions=max_positions, pairs=pairs
            )
        if family == "bert" and (folder / "vocab.txt").is_file():
            return CheckpointTokenizer(_wordpiece(folder), f"{name} vocab.txt", max_positions=max_positions, pairs=pairs)
    except Exception as err:  # the library's errors are plain Exceptions
        raise ModelUnavailable(f"{folder}: its tokenizer files cannot be read ({err}); fetch them again") from None
    other = {"gpt2": " (or vocab.json and merges.txt)", "bert": " (or vocab.txt)"}.get(family, "")
    raise ModelUnavailable(f"{folder} has no {TOKENIZER_JSON}{other}: fetch the model's tokenizer files too")


def _byte_level_bpe(folder: Path) -> Any:
    """GPT-2's tokenizer from vocab.json + merges.txt, as transformers builds it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    tokenizer = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    if tokenizer.token_to_id("<|endoftext|>") is not None:
        tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return tokenizer


def _wordpiece(folder: Path) -> Any:
    """BERT's tokenizer from vocab.txt, lower-casing as tokenizer_config.json says."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text(encoding="utf-8")) if settings_path.is_file() else {}
    tokenizer = Tokenizer(models.WordPiece.from_file(str(folder / "vocab.txt"), unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=bool(settings.get("do_lower_case", True)))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls is None or sep is None:
        raise ValueError("vocab.txt has no [CLS] or [SEP]")
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        if tokenizer.token_to_id(special) is not None:
            tokenizer.add_special_tokens([special])
    return tokenizer
