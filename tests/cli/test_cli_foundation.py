"""The foundation's command line: bad configurations give one line and the
documented exit code; `tokenizers`, `tokenizers add` and `--version` work."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import invoking
import pytest
import tiktoken.registry

from attn_cli import __version__
from attn_cli.runtime.errors import ExitStatus

invoke = functools.partial(invoking.invoke, code=None)

HEADLINE = "Life is short, eat dessert first"
WORDS = ["--tokenizer", "words"]


@pytest.fixture(autouse=True)
def fresh_tiktoken_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken keeps every encoding it built for the life of the process."""
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})


def assert_one_line_error(result, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("attn-cli: error: ")
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0]


def embeddings_file(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return str(path)


USAGE = ExitStatus.USAGE
BAD_RUNS = [
    # (args, exit code, words in the message)
    (["run", HEADLINE, *WORDS, "--heads", "3"], USAGE, "--heads 3 does not divide d_model 16"),
    (["run", HEADLINE, *WORDS, "--d-model", "10", "--heads", "4"], USAGE, "does not divide"),
    (["run", HEADLINE, *WORDS, "--heads", "0"], USAGE, "--heads must be"),
    (["run", HEADLINE, *WORDS, "--d-model", "0"], USAGE, "--d-model must be"),
    (["run", HEADLINE, *WORDS, "--d-model", "-4"], USAGE, "--d-model must be"),
    (["run", HEADLINE, *WORDS, "--d-k", "0"], USAGE, "--d-k must be"),
    (["run", HEADLINE, *WORDS, "--d-v", "-1"], USAGE, "--d-v must be"),
    (["run", HEADLINE, *WORDS, "--max-tokens", "0"], USAGE, "--max-tokens must be"),
    (["run", HEADLINE, *WORDS, "--seed", "-1"], USAGE, "--seed must be"),
    (["run", HEADLINE, *WORDS, "--temperature", "0"], USAGE, "--temperature must be a positive number"),
    (["run", HEADLINE, *WORDS, "--temperature", "nan"], USAGE, "--temperature must be"),
    (["run", HEADLINE, *WORDS, "--temperature", "1e-300"], USAGE, "overflows float32", "--temperature"),
    (["run", HEADLINE, *WORDS, "--dropout", "1"], USAGE, "--dropout must be in [0, 1)"),
    (["run", HEADLINE, *WORDS, "--no-projections", "--d-k", "4"], USAGE, "conflicts with --no-projections"),
    (["run", HEADLINE, *WORDS, "--no-projections", "--qkv-bias"], USAGE, "--qkv-bias needs projections"),
    (["run", HEADLINE, *WORDS, "--heads", "two"], USAGE, "--heads"),
    (["run", HEADLINE, *WORDS, "--seed", "x"], USAGE, "--seed"),
    (["run", HEADLINE, *WORDS, "--temperature", "hot"], USAGE, "--temperature"),
    (["run", HEADLINE, *WORDS, "--d-model", "1.5"], USAGE, "--d-model"),
    (["run", HEADLINE, *WORDS, "--init", "bogus"], USAGE, "--init"),
    (["run", HEADLINE, *WORDS, "--bogus-flag"], USAGE, "--bogus-flag"),
    (["run", "", *WORDS], USAGE, "the text is empty"),
    (["run", "   \n", *WORDS], USAGE, "the text is empty"),
    (["run", "!!! ...", *WORDS], USAGE, "no words"),
    (["run", HEADLINE, "--tokenizer", "nope"], USAGE, "unknown tokenizer 'nope'"),
    (["run", HEADLINE, "--tokenizer", ""], USAGE, "--tokenizer is empty"),
    (["run", HEADLINE, "--tokenizer", "gpt2"], ExitStatus.TOKENIZER_UNAVAILABLE, "vocab.bpe", "ATTN_CLI_TIKTOKEN_DIR"),
    (["run", HEADLINE, "--tokenizer", "gpt-4o"], ExitStatus.TOKENIZER_UNAVAILABLE, "o200k_base.tiktoken"),
    (["run", HEADLINE, *WORDS, "--max-tokens", "3"], ExitStatus.TOO_LARGE, "6 tokens, over --max-tokens 3"),
    (["run", HEADLINE, *WORDS, "--d-model", str(2**20)], ExitStatus.TOO_LARGE, "projection weights", "lower --d-model"),
    (["run", HEADLINE, *WORDS, "--heads", "4096", "--d-k", str(2**20), "--d-v", "1"], ExitStatus.TOO_LARGE, "GiB"),
]


@pytest.mark.parametrize(("args", "code", "words"), [(a, c, w) for a, c, *w in BAD_RUNS], ids=[" ".join(case[0][2:]) for case in BAD_RUNS])
def test_bad_run(args: list[str], code: int, words: list[str]) -> None:
    assert_one_line_error(invoke(*args), int(code), *words)


BAD_EMBEDDINGS = [
    # (file name, content, words in the message)
    ("rows.json", json.dumps([[1.0, 2.0]] * 5), "has 5 rows but the text has 6 tokens"),
    ("ragged.json", json.dumps([[1.0, 2.0]] * 5 + [[1.0]]), "row 5 has 1 numbers"),
    ("nan.json", json.dumps([[1.0, 2.0]] * 5 + [[1.0, float("nan")]]), "every value must be a finite"),
    ("words.csv", "a,b\n" * 6, "not a number"),
    ("broken.json", "[[1, 2]", "is not valid JSON"),
    ("empty.json", "", "is not valid JSON"),
]


@pytest.mark.parametrize(("name", "content", "words"), BAD_EMBEDDINGS, ids=[case[0] for case in BAD_EMBEDDINGS])
def test_bad_embeddings_file(tmp_path: Path, name: str, content: str, words: str) -> None:
    path = embeddings_file(tmp_path, name, content)
    assert_one_line_error(invoke("run", HEADLINE, *WORDS, "--embeddings", path), USAGE, words)


def test_embeddings_path_that_is_not_a_file(tmp_path: Path) -> None:
    assert_one_line_error(invoke("run", HEADLINE, *WORDS, "--embeddings", str(tmp_path)), USAGE, "is not a file")
    missing = str(tmp_path / "missing.json")
    assert_one_line_error(invoke("run", HEADLINE, *WORDS, "--embeddings", missing), USAGE, "does not exist")


def test_embeddings_file_that_works(tmp_path: Path) -> None:
    path = embeddings_file(tmp_path, "x.json", json.dumps([[float(i), 1.0, -1.0, 0.5] for i in range(6)]))
    result = invoke("run", HEADLINE, *WORDS, "--embeddings", path, "--heads", "2", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["config"]["d_model"] == 4 and data["model"]["config"]["d_k"] == 2
    assert data["model"]["config"]["embeddings"] == path
    assert data["layers"][0]["input"][3] == [3.0, 1.0, -1.0, 0.5]


def test_default_run_offline_falls_back_with_one_note() -> None:
    result = invoke("run", HEADLINE, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tokenizer"] == "words"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: gpt2 is not available offline")


def test_every_option_reaches_the_config() -> None:
    result = invoke(
        "run", HEADLINE, *WORDS, "--seed", "7", "--d-model", "12", "--d-k", "5", "--d-v", "6", "--heads", "3",
        "--causal", "--no-scale", "--temperature", "0.5", "--dropout", "0.25", "--qkv-bias", "--out-proj",
        "--init", "normal", "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    config = data["model"]["config"]
    assert {k: config[k] for k in ("seed", "d_model", "d_k", "d_v", "heads", "causal", "scale", "temperature",
                                   "dropout", "qkv_bias", "out_proj", "init", "projections")} == {
        "seed": 7, "d_model": 12, "d_k": 5, "d_v": 6, "heads": 3, "causal": True, "scale": False,
        "temperature": 0.5, "dropout": 0.25, "qkv_bias": True, "out_proj": True, "init": "normal", "projections": True,
    }  # fmt: skip
    assert len(data["layers"][0]["heads"]) == 3 and len(data["layers"][0]["heads"][0]["queries"][0]) == 5 and len(data["layers"][0]["output"][0]) == 18
    assert data["layers"][0]["heads"][0]["scaled_scores"][0][1] is None  # causal: masked
    assert data["layers"][0]["heads"][0]["weights"][0][1] == 0.0


def test_no_projections_from_the_command_line() -> None:
    result = invoke("run", HEADLINE, *WORDS, "--no-projections", "--heads", "2", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["config"]["projections"] is False
    assert data["layers"][0]["heads"][1]["queries"] == [row[8:] for row in data["layers"][0]["input"]]


# --- tokenizers ---


def test_tokenizers_lists_what_is_ready_offline() -> None:
    result = invoke("tokenizers")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines() if line and line.split()[0] in
            ("words", "gpt2", "r50k_base", "p50k_base", "cl100k_base", "o200k_base")}  # fmt: skip
    assert rows == {"words": "ready", "gpt2": "missing", "r50k_base": "missing", "p50k_base": "missing",
                    "cl100k_base": "missing", "o200k_base": "missing"}  # fmt: skip
    assert "attn-cli tokenizers add" in result.stdout


def test_tokenizers_add_an_unknown_file(tmp_path: Path) -> None:
    path = tmp_path / "vocab.bpe"
    path.write_text("#version: 0.2\n", encoding="utf-8")
    assert_one_line_error(invoke("tokenizers", "add", str(path)), USAGE, "is not a rank file tiktoken knows")


def test_tokenizers_add_a_missing_file(tmp_path: Path) -> None:
    assert_one_line_error(invoke("tokenizers", "add", str(tmp_path / "nope.tiktoken")), USAGE, "cannot read")


@pytest.mark.integration
def test_tokenizers_add_then_gpt2_works(rank_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTN_CLI_TIKTOKEN_DIR")
    renamed = tmp_path / "downloads"
    renamed.mkdir()
    shutil.copy(rank_dir / "vocab.bpe", renamed / "gpt2-vocab.bpe")
    shutil.copy(rank_dir / "encoder.json", renamed / "gpt2-encoder.json")
    result = invoke("tokenizers", "add", str(renamed / "gpt2-vocab.bpe"), str(renamed / "gpt2-encoder.json"))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("added vocab.bpe (gpt2) to ")
    assert result.stdout.splitlines()[1].startswith("added encoder.json (gpt2) to ")

    listing = invoke("tokenizers").stdout
    assert any(line.split()[:2] == ["gpt2", "ready"] for line in listing.splitlines())
    assert any(line.split()[:2] == ["r50k_base", "missing"] for line in listing.splitlines())

    run = invoke("run", HEADLINE, "--format", "json")
    assert run.exit_code == 0 and run.stderr == ""
    data = json.loads(run.stdout)
    assert data["tokenizer"] == "gpt2" and [t["id"] for t in data["tokens"]] == [14662, 318, 1790, 11, 4483, 23084, 717]
    assert data["vocab_size"] == 50257


@pytest.mark.integration
def test_tokenizers_with_the_real_files(rank_dir: Path) -> None:
    result = invoke("tokenizers")
    assert result.exit_code == 0
    states = [line.split()[1] for line in result.stdout.splitlines()[:8]]
    assert states == ["ready"] * 8


@pytest.mark.integration
def test_a_damaged_rank_file_exits_3(rank_dir: Path) -> None:
    (rank_dir / "cl100k_base.tiktoken").write_bytes(b"damaged")
    result = invoke("run", HEADLINE, "--tokenizer", "cl100k_base")
    assert_one_line_error(result, ExitStatus.TOKENIZER_UNAVAILABLE, "SHA-256", "cl100k_base.tiktoken")


# --- version, and a real process ---


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout == f"attn-cli {__version__}\n"


def _attn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attn_cli", *args], capture_output=True, text=True, timeout=120, env=dict(os.environ))


def test_version_in_a_real_process_does_not_import_torch() -> None:
    code = ("import sys; from attn_cli.cli import app; sys.argv = ['attn-cli', '--version']\n"
            "try:\n    app()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'matplotlib', 'numpy'))\n"
            "assert not heavy, heavy\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"attn-cli {__version__}\n"


def test_bad_configuration_in_a_real_process() -> None:
    proc = _attn("run", HEADLINE, "--tokenizer", "words", "--d-model", "10", "--heads", "4")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == "attn-cli: error: --heads 4 does not divide d_model 10: pick heads that divide it, or give --d-k and --d-v\n"


@pytest.mark.integration
def test_tokenizers_add_a_whole_folder_adds_what_it_knows(rank_dir: Path, monkeypatch: pytest.MonkeyPatch, offline_env: Path) -> None:
    monkeypatch.delenv("ATTN_CLI_TIKTOKEN_DIR")
    (rank_dir / "README.md").write_text("not a rank file\n", encoding="utf-8")
    result = invoke("tokenizers", "add", *sorted(str(p) for p in rank_dir.iterdir()))
    assert result.exit_code == USAGE
    assert len(result.stdout.splitlines()) == 6  # every real rank file was added
    assert result.stderr.count("\n") == 1 and "README.md is not a rank file" in result.stderr
    assert sorted(p.name for p in (offline_env / "data" / "tiktoken").iterdir()) == sorted(
        p.name for p in rank_dir.iterdir() if p.name != "README.md"
    )
