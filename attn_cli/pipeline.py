"""The one place that wires text -> tokens -> X -> attention.

``Pipeline(config)`` loads the tokenizer once, so a batch of texts pays for it
once; ``Pipeline.run(text)`` gives a ``Run`` holding everything a renderer
shows. Nothing here prints: notes for the user (a tokenizer fallback) travel in
``Pipeline.notes``.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from attn_cli.attention import AttentionResult, self_attention
from attn_cli.config import DEFAULT_D_MODEL, DEFAULT_TOKENIZER, Config, Positional
from attn_cli.embed import load_embeddings, seeded_embeddings, sinusoidal
from attn_cli.errors import InputError, TokenizerUnavailable, TooLargeError
from attn_cli.rankfiles import DIR_ENV
from attn_cli.tokens import WORDS, Tokenizer, Tokens, get_tokenizer


@dataclasses.dataclass(frozen=True)
class Run:
    text: str
    tokens: Tokens
    config: Config  # resolved: d_model, d_k and d_v are filled in
    x: torch.Tensor  # (T, D) the attention input, positional encoding included
    result: AttentionResult


class Pipeline:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.notes: list[str] = []
        self.tokenizer = self._load_tokenizer()

    def _load_tokenizer(self) -> Tokenizer:
        try:
            return get_tokenizer(self.config.tokenizer_name)
        except TokenizerUnavailable as err:
            if self.config.tokenizer is not None:
                raise
            self.notes.append(
                f"note: {DEFAULT_TOKENIZER} is not available offline ({err.reason}), so the "
                f"'{WORDS}' tokenizer is used; get {DEFAULT_TOKENIZER} with `attn-cli tokenizers add "
                f"vocab.bpe encoder.json` or by pointing ${DIR_ENV} at a folder of rank files"
            )
            return get_tokenizer(WORDS)

    def tokenize(self, text: str) -> Tokens:
        if not text.strip():
            raise InputError("the text is empty; give some words, as an argument, with --file, or on stdin")
        tokens = self.tokenizer.encode(text)
        if len(tokens) > self.config.max_tokens:
            raise TooLargeError(
                f"the text has {len(tokens)} tokens, over --max-tokens {self.config.max_tokens}; "
                f"shorten it or raise --max-tokens"
            )
        return tokens

    def run(self, text: str) -> Run:
        tokens = self.tokenize(text)
        config = self.config
        x = load_embeddings(config.embeddings, len(tokens)) if config.embeddings else None  # (T, D)
        config = config.resolved(x.shape[1] if x is not None else config.d_model or DEFAULT_D_MODEL)
        check_memory(config, len(tokens))
        if x is None:
            x = seeded_embeddings(tokens, config.d_model, config.seed)  # (T, D)
        if config.positional is Positional.sinusoidal:
            x = x + sinusoidal(len(tokens), x.shape[1])  # (T, D)
        return Run(text, tokens, config, x, self_attention(x, config))


def estimate_bytes(config: Config, n_tokens: int) -> int:
    """Peak float32 bytes of one attention run (resolved config), within a small factor."""
    heads, d_k, d_v, d_model = config.heads, config.d_k or 0, config.d_v or 0, config.d_model or 0
    square = heads * n_tokens * n_tokens  # scores, the softmax input, weights (and dropout)
    vectors = n_tokens * (d_model + heads * (2 * d_k + 3 * d_v))
    return 4 * ((4 if config.dropout else 3) * square + 2 * vectors)


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(config: Config, n_tokens: int) -> None:
    need = estimate_bytes(config, n_tokens)
    have = available_memory()
    if have is not None and need > have * 0.8:
        raise TooLargeError(
            f"{n_tokens} tokens x {config.heads} heads need about {need / 2**30:.1f} GiB for the "
            f"T x T matrices, but {have / 2**30:.1f} GiB is free; use a shorter text or fewer heads"
        )
