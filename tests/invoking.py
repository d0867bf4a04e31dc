"""The one way tests run a command in process: typer's CliRunner over attn-cli's app.

``invoke("run", TEXT, "-F", "json")`` checks the exit code (0 unless ``code`` says another;
``code=None`` leaves it to the test) and returns the result, whose ``stdout`` and ``stderr``
are apart. ``command`` is put before the arguments, for a test file about one command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typer.testing import CliRunner

from attn_cli.cli import app


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
