"""A mistyped option gets the command's own options it looks like, as a mistyped command gets
"Did you mean 'run'?" (issue 34): `run --casual` says "(did you mean --causal?)", in the same one
line and exit 2; a name like none of them gets no guess. Checked on every command of the app,
with every long option of each slightly mistyped."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from invoking import commands, invoke, options

app_module = importlib.import_module("attn_cli.cli.app")  # `attn_cli.cli.app` is also the name of the Typer object

LINE = re.compile(r"attn-cli: error: no such option: (?P<typed>\S+)(?: \(did you mean (?P<guesses>[^)]*)\?\))?; --help lists the options\n")
COMMANDS = commands()


def _mistypings(option: str) -> list[str]:
    """The option with its middle letter left out, and with the two letters there swapped."""
    body, middle = option[2:], len(option[2:]) // 2
    typos = ["--" + body[:middle] + body[middle + 1 :]]
    if len(body) > 2 and body[middle - 1] != body[middle]:
        typos.append("--" + body[: middle - 1] + body[middle] + body[middle - 1] + body[middle + 1 :])
    return typos


def _said(path: tuple[str, ...], typed: str) -> tuple[str, list[str]]:
    """(the error line, the options it suggests) for ``attn-cli PATH TYPED``, which must fail in one line with exit 2."""
    result = invoke(*path, typed, code=2)
    found = LINE.fullmatch(result.stderr)
    assert found is not None and found["typed"] == typed and result.stdout == "", result.stderr
    guesses = found["guesses"]
    return result.stderr, [] if guesses is None else re.split(r", | or ", guesses)


def _missed(path: tuple[str, ...], command: Any) -> list[str]:
    """Each mistyped option of ``command`` whose error does not suggest it, or suggests another command's option."""
    real = options(command)
    missed = []
    for option in sorted(real):
        for typo in _mistypings(option):
            assert typo not in real, f"{typo} is a real option of {path}: choose another mistyping"
            line, guesses = _said(path, typo)
            if option not in guesses or not set(guesses) <= real:
                missed.append(f"{option}: {line.strip()}")
    return missed


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "attn-cli")
def test_every_option_of_every_command_is_suggested_when_mistyped(path: tuple[str, ...]) -> None:
    assert _missed(path, COMMANDS[path]) == []


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "attn-cli")
def test_a_name_like_no_option_gets_no_suggestion(path: tuple[str, ...]) -> None:
    assert _said(path, "--xyzzy") == ("attn-cli: error: no such option: --xyzzy; --help lists the options\n", [])


CASES = [
    (["run", "I saw a saw", "--casual"], "--casual (did you mean --causal?)"),
    (["heatmap", "I saw a saw", "--layers", "all"], "--layers (did you mean --layer?)"),
    (["run", "I saw a saw", "--hedas", "2"], "--hedas (did you mean --heads or --head?)"),
    (["heatmap", "I saw a saw", "--hedas", "2"], "--hedas (did you mean --heads or --head?)"),
    (["heatmap", "I saw a saw", "--no-anotate"], "--no-anotate (did you mean --no-annotate or --annotate?)"),
    (["compare", "a", "b", "--other-modle", "m"], "--other-modle (did you mean --other-model?)"),
    (["--debg", "run", "x"], "--debg (did you mean --debug?)"),  # the group's own options
    (["models", "--formt", "json"], "--formt (did you mean --format?)"),
    (["run", "I saw a saw", "--foo"], "--foo"),  # click's guess, with the dashes, is --format
    (["run", "I saw a saw", "--other-model", "m"], "--other-model (did you mean --d-model or --model?)"),  # run's own, not compare's
]


@pytest.mark.parametrize("args, said", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_the_suggestions_in_the_issue(args: list[str], said: str) -> None:
    result = invoke(*args, code=2)
    assert result.stderr == f"attn-cli: error: no such option: {said}; --help lists the options\n"


# -- negative controls: the checks above fail on the bugs they are for ---------------------------

WITHOUT_GUESS = lambda option, ctx: ""  # noqa: E731  as it was before issue 34


def _from_the_group(option: str, ctx: Any, *, original: Any = app_module._did_you_mean) -> str:
    return original(option, ctx.find_root())  # the options of attn-cli itself, not of the command invoked


@pytest.mark.parametrize("bug", [WITHOUT_GUESS, _from_the_group], ids=["no guess", "the group's options"])
def test_control_the_check_finds_a_wrong_or_missing_suggestion(bug: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "_did_you_mean", bug)
    assert _missed(("run",), COMMANDS[("run",)])
    with pytest.raises(AssertionError):
        test_the_suggestions_in_the_issue(["run", "I saw a saw", "--casual"], "--casual (did you mean --causal?)")


def test_control_a_guess_at_anything_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cutoff of 0 suggests options for any name: the far-off check sees it."""
    import difflib

    closest = difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches", lambda word, names: closest(word, names, cutoff=0.0))
    with pytest.raises(AssertionError):
        test_a_name_like_no_option_gets_no_suggestion(("run",))
