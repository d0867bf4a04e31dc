"""`attn-cli run` end to end: every table, format and flag, the errors and exit codes.

Most tests go through CliRunner (one process, torch imported once); a few run
real processes where the issue asks for them (pipes, byte-identical reruns).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from invoking import invoke

from attn_cli.cli import output
from attn_cli.runtime.errors import ExitStatus

SAW = ["run", "I saw a saw", "-t", "words"]


def one_line_error(result, message: str) -> None:
    assert result.stderr.startswith(f"attn-cli: error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def table_rows(text: str, title: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 4 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


# -- the human view ----------------------------------------------------------------


def test_default_table_view() -> None:
    out = invoke(*SAW, "--heads", "2", "--causal", "-F", "table").stdout
    for expected in (
        "I saw a saw ─",
        "tokenizer words",
        "scale factor 0.353553 = 1/sqrt(8)",
        "causal yes",
        "Random weights drawn from the seed, not a trained model's",
        "Tokens",
        "head 0 of 2",
        "Attention weights  softmax(Q K^T / sqrt(8)) over each row, head 0",
        "Statistics  of the attention weights, head 1",
        "Heads compared",
        "Output  the heads' context vectors side by side",
        "More tables: --show embeddings,qkv,scores,scaled,context (or --show all)",
    ):
        assert expected in out, expected
    for hidden in ("Raw scores", "Scaled scores", "Context vectors", "Queries", "Embeddings X"):
        assert hidden not in out
    assert "\x1b" not in out  # not a terminal: no colour, no styles
    assert max(len(line) for line in out.splitlines()) <= 120


@pytest.mark.parametrize(
    ("show", "title"),
    [
        ("tokens", "Tokens"),
        ("embeddings", "Embeddings X"),
        ("qkv", "Queries  Q = X W_q^T"),
        ("scores", "Raw scores  Q K^T"),
        ("scaled", "Scaled scores  Q K^T / sqrt(16), the softmax input"),
        ("weights", "Attention weights"),
        ("context", "Context vectors  weights @ V"),
        ("output", "Output  the context vectors"),
        ("stats", "Statistics  of the attention weights"),
    ],
)
def test_show_picks_one_table(show: str, title: str) -> None:
    out = invoke(*SAW, "--show", show).stdout  # --show alone asks for the table view
    titles = {"Tokens", "Embeddings X", "Queries", "Raw scores", "Scaled scores", "Attention weights", "Context vectors", "Output", "Statistics"}
    present = {t for t in titles if re.search(rf"^{re.escape(t)}\b", out, re.M)}
    assert present == {t for t in titles if title.startswith(t)}
    assert "More tables" not in out


def test_show_comma_repeated_and_all() -> None:
    out = invoke(*SAW, "--show", "scores,scaled", "--show", "weights").stdout
    assert "Raw scores" in out and "Scaled scores" in out and "Attention weights" in out and "Tokens" not in out
    every = invoke(*SAW, "--show", "all", "--causal").stdout
    for title in ("Tokens", "Embeddings X", "Queries", "Keys", "Values", "Raw scores", "Scaled scores", "Attention weights", "Statistics", "Context vectors", "Output"):
        assert re.search(rf"^{title}\b", every, re.M), title
    assert every.index("Raw scores") < every.index("Scaled scores") < every.index("Attention weights") < every.index("Context vectors")


def test_head_restricts_to_one_head() -> None:
    out = invoke(*SAW, "--heads", "4", "--head", "2", "--show", "weights,stats").stdout
    assert "Attention weights  softmax(Q K^T / sqrt(4)) over each row, head 2" in out
    assert "head 0" not in out and "head 1" not in out and "head 3" not in out
    assert "Heads compared" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--heads", "2", "--head", "2"], "--head 2 is out of range: this model has 2 heads, numbered 0 to 1 (or -1 for the last)"),
        (["--head", "1"], "--head 1 is out of range: this model has 1 head, numbered 0 to 0 (or -1 for the last)"),
        (["--head", "x"], "--head 'x': give an index (0, -1 for the last), a comma list (0,2), a range (0-3) or all"),
        (["--heads", "4", "--head", "3-1"], "--head '3-1': the range 3-1 runs backwards; write 1-3"),
        (["--layer", "1"], "--layer 1 is out of range: this model has 1 layer, numbered 0 to 0 (or -1 for the last)"),
        (["--pair", "x"], "--pair only makes sense with --model; add --model or drop it"),
        (["--show", "weights,bogus"], "--show: unknown table 'bogus'"),
        (["--precision", "13"], "--precision: 13 is more than 12"),
        (["--format", "xml"], "--format: xml is not one of"),
        (["--query", "saw"], "--query 'saw' matches 2 tokens (saw#1, saw#3): give one of those labels or a position"),
        (["--key", "dog"], "--key 'dog' is not a token of the text (I, saw#1, a, saw#3)"),
        (["--query", "4"], "--query 4 is out of range: the text has 4 tokens, positions 0 to 3"),
        (["--heads", "3"], "--heads 3 does not divide d_model 16"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    one_line_error(invoke(*SAW, *args, code=ExitStatus.USAGE), message)


def test_precision() -> None:
    out = invoke(*SAW, "--show", "weights", "--precision", "2").stdout
    cells = [cell for row in table_rows(out, "Attention weights") for cell in row[1:]]
    assert cells and all(re.fullmatch(r"\d\.\d\d", c) for c in cells)


def test_query_and_key_views() -> None:
    out = invoke(*SAW, "--causal", "--query", "saw#3", "--key", "1").stdout
    assert "Query saw#3 (position 3): what it attends to, most first" in out
    assert "Key saw#1 (position 1): who attends to it, in query order" in out
    assert "saw#3 -> saw#1: weight" in out
    assert "Tokens" in out and "Attention weights" not in out  # focused: only what was asked
    weights = [float(r[3]) for r in table_rows(out, "Query saw#3")]
    assert weights == sorted(weights, reverse=True) and len(weights) == 4
    assert [r[0] for r in table_rows(out, "Key saw#1")] == ["1", "2", "3"]  # query 0 cannot see key 1


def test_query_by_position_with_other_tables() -> None:
    out = invoke(*SAW, "--query", "-1", "--show", "weights").stdout
    assert "Query saw#3 (position 3)" in out and "Attention weights" in out


def test_query_last_is_the_last_token_in_every_view(gpt2_folder: Path) -> None:
    """`--query last` as the rows at any length take it: the toy's and a checkpoint's focused table view
    and explain's walk-through are those of `--query -1` (before, a text without the token "last" was an error)."""
    for args in (SAW, ("run", "The cat sat on the mat", "--model", str(gpt2_folder))):
        last, minus_one = invoke(*args, "--query", "last").stdout, invoke(*args, "--query", "-1").stdout
        assert last == minus_one and "(position " in last
        assert last != invoke(*args, "--query", "0").stdout  # control: another row reads otherwise
    walk = ("explain", "I saw a saw", "-t", "words")
    assert invoke(*walk, "--query", "last").stdout == invoke(*walk, "--query", "-1").stdout


