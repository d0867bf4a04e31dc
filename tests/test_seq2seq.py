"""Encoder-decoder engine (issue 20, first slice): BART, Marian (one shared table or one per stack)
and T5 (v1.0 ReLU, Flan-style gated GELU)
against transformers' eager attention on sharpened tiny *ForConditionalGeneration checkpoints:
every layer and head of the three stacks (encoder_attentions, decoder_attentions,
cross_attentions) to 1e-5, the decoder's inputs as transformers shifts the labels, and
negative controls for each family's own steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import checkpoints
from attn_cli.sources.checkpoint.families import seq2seq, seq2seq_class


def open_pair(folder: Path) -> tuple[Any, Any]:
    """The engine and the weights of a folder (no tokenizer needed: the ids are given)."""
    from attn_cli.sources.checkpoint.files import WeightReader

    config = json.loads((folder / "config.json").read_text())
    model = seq2seq_class(config["model_type"])(config)
    weights = WeightReader(folder)
    weights.find_prefix(model.anchor, model.family)
    return model, weights


SOURCE = [0, 50, 61, 72, 83, 94, 105, 116, 127, 2]  # BART: <s> ... </s>
LABELS = [0, 30, 40, 41, 42, 43, 2]
T5_SOURCE = [50, 61, 72, 83, 94, 105, 116, 127, 1]  # T5: ... </s>
T5_LABELS = [30, 40, 41, 42, 43, 1]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("seq2seq")
    return {
        "bart": checkpoints.build_bart(root / "bart"),
        "t5": checkpoints.build_t5(root / "t5", "relu"),
        "flan-t5": checkpoints.build_t5(root / "flan-t5", "gated-gelu"),
        "marian": checkpoints.build_marian(root / "marian"),
        "marian-separate": checkpoints.build_marian(root / "marian-separate", shared=False),
    }


MARIAN_SOURCE = [5, 12, 23, 34, 45, 56, 60, 70, 0]  # ... </s> (eos 0), ids every vocabulary of the tiny Marian has
MARIAN_LABELS = [3, 14, 25, 36, 47, 0]


def ids_for(name: str) -> tuple[list[int], list[int]]:
    if name.startswith("marian"):
        return MARIAN_SOURCE, MARIAN_LABELS
    return (SOURCE, LABELS) if name == "bart" else (T5_SOURCE, T5_LABELS)


def reference(folder: Path, source: list[int], decoder: list[int]) -> Any:
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        return model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), output_attentions=True)


def assert_stacks_match(folder: Path, name: str) -> None:
    source, labels = ids_for(name)
    model, weights = open_pair(folder)
    decoder = model.decoder_inputs(labels)
    ours = model.forward(weights, source, decoder)
    theirs = reference(folder, source, decoder)
    for stack, mine, ref in (
        ("encoder", ours.encoder, theirs.encoder_attentions),
        ("decoder", ours.decoder, theirs.decoder_attentions),
        ("cross", ours.cross, theirs.cross_attentions),
    ):
        assert len(mine) == len(ref), stack
        for index, (layer, expected) in enumerate(zip(mine, ref)):
            assert layer.weights.shape == expected[0].shape, (stack, index)
            torch.testing.assert_close(layer.weights, expected[0], atol=1e-5, rtol=0, msg=f"{stack} layer {index}")


@pytest.mark.parametrize("name", ["bart", "t5", "flan-t5", "marian", "marian-separate"])
def test_three_stacks_equal_transformers(name: str, folders: dict[str, Path]) -> None:
    assert_stacks_match(folders[name], name)
    source, labels = ids_for(name)
    model, weights = open_pair(folders[name])
    ours = model.forward(weights, source, model.decoder_inputs(labels))
    for stack, causal in ((ours.encoder, False), (ours.decoder, True), (ours.cross, False)):
        # sharp enough that a wrong step shows (a row's largest weight over uniform's), not one-hot
        sharpness = []
        for layer in stack:
            peaks = layer.weights.max(-1).values  # (H, rows)
            visible = torch.arange(1, peaks.shape[-1] + 1) if causal else torch.full((peaks.shape[-1],), layer.weights.shape[-1])
            sharpness.append(float((peaks * visible).mean()))
            assert peaks.mean() < 0.97, peaks
        assert min(sharpness) > 1.1 and sum(sharpness) / len(sharpness) > 1.5, sharpness
    assert ours.cross[0].weights.shape == (model.heads["decoder"], len(labels), len(source))


@pytest.mark.parametrize("name", ["bart", "t5", "marian"])
def test_decoder_inputs_are_the_shifted_labels(name: str, folders: dict[str, Path]) -> None:
    import transformers
    from transformers.models.bart.modeling_bart import shift_tokens_right

    _, labels = ids_for(name)
    model, _ = open_pair(folders[name])
    if name == "bart":
        expected = shift_tokens_right(torch.tensor([labels]), 1, 2)[0].tolist()
        assert model.decoder_inputs(labels)[:2] == [2, 0]  # </s> <s> y ...
    elif name == "marian":
        pad = json.loads((folders[name] / "config.json").read_text())["pad_token_id"]
        expected = shift_tokens_right(torch.tensor([labels]), pad, pad)[0].tolist()
        assert model.decoder_inputs(labels)[0] == pad  # <pad> y ...
    else:
        reference_model = transformers.T5ForConditionalGeneration.from_pretrained(folders[name])
        expected = reference_model._shift_right(torch.tensor([labels]))[0].tolist()
        assert model.decoder_inputs(labels)[0] == 0  # <pad> y ...
    assert model.decoder_inputs(labels) == expected


def test_t5_without_decoder_start_in_its_config_starts_with_pad(tmp_path: Path) -> None:
    config = {"model_type": "t5", "d_model": 8, "d_kv": 2, "num_layers": 1, "num_heads": 4, "pad_token_id": 0}
    assert seq2seq.T5(config).decoder_inputs([5, 6, 1]) == [0, 5, 6]


def bidirectional_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    real = seq2seq.T5.position_bias

    def wrong(self: Any, weights: Any, stack: str, n_tokens: int) -> torch.Tensor:
        return real(self, weights, "encoder", n_tokens) if stack == "encoder" else _decoder_bias(self, weights, n_tokens, True)

    monkeypatch.setattr(seq2seq.T5, "position_bias", wrong)


def bias_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bias in the first block only, as if each block used its own table (only block 0 has one)."""
    real = seq2seq.multi_head

    def first_only(*args: Any, bias: Any = None, **kwargs: Any) -> Any:
        return real(*args, bias=bias if args[5] == 0 else None, **kwargs)  # args[5]: the layer's index

    monkeypatch.setattr(seq2seq, "multi_head", first_only)


