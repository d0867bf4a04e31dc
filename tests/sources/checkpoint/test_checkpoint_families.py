"""GPT-2 and BERT computed by attn-cli against transformers' eager attention (1e-5),
on sharpened tiny checkpoints and, when installed, the real all-MiniLM-L6-v2."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import checkpoints
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import gpt2
from attn_cli.sources.checkpoint.families.base import scaled_divisor

TOL = 1e-5
TEXT = "The cat sat on the mat, and the dog sat on the log."
PAIR = "Attention weights sum to one!"



@pytest.fixture(scope="session")
def gpt2_scaled_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mistral-style GPT-2 options: divisor sqrt(Dk) * (layer + 1), another activation, a wider MLP."""
    return checkpoints.built(
        tmp_path_factory,
        "gpt2-scaled",
        checkpoints.build_gpt2,
        lm_head=False,
        seed=3,
        scale_attn_by_inverse_layer_idx=True,
        activation_function="gelu_pytorch_tanh",
        n_inner=48,
    )



def assert_matches(layers, ref: checkpoints.Reference, indexes) -> None:
    """Per layer, in this order: weights, x, concat, output, each to TOL; a failure
    names the layer and the field ("layer 1 x: ...")."""
    assert [layer.layer for layer in layers] == list(indexes)
    for layer, index in zip(layers, indexes):
        for name in ("weights", "x", "concat", "output"):
            torch.testing.assert_close(
                getattr(layer, name), getattr(ref, name)[index], atol=TOL, rtol=0, msg=lambda m, name=name: f"layer {index} {name}: {m}"
            )


def assert_softmax_rows(layer) -> None:
    torch.testing.assert_close(layer.weights.sum(-1), torch.ones(layer.weights.shape[:2]), atol=1e-6, rtol=0)
    if layer.mask is not None:
        assert bool((layer.weights[:, layer.mask] == 0).all())


def sharpness(layer) -> float:
    """How far rows are from uniform: the mean of (largest weight x visible keys), 1 for
    uniform rows. The sharpened checkpoints score well above 1, so a wrong transpose
    cannot hide behind near-uniform attention."""
    visible = torch.tensor(layer.visible_keys(), dtype=torch.float32)  # (T,)
    return float((layer.weights.max(-1).values * visible).mean())


@pytest.mark.parametrize("name", ["gpt2_folder", "gpt2_scaled_folder"])
def test_gpt2_every_layer_and_head_matches_transformers(name: str, request: pytest.FixtureRequest) -> None:
    folder = request.getfixturevalue(name)
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    layers = ckpt.trace(tokens, [0, 1, 2])
    assert_matches(layers, checkpoints.reference(folder, tokens.ids), [0, 1, 2])
    for layer in layers:
        assert torch.equal(layer.mask, causal_mask(len(tokens)))
        assert_softmax_rows(layer)
        assert sharpness(layer) > 1.5


def test_gpt2_divisor_follows_the_config(gpt2_folder: Path, gpt2_scaled_folder: Path) -> None:
    plain = open_checkpoint(str(gpt2_folder))
    scaled = open_checkpoint(str(gpt2_scaled_folder))
    tokens = plain.tokenizer.encode(TEXT)
    assert [(la.divisor, la.divisor_text) for la in plain.trace(tokens, [0, 2])] == [
        (pytest.approx(8**0.5), "sqrt(8)"),
        (pytest.approx(8**0.5), "sqrt(8)"),
    ]
    assert [(la.divisor, la.divisor_text) for la in scaled.trace(tokens, [0, 2])] == [
        (pytest.approx(8**0.5), "sqrt(8)"),
        (pytest.approx(3 * 8**0.5), "(sqrt(8) * 3)"),
    ]


def test_gpt2_projections_are_the_checkpoints_in_linear_orientation(gpt2_folder: Path) -> None:
    from safetensors.torch import load_file

    stored = load_file(str(gpt2_folder / "model.safetensors"))
    ckpt = open_checkpoint(str(gpt2_folder))
    (layer,) = ckpt.trace(ckpt.tokenizer.encode(TEXT), [1])
    c_attn = stored["transformer.h.1.attn.c_attn.weight"]  # (D, 3D) input-first
    d = ckpt.info.d_model
    assert torch.equal(layer.projections.query.weight, c_attn[:, :d].T)
    assert torch.equal(layer.projections.key.weight, c_attn[:, d : 2 * d].T)
    assert torch.equal(layer.projections.value.weight, c_attn[:, 2 * d :].T)
    assert torch.equal(layer.projections.out.weight, stored["transformer.h.1.attn.c_proj.weight"].T)
    assert torch.equal(layer.projections.query.bias, stored["transformer.h.1.attn.c_attn.bias"][:d])
    # the per-head tensors are what the projections make of x
    q = layer.projections.query(layer.x)  # (T, D)
    assert torch.allclose(layer.queries[2], q[:, 16:24])


