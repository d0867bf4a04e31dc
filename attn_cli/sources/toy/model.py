"""The seeded toy model's one attention layer: its projections drawn per the seed
contract, then the one masked softmax (``attn_cli.sources.attend``).

The weight seed contract, replayable in plain PyTorch::

    torch.manual_seed(seed)
    W_q, W_k, W_v = (draw in that order, each followed by its bias if any)
    W_o = (drawn last, when there is an output projection)

where "draw" is ``nn.Linear(in, out, bias=qkv_bias)`` for ``linear`` init,
``torch.rand(out, in)`` for ``uniform`` and ``torch.randn(out, in)`` for
``normal`` (biases: ``torch.rand(out)`` / ``torch.randn(out)``). Head h uses
rows ``h*Dk .. (h+1)*Dk - 1`` of W_q and W_k and rows ``h*Dv ..`` of W_v.

Shapes: T tokens, D d_model, H heads, Dk per-head query/key size, Dv per-head value size.
"""

from __future__ import annotations

import math

import torch

from attn_cli.records.layers import LayerAttention, Linear, Projections
from attn_cli.sources.attend import attention_weights, causal_mask, check_finite, split_heads
from attn_cli.sources.toy.config import Config, Init


def make_projections(config: Config, d_in: int) -> Projections:
    """Draw W_q, W_k, W_v (and W_o) per the seed contract; ``config`` must be resolved."""
    heads, d_k, d_v = config.heads, config.d_k, config.d_v
    assert d_k is not None and d_v is not None, "resolve the config first"
    torch.manual_seed(config.seed)
    query = key = value = None
    if config.projections:
        query = _draw(config.init, d_in, heads * d_k, config.qkv_bias)
        key = _draw(config.init, d_in, heads * d_k, config.qkv_bias)
        value = _draw(config.init, d_in, heads * d_v, config.qkv_bias)
    out = _draw(config.init, heads * d_v, heads * d_v, True) if config.out_proj else None
    return Projections(query, key, value, out)


def self_attention(x: torch.Tensor, config: Config, projections: Projections | None = None) -> LayerAttention:
    """Run attention over X (T, D) as ``config`` (resolved) says.

    ``projections`` lets a caller reuse the ones ``make_projections`` drew for the
    same config; it must then leave the generator as that draw did (dropout
    carries on from it).
    """
    n_tokens, d_in = x.shape
    heads = config.heads
    if projections is None:
        projections = make_projections(config, d_in)
    if projections.query and projections.key and projections.value:
        q, k, v = projections.query(x), projections.key(x), projections.value(x)  # (T, H*Dk), (T, H*Dk), (T, H*Dv)
    else:
        q = k = v = x  # (T, D), D = H*Dk = H*Dv
    check_finite((q, k, v), "the queries, keys or values", "use smaller embeddings or another --init")
    queries = split_heads(q, heads)  # (T, H*Dk) -> (H, T, Dk)
    keys = split_heads(k, heads)  # (T, H*Dk) -> (H, T, Dk)
    values = split_heads(v, heads)  # (T, H*Dv) -> (H, T, Dv)

    d_k = queries.shape[-1]
    divisor = (math.sqrt(d_k) if config.scale else 1.0) * config.temperature
    mask = causal_mask(n_tokens) if config.causal else None  # (T, T)
    weights = attention_weights(queries, keys, divisor=divisor, mask=mask)
    dropped = None
    if config.dropout > 0:
        # Seeded: the generator carries on from the projection draws.
        dropped = torch.nn.functional.dropout(weights, p=config.dropout, training=True)  # (H, T, T)
    context = (dropped if dropped is not None else weights) @ values  # (H, T, T) @ (H, T, Dv) -> (H, T, Dv)
    concat = context.transpose(0, 1).reshape(n_tokens, -1)  # (H, T, Dv) -> (T, H, Dv) -> (T, H*Dv)
    output = projections.out(concat) if projections.out else concat  # (T, H*Dv)
    check_finite((output,), "the output projection", "use smaller embeddings or drop --out-proj")
    return LayerAttention(
        queries=queries,
        keys=keys,
        values=values,
        weights=weights,
        dropped_weights=dropped,
        context=context,
        concat=concat,
        output=output,
        divisor=divisor,
        mask=mask,
        projections=projections,
        x=x,
        divisor_text=_divisor_text(d_k, config.scale, config.temperature),
    )


def _divisor_text(d_k: int, scale: bool, temperature: float) -> str:
    parts = ([f"sqrt({d_k})"] if scale else []) + ([f"{temperature:g}"] if temperature != 1.0 else [])
    return parts[0] if len(parts) == 1 else "(" + " * ".join(parts) + ")" if parts else ""


def _draw(init: Init, d_in: int, d_out: int, bias: bool) -> Linear:
    with torch.no_grad():
        if init is Init.linear:
            layer = torch.nn.Linear(d_in, d_out, bias=bias)
            return Linear(layer.weight.detach(), layer.bias.detach() if bias else None)
        rand = torch.rand if init is Init.uniform else torch.randn
        weight = rand(d_out, d_in)  # (out, in)
        return Linear(weight, rand(d_out) if bias else None)
