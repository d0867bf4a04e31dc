"""A census's sums merge exactly: any split of the corpus into shards, written and read back as
JSON, merged in any order, gives the numbers of one run straight through (1e-12 relative, the
standard errors and the examples included). Controls: a shard left out, and one merged twice."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from test_census_measures import corpus

from attn_cli.analysis.tally import Tally, head_results, model_sink_rate
import attn_cli.sources.census as census_source
from attn_cli.sources.census import run_census, windows_for
from attn_cli.formats.census import shard_dict, tally_of
from attn_cli.pipeline import open_source
from attn_cli.sources.spec import SourceSpec
from attn_cli.sources.toy.config import Config
from attn_cli.text.corpus import read_corpus


@pytest.fixture(scope="module")
def setup(minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    path = tmp_path_factory.mktemp("merge") / "corpus.txt"
    path.write_text("\n".join(corpus(60, seed=3)) + "\n", encoding="utf-8")
    source = open_source(SourceSpec(Config(), model=str(minilm_path)))
    read = read_corpus(str(path))
    return source, read, windows_for(source, None, None)


def shard(setup: tuple[Any, Any, Any], texts: list[int]) -> Tally:
    """One shard's tally, through its JSON file form and back."""
    source, read, windows = setup
    made = run_census(source, read, windows=windows, texts=texts).tally
    return tally_of(json.loads(json.dumps(shard_dict(made, texts))))


def assert_same(got: Tally, want: Tally, rel: float = 1e-12) -> None:
    assert (got.texts, got.tokens, got.longest) == (want.texts, want.tokens, want.longest)
    for a, b in zip(head_results(got), head_results(want)):
        assert a["examples"] == b["examples"] and a["flags"] == b["flags"] and a["entropy_histogram"] == b["entropy_histogram"]
        for part in ("measures", "se"):
            for name, value in b[part].items():
                values = value if isinstance(value, list) else [value]
                mine = a[part][name] if isinstance(value, list) else [a[part][name]]
                for x, y in zip(mine, values):
                    assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=rel, abs=1e-15), (part, name)
    assert model_sink_rate(got) == pytest.approx(model_sink_rate(want), rel=rel)


def test_shards_in_any_order_give_one_runs_numbers(setup: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards of whole groups (the texts batched together: 8 here, 60 texts in 8 groups)."""
    monkeypatch.setattr(census_source, "GROUP_TEXTS", 8)
    n = len(setup[1].entries)
    whole = run_census(setup[0], setup[1], windows=setup[2]).tally
    halves = [shard(setup, list(range(0, 32))), shard(setup, list(range(32, n)))]
    assert_same(halves[0].merge(halves[1]), whole)
    assert_same(halves[1].merge(halves[0]), whole)
    thirds = [shard(setup, [i for i in range(n) if i // 8 % 3 == k]) for k in range(3)]  # round robin: groups interleaved
    random.Random(0).shuffle(thirds)
    merged = thirds[0]
    for part in thirds[1:]:
        merged = merged.merge(part)
    assert_same(merged, whole)
    with pytest.raises(AssertionError):  # control: a shard left out
        assert_same(thirds[0].merge(thirds[1]), whole)
    with pytest.raises(AssertionError):  # control: a shard merged twice
        assert_same(merged.merge(thirds[0]), whole)


def test_texts_split_across_groups_agree_to_float32(setup: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts split off their group run in other batches: their numbers round a little apart (float32's
    products), far below any measure's meaning, and the merge stays exact."""
    monkeypatch.setattr(census_source, "GROUP_TEXTS", 8)
    n = len(setup[1].entries)
    whole = run_census(setup[0], setup[1], windows=setup[2]).tally
    interleaved = [shard(setup, list(range(k, n, 3))) for k in range(3)]
    got = interleaved[0].merge(interleaved[1]).merge(interleaved[2])
    assert (got.texts, got.tokens) == (whole.texts, whole.tokens)
    for a, b in zip(head_results(got), head_results(whole)):
        for part in ("measures", "se"):
            for name, value in b[part].items():
                assert a[part][name] == pytest.approx(value, abs=1e-6, nan_ok=True), (part, name)


def test_tallies_of_different_models_do_not_merge() -> None:
    with pytest.raises(ValueError, match="cannot be merged"):
        Tally(2, 3).merge(Tally(2, 4))
