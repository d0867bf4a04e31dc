"""A batch of texts of different lengths run together, padded on the right (``Checkpoint.trace_batch``,
what ``census`` runs): each text's weights equal transformers' eager run of the same padded batch and
that text's run alone, for every model_type, and a padding key has weight 0. Controls: the padding left visible, and LongRoPE's
long and short texts in one batch (their rotations differ), are told apart."""

from __future__ import annotations

from typing import Any

import checkpoints
import pytest
import torch

from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import loop

WORDS = "the cat sat on the mat and the dog sat on the log while birds sang".split()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.one_per_type(tmp_path_factory)


def batch_of(ckpt: Any) -> list[Any]:
    """Texts of 1 to 16 words (the shortest first, the longest in the middle), within the model's positions."""
    texts = [" ".join(WORDS[:n]) for n in (1, 5, 16, 9, 3)]
    made = [ckpt.tokenizer.windows(text, 40, 40)[0] for text in texts]
    return [tokens for tokens in made if ckpt.length_class(len(tokens)) == ckpt.length_class(len(made[0]))]


def padded_reference(folder: Any, texts: list[Any]) -> list[torch.Tensor]:
    """transformers' eager run of the texts as one batch padded on the right, its attention_mask
    hiding the padding: each layer's (B, H, T, T) weights."""
    import transformers

    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    n = max(len(tokens) for tokens in texts)
    ids = torch.tensor([list(t.ids) + [t.ids[-1]] * (n - len(t)) for t in texts])  # padded with a real id: positions go on
    mask = torch.tensor([[1] * len(t) + [0] * (n - len(t)) for t in texts])
    with torch.no_grad():
        return [a.float() for a in model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions]


@pytest.mark.parametrize("name", list(checkpoints.ONE_PER_MODEL_TYPE))
def test_a_padded_batch_is_each_text_alone(folders: Any, name: str) -> None:
    """Equal to transformers' own padded batch (1e-5), and to each text run alone (1e-4: a batch's
    products round a little apart from one text's, in transformers as here)."""
    ckpt = open_checkpoint(str(folders(name)))
    texts = batch_of(ckpt)
    assert len({len(t) for t in texts}) >= 3
    layers = list(range(ckpt.info.layers))
    batch = ckpt.trace_batch(texts, layers)
    theirs = padded_reference(folders(name), texts)
    longest = max(len(t) for t in texts)
    for b, tokens in enumerate(texts):
        n = len(tokens)
        alone = checkpoints.reference(folders(name), tokens.ids).weights
        for layer in layers:
            got = batch[layer].weights[b]  # (H, T, T)
            assert got.shape[-1] == longest
            torch.testing.assert_close(got[:, :n, :n], theirs[layer][b, :, :n, :n], atol=1e-5, rtol=0, msg=f"text {b} layer {layer}")
            torch.testing.assert_close(got[:, :n, :n], alone[layer].float(), atol=1e-4, rtol=0, msg=f"text {b} layer {layer} alone")
            assert float(got[:, :n, n:].abs().sum()) == 0.0  # its rows never see the padding


def test_padding_left_visible_is_seen(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: a forward that drops the padding mask gives the short texts other weights."""
    ckpt = open_checkpoint(str(folders("bert")))
    texts = batch_of(ckpt)
    real = loop.forward
    monkeypatch.setattr(loop, "forward", lambda *a, padding=None, **k: real(*a, **k))
    import attn_cli.sources.checkpoint.families as families

    monkeypatch.setattr(families, "forward", loop.forward)
    batch = ckpt.trace_batch(texts, [0])
    n = len(texts[0])
    want = checkpoints.reference(folders("bert"), texts[0].ids).weights[0]
    assert not torch.allclose(batch[0].weights[0][:, :n, :n], want.float(), atol=1e-3)


def test_longrope_keeps_long_and_short_texts_apart(folders: Any) -> None:
    """Phi-3's LongRoPE rotates a text past original_max_position_embeddings with its long factors: such a
    text and a short one are of different length classes, and a batch of both is refused."""
    ckpt = open_checkpoint(str(folders("phi3")))
    short, long = (ckpt.tokenizer.windows(" ".join(WORDS * 3), size, size)[0] for size in (4, 40))
    assert ckpt.length_class(len(short)) != ckpt.length_class(len(long))
    with pytest.raises(ValueError, match="length class"):
        ckpt.trace_batch([short, long], [0])
