"""attn-cli: a command-line attention inspector.

The public API (imported lazily, so the command line starts without torch)::

    from attn_cli import Config, Pipeline
    run = Pipeline(Config(tokenizer="words", heads=2)).run("I saw a saw")
    run.result.weights  # (H, T, T)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "AttentionResult",
    "Config",
    "Pipeline",
    "Run",
    "Tokens",
    "get_tokenizer",
    "self_attention",
]

_HOMES = {
    "AttentionResult": "attn_cli.attention",
    "self_attention": "attn_cli.attention",
    "Config": "attn_cli.config",
    "Pipeline": "attn_cli.pipeline",
    "Run": "attn_cli.pipeline",
    "Tokens": "attn_cli.tokens",
    "get_tokenizer": "attn_cli.tokens",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'attn_cli' has no attribute {name!r}")
