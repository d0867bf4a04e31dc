"""formats.floattext: float32 tables as JSON text, written by tensor operations, against Python's
own formatting and json (the text the JSON export wrote before, one number at a time)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from attn_cli.formats import document, floattext, numbers


def reference(rows: list[list[float]]) -> str:
    """json.dumps of each float32 rounded to 9 significant digits: what ``as_lists`` gives json."""
    return json.dumps([[float(f"{v:.9}") if math.isfinite(v) else None for v in row] for row in rows])


EDGES = [
    0.0, -0.0, 1.0, -1.0, 100.0, 0.5, 1e-4, 9.9999999e-5, 0.001, 99999992.0, 1e8, 123456789.0, 3.4028235e38,
    1.4e-45, -1.4e-45, 1.17549435e-38, 2.0**-14, 2.0**-11, 1045238.375, 0.1, 12345678.0, 1.5, 7.0e-5, 1e-30,
]  # fmt: skip


def _values(n: int, seed: int) -> torch.Tensor:
    """Every kind of float32: random bit patterns (subnormals, tiny, huge, both signs), softmax-like
    weights, scores around 0, and the edges (powers of ten, ties, the largest and smallest)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = bits[np.isfinite(bits)]
    weights = torch.softmax(torch.randn(n // 256, 256, generator=torch.Generator().manual_seed(seed)) * 4, -1).reshape(-1)
    scores = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1)) * 10
    return torch.cat([torch.from_numpy(bits.copy()), weights, scores, torch.tensor(EDGES, dtype=torch.float32)])


def test_every_kind_of_float32_is_written_as_python_and_json_write_it() -> None:
    values = _values(300_000, 0)
    width = 97  # rows that start and end inside pieces and cells
    values = values[: values.numel() // width * width]
    got = numbers.StreamedTable(values.view(-1, width)).json()
    assert got == reference(values.view(-1, width).tolist())
    assert np.array_equal(np.array(json.loads(got), dtype=np.float32), values.view(-1, width).numpy())  # back bit for bit


@pytest.mark.parametrize("text_numbers", [1, 5, 64, 65536])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1), (4, 10), (2, 3, 5), (1, 130)])
def test_pieces_of_any_size_join_to_the_same_text(monkeypatch: pytest.MonkeyPatch, text_numbers: int, shape: tuple[int, ...]) -> None:
    """A long row cut into pieces, a block of rows, a vector, a stack of tables: json.dumps's text."""
    monkeypatch.setattr(numbers, "TEXT_NUMBERS", text_numbers)
    monkeypatch.setattr(numbers, "TEXT_ABOVE", 1)
    values = _values(2000, 1)[: math.prod(shape)].view(shape)
    assert numbers.StreamedTable(values).json() == json.dumps(np.vectorize(lambda v: float(f"{v:.9}"))(values.double().numpy()).tolist())


def test_rows_made_as_they_are_read_and_half_precision() -> None:
    values = torch.randn(90, 130) * 3
    rows = numbers.Rows((90, 130), torch.float32, lambda a, b: values[a:b])
    assert numbers.StreamedTable(rows).json() == reference(values.tolist())
    half = values.to(torch.bfloat16)
    assert numbers.StreamedTable(half).json() == reference(half.float().tolist())


@pytest.mark.parametrize("above", [1, 2048])
def test_nan_and_infinities_are_null_where_allowed_and_refused_elsewhere(monkeypatch: pytest.MonkeyPatch, above: int) -> None:
    monkeypatch.setattr(numbers, "TEXT_ABOVE", above)  # floattext's path, and the template's for a small table
    values = torch.tensor([[1.0, float("nan"), float("-inf")], [float("inf"), -2.5, 0.0]])
    assert numbers.StreamedTable(values, nulls=True).json() == reference(values.tolist())
    with pytest.raises(ValueError, match="not JSON compliant"):
        numbers.StreamedTable(values).json()


def test_negative_control_a_kept_trailing_zero_or_a_wrong_digit_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above fail when the cells keep {:.9}'s dropped zeros, or when one digit group is off."""
    values = _values(20_000, 2)
    good = dict(floattext._tables())
    for broken in ({"keep": torch.full_like(good["keep"], -1)}, {"lo": good["lo"].roll(1, 0)}):
        monkeypatch.setattr(floattext, "_tables", lambda broken=broken: {**good, **broken})
        assert numbers.StreamedTable(values[None]).json() != reference(values[None].tolist())


