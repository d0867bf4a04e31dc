"""The attn-cli group (``app``) and what every command shares: plain help, errors in one
line with their exit codes, a standard output that went away. It imports no command: each
command module registers itself on ``app`` (``attn_cli.cli`` imports them all)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from attn_cli import __version__
from attn_cli.cli.output import STDOUT_FAILURE, mark_stdout_closed, stdout_errors, stdout_failure
from attn_cli.cli.panels import format_panels
from attn_cli.runtime import interrupts
from attn_cli.runtime.budget import out_of_memory
from attn_cli.runtime.errors import AttnCliError, ExitStatus, TooLargeError
from attn_cli.runtime.files import settle_matplotlib_dirs

PROG_NAME = "attn-cli"
COMPLETE_VAR = "_ATTN_CLI_COMPLETE"  # set when the shell asks for completions (`attn-cli completion`)


def answer_completion_requests() -> None:
    """When the shell asks for completions (``_ATTN_CLI_COMPLETE`` set), make sure
    typer's completion classes are registered: typer 0.26+ registers them only
    with ``add_completion``, which attn-cli leaves off to keep ``--help`` fast."""
    if os.environ.get(COMPLETE_VAR):
        from typer._completion_classes import completion_init

        completion_init()


# typer 0.26+ carries its own copy of click: take the exceptions from whichever
# click typer uses, or an installed click's would not catch typer's own.
_click_exceptions = sys.modules[typer.BadParameter.__module__]
ClickException = _click_exceptions.ClickException
NoArgsIsHelpError = getattr(_click_exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class _PlainHelp:
    """typer < 0.21 escapes "[default: ...]" for rich even when help is plain text;
    undo that, so --help reads "[default: 4]" rather than "\\[default: 4]"."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super().format_help(ctx, formatter)  # type: ignore[misc]
        formatter.buffer[:] = [chunk.replace("\\[", "[") for chunk in formatter.buffer]


