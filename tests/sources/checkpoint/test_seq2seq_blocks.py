"""An encoder-decoder's source in blocks (issue 35): the encoder's layers a block of query rows at a
time, T5's relative position bias made a block at a time (``bias_rows``, never the (H, S, S)
table); each head's statistics, the chosen rows and the pooled maps against transformers'
``encoder_attentions``, the decoder's and cross-attention's tables as the run with every table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import checkpoints
from attn_cli.analysis.pooling import PooledMap
from attn_cli.analysis.stats import attention_stats
from attn_cli.records.tokens import Tokens
from attn_cli.sources.blocks import BlockPlan
from attn_cli.sources.checkpoint.families import encoder_decoder, seq2seq
from attn_cli.sources.checkpoint.files import WeightReader

QUERIES = (0, 37, 120)
ATOL = 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("seq2seq-blocks")
    return {"t5": checkpoints.build_t5(root / "t5", "gated-gelu"), "bart": checkpoints.build_bart(root / "bart")}


def source_ids(name: str) -> list[int]:
    """A source past T5's max_distance (20) both ways and through BART's 64 positions."""
    if name == "t5":
        return [(7 * i) % 290 + 5 for i in range(160)] + [1]
    return [0] + [(11 * i) % 200 + 4 for i in range(61)] + [2]


def run(folder: Path, source: list[int], decoder: list[int], blocks: BlockPlan | None) -> seq2seq.PairForward:
    config = json.loads((folder / "config.json").read_text())
    model = encoder_decoder(config)
    weights = WeightReader(folder, dtype=torch.float32)
    weights.find_prefix(model.encoder.anchor, model.encoder.family)
    as_tokens = [Tokens(tuple(ids), tuple(str(i) for i in ids), 1000, "ids") for ids in (source, decoder)]
    return seq2seq.pair_forward(model, weights, *as_tokens, keep="weights", blocks=blocks)


def expected(folder: Path, source: list[int], decoder: list[int]) -> object:
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        return model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), output_attentions=True)


@pytest.mark.parametrize("name", ["t5", "bart"])
@pytest.mark.parametrize(("rows", "heads_at_once"), [(23, 1), (64, 3)])
def test_the_encoder_in_blocks_equals_transformers(folders: dict[str, Path], name: str, rows: int, heads_at_once: int) -> None:
    source, decoder = source_ids(name), [0, 30, 40, 41]
    plan = BlockPlan(rows=rows, heads_at_once=heads_at_once, queries=QUERIES if name == "t5" else QUERIES[:2], pool=(16, "max"))
    ours, theirs = run(folders[name], source, decoder, plan), expected(folders[name], source, decoder)
    n = len(source)
    for summary, reference in zip(ours.encoder, theirs.encoder_attentions, strict=True):
        weights = reference[0].float()  # (H, S, S)
        for got, want in zip(summary.stats, attention_stats(weights), strict=True):
            assert got.most_attended == want.most_attended, (summary.layer, got.head)
            assert got.top_weight == pytest.approx(want.top_weight, abs=ATOL)
            assert got.entropy_bits == pytest.approx(want.entropy_bits, abs=5e-5)
            assert got.distance_mass == pytest.approx(want.distance_mass, abs=ATOL)
            assert got.sink_score == pytest.approx(want.sink_score, abs=ATOL)
        torch.testing.assert_close(summary.rows, weights[:, list(plan.queries)].transpose(0, 1), atol=ATOL, rtol=0)
        pooled = PooledMap(range(weights.shape[0]), n, n, 16, 16, "max")
        pooled(0, weights, 0)
        torch.testing.assert_close(summary.pooled, pooled.result(), atol=ATOL, rtol=0)
    whole = run(folders[name], source, decoder, None)
    for mine, full in zip(ours.decoder + ours.cross, whole.decoder + whole.cross, strict=True):
        torch.testing.assert_close(mine.weights, full.weights, atol=0, rtol=0)  # the same memory: the same bits


def test_negative_control_a_bias_block_off_by_one_key_is_caught(folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows above catch a block's bias read one key to the side (T5's distances shifted)."""
    from attn_cli.sources.checkpoint.families import t5

    made = t5.T5.bias_rows

    def shifted(self: t5.T5, weights: object) -> object:
        rows = made(self, weights)
        return lambda heads, start, end, first, stop: rows(heads, start, end, first + 1, stop + 1)

    monkeypatch.setattr(t5.T5, "bias_rows", shifted)
    source, decoder = source_ids("t5"), [0, 30]
    plan = BlockPlan(rows=23, queries=QUERIES)
    ours, theirs = run(folders["t5"], source, decoder, plan), expected(folders["t5"], source, decoder)
    wrong = ours.encoder[0].rows - theirs.encoder_attentions[0][0].float()[:, list(QUERIES)].transpose(0, 1)
    assert wrong.abs().max() > 1e-3


def test_t5_never_makes_the_encoders_whole_bias_in_blocks(folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.sources.checkpoint.families import t5

    original = t5.T5.position_bias

    def decoders_only(self: t5.T5, weights: object, n_tokens: int) -> torch.Tensor:
        if self.encoder:
            raise AssertionError("the encoder's (H, S, S) bias was made")
        return original(self, weights, n_tokens)

    monkeypatch.setattr(t5.T5, "position_bias", decoders_only)
    with pytest.raises(AssertionError, match="bias was made"):  # the run with tables makes it
        run(folders["t5"], source_ids("t5"), [0, 30], None)
    assert len(run(folders["t5"], source_ids("t5"), [0, 30], BlockPlan(rows=50)).encoder) == 2
