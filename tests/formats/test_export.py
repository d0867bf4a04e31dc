"""JSON and CSV: the documented keys and shapes, checked against an independent attention."""

from __future__ import annotations

from attn_cli.sources.attend import causal_mask

import csv
import io
import json
import math
import re
from collections import defaultdict

import pytest
import torch

from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource, toy_info
from attn_cli.records.trace import Trace
from attn_cli.formats.rows import CSV_COLUMNS, csv_rows
from attn_cli.formats.document import SCHEMA_VERSION, run_dict
from attn_cli.formats.numbers import JsonTable
from attn_cli.formats.export import to_csv, to_json
from attn_cli.analysis.stats import attention_stats

ISSUE_KEYS = {"schema_version", "text", "tokenizer", "tokens", "model", "layers"}
LAYER_KEYS = {"layer", "input", "heads", "concat", "output"}
ISSUE_CONFIG_KEYS = {
    "seed", "d_model", "heads", "d_k", "d_v", "causal", "scale", "temperature", "init", "projections", "qkv_bias", "out_proj", "dropout",
}
ISSUE_HEAD_KEYS = {"head", "queries", "keys", "values", "scores", "scaled_scores", "weights", "context"}


def run_of(text: str = "I saw a saw", **options) -> Trace:
    return ToySource(Config(tokenizer="words", **options)).run(text)


def shape(matrix: list) -> tuple[int, ...]:
    return (len(matrix), len(matrix[0])) if matrix and isinstance(matrix[0], list) else (len(matrix),)


def test_json_has_the_issue_keys_and_shapes() -> None:
    data = json.loads(to_json(run_of(heads=2, d_k=3, d_v=5, causal=True)))
    assert ISSUE_KEYS <= set(data) and data["schema_version"] == SCHEMA_VERSION == 2
    assert [set(layer) for layer in data["layers"]] == [LAYER_KEYS]
    assert data["model"]["family"] == "toy" and data["model"]["layers"] == 1 and data["model"]["heads"] == 2
    assert ISSUE_CONFIG_KEYS <= set(data["model"]["config"])
    assert data["text"] == "I saw a saw" and data["tokenizer"] == "words"
    assert data["tokens"] == [
        {"position": 0, "id": 0, "text": "I", "label": "I", "special": False, "hidden": False, "partial": False},
        {"position": 1, "id": 2, "text": "saw", "label": "saw#1", "special": False, "hidden": False, "partial": False},
        {"position": 2, "id": 1, "text": "a", "label": "a", "special": False, "hidden": False, "partial": False},
        {"position": 3, "id": 2, "text": "saw", "label": "saw#3", "special": False, "hidden": False, "partial": False},
    ]
    c = data["model"]["config"]
    assert (c["d_model"], c["heads"], c["d_k"], c["d_v"], c["causal"]) == (16, 2, 3, 5, True)
    assert c["scale_factor"] == pytest.approx(1 / math.sqrt(3))
    assert shape(data["layers"][0]["input"]) == (4, 16)
    assert [h["head"] for h in data["layers"][0]["heads"]] == [0, 1]
    for head in data["layers"][0]["heads"]:
        assert ISSUE_HEAD_KEYS <= set(head)
        assert shape(head["queries"]) == shape(head["keys"]) == (4, 3)
        assert shape(head["values"]) == shape(head["context"]) == (4, 5)
        assert shape(head["scores"]) == shape(head["scaled_scores"]) == shape(head["weights"]) == (4, 4)
        assert set(head["stats"]) == {"most_attended", "top_weight", "entropy_bits", "effective_tokens", "self_mass", "previous_mass", "first_mass", "distance_mass", "sink_score"}
    assert shape(data["layers"][0]["output"]) == shape(data["layers"][0]["concat"]) == (4, 10)


