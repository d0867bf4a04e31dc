"""`attn-cli compare`: total variation per head recomputed from transformers' attentions,
on a minimal pair through one checkpoint and on one text through two; the refusals."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.pipeline import open_source

A = "the quick brown fox jumps over the lazy dog"
B = "the quick brown cat jumps over the lazy dog"


@pytest.fixture(scope="module")
def other_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.built(tmp_path_factory, "compare-gpt2-other", checkpoints.build_gpt2, seed=7)


@pytest.fixture(scope="module")
def two_head_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.built(tmp_path_factory, "compare-gpt2-2heads", checkpoints.build_gpt2, n_head=2)


def attentions(folder: Path, text: str) -> list[torch.Tensor]:
    from attn_cli.sources.checkpoint import open_checkpoint

    tokens = open_checkpoint(str(folder)).tokenizer.encode(text)
    return checkpoints.reference(folder, tokens.ids).weights


def expected_tv(a: list[torch.Tensor], b: list[torch.Tensor]) -> dict[tuple[int, int], tuple[float, float]]:
    """(layer, head) -> (mean, max) over query rows of 0.5 * sum_j |B - A|, from transformers' attentions."""
    made = {}
    for layer, (x, y) in enumerate(zip(a, b)):
        tv = 0.5 * (y.double() - x.double()).abs().sum(-1)  # (H, T)
        for h in range(tv.shape[0]):
            made[(layer, h)] = (tv[h].mean().item(), tv[h].max().item())
    return made


def assert_tv(heads: list[dict[str, Any]], expected: dict[tuple[int, int], tuple[float, float]]) -> None:
    assert [(h["layer"], h["head"]) for h in heads] == sorted(expected)  # model order
    for h in heads:
        mean, most = expected[(h["layer"], h["head"])]
        assert h["mean_tv"] == pytest.approx(mean, abs=1e-6) and h["max_tv"] == pytest.approx(most, abs=1e-6), (h["layer"], h["head"])


def test_a_minimal_pair_equals_transformers(gpt2_folder: Path) -> None:
    data = json.loads(invoke("compare", A, B, "--model", str(gpt2_folder), "-F", "json").stdout)
    ref_a, ref_b = attentions(gpt2_folder, A), attentions(gpt2_folder, B)
    assert_tv(data["heads"], expected_tv(ref_a, ref_b))
    assert data["a"]["text"] == A and data["b"]["text"] == B and data["a"]["model"]["family"] == "gpt2"
    assert [t["label"] for t in data["a"]["tokens"]] != [t["label"] for t in data["b"]["tokens"]]
    for layer in data["layers"]:
        for head in layer["heads"]:
            difference = ref_b[layer["layer"]][head["head"]] - ref_a[layer["layer"]][head["head"]]
            torch.testing.assert_close(torch.tensor(head["difference"]), difference, atol=1e-6, rtol=0)
    # the negative control: the same heads one layer off would not match
    shifted = expected_tv(ref_a[1:] + ref_a[:1], ref_b[1:] + ref_b[:1])
    with pytest.raises(AssertionError):
        assert_tv(data["heads"], shifted)
    assert all(h["mean_tv"] == 0 for h in json.loads(invoke("compare", A, A, "--model", str(gpt2_folder), "-F", "json").stdout)["heads"])


def test_one_text_through_two_checkpoints(gpt2_folder: Path, other_gpt2: Path) -> None:
    data = json.loads(invoke("compare", A, "--model", str(gpt2_folder), "--other-model", str(other_gpt2), "-F", "json").stdout)
    assert_tv(data["heads"], expected_tv(attentions(gpt2_folder, A), attentions(other_gpt2, A)))
    assert data["a"]["model"]["source"] == str(gpt2_folder) and data["b"]["model"]["source"] == str(other_gpt2)


