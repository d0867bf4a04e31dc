"""The attn-cli command line: parse options -> Config -> pipeline -> renderer.

Heavy modules (torch, matplotlib, tiktoken data) are imported inside the
commands that need them, so ``attn-cli --help`` and ``--version`` stay fast.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from attn_cli import __version__
from attn_cli.errors import AttnCliError, ExitStatus

from click import exceptions as click_exceptions


class _PlainHelp:
    """typer < 0.21 escapes "[default: ...]" for rich even when help is plain text;
    undo that, so --help reads "[default: 4]" rather than "\\[default: 4]"."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super().format_help(ctx, formatter)  # type: ignore[misc]
        formatter.buffer[:] = [chunk.replace("\\[", "[") for chunk in formatter.buffer]


class AttnCommand(_PlainHelp, TyperCommand):
    """Every attn-cli command: plain --help."""


class AttnGroup(_PlainHelp, TyperGroup):
    """Maps every error to one line on stderr and a documented exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise typer.Abort() from None  # typer would turn it into a silent Exit(130)
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly with success, as other
            # filters do; stdout goes to /dev/null so the exit-time flush cannot fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return ExitStatus.OK

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None, standalone_mode: bool = True, **extra: Any) -> Any:
        debug = "--debug" in (sys.argv[1:] if args is None else list(args))
        try:
            rv = super().main(args=args, prog_name=prog_name or "attn-cli", complete_var=complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else ExitStatus.OK
        except click_exceptions.NoArgsIsHelpError as err:
            typer.echo(err.ctx.get_help())
            code = ExitStatus.USAGE
        except click_exceptions.ClickException as err:
            _fail(err.format_message(), debug)
            code = err.exit_code
        except AttnCliError as err:
            _fail(str(err), debug)
            code = err.exit_status
        except (KeyboardInterrupt, typer.Abort):
            _fail("interrupted", debug)
            code = ExitStatus.INTERRUPTED
        if standalone_mode:
            sys.exit(int(code))
        return int(code)


def _fail(message: str, debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc()
    first = " ".join(message.split("\n")[0].split()) or "failed"
    typer.echo(f"attn-cli: error: {first}", err=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attn-cli {__version__}")
        raise typer.Exit()


app = typer.Typer(
    cls=AttnGroup,
    name="attn-cli",
    help="See self-attention: scores, weights and context vectors for any sentence, reproducible from a seed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """See self-attention: scores, weights and context vectors for any sentence, reproducible from a seed."""


# Commands register themselves on ``app`` when imported.
from attn_cli.cli import run as _run_command  # noqa: E402,F401
from attn_cli.cli import heatmap as _heatmap_command  # noqa: E402,F401
from attn_cli.cli import explain as _explain_command  # noqa: E402,F401
from attn_cli.cli import tokenizers as _tokenizers_command  # noqa: E402,F401
from attn_cli.cli import models as _models_command  # noqa: E402,F401


def main() -> None:
    app()
