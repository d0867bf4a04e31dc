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


def test_a_checkpoint_is_located_and_its_config_read_once(gpt2_folder, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_source finds the model once (the folder or the cache) and reads its config.json
    once; the source it opens is handed what was found."""
    from attn_cli.pipeline import open_source
    from attn_cli.sources.checkpoint import files
    from attn_cli.sources.checkpoint.source import CheckpointSource
    from attn_cli.sources.spec import SourceSpec

    calls = {"locate": 0, "read_config": 0}
    for name in calls:
        real = getattr(files, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(files, name, counted)
    spec = SourceSpec(Config(), model=str(gpt2_folder))
    source = open_source(spec)
    assert calls == {"locate": 1, "read_config": 1}
    assert source.run("I saw a saw").tokens.ids
    CheckpointSource(spec)  # the control: a source opened without what was found looks again
    assert calls == {"locate": 2, "read_config": 2}
