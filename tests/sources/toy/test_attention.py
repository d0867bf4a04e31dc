"""The attention engine against torch's own attention, and its invariants.

References: ``F.scaled_dot_product_attention`` (every variant: heads, causal,
scale on/off, temperature, biases, unequal d_k/d_v) and ``nn.MultiheadAttention``
with our weights copied in. Weights are also recomputed from the textbook
formula in float64. Q, K and V for the references are rebuilt from the drawn
weight matrices, so a wrong head split or a transposed weight fails here.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_cli.sources.attend import attention_weights, causal_mask
from attn_cli.sources.toy.model import make_projections, self_attention
from attn_cli.sources.toy.config import Config, Init
from attn_cli.runtime.errors import ConfigError

TOL = {"atol": 1e-5, "rtol": 1e-5}


def attend(x: torch.Tensor, **options) -> tuple[Config, object]:
    config = Config(**options).resolved(x.shape[1])
    return config, self_attention(x, config)


def random_x(n_tokens: int, d_model: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n_tokens, d_model, generator=generator)  # (T, D)


def reference_qkv(x: torch.Tensor, config: Config, projections) -> tuple[torch.Tensor, ...]:
    """Q, K, V per head, (H, T, d), built head by head from the weight rows."""
    if not config.projections:
        per_head = x.shape[1] // config.heads
        split = [x[:, h * per_head : (h + 1) * per_head] for h in range(config.heads)]
        return (torch.stack(split),) * 3

    def project(linear, size: int) -> torch.Tensor:
        heads = []
        for h in range(config.heads):
            rows = slice(h * size, (h + 1) * size)
            y = x @ linear.weight[rows].T  # (T, D) @ (D, d) -> (T, d)
            heads.append(y + linear.bias[rows] if linear.bias is not None else y)
        return torch.stack(heads)  # (H, T, d)

    return project(projections.query, config.d_k), project(projections.key, config.d_k), project(projections.value, config.d_v)


def formula_weights(q: torch.Tensor, k: torch.Tensor, factor: float, causal: bool) -> torch.Tensor:
    """softmax(Q K^T * factor, future keys -inf), in float64."""
    s = (q.double() @ k.double().transpose(-2, -1)) * factor  # (H, T, T)
    if causal:
        n = s.shape[-1]
        s = s + torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_factor(config: Config) -> float:
    return (1 / math.sqrt(config.d_k) if config.scale else 1.0) / config.temperature


configs = st.fixed_dictionaries(
    {
        "n_tokens": st.integers(1, 9),
        "heads": st.integers(1, 4),
        "d_k": st.integers(1, 6),
        "d_v": st.integers(1, 6),
        "d_model": st.integers(1, 12),
        "causal": st.booleans(),
        "scale": st.booleans(),
        "temperature": st.sampled_from([1.0, 0.5, 2.0, 3.7]),
        "qkv_bias": st.booleans(),
        "out_proj": st.booleans(),
        "init": st.sampled_from(list(Init)),
        "seed": st.integers(0, 2**31),
    }
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(configs)
def test_matches_scaled_dot_product_attention(c: dict) -> None:
    x = random_x(c.pop("n_tokens"), c.pop("d_model"), c["seed"] + 1)
    if c["init"] is Init.uniform:
        x = x / 4  # torch.rand weights are all positive: keep the scores in a range where 1e-5 is meaningful
    config, result = attend(x, **c)
    q, k, v = reference_qkv(x, config, result.projections)
    factor = softmax_factor(config)

    expected = F.scaled_dot_product_attention(q, k, v, is_causal=config.causal, scale=factor)  # (H, T, Dv)
    torch.testing.assert_close(result.queries, q, **TOL)
    torch.testing.assert_close(result.keys, k, **TOL)
    torch.testing.assert_close(result.values, v, **TOL)
    torch.testing.assert_close(result.context, expected, **TOL)
    torch.testing.assert_close(result.weights, formula_weights(q, k, factor, config.causal).float(), **TOL)
    torch.testing.assert_close(result.scores, q @ k.transpose(-2, -1), **TOL)
    assert result.divisor == pytest.approx(1 / factor)

    concat = torch.cat(list(expected), dim=-1)  # heads side by side: (T, H*Dv)
    torch.testing.assert_close(result.concat, concat, **TOL)
    if config.out_proj:
        w_o = result.projections.out
        torch.testing.assert_close(result.output, concat @ w_o.weight.T + w_o.bias, **TOL)
    else:
        assert result.projections.out is None
        assert torch.equal(result.output, result.concat)


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [False, True])
def test_no_projections_matches_scaled_dot_product_attention(heads: int, causal: bool, scale: bool) -> None:
    x = random_x(7, 8, seed=heads)
    config, result = attend(x, heads=heads, causal=causal, scale=scale, projections=False, temperature=1.5)
    split = x.reshape(7, heads, 8 // heads).transpose(0, 1)  # (H, T, D/H)
    for tensor in (result.queries, result.keys, result.values):
        assert torch.equal(tensor, split)
    assert config.d_k == config.d_v == 8 // heads
    factor = (1 / math.sqrt(8 // heads) if scale else 1.0) / 1.5
    expected = F.scaled_dot_product_attention(split, split, split, is_causal=causal, scale=factor)
    torch.testing.assert_close(result.context, expected, **TOL)
    assert result.projections.query is None and result.projections.key is None and result.projections.value is None


MHA_CASES = [
    # (T, d_model, heads, causal, qkv_bias, out_proj, init)
    (5, 4, 1, False, False, False, Init.linear),
    (6, 8, 2, True, False, True, Init.linear),
    (6, 8, 4, False, True, True, Init.normal),
    (7, 6, 3, True, True, False, Init.linear),
    (3, 12, 4, True, False, False, Init.normal),
    (8, 16, 2, False, True, True, Init.uniform),
    (1, 4, 2, True, True, True, Init.linear),
]


@pytest.mark.parametrize(("n_tokens", "d_model", "heads", "causal", "qkv_bias", "out_proj", "init"), MHA_CASES)
def test_matches_nn_multihead_attention(n_tokens, d_model, heads, causal, qkv_bias, out_proj, init) -> None:
    x = random_x(n_tokens, d_model, seed=d_model * 31 + heads)
    if init is Init.uniform:
        x = x / 4
    config, result = attend(x, heads=heads, causal=causal, qkv_bias=qkv_bias, out_proj=out_proj, init=init, seed=7)
    p = result.projections
    # nn.MultiheadAttention always has an output projection, and with bias=False
    # no bias anywhere: give it biases when either side needs one, zero where we have none.
    mha = torch.nn.MultiheadAttention(d_model, heads, bias=qkv_bias or out_proj, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([p.query.weight, p.key.weight, p.value.weight]))  # (3D, D)
        if mha.in_proj_bias is not None:
            zeros = torch.zeros(d_model)
            biases = [(lin.bias if lin.bias is not None else zeros) for lin in (p.query, p.key, p.value)]
            mha.in_proj_bias.copy_(torch.cat(biases))
        if out_proj:
            mha.out_proj.weight.copy_(p.out.weight)
            mha.out_proj.bias.copy_(p.out.bias)
        else:
            mha.out_proj.weight.copy_(torch.eye(d_model))
            if mha.out_proj.bias is not None:
                mha.out_proj.bias.zero_()
    mha.eval()
    mask = causal_mask(n_tokens) if causal else None
    with torch.no_grad():
        out, weights = mha(x[None], x[None], x[None], need_weights=True, average_attn_weights=False, attn_mask=mask)
    torch.testing.assert_close(result.weights, weights[0], **TOL)  # (H, T, T)
    torch.testing.assert_close(result.output, out[0], **TOL)  # (T, D)


# --- invariants ---


@pytest.mark.parametrize("causal", [False, True])
def test_rows_sum_to_one_and_masked_cells_are_exactly_zero(causal: bool) -> None:
    x = random_x(9, 12, seed=3) * 30  # large scores: the softmax must stay finite
    _, result = attend(x, heads=3, causal=causal, scale=False)
    assert torch.isfinite(result.weights).all()
    torch.testing.assert_close(result.weights.sum(-1), torch.ones(3, 9), atol=1e-6, rtol=0)
    above = torch.ones(9, 9, dtype=torch.bool).triu(1)
    if causal:
        assert (result.weights[:, above] == 0.0).all()
        assert (result.scaled_scores[:, above] == float("-inf")).all()
        assert torch.isfinite(result.scaled_scores[:, ~above]).all()
        assert torch.equal(result.weights[:, 0, 0], torch.ones(3))
    else:
        assert (result.weights > 0).any(dim=-1).all() and torch.isfinite(result.scaled_scores).all()


def test_scaled_scores_are_the_softmax_input() -> None:
    x = random_x(5, 8, seed=4)
    _, result = attend(x, heads=2, causal=True, temperature=0.7)
    torch.testing.assert_close(torch.softmax(result.scaled_scores, -1), result.weights, atol=1e-7, rtol=0)
    head = result.head(1)
    assert torch.equal(head.scaled_scores, result.scaled_scores[1])
    assert torch.equal(head.weights, result.weights[1]) and torch.equal(head.context, result.context[1])
    unmasked = ~causal_mask(5)
    torch.testing.assert_close(result.scaled_scores[:, unmasked], result.scores[:, unmasked] / (2 * 0.7), atol=1e-6, rtol=1e-6)


def test_temperature_flattens_and_sharpens() -> None:
    x = random_x(6, 8, seed=5)
    _, cold = attend(x, temperature=0.1)
    _, hot = attend(x, temperature=10.0)
    assert (cold.weights.amax(-1) > hot.weights.amax(-1)).all()
    assert torch.equal(cold.scores, hot.scores)


def test_same_seed_same_tensors_different_seed_different() -> None:
    x = random_x(6, 8, seed=6)
    options = dict(heads=2, qkv_bias=True, out_proj=True, dropout=0.2)
    _, a = attend(x, seed=11, **options)
    _, b = attend(x, seed=11, **options)
    _, c = attend(x, seed=12, **options)
    for name in ("queries", "keys", "values", "scores", "weights", "dropped_weights", "context", "output"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert not torch.equal(a.queries, c.queries)
    assert not torch.equal(a.output, c.output)


def test_dropout_is_seeded_and_applied_to_the_weights() -> None:
    x = random_x(8, 8, seed=7)
    _, a = attend(x, seed=3, dropout=0.5)
    _, b = attend(x, seed=3, dropout=0.5)
    _, none = attend(x, seed=3)
    assert torch.equal(a.dropped_weights, b.dropped_weights)
    assert none.dropped_weights is None
    assert torch.equal(a.weights, none.weights)  # dropout leaves the reported weights alone
    kept = a.dropped_weights != 0
    assert (~kept).any() and kept.any()
    torch.testing.assert_close(a.dropped_weights[kept], a.weights[kept] * 2, atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(a.context, a.dropped_weights @ a.values, atol=1e-6, rtol=1e-6)
    # The mask is the next draw after the projections, as nn.Dropout in the book's classes.
    torch.manual_seed(3)
    for _ in range(3):
        torch.nn.Linear(8, 8, bias=False)
    expected = F.dropout(none.weights, p=0.5, training=True)
    assert torch.equal(a.dropped_weights, expected)


def _replay(seed: int, init: Init, d_in: int, outs: list[int], bias: bool, out_proj: int | None):
    torch.manual_seed(seed)
    drawn = []
    for d_out in outs:
        if init is Init.linear:
            layer = torch.nn.Linear(d_in, d_out, bias=bias)
            drawn.append((layer.weight.detach(), layer.bias.detach() if bias else None))
        else:
            rand = torch.rand if init is Init.uniform else torch.randn
            weight = rand(d_out, d_in)
            drawn.append((weight, rand(d_out) if bias else None))
    if out_proj:
        if init is Init.linear:
            layer = torch.nn.Linear(out_proj, out_proj)
            drawn.append((layer.weight.detach(), layer.bias.detach()))
        else:
            rand = torch.rand if init is Init.uniform else torch.randn
            weight = rand(out_proj, out_proj)
            drawn.append((weight, rand(out_proj)))
    return drawn


@pytest.mark.parametrize("init", list(Init))
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out_proj", [False, True])
def test_weight_seed_contract(init: Init, bias: bool, out_proj: bool) -> None:
    """manual_seed(seed), then query, key, value (each weight then its bias), then W_o."""
    config = Config(seed=42, d_model=6, heads=2, d_k=3, d_v=5, init=init, qkv_bias=bias, out_proj=out_proj).resolved(6)
    p = make_projections(config, 6)
    expected = _replay(42, init, 6, [6, 6, 10], bias, 10 if out_proj else None)
    got = [p.query, p.key, p.value] + ([p.out] if out_proj else [])
    assert len(got) == len(expected)
    for linear, (weight, b) in zip(got, expected):
        assert torch.equal(linear.weight, weight)
        assert (linear.bias is None) == (b is None)
        if b is not None:
            assert torch.equal(linear.bias, b)


def test_uniform_init_is_torch_rand_and_linear_is_nn_linear() -> None:
    uniform = make_projections(Config(seed=1, d_model=4, init=Init.uniform).resolved(4), 4)
    assert (uniform.query.weight >= 0).all() and (uniform.query.weight < 1).all()
    linear = make_projections(Config(seed=1, d_model=4, init=Init.linear).resolved(4), 4)
    bound = 1 / math.sqrt(4)  # nn.Linear's kaiming-uniform bound for fan_in 4
    assert (linear.query.weight.abs() <= bound).all()


def test_head_h_uses_its_own_rows_of_the_projection() -> None:
    x = random_x(5, 6, seed=8)
    config, result = attend(x, heads=3, d_k=2, d_v=4)
    p = result.projections
    assert p.query.weight.shape == (6, 6) and p.value.weight.shape == (12, 6)
    for h in range(3):
        torch.testing.assert_close(result.queries[h], x @ p.query.weight[2 * h : 2 * h + 2].T, atol=1e-6, rtol=0)
        torch.testing.assert_close(result.keys[h], x @ p.key.weight[2 * h : 2 * h + 2].T, atol=1e-6, rtol=0)
        torch.testing.assert_close(result.values[h], x @ p.value.weight[4 * h : 4 * h + 4].T, atol=1e-6, rtol=0)
    assert result.concat.shape == (5, 12) and torch.equal(result.concat[:, 4:8], result.context[1])


def test_attention_weights_helper_shapes() -> None:
    q = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    weights = attention_weights(q, q, divisor=1.0, mask=causal_mask(4))
    assert weights.shape == (2, 4, 4)
    torch.testing.assert_close(weights, torch.softmax((q @ q.transpose(-2, -1)).masked_fill(causal_mask(4), float("-inf")), -1))
    assert torch.equal(causal_mask(3), torch.tensor([[False, True, True], [False, False, True], [False, False, False]]))


@pytest.mark.parametrize(
    ("scale", "temperature", "x_scale"),
    [(True, 1e-45, 1.0), (True, 1e-300, 1.0), (False, 1.0, 1e25)],
)
def test_overflowing_softmax_input_is_a_config_error_not_nan(scale: bool, temperature: float, x_scale: float) -> None:
    x = random_x(4, 4, seed=9) * x_scale
    with pytest.raises(ConfigError, match="overflow") as info:
        attend(x, scale=scale, temperature=temperature, projections=False)
    assert "\n" not in str(info.value)


def test_tiny_but_representable_temperature_is_one_hot() -> None:
    x = random_x(4, 4, seed=10)
    _, result = attend(x, temperature=1e-20, projections=False)
    assert torch.isfinite(result.weights).all()
    assert torch.equal(result.weights.amax(-1), torch.ones(1, 4))


# --- memory estimate (check_memory) ---


def test_memory_estimate_counts_the_projection_weights_and_the_table() -> None:
    from attn_cli.sources.toy.source import estimate_bytes

    base = Config(d_model=1024).resolved(1024)
    # One token, but W_q, W_k, W_v are each 1024 x 1024 floats: 12 MiB at least.
    assert estimate_bytes(base, 1) >= 3 * 1024 * 1024 * 4
    no_proj = Config(d_model=1024, projections=False).resolved(1024)
    assert estimate_bytes(no_proj, 1) < 1024 * 1024
    with_out = Config(d_model=1024, out_proj=True).resolved(1024)
    assert estimate_bytes(with_out, 1) - estimate_bytes(base, 1) == 1024 * 1024 * 4
    assert estimate_bytes(base, 1, vocab_size=50257) - estimate_bytes(base, 1) == 50257 * 1024 * 4


@pytest.mark.parametrize(
    ("options", "n_tokens", "vocab_size", "fix"),
    [
        ({"d_model": 4096}, 2, 0, "lower --d-model, --d-k, --d-v or --heads"),
        ({"d_model": 4, "heads": 4}, 5000, 0, "use a shorter text or fewer heads"),
        ({"d_model": 64, "projections": False}, 2, 10**6, "lower --d-model or use a smaller tokenizer"),
    ],
)
def test_check_memory_names_the_biggest_part(monkeypatch, options: dict, n_tokens: int, vocab_size: int, fix: str) -> None:
    from attn_cli.runtime import budget
    from attn_cli.sources.toy.source import check_memory, estimate_bytes
    from attn_cli.runtime.errors import TooLargeError

    config = Config(**options).resolved(options["d_model"])
    need = estimate_bytes(config, n_tokens, vocab_size)
    monkeypatch.setattr(budget, "available_bytes", lambda: need)  # 80% of it is usable: too little
    with pytest.raises(TooLargeError) as info:
        check_memory(config, n_tokens, vocab_size)
    assert str(info.value).endswith(fix)
    monkeypatch.setattr(budget, "available_bytes", lambda: 2 * need)
    check_memory(config, n_tokens, vocab_size)