def _decoder_bias(model: Any, weights: Any, n_tokens: int, bidirectional: bool) -> torch.Tensor:
    from attn_cli.sources.checkpoint.families.bert import relative_buckets

    table = weights.read("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    relative = torch.arange(n_tokens)[None, :] - torch.arange(n_tokens)[:, None]
    return table[relative_buckets(relative, model.buckets, model.max_distance, bidirectional)].permute(2, 0, 1)


def no_position_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seq2seq.Bart, "POSITION_OFFSET", 0)


def unscaled(family: type) -> Any:
    """The bug: ``family``'s embeddings not multiplied by sqrt(D) though its config says so."""

    def bug(monkeypatch: pytest.MonkeyPatch) -> None:
        real = family.__init__

        def init(self: Any, config: dict[str, Any]) -> None:
            real(self, config)
            self.scale = 1.0

        monkeypatch.setattr(family, "__init__", init)

    return bug


def cross_reads_the_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    real = seq2seq.Seq2Seq.run_stack

    def run_stack(self: Any, weights: Any, stack: str, ids: Any, memory: Any = None) -> Any:
        if memory is None:
            return real(self, weights, stack, ids, None)
        return real(self, weights, stack, ids, self.embed(weights, "encoder", ids))  # the decoder's own tokens as the source

    monkeypatch.setattr(seq2seq.Seq2Seq, "run_stack", run_stack)


def interleaved_sinusoid(monkeypatch: pytest.MonkeyPatch) -> None:
    """sin and cos alternating by column (the XLM layout), not in halves."""
    real = seq2seq.sinusoid

    def interleaved(n: int, dim: int) -> torch.Tensor:
        halves = real(n, dim)
        out = torch.empty_like(halves)
        out[:, 0::2], out[:, 1::2] = halves[:, : dim // 2], halves[:, dim // 2 :]
        return out

    monkeypatch.setattr(seq2seq, "sinusoid", interleaved)


def scaled_like_bart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seq2seq.T5, "divisor", lambda self, stack: (8**0.5, "sqrt(8)"))


@pytest.mark.parametrize(
    "name, bug",
    [
        ("t5", bidirectional_decoder),
        ("t5", bias_not_shared),
        ("t5", scaled_like_bart),
        ("flan-t5", cross_reads_the_decoder),
        ("bart", no_position_offset),
        ("bart", unscaled(seq2seq.Bart)),
        ("marian", unscaled(seq2seq.Marian)),
        ("marian", interleaved_sinusoid),
    ],
)
def test_negative_controls(name: str, bug: Any, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    bug(monkeypatch)
    with pytest.raises(AssertionError):
        assert_stacks_match(folders[name], name)


def test_an_unknown_feed_forward_is_refused() -> None:
    from attn_cli.runtime.errors import ModelUnavailable

    config = {"model_type": "t5", "d_model": 8, "d_kv": 2, "num_layers": 1, "num_heads": 4, "feed_forward_proj": "gated-swiglu-x"}
    with pytest.raises(ModelUnavailable, match="feed_forward_proj"):
        seq2seq.T5(config)


def test_the_configs_are_what_transformers_writes(folders: dict[str, Path]) -> None:
    """The keys the engine reads are in the saved configs (a rename in transformers would show here)."""
    bart = json.loads((folders["bart"] / "config.json").read_text())
    t5 = json.loads((folders["flan-t5"] / "config.json").read_text())
    assert {"encoder_layers", "decoder_attention_heads", "scale_embedding", "decoder_start_token_id"} <= bart.keys()
    assert {"num_layers", "num_decoder_layers", "d_kv", "feed_forward_proj", "relative_attention_num_buckets"} <= t5.keys()