def test_json_numbers_match_an_independent_attention() -> None:
    """Rebuild scores, weights and context from the JSON's own Q, K, V with torch's SDPA."""
    data = json.loads(to_json(run_of("The cat sat on the mat", heads=2, causal=True)))
    d_k = data["model"]["config"]["d_k"]
    for head in data["layers"][0]["heads"]:
        q, k, v = (torch.tensor(head[name], dtype=torch.float64) for name in ("queries", "keys", "values"))
        scores = q @ k.T  # (T, T)
        torch.testing.assert_close(torch.tensor(head["scores"], dtype=torch.float64), scores, rtol=1e-5, atol=1e-5)
        masked = torch.ones(6, 6, dtype=torch.bool).triu(1)
        for i in range(6):
            for j in range(6):
                if j > i:
                    assert head["scaled_scores"][i][j] is None
                else:
                    assert head["scaled_scores"][i][j] == pytest.approx(head["scores"][i][j] / math.sqrt(d_k), rel=1e-5, abs=1e-6)
        expected = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]  # (T, Dv)
        torch.testing.assert_close(torch.tensor(head["context"], dtype=torch.float64), expected, rtol=1e-5, atol=1e-5)
        weights = torch.tensor(head["weights"], dtype=torch.float64)
        assert (weights[masked] == 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(6, dtype=torch.float64), rtol=1e-6, atol=1e-6)
    concat = [sum((h["context"][i] for h in data["layers"][0]["heads"]), []) for i in range(6)]
    assert data["layers"][0]["output"] == concat  # no --out-proj: the output is the heads side by side


def test_json_floats_give_back_the_float32_values_exactly() -> None:
    run = run_of()
    data = json.loads(to_json(run))
    weights = torch.tensor(data["layers"][0]["heads"][0]["weights"], dtype=torch.float32)
    assert torch.equal(weights, run.layers[0].weights[0])  # bit for bit once read as float32
    assert torch.equal(torch.tensor(data["layers"][0]["input"], dtype=torch.float32), run.layers[0].x)


