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
from attn_cli.records.tokens import Tokens
from attn_cli.sources.checkpoint.families import bart, encoder_decoder, loop, seq2seq, t5


def open_pair(folder: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """The engine (both stacks) and the weights of a folder (no tokenizer needed: the ids are given)."""
    from attn_cli.sources.checkpoint.files import WeightReader

    config = json.loads((folder / "config.json").read_text())
    model = encoder_decoder(config)
    weights = WeightReader(folder, dtype=dtype)
    weights.find_prefix(model.encoder.anchor, model.encoder.family)
    return model, weights


def tokens(ids: list[int]) -> Tokens:
    return Tokens(tuple(ids), tuple(str(i) for i in ids), 1000, "ids")


def run_pair(model: Any, weights: Any, source: list[int], decoder: list[int], **kwargs: Any) -> seq2seq.PairForward:
    """Every layer of the three stacks through the one layer loop."""
    return seq2seq.pair_forward(model, weights, tokens(source), tokens(decoder), **kwargs)


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
    decoder = model.decoder.decoder_inputs(labels)
    ours = run_pair(model, weights, source, decoder)
    assert_each_stack(ours, reference(folder, source, decoder), atol=1e-5)


def assert_each_stack(ours: seq2seq.PairForward, theirs: Any, atol: float) -> None:
    """Every layer's weights of the three stacks against transformers' (float32 on our side, as
    every renderer reads them), within ``atol`` (0: the same bits)."""
    for stack, mine, ref in (
        ("encoder", ours.encoder, theirs.encoder_attentions),
        ("decoder", ours.decoder, theirs.decoder_attentions),
        ("cross", ours.cross, theirs.cross_attentions),
    ):
        assert len(mine) == len(ref), stack
        for index, (layer, expected) in enumerate(zip(mine, ref)):
            assert layer.weights.dtype == torch.float32 and layer.weights.shape == expected[0].shape, (stack, index)
            torch.testing.assert_close(layer.weights, expected[0].float(), atol=atol, rtol=0, msg=f"{stack} layer {index}")


@pytest.mark.parametrize("name", ["bart", "t5", "flan-t5", "marian", "marian-separate"])
def test_three_stacks_equal_transformers(name: str, folders: dict[str, Path]) -> None:
    assert_stacks_match(folders[name], name)
    source, labels = ids_for(name)
    model, weights = open_pair(folders[name])
    ours = run_pair(model, weights, source, model.decoder.decoder_inputs(labels))
    for stack, causal in ((ours.encoder, False), (ours.decoder, True), (ours.cross, False)):
        # sharp enough that a wrong step shows (a row's largest weight over uniform's), not one-hot
        sharpness = []
        for layer in stack:
            peaks = layer.weights.max(-1).values  # (H, rows)
            visible = torch.arange(1, peaks.shape[-1] + 1) if causal else torch.full((peaks.shape[-1],), layer.weights.shape[-1])
            sharpness.append(float((peaks * visible).mean()))
            assert peaks.mean() < 0.97, peaks
        assert min(sharpness) > 1.1 and sum(sharpness) / len(sharpness) > 1.5, sharpness
    assert ours.cross[0].weights.shape == (model.decoder.heads, len(labels), len(source))


@pytest.mark.parametrize("name", ["bart", "t5", "marian"])
def test_decoder_inputs_are_the_shifted_labels(name: str, folders: dict[str, Path]) -> None:
    import transformers
    from transformers.models.bart.modeling_bart import shift_tokens_right

    _, labels = ids_for(name)
    model, _ = open_pair(folders[name])
    model = model.decoder
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
    assert t5.T5(config, "decoder").decoder_inputs([5, 6, 1]) == [0, 5, 6]


def bidirectional_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    real = t5.T5.position_bias

    def wrong(self: Any, weights: Any, n_tokens: int) -> torch.Tensor:
        return real(self, weights, n_tokens) if self.encoder else _decoder_bias(self, weights, n_tokens, True)

    monkeypatch.setattr(t5.T5, "position_bias", wrong)


def bias_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bias in the first block only, as if each block used its own table (only block 0 has one)."""
    real = loop.multi_head

    def first_only(*args: Any, bias: Any = None, **kwargs: Any) -> Any:
        return real(*args, bias=bias if args[5] == 0 else None, **kwargs)  # args[5]: the layer's index

    monkeypatch.setattr(loop, "multi_head", first_only)


def _decoder_bias(model: Any, weights: Any, n_tokens: int, bidirectional: bool) -> torch.Tensor:
    from attn_cli.sources.checkpoint.families.bert import relative_buckets

    table = weights.read("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    relative = torch.arange(n_tokens)[None, :] - torch.arange(n_tokens)[:, None]
    return table[relative_buckets(relative, model.buckets, model.max_distance, bidirectional)].permute(2, 0, 1)


def no_position_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bart.Bart, "POSITION_OFFSET", 0)


def unscaled(family: type) -> Any:
    """The bug: ``family``'s embeddings not multiplied by sqrt(D) though its config says so."""

    def bug(monkeypatch: pytest.MonkeyPatch) -> None:
        real = family.__init__

        def init(self: Any, config: dict[str, Any], stack: str) -> None:
            real(self, config, stack)
            self.scale = 1.0

        monkeypatch.setattr(family, "__init__", init)

    return bug


def cross_reads_the_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    real = seq2seq.forward

    def forward(family: Any, weights: Any, tokens: Any, *args: Any, memory: Any = None, **kwargs: Any) -> Any:
        if memory is not None:  # the decoder's own tokens as the source
            memory = family.embed_ids(weights, tokens.ids)
        return real(family, weights, tokens, *args, memory=memory, **kwargs)

    monkeypatch.setattr(seq2seq, "forward", forward)


def interleaved_sinusoid(monkeypatch: pytest.MonkeyPatch) -> None:
    """sin and cos alternating by column (the XLM layout), not in halves."""
    real = bart.sinusoid

    def interleaved(n: int, dim: int) -> torch.Tensor:
        halves = real(n, dim)
        out = torch.empty_like(halves)
        out[:, 0::2], out[:, 1::2] = halves[:, : dim // 2], halves[:, dim // 2 :]
        return out

    monkeypatch.setattr(bart, "sinusoid", interleaved)


def scaled_like_bart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(t5.T5, "divisor", lambda self, layer: (8**0.5, "sqrt(8)"))


@pytest.mark.parametrize(
    "name, bug",
    [
        ("t5", bidirectional_decoder),
        ("t5", bias_not_shared),
        ("t5", scaled_like_bart),
        ("flan-t5", cross_reads_the_decoder),
        ("bart", no_position_offset),
        ("bart", unscaled(bart.Bart)),
        ("marian", unscaled(bart.Marian)),
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
        t5.T5(config, "encoder")


def test_the_configs_are_what_transformers_writes(folders: dict[str, Path]) -> None:
    """The keys the engine reads are in the saved configs (a rename in transformers would show here)."""
    bart = json.loads((folders["bart"] / "config.json").read_text())
    t5 = json.loads((folders["flan-t5"] / "config.json").read_text())
    assert {"encoder_layers", "decoder_attention_heads", "scale_embedding", "decoder_start_token_id"} <= bart.keys()
    assert {"num_layers", "num_decoder_layers", "d_kv", "feed_forward_proj", "relative_attention_num_buckets"} <= t5.keys()


# -- dtype ---------------------------------------------------------------------------------


def reference_in(folder: Path, source: list[int], decoder: list[int], dtype: torch.dtype) -> Any:
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager", dtype=dtype).eval()
    with torch.inference_mode():
        return model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), output_attentions=True)


def assert_bits_match(ours: seq2seq.PairForward, theirs: Any, logits: torch.Tensor) -> None:
    assert_each_stack(ours, theirs, atol=0)
    assert torch.equal(logits, theirs.logits[0]), "logits"


def half_run(folder: Path, name: str, dtype: torch.dtype) -> tuple[seq2seq.PairForward, torch.Tensor, Any]:
    source, labels = ids_for(name)
    model, weights = open_pair(folder, dtype)
    decoder = model.decoder.decoder_inputs(labels)
    ours = run_pair(model, weights, source, decoder, whole=True)
    assert ours.hidden is not None
    logits = model.decoder.logits(weights, model.decoder.head(weights), ours.hidden)  # (T, V) in the run's dtype
    return ours, logits, reference_in(folder, source, decoder, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["bart", "flan-t5", "marian"])
def test_half_precision_equals_transformers_bit_for_bit(name: str, dtype: torch.dtype, folders: dict[str, Path]) -> None:
    """The three stacks and the logits in bfloat16 and float16: the same operations in the same
    order on the same operands as transformers' in that dtype, so the same bits."""
    ours, logits, theirs = half_run(folders[name], name, dtype)
    assert logits.dtype == dtype
    assert_bits_match(ours, theirs, logits)
    # the control: float32's numbers are not the half-precision run's, and the exact comparison sees it
    source, labels = ids_for(name)
    model, weights = open_pair(folders[name])
    wide = run_pair(model, weights, source, model.decoder.decoder_inputs(labels), whole=True)
    assert wide.hidden is not None
    with pytest.raises(AssertionError, match="encoder layer 0"):
        assert_bits_match(wide, theirs, model.decoder.logits(weights, model.decoder.head(weights), wide.hidden))


def test_a_float16_overflow_is_clamped_as_transformers_clamps_it(folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """T5's float16 guard: a sub-layer whose output holds an infinity is clamped to +-(65504 -
    1000). Forced here by the encoder's first W_o scaled so that its output overflows float16;
    without the guard the run parts from transformers' (the control: the infinities reach the
    next scores, which attn-cli refuses as an overflow, or the numbers differ)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from attn_cli.runtime.errors import ConfigError

    folder = Path(shutil.copytree(folders["flan-t5"], folders["flan-t5"].parent / "t5-overflow"))
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["encoder.block.0.layer.0.SelfAttention.o.weight"] *= 3e4  # 10 of its outputs past 65504
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    ours, logits, theirs = half_run(folder, "flan-t5", torch.float16)
    assert_bits_match(ours, theirs, logits)
    monkeypatch.setattr(t5, "clamp_float16", lambda hidden, when: hidden)
    with pytest.raises((AssertionError, ConfigError)):
        unguarded, logits, _ = half_run(folder, "flan-t5", torch.float16)
        assert_bits_match(unguarded, theirs, logits)


# -- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "change", "tensor"),
    [
        ("bart", {"decoder_ffn_dim": 80}, "decoder.layers.0.fc1.weight"),
        ("flan-t5", {"d_kv": 4}, "encoder.block.0.layer.0.SelfAttention.q.weight"),
        ("marian", {"encoder_ffn_dim": 24}, "encoder.layers.0.fc1.weight"),
    ],
)
def test_a_config_that_disagrees_with_its_tensors_is_refused_from_the_headers(
    name: str, change: dict, tensor: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    """As for every decoder and encoder: before anything runs, exit 3 naming the tensor, both
    shapes and the config keys (transformers refuses to load such a folder; attn-cli ran on, the
    config describing another model). The control: unchanged, it opens."""
    import shutil

    from attn_cli.runtime.errors import ModelUnavailable
    from attn_cli.sources.checkpoint import open_checkpoint

    open_checkpoint(str(folders[name]), pairs=True)
    folder = Path(shutil.copytree(folders[name], tmp_path / name))
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelUnavailable, match=f"{tensor} is .* but config.json .*{next(iter(change))}"):
        open_checkpoint(str(folder), pairs=True)
