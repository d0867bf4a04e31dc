"""keep="weights": a trace that holds each selected layer's weights only.

The weights are the keep="all" trace's bit for bit, the per-head vectors are not
there (and a renderer asking for one fails), the memory estimate counts less, and
the commands that read only the weights (`heads`, `heatmap --what weights`) ask for
it and print exactly what they printed with every tensor kept.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.pipeline import open_source
from attn_cli.records.layers import LayerAttention, LayerWeights
from attn_cli.records.selection import IndexSpec, Selection
from attn_cli.runtime.errors import TooLargeError
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.model import Checkpoint
from attn_cli.sources.spec import SourceSpec
from attn_cli.sources.toy.config import Config

TEXT = "The cat sat on the mat, and the dog sat on the log."
VECTORS = ("queries", "keys", "values", "dropped_weights", "context", "concat", "output", "projections", "x")


@pytest.fixture(scope="module", params=["gpt2", "bert", "mistral"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "mistral":  # grouped-query heads and a sliding window in the mask
        return checkpoints.built(
            tmp_path_factory, "keep-mistral", checkpoints.build_llama, model_type="mistral", sliding_window=4, num_key_value_heads=2
        )
    builder = checkpoints.build_gpt2 if request.param == "gpt2" else checkpoints.build_bert
    return checkpoints.built(tmp_path_factory, request.param, builder)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_weights_are_the_full_traces_bit_for_bit_and_nothing_else_is_kept(folder: Path, dtype: str) -> None:
    ckpt = open_checkpoint(str(folder), dtype=dtype)
    tokens = ckpt.tokenizer.encode(TEXT)
    layers = [2, 0]
    full = ckpt.trace(tokens, layers)
    light = ckpt.trace(tokens, layers, "weights")
    assert [layer.layer for layer in light] == layers
    for a, b in zip(full, light):
        assert type(a) is LayerAttention and type(b) is LayerWeights
        assert b.weights.dtype == torch.float32 and torch.equal(a.weights, b.weights)
        assert (a.mask is None and b.mask is None) or torch.equal(a.mask, b.mask)
        assert (a.divisor, a.divisor_text, a.layer) == (b.divisor, b.divisor_text, b.layer)
        for name in VECTORS:
            assert not hasattr(b, name), name


def test_a_renderer_that_needs_a_vector_fails_on_a_weights_trace_and_an_export_leaves_them_out(folder: Path) -> None:
    from attn_cli.formats.document import layer_dict
    from attn_cli.render.picture.heatmap import What
    from attn_cli.render.picture.panels import layer_matrix

    ckpt = open_checkpoint(str(folder))
    (layer,) = ckpt.trace(ckpt.tokenizer.encode(TEXT), [1], "weights")
    layer_matrix(layer, What.weights, 0)  # the weights alone draw
    with pytest.raises(AttributeError, match="scores"):
        layer_matrix(layer, What.scores, 0)
    exported = layer_dict(layer, [0])  # an export of weights alone: the weights and their statistics, no vectors
    assert set(exported["heads"][0]) == {"head", "weights", "stats"} and exported["input"] is None


def test_the_estimate_counts_only_what_is_kept(folder: Path) -> None:
    ckpt = open_checkpoint(str(folder))
    full, light = ckpt.estimate_bytes(100, [0, 1, 2]), ckpt.estimate_bytes(100, [0, 1, 2], "weights")
    assert light["weights"] == full["weights"]
    assert light["tables"] == full["tables"] // 2 == 3 * ckpt.info.heads * 100 * 100 * 4  # the weights alone
    in_flight = ckpt.estimate_bytes(100, [0])["activations"] - (
        ckpt.estimate_bytes(100, [0, 1])["activations"] - ckpt.estimate_bytes(100, [0])["activations"]
    )
    assert light["activations"] == in_flight  # no kept vectors, one layer still being computed


def test_a_run_refused_keeping_everything_goes_through_keeping_the_weights(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget

    spec = SourceSpec(Config(), model=str(folder))
    source = open_source(spec)
    n_tokens = len(source.checkpoint.tokenizer.encode(TEXT))
    everything = Selection(tuple(range(source.n_layers)), tuple(range(source.n_heads)))
    need = {keep: sum(source.checkpoint.estimate_bytes(n_tokens, everything.layers, keep).values()) for keep in ("all", "weights")}
    # room for the lighter trace only (the budget uses a share of what is free)
    monkeypatch.setattr(budget, "available_bytes", lambda: int((need["weights"] + need["all"]) / 2 / budget.SHARE))
    with pytest.raises(TooLargeError):
        source.run(TEXT, everything)
    trace = source.run(TEXT, dataclasses.replace(everything, keep="weights"))
    assert all(type(layer) is LayerWeights for layer in trace.layers)


# -- the commands that read the weights only -----------------------------------------


def keeping_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """SourceSpec.select as it was before keep levels: every command keeps every tensor."""
    select = SourceSpec.select
    monkeypatch.setattr(
        SourceSpec, "select",
        lambda self, source, *, everything, keep="all", **analyses: select(self, source, everything=everything, **analyses),
    )  # fmt: skip


def spy_keep(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    trace = Checkpoint.trace

    def spy(self, tokens, layers, keep="all", **analyses):
        seen.append(keep)
        return trace(self, tokens, layers, keep, **analyses)

    monkeypatch.setattr(Checkpoint, "trace", spy)
    return seen


def test_heads_keeps_the_weights_and_prints_the_same(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("heads", TEXT, "--model", str(folder), "--probe-length", "8")
    seen = spy_keep(monkeypatch)
    light = {fmt: invoke(*args, "--format", fmt).stdout_bytes for fmt in ("json", "csv")}
    assert set(seen) == {"weights"} and len(seen) == 4  # the text and the probe, per format
    keeping_everything(monkeypatch)
    assert {fmt: invoke(*args, "--format", fmt).stdout_bytes for fmt in ("json", "csv")} == light
    assert json.loads(light["json"])["heads"]


@pytest.mark.parametrize(("what", "layers", "keep"), [("weights", "-1", "weights"), ("weights", "all", "weights"), ("scores", "-1", "all")])
def test_heatmap_keeps_the_weights_only_when_it_draws_only_them(
    folder: Path, what: str, layers: str, keep: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_heatmap_keeps(folder, what, layers, keep, tmp_path, monkeypatch)


def test_heatmap_of_every_table_keeps_everything(gpt2_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--what all on one family (its many panels take seconds a family; the choice of what to keep is the same for all)."""
    assert_heatmap_keeps(gpt2_folder, "all", "-1", "all", tmp_path, monkeypatch)


