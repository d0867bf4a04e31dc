"""`--model` through the command line: run (tables, JSON schema 2, CSV), heatmap and
explain on tiny sharpened checkpoints, the numbers checked against transformers'
eager attention; selection, conflicts and exit codes."""

from __future__ import annotations

import csv
import functools
import io
import json
from pathlib import Path

import checkpoints
import invoking
import pytest
import torch

from attn_cli.runtime.errors import ExitStatus

invoke = functools.partial(invoking.invoke, code=None)

TEXT = "The cat sat on the mat"


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attn-cli: error: "), result.stderr
    return lines[0]


def test_json_schema_2_every_layer_and_head_equals_transformers(gpt2_folder: Path) -> None:
    result = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == 2
    model = data["model"]
    assert (model["family"], model["layers"], model["heads"], model["kv_heads"], model["head_dim"], model["d_model"]) == ("gpt2", 3, 4, 4, 8, 32)
    assert model["source"] == str(gpt2_folder) and "config" not in model
    ids = tuple(t["id"] for t in data["tokens"])
    ref = checkpoints.reference(gpt2_folder, ids)
    assert [layer["layer"] for layer in data["layers"]] == [0, 1, 2]  # JSON: every layer and head by default
    for layer in data["layers"]:
        got = torch.tensor([h["weights"] for h in layer["heads"]])  # (H, T, T)
        torch.testing.assert_close(got, ref.weights[layer["layer"]], atol=1e-5, rtol=0)
        assert all(h["scaled_scores"][0][1] is None for h in layer["heads"])  # causal: masked is null
        assert all(h["weights"][0][1] == 0.0 for h in layer["heads"])  # ... and exactly 0
        assert len(layer["input"]) == len(ids) and len(layer["input"][0]) == 32


def test_head_and_layer_choose_what_json_and_csv_hold(gpt2_folder: Path) -> None:
    data = json.loads(invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json", "--layer", "-1", "--head", "1,3").stdout)
    assert [layer["layer"] for layer in data["layers"]] == [2]
    assert [h["head"] for h in data["layers"][0]["heads"]] == [1, 3]
    text = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "csv", "--layer", "0-1", "--head", "0").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    weights = [r for r in rows if r["table"] == "weights"]
    assert {(r["layer"], r["head"]) for r in weights} == {("0", "0"), ("1", "0")}
    assert list(rows[0]) == ["text_index", "tokenizer", "table", "head", "layer", "row", "col", "row_token", "col_token", "value"]


def test_bert_pair_and_special_tokens(bert_folder: Path) -> None:
    result = invoke("run", "the cat sat", "--model", str(bert_folder), "--pair", "on the mat", "-F", "json", "--layer", "1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    tokens = data["tokens"]
    assert tokens[0]["special"] and tokens[-1]["special"] and not tokens[1]["special"]
    assert {t["segment"] for t in tokens} == {0, 1} and data["pair"] == "on the mat"
    ids = tuple(t["id"] for t in tokens)
    ref = checkpoints.reference(bert_folder, ids, tuple(t["segment"] for t in tokens))
    got = torch.tensor([h["weights"] for h in data["layers"][0]["heads"]])
    torch.testing.assert_close(got, ref.weights[1], atol=1e-5, rtol=0)


def test_tables_default_to_the_last_layer_and_first_heads(gpt2_folder: Path) -> None:
    out = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "table").stdout
    assert "architecture GPT2LMHeadModel" in out and "layers 3" in out
    assert "Attention weights  softmax(Q K^T / sqrt(8)) over each row, layer 2, head 0" in out
    assert "layer 1," not in out
    out = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "table", "--layer", "0,1", "--head", "2", "--show", "weights").stdout
    assert "layer 0 of 3" in out and "layer 1 of 3" in out
    assert "layer 0, head 2" in out and "layer 1, head 2" in out and "head 0" not in out


def test_table_query_finds_a_token_by_its_label(bert_folder: Path) -> None:
    result = invoke("run", "the cat sat on the mat", "--model", str(bert_folder), "--query", "[CLS]", "--layer", "0", "--head", "0")
    assert result.exit_code == 0, result.output
    assert "Query [CLS] (position 0)" in result.stdout


def test_heatmap_runs_on_a_checkpoint(gpt2_folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "pic.png"
    result = invoke("heatmap", TEXT, "--model", str(gpt2_folder), "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--heads", "2"], "--heads is an option of the seeded toy model"),
        (["--causal", "--tokenizer", "words"], "--tokenizer, --causal are options of the seeded toy model"),
        (["--emit-python"], "--emit-python reproduces the seeded toy model"),
        (["--layer", "3"], "--layer 3 is out of range: this model has 3 layers, numbered 0 to 2"),
        (["--head", "0-9"], "--head 9 is out of range: this model has 4 heads"),
    ],
)
def test_conflicts_and_ranges_are_usage_errors(gpt2_folder: Path, args: list[str], words: str) -> None:
    line = one_line_error(invoke("run", TEXT, "--model", str(gpt2_folder), *args), ExitStatus.USAGE)
    assert words in line


