"""Usage errors in attn-cli's own words, whichever typer parsed them (issue 23): typer
0.21+ words them through pydantic ("Value error, ...", "Input should be less than or
equal to 12"), older typer through click; both read the same here. (Checked by hand with
typer 0.20.1 on PYTHONPATH as well as with the installed one.)"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from attn_cli.cli import app

CASES = [
    (["run", "x", "-F", "xml"], "--format: xml is not one of auto, table, json, jsonl, csv"),
    (["run", "x", "--format=xml"], "--format: xml is not one of auto, table, json, jsonl, csv"),
    (["run", "x", "--precision", "13"], "--precision: 13 is more than 12"),
    (["run", "x", "--precision", "-1"], "--precision: -1 is less than 0"),
    (["run", "x", "--precision", "abc"], "--precision: abc is not a whole number"),
    (["run", "x", "--temperature", "abc"], "--temperature: abc is not a number"),
    (["run", "x", "--init", "bogus"], "--init: bogus is not one of linear, uniform, normal"),
    (["heatmap", "x", "--what", "foo"], "--what: foo is not one of weights, scores, scaled, all"),
    (["run", "x", "--foo"], "no such option: --foo; --help lists the options"),
    (["run", "-hello"], "no such option: -e (in -hello); a text that starts with '-' goes after '--': attn-cli ... -- -hello"),
]


@pytest.mark.parametrize("args, line", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_usage_error_is_one_line_in_our_words(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == f"attn-cli: error: {line}\n"
    for theirs in ("Value error", "Input should", "Invalid value", "Possible options", "is not in the range"):
        assert theirs not in result.stderr


def test_the_hint_is_right_a_text_after_two_dashes_runs() -> None:
    """The negative control of the hint: what it says to do works."""
    result = CliRunner().invoke(app, ["run", "-t", "words", "-F", "json", "--", "-hello"])
    assert result.exit_code == 0, result.stderr
    assert '"text": "-hello"' in result.stdout