def test_json_table_writes_every_float32_in_nine_digits_that_give_it_back() -> None:
    bits = torch.randint(-(2**31), 2**31 - 1, (4096,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    values = bits.view(torch.float32)
    special = torch.tensor([0.0, -0.0, 1.0, -2.0, 0.1, 1e-45, -1e-45, 1.17549435e-38, 3.4028235e38, 16777217.0, 123456789.0])
    values = torch.cat([values[torch.isfinite(values)], special]).reshape(-1, 1)  # (N, 1): a table of rows
    text = JsonTable(values).json()
    assert torch.equal(torch.tensor(json.loads(text), dtype=torch.float32).view(torch.int32), values.view(torch.int32))  # -0.0 too
    assert text == json.dumps([[float(format(v, ".9"))] for v in values.flatten().tolist()])  # as json.dumps writes them
    digits = [re.sub(r"e.*|[-.]", "", n).strip("0") for n in re.findall(r"[-0-9.e+]+", text)]
    assert max(len(d) for d in digits) == 9  # significant digits
    assert all(isinstance(v, float) for row in json.loads(text) for v in row)  # "1.0", never "1"
    wide = torch.tensor([[0.1, 1 / 3]], dtype=torch.float64)  # a float64 table keeps every digit
    assert json.loads(JsonTable(wide).json()) == wide.tolist()
    big = torch.randn(3, 70, 70)  # over the inline size: written a row at a time, the same text
    assert json.loads(JsonTable(big).json()) == json.loads(f"[{', '.join(JsonTable(m).json() for m in big)}]")
    assert torch.equal(torch.tensor(json.loads(JsonTable(big).json())), big)


def test_json_stats_are_the_stats_module() -> None:
    run = run_of(heads=2, causal=True)
    data = run_dict(run)
    for head, stats in zip(data["layers"][0]["heads"], attention_stats(run.layers[0].weights, mask=causal_mask(run.layers[0].weights.shape[-1]))):
        want = stats.as_dict()
        top = torch.tensor(head["stats"].pop("top_weight"), dtype=torch.float32)
        assert torch.equal(top, torch.tensor(want.pop("top_weight"), dtype=torch.float32))  # float32 weights, 9 digits
        assert head["stats"] == want
    one = run_dict(run_of("alone"))
    assert one["layers"][0]["heads"][0]["stats"]["previous_mass"] is None and one["layers"][0]["heads"][0]["stats"]["first_mass"] is None


def test_json_refuses_nan() -> None:
    run = run_of()
    run.layers[0].weights[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        to_json(run)


def test_dropout_adds_dropped_weights() -> None:
    data = run_dict(run_of(dropout=0.5))
    head = data["layers"][0]["heads"][0]
    assert shape(head["dropped_weights"]) == (4, 4)
    for w, d in zip(sum(head["weights"], []), sum(head["dropped_weights"], [])):
        assert d == 0.0 or d == pytest.approx(2 * w)  # kept weights are scaled by 1 / (1 - p)


def test_json_is_byte_identical_on_rerun() -> None:
    assert to_json(run_of(heads=2, causal=True)) == to_json(run_of(heads=2, causal=True))
    assert to_csv(run_of(heads=2)) == to_csv(run_of(heads=2))


# -- CSV -------------------------------------------------------------------------------


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_is_tidy_and_loads_with_the_csv_module() -> None:
    run = run_of(heads=2, causal=True)
    text = to_csv(run)
    assert text.splitlines()[0] == ",".join(CSV_COLUMNS)
    rows = read_csv(text)
    for row in rows:
        float(row["value"])  # every value is a number ("-inf" included)
        assert row["text_index"] == "0"
    counts = defaultdict(int)
    for row in rows:
        counts[(row["table"], row["head"])] += 1
    T, D, dk = 4, 16, 8
    assert counts[("input", "")] == T * D and counts[("output", "")] == T * 2 * dk
    assert {row["layer"] for row in rows if row["table"] != "token_id"} == {"0"}
    for h in ("0", "1"):
        for table in ("queries", "keys", "values", "context"):
            assert counts[(table, h)] == T * dk
        for table in ("scores", "scaled_scores", "weights"):
            assert counts[(table, h)] == T * T
        for table in ("most_attended", "entropy_bits", "effective_tokens"):
            assert counts[(table, h)] == T
        for table in ("self_mass", "previous_mass", "first_mass"):
            assert counts[(table, h)] == 1
    assert len(rows) == len(csv_rows(run)) == sum(counts.values())
    assert ("concat", "") not in counts  # without --out-proj it would repeat the output


@pytest.mark.integration
def test_pieces_of_a_character_carry_their_bytes_in_json_and_csv(rank_dir) -> None:
    text = "猫 sat \\xe7"  # a real character split over tokens, then text that reads like one of its pieces
    run = ToySource(Config(tokenizer="gpt2")).run(text)
    tokens = json.loads(to_json(run))["tokens"]
    pieces = [t for t in tokens if t["partial"]]
    assert pieces and all(t["text"].startswith("\\x") and bytes.fromhex(t["bytes"]) for t in pieces)
    assert all("bytes" not in t for t in tokens if not t["partial"])
    assert [t["partial"] for t in tokens] == [True] * 3 + [False] * (len(tokens) - 3)  # the literal \xe7 is text
    raw = b"".join(bytes.fromhex(t["bytes"]) if t["partial"] else t["text"].encode() for t in tokens)
    assert raw == text.encode()
    rows = [row for row in read_csv(to_csv(run)) if row["table"] == "token_bytes"]
    by_token: dict[int, bytes] = defaultdict(bytes)
    for row in rows:
        assert row["col"] == str(len(by_token[int(row["row"])]))  # the byte's place in its token
        by_token[int(row["row"])] += bytes([int(row["value"])])
    assert by_token == {t["position"]: bytes.fromhex(t["bytes"]) for t in pieces}


def test_csv_has_concat_when_the_output_is_projected() -> None:
    run = run_of(heads=2, out_proj=True)
    rows = read_csv(to_csv(run))
    concat = {(int(r["row"]), int(r["col"])): float(r["value"]) for r in rows if r["table"] == "concat"}
    rebuilt = [[concat[(i, j)] for j in range(run.layers[0].concat.shape[1])] for i in range(run.layers[0].concat.shape[0])]
    assert len(concat) == run.layers[0].concat.numel()
    assert torch.equal(torch.tensor(rebuilt, dtype=torch.float32), run.layers[0].concat)


def test_csv_numbers_equal_the_json_numbers() -> None:
    run = run_of("The cat sat on the mat", heads=2, causal=True)
    data = json.loads(to_json(run))
    rows = read_csv(to_csv(run))
    seen = 0
    for row in rows:
        if row["table"] in ("weights", "scores", "scaled_scores", "queries", "context"):
            h, i, j = int(row["head"]), int(row["row"]), int(row["col"])
            expected = data["layers"][0]["heads"][h][row["table"]][i][j]
            assert float(row["value"]) == (-math.inf if expected is None else expected)
            if row["table"] in ("weights", "scaled_scores"):
                assert (row["row_token"], row["col_token"]) == (data["tokens"][i]["label"], data["tokens"][j]["label"])
            seen += 1
        elif row["table"] == "entropy_bits":
            assert float(row["value"]) == data["layers"][0]["heads"][int(row["head"])]["stats"]["entropy_bits"][int(row["row"])]
        elif row["table"] == "output":
            assert float(row["value"]) == data["layers"][0]["output"][int(row["row"])][int(row["col"])]
    assert seen == 2 * (3 * 36 + 2 * 6 * 8)  # per head: three T x T tables, queries and context (T x 8)
    masked = [r for r in rows if r["table"] == "scaled_scores" and int(r["col"]) > int(r["row"])]
    assert masked and all(r["value"] == "-inf" for r in masked)


def test_csv_rebuilds_the_matrices() -> None:
    """What a pandas pivot would do, with the csv module: weights[head][row][col]."""
    run = run_of(heads=2)
    matrices: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for row in read_csv(to_csv(run)):
        if row["table"] == "weights":
            matrices[row["head"]][(int(row["row"]), int(row["col"]))] = float(row["value"])
    for h in (0, 1):
        rebuilt = [[matrices[str(h)][(i, j)] for j in range(4)] for i in range(4)]
        assert torch.equal(torch.tensor(rebuilt, dtype=torch.float32), run.layers[0].weights[h])


def test_csv_tokens_with_commas_and_quotes_survive() -> None:
    from attn_cli.sources.toy.model import self_attention
    from attn_cli.records.tokens import Tokens

    tokens = Tokens((0, 1, 2), ("a,b", ' "q"', "x\n"), 3, "words")
    config = Config(tokenizer="words").resolved(4)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 10  # (T, D)
    run = Trace("a,b \"q\" x", tokens, toy_info(config, tokens.vocab_size), (self_attention(x, config),))
    rows = read_csv(to_csv(run, index=3))
    assert {r["text_index"] for r in rows} == {"3"}
    assert [r["col_token"] for r in rows if r["table"] == "weights"][:3] == ["a,b", '␣"q"', "x↵"]
    lines = to_csv(run, header=False, index=3).splitlines()
    assert lines[0] == '3,words,token_id,,,0,,"a,b",,0'
    assert [line for line in lines if ",input," in line][0] == '3,words,input,,0,0,0,"a,b",,0.0'


def test_an_export_too_big_for_memory_is_refused_before_it_is_built(monkeypatch) -> None:
    from attn_cli.sources.toy.source import ToySource
    from attn_cli.sources.toy.config import Config
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.formats import export, numbers

    run = ToySource(Config(tokenizer="words", heads=2)).run("I saw a saw")
    assert numbers.export_numbers(run) == 3 * 2 * 16 + 4 * (16 + 2 * (2 * 8 + 2 * 8) + 2 * 2 * 8)
    from attn_cli.runtime import budget

    monkeypatch.setattr(budget, "available_bytes", lambda: 1000)  # bytes
    with pytest.raises(TooLargeError, match="--format table"):
        export.to_json(run)


def test_a_streamed_export_is_budgeted_for_what_it_holds(monkeypatch) -> None:
    """write_json and write_csv hold one layer's raw scores and a block of text, not the
    text: a budget the whole text would not fit passes, a smaller one is refused before
    anything is written."""
    import io

    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.formats import export, numbers

    run = run_of(" ".join(["word"] * 200), heads=2)
    streamed, whole = numbers.export_bytes(run), numbers.export_bytes(run, whole=True)
    assert streamed == 2 * 200 * 200 * 4 + (2 * 4 * 32 * 200 + 2 * 8 * 200 * 200 * 2) + numbers.STREAM_BYTES  # scores, stats
    assert whole > 2 * streamed
    monkeypatch.setattr(budget, "available_bytes", lambda: int(streamed / budget.SHARE) + 1)
    for write in (export.write_json, export.write_csv):
        write(run, io.BytesIO())
    with pytest.raises(TooLargeError, match="--format table"):
        export.to_json(run)
    monkeypatch.setattr(budget, "available_bytes", lambda: int(streamed / budget.SHARE) - 1)
    for write in (export.write_json, export.write_csv):
        out = io.BytesIO()
        with pytest.raises(TooLargeError, match="raw scores and statistics of 200 tokens x 2 heads"):
            write(run, out)
        assert out.getvalue() == b""
