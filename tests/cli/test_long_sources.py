"""An encoder-decoder's long source through the commands (issue 35): with --no-tables, or where the
three stacks' tables do not fit, the encoder runs in blocks (statistics and --query rows of the
source), the decoder's and cross-attention's tables kept whole. Against transformers' encoder
attentions and the same run with every table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import checkpoints
from invoking import invoke
from attn_cli.analysis.stats import attention_stats
from attn_cli.sources.checkpoint import pair_source

SOURCE = " ".join(checkpoints.CORPUS[:6])  # about 250 T5 tokens: past its buckets' largest distance (20)
TARGET = "a short summary"


@pytest.fixture(scope="module")
def t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.build_t5(tmp_path_factory.mktemp("t5-long") / "t5", "gated-gelu")


@pytest.fixture
def no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three stacks' tables never fit: the encoder runs in blocks."""
    monkeypatch.setattr(pair_source, "fits_at_hand", lambda parts, device: False)


def run_json(folder: Path, *args: str) -> tuple[dict[str, Any], str]:
    result = invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "-F", "json", *args)
    return json.loads(result.stdout), result.stderr


def encoder_attentions(folder: Path, source: list[int], decoder: list[int]) -> tuple[torch.Tensor, ...]:
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), output_attentions=True)
    return tuple(a[0].float() for a in out.encoder_attentions)


def test_no_tables_gives_the_encoders_statistics_and_rows_and_the_decoders_tables(t5: Path) -> None:
    data, stderr = run_json(t5, "--no-tables", "--query", "last", "--query", "7")
    whole, _ = run_json(t5)
    n = len(data["tokens"])
    assert n > 200 and data["tables_omitted"].startswith("--no-tables: kept the encoder's statistics and its 2 --query rows")
    assert "note:" not in stderr and data["queries"] == [7, n - 1] and "tables_omitted" not in whole
    ids = [token["id"] for token in data["tokens"]]
    decoder = [token["id"] for token in data["target_tokens"]]
    for got, weights in zip(data["layers"], encoder_attentions(t5, ids, decoder), strict=True):
        assert got["input"] is None and set(got["heads"][0]) == {"head", "stats", "rows"}
        for head, want in zip(got["heads"], attention_stats(weights), strict=True):
            assert head["stats"]["most_attended"] == want.most_attended
            for field in ("top_weight", "distance_mass", "sink_score", "self_mass"):
                assert head["stats"][field] == pytest.approx(getattr(want, field), abs=1e-5), field
            assert [row["query"] for row in head["rows"]] == [7, n - 1]
            for row in head["rows"]:
                assert row["weights"] == pytest.approx(weights[head["head"], row["query"]].tolist(), abs=1e-5)
    for key in ("decoder_layers", "cross_layers"):  # the same bits: the same encoder output in blocks
        assert data[key] == whole[key]


def test_without_room_the_note_says_so_and_the_views_read_the_blocks(t5: Path, no_room: None, tmp_path: Path) -> None:
    data, stderr = run_json(t5)
    assert stderr.count("note: the tables of") == 1 and "more than the memory at hand" in stderr and data["tables_omitted"] in stderr
    table = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--stack", "encoder", "--query", "last", env={"COLUMNS": "100"}).stdout
    assert "Not kept: the tables of" in table and "its strongest keys" in table and "peak distance" in table
    invoke("heatmap", SOURCE, "--model", str(t5), "--target", TARGET, "--stack", "encoder", "-o", str(tmp_path / "enc.png"))
    invoke("heatmap", SOURCE, "--model", str(t5), "--target", TARGET, "-o", str(tmp_path / "cross.png"))  # the tables kept
    assert (tmp_path / "enc.png").stat().st_size > 1000 and (tmp_path / "cross.png").stat().st_size > 1000
    page = invoke("html", SOURCE, "--model", str(t5), "--target", TARGET, "-o", str(tmp_path / "page.html"))
    text = (tmp_path / "page.html").read_text()
    assert page.exit_code == 0 and "Pooled maps" in text and "encoder's self-attention over the source" in text
    heads = invoke("heads", SOURCE, "--model", str(t5), "--target", TARGET, "--stack", "encoder", "-F", "json").stdout
    scores = json.loads(heads)["heads"]
    assert len(scores) == 8 and all(s["norm_special_mass"] is None and s["sink_score"] is not None for s in scores)


def test_generate_reads_the_source_in_blocks(t5: Path, no_room: None, monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    from attn_cli.sources.checkpoint import pair

    original = pair.PairCheckpoint.generate

    def watched(self: Any, source: Any, n: int, blocks: Any = None) -> Any:
        made.append(blocks)
        return original(self, source, n, blocks)

    monkeypatch.setattr(pair.PairCheckpoint, "generate", watched)
    result = invoke("run", SOURCE, "--model", str(t5), "--generate", "3", "-F", "json")
    assert made and made[0] is not None and not made[0].stats and json.loads(result.stdout)["tables_omitted"]


def test_rollout_keeps_the_tables_or_refuses(t5: Path) -> None:
    result = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--no-tables", "--rollout", "--stack", "encoder", code=2)
    assert "--no-tables keeps statistics only" in result.stderr


def test_tables_file_holds_the_encoders_weights(t5: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    path = tmp_path / "enc.safetensors"
    refused = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--tables", str(path), "--layer", "1", code=2)
    assert "add --stack encoder" in refused.stderr and not list(tmp_path.iterdir())
    result = invoke(
        "run", SOURCE, "--model", str(t5), "--target", TARGET, "--tables", str(path), "--layer", "1", "--head", "0-1", "--stack", "encoder",
        "-F", "json", "-o", str(tmp_path / "run.json"),
    )  # fmt: skip
    data = json.loads((tmp_path / "run.json").read_text())
    ids, decoder = [t["id"] for t in data["tokens"]], [t["id"] for t in data["target_tokens"]]
    weights = encoder_attentions(t5, ids, decoder)[1]  # (H, S, S)
    tables = load_file(str(path))
    assert sorted(tables) == ["layer.1.head.0", "layer.1.head.1"] and "--tables: the encoder's tables went to their file" in data["tables_omitted"]
    for head in (0, 1):
        torch.testing.assert_close(torch.from_numpy(tables[f"layer.1.head.{head}"]), weights[head], atol=1e-5, rtol=0)
    assert result.exit_code == 0


def test_the_query_rows_and_the_note_are_the_encoders(t5: Path) -> None:
    """--query names the source's positions in blocks: the cross view's rows are the target's, and its
    tables are kept (no "Not kept"); the encoder's view lists the chosen row."""
    wide = {"COLUMNS": "100"}
    refused = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--no-tables", "--query", "100", "-F", "table", env=wide, code=2)
    assert "--query 100 is out of range" in refused.stderr
    cross = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--no-tables", "-F", "table", env=wide).stdout
    assert "Not kept" not in cross and "cross-attention" in cross
    encoder = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--no-tables", "--query", "100", "--stack", "encoder", env=wide).stdout
    assert "Not kept: --no-tables: kept the encoder's statistics and its 1 --query row," in encoder and "query 100" in encoder


def test_tables_file_layers_and_heads_are_the_encoders(t5: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    result = invoke("run", SOURCE, "--model", str(t5), "--target", TARGET, "--tables", str(path), "--stack", "encoder", "--head", "0", code=2)
    assert "the encoder has 2 layers of 4 heads, and layer 2 head 0 is chosen" in result.stderr and not path.exists()