class _OutputSafeParsing:
    """Parsing prints --help and --version: a standard output that cannot take them
    is one error line (exit 1), and a reader that went away (`| head`) ends quietly."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with stdout_errors():
                return super().make_context(*args, **kwargs)  # type: ignore[misc]
        except BrokenPipeError:
            _silence_stdout()
            raise typer.Exit(0) from None


# Commands whose results are files they name (never standard output): a reader of
# stdout going away must not stop them.
_WRITE_FILES = ("heatmap", "html", "add")


class AttnCommand(_OutputSafeParsing, _PlainHelp, TyperCommand):
    """Every attn-cli command: plain --help, its options in panels (``attn_cli.cli.panels``);
    a command whose results go to standard output stops at once, with success, when the
    reader goes away."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        format_panels(self, ctx, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """--predict's count is optional: with no whole number after it (the end, another option, the text),
        it stands for ``params.BARE_PREDICT`` (typer's options take no optional values themselves)."""
        from attn_cli.cli.inputs import BARE_PREDICT

        given = list(args)
        for i in reversed(range(len(given))):
            if given[i] == "--predict" and (i + 1 == len(given) or not given[i + 1].lstrip("+").isdigit()):
                given.insert(i + 1, BARE_PREDICT)
        return super().parse_args(ctx, given)  # type: ignore[no-any-return]

    def invoke(self, ctx: Any) -> Any:
        if self.name not in _WRITE_FILES and ctx.params.get("output") is None:
            interrupts.results_to_stdout()
        return super().invoke(ctx)


class AttnSubgroup(_OutputSafeParsing, _PlainHelp, TyperGroup):
    """A group of commands under attn-cli (``tokenizers``)."""


class AttnGroup(_OutputSafeParsing, _PlainHelp, TyperGroup):
    """Maps every error to one line on stderr and a documented exit code.

    Errors raised while a command runs are mapped in ``invoke``, where the
    context tells whether ``--debug`` was given (``ctx.meta["debug"]``, set by the
    shared options); errors in parsing the command line are mapped in ``main``.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly with success, as other
            # filters do; stdout goes to /dev/null so the exit-time flush cannot fail.
            _silence_stdout()
            return ExitStatus.OK
        except (AttnCliError, KeyboardInterrupt) as err:
            return _report(err, debug=bool(ctx.meta.get("debug")))
        except (MemoryError, RuntimeError) as err:  # an allocation the estimate let through (the GPU's, say)
            said = out_of_memory(err)
            if said is None:
                raise
            return _report(TooLargeError(said), debug=bool(ctx.meta.get("debug")))

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None, standalone_mode: bool = True, **extra: Any) -> Any:
        global _stdout_failed
        _stdout_failed = False
        _open_closed_stdout()
        settle_matplotlib_dirs()
        answer_completion_requests()
        try:
            rv = super().main(args=args, prog_name=prog_name or "attn-cli", complete_var=complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else ExitStatus.OK
        except NoArgsIsHelpError as err:
            typer.echo(err.ctx.get_help())
            code = ExitStatus.USAGE
        except ClickException as err:
            _fail(_in_our_words(err, list(sys.argv[1:] if args is None else args)))
            code = err.exit_code
        except (AttnCliError, KeyboardInterrupt) as err:
            code = _report(err, debug=False)
        except typer.Abort:
            code = _report(KeyboardInterrupt(), debug=False)
        code = _flush_stdout(code)
        if standalone_mode:
            sys.exit(int(code))
        return int(code)


def _in_our_words(err: Any, args: list[str]) -> str:
    """A parsing error as attn-cli says it, whichever typer made it: `--format: xml is not
    one of auto, table, ...`, `--precision: 13 is more than 12`, an unknown option with the
    command's own options it looks like, and a text that starts with '-' pointed to '--'. typer 0.21+ words
    these through pydantic ("Value error, ...", "Input should be less than or equal to
    12", without the value), older ones through click; both are read here."""
    message = err.format_message()
    try:
        if isinstance(err, _click_exceptions.NoSuchOption):
            option = err.option_name
            hint = next((a for a in args if a.startswith("-") and not a.startswith("--") and len(a) > 2 and option.lstrip("-") in a), None)
            if hint is not None:
                return f"no such option: {option} (in {hint}); a text that starts with '-' goes after '--': attn-cli ... -- {hint}"
            return f"no such option: {option}{_did_you_mean(option, err.ctx)}; --help lists the options"
        opts = getattr(getattr(err, "param", None), "opts", None)
        if isinstance(err, _click_exceptions.BadParameter) and opts:
            return f"{max(opts, key=len)}: {_value_problem(getattr(err, 'message', message), _given(args, opts))}"
    except Exception:  # noqa: BLE001  the words are a courtesy: never lose the error over them
        pass
    return message


def _did_you_mean(option: str, ctx: Any) -> str:
    """`` (did you mean --causal?)``: the long options of the command that was invoked (its
    context's) that ``option`` looks like, closest first; nothing when none is close. The
    names are compared without their dashes, which would make any two short names look alike
    (click's own guess offers --format for --foo)."""
    if ctx is None or not option.startswith("--"):
        return ""
    import difflib

    params = [p for p in ctx.command.get_params(ctx) if p.param_type_name == "option" and not getattr(p, "hidden", False)]
    names = {name[2:]: name for p in params for name in (*p.opts, *p.secondary_opts) if name.startswith("--")}
    close = [names[name] for name in difflib.get_close_matches(option[2:], names)]
    if not close:
        return ""
    return f" (did you mean {close[0] if len(close) == 1 else ', '.join(close[:-1]) + ' or ' + close[-1]}?)"


_PROBLEMS = (  # (pattern over typer's or click's words, what attn-cli says; {value} is what was given)
    (r"'(?P<given>[^']*)' is not one of (?P<choices>.*?)\.?$", "{value} is not one of {choices}"),
    (r"less than or equal to (?P<n>\S+)", "{value} is more than {n}"),
    (r"greater than or equal to (?P<n>\S+)", "{value} is less than {n}"),
    (r"not in the range (?P<low>-?[\d.]*\d)<=x<=(?P<high>-?[\d.]*\d)", None),  # click: more or less, by the value
    (r"not in the range x<=(?P<high>-?[\d.]*\d)", "{value} is more than {high}"),
    (r"not in the range (?P<low>-?[\d.]*\d)<=x", "{value} is less than {low}"),
    (r"valid integer", "{value} is not a whole number"),
    (r"valid (number|float)", "{value} is not a number"),
)


def _value_problem(message: str, value: str | None) -> str:
    import re

    for pattern, words in _PROBLEMS:
        found = re.search(pattern, message)
        if found:
            parts = found.groupdict()
            given = value if value is not None else parts.get("given", "that")
            if "choices" in parts:
                parts["choices"] = ", ".join(c.strip().strip("'") for c in parts["choices"].split(","))
            if words is None:  # a range both ways: which end the value is past
                above = float(given) > float(parts["high"])
                return f"{given} is more than {parts['high']}" if above else f"{given} is less than {parts['low']}"
            return words.format(value=given, **parts)
    return message.removeprefix("Value error, ")


def _given(args: list[str], opts: list[str]) -> str | None:
    """The value the command line gave one of ``opts`` (the last time), as typed."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(opt + "=") and opt.startswith("--"):
                found = arg[len(opt) + 1 :]
            elif not opt.startswith("--") and arg.startswith(opt) and len(arg) > len(opt):
                found = arg[len(opt) :]
    return found


def _report(err: BaseException, debug: bool) -> ExitStatus:
    """One line on stderr for ``err``, and its exit status."""
    if debug:
        import traceback

        traceback.print_exception(err)
    if isinstance(err, AttnCliError):
        _fail(str(err))
        return err.exit_status
    _fail("interrupted")
    return ExitStatus.INTERRUPTED


def _fail(message: str) -> None:
    global _stdout_failed
    _stdout_failed = _stdout_failed or message.startswith(STDOUT_FAILURE)
    first = " ".join(message.split("\n")[0].split()) or "failed"
    with contextlib.suppress(OSError, ValueError):  # stderr may be gone too; the exit code still tells
        typer.echo(f"attn-cli: error: {first}", err=True)


_stdout_failed = False  # an error about standard output was reported already


def _flush_stdout(code: int) -> int:
    """Flush what is still buffered for stdout now, while a failure can still be
    reported, rather than at exit ("Exception ignored ... No space left on device")."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return code
    except (OSError, ValueError) as err:
        _silence_stdout()
        if _stdout_failed:
            return code  # said already
        _fail(str(stdout_failure(err)))
        return ExitStatus.ERROR


def _open_closed_stdout() -> None:
    """A process started with stdout closed (``>&-``) has ``sys.stdout`` None, and
    every print would vanish with exit 0. Give fd 1 a descriptor that refuses
    writes instead, so output fails like a full disk: one line and exit 1. (It also
    keeps fd 1 from being reused by the next file opened.)"""
    if sys.stdout is not None:
        return
    try:
        os.fstat(1)
    except OSError:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 1)
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        mark_stdout_closed()


def _silence_stdout() -> None:
    """Point the process's fd 1 at /dev/null, so that the flush at exit, which
    cannot be stopped, cannot fail either. Only for the real standard output."""
    stream = sys.stdout
    try:
        is_fd1 = stream is not None and stream.fileno() == 1 and stream is sys.__stdout__
    except (OSError, ValueError, AttributeError):
        is_fd1 = False
    if is_fd1:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attn-cli {__version__}")
        raise typer.Exit()


app = typer.Typer(
    cls=AttnGroup,
    name="attn-cli",
    help="See self-attention: scores, weights and context vectors for any sentence, from a seeded toy model or a trained checkpoint (--model).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show a traceback on errors (every command takes --debug too).")] = False,
) -> None:
    """See self-attention: scores, weights and context vectors for any sentence, from a seeded toy model or a trained checkpoint (--model)."""
    ctx.meta["debug"] = debug
