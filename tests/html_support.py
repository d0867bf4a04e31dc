"""Traces for the HTML page's tests: toy runs, and multi-layer traces built by hand
(as a trained model's source would yield them: special tokens, a causal mask,
many layers and heads), without any checkpoint."""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from typing import Any

import numpy as np
import torch

from attn_cli.records.layers import LayerAttention, Projections
from attn_cli.sources.attend import attend, causal_mask
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import ModelInfo, Trace

WORDS = "the cat sat on the mat because it was warm and the dog did not mind at all really".split()


def toy(text: str = "I saw a saw", **config: Any) -> Trace:
    return ToySource(Config(tokenizer="words", **config)).run(text)


def hand_trace(
    n_tokens: int = 20, *, layers: int = 6, heads: int = 12, head_dim: int = 8, causal: bool = True, seed: int = 0, source: str = "hand/mini-bert"
) -> Trace:
    """``layers`` x ``heads`` of attention over [CLS] words... [SEP]; later layers are sharper."""
    words = [WORDS[i % len(WORDS)] for i in range(n_tokens - 2)]
    texts = ("[CLS]", *words, "[SEP]")
    tokens = Tokens(
        ids=tuple(101 if t == "[CLS]" else 102 if t == "[SEP]" else 1000 + WORDS.index(t) for t in texts),
        texts=texts,
        vocab_size=30522,
        tokenizer="tokenizer.json (hand/mini-bert)",
        special=(True, *[False] * len(words), True),
    )
    generator = torch.Generator().manual_seed(seed)
    mask = causal_mask(n_tokens) if causal else None  # (T, T)
    divisor = math.sqrt(head_dim)
    kept = []
    for index in range(layers):
        sharp = 1.0 + index / 4
        queries = torch.randn(heads, n_tokens, head_dim, generator=generator) * sharp  # (H, T, Dk)
        keys = torch.randn(heads, n_tokens, head_dim, generator=generator)  # (H, T, Dk)
        values = torch.randn(heads, n_tokens, head_dim, generator=generator)  # (H, T, Dv)
        context, weights = attend(queries, keys, values, divisor=divisor, mask=mask)  # (H, T, Dv), (H, T, T)
        concat = context.transpose(0, 1).reshape(n_tokens, -1)  # (H, T, Dv) -> (T, H*Dv)
        kept.append(
            LayerAttention(
                queries=queries, keys=keys, values=values, weights=weights, dropped_weights=None, context=context,
                concat=concat, output=concat, divisor=divisor, mask=mask, projections=Projections(None, None, None, None),
                layer=index, x=None, divisor_text=f"sqrt({head_dim})",
            )
        )
    model = ModelInfo(
        source=source, architecture="BertModel", family="bert", layers=layers, heads=heads, kv_heads=heads,
        head_dim=head_dim, d_model=heads * head_dim,
    )
    return Trace(" ".join(words), tokens, model, tuple(kept))


def fixed(value: float) -> str:
    """What the page shows for a number: Python's own 4 decimals."""
    return f"{value:.4f}"


# -- reading a page back in Python --

def manifest(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="attn-manifest">(.*?)</script>', html, re.S)
    assert match, "the page has no manifest"
    return json.loads(match.group(1))


def chunk(html: str, cid: str) -> np.ndarray:
    meta = manifest(html)["chunks"][cid]
    text = re.search(rf'<script type="text/plain" id="{cid}">(.*?)</script>', html, re.S).group(1)
    data = base64.b64decode(text)
    dtype = "<u2" if meta["dtype"] == "u16" else "<f4"
    if meta["encoding"] == "gzip-shuffled":
        planes = np.frombuffer(gzip.decompress(data), dtype=np.uint8)
        data = planes.reshape(np.dtype(dtype).itemsize, -1).T.tobytes()  # (size, N) -> (N, size)
    return np.frombuffer(data, dtype=dtype).reshape(meta["shape"])
