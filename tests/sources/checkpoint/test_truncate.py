"""`--truncate` says what it cut, in every output: a note on stderr for each text, the tables'
header, JSON's ``truncated``, the page's header (in a browser too), explain's first step, a
saved trace read back, the Python API; and the refusal without it is one sentence. Each has
its control: a text that fits says nothing, and a tokenizer that cuts silently (the bug)
fails the same checks."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any

import invoking
import pytest
from browser_support import Page, browser  # noqa: F401  (the fixture: headless Chromium)
from html_support import manifest

from attn_cli.records.tokens import Truncation
from attn_cli.runtime.errors import ExitStatus
from attn_cli.sources.checkpoint.tokenizer import CheckpointTokenizer

invoke = functools.partial(invoking.invoke, code=None)

LONG = " ".join(["the cat sat on the mat"] * 20)  # 120 words: past both tiny models' 64 positions
SHORT = "The cat sat on the mat"
POSITIONS = 64  # n_positions and max_position_embeddings of checkpoints.build_gpt2 and build_bert
FIXED = {"COLUMNS": "100"}
# the header's two rows about a cut ("key value" pairs, never broken inside)
HEADER_ROWS = re.compile(r"truncated from \d+ tokens to \d+ \(the model's positions\)|dropped (?:the last \d+|\d+ from the ends of the text and its pair)")


def raw_length(folder: Path, text: str, pair: str | None = None) -> int:
    """The text's tokens by the ``tokenizers`` library itself, nothing cut (the reference)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()  # BERT's file truncates at 24
    tokenizer.no_padding()
    return len(tokenizer.encode(text, pair).ids)


def notes(result: Any) -> list[str]:
    assert result.exit_code == 0, (result.exit_code, result.output)
    return [line for line in result.stderr.splitlines() if line.startswith("note: ")]


