"""The one way tests run a command in process: typer's CliRunner over attn-cli's app.

``invoke("run", TEXT, "-F", "json")`` checks the exit code (0 unless ``code`` says another;
``code=None`` leaves it to the test) and returns the result, whose ``stdout`` and ``stderr``
are apart. ``command`` is put before the arguments, for a test file about one command.
``commands()``: every command of the app, for tests that check them all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
import typer.testing
from typer.testing import CliRunner

from attn_cli.cli import app

# typer's CliRunner builds the click command from the app afresh at every invoke (typer.testing's
# _get_command): 19 of an in-process run's 21 ms, thousands of times in the suite. The command is
# built once here; what a test patches is looked up when a command runs, as the real CLI does.
APP_COMMAND = typer.main.get_command(app)
_typer_command = typer.testing._get_command
typer.testing._get_command = lambda given: APP_COMMAND if given is app else _typer_command(given)


def invoke(
    *args: str,
    code: int | None = 0,
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] = (),
    **kwargs: Any,
) -> Any:
    result = CliRunner().invoke(app, [*command, *args], input=input, env=env, **kwargs)
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def commands() -> dict[tuple[str, ...], Any]:
    """Every command of the app as click builds it, by its words on the command line: the group
    itself (``()``), its commands, a subgroup's (``("tokenizers", "add")``). Built afresh at each call."""

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))

    return dict(walk(typer.main.get_command(app), ()))


def options(command: Any) -> set[str]:
    """The long option names of a click command (``--help`` and the ``--no-x`` forms included; not a
    hidden one, such as heatmap's --show, --open's old name)."""
    params = [p for p in command.get_params(typer.Context(command)) if p.param_type_name == "option" and not p.hidden]
    return {name for p in params for name in (*p.opts, *p.secondary_opts) if name.startswith("--")}


def check_said_once(args: tuple[str, ...], ext: str, where: str, folder: Path, batch: str = "I saw a saw\nHello shiny sun\n") -> None:
    """``args -o folder/out.EXT``: the written file said once, in the words every command uses: `wrote PATH  (SIZE)` on
    stderr (``where`` "stderr"), or the path alone on stdout (a picture or page, piped). ``batch``: standard input."""
    from attn_cli.cli.output import byte_size

    path = folder / f"out.{ext}"
    result = invoke(*args, "-o", str(path), input=batch)
    said = [line for line in (result.stdout + result.stderr).splitlines() if str(path) in line]
    if where == "stderr":
        assert result.stdout == ""
        assert said == [f"wrote {path}  ({byte_size(path.stat().st_size)})"] == result.stderr.splitlines()[-1:]
    else:
        assert result.stdout == f"{path}\n" and said == [str(path)]  # piped: the path alone, for scripts
