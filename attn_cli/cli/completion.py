"""`attn-cli completion SHELL`: the shell's completion script, on demand.

The app is built with ``add_completion=False``: typer's own ``--install-completion``
options detect the shell at every start, which ``--help`` would pay for. This
command prints the same script typer would install; the shell then calls
``attn-cli`` with ``_ATTN_CLI_COMPLETE`` set, which typer answers at run time.
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from attn_cli.cli.app import COMPLETE_VAR, PROG_NAME, AttnCommand, app
from attn_cli.cli.output import stdout_errors


class Shell(str, enum.Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@app.command(cls=AttnCommand)
def completion(shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish.", case_sensitive=False)]) -> None:
    """Print the shell completion script for attn-cli.

    \b
    Examples:
      attn-cli completion bash > ~/.local/share/bash-completion/completions/attn-cli
      attn-cli completion zsh > "${fpath[1]}/_attn-cli"
      attn-cli completion fish > ~/.config/fish/completions/attn-cli.fish
      eval "$(attn-cli completion bash)"        # this shell only
    """
    from typer._completion_shared import get_completion_script

    script = get_completion_script(prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell.value)
    with stdout_errors():
        typer.echo(script)