def test_layers_come_back_as_asked_and_only_those(gpt2_folder: Path) -> None:
    ckpt = open_checkpoint(str(gpt2_folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    ref = checkpoints.reference(gpt2_folder, tokens.ids)
    assert_matches(ckpt.trace(tokens, [2, 0]), ref, [2, 0])
    assert_matches(ckpt.trace(tokens, [1]), ref, [1])


@pytest.mark.parametrize("pair", [None, PAIR])
def test_bert_every_layer_and_head_matches_transformers(bert_folder: Path, pair: str | None) -> None:
    ckpt = open_checkpoint(str(bert_folder))
    tokens = ckpt.tokenizer.encode(TEXT, pair)
    layers = ckpt.trace(tokens, [0, 1, 2])
    assert_matches(layers, checkpoints.reference(bert_folder, tokens.ids, tokens.type_ids), [0, 1, 2])
    for layer in layers:
        assert layer.mask is None and layer.divisor_text == "sqrt(8)"
        assert_softmax_rows(layer)
        assert sharpness(layer) > 1.5
    if pair is not None:
        assert 1 in tokens.type_ids


def test_token_ids_are_transformers_tokenizer_ids(gpt2_folder: Path, bert_folder: Path) -> None:
    from transformers import AutoTokenizer

    texts = [TEXT, "café naïve 日本語 🐈  double  spaces\nnew line", "x"]
    gpt2_ckpt, bert_ckpt = open_checkpoint(str(gpt2_folder)), open_checkpoint(str(bert_folder))
    gpt2_tok, bert_tok = AutoTokenizer.from_pretrained(gpt2_folder), AutoTokenizer.from_pretrained(bert_folder)
    for text in texts:
        assert gpt2_ckpt.tokenizer.encode(text).ids == tuple(gpt2_tok(text)["input_ids"])
        expected = bert_tok(text, PAIR)
        ours = bert_ckpt.tokenizer.encode(text, PAIR)
        assert ours.ids == tuple(expected["input_ids"])
        assert ours.type_ids == tuple(expected["token_type_ids"])


# -- negative controls: the comparison above catches these bugs ------------------------


def test_an_untransposed_conv1d_weight_fails_the_comparison(gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt, tokens, ref = checkpoints.with_reference(gpt2_folder, TEXT)
    # the classic bug: Conv1D's (in, out) storage read as nn.Linear's (out, in) without a transpose
    monkeypatch.setattr(gpt2, "conv1d_as_linear", lambda w: w.reshape(w.shape[1], w.shape[0]))
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_matches(ckpt.trace(tokens, [0]), ref, [0])


def test_a_missing_token_type_fails_the_comparison(bert_folder: Path) -> None:
    ckpt, tokens, ref = checkpoints.with_reference(bert_folder, TEXT, PAIR)
    assert 1 in tokens.type_ids
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_matches(ckpt.trace(dataclasses.replace(tokens, type_ids=()), [0]), ref, [0])  # every token segment 0


def test_ignoring_scale_attn_by_inverse_layer_idx_fails_the_comparison(gpt2_scaled_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt, tokens, ref = checkpoints.with_reference(gpt2_scaled_folder, TEXT)
    # every layer divided by sqrt(Dk) alone: layer 0 is still right (its factor is 1), layer 1 is not
    monkeypatch.setattr(gpt2.Gpt2, "divisor", lambda self, layer: scaled_divisor(self.head_dim, self.scale, 1))
    with pytest.raises(AssertionError, match="layer 1 weights"):
        assert_matches(ckpt.trace(tokens, [0, 1, 2]), ref, [0, 1, 2])


@pytest.mark.parametrize("bug", list(checkpoints.LAYER_BUGS))
def test_a_wrong_x_concat_or_output_fails_the_comparison_of_that_field(gpt2_folder: Path, bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs that leave the weights right: the comparison of x, concat and output each bites."""
    ckpt, tokens, ref = checkpoints.with_reference(gpt2_folder, TEXT)
    perturb, flagged = checkpoints.LAYER_BUGS[bug]
    perturb(monkeypatch)
    with pytest.raises(AssertionError, match=flagged):
        assert_matches(ckpt.trace(tokens, [0, 1, 2]), ref, [0, 1, 2])


# -- the real all-MiniLM-L6-v2 -----------------------------------------------------------


@pytest.fixture(scope="module")
def minilm(minilm_path: Path) -> Path:
    return minilm_path


@pytest.mark.parametrize("pair", [None, "Is it sleeping?"])
def test_minilm_every_layer_and_head_matches_transformers(minilm: Path, pair: str | None) -> None:
    ckpt = open_checkpoint(str(minilm))
    assert (ckpt.info.family, ckpt.info.layers, ckpt.info.heads, ckpt.info.head_dim) == ("bert", 6, 12, 32)
    tokens = ckpt.tokenizer.encode("The cat's whiskers twitched.", pair)
    layers = ckpt.trace(tokens, range(6))
    assert_matches(layers, checkpoints.reference(minilm, tokens.ids, tokens.type_ids), range(6))


def test_minilm_token_texts_and_special_flags(minilm: Path) -> None:
    ckpt = open_checkpoint(str(minilm))
    tokens = ckpt.tokenizer.encode("The cat's whiskers twitched.", "Is it?")
    # each token is the text under its offsets, after the whitespace before it there: as
    # written (not lower-cased), "'" and "s" glued to "cat" as in the text, '##' pieces too
    assert tokens.texts == (
        "[CLS]", "The", " cat", "'", "s", " w", "his", "kers", " twitched", ".", "[SEP]",
        "Is", " it", "?", "[SEP]",
    )  # fmt: skip
    assert tokens.special == tuple(t in ("[CLS]", "[SEP]") for t in tokens.texts)
    assert tokens.type_ids == (0,) * 11 + (1,) * 4
    assert tokens.vocab_size == 30522


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gpt2_gelu_in_one_buffer_is_transformers_gelu_bit_for_bit(dtype: torch.dtype) -> None:
    from transformers.activations import NewGELUActivation

    from attn_cli.sources.checkpoint.families.activations import ACTIVATIONS

    x = (torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)  # (T, F)
    before = x.clone()
    assert torch.equal(ACTIVATIONS["gelu_new"](x), NewGELUActivation()(x))
    assert torch.equal(x, before)  # its input is left alone
