"""attn-cli against the tutorials' own code, written out here as plain torch.

Two references: the "Life is short, eat dessert first" walk-through
(seeds/004: nn.Embedding(6, 16) after manual_seed(123), then torch.rand
projections after seeding again) and the SelfAttention_v2, CausalAttention and
MultiHeadAttention classes of "Build a Large Language Model (From Scratch)"
ch. 3 (seeds/002), fed the 6x3 "Your journey starts with one step" vectors.
The classes below keep the book's structure, attribute names and the order in
which they create their layers, because that order is what the seed contract
has to reproduce.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from invoking import invoke

from attn_cli.sources.toy.config import Config, Init
from attn_cli.sources.toy.source import ToySource

HEADLINE = "Life is short, eat dessert first"
JOURNEY = "Your journey starts with one step"
JOURNEY_INPUTS = [
    [0.43, 0.15, 0.89],  # Your
    [0.55, 0.87, 0.66],  # journey
    [0.57, 0.85, 0.64],  # starts
    [0.22, 0.58, 0.33],  # with
    [0.77, 0.25, 0.10],  # one
    [0.05, 0.80, 0.55],  # step
]


# --- "Life is short, eat dessert first" (seed 123, words, d 16, d_k 24, d_v 28, torch.rand) ---


def life_is_short_reference() -> dict[str, torch.Tensor]:
    sentence = HEADLINE
    dc = {s: i for i, s in enumerate(sorted(sentence.replace(",", "").split()))}
    sentence_int = torch.tensor([dc[s] for s in sentence.replace(",", "").split()])

    torch.manual_seed(123)
    embed = torch.nn.Embedding(6, 16)
    embedded_sentence = embed(sentence_int).detach()  # (6, 16)

    torch.manual_seed(123)
    d = embedded_sentence.shape[1]
    d_q, d_k, d_v = 24, 24, 28
    W_query = torch.rand(d_q, d)
    W_key = torch.rand(d_k, d)
    W_value = torch.rand(d_v, d)

    x_2 = embedded_sentence[1]
    query_2 = W_query.matmul(x_2)  # (24,)
    keys = W_key.matmul(embedded_sentence.T).T  # (6, 24)
    values = W_value.matmul(embedded_sentence.T).T  # (6, 28)
    omega_2 = query_2.matmul(keys.T)  # (6,)
    attention_weights_2 = torch.softmax(omega_2 / d_k**0.5, dim=0)
    context_vector_2 = attention_weights_2.matmul(values)  # (28,)

    # The same steps for all six queries at once.
    queries = W_query.matmul(embedded_sentence.T).T  # (6, 24)
    omega = queries @ keys.T  # (6, 6)
    attention_weights = torch.softmax(omega / d_k**0.5, dim=-1)
    context = attention_weights @ values  # (6, 28)
    return {
        "ids": sentence_int,
        "x": embedded_sentence,
        "W_query": W_query,
        "W_key": W_key,
        "W_value": W_value,
        "queries": queries,
        "keys": keys,
        "values": values,
        "omega": omega,
        "omega_2": omega_2,
        "weights": attention_weights,
        "weights_2": attention_weights_2,
        "context": context,
        "context_2": context_vector_2,
    }


LIFE_CONFIG = Config(tokenizer="words", seed=123, d_model=16, d_k=24, d_v=28, init=Init.uniform)


@pytest.fixture(scope="module")
def life() -> tuple[dict[str, torch.Tensor], object]:
    reference = life_is_short_reference()
    run = ToySource(LIFE_CONFIG).run(HEADLINE)
    return reference, run


def test_life_tokens_and_embeddings(life) -> None:
    ref, run = life
    assert run.tokens.texts == ("Life", "is", "short", "eat", "dessert", "first")
    assert run.tokens.ids == (0, 4, 5, 2, 1, 3)
    assert run.tokens.ids == tuple(ref["ids"].tolist())
    assert run.tokens.vocab_size == 6
    assert run.tokens.tokenizer == "words"
    torch.testing.assert_close(run.layers[0].x[0, :3], torch.tensor([0.3374, -0.1778, -0.3035]), atol=1e-4, rtol=0)
    assert torch.equal(run.layers[0].x, ref["x"])


def test_life_projections_are_the_walkthroughs_torch_rand_matrices(life) -> None:
    ref, run = life
    p = run.layers[0].projections
    assert torch.equal(p.query.weight, ref["W_query"])
    assert torch.equal(p.key.weight, ref["W_key"])
    assert torch.equal(p.value.weight, ref["W_value"])
    assert p.query.bias is None and p.out is None


def test_life_second_token_as_query(life) -> None:
    ref, run = life
    head = run.layers[0].head(0)
    torch.testing.assert_close(head.scores[1], ref["omega_2"], atol=1e-4, rtol=1e-6)
    torch.testing.assert_close(head.weights[1], ref["weights_2"], atol=1e-6, rtol=0)
    torch.testing.assert_close(head.context[1], ref["context_2"], atol=1e-5, rtol=1e-6)


def test_life_full_matrices(life) -> None:
    ref, run = life
    head = run.layers[0].head(0)
    assert head.queries.shape == (6, 24) and head.values.shape == (6, 28)
    assert run.model.config.d_k == 24 and run.model.config.d_v == 28 and run.layers[0].divisor == pytest.approx(24**0.5)
    torch.testing.assert_close(head.queries, ref["queries"], atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(head.keys, ref["keys"], atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(head.values, ref["values"], atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(head.scores, ref["omega"], atol=1e-4, rtol=1e-6)
    torch.testing.assert_close(head.weights, ref["weights"], atol=1e-6, rtol=0)
    torch.testing.assert_close(head.context, ref["context"], atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(run.layers[0].output, ref["context"], atol=1e-5, rtol=1e-6)


def test_life_through_the_command_line(life) -> None:
    ref, _ = life
    result = invoke("run", HEADLINE, "--tokenizer", "words", "--d-k", "24", "--d-v", "28", "--init", "uniform", "--format", "json")
    data = json.loads(result.stdout)
    assert data["tokenizer"] == "words"
    assert [t["id"] for t in data["tokens"]] == [0, 4, 5, 2, 1, 3]
    assert data["model"]["config"]["seed"] == 123 and data["model"]["config"]["d_model"] == 16
    torch.testing.assert_close(torch.tensor(data["layers"][0]["input"]), ref["x"], atol=0, rtol=0)
    torch.testing.assert_close(torch.tensor(data["layers"][0]["heads"][0]["weights"]), ref["weights"], atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.tensor(data["layers"][0]["output"]), ref["context"], atol=1e-5, rtol=1e-6)


# --- "Build a Large Language Model (From Scratch)" ch. 3 classes ---


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = attn_weights @ values
        return context_vec


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = attn_weights @ values
        return context_vec


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)
        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)
        return context_vec


@pytest.fixture
def journey_file(tmp_path: Path) -> Path:
    path = tmp_path / "journey.json"
    path.write_text(json.dumps(JOURNEY_INPUTS), encoding="utf-8")
    return path


def journey_run(path: Path, **options):
    config = Config(embeddings=path, tokenizer="words", init=Init.linear, **options)
    return ToySource(config).run(JOURNEY)


def inputs() -> torch.Tensor:
    return torch.tensor(JOURNEY_INPUTS)  # (6, 3)


def test_journey_file_is_the_books_inputs(journey_file: Path) -> None:
    run = journey_run(journey_file, seed=789, d_k=2, d_v=2)
    assert run.tokens.texts == ("Your", "journey", "starts", "with", "one", "step")
    assert run.model.config.d_model == 3
    assert torch.equal(run.layers[0].x, inputs())


def test_self_attention_v2(journey_file: Path) -> None:
    torch.manual_seed(789)
    sa_v2 = SelfAttention_v2(3, 2)
    with torch.no_grad():
        expected = sa_v2(inputs())  # (6, 2)
    run = journey_run(journey_file, seed=789, d_k=2, d_v=2)
    p = run.layers[0].projections
    assert torch.equal(p.query.weight, sa_v2.W_query.weight)
    assert torch.equal(p.key.weight, sa_v2.W_key.weight)
    assert torch.equal(p.value.weight, sa_v2.W_value.weight)
    torch.testing.assert_close(run.layers[0].output, expected, atol=1e-6, rtol=0)


def test_self_attention_v2_with_qkv_bias(journey_file: Path) -> None:
    torch.manual_seed(789)
    sa_v2 = SelfAttention_v2(3, 2, qkv_bias=True)
    with torch.no_grad():
        expected = sa_v2(inputs())
    run = journey_run(journey_file, seed=789, d_k=2, d_v=2, qkv_bias=True)
    p = run.layers[0].projections
    assert torch.equal(p.value.bias, sa_v2.W_value.bias)
    torch.testing.assert_close(run.layers[0].output, expected, atol=1e-6, rtol=0)


def test_causal_attention(journey_file: Path) -> None:
    torch.manual_seed(123)
    ca = CausalAttention(3, 2, context_length=6, dropout=0.0)
    batch = torch.stack((inputs(), inputs()), dim=0)  # (2, 6, 3), as in the book
    with torch.no_grad():
        expected = ca(batch)
    run = journey_run(journey_file, seed=123, d_k=2, d_v=2, causal=True)
    assert torch.equal(run.layers[0].projections.query.weight, ca.W_query.weight)
    torch.testing.assert_close(run.layers[0].output, expected[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(run.layers[0].output, expected[1], atol=1e-6, rtol=0)
    assert run.layers[0].output[0].tolist() == pytest.approx(run.layers[0].projections.value(inputs())[0].tolist(), abs=1e-6)


def test_causal_attention_with_dropout_replays_the_books_mask(journey_file: Path) -> None:
    # One sequence (the book stacks two): the dropout mask is drawn right after
    # the projections in both, so the same seed gives the same mask.
    torch.manual_seed(123)
    ca = CausalAttention(3, 2, context_length=6, dropout=0.5)
    ca.train()
    with torch.no_grad():
        expected = ca(inputs().unsqueeze(0))[0]
    run = journey_run(journey_file, seed=123, d_k=2, d_v=2, causal=True, dropout=0.5)
    assert run.layers[0].dropped_weights is not None
    assert (run.layers[0].dropped_weights == 0).any()
    torch.testing.assert_close(run.layers[0].output, expected, atol=1e-6, rtol=0)


def test_multi_head_attention(journey_file: Path) -> None:
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2)
    batch = torch.stack((inputs(), inputs()), dim=0)
    with torch.no_grad():
        expected = mha(batch)  # (2, 6, 2)
    run = journey_run(journey_file, seed=123, heads=2, d_k=1, d_v=1, causal=True, out_proj=True)
    p = run.layers[0].projections
    assert torch.equal(p.query.weight, mha.W_query.weight)
    assert torch.equal(p.key.weight, mha.W_key.weight)
    assert torch.equal(p.value.weight, mha.W_value.weight)
    assert torch.equal(p.out.weight, mha.out_proj.weight)
    assert torch.equal(p.out.bias, mha.out_proj.bias)
    assert run.layers[0].queries.shape == (2, 6, 1)
    torch.testing.assert_close(run.layers[0].output, expected[0], atol=1e-6, rtol=0)


def test_multi_head_attention_with_dropout_and_bias(journey_file: Path) -> None:
    torch.manual_seed(5)
    mha = MultiHeadAttention(3, 4, context_length=6, dropout=0.3, num_heads=2, qkv_bias=True)
    mha.train()
    with torch.no_grad():
        expected = mha(inputs().unsqueeze(0))[0]
    run = journey_run(journey_file, seed=5, heads=2, d_k=2, d_v=2, causal=True, out_proj=True, qkv_bias=True, dropout=0.3)
    torch.testing.assert_close(run.layers[0].output, expected, atol=1e-6, rtol=0)


def test_multi_head_attention_through_the_command_line(journey_file: Path) -> None:
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2)
    with torch.no_grad():
        expected = mha(inputs().unsqueeze(0))[0]
    args = ["run", JOURNEY, "--tokenizer", "words", "--embeddings", str(journey_file), "--heads", "2",
            "--d-k", "1", "--d-v", "1", "--causal", "--out-proj", "--format", "json"]  # fmt: skip
    result = invoke(*args)
    data = json.loads(result.stdout)
    assert len(data["layers"][0]["heads"]) == 2
    torch.testing.assert_close(torch.tensor(data["layers"][0]["output"]), expected, atol=1e-6, rtol=0)


# The context vectors "Build a Large Language Model (From Scratch)" ch. 3 prints
# for these three classes (4 decimals; the seed file quotes the code, not its output).
BOOK_PRINTS = [
    ({"seed": 789, "d_k": 2, "d_v": 2},
     [[-0.0739, 0.0713], [-0.0748, 0.0703], [-0.0749, 0.0702], [-0.0760, 0.0685], [-0.0763, 0.0679], [-0.0754, 0.0693]]),
    ({"seed": 123, "d_k": 2, "d_v": 2, "causal": True},
     [[-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632], [-0.5675, -0.0843], [-0.5526, -0.0981], [-0.5299, -0.1081]]),
    ({"seed": 123, "heads": 2, "d_k": 1, "d_v": 1, "causal": True, "out_proj": True},
     [[0.3190, 0.4858], [0.2943, 0.3897], [0.2856, 0.3593], [0.2693, 0.3873], [0.2639, 0.3928], [0.2575, 0.4028]]),
]  # fmt: skip


@pytest.mark.parametrize(("options", "printed"), BOOK_PRINTS, ids=["SelfAttention_v2", "CausalAttention", "MultiHeadAttention"])
def test_the_numbers_the_book_prints(journey_file: Path, options: dict, printed: list[list[float]]) -> None:
    run = journey_run(journey_file, **options)
    torch.testing.assert_close(run.layers[0].output, torch.tensor(printed), atol=5e-5, rtol=0)