def test_gpt2_takes_no_pair(gpt2_folder: Path) -> None:
    assert "pair" in one_line_error(invoke("run", TEXT, "--model", str(gpt2_folder), "--pair", "x", "-F", "json"), ExitStatus.USAGE)


def test_missing_and_pickled_models_exit_3(tmp_path: Path) -> None:
    line = one_line_error(invoke("run", TEXT, "--model", "nobody/nothing", "-F", "json"), ExitStatus.TOKENIZER_UNAVAILABLE)
    assert "nobody/nothing" in line
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text('{"model_type": "gpt2"}')
    (pickled / "pytorch_model.bin").write_bytes(b"not really a pickle")
    line = one_line_error(invoke("run", TEXT, "--model", str(pickled), "-F", "json"), ExitStatus.TOKENIZER_UNAVAILABLE)
    assert "pickle" in line and "safetensors" in line


def test_text_longer_than_the_positions_is_4_unless_truncated(gpt2_folder: Path) -> None:
    long_text = " ".join(["cat"] * 100)  # over n_positions 64
    assert "--truncate" in one_line_error(invoke("run", long_text, "--model", str(gpt2_folder), "-F", "json"), ExitStatus.TOO_LARGE)
    result = invoke("run", long_text, "--model", str(gpt2_folder), "-F", "json", "--truncate", "--layer", "0", "--head", "0")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["tokens"]) == 64


def test_a_run_that_cannot_fit_is_refused_before_it_runs(gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget

    monkeypatch.setattr(budget, "available_bytes", lambda: 10_000)  # bytes
    line = one_line_error(invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json"), ExitStatus.TOO_LARGE)
    assert "--layer" in line or "shorter text" in line


def test_batch_errors_name_the_text(gpt2_folder: Path, tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("short one\n" + " ".join(["cat"] * 100) + "\n")
    target = tmp_path / "out.jsonl"
    line = one_line_error(invoke("run", "--file", str(texts), "--lines", "--model", str(gpt2_folder), "-o", str(target)), ExitStatus.TOO_LARGE)
    assert "text 2 of 2:" in line
    assert not target.exists()  # nothing half-written


def test_the_same_run_gives_the_same_bytes(gpt2_folder: Path) -> None:
    first = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json").stdout
    assert first == invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json").stdout


@pytest.mark.parametrize("layers", ["-1", "all"])
def test_hidden_special_tokens_in_a_checkpoints_picture(bert_folder: Path, tmp_path: Path, layers: str) -> None:
    """heatmap keeps only the weights of a checkpoint's layers; hiding tokens must work on those too."""
    target = tmp_path / "hidden.png"
    result = invoke("heatmap", "the cat sat on the mat", "--model", str(bert_folder), "--layer", layers, "--hide-tokens", "special", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_model_is_refused_before_torch_loads(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom attn_cli.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    print(exit.code, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "run", "x", "--model", str(tmp_path / "missing"), "-F", "json"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.stdout.split() == [str(int(ExitStatus.TOKENIZER_UNAVAILABLE)), "False"], out.stderr
    assert "no folder" in out.stderr


def test_max_tokens_is_the_models_positions_unless_given(gpt2_folder: Path) -> None:
    """A trained model's texts may run to its positions (64 for the tiny GPT-2) whatever
    --max-tokens' default is; a --max-tokens given is kept. The control: the same spec with
    --max-tokens given at the default's value refuses the text the positions let through."""
    from attn_cli.pipeline import open_source
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.sources.toy.config import Config

    text = " ".join(["the"] * 30)  # 31 tokens here: over a default of 10, under the 64 positions
    spec = SourceSpec(Config(max_tokens=10), model=str(gpt2_folder))
    assert (spec.token_limit(64), spec.token_limit(None)) == (64, 10)
    n = len(open_source(spec).run(text).tokens)
    assert 10 < n < 64
    given = SourceSpec(Config(max_tokens=10), model=str(gpt2_folder), max_tokens_given=True)
    with pytest.raises(TooLargeError, match=f"{n} tokens, over --max-tokens 10"):
        open_source(given).run(text)
    result = invoking.invoke("run", text, "--model", str(gpt2_folder), "--max-tokens", "10", code=4)  # the CLI marks it given
    assert "over --max-tokens 10" in result.stderr
    result = invoking.invoke("run", "word", "--model", str(gpt2_folder), "--generate", "100", code=4)
    assert "over the model's 64 positions" in result.stderr
