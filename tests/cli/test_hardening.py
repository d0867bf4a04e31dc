"""Hostile environments and streams (issue 13): a full or closed stdout, signals,
output folders that are not there, data folders that cannot be written, rank
files found by folder, and tiktoken reached only through its public behaviour.

The classes that need a real process (closed fds, signals, privileges) run one;
the rest go through the app in-process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import invoking
import pytest
import tiktoken
from conftest import REPO, real_rank_dir, skip_or_fail

from attn_cli.runtime.errors import ExitStatus
from attn_cli.text import rankfiles

invoke = functools.partial(invoking.invoke, code=None)

WORDS = ["-t", "words"]
HEADLINE = "Life is short, eat dessert first"
GPT2_IDS = [14662, 318, 1790, 11, 4483, 23084, 717]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def attn(args: list[str], *, shell_redirect: str = "", env: dict[str, str] | None = None, timeout: float = 120):
    """Run ``python -m attn_cli ARGS`` in a shell, so that ``>&-`` and ``>/dev/full`` are real."""
    quoted = " ".join(_quote(a) for a in args)
    return subprocess.run(
        f"{_quote(sys.executable)} -m attn_cli {quoted} {shell_redirect}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, env=env or child_env(), timeout=timeout,
    )


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("attn-cli: error: "), stderr
    return lines[0]


# --------------------------------------------------------------------------- 1. stdout full or closed

STDOUT_COMMANDS = [
    ["--help"],
    ["--version"],
    ["run", "--help"],
    ["tokenizers"],
    ["tokenizers", "--help"],
    ["run", "I saw a saw", *WORDS, "-F", "json"],
    ["run", "I saw a saw", *WORDS, "-F", "table"],
]


@pytest.mark.parametrize("redirect", [">/dev/full", ">&-"], ids=["full", "closed"])
@pytest.mark.parametrize("args", STDOUT_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_1(args: list[str], redirect: str) -> None:
    if redirect == ">/dev/full" and not os.path.exists("/dev/full"):
        skip_or_fail("no /dev/full here")
    result = attn(args, shell_redirect=redirect)
    assert result.returncode == ExitStatus.ERROR, result.stderr
    line = one_error_line(result.stderr)
    assert line.startswith("attn-cli: error: cannot write standard output: ")
    if redirect == ">&-":
        assert "closed" in line


def test_help_into_a_reader_that_goes_away_is_quiet() -> None:
    result = subprocess.run(
        f"{_quote(sys.executable)} -m attn_cli run --help | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, env=child_env(), timeout=60,
    )
    assert result.stdout.strip() in ("0", "1") and "Traceback" not in result.stderr


# --------------------------------------------------------------------------- 4. signals


def batch_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "batch.txt"
    path.write_text("".join(f"line {i} of a long batch about attention and its weights\n" for i in range(n)))
    return path


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_sigterm_mid_write_exits_143_and_leaves_no_part_file(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "attn_cli", "run", "--file", str(batch_file(tmp_path, 20000)), "--lines", *WORDS,
         "-o", str(out_dir / "runs.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True,
    )
    assert wait_for(lambda: any(p.suffix == ".part" for p in out_dir.iterdir()), 60), "the write never started"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == ExitStatus.TERMINATED == 143
    assert one_error_line(stderr) == "attn-cli: error: terminated"
    assert list(out_dir.iterdir()) == []


STUCK_IN_TORCH = """
import os, sys, torch
import attn_cli.sources.toy.source
ready = int(sys.argv[1])

def stuck(self, text, selection=None):
    n = 8192
    a = torch.full((n, n), 1.0 / n)  # (n, n); a @ a == a, so the numbers stay finite
    os.write(ready, b"!")  # now: the parent sends its signal when it reads this
    torch.matrix_power(a, 2**63 - 1)  # one C++ call, the GIL released: over a hundred matmuls, minutes
    raise SystemExit("the long operation finished before the signal was handled")

