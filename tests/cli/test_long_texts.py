"""`run` at any length: --query's rows (JSON `rows`, the table view's strongest keys), and a run
whose tables do not fit the memory at hand, which keeps each head's statistics and the chosen
rows computed in blocks instead of refusing (`tables_omitted`). Against the same run with its
tables (statistics, rows) and transformers' weights; the memory at hand is made small by
monkeypatch, so the texts stay short."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.analysis.stats import attention_stats
from attn_cli.sources.checkpoint import source as checkpoint_source

TEXT = checkpoints.LONG  # past the window of the Mistral checkpoint


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.one_per_type(tmp_path_factory)("mistral")


@pytest.fixture
def no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """No table fits: every run of `run` computes in blocks."""
    monkeypatch.setattr(checkpoint_source, "fits_at_hand", lambda parts, device: False)


def run_json(folder: Path, *args: str) -> tuple[dict[str, Any], str]:
    result = invoke("run", TEXT, "--model", str(folder), "-F", "json", *args)
    return json.loads(result.stdout), result.stderr


def test_query_rows_are_the_weights_rows(mistral: Path) -> None:
    data, _ = run_json(mistral, "--query", "last:2", "--query", "0:2", "--query", "7")
    n = len(data["tokens"])
    assert data["queries"] == [0, 1, 7, n - 2, n - 1] and "tables_omitted" not in data
    for layer in data["layers"]:
        for head in layer["heads"]:
            assert [row["query"] for row in head["rows"]] == data["queries"]
            assert [row["weights"] for row in head["rows"]] == [head["weights"][q] for q in data["queries"]]


def test_without_room_the_statistics_and_rows_come_from_blocks(mistral: Path, no_room: None, monkeypatch: pytest.MonkeyPatch) -> None:
    data, stderr = run_json(mistral, "--query", "last", "--query", "3")
    assert stderr.count("note: the T x T tables of") == 1 and "kept each head's statistics and the 2 --query rows" in stderr
    assert data["tables_omitted"] in stderr and data["queries"] == [3, len(data["tokens"]) - 1]
    monkeypatch.undo()
    whole, _ = run_json(mistral, "--query", "last", "--query", "3")
    ids = [token["id"] for token in whole["tokens"]]
    ref = checkpoints.reference(mistral, ids)
    for got, want, weights in zip(data["layers"], whole["layers"], ref.weights):
        assert got["input"] is None and set(got["heads"][0]) == {"head", "stats", "rows"}
        mask = torch.tensor(want["heads"][0]["weights"]) == 0  # the causal window: no key outside it has weight
        reference = attention_stats(weights.float(), mask=mask)
        for head, table_head, stats in zip(got["heads"], want["heads"], reference):
            assert head["stats"]["most_attended"] == table_head["stats"]["most_attended"] == stats.most_attended
            for field in ("top_weight", "distance_mass"):
                assert head["stats"][field] == pytest.approx(getattr(stats, field), abs=1e-5)
            assert head["stats"]["entropy_bits"] == pytest.approx(stats.entropy_bits, abs=5e-5)
            for field in ("self_mass", "previous_mass", "first_mass", "sink_score"):
                assert head["stats"][field] == pytest.approx(table_head["stats"][field], abs=1e-6)
            for row, table_row in zip(head["rows"], table_head["rows"]):
                assert row["weights"] == pytest.approx(table_row["weights"], abs=1e-6)


@pytest.mark.parametrize(
    ("room", "args", "advice"),
    [
        (None, ("--query", "3"), "; write the chosen heads' tables to disk with run --tables FILE.safetensors"),
        (None, (), "; choose rows to keep whole with --query or write the chosen heads' tables to disk with run --tables FILE.safetensors"),
        (None, ("--layer", "0"), "; choose rows to keep whole with --query or write"),
        (2 / 3, (), "; keep at most 2 layers (--layer) for the tables, choose rows to keep whole with --query, or write"),
        (1 / 3, ("--query", "3"), "; keep at most 1 layer (--layer) for the tables or write"),
    ],
)
def test_the_note_names_only_what_would_get_the_tables(
    mistral: Path, monkeypatch: pytest.MonkeyPatch, room: float | None, args: tuple[str, ...], advice: str
) -> None:
    """Fewer layers only where that many layers' tables would fit, and never at one layer (issue 35: the
    note said --layer to a run of one layer); --query only where no row was chosen; --tables always."""
    whole = {}

    def fits(parts: dict[str, int], device: str) -> bool:  # room: the share of the 3 layers' tables that fits
        whole.setdefault("tables", parts["tables"])
        return room is not None and parts["tables"] <= whole["tables"] * room

    monkeypatch.setattr(checkpoint_source, "fits_at_hand", fits)
    data, stderr = run_json(mistral, *args)
    assert advice in data["tables_omitted"] and data["tables_omitted"] in stderr
    assert ("(--layer)" in data["tables_omitted"]) == (room is not None)  # the control: one layer never gets it


@pytest.mark.parametrize(("args", "hint"), [((), "keep fewer layers with --layer"), (("--layer", "0"), "choose fewer --query rows")])
def test_a_refusal_of_the_rows_names_a_way_the_run_can_take(
    mistral: Path, no_room: None, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], hint: str
) -> None:
    """Blocks whose chosen rows do not fit either: exit 4, and --layer only where more than one layer is kept."""
    from attn_cli.runtime import budget

    rows = run_json(mistral, "--query", "0:200", *args)[0]  # every row of the text: the rows are the run's largest part
    monkeypatch.setattr(budget, "available_bytes", lambda: 100_000)
    said = invoke("run", TEXT, "--model", str(mistral), "-F", "json", "--query", "0:200", *args, code=4).stderr
    assert len(rows["queries"]) > 50 and f"mostly for the statistics and {len(rows['queries'])} chosen rows" in said
    assert said.endswith(f"; {hint}\n") and said.count("\n") == 1


def test_without_room_the_table_view_lists_the_strongest_keys(mistral: Path, no_room: None) -> None:
    out = invoke("run", TEXT, "--model", str(mistral), "--query", "last", "--head", "0-1", env={"COLUMNS": "100"}).stdout
    assert "Not kept: the T x T tables of" in out and "its strongest keys" in out and "peak distance" in out
    assert "query 0 " not in out  # only the chosen row


def test_a_table_view_of_several_rows(mistral: Path) -> None:
    out = invoke("run", TEXT, "--model", str(mistral), "--query", "0:3", env={"COLUMNS": "100"}).stdout
    assert [f"query {q} " in out for q in range(4)] == [True, True, True, False]


@pytest.mark.parametrize(
    ("value", "message"),
    [("last:0", "last:N takes the last N tokens"), ("9999:", "holds no position"), ("5:2", "holds no position"), ("zebra", "is not a token")],
)
def test_bad_queries(mistral: Path, value: str, message: str) -> None:
    result = invoke("run", TEXT, "--model", str(mistral), "--query", value, "-F", "json", code=2)
    assert message in result.stderr and "Traceback" not in result.stderr and result.stdout == ""


def test_heads_without_room_score_from_the_statistics(mistral: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`heads` where the tables do not fit: every score but the norms' equal to the run with tables."""
    args = ("heads", TEXT, "--model", str(mistral), "-F", "json", "--no-probe")
    whole = json.loads(invoke(*args).stdout)["heads"]
    monkeypatch.setattr(checkpoint_source, "fits_at_hand", lambda parts, device: False)
    result = invoke(*args)
    assert "note: the T x T tables of" in result.stderr
    blocked = json.loads(result.stdout)["heads"]
    assert [h["role"] for h in blocked] == [h["role"] for h in whole]
    for got, want in zip(blocked, whole):
        assert got["norm_special_mass"] is None
        for key in ("self_mass", "previous_mass", "first_mass", "mean_entropy_bits", "special_mass", "sink_score"):
            assert got[key] == pytest.approx(want[key], abs=1e-6), key
        assert got["distance_mass"] == pytest.approx(want["distance_mass"], abs=1e-6)


