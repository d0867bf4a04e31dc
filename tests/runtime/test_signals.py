"""Ctrl-C and SIGTERM at any moment, and a reader that goes away (issue 18).

Every case is a real process started as the attn-cli script starts (``attn_cli.entry``).
The moments are not guessed with sleeps: the child sends itself the signal at a chosen
point (an import hook fires when a named module starts to load; an atexit function
while the process ends; a patched step in the middle of a batch), or tells the parent
through a pipe that it has reached the point. No wall-clock bound is asserted: HANG only
stops a process that would never end.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

HANG = 120  # seconds: a process still there after this never ends by itself

# Sends SIGNUM to this very process when MODULE starts to be imported (the signal is
# delivered while the import machinery runs), then runs attn-cli as its script does.
AT_IMPORT = """
import importlib.abc, os, signal, sys
module, signum = sys.argv[1], int(sys.argv[2])

class Trigger(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signum)
        return None

sys.meta_path.insert(0, Trigger())
sys.argv = ["attn-cli", *sys.argv[3:]]
from attn_cli.entry import main
main()
"""

# The signal comes while the process ends, after its output is complete.
AT_EXIT = """
import atexit, os, signal, sys
signum = int(sys.argv[1])
atexit.register(lambda: os.kill(os.getpid(), signum))
sys.argv = ["attn-cli", *sys.argv[2:]]
from attn_cli.entry import main
main()
"""

# Text 2 of a batch: the child says so on fd READY, then waits for the signal
# (or, if it is not there in time, goes on and finishes: the test then fails).
MID_BATCH = """
import os, sys, time
import attn_cli.sources.toy.source
ready = int(sys.argv[1])
run = attn_cli.sources.toy.source.ToySource.run
seen = []

def slow(self, text, selection=None):
    seen.append(text)
    if len(seen) == 2:
        os.write(ready, b"!")
        time.sleep(%d)
    return run(self, text, selection)

