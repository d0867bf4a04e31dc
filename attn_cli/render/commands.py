"""The attn-cli command line that reproduces a trace, quoted for a POSIX shell so that it
runs as printed: the page's "Reproduce" line and explain's suggestions."""

from __future__ import annotations

import os
import shlex
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attn_cli.records.trace import Trace


def command_line(trace: Trace, command: str, *extra: str) -> str:
    """``attn-cli COMMAND TEXT`` with the options that made ``trace`` (its source's flags,
    ``ModelInfo.about.flags``), then ``extra``."""
    stack = trace.view_stack
    args = ["attn-cli", command, trace.text if stack is None or stack.texts is None else stack.texts[0]]
    own = _own(trace)
    for flag, value in trace.model.about.flags:
        if value is None:  # a slot: the trace's own value, if it has one
            value = own[flag]
            if value is None:
                continue
        args += [flag, value] if value else [flag]  # "": a flag without a value (--causal, --truncate)
    return " ".join(quote(arg) for arg in [*args, *extra])


def _own(trace: Trace) -> dict[str, str | None]:
    """The flags' values for their slots: the trace's own (None: the flag is left out)."""
    stack = trace.view_stack  # one stack of an encoder-decoder
    return {
        "--tokenizer": trace.tokens.tokenizer,
        "--model": os.fspath(trace.model.source),
        "--pair": trace.pair,
        "--truncate": "" if trace.truncated is not None else None,
        "--target": stack.texts[1] if stack is not None and stack.texts is not None else None,
        "--stack": stack.name if stack is not None else None,
        "--dtype": trace.model.dtype if trace.model.dtype != "float32" else None,
    }


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