@pytest.mark.parametrize(
    "args, said",
    [
        (("compare", A, "the cat"), "have 11 and 3 tokens; compare needs the same number"),
        (("compare", A), "compare needs two texts"),
        (("compare", A, B, "--other-model", "x"), "not both"),
    ],
)
def test_refusals(args: tuple[str, ...], said: str, gpt2_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = invoke(*args, "--model", str(gpt2_folder), "-o", str(out), code=2)
    assert said in result.stderr and result.stderr.count("\n") == 1 and not out.exists()
    if "tokens" in said:  # both tokenizations shown
        assert "A: t he ␣quick" in result.stderr and "B: t he ␣cat" in result.stderr


def test_models_with_other_heads_are_refused(gpt2_folder: Path, two_head_gpt2: Path) -> None:
    result = invoke("compare", A, "--model", str(gpt2_folder), "--other-model", str(two_head_gpt2), code=2)
    assert "has 4 heads" in result.stderr and "2" in result.stderr
    result = invoke("compare", A, "--other-model", str(two_head_gpt2), "-t", "words", code=2)
    assert "give the first with --model" in result.stderr


def test_the_table_ranks_heads_and_csv_has_every_number(gpt2_folder: Path) -> None:
    table = invoke("compare", A, B, "--model", str(gpt2_folder), "-F", "table", "--top", "3").stdout
    data = json.loads(invoke("compare", A, B, "--model", str(gpt2_folder), "-F", "json").stdout)
    best = max(data["heads"], key=lambda h: h["mean_tv"])
    assert "Heads that change most (of 12)" in table and "differ at position 4 (␣fox→␣cat)" in table
    first = next(line for line in table.splitlines() if line.strip().startswith("1 "))
    assert first.split()[1:4] == [str(best["layer"]), str(best["head"]), f"{best['mean_tv']:.3f}"]
    rows = list(csv.DictReader(io.StringIO(invoke("compare", A, B, "--model", str(gpt2_folder), "-F", "csv").stdout)))
    tables = {r["table"] for r in rows}
    assert tables == {"token_a", "token_b", "rank", "mean_tv", "max_tv", "tv", "difference"}
    assert sum(r["table"] == "difference" for r in rows) == 12 * 11 * 11
    mean = {(int(r["layer"]), int(r["head"])): float(r["value"]) for r in rows if r["table"] == "mean_tv"}
    assert mean[(best["layer"], best["head"])] == best["mean_tv"]


def table_heads(table: str) -> list[tuple[int, int, int]]:
    """(rank, layer, head) of each row of compare's table."""
    rows = [line.split() for line in table.splitlines()]
    return [(int(r[0]), int(r[1]), int(r[2])) for r in rows if len(r) == 6 and r[0].isdigit()]


def assert_lists(data: dict[str, Any], rows: list[dict[str, str]], table: list[tuple[int, int, int]]) -> None:
    """The JSON's and the CSV's heads are the table's, with its ranks, and nothing more."""
    ranked = sorted(table, key=lambda r: (r[1], r[2]))  # model order
    assert [(h["rank"], h["layer"], h["head"]) for h in data["heads"]] == ranked
    assert [(layer["layer"], h["head"]) for layer in data["layers"] for h in layer["heads"]] == [(r[1], r[2]) for r in ranked]
    assert sorted((int(r["value"]), int(r["layer"]), int(r["head"])) for r in rows if r["table"] == "rank") == sorted(table)
    for kind, per_head in (("mean_tv", 1), ("tv", 11), ("difference", 11 * 11)):
        assert sum(r["table"] == kind for r in rows) == per_head * len(table), kind


def test_top_lists_the_tables_heads_in_json_and_csv(gpt2_folder: Path) -> None:
    args = ("compare", A, B, "--model", str(gpt2_folder))
    table = table_heads(invoke(*args, "-F", "table", "--top", "3").stdout)
    assert [r[0] for r in table] == [1, 2, 3]
    data = json.loads(invoke(*args, "-F", "json", "--top", "3").stdout)
    rows = list(csv.DictReader(io.StringIO(invoke(*args, "-F", "csv", "--top", "3").stdout)))
    assert data["top"] == 3
    assert_lists(data, rows, table)
    # without --top the table shows 10 and the JSON and CSV every head, ranked as the table: the
    # control, where the same assertion finds more heads than the table of three
    every = json.loads(invoke(*args, "-F", "json").stdout)
    every_rows = list(csv.DictReader(io.StringIO(invoke(*args, "-F", "csv").stdout)))
    assert every["top"] is None and len(every["heads"]) == 12 and len(table_heads(invoke(*args, "-F", "table").stdout)) == 10
    assert sorted((h["rank"], h["layer"], h["head"]) for h in every["heads"])[:3] == table
    with pytest.raises(AssertionError):
        assert_lists(every, every_rows, table)


def test_the_document_names_itself_apart_from_runs(gpt2_folder: Path, tmp_path: Path) -> None:
    data = json.loads(invoke("compare", A, B, "--model", str(gpt2_folder), "-F", "json").stdout)
    trace = json.loads(invoke("run", A, "--model", str(gpt2_folder), "-F", "json").stdout)
    assert (data["schema"], data["schema_version"]) == ("compare", 1) and list(data)[:2] == ["schema", "schema_version"]
    assert "schema" not in trace and trace["schema_version"] == 2
    saved = tmp_path / "pair.json"
    saved.write_text(json.dumps(data))
    result = invoke("heatmap", "--from", str(saved), "-o", str(tmp_path / "x.png"), code=2)
    assert "a 'compare' document, not a trace" in result.stderr and result.stderr.count("\n") == 1
    # the control: without its name, compare's document reads as an old trace of schema 1
    del data["schema"]
    saved.write_text(json.dumps(data))
    result = invoke("heatmap", "--from", str(saved), "-o", str(tmp_path / "x.png"), code=2)
    assert "compare" not in result.stderr and "schema_version 1" in result.stderr


def test_the_picture_draws_a_b_and_the_difference(gpt2_folder: Path, tmp_path: Path) -> None:
    import numpy as np

    from attn_cli.analysis.compare import compare
    from attn_cli.records.selection import Selection
    from attn_cli.render.picture.compare import compare_figure
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.sources.toy.config import Config

    out = tmp_path / "pair.png"
    assert invoke("compare", A, B, "--model", str(gpt2_folder), "-o", str(out)).stdout.strip() == str(out)
    assert out.read_bytes()[:4] == b"\x89PNG"
    source = open_source(SourceSpec(Config(), model=str(gpt2_folder)))
    selection = Selection((0, 1, 2), (0, 1, 2, 3), keep="weights")
    comparison = compare(source.run(A, selection), source.run(B, selection))
    fig = compare_figure(comparison, 2, 1)
    images = {im.get_label(): np.ma.getdata(im.get_array()) for ax in fig.axes for im in ax.images}
    ref_a, ref_b = attentions(gpt2_folder, A)[2][1], attentions(gpt2_folder, B)[2][1]
    assert np.allclose(images["A layer 2 head 1"], ref_a.numpy(), atol=1e-6)
    assert np.allclose(images["B − A layer 2 head 1"], (ref_b - ref_a).numpy(), atol=1e-6)
    result = invoke("compare", A, B, "--model", str(gpt2_folder), "--layer", "0-1", "-o", str(tmp_path / "x.png"), code=2)
    assert "one layer and one head" in result.stderr


def test_the_toy_compares_two_texts_and_notes_identical_ids() -> None:
    result = invoke("compare", "the cat sat", "the dog sat", "-t", "words", "--heads", "2", "-F", "json")
    assert "same token ids" in result.stderr and "'words' tokenizer" in result.stderr
    assert all(h["mean_tv"] == 0 for h in json.loads(result.stdout)["heads"])