attn_cli.sources.toy.source.ToySource.run = slow
sys.argv = ["attn-cli", *sys.argv[2:]]
from attn_cli.entry import main
main()
""" % HANG


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def python(code: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=child_env(), timeout=HANG, **kwargs
    )


def assert_ended_by(proc: subprocess.CompletedProcess, signum: int) -> None:
    """Exit 130 (SIGINT) or 143 (SIGTERM), one line that says so, nothing else."""
    code, word = (130, "interrupted") if signum == signal.SIGINT else (143, "terminated")
    assert proc.returncode == code, proc.stderr
    assert proc.stderr == f"attn-cli: error: {word}\n", proc.stderr


RUN = ["run", "Life is short, eat dessert first", "-t", "words"]
# Modules whose import is under way at a moment a user's Ctrl-C can land on: the CLI's
# own (typer, rich), torch (its C++ extension among them), the tokenizer, the renderer.
# (A module the run never imports would leave the trigger unfired: the test then fails.)
STARTUP_MOMENTS = ["typer", "rich.console", "attn_cli.cli.run", "torch", "torch._C", "torch.nn", "attn_cli.pipeline", "attn_cli.render.terminal.tables"]


@pytest.mark.parametrize("module", STARTUP_MOMENTS)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_during_start_up_is_one_line_and_its_exit_code(module: str, signum: int) -> None:
    proc = python(AT_IMPORT, module, str(int(signum)), *RUN, "-F", "table")
    assert_ended_by(proc, signum)
    assert proc.stdout == ""


def test_the_import_moments_are_real() -> None:
    """The negative control: without the handler (Python's own, as before issue 18), a
    signal at one of these moments is a traceback from inside the import."""
    code = AT_IMPORT.replace("from attn_cli.entry import main", "import attn_cli.runtime.interrupts as i; i.install = lambda: None\nfrom attn_cli.cli import app as main")
    proc = python(code, "typer", str(int(signal.SIGINT)), *RUN, "-F", "table")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "KeyboardInterrupt" in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_the_process_exits(signum: int, tmp_path: Path) -> None:
    """After the output is complete, while the process ends: the file is there whole,
    and the signal is still one line and its code (never a silent death by signal)."""
    out = tmp_path / "out.json"
    proc = python(AT_EXIT, str(int(signum)), *RUN, "-o", str(out))
    wrote, _, rest = proc.stderr.partition("\n")  # the file was whole before the signal: -o says so first
    assert wrote.startswith(f"wrote {out}  (")
    assert_ended_by(subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, rest), signum)
    assert out.read_text(encoding="utf-8").startswith('{"schema_version"')


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_in_the_middle_of_a_batch_leaves_no_file(signum: int, tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("I saw a saw\nThe cat sat\nHello shiny sun\n", encoding="utf-8")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", MID_BATCH, str(write_end), "run", "--file", str(lines), "--lines", "-t", "words", "-o", str(out_dir / "runs.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), pass_fds=(write_end,),
    )  # fmt: skip
    os.close(write_end)
    try:
        assert select.select([read_end], [], [], HANG)[0] and os.read(read_end, 1) == b"!", proc.communicate()
        # twice, as a terminal's Ctrl-C and `timeout` send it (to the process and its group)
        proc.send_signal(signum)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=HANG)
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_ended_by(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), signum)
    assert list(out_dir.iterdir()) == []


# --------------------------------------------------------------------------- a reader that goes away

# The command blocks before writing anything (a patched step), after telling the parent.
BLOCKED = """
import os, sys, time
import attn_cli.sources.toy.source
ready = int(sys.argv[1])

def blocked(self, text, selection=None):
    os.write(ready, b"!")
    time.sleep(%d)
    raise SystemExit("never stopped")

attn_cli.sources.toy.source.ToySource.run = blocked
sys.argv = ["attn-cli", *sys.argv[2:]]
from attn_cli.entry import main
main()
""" % HANG


def run_with_reader_gone(args: list[str]) -> subprocess.CompletedProcess:
    """``args`` with stdout a pipe whose reader closes once the command is under way."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED, str(write_end), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), pass_fds=(write_end,),
    )  # fmt: skip
    os.close(write_end)
    try:
        assert select.select([read_end], [], [], HANG)[0] and os.read(read_end, 1) == b"!", proc.communicate()
        assert proc.stdout is not None
        proc.stdout.close()  # the reader goes away (as `head` does once it has its lines)
        stderr = proc.stderr.read() if proc.stderr else ""
        proc.wait(timeout=HANG)
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_when_the_reader_goes_away_the_command_stops_quietly(fmt: str) -> None:
    """Mid-command, before a byte is written: it ends at once, exit 0, nothing said."""
    proc = run_with_reader_gone([*RUN, "-F", fmt])
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_command_writing_a_file_is_not_stopped_by_its_stdout_reader(tmp_path: Path) -> None:
    """The negative control: -o FILE sends nothing to stdout, so a closed stdout reader
    is no reason to stop (the patched step then blocks until HANG: the process must still
    be running, so it is killed and the test checks it did not exit by itself)."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED.replace("%d" % HANG, "2"), str(write_end), *RUN, "-o", str(tmp_path / "x.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), pass_fds=(write_end,),
    )  # fmt: skip
    os.close(write_end)
    try:
        assert select.select([read_end], [], [], HANG)[0] and os.read(read_end, 1) == b"!"
        proc.stdout.close()
        _, stderr = proc.communicate(timeout=HANG)
    finally:
        os.close(read_end)
    assert proc.returncode == 1 and "never stopped" in stderr  # it ran on until the patched step ended


@pytest.mark.parametrize(
    "args",
    [["run", "--help"], ["--help"], [*RUN, "-F", "table"], [*RUN, "-F", "json"], [*RUN, "-F", "csv"], ["explain", *RUN[1:]]],
    ids=["run --help", "--help", "table", "json", "csv", "explain"],
)
def test_a_pipe_closed_from_the_start_is_exit_0_and_silent(args: list[str]) -> None:
    """`attn-cli ... | true`: the reader is gone before the first byte."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run(
        [sys.executable, "-m", "attn_cli", *args], stdout=write_end, stderr=subprocess.PIPE, text=True, env=child_env(), timeout=HANG
    )
    os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_head_of_a_table() -> None:
    """`attn-cli run ... -F table | head -1`: rich's own exit 1 on a broken pipe is not ours."""
    proc = subprocess.run(
        f"{sys.executable} -m attn_cli run 'I saw a saw' -t words -F table --show all | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, env=child_env(), timeout=HANG,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr, proc.stdout.count("\n")) == (0, "", 1)