def test_a_table_through_the_json_export_is_unchanged() -> None:
    """The export's text of a table, as the per-number format wrote it (``as_lists`` through json)."""
    values = torch.softmax(torch.randn(3, 64, 64) * 5, -1)  # 4,096 numbers a table: floattext's
    assert numbers.StreamedTable(values).json() == json.dumps([[[numbers.float32_value(v) for v in row] for row in table] for table in values.tolist()])


def test_as_lists_and_top_weights_read_back_the_same_floats(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSV's and run_dict's floats (``as_lists``) and the top weights (``_top_weights``, either way): float("{:.9}")
    of each, None for NaN and infinities with nulls; without nulls a table that has them keeps its floats."""
    values = _values(50_000, 3)[:49_980].view(-1, 49_980 // 30)
    assert numbers.as_lists(values) == [[float(f"{v:.9}") for v in row] for row in values.tolist()]
    monkeypatch.setattr(numbers, "TEXT_ABOVE", 1)  # floattext's path for a small table too
    odd = torch.tensor([[1.0, float("nan")], [float("-inf"), 2.5e-7]])
    assert numbers.as_lists(odd, nulls=True) == [[1.0, None], [None, float(f"{odd[1, 1].item():.9}")]]
    kept = numbers.as_lists(odd)
    assert math.isnan(kept[0][1]) and kept[1][0] == float("-inf")
    tops = values[0].double().tolist()  # a head's top weights, float32 values as float64
    assert document._top_weights(numbers.as_lists, tops) == [numbers.float32_value(v) for v in tops]
    assert json.loads(document._top_weights(numbers.StreamedTable, tops).json()) == [numbers.float32_value(v) for v in tops]


def test_nan_and_infinities_are_written_by_the_tensor_operations() -> None:
    """A causal softmax input is half -inf: none of its cells goes through Python's formatting (a
    Python call per cell made a 512-token GPT-2's JSON minutes long), and the text is json's."""
    values = torch.tensor([float("-inf"), float("nan"), float("inf"), 1.5, -0.0, 3e9])
    made, slow = floattext.cells(values, nulls=True)
    assert slow == [5]  # 3e9 alone: 1e8 and up
    with pytest.raises(ValueError, match="not JSON compliant"):
        floattext.cells(values, nulls=False)
    causal = torch.randn(64, 64).masked_fill_(torch.ones(64, 64, dtype=torch.bool).triu(1), float("-inf"))
    assert numbers.StreamedTable(causal, nulls=True).json() == reference(causal.tolist())


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (16, 700), (5, 4099)], ids=str)
def test_rows_written_together_are_each_row_alone(shape: tuple[int, int]) -> None:
    """``json_rows`` (a long text's chosen rows of a head, in one call): each row's text is
    ``json_numbers`` of that row alone, Python's numbers (1e8 and up) and nulls included; a
    ``RowGroup``'s rows the same, and a row asked for again after its text was let go."""
    values = _values(shape[0] * shape[1] + 1000, 7)[: shape[0] * shape[1]].view(shape).clone()
    values[0, 0] = 3e9
    for nulls in (False, True):
        if nulls:
            values[-1, -1] = float("nan")
        alone = [floattext.json_numbers(row, shape[1], 0, nulls=nulls) for row in values]
        assert floattext.json_rows(values, nulls=nulls) == alone
        rows = numbers.streamed_rows(values, nulls)
        assert [row.json() for row in rows] == alone == [numbers.StreamedTable(row, nulls).json() for row in values]
        assert rows[0].json() == alone[0]  # asked again: made again
        torch.testing.assert_close(torch.stack([r.source for r in rows]), values, rtol=0, atol=0, equal_nan=True)  # CSV reads these


def test_rows_split_one_byte_off_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: each row's text cut one byte later than its length says is not the row's text."""
    values = torch.softmax(torch.randn(4, 3000, generator=torch.Generator().manual_seed(2)), -1)
    alone = [floattext.json_numbers(row, 3000, 0, nulls=False) for row in values]
    made = floattext.itertools.accumulate
    monkeypatch.setattr(floattext.itertools, "accumulate", lambda lengths: [end + 1 for end in made(lengths)])
    assert floattext.json_rows(values, nulls=False) != alone
