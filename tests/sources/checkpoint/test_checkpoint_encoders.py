"""The BERT-style encoders beyond BERT (RoBERTa, XLM-RoBERTa, DistilBERT, MPNet)
computed by attn-cli against transformers' eager attention (1e-5 in float32) on
sharpened tiny checkpoints saved as *ForMaskedLM; and the bugs the comparison catches."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import checkpoints
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import bert, modernbert

TEXT = "The cat sat on the mat, and the dog sat on the log."
LONG = " ".join(checkpoints.CORPUS[:3])  # past MPNet's exact buckets (8 each way) and into the logarithmic ones

CHECKPOINTS: dict[str, tuple[dict[str, Any], str]] = {
    "roberta": (dict(model_type="roberta"), TEXT),
    "xlm-roberta": (dict(model_type="xlm-roberta", seed=5), TEXT),
    "distilbert": (dict(model_type="distilbert"), TEXT),
    "distilbert-sinusoidal": (dict(model_type="distilbert", sinusoidal_pos_embds=True, seed=6), TEXT),
    "mpnet": (dict(model_type="mpnet"), LONG),
    "modernbert": (
        dict(model_type="modernbert", rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                                       "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
        LONG,
    ),  # fmt: skip
    "modernbert-biased": (dict(model_type="modernbert", norm_bias=True, attention_bias=True, mlp_bias=True, seed=7), TEXT),
}


@pytest.fixture(scope="session")
def folders(tmp_path_factory: pytest.TempPathFactory):
    return checkpoints.folder_maker(tmp_path_factory, "encoder", checkpoints.build_encoder, CHECKPOINTS)


traced = checkpoints.traced


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_every_layer_and_head_matches_transformers(name: str, folders) -> None:
    ckpt, tokens, layers = checkpoints.assert_family_matches(folders(name), CHECKPOINTS[name][1])
    assert ckpt.tokenizer.pairs and tokens.special[0] and tokens.special[-1]
    assert all(layer.mask is None for layer in layers) or name.startswith("modernbert")


def test_roberta_positions_start_after_padding_idx(folders) -> None:
    ckpt, tokens, _ = traced(folders("roberta"), TEXT)
    family = ckpt._family
    assert family.position_ids(tokens) == list(range(2, 2 + len(tokens)))
    assert ckpt.info.max_positions == 128  # 130 rows, the first two never read: a 129th token has no row


def test_a_text_longer_than_the_position_rows_is_refused_before_running(folders) -> None:
    from attn_cli.runtime.errors import TooLargeError

    ckpt = open_checkpoint(str(folders("roberta")))
    with pytest.raises(TooLargeError, match="takes at most 128 .its position table"):
        ckpt.tokenizer.encode(" ".join(checkpoints.CORPUS))


def test_mpnet_adds_one_bias_to_every_layer_after_the_division(folders) -> None:
    _, tokens, layers = traced(folders("mpnet"), LONG)
    n = len(tokens)
    assert n > 2 * 8 + 1  # some distances fall in the logarithmic buckets
    bias = layers[0].bias
    assert bias is not None and bias.shape == (layers[0].n_heads, n, n)
    assert all(layer.bias is bias for layer in layers)  # computed once, shared
    torch.testing.assert_close(layers[1].scaled_scores, layers[1].scores / layers[1].divisor + bias, atol=1e-6, rtol=0)
    buckets = bert.relative_buckets(torch.arange(n)[None, :] - torch.arange(n)[:, None])
    assert buckets.min() >= 0 and buckets.max() <= 31 and len(buckets.unique()) > 16


def _no_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bert.Roberta, "position_ids", bert.Bert.position_ids)


def _positions_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sinusoidal positions recomputed (as DistilBERT's init draws them) instead of the saved table read."""
    original = bert.DistilBert.embed

    def embed(self: Any, weights: Any, tokens: Any) -> torch.Tensor:
        class Fresh:
            def __getattr__(self, name: str) -> Any:
                return getattr(weights, name)

            def read_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
                if "position" not in name:
                    return weights.read_rows(name, start, stop)
                position = torch.arange(start, stop, dtype=torch.float32)[:, None]  # (T, 1)
                dim = weights.read_rows(name, 0, 1).shape[1]
                i = torch.arange(dim, dtype=torch.float32)[None, :]  # (1, D)
                angles = position / torch.pow(10000, 2 * torch.div(i, 2, rounding_mode="floor") / dim)  # (T, D)
                return torch.where(i % 2 == 0, torch.sin(angles), torch.cos(angles))

        return original(self, Fresh(), tokens)

    monkeypatch.setattr(bert.DistilBert, "embed", embed)


BUGS = {
    "roberta-position-offset-missing": ("roberta", _no_offset, "layer 0 weights"),
    "xlm-roberta-position-offset-missing": ("xlm-roberta", _no_offset, "layer 0 weights"),
    "mpnet-bias-missing": ("mpnet", lambda mp: mp.setattr(bert.MPNet, "score_modifiers", lambda self, i, n: (None, None)), "layer 0 weights"),
    "mpnet-bias-before-the-division": (
        "mpnet",
        # (s + b) / sqrt(Dk) instead of s / sqrt(Dk) + b
        lambda mp: mp.setattr(
            bert.MPNet, "score_modifiers", lambda self, i, n, f=bert.MPNet.score_modifiers: (f(self, i, n)[0] / 8**0.5, None)
        ),
        "layer 0 weights",
    ),
    "distilbert-sinusoids-recomputed": ("distilbert-sinusoidal", _positions_recomputed, "layer 0"),
    "modernbert-local-window-ignored": (
        "modernbert", lambda mp: mp.setattr(modernbert.ModernBert, "layer_mask", lambda self, i, shared, n: None), "layer 1 weights",
    ),
    "modernbert-global-rope-everywhere": (
        "modernbert", lambda mp: mp.setattr(modernbert.ModernBert, "rotary_per_layer_type", False),
        "layer 1 weights",
    ),
    "modernbert-qkv-per-head": ("modernbert", lambda mp: mp.setattr(modernbert.ModernBert, "qkv_layout", "per_head"), "layer 0 weights"),
}


def test_modernbert_alternates_global_and_local_layers(folders) -> None:
    _, tokens, layers = traced(folders("modernbert"), LONG)
    n = len(tokens)
    assert n > 9
    distance = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs()
    assert layers[0].mask is None and layers[2].mask is None  # layers 0 and 2 are global
    assert torch.equal(layers[1].mask, distance > 4)  # local_attention 8: 4 each way
    assert layers[1].visible_keys()[n // 2] == 9


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_family_step_left_out_fails_the_comparison(bug: str, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    name, perturb, flagged = BUGS[bug]
    checkpoints.assert_bug_caught(folders(name), CHECKPOINTS[name][1], perturb, monkeypatch, flagged)
