"""Marian's tokenizer, as transformers' MarianTokenizer reads a checkpoint's source.spm,
target.spm and vocab.json (the ``sentencepiece`` package, an optional extra)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from attn_cli.records.tokens import Tokens
from attn_cli.runtime.errors import InputError, ModelUnavailable, TooLargeError, UsageError
from attn_cli.sources.checkpoint.spans import aligned
from attn_cli.sources.checkpoint.tokenizer import check_stride, too_long


class MarianTokenizer:
    """Marian's tokenizer (what transformers' MarianTokenizer does): the source text through
    ``source.spm`` and the target through ``target.spm`` (SentencePiece), each piece mapped to
    its id in ``vocab.json`` (the target's in ``target_vocab.json`` when config.json sets
    ``separate_vocabs``), a piece missing from it as ``<unk>``, a leading ``>>xx<<`` language
    code kept whole, and ``</s>`` after every text. Needs the ``sentencepiece`` package
    (``pip install "attn-cli[sentencepiece]"``). The same interface as CheckpointTokenizer for
    what an encoder-decoder reads: ``encode`` (the source), ``encode_target``, ``decode``."""

    def __init__(self, folder: Path, name: str, *, separate_vocabs: bool, max_positions: int | None) -> None:
        try:
            import sentencepiece
        except ImportError:
            raise ModelUnavailable(
                f"{folder} is a Marian model, whose tokenizer needs the sentencepiece package: pip install \"attn-cli[sentencepiece]\""
            ) from None
        files = {"source": folder / "source.spm", "target": folder / "target.spm", "vocab": folder / "vocab.json"}
        if separate_vocabs:
            files["target vocab"] = folder / "target_vocab.json"
        missing = [str(path.name) for path in files.values() if not path.is_file()]
        if missing:
            raise ModelUnavailable(f"{folder} has no {', '.join(missing)}: fetch the model's tokenizer files too (Marian reads source.spm, target.spm and vocab.json)")
        try:
            self._spm = {side: sentencepiece.SentencePieceProcessor(model_file=str(files[side])) for side in ("source", "target")}
            source_vocab = json.loads(files["vocab"].read_text(encoding="utf-8"))
            target_vocab = json.loads(files["target vocab"].read_text(encoding="utf-8")) if separate_vocabs else source_vocab
        except (OSError, UnicodeDecodeError, ValueError, RuntimeError) as err:
            raise ModelUnavailable(f"{folder}: its tokenizer files cannot be read ({err}); fetch them again") from None
        self._vocab = {"source": source_vocab, "target": target_vocab}
        for side, vocab in self._vocab.items():
            if "<unk>" not in vocab or "</s>" not in vocab:
                raise ModelUnavailable(f"{folder}: the {side} vocabulary has no <unk> or </s>; fetch the model's tokenizer files again")
        self._pieces = {side: {i: piece for piece, i in vocab.items()} for side, vocab in self._vocab.items()}
        self.name = f"{name} source.spm+target.spm"
        self.max_positions = max_positions
        self.pairs = False

    def encode(self, text: str, pair: str | None = None, *, max_length: int | None = None) -> Tokens:
        """The source text's tokens."""
        if pair is not None:
            raise UsageError("--pair is for encoders (BERT-style models); this model reads one text: drop --pair")
        return self._encode(text, "source")

    def encode_target(self, text: str) -> Tokens:
        """The target's tokens (the labels): the target's SentencePiece model and vocabulary."""
        return self._encode(text, "target")

    def windows(self, text: str, size: int, stride: int) -> list[Tokens]:
        """The source text as windows of ``size`` tokens starting every ``stride`` tokens (the last what
        is left, as the tokenizers library cuts them), each ended by ``</s>`` as a text of its own is;
        a leading language code is the first window's first token. A text SentencePiece normalizes to
        nothing (zero-width spaces) is ``</s>`` alone, as transformers' MarianTokenizer encodes it (a
        tokenizer.json text of only its special tokens, [CLS] [SEP], is read so too)."""
        check_stride(size, stride)
        whole = self._encode(text, "source", whole=True)
        body = len(whole.ids) - 1  # without the closing </s>
        if body == 0:
            return [whole]
        made = []
        for start in range(0, body, stride):
            stop = min(start + size, body)
            kept = [*range(start, stop), body]
            made.append(dataclasses.replace(
                whole, ids=tuple(whole.ids[i] for i in kept), texts=tuple(whole.texts[i] for i in kept),
                special=tuple(whole.special[i] for i in kept), unknown=tuple(whole.unknown[i] for i in kept) if whole.unknown else (),
            ))  # fmt: skip
            if stop == body:
                break
        return made

    def leading_special_ids(self) -> tuple[int, ...]:
        """Marian puts nothing before a text."""
        return ()

    def trailing_special_ids(self) -> tuple[int, ...]:
        """``</s>`` after every source text."""
        return (self._vocab["source"]["</s>"],)

    def _encode(self, text: str, side: str, *, whole: bool = False) -> Tokens:
        code = ""
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # a language code, as MarianTokenizer keeps it
            code, text = text[: end + 2], text[end + 2 :]
        spm_pieces = list(self._spm[side].encode(text, out_type=str))
        pieces = ([code] if code else []) + spm_pieces
        vocab = self._vocab[side]
        ids = [vocab.get(piece, vocab["<unk>"]) for piece in pieces] + [vocab["</s>"]]
        if len(ids) == 1 and not whole:
            raise InputError("the text gives no tokens; give some text")
        if not whole and self.max_positions is not None and len(ids) > self.max_positions:
            raise TooLargeError(too_long(len(ids), self.max_positions))
        made = self._tokens(tuple(ids), side)
        texts = ([code] if code else []) + aligned(text, spm_pieces) + [made.texts[-1]]
        unknown = tuple("<unk>" if piece not in vocab else "" for piece in pieces) + ("",)
        return dataclasses.replace(made, texts=tuple(texts), unknown=unknown if any(unknown) else ())

    def _tokens(self, ids: tuple[int, ...], side: str) -> Tokens:
        special = self.special_ids(side)
        pieces = [self._pieces[side].get(i, "<unk>") for i in ids]
        texts = tuple(piece if i in special else piece.replace("\u2581", " ") for i, piece in zip(ids, pieces))
        return Tokens(ids=ids, texts=texts, vocab_size=len(self._vocab[side]), tokenizer=self.name, special=tuple(i in special for i in ids))

    def special_ids(self, side: str = "target") -> frozenset[int]:
        vocab = self._vocab[side]
        return frozenset(vocab[t] for t in ("</s>", "<unk>", "<pad>") if t in vocab)

    def tokens_from_ids(self, ids: tuple[int, ...], special: tuple[bool, ...]) -> Tokens:
        """The decoder's tokens (target side) for ids chosen directly."""
        return self._tokens(tuple(ids), "target")

    def decode(self, ids: Sequence[int]) -> str:
        special = self.special_ids()
        pieces = [self._pieces["target"].get(i, "<unk>") for i in ids if i not in special]
        return str(self._spm["target"].decode_pieces(pieces))

    def id_texts(self, ids: Sequence[int]) -> list[str]:
        return [self._pieces["target"].get(i, "<unk>").replace("\u2581", " ") for i in ids]

    def ordinary_ids(self) -> list[int]:
        """The target vocabulary's ids but the special tokens (the heads' probe draws from them)."""
        special = self.special_ids()
        return sorted(i for i in self._pieces["target"] if i not in special)
