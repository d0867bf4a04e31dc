"""attn_cli.trace at any length: query= keeps rows whole, and where the tables do not fit the
trace keeps each head's statistics and those rows (``Trace.stats``, ``Trace.rows``), equal to the
same trace with its tables; what reads tables says it cannot."""

from __future__ import annotations

from pathlib import Path

import checkpoints
import pytest
import torch

import attn_cli
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.checkpoint import source as checkpoint_source


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.one_per_type(tmp_path_factory)("mistral")


def test_rows_and_stats_with_and_without_tables(mistral: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = attn_cli.trace(checkpoints.LONG, model=mistral, query=["last:2", 0], layer=1)
    n = len(whole.tokens)
    assert whole.tables_omitted is None and whole.queries == (0, n - 2, n - 1)
    assert torch.equal(whole.rows(head=3), whole.layers[0].weights[3, [0, n - 2, n - 1]])
    monkeypatch.setattr(checkpoint_source, "fits_at_hand", lambda parts, device: False)
    blocked = attn_cli.trace(checkpoints.LONG, model=mistral, query=["last:2", 0], layer=1)
    assert blocked.tables_omitted is not None and blocked.queries == whole.queries
    torch.testing.assert_close(blocked.rows(), whole.rows(), atol=1e-6, rtol=0)
    for got, want in zip(blocked.stats(), whole.stats()):
        assert got["most_attended"] == want["most_attended"]
        assert got["sink_score"] == pytest.approx(want["sink_score"], abs=1e-6)
        assert got["distance_mass"] == pytest.approx(want["distance_mass"], abs=1e-6)
    for call in (blocked.page, blocked.heads, lambda: blocked.weights(), lambda: blocked.heatmap(what="scores")):
        with pytest.raises(UsageError, match="did not keep"):
            call()
    strips = blocked.heatmap()  # the --query rows, as strips over every key, from the blocks
    assert [ax.get_title() for ax in strips.axes if ax.images] == [f"layer 1 head {h}" for h in range(8)]


def test_rows_need_a_query(mistral: Path) -> None:
    with pytest.raises(UsageError, match="query="):
        attn_cli.trace("The cat sat", model=mistral, layer=0).rows()