def assert_heatmap_keeps(folder: Path, what: str, layers: str, keep: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heatmap's trace keeps ``keep``, and its picture is the same bytes as one drawn from a trace keeping everything."""
    args = ("heatmap", TEXT, "--model", str(folder), "--what", what, "--layer", layers, "--head", "0-1")
    seen = spy_keep(monkeypatch)
    invoke(*args, "-o", str(tmp_path / "light.png"))
    assert seen == [keep]
    keeping_everything(monkeypatch)
    invoke(*args, "-o", str(tmp_path / "full.png"))
    assert (tmp_path / "light.png").read_bytes() == (tmp_path / "full.png").read_bytes()


def test_select_passes_the_keep_level_on() -> None:
    from attn_cli.sources.toy.source import ToySource

    spec = SourceSpec(Config(tokenizer="words"), layers=IndexSpec.parse("all", "--layer"))
    source = ToySource(spec.config)
    assert spec.select(source, everything=True).keep == "all"
    assert spec.select(source, everything=True, keep="weights") == Selection((0,), tuple(range(source.n_heads)), "weights", everything=True)


@pytest.mark.parametrize("keep", ["weights", "all"])
def test_a_large_trace_s_tables_have_mappings_of_their_own_and_the_same_bits(
    folder: Path, keep: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From LARGE_TRACE_BYTES of kept tables, a float32 forward writes each layer's weights
    into a mapping of its own (allocator.LayerHeap.table), not a block glibc may place in
    the heap: the same numbers. The control: a small trace's tables are ordinary blocks."""
    from attn_cli.runtime import allocator

    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    small = ckpt.trace(tokens, [2, 0], keep)
    monkeypatch.setattr(allocator, "LARGE_TRACE_BYTES", 0)
    large = ckpt.trace(tokens, [2, 0], keep)
    if allocator._libc() is None:
        pytest.skip("the allocator is left alone here (not glibc 2.33 or later)")
    for a, b in zip(small, large):
        assert torch.equal(a.weights, b.weights)
        assert a.weights.untyped_storage().resizable() and not b.weights.untyped_storage().resizable()
    # the control: an attention that dropped the block it was given would keep an ordinary one
    import attn_cli.sources.attend as attention

    attention_weights = attention.attention_weights
    monkeypatch.setattr(attention, "attention_weights", lambda *a, out=None, **k: attention_weights(*a, **k))
    assert ckpt.trace(tokens, [2, 0], keep)[0].weights.untyped_storage().resizable()


def test_a_dropped_large_trace_s_tables_hold_the_next_one_s(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dropped large trace's table mappings are kept (allocator.TablePool) and the next
    forward of the same size writes into them: the same numbers as a small trace's, and
    a trace still held keeps its own. The control: with nothing kept, nothing is reused."""
    from attn_cli.runtime import allocator

    if allocator._libc() is None:
        pytest.skip("the allocator is left alone here (not glibc 2.33 or later)")
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    other = ckpt.tokenizer.encode(TEXT.replace("cat", "dog").replace("mat", "log"))
    assert len(other) == len(tokens)
    expected = [layer.weights.clone() for layer in ckpt.trace(tokens, [2, 0], "weights")]
    monkeypatch.setattr(allocator, "LARGE_TRACE_BYTES", 0)
    held = ckpt.trace(tokens, [2, 0], "weights")
    second = ckpt.trace(other, [2, 0], "weights")  # while the first is held: mappings of its own
    assert not {a.weights.data_ptr() for a in held} & {b.weights.data_ptr() for b in second}
    assert all(torch.equal(a.weights, e) for a, e in zip(held, expected))
    del second
    assert len(allocator._POOL.free) == 2
    third = ckpt.trace(tokens, [2, 0], "weights")
    assert not allocator._POOL.free and all(torch.equal(c.weights, e) for c, e in zip(third, expected))
    del held, third
    monkeypatch.setattr(allocator.TablePool, "give", lambda self, block: None)  # the control
    fourth = ckpt.trace(tokens, [2, 0], "weights")
    del fourth
    assert not allocator._POOL.free  # where the case above kept 2 for the next trace
