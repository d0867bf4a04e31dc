"""The attn-cli command line: parse options -> a source spec -> a source -> a trace -> a renderer.

``app`` (``attn_cli.cli.app``) is the group; each module here is one command, which
registers itself on ``app`` when imported. Heavy modules (torch, matplotlib, tiktoken
data) are imported inside the commands that need them, so ``attn-cli --help`` and
``--version`` stay fast.
"""

from __future__ import annotations

from attn_cli.cli.app import app
from attn_cli.runtime import interrupts

# Each command registers itself on ``app`` when imported, and --help lists them in that order.
from attn_cli.cli import run, heatmap, explain, tokenizers, html, heads, census, compare, faithfulness, models, completion  # isort: skip  # noqa: F401

__all__ = ["app", "main"]


def main() -> None:
    interrupts.install()  # done already when started through attn_cli.entry; here for callers of main()
    app()