def test_show_scores_adds_each_rows_raw_scores(mistral: Path, tmp_path: Path) -> None:
    """--query with --show scores: each row's raw scores beside its weights, in blocks equal to the
    scores table of the run that keeps its tables; CSV's row_scores; the table view's score column."""
    whole, stderr = run_json(mistral, "--query", "last", "--query", "2", "--show", "scores")
    assert "only change" not in stderr  # --show scores shapes the JSON's rows: no note that says otherwise
    blocked, _ = run_json(mistral, "--no-tables", "--query", "last", "--query", "2", "--show", "scores")
    plain, _ = run_json(mistral, "--no-tables", "--query", "last")
    assert set(plain["layers"][0]["heads"][0]["rows"][0]) == {"query", "weights"}  # not asked: no scores
    for got, want in zip(blocked["layers"], whole["layers"]):
        for head, table_head in zip(got["heads"], want["heads"]):
            for row, table_row in zip(head["rows"], table_head["rows"]):
                assert table_row["scores"] == table_head["scores"][row["query"]]
                assert row["scores"] == pytest.approx(table_row["scores"], rel=1e-5, abs=1e-5)
            control = head["rows"][0]["scores"]  # row 2's against the last row's: the rows differ
            assert control != pytest.approx(table_head["scores"][blocked["queries"][-1]], rel=1e-5, abs=1e-5)
    csv = invoke("run", TEXT, "--model", str(mistral), "--no-tables", "--query", "2", "--show", "scores", "-F", "csv").stdout
    assert ",row_scores," in csv and ",rows," in csv
    out = invoke("run", TEXT, "--model", str(mistral), "--no-tables", "--query", "2", "--show", "scores", env={"COLUMNS": "120"}).stdout
    assert " score " in out and "its strongest keys" in out


