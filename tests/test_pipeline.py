"""A batch through one ToySource gives exactly what fresh runs give: the cached
embedding table and projections change nothing, dropout included."""

from __future__ import annotations

import pytest
import torch

from attn_cli.sources.toy.config import Config, Init
from attn_cli.sources.toy.source import ToySource

TEXTS = ["I saw a saw", "Life is short, eat dessert first", "I saw a saw", "Hello shiny sun!"]


@pytest.mark.parametrize(
    "config",
    [
        Config(tokenizer="words"),
        Config(tokenizer="words", heads=2, causal=True, out_proj=True, dropout=0.3),
        Config(tokenizer="words", init=Init.uniform, qkv_bias=True, dropout=0.5, seed=7),
        Config(tokenizer="words", projections=False, out_proj=True, d_model=8, heads=4),
    ],
    ids=["default", "dropout-multihead", "uniform-bias-dropout", "naive"],
)
def test_batch_equals_fresh_runs(config: Config) -> None:
    batch = ToySource(config)
    for text in TEXTS:
        torch.manual_seed(999)  # whatever the caller did to the generator in between
        got = batch.run(text)
        want = ToySource(config).run(text)
        assert torch.equal(got.layers[0].x, want.layers[0].x)
        for name in ("weights", "context", "output"):
            assert torch.equal(getattr(got.layers[0], name), getattr(want.layers[0], name)), name
        if config.dropout:
            assert torch.equal(got.layers[0].dropped_weights, want.layers[0].dropped_weights)


def test_embedding_rows_are_the_seeded_tables_rows() -> None:
    run = ToySource(Config(tokenizer="words", d_model=5, seed=3)).run("b a c a")
    torch.manual_seed(3)
    table = torch.nn.Embedding(3, 5)
    assert torch.equal(run.layers[0].x, table(torch.tensor([1, 0, 2, 0])).detach())
