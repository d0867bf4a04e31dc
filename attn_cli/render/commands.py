"""The attn-cli command line that reproduces a trace, quoted for a POSIX shell so that it
runs as printed: the page's "Reproduce" line and explain's suggestions."""

from __future__ import annotations

import os
import shlex
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attn_cli.sources.toy.config import Config
    from attn_cli.records.trace import Trace


def command_line(trace: Trace, command: str, *extra: str) -> str:
    """``attn-cli COMMAND TEXT`` with the options that made ``trace``, then ``extra``."""
    args = ["attn-cli", command, trace.text if trace.stack_texts is None else trace.stack_texts[0]]
    config = trace.model.config
    if config is not None:
        args += toy_flags(config, trace.tokens.tokenizer)
    else:
        args += ["--model", os.fspath(trace.model.source)]
        if trace.pair is not None:
            args += ["--pair", trace.pair]
        if trace.stack_texts is not None:  # one stack of an encoder-decoder
            args += ["--target", trace.stack_texts[1], "--stack", trace.stack_name or "cross"]
        if trace.model.dtype != "float32":
            args += ["--dtype", trace.model.dtype]
    return " ".join(quote(arg) for arg in [*args, *extra])


def quote(arg: str) -> str:
    """``arg`` as one shell word. A control or format character (an escape, a bell, a
    right-to-left override) must not reach the terminal, so such an argument is written
    with bash's and zsh's $'...' escapes, which give the same string back."""
    if all(unicodedata.category(ch) not in ("Cc", "Cf") for ch in arg):
        return shlex.quote(arg)
    out = []
    for ch in arg:
        if ch in "\\'":
            out.append("\\" + ch)
        elif unicodedata.category(ch) in ("Cc", "Cf"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x80 else f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def toy_flags(config: Config, tokenizer: str) -> list[str]:
    """The toy options that differ from their defaults, as command-line flags."""
    from attn_cli.sources.toy.config import Config as Defaults

    base = Defaults()
    flags = ["--tokenizer", tokenizer]
    pairs: list[tuple[bool, list[str]]] = [
        (config.seed != base.seed, ["--seed", str(config.seed)]),
        (config.embeddings is None and config.d_model != 16, ["--d-model", str(config.d_model)]),
        (config.heads != base.heads, ["--heads", str(config.heads)]),
        (config.projections and config.d_model is not None and config.d_k != config.d_model // config.heads, ["--d-k", str(config.d_k)]),
        (config.projections and config.d_model is not None and config.d_v != config.d_model // config.heads, ["--d-v", str(config.d_v)]),
        (config.causal, ["--causal"]),
        (not config.scale, ["--no-scale"]),
        (config.temperature != base.temperature, ["--temperature", f"{config.temperature:g}"]),
        (config.dropout != base.dropout, ["--dropout", f"{config.dropout:g}"]),
        (config.qkv_bias, ["--qkv-bias"]),
        (config.out_proj, ["--out-proj"]),
        (config.init is not base.init, ["--init", config.init.value]),
        (not config.projections, ["--no-projections"]),
        (config.positional is not base.positional, ["--positional", config.positional.value]),
        (config.embeddings is not None, ["--embeddings", str(config.embeddings)]),
    ]
    return flags + [arg for on, args in pairs if on for arg in args]


