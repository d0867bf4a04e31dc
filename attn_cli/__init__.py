"""attn-cli: a command-line attention inspector, and its Python API.

The public API (imported lazily: ``import attn_cli`` loads no torch)::

    import attn_cli
    t = attn_cli.trace("I saw a saw", tokenizer="words", heads=2, causal=True)
    t.weights(layer=-1, head=0)              # (T, T) torch tensor
    t = attn_cli.trace("The cat sat on the mat", model=path_or_org_name)
    t.heatmap(layer="all")                   # a matplotlib Figure
    t.to_json(); t.page(); t.heads()         # schema 2, the HTML page, the heads census
    c = attn_cli.census(texts, model=path)   # every head over a corpus: c.heads, c.figure(), c.page()
    attn_cli.head_view(attentions, tokens)   # bertviz's call, on attention from anywhere

docs/python.md has the whole API with examples.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "Config",
    "Trace",
    "Tokens",
    "census",
    "from_attentions",
    "head_view",
    "load",
    "model_view",
    "trace",
]

_HOMES = {
    "trace": "attn_cli.api",
    "census": "attn_cli.api.census",
    "from_attentions": "attn_cli.api",
    "head_view": "attn_cli.api",
    "model_view": "attn_cli.api",
    "load": "attn_cli.api",
    "Trace": "attn_cli.api",
    "Config": "attn_cli.sources.toy.config",
    "Tokens": "attn_cli.records.tokens",
    # the first release's names, kept working (not in __all__): attn_cli.compat
    "AttentionResult": "attn_cli.compat",
    "self_attention": "attn_cli.compat",
    "Pipeline": "attn_cli.compat",
    "Run": "attn_cli.compat",
    "get_tokenizer": "attn_cli.compat",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'attn_cli' has no attribute {name!r}")
