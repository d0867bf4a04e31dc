"""A 16,384-token text through a long-context checkpoint with a sliding window, in blocks: the
chosen rows against a reference built from transformers' own queries and keys (a registered
attention function that receives them after RoPE, with transformers' own mask), not from
attn-cli's code. Controls: a window one key too wide, and a row taken from the wrong place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch

from attn_cli.records.band import Band
from attn_cli.sources.blocks import BlockPlan
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import decoder

N_TOKENS, WINDOW = 16_384, 1_000
QUERIES = (0, 1, 999, 1000, 8191, N_TOKENS - 2, N_TOKENS - 1)


@pytest.fixture(scope="module")
def long_mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.build_llama(
        tmp_path_factory.mktemp("long-mistral"), model_type="mistral", sliding_window=WINDOW, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=48, max_position_embeddings=N_TOKENS + 8,
    )  # fmt: skip


def reference_rows(folder: Path, ids: list[int], layer: int, raw: bool = False) -> torch.Tensor:
    """(Q, H, T): softmax(q_i K^T * scaling + mask_i) of transformers' own post-RoPE queries and keys
    and its own mask, for the chosen rows of ``layer`` (``raw``: q_i K^T itself); the forward itself
    through SDPA."""
    import transformers
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    caught: dict[int, torch.Tensor] = {}

    def capture(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any, scaling: float, **kwargs: Any) -> Any:
        if module.layer_idx == layer:
            groups = query.shape[1] // key.shape[1]
            keys = key.repeat_interleave(groups, dim=1)  # (1, H, T, D)
            scores = query[0, :, list(QUERIES)].float() @ keys[0].float().transpose(-1, -2)  # (H, Q, T)
            caught[-1] = scores.transpose(0, 1).clone()  # (Q, H, T) raw
            scores = scores * scaling
            rows = mask[0, 0, list(QUERIES)]  # (Q, T): True (or 0) where a key is seen
            scores = scores.masked_fill(~rows, float("-inf")) if rows.dtype == torch.bool else scores + rows
            caught[layer] = scores.softmax(dim=-1).transpose(0, 1)  # (Q, H, T)
        sdpa = transformers.integrations.sdpa_attention.sdpa_attention_forward
        return sdpa(module, query, key, value, mask, scaling=scaling, **kwargs)  # the forward goes on as transformers' SDPA

    AttentionInterface.register("attn_cli_capture", capture)
    AttentionMaskInterface.register("attn_cli_capture", eager_mask)  # the whole (1, 1, T, T) mask, 0 or -inf: window included
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="attn_cli_capture").eval()
    with torch.no_grad():
        model.model(torch.tensor([ids]))
    return caught[-1 if raw else layer]


def rows_of(folder: Path, ids: list[int], layer: int, raw: bool = False) -> torch.Tensor:
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.tokens_from_ids(tuple(ids), (True,) + (False,) * (len(ids) - 1))
    (summary,) = ckpt.trace(tokens, [layer], "weights", blocks=BlockPlan(rows=512, queries=QUERIES, scores=raw, heads_at_once=1))
    return summary.row_scores if raw else summary.rows  # (Q, H, T)


def ids_for(folder: Path) -> list[int]:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(checkpoints.LONG * 200).ids[:N_TOKENS]
    assert len(ids) == N_TOKENS
    return ids


def test_rows_at_16k_tokens_equal_transformers_own_queries_and_keys(long_mistral: Path) -> None:
    ids = ids_for(long_mistral)
    want = reference_rows(long_mistral, ids, layer=1)
    got = rows_of(long_mistral, ids, layer=1)
    assert got.shape == want.shape == (len(QUERIES), 4, N_TOKENS)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert bool((got[-1, :, : N_TOKENS - WINDOW] == 0).all()) and bool((got[-1, :, N_TOKENS - WINDOW :] > 0).all())


def test_raw_scores_at_16k_tokens_equal_transformers_own(long_mistral: Path) -> None:
    """--show scores: the chosen rows' q_i K^T, every key's (a hidden key's too, as the scores table)."""
    ids = ids_for(long_mistral)
    want, got = reference_rows(long_mistral, ids, layer=1, raw=True), rows_of(long_mistral, ids, layer=1, raw=True)
    assert got.shape == want.shape == (len(QUERIES), 4, N_TOKENS)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    with pytest.raises(AssertionError):  # control: each row against the next chosen row's reference
        torch.testing.assert_close(got[:-1], want[1:], atol=1e-4, rtol=1e-5)


def test_a_wider_window_is_seen_at_16k(long_mistral: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = ids_for(long_mistral)
    want = reference_rows(long_mistral, ids, layer=1)
    monkeypatch.setattr(decoder.Decoder, "band", lambda self, layer: Band(before=self.windows[layer], after=0))
    with pytest.raises(AssertionError):
        torch.testing.assert_close(rows_of(long_mistral, ids, layer=1), want, atol=1e-5, rtol=0)