def page_rows(folder_or_saved: list[str], tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """The page's header rows and stderr's notes of ``html`` with these arguments."""
    page = tmp_path / "page.html"
    built = invoke("html", *folder_or_saved, "-o", str(page))
    return dict(manifest(page.read_text())["traces"][0]["header"]), notes(built)


def what_is_said(folder: Path, text: str, tmp_path: Path) -> dict[str, Any]:
    """What each output of a --truncate run says about a cut: stderr's notes, the tables'
    ``truncated`` header line, JSON's key, the page's header row (None where it says nothing)."""
    model = ["--model", str(folder), "--truncate", "--layer", "0", "--head", "0"]
    ran = invoke("run", text, *model, "-F", "json")
    data = json.loads(ran.stdout)
    table = invoke("run", text, *model, "-F", "table", "--show", "tokens", env=FIXED)
    header = HEADER_ROWS.findall(table.stdout)
    rows, page_notes = page_rows([text, *model], tmp_path)
    assert len(data["tokens"]) == min(POSITIONS, raw_length(folder, text))
    return {
        "stderr": notes(ran),
        "table": header or None,
        "table stderr": notes(table),
        "json": data.get("truncated", "absent"),
        "page": rows.get("truncated"),
        "page stderr": page_notes,
    }


def said_about(original: int) -> dict[str, Any]:
    note = f"note: the text is {original} tokens; --truncate kept the first 64 (the model's positions) and dropped the last {original - 64}"
    return {
        "stderr": [note],
        "table": [f"truncated from {original} tokens to 64 (the model's positions)", f"dropped the last {original - 64}"],
        "table stderr": [note],
        "json": {"from": original, "to": 64},
        "page": note.removeprefix("note: ") + ", which the text above still shows",
        "page stderr": [note],
    }


NOTHING = {"stderr": [], "table": None, "table stderr": [], "json": "absent", "page": None, "page stderr": []}


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_every_output_says_what_truncate_cut(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> None:
    folder = request.getfixturevalue(f"{name}_folder")
    original = raw_length(folder, LONG)  # BERT's count has [CLS] and [SEP], which stay
    assert original > POSITIONS
    assert what_is_said(folder, LONG, tmp_path) == said_about(original)


def test_a_text_that_fits_says_nothing(gpt2_folder: Path, tmp_path: Path) -> None:
    assert what_is_said(gpt2_folder, SHORT, tmp_path) == NOTHING


def test_a_tokenizer_that_cuts_silently_fails_the_checks(gpt2_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: the cut as it was before, unreported, and every output is silent."""
    encode = CheckpointTokenizer.encode
    monkeypatch.setattr(CheckpointTokenizer, "encode", lambda self, *a, **k: dataclasses.replace(encode(self, *a, **k), truncated=None))
    said = what_is_said(gpt2_folder, LONG, tmp_path)
    assert said == NOTHING
    assert all(said[key] != value for key, value in said_about(raw_length(gpt2_folder, LONG)).items())


def test_the_refusal_without_truncate_is_one_sentence(gpt2_folder: Path) -> None:
    result = invoke("run", LONG, "--model", str(gpt2_folder), "-F", "json")
    assert result.exit_code == ExitStatus.TOO_LARGE == 4 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"attn-cli: error: the text is {raw_length(gpt2_folder, LONG)} tokens but this model takes at most 64 (its position table): "
        "shorten it, or add --truncate to keep the first 64"
    ]
    assert notes(invoke("run", LONG, "--model", str(gpt2_folder), "-F", "json", "--truncate", "--layer", "0"))  # the control: it runs


def test_generate_after_a_cut_says_there_is_no_room(gpt2_folder: Path) -> None:
    result = invoke("run", LONG, "--model", str(gpt2_folder), "--truncate", "--generate", "3", "-F", "json")
    assert result.exit_code == ExitStatus.TOO_LARGE and result.stdout == ""
    assert result.stderr.splitlines() == [
        "attn-cli: error: --truncate cut the prompt to the model's 64 positions, which leaves no room for --generate 3: shorten the text"
    ]
    fits = invoke("run", SHORT, "--model", str(gpt2_folder), "--truncate", "--generate", "3", "--layer", "0", "-F", "json")  # the control
    assert notes(fits) == [] and len(json.loads(fits.stdout)["tokens"]) == raw_length(gpt2_folder, SHORT) + 3


def test_a_pair_cut_from_both_segments_says_so(bert_folder: Path, tmp_path: Path) -> None:
    pair = " ".join(["the dog sat on the log"] * 15)
    original = raw_length(bert_folder, LONG, pair)
    result = invoke("run", LONG, "--model", str(bert_folder), "--pair", pair, "--truncate", "--layer", "0", "-F", "json")
    assert notes(result) == [
        f"note: the text and its pair are {original} tokens; --truncate kept 64 (the model's positions) "
        f"and dropped {original - 64} from the ends of the two segments, the longer one's first"
    ]
    data = json.loads(result.stdout)
    assert data["truncated"] == {"from": original, "to": 64} and {t["segment"] for t in data["tokens"]} == {0, 1}
    table = invoke("run", LONG, "--model", str(bert_folder), "--pair", pair, "--truncate", "--layer", "0", "--show", "tokens", "-F", "table", env=FIXED)
    assert HEADER_ROWS.findall(table.stdout) == [
        f"truncated from {original} tokens to 64 (the model's positions)", f"dropped {original - 64} from the ends of the text and its pair"
    ]


def test_a_batch_notes_each_text_it_cut(gpt2_folder: Path, tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{SHORT}\n{LONG}\n{SHORT}\n")
    result = invoke("run", "--file", str(texts), "--lines", "--model", str(gpt2_folder), "--truncate", "--layer", "0", "-F", "json")
    original = raw_length(gpt2_folder, LONG)
    assert notes(result) == [f"note: text 2 of 3: the text is {original} tokens; --truncate kept the first 64 (the model's positions) and dropped the last {original - 64}"]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line.get("truncated") for line in lines] == [None, {"from": original, "to": 64}, None]
    assert ["truncated" in line for line in lines] == [False, True, False]  # absent, not null, where nothing was cut


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("heatmap", ["--layer", "0", "--head", "0", "-o", "{tmp}/pic.png"]),
        ("heads", ["-F", "json", "--no-probe"]),
        ("explain", ["--layer", "0", "--head", "0", "--format", "text"]),
    ],
)
def test_the_other_commands_note_the_cut_once(gpt2_folder: Path, tmp_path: Path, command: str, args: list[str]) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    cut = invoke(command, LONG, "--model", str(gpt2_folder), "--truncate", *args)
    original = raw_length(gpt2_folder, LONG)
    assert notes(cut) == [f"note: the text is {original} tokens; --truncate kept the first 64 (the model's positions) and dropped the last {original - 64}"]
    assert notes(invoke(command, SHORT, "--model", str(gpt2_folder), "--truncate", *args)) == []  # the control


def test_compare_notes_a_and_b(gpt2_folder: Path) -> None:
    other = " ".join(["the dog sat on the log"] * 20)
    result = invoke("compare", LONG, other, "--model", str(gpt2_folder), "--truncate", "-F", "json")
    said = notes(result)
    assert [line.split(":")[1] for line in said] == [" A", " B"], said
    assert said[0].endswith(f"the text is {raw_length(gpt2_folder, LONG)} tokens; --truncate kept the first 64 (the model's positions) and dropped the last {raw_length(gpt2_folder, LONG) - 64}")
    assert notes(invoke("compare", SHORT, "The dog sat on the log", "--model", str(gpt2_folder), "--truncate", "-F", "json")) == []


def test_explain_says_truncation_was_on(gpt2_folder: Path) -> None:
    args = ["--model", str(gpt2_folder), "--truncate", "--layer", "0", "--head", "0", "--format", "text"]
    out = invoke("explain", LONG, *args).stdout
    original = raw_length(gpt2_folder, LONG)
    assert "padding off, truncation at the model's positions (--truncate)" in out
    assert f"The text is {original} tokens; --truncate kept the first 64 (the model's positions) and dropped the last {original - 64}." in out
    assert "--truncate --layer 0 --format json" in out  # its suggested commands run as printed
    short = invoke("explain", SHORT, *args).stdout  # the control
    assert "padding off, truncation off" in short and "--truncate kept" not in short and "--truncate --layer" not in short


def test_a_saved_trace_keeps_the_cut(gpt2_folder: Path, tmp_path: Path) -> None:
    import attn_cli

    saved = tmp_path / "cut.json"
    invoke("run", LONG, "--model", str(gpt2_folder), "--truncate", "--layer", "0", "-o", str(saved))
    original = raw_length(gpt2_folder, LONG)
    loaded = attn_cli.load(saved)
    assert loaded.truncated == Truncation(original, 64) and loaded.to_dict()["truncated"] == {"from": original, "to": 64}
    rows, said = page_rows(["--from", str(saved)], tmp_path)
    assert rows["truncated"] == said_about(original)["page"] and said == said_about(original)["stderr"]
    plain = tmp_path / "plain.json"  # the control: a saved text that was not cut
    invoke("run", SHORT, "--model", str(gpt2_folder), "--layer", "0", "-o", str(plain))
    assert attn_cli.load(plain).truncated is None and "truncated" not in attn_cli.load(plain).to_dict()
    rows, said = page_rows(["--from", str(plain)], tmp_path)
    assert "truncated" not in rows and said == []


@pytest.mark.parametrize("value", [{"from": 10, "to": 64}, {"from": 100}, "100", {"from": 100, "to": 63}, {"from": True, "to": 64}])
def test_a_saved_truncated_that_cannot_be_is_a_usage_error(gpt2_folder: Path, tmp_path: Path, value: Any) -> None:
    saved = tmp_path / "cut.json"
    invoke("run", LONG, "--model", str(gpt2_folder), "--truncate", "--layer", "0", "-o", str(saved))
    data = json.loads(saved.read_text())
    data["truncated"] = value
    saved.write_text(json.dumps(data))
    result = invoke("html", "--from", str(saved), "-o", str(tmp_path / "page.html"))
    assert result.exit_code == ExitStatus.USAGE and result.stdout == ""
    assert result.stderr.splitlines() == [f'attn-cli: error: {saved}: truncated is {value!r}; it is {{"from": N, "to": 64}}, N the tokens before the cut, or null']
    data["truncated"] = None  # the control: null is nothing cut
    saved.write_text(json.dumps(data))
    assert "truncated" not in page_rows(["--from", str(saved)], tmp_path)[0]


def test_the_python_api_carries_the_cut(gpt2_folder: Path) -> None:
    import attn_cli
    from attn_cli.render.page import reproduce_command

    original = raw_length(gpt2_folder, LONG)
    cut = attn_cli.trace(LONG, model=gpt2_folder, truncate=True, layer=0)
    assert cut.truncated == cut.tokens.truncated == Truncation(original, 64)
    assert cut.to_dict()["truncated"] == {"from": original, "to": 64}
    assert reproduce_command(cut).endswith(f"--model {gpt2_folder} --truncate --layer 0")
    fits = attn_cli.trace(SHORT, model=gpt2_folder, truncate=True, layer=0)  # the control
    assert fits.truncated is None and "truncated" not in fits.to_dict() and "--truncate" not in reproduce_command(fits)


def test_the_page_shows_the_cut_in_a_browser(gpt2_folder: Path, tmp_path: Path, browser: Any) -> None:
    original = raw_length(gpt2_folder, LONG)
    expected = said_about(original)["page"]
    for text, row in ((LONG, expected), (SHORT, None)):  # the second: the control
        out = tmp_path / "page.html"
        invoke("html", text, "--model", str(gpt2_folder), "--truncate", "--layer", "0", "-o", str(out))
        p = Page(browser, out)
        about = dict(zip(p.page.locator("#about dt").all_inner_texts(), p.page.locator("#about dd").all_inner_texts()))
        assert about.get("truncated") == row
        assert about["tokens"] == str(min(64, raw_length(gpt2_folder, text)))
        assert p.text("#text") == text  # the text stays whole above the row that says so
        assert not p.problems, p.problems
        p.context.close()