def test_no_tables_asks_for_the_blocks(mistral: Path) -> None:
    data, stderr = run_json(mistral, "--no-tables", "--query", "last")
    assert data["tables_omitted"].startswith("--no-tables") and "note:" not in stderr  # asked for: no note
    assert set(data["layers"][0]["heads"][0]) == {"head", "stats", "rows"}
    for args, message in [
        (("--no-tables", "--rollout"), "--no-tables keeps statistics only, and --rollout reads the tables"),
        (("--no-tables", "--show", "norms"), "and --norms reads the tables"),
    ]:
        result = invoke("run", TEXT, "--model", str(mistral), *args, code=2)
        assert message in result.stderr
    assert "the toy model keeps its tables" in invoke("run", "a b c", "--no-tables", code=2).stderr


def test_tables_file_holds_transformers_weights(mistral: Path, tmp_path: Path) -> None:
    """--tables FILE.safetensors: each chosen layer's and head's T x T weights, equal to transformers'."""
    import numpy as np
    from safetensors.torch import load_file

    data, stderr = run_json(mistral, "--layer", "0-1", "--head", "1,3", "--tables", str(tmp_path / "t.safetensors"))
    assert f"wrote {tmp_path / 't.safetensors'}" in stderr and "note:" not in stderr
    assert data["tables_omitted"].startswith("--tables")
    tables = load_file(str(tmp_path / "t.safetensors"))
    assert list(tables) == ["layer.0.head.1", "layer.0.head.3", "layer.1.head.1", "layer.1.head.3"]
    ref = checkpoints.reference(mistral, [t["id"] for t in data["tokens"]])
    for name, table in tables.items():
        layer, head = int(name.split(".")[1]), int(name.split(".")[3])
        torch.testing.assert_close(table, ref.weights[layer][head].float(), atol=1e-5, rtol=0)
    run_json(mistral, "--layer", "1", "--head", "3", "--tables", str(tmp_path / "t.npy"), "--table-dtype", "float16")
    half = np.load(tmp_path / "t.npy", mmap_mode="r")
    assert half.dtype == np.float16 and half.shape == tables["layer.1.head.3"].shape
    torch.testing.assert_close(torch.from_numpy(np.array(half)).float(), tables["layer.1.head.3"], atol=1e-3, rtol=0)


def test_tables_file_refusals_leave_nothing(mistral: Path, tmp_path: Path) -> None:
    for args, message in [
        (("--tables", str(tmp_path / "t.npy")), "a .npy holds one table"),
        (("--tables", str(tmp_path / "t.bin")), "name a .npy file"),
        (("--tables", str(tmp_path / "t.safetensors"), "--query", "zebra"), "is not a token"),
        (("--tables", str(tmp_path / "t.safetensors"), "--rollout"), "it needs no --rollout or --norms"),
    ]:
        result = invoke("run", TEXT, "--model", str(mistral), "-F", "json", *args, code=2)
        assert message in result.stderr
    assert list(tmp_path.iterdir()) == []
