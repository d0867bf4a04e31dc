"""The process's entry point (the `attn-cli` script, `python -m attn_cli`): signals are
taken care of before anything else is imported, so Ctrl-C at any moment of start-up
ends the process in one line (``attn_cli.runtime.interrupts``), and the process ends through
``interrupts.finish``, so a signal that comes while it exits is handled too."""

import sys

from attn_cli.runtime import interrupts

interrupts.install()


def main() -> None:
    code: object = 0
    try:
        from attn_cli.cli import main as cli_main

        cli_main()
    except SystemExit as done:
        code = done.code
    if code is not None and not isinstance(code, int):  # as Python does with SystemExit("message")
        print(code, file=sys.stderr)
    interrupts.finish(code if isinstance(code, int) else 0 if code is None else 1)