attn_cli.sources.toy.source.ToySource.run = stuck
from attn_cli.entry import main  # the process's entry, as the attn-cli script's
sys.argv = ["attn-cli", *sys.argv[2:]]
main()
"""
HANG = 120  # seconds: only a process that never ends takes this long (the operation above takes minutes)


@pytest.mark.parametrize("signum, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")], ids=["ctrl-c", "sigterm"])
def test_a_signal_ends_the_command_even_inside_a_long_tensor_operation(tmp_path: Path, signum: int, code: int, word: str) -> None:
    """The child writes a byte just before one torch call that runs for minutes
    without returning to Python; the signal follows the byte. The process must end
    long before the call would (HANG only stops a process that never does), with the
    signal's exit code, one line, and no partial output file."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK_IN_TORCH, str(write_end), "run", HEADLINE, *WORDS, "-F", "json", "-o", str(out_dir / "out.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(OMP_NUM_THREADS="1"), text=True, pass_fds=(write_end,),
    )  # fmt: skip
    os.close(write_end)  # the child's copy alone: if it dies first, the read below sees end-of-file
    try:
        assert select.select([read_end], [], [], HANG)[0], "the child never reached the long operation"
        assert os.read(read_end, 1) == b"!", f"the child ended before the long operation: {proc.communicate()}"
        assert [p.suffix for p in out_dir.iterdir()] == [".part"]  # the output is being written
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {HANG} s after the signal: {proc.communicate()}")
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stderr
    assert one_error_line(stderr) == f"attn-cli: error: {word}"
    assert list(out_dir.iterdir()) == []


# --------------------------------------------------------------------------- 5. output folders


@pytest.mark.parametrize("command", ["run", "heatmap", "explain", "html", "heads"])
def test_an_output_folder_that_does_not_exist_is_exit_1_naming_it(tmp_path: Path, command: str) -> None:
    target = f"{tmp_path / 'missing-dir'}/"
    result = invoke(*[command, "I saw a saw", *WORDS, "-o", target])
    assert result.exit_code == ExitStatus.ERROR, result.output
    line = one_error_line(result.stderr)
    assert target in line and "folder does not exist" in line
    assert list(tmp_path.iterdir()) == []


def test_an_output_folder_that_is_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "results").write_text("a file")
    result = invoke(*["run", "I saw a saw", *WORDS, "-o", f"{tmp_path / 'results'}/"])
    assert result.exit_code == ExitStatus.ERROR
    assert "is a file, not a folder" in one_error_line(result.stderr)


def test_an_existing_folder_with_a_slash_still_takes_heatmaps(tmp_path: Path) -> None:
    result = invoke(*["heatmap", "I saw a saw", *WORDS, "-o", f"{tmp_path}/"])
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["i-saw-a-saw.png"]


# --------------------------------------------------------------------------- --debug, one mechanism


def test_debug_shows_the_traceback_and_only_with_debug() -> None:
    plain = invoke(*["run", "I saw a saw", *WORDS, "--heads", "0"])
    debug = invoke(*["run", "I saw a saw", *WORDS, "--heads", "0", "--debug"])
    assert plain.exit_code == debug.exit_code == ExitStatus.USAGE
    assert "Traceback" not in plain.stderr
    assert "Traceback" in debug.stderr and "ConfigError" in debug.stderr
    assert debug.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]


def test_a_text_that_says_debug_is_not_the_debug_flag() -> None:
    result = invoke(*["run", *WORDS, "--heads", "0", "--", "--debug"])
    assert result.exit_code == ExitStatus.USAGE and "Traceback" not in result.stderr


# --------------------------------------------------------------------------- tokenizers add


