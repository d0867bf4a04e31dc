"""A checkpoint's layers in blocks of query rows (no (H, T, T) table): every model_type's
statistics and chosen rows against those computed from transformers' ``output_attentions``, its
masks as bands against the (T, T) tables they replace, and the control that a wrong band is seen.
The texts pass every window (``checkpoints.LONG``), blocks of 5 rows leave a partial last block."""

from __future__ import annotations

from typing import Any

import checkpoints
import pytest
import torch

from attn_cli.analysis.stats import attention_stats
from attn_cli.records.band import Band
from attn_cli.sources.blocks import BlockPlan
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import decoder

TOLERANCE = {"weights": 1e-5, "entropy_bits": 5e-5}  # entropy's log turns a 1e-6 weight into ~1e-5 bits


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.one_per_type(tmp_path_factory)


def summaries(folder: Any, text: str, queries: tuple[int, ...] = ()) -> tuple[Any, Any, list[Any]]:
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(text)
    chosen = tuple(sorted({q % len(tokens) for q in queries}))
    return ckpt, tokens, ckpt.trace(tokens, range(ckpt.info.layers), "weights", blocks=BlockPlan(rows=5, queries=chosen))


def assert_equal_to_reference(layers: list[Any], ref: Any, masks: list[torch.Tensor | None]) -> None:
    """Each layer's statistics and rows as attention_stats and indexing give them on transformers' weights."""
    for i, (summary, mask) in enumerate(zip(layers, masks)):
        weights = ref.weights[i].float()  # (H, T, T)
        for got, want in zip(summary.stats, attention_stats(weights, mask=mask)):
            assert got.most_attended == want.most_attended, f"layer {i} head {got.head}"
            assert got.visible_keys == want.visible_keys
            for field in ("top_weight", "entropy_bits", "distance_mass"):
                tol = TOLERANCE.get(field, TOLERANCE["weights"])
                assert getattr(got, field) == pytest.approx(getattr(want, field), abs=tol), f"layer {i} {field}"
            for field in ("self_mass", "previous_mass", "first_mass", "sink_score"):
                assert getattr(got, field) == pytest.approx(getattr(want, field), abs=1e-5), f"layer {i} {field}"
        for at, query in enumerate(summary.queries):
            torch.testing.assert_close(summary.rows[at], weights[:, query], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(checkpoints.ONE_PER_MODEL_TYPE))
def test_blocks_equal_transformers(folders: Any, name: str) -> None:
    ckpt, tokens, layers = summaries(folders(name), checkpoints.ONE_PER_MODEL_TYPE[name][2], queries=(0, 3, -1))
    family = ckpt._family
    masks = [family.layer_mask(i, family.mask(len(tokens)), len(tokens)) for i in range(ckpt.info.layers)]
    assert all(summary.rows.shape == (3, ckpt.info.heads, len(tokens)) for summary in layers)
    assert_equal_to_reference(layers, checkpoints.reference(folders(name), tokens.ids), masks)


@pytest.mark.parametrize("name", list(checkpoints.ONE_PER_MODEL_TYPE))
def test_every_band_is_the_family_mask(folders: Any, name: str) -> None:
    """``Family.band(layer).table(T)`` is ``layer_mask``'s table, at a length inside and past every window."""
    family = open_checkpoint(str(folders(name)))._family
    for n_tokens in (3, 40):
        for layer in range(family.layers):
            want = family.layer_mask(layer, family.mask(n_tokens), n_tokens)
            got = family.band(layer).table(n_tokens)
            if want is None or not bool(want.any()):
                assert got is None, f"layer {layer}"
            else:
                assert got is not None and torch.equal(got, want.cpu()), f"layer {layer} at {n_tokens} tokens"


def test_a_window_band_off_by_one_is_seen(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mistral's window one key wider in the blocks than in transformers: the statistics differ."""
    folder, text = folders("mistral"), checkpoints.ONE_PER_MODEL_TYPE["mistral"][2]
    ckpt, tokens, _ = summaries(folder, text)
    family = ckpt._family
    masks = [family.layer_mask(i, family.mask(len(tokens)), len(tokens)) for i in range(ckpt.info.layers)]
    ref = checkpoints.reference(folder, tokens.ids)
    monkeypatch.setattr(decoder.Decoder, "band", lambda self, layer: Band(before=self.windows[layer], after=0))
    _, _, wide = summaries(folder, text)
    with pytest.raises(AssertionError):
        assert_equal_to_reference(wide, ref, masks)