# -- colour ---------------------------------------------------------------------------


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout counts as a terminal, rich is allowed to style it, NO_COLOR is unset."""
    monkeypatch.setattr(output, "_isatty", lambda stream: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLORTERM", "truecolor")


COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-7]|4[0-7]|[34]8;2;)[0-9;]*m")


def test_colour_on_a_terminal(terminal: None) -> None:
    out = invoke(*SAW, "--causal").stdout  # auto: a terminal gets the table
    assert "Attention weights" in out and COLOUR.search(out)
    assert "48;2;253;231;37" in out  # the brightest colour: query I, causal, puts weight 1 on itself
    assert out.count("\x1b[1;4;") >= 4  # every row's maximum bold and underlined


@pytest.mark.parametrize(("args", "env"), [(["--no-color"], {}), ([], {"NO_COLOR": "1"})])
def test_no_color(terminal: None, args: list[str], env: dict[str, str]) -> None:
    out = invoke(*SAW, "--causal", *args, env=env).stdout
    assert "Attention weights" in out and not COLOUR.search(out)


def test_token_text_is_not_markup(rank_dir: Path) -> None:
    out = invoke("run", "[b]bold[/b] [red]x", "-F", "table").stdout
    assert "[b" in out and "[/" in out and "[red" in out


# -- formats --------------------------------------------------------------------------


def test_auto_is_json_off_a_terminal() -> None:
    data = json.loads(invoke(*SAW).stdout)
    assert data["tokens"][3]["label"] == "saw#3"


@pytest.mark.parametrize(("name", "kind"), [("x.json", "json"), ("x.JSONL", "json"), ("x.csv", "csv"), ("x.txt", "table"), ("x", "json")])
def test_auto_follows_the_output_suffix(tmp_path: Path, name: str, kind: str) -> None:
    path = tmp_path / name
    result = invoke(*SAW, "-o", str(path))
    assert result.stdout == ""
    text = path.read_text(encoding="utf-8")
    if kind == "json":
        assert json.loads(text)["text"] == "I saw a saw"
    elif kind == "csv":
        assert text.startswith("text_index,tokenizer,table,head,layer,row,col,row_token,col_token,value\n")
    else:
        assert "Attention weights" in text and "\x1b" not in text


def test_explicit_json_notes_table_only_options() -> None:
    result = invoke(*SAW, "--heads", "2", "-F", "json", "--show", "scores", "--head", "1")
    assert [h["head"] for h in json.loads(result.stdout)["layers"][0]["heads"]] == [1]  # --head chooses in every format
    assert result.stderr == "note: --show only changes the table view; --format json has every number of the chosen layers and heads\n"


def test_numbers_agree_across_formats() -> None:
    args = [*SAW, "--heads", "2", "--causal"]
    data = json.loads(invoke(*args, "-F", "json").stdout)
    rows = list(csv.DictReader(io.StringIO(invoke(*args, "-F", "csv").stdout)))
    table = invoke(*args, "-F", "table", "--show", "weights").stdout
    for h in (0, 1):
        weights = data["layers"][0]["heads"][h]["weights"]
        from_csv = {(int(r["row"]), int(r["col"])): float(r["value"]) for r in rows if r["table"] == "weights" and r["head"] == str(h)}
        assert from_csv == {(i, j): weights[i][j] for i in range(4) for j in range(4)}
        shown = table_rows(table, f"Attention weights  softmax(Q K^T / sqrt(8)) over each row, head {h}")
        for i, row in enumerate(shown):
            assert row[1 : i + 2] == [f"{w:.4f}" for w in weights[i][: i + 1]]
            assert row[i + 2 :] == ["·"] * (3 - i)


# -- -o: atomic -----------------------------------------------------------------------


def test_output_file_into_a_missing_folder_is_a_runtime_error(tmp_path: Path) -> None:
    result = invoke(*SAW, "-o", str(tmp_path / "no" / "such" / "out.json"), code=ExitStatus.ERROR)
    target = tmp_path / "no" / "such" / "out.json"
    one_line_error(result, f"cannot write {target}: the folder {target.parent} does not exist; create it first")


def test_a_failing_batch_leaves_the_old_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text("old\n")
    result = invoke("run", "--lines", "-", "-t", "words", "-o", str(path), input="fine text\n!!!\nmore\n", code=ExitStatus.USAGE)
    one_line_error(result, "text 2 of 3: the text has no words once punctuation is stripped")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl"]  # no partial file left


def test_an_interrupt_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.sources.toy.source import ToySource

    real = ToySource.run
    calls = []

    def interrupted(self, text, selection=None):  # type: ignore[no-untyped-def]
        calls.append(text)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, text, selection)

    monkeypatch.setattr(ToySource, "run", interrupted)
    path = tmp_path / "out.csv"
    result = invoke("run", "--lines", "-", "-t", "words", "-o", str(path), input="one two\nthree four\n", code=ExitStatus.INTERRUPTED)
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # neither out.csv nor a partial temporary file


# -- --lines ---------------------------------------------------------------------------

BATCH = "Life is short, eat dessert first\n\nThe cat sat on the mat\nI saw a saw\n"


def test_lines_json_is_json_lines() -> None:
    out = invoke("run", "--lines", "-", "-t", "words", input=BATCH).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == ["Life is short, eat dessert first", "The cat sat on the mat", "I saw a saw"]
    assert [t["id"] for t in records[0]["tokens"]] == [0, 4, 5, 2, 1, 3]  # the tutorial's vocabulary
    assert out.endswith("}\n") and out.count("\n") == 3


def test_lines_csv_has_one_header_and_a_text_index(tmp_path: Path) -> None:
    source = tmp_path / "texts.txt"
    source.write_text(BATCH, encoding="utf-8")
    out = invoke("run", "--file", str(source), "--lines", "-t", "words", "-F", "csv").stdout
    assert out.count("text_index,tokenizer,table") == 1
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted({r["text_index"] for r in rows}) == ["0", "1", "2"]
    assert {r["row_token"] for r in rows if r["text_index"] == "2"} >= {"saw#1", "saw#3"}


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_lines_write_the_whole_text_writers_bytes(fmt: str, tmp_path: Path) -> None:
    """run streams each text's tables (formats.export.write_json/write_csv): the file and
    stdout hold the bytes the whole-text writer made, text after text."""
    import export_reference

    from attn_cli.sources.toy.config import Config
    from attn_cli.sources.toy.source import ToySource

    texts = [line for line in BATCH.splitlines() if line] + [" ".join(["long"] * 150)]
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    options = ["-t", "words", "--heads", "2", "--causal", "--out-proj", "-F", fmt]
    runs = [ToySource(Config(tokenizer="words", heads=2, causal=True, out_proj=True)).run(text) for text in texts]
    if fmt == "json":
        expected = "".join(export_reference.to_json(run) + "\n" for run in runs)
    else:
        expected = "".join(export_reference.to_csv(run, header=i == 0, index=i) for i, run in enumerate(runs))
    target = tmp_path / f"out.{fmt}"
    invoke("run", "--file", str(source), "--lines", *options, "-o", str(target))
    assert target.read_bytes() == expected.encode("utf-8")
    assert invoke("run", "--file", str(source), "--lines", *options).stdout_bytes == expected.encode("utf-8")


def test_lines_table_labels_each_text() -> None:
    out = invoke("run", "--lines", "-", "-t", "words", "-F", "table", input=BATCH).stdout
    assert "text 1 of 3: Life is short, eat dessert first" in out and "text 3 of 3: I saw a saw" in out
    assert out.count("Attention weights") == 3 and out.count("More tables") == 1


def test_a_long_batch_off_a_terminal_draws_no_progress() -> None:
    texts = "".join(f"text number {i}\n" for i in range(output.PROGRESS_MIN + 5))
    result = invoke("run", "--lines", "-", "-t", "words", input=texts)
    assert result.stderr == "" and len(result.stdout.splitlines()) == output.PROGRESS_MIN + 5


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("total", "live", "drawn"), [(output.PROGRESS_MIN, False, True), (output.PROGRESS_MIN - 1, False, False), (output.PROGRESS_MIN, True, False)])
def test_progress_bar_only_for_long_batches_on_a_terminal(monkeypatch: pytest.MonkeyPatch, total: int, live: bool, drawn: bool) -> None:
    stderr = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert list(output.progress(iter(range(total)), total, stdout_is_live=live)) == list(range(total))
    assert ("texts" in stderr.getvalue()) is drawn


def test_progress_bar_not_drawn_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert list(output.progress(iter(range(50)), 50)) == list(range(50))
    assert stderr.getvalue() == ""


# -- other exit codes -------------------------------------------------------------------


def test_unavailable_tokenizer_exits_3() -> None:
    result = invoke("run", "hello", "-t", "cl100k_base", code=ExitStatus.TOKENIZER_UNAVAILABLE)
    assert result.stderr.startswith("attn-cli: error: ") and result.stderr.count("\n") == 1


def test_too_many_tokens_exits_4() -> None:
    one_line_error(invoke(*SAW, "--max-tokens", "3", code=ExitStatus.TOO_LARGE), "the text has 4 tokens, over --max-tokens 3")


def test_help_lists_runs_options() -> None:
    out = invoke("run", "--help", env={"COLUMNS": "200"}).stdout
    for option in ("--show", "--head", "--query", "--key", "--precision", "--no-color", "--format", "--output", "--lines", "--file"):
        assert option in out


# -- real processes ------------------------------------------------------------------------


def attn_process(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attn_cli", *args], input=stdin, capture_output=True, timeout=120)


def test_echo_into_run_into_json_tool() -> None:
    """echo "I saw a saw" | attn-cli run - -t words --format json | python -m json.tool"""
    env = dict(os.environ)
    attn = subprocess.Popen([sys.executable, "-m", "attn_cli", "run", "-", "-t", "words", "--format", "json"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    tool = subprocess.Popen([sys.executable, "-m", "json.tool"], stdin=attn.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert attn.stdin is not None and attn.stdout is not None
    attn.stdin.write(b"I saw a saw\n")
    attn.stdin.close()
    attn.stdout.close()  # json.tool holds the read end now
    pretty, tool_err = tool.communicate(timeout=120)
    attn_err = attn.stderr.read() if attn.stderr else b""
    assert attn.wait(timeout=120) == 0, attn_err
    assert tool.returncode == 0, tool_err
    assert attn_err == b""
    data = json.loads(pretty)
    assert data == json.loads(invoke(*SAW).stdout)  # the same numbers as in this process


def test_rerun_is_byte_identical_across_processes() -> None:
    args = [*SAW, "--heads", "2", "--causal", "--qkv-bias", "--out-proj", "-F", "csv"]
    proc = attn_process(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == invoke(*args).stdout_bytes == invoke(*args).stdout_bytes


def test_jsonl_is_accepted_as_json_lines(tmp_path: Path) -> None:
    lines = tmp_path / "texts.txt"
    lines.write_text("I saw a saw\nHello shiny sun\n")
    as_json = invoke("run", "--file", str(lines), "--lines", "-t", "words", "-F", "json")
    as_jsonl = invoke("run", "--file", str(lines), "--lines", "-t", "words", "-F", "jsonl")
    assert as_jsonl.exit_code == 0 and as_jsonl.stdout == as_json.stdout
    assert [json.loads(line)["text"] for line in as_jsonl.stdout.splitlines()] == ["I saw a saw", "Hello shiny sun"]


@pytest.mark.parametrize("command", ["run", "heads"])
@pytest.mark.parametrize("name", ["x.tsv", "x.md", "x.xlsx", "x.json.gz"])
def test_an_output_name_of_another_format_is_refused_and_nothing_written(tmp_path: Path, command: str, name: str) -> None:
    result = invoke(command, "I saw a saw", "-t", "words", "-o", str(tmp_path / name), code=2)
    line = result.stderr.strip()
    assert line.startswith("attn-cli: error: -o ") and ".json, .jsonl, .ndjson, .csv, .txt" in line and "\n" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "heads"])
def test_output_names_and_formats(tmp_path: Path, command: str) -> None:
    """No suffix: JSON; a known one: its format; an explicit --format that the name
    contradicts wins, with one note (the negative control of the refusal above: these
    names are written)."""
    plain = invoke(command, "I saw a saw", "-t", "words", "-o", str(tmp_path / "noext"), code=None)
    assert plain.exit_code == 0 and (tmp_path / "noext").read_text().startswith("{")
    csv = invoke(command, "I saw a saw", "-t", "words", "-o", str(tmp_path / "x.CSV"), code=None)
    assert csv.exit_code == 0 and not (tmp_path / "x.CSV").read_text().startswith("{")
    forced = invoke(command, "I saw a saw", "-t", "words", "-F", "csv", "-o", str(tmp_path / "x.json"), code=None)
    assert forced.exit_code == 0 and not (tmp_path / "x.json").read_text().startswith("{")
    notes = [line for line in forced.stderr.splitlines() if line.startswith("note: -o")]
    assert notes == [f"note: -o {tmp_path / 'x.json'}: writing CSV as --format says, though the name says JSON"]