def test_add_into_a_data_folder_that_is_a_file_is_exit_1_naming_the_folder(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ATTN_CLI_DATA_DIR", str(blocker))
    some = tmp_path / "r50k_base.tiktoken"
    some.write_bytes(b"anything: the folder is checked after the hash")
    fake_hash = hashlib.sha256(some.read_bytes()).hexdigest()
    monkeypatch.setitem(rankfiles.ENCODING_FILES, "fake", (rankfiles.RankFile("https://x.invalid/r50k_base.tiktoken", fake_hash),))
    result = invoke(*["tokenizers", "add", str(some)])
    assert result.exit_code == ExitStatus.ERROR
    line = one_error_line(result.stderr)
    assert "data folder" in line and str(blocker) in line and "ATTN_CLI_DATA_DIR" in line


PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2  # linux/prctl.h, linux/capability.h


def drop_permission_override() -> None:
    """In the child, before exec: root without the two capabilities that let it ignore
    permission bits (dropped from the bounding set, so the exec'd Python never has them).
    Its own files (the venv, the checkout) stay readable, wherever they live."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_add_into_a_data_folder_without_write_permission_is_exit_1(tmp_path: Path) -> None:
    """As root, permission bits do not stop writes: the child runs without the capabilities
    that override them."""
    if os.geteuid() != 0:
        skip_or_fail("needs root (as a user, the folder below is unwritable already, and other tests cover that)")
    data = tmp_path / "data"
    (data / "tiktoken").mkdir(parents=True)
    os.chmod(data / "tiktoken", 0o555)
    rank = tmp_path / "r50k.tiktoken"
    shutil.copy(Path(tiktoken.__file__), rank)  # not a rank file; its hash is made to match
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import os; os.mkdir(os.path.join(os.environ['DATA'], 'tiktoken', 'x'))"],
            env=child_env(DATA=str(data)), preexec_fn=drop_permission_override, capture_output=True, text=True,
        )
    except subprocess.SubprocessError as err:  # prctl refused: no CAP_SETPCAP in this container
        skip_or_fail(f"cannot drop capabilities here: {err}")
    assert probe.returncode != 0 and "PermissionError" in probe.stderr  # the folder really is unwritable to the child
    source = rankfiles.ENCODING_FILES["r50k_base"][0]
    script = textwrap.dedent(f"""
        import sys
        from attn_cli.text import rankfiles
        rankfiles.ENCODING_FILES["fake"] = (rankfiles.RankFile("https://x.invalid/{source.name}", "{hashlib.sha256(rank.read_bytes()).hexdigest()}"),)
        from attn_cli.cli import app
        app(["tokenizers", "add", sys.argv[1]], prog_name="attn-cli")
    """)
    result = subprocess.run(
        [sys.executable, "-c", script, str(rank)], env=child_env(ATTN_CLI_DATA_DIR=str(data), HOME=str(tmp_path)),
        preexec_fn=drop_permission_override, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == ExitStatus.ERROR, result.stderr
    line = one_error_line(result.stderr)
    assert "Permission denied" in line and str(data / "tiktoken") in line


def test_add_refuses_an_endless_stream_without_reading_it_all() -> None:
    result = invoke(*["tokenizers", "add", "/dev/zero"])
    assert result.exit_code == ExitStatus.USAGE
    assert "over 64 MiB" in one_error_line(result.stderr)


@pytest.mark.integration
def test_add_a_folder_takes_every_rank_file_in_it(rank_dir: Path, tmp_path: Path) -> None:
    (rank_dir / "README.md").write_text("not a rank file, and not named like one")
    result = invoke(*["tokenizers", "add", str(rank_dir)])
    assert result.exit_code == 0, result.stderr
    added = sorted(p.name for p in (rankfiles.data_dir() / "tiktoken").iterdir())
    assert added == sorted(p.name for p in rank_dir.iterdir() if p.name != "README.md")


def test_add_a_folder_with_no_rank_files_says_so(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    result = invoke(*["tokenizers", "add", str(tmp_path)])
    assert result.exit_code == ExitStatus.USAGE
    assert "holds no file named like a rank file" in one_error_line(result.stderr)


def test_missing_gpt2_files_are_named_together_with_the_r50k_shortcut() -> None:
    result = invoke(*["run", HEADLINE, "-t", "gpt2"])
    assert result.exit_code == ExitStatus.TOKENIZER_UNAVAILABLE
    line = one_error_line(result.stderr)
    assert "vocab.bpe and encoder.json" in line and "r50k_base.tiktoken alone" in line
    assert "tokenizers add PATH/vocab.bpe PATH/encoder.json" in line


# --------------------------------------------------------------------------- 12. tiktoken through its public behaviour


@pytest.mark.integration
@pytest.mark.parametrize("encoding", sorted(rankfiles.ENCODING_FILES))
def test_the_file_table_is_what_tiktoken_reads(encoding: str, rank_dir: Path, offline_env: Path, monkeypatch) -> None:
    """Filled from the table, tiktoken's cache must be all tiktoken reads: a wrong URL
    (another cache name) or hash would make it download, which is refused here."""
    import requests

    def refuse(*args, **kwargs):
        raise AssertionError(f"tiktoken tried to download {args[:1]}")

    monkeypatch.setattr(requests, "get", refuse)
    encoder = rankfiles.load_encoding(encoding)
    assert encoder.name == encoding
    assert encoder.decode(encoder.encode(HEADLINE)) == HEADLINE
    cache = offline_env / "tiktoken-cache"
    for f in rankfiles.rank_files(encoding):
        if encoding != "gpt2":  # gpt2 is built from r50k_base's file when it is there
            assert hashlib.sha256((cache / f.cache_name).read_bytes()).hexdigest() == f.sha256


def test_the_file_table_covers_every_encoding_of_this_tiktoken() -> None:
    assert set(tiktoken.list_encoding_names()) <= set(rankfiles.ENCODING_FILES)


@pytest.mark.integration
def test_loading_leaves_tiktokens_registry_and_module_alone(rank_dir: Path) -> None:
    import tiktoken.load
    import tiktoken.registry

    before = (tiktoken.load.read_file, tiktoken.load.read_file_cached)
    assert rankfiles.load_encoding("gpt2").encode(HEADLINE) == GPT2_IDS
    assert (tiktoken.load.read_file, tiktoken.load.read_file_cached) == before
    assert "gpt2" not in tiktoken.registry.ENCODINGS  # built from r50k_base, never registered as tiktoken's gpt2


@pytest.mark.integration
def test_an_emitted_script_runs_offline_after_one_run(rank_dir: Path, offline_env: Path, tmp_path: Path, monkeypatch) -> None:
    result = invoke(*["run", HEADLINE, "-t", "cl100k_base", "--emit-python"])
    assert result.exit_code == 0, result.stderr
    script = tmp_path / "attention.py"
    script.write_text(result.stdout)
    env = child_env(TIKTOKEN_CACHE_DIR=str(offline_env / "tiktoken-cache"), HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    done = subprocess.run([sys.executable, str(script), "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]


# --------------------------------------------------------------------------- 2. caches and homes that are not usable


@pytest.mark.integration
@pytest.mark.parametrize("cache", ["a-file", "empty-string", "under-a-file"])
def test_an_unusable_tiktoken_cache_still_loads_quietly(cache: str, rank_dir: Path, tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    value = {"a-file": str(blocker), "empty-string": "", "under-a-file": str(blocker / "cache")}[cache]
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", value)
    result = invoke(*["run", HEADLINE, "-t", "r50k_base", "-F", "json"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert os.environ["TIKTOKEN_CACHE_DIR"] == value  # the private cache was for the load only


@pytest.mark.parametrize("setup", ["home-is-a-file", "home-under-dev-null", "no-home-config-under-a-file", "cache-under-a-file"])
def test_unusable_homes_give_quiet_heatmaps_and_leave_nothing_behind(setup: str, tmp_path: Path) -> None:
    """No warnings, and nothing left in the temp folder (a private matplotlib folder used
    to stay there, issue 18)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = child_env(ATTN_CLI_OFFLINE="1", TMPDIR=str(temp))
    for name in ("HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    if setup == "home-is-a-file":
        env["HOME"] = str(blocker)
    elif setup == "home-under-dev-null":
        env["HOME"] = "/dev/null/nohome"
    elif setup == "no-home-config-under-a-file":
        env["XDG_CONFIG_HOME"] = str(blocker / "config")
        env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    else:
        env["HOME"] = str(tmp_path)
        env["XDG_CACHE_HOME"] = str(blocker / "cache")
    result = subprocess.run(
        [sys.executable, "-m", "attn_cli", "heatmap", "I saw a saw", *WORDS, "-o", str(tmp_path / "x.png")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert (tmp_path / "x.png").is_file()
    assert list(temp.iterdir()) == []


def test_an_interrupted_heatmap_leaves_no_private_folder(tmp_path: Path) -> None:
    """The same folder, removed by the signal's exit too: Ctrl-C while matplotlib loads."""
    import importlib

    test_signals = importlib.import_module("runtime.test_signals")  # tests/ is on sys.path (conftest), not tests/runtime/

    temp = tmp_path / "tmp"
    temp.mkdir()
    env = child_env(TMPDIR=str(temp), HOME="/dev/null/nohome")
    env.pop("MPLCONFIGDIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", test_signals.AT_IMPORT, "matplotlib.figure", str(int(signal.SIGINT)), "heatmap", "I saw a saw", *WORDS, "-o", str(tmp_path / "x.png")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (130, "attn-cli: error: interrupted\n")
    assert list(temp.iterdir()) == [] and not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------- 3. stdout encodings


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}, {"PYTHONIOENCODING": "latin-1"}],
    ids=["ascii", "C-locale", "latin-1"],
)
def test_a_stdout_that_cannot_hold_the_text_gets_escapes(env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attn_cli", "run", "naïve café ☕", *WORDS, "-F", "table"],
        capture_output=True, env=child_env(**env), timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr
    assert b"\\u2615" in result.stdout


# --------------------------------------------------------------------------- 6. endless and huge inputs


@pytest.mark.parametrize("how", ["--file", "stdin"])
def test_an_endless_text_is_too_large_not_read_forever(how: str) -> None:
    args = ["run", *WORDS, "--file", "/dev/zero"] if how == "--file" else ["run", *WORDS, "-"]
    stdin = None if how == "--file" else open("/dev/zero", "rb")  # noqa: SIM115
    try:
        result = subprocess.run(
            [sys.executable, "-m", "attn_cli", *args], stdin=stdin, capture_output=True, text=True, env=child_env(), timeout=60
        )
    finally:
        if stdin:
            stdin.close()
    assert result.returncode == ExitStatus.TOO_LARGE
    assert "more than 64 MiB of text" in one_error_line(result.stderr)


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


@pytest.mark.parametrize(
    "content, code, message",
    [
        (lambda: npy_header((2, 10**12)) + b"\0" * 64, ExitStatus.USAGE, "shorter than its header says"),
        (lambda: npy_header((10**9, 16)), ExitStatus.USAGE, "has 1000000000 rows but the text has 2 tokens"),
        (lambda: b"\x93NUMPY\x01\x00\x10\x00{'descr': ??? }\n", ExitStatus.USAGE, "not a readable .npy file"),
        (lambda: npy_header((2, 3), "|O") + b"\0" * 64, ExitStatus.USAGE, "never unpickled"),
    ],
    ids=["absurd-width", "absurd-rows", "malformed-header", "object-array"],
)
def test_malformed_npy_files_are_clear_errors(tmp_path: Path, content, code: int, message: str) -> None:
    path = tmp_path / "x.npy"
    path.write_bytes(content())
    result = invoke(*["run", "I saw", *WORDS, "--embeddings", str(path), "-F", "json"])
    assert result.exit_code == code, result.stderr
    assert message in one_error_line(result.stderr)


def test_a_sparse_multi_gigabyte_npy_is_refused_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    from attn_cli.runtime import budget

    path = tmp_path / "big.npy"
    header = npy_header((2, 10**9))
    with path.open("wb") as f:
        f.write(header)
        f.truncate(len(header) + 8 * 10**9)  # sparse: no disk used
    monkeypatch.setattr(budget, "available_bytes", lambda: 16 * 2**30)
    result = invoke(*["run", "I saw", *WORDS, "--embeddings", str(path), "-F", "json"])
    assert result.exit_code == ExitStatus.TOO_LARGE
    assert "give a smaller embeddings file" in one_error_line(result.stderr)


# --------------------------------------------------------------------------- 10. completion


@pytest.mark.parametrize("shell, marker", [("bash", "complete_bash"), ("zsh", "#compdef attn-cli"), ("fish", "complete_fish")])
def test_completion_prints_the_script(shell: str, marker: str) -> None:
    result = invoke(*["completion", shell])
    assert result.exit_code == 0 and marker in result.stdout and "_ATTN_CLI_COMPLETE" in result.stdout


def test_the_bash_script_is_answered_at_run_time() -> None:
    env = child_env(COMP_WORDS="attn-cli run --hea", COMP_CWORD="2", _ATTN_CLI_COMPLETE="complete_bash")
    result = subprocess.run([sys.executable, "-m", "attn_cli"], env=env, capture_output=True, text=True, timeout=60)
    assert "--heads" in result.stdout.split()  # typer's bash format, which its script reads


@pytest.mark.parametrize(
    "words, cword, expected",
    [
        ("attn-cli run --tokenizer c", 3, ["cl100k_base"]),
        ("attn-cli heatmap -t o200k", 3, ["o200k_base", "o200k_harmony"]),
        ("attn-cli run -t wo", 3, ["words"]),
        ("attn-cli run --show sc", 3, ["scores", "scaled"]),
        ("attn-cli run --show scores,we", 3, ["scores,weights"]),
        ("attn-cli run --show scores,s", 3, ["scores,scaled", "scores,stats"]),  # a table named already is not offered again
    ],
)
def test_tokenizer_and_show_complete_with_tab(words: str, cword: int, expected: list[str]) -> None:
    """What the docs promise completes does (issue 23: --tokenizer and --show did not)."""
    env = child_env(COMP_WORDS=words, COMP_CWORD=str(cword), _ATTN_CLI_COMPLETE="complete_bash")
    result = subprocess.run([sys.executable, "-m", "attn_cli"], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == expected, result.stderr


def test_help_loads_no_completion_machinery_beyond_typers_own() -> None:
    code = (
        "import sys; import typer; before = set(sys.modules); "
        "from attn_cli.cli import app; app(['--help'], standalone_mode=False); "
        "print(sorted(m for m in set(sys.modules) - before if 'complet' in m or 'shellingham' in m "
        "or m.startswith(('torch', 'matplotlib', 'tiktoken'))), file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert result.stderr.strip().splitlines()[-1] == "['attn_cli.cli.completion']"


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A TIKTOKEN_CACHE_DIR as `attn-cli run -t r50k_base` leaves it after its first run from a rank
    folder holding the file (once: each case below starts from a copy); None without the rank files."""
    source = real_rank_dir()
    if source is None:
        return None
    base = tmp_path_factory.mktemp("filled")
    ranks, cache = base / "ranks", base / "cache"
    ranks.mkdir()
    shutil.copy(source / "r50k_base.tiktoken", ranks)
    env = child_env(ATTN_CLI_TIKTOKEN_DIR=str(ranks), TIKTOKEN_CACHE_DIR=str(cache), ATTN_CLI_OFFLINE="1", ATTN_CLI_DATA_DIR=str(base / "data"))
    fill = subprocess.run([sys.executable, "-m", "attn_cli", "run", "hi", "-t", "r50k_base", "-F", "json"], env=env, capture_output=True, text=True)
    assert fill.returncode == 0 and len(list(cache.iterdir())) == 1, fill.stderr  # the cache holds a copy now
    return cache


@pytest.mark.parametrize(
    "unreadable, tokenizer, code, says",
    [
        ("cache", "r50k_base", 0, None),  # the rank folder has it: the unreadable cache is passed over
        ("cache", "gpt2", 0, None),
        ("ranks", "r50k_base", 0, None),  # the cache has it: the unreadable folder is passed over
        ("both", "r50k_base", 3, "needs r50k_base.tiktoken"),
        ("both", None, 0, "note: gpt2 is not available offline"),  # the default falls back to words, with its note
        ("a-file", "r50k_base", 3, "cannot be read (permission denied)"),
    ],
)
def test_unreadable_rank_folders_and_caches(
    tmp_path: Path, filled_cache: Path | None, unreadable: str, tokenizer: str | None, code: int, says: str | None
) -> None:
    """TIKTOKEN_CACHE_DIR and ATTN_CLI_TIKTOKEN_DIR that this process may not read (root
    without the capabilities that override permission bits): passed over like missing
    ones, or one line and exit 3; they were tracebacks (PermissionError from pathlib)."""
    if os.geteuid() != 0:
        skip_or_fail("needs root (the child drops the capabilities that let root read anything)")
    source = real_rank_dir()
    if source is None:
        skip_or_fail("the real tiktoken rank files are not on this machine (set ATTN_CLI_TEST_TIKTOKEN_DIR)")
    ranks, cache = tmp_path / "ranks", tmp_path / "cache"
    ranks.mkdir()
    shutil.copy(source / "r50k_base.tiktoken", ranks)
    shutil.copytree(filled_cache, cache)  # the copy a first run leaves in the cache
    env = child_env(ATTN_CLI_TIKTOKEN_DIR=str(ranks), TIKTOKEN_CACHE_DIR=str(cache), ATTN_CLI_OFFLINE="1", ATTN_CLI_DATA_DIR=str(tmp_path / "data"))
    if unreadable == "a-file":
        shutil.rmtree(cache)
        os.chmod(ranks / "r50k_base.tiktoken", 0)
    for folder in {"cache": [cache], "ranks": [ranks], "both": [cache, ranks], "a-file": []}[unreadable]:
        os.chmod(folder, 0)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "attn_cli", "run", "hi there", "-F", "json", *(["-t", tokenizer] if tokenizer else [])],
            env=env, preexec_fn=drop_permission_override, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        for path in (cache, ranks, ranks / "r50k_base.tiktoken"):
            if path.exists():
                os.chmod(path, 0o755)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if says is None:
        assert result.stderr == ""
    else:
        assert len(result.stderr.splitlines()) == 1 and says in result.stderr
