"""explain ends with commands to run next: pasted into a shell as printed, they run
(issue 18: they lacked the text, so they printed usage and exited 2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO
from invoking import invoke

TEXT = "It's a saw; \"quoted\" and $HOME"  # a quote, double quotes and a $ the shell must not expand


def suggested(args: list[str]) -> list[str]:
    result = invoke("explain", *args, "--format", "text")
    # commands, not mentions of a command's name (`attn-cli heads` gives every head a role)
    commands = [c for c in re.findall(r"`(attn-cli [^`]*)`", result.stdout) if len(c.split()) > 2]
    assert commands, result.stdout
    return commands


def run_in_a_shell(command: str) -> subprocess.CompletedProcess:
    """``command`` exactly as printed, through bash, with attn-cli this checkout's."""
    shell = command.replace("attn-cli ", f"{sys.executable} -m attn_cli ", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(shell, shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("fixture", ["toy", "gpt2_folder", "bert_folder"])
def test_the_suggested_commands_run_as_printed(fixture: str, request: pytest.FixtureRequest) -> None:
    source = ["-t", "words", "--heads", "2", "--causal"] if fixture == "toy" else ["--model", str(request.getfixturevalue(fixture))]
    commands = suggested([TEXT, *source])
    for command in commands:
        proc = run_in_a_shell(command)
        assert proc.returncode == 0, (command, proc.stderr)
        if "--format json" in command:
            import json

            assert json.loads(proc.stdout)["text"] == TEXT  # the same text reached it, unexpanded
    # the control: the suggestion without its text is what was printed before, and it fails
    broken = commands[0].replace(f" {commands[0].split(' ', 3)[2]}", "", 1)
    assert run_in_a_shell(broken).returncode == 2


def test_a_text_with_control_characters_is_suggested_escaped_and_still_runs() -> None:
    """An escape sequence in the text must not reach the terminal in the suggestion: it is
    written with $'...' escapes, which bash turns back into the same text."""
    import json

    text = "\x1b[31mred\x1b[0m it's \u202eevil"
    (every_number, script) = suggested([text, "-t", "words"])
    assert "\x1b" not in every_number and "$'\\x1b[31mred" in every_number
    proc = run_in_a_shell(every_number)
    assert proc.returncode == 0 and json.loads(proc.stdout)["text"] == text
