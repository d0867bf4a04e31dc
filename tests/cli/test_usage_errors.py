"""Usage errors in attn-cli's own words, whichever typer parsed them (issue 23): typer
0.21+ words them through pydantic ("Value error, ...", "Input should be less than or
equal to 12"), older typer through click; both read the same here. (Checked by hand with
typer 0.20.1 on PYTHONPATH as well as with the installed one.)"""

from __future__ import annotations

import re

import pytest
from invoking import invoke

CASES = [
    (["run", "x", "-F", "xml"], "--format: xml is not one of auto, table, json, jsonl, csv"),
    (["run", "x", "--format=xml"], "--format: xml is not one of auto, table, json, jsonl, csv"),
    (["run", "x", "--precision", "13"], "--precision: 13 is more than 12"),
    (["run", "x", "--precision", "-1"], "--precision: -1 is less than 0"),
    (["run", "x", "--precision", "abc"], "--precision: abc is not a whole number"),
    (["run", "x", "--temperature", "abc"], "--temperature: abc is not a number"),
    (["run", "x", "--init", "bogus"], "--init: bogus is not one of linear, uniform, normal"),
    (["heatmap", "x", "--what", "foo"], "--what: foo is not one of weights, scores, scaled, all, norms, rollout, flow, value-zeroing, value-zeroing-rollout, alti, attention-gradient"),
    (["run", "x", "--foo"], "no such option: --foo; --help lists the options"),
    (["run", "-hello"], "no such option: -e (in -hello); a text that starts with '-' goes after '--': attn-cli ... -- -hello"),
]


@pytest.mark.parametrize("args, line", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_usage_error_is_one_line_in_our_words(args: list[str], line: str) -> None:
    result = invoke(*args, code=2)
    assert result.stderr == f"attn-cli: error: {line}\n"
    for theirs in ("Value error", "Input should", "Invalid value", "Possible options", "is not in the range"):
        assert theirs not in result.stderr


def test_the_hint_is_right_a_text_after_two_dashes_runs() -> None:
    """The negative control of the hint: what it says to do works."""
    result = invoke("run", "-t", "words", "-F", "json", "--", "-hello")
    assert '"text": "-hello"' in result.stdout


# -- other rough edges of issue 23 -------------------------------------------------------------


def test_debug_is_in_the_help_and_works_before_the_command() -> None:
    assert "--debug" in invoke("--help").stdout
    assert "--debug" in invoke("run", "--help").stdout
    before = invoke("--debug", "run", "x", "--embeddings", "/nonexistent.json", code=None)
    after = invoke("run", "x", "--embeddings", "/nonexistent.json", "--debug", code=None)
    plain = invoke("run", "x", "--embeddings", "/nonexistent.json", code=None)
    assert before.exit_code == after.exit_code == plain.exit_code == 2
    assert "Traceback" in before.stderr and "Traceback" in after.stderr and "Traceback" not in plain.stderr


def test_tables_written_to_a_file_end_no_line_with_spaces(tmp_path) -> None:
    for command in (["run", "I saw a saw", "-t", "words", "--show", "all"], ["heads", "I saw a saw", "-t", "words"]):
        out = tmp_path / f"{command[0]}.txt"
        invoke(*command, "-o", str(out))
        lines = out.read_text(encoding="utf-8").split("\n")
        assert len(lines) > 10 and not [line for line in lines if line.endswith(" ")]


def test_heads_on_the_toy_says_one_head_and_its_grid_title_is_one_line() -> None:
    result = invoke("heads", "I saw a saw", "-t", "words", "-F", "table")
    assert "1 layer × 1 head," in result.stdout and "1 heads" not in result.stdout
    assert "Roles, layers x heads" in result.stdout.splitlines()[result.stdout.splitlines().index("Roles, layers x heads")]


def test_the_pages_reproduce_line_keeps_the_output_and_drops_open(tmp_path, monkeypatch) -> None:
    import attn_cli.cli.html as html_cli

    monkeypatch.setattr(html_cli, "_open", lambda path: None)
    page = tmp_path / "p.html"
    invoke("html", "I saw a saw", "-t", "words", "-o", str(page), "--open")
    text = page.read_text(encoding="utf-8")
    assert f"attn-cli html 'I saw a saw' --output {page} --tokenizer words" in text and "--open" not in text.split("attn-cli html", 1)[1][:200]


@pytest.mark.parametrize("columns", [80, 100])
def test_narrow_terminals_keep_the_titles_end_and_the_paths_words(columns: int, bert_folder, tmp_path, monkeypatch) -> None:
    """At 80-100 columns the weights title kept 'rows renorma…' and lost 'layer 2, head 9';
    a long model path broke mid-word across lines. Now the title wraps and the path keeps
    its end, on one line."""
    import shutil

    monkeypatch.setenv("COLUMNS", str(columns))
    deep = tmp_path / ("a-rather-long-folder-name-for-checkpoints-" * 2) / "sentence-transformers-all-MiniLM-L6-v2-snapshot"
    shutil.copytree(bert_folder, deep)
    result = invoke("run", "The cat sat on the mat", "--model", str(deep), "--layer", "2", "--head", "3", "--hide-tokens", "special", "-F", "table")
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Attention weights"))
    title = " ".join(lines[start : start + 3])
    assert "layer 2, head 3" in title and "…" not in title
    model = next(line for line in lines if line.startswith("model "))
    # the last folder whole, after "…/" (the other pairs may follow it on its line)
    assert len(model) <= columns and re.match(r"model …/sentence-transformers-all-MiniLM-L6-v2-snapshot(  \S|$)", model)
