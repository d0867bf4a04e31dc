"""Scaled dot-product self-attention, single- or multi-head, as pure torch.

Shapes: T tokens, D d_model, H heads, Dk per-head query/key size, Dv per-head
value size. Weights are applied as ``y = x W^T (+ b)``, like ``nn.Linear``.

The weight seed contract, replayable in plain PyTorch::

    torch.manual_seed(seed)
    W_q, W_k, W_v = (draw in that order, each followed by its bias if any)
    W_o = (drawn last, when there is an output projection)

where "draw" is ``nn.Linear(in, out, bias=qkv_bias)`` for ``linear`` init,
``torch.rand(out, in)`` for ``uniform`` and ``torch.randn(out, in)`` for
``normal`` (biases: ``torch.rand(out)`` / ``torch.randn(out)``). Head h uses
rows ``h*Dk .. (h+1)*Dk - 1`` of W_q and W_k and rows ``h*Dv ..`` of W_v.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable

import torch

from attn_cli.config import Config, Init
from attn_cli.runtime.errors import ConfigError
from attn_cli.runtime.threads import using_threads


@dataclasses.dataclass(frozen=True)
class Linear:
    """``y = x @ weight.T + bias``."""

    weight: torch.Tensor  # (out, in)
    bias: torch.Tensor | None  # (out,)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight.T  # (T, in) @ (in, out) -> (T, out)
        return y + self.bias if self.bias is not None else y


@dataclasses.dataclass(frozen=True)
class FusedLinear(Linear):
    """``y = x @ weight.T + bias`` as one ``torch.nn.functional.linear`` (an addmm, as
    nn.Linear and transformers compute it): no second pass for the bias, no
    (T, out) temporary. For trained checkpoints only; the toy keeps ``Linear``,
    whose last bits its seed contract and emitted scripts reproduce."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)  # (T, in) -> (T, out)


@dataclasses.dataclass(frozen=True)
class Projections:
    query: Linear | None  # (H*Dk, D); None: Q = K = V = X
    key: Linear | None  # (H*Dk, D)
    value: Linear | None  # (H*Dv, D)
    out: Linear | None  # (H*Dv, H*Dv); None: output = concat
    # A family's norms of the projected queries and keys, (T, H*Dk) -> (T, H*Dk), before
    # the heads are split and rotated (Qwen 3, Gemma 3: per head; OLMo 2: all heads at once)
    query_norm: Callable[[torch.Tensor], torch.Tensor] | None = None
    key_norm: Callable[[torch.Tensor], torch.Tensor] | None = None

    def queries_keys(self, x: torch.Tensor, source: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(T, H*Dk) queries and (S, Hkv*Dk) keys from X (T, D) and, for cross-attention, the
        keys' own sequence ``source`` (S, D) (else X: S = T): projected, then normed where the
        family norms them."""
        assert self.query is not None and self.key is not None
        queries, keys = self.query(x), self.key(x if source is None else source)  # (T, H*Dk), (S, Hkv*Dk)
        if self.query_norm is not None:
            queries = self.query_norm(queries)
        if self.key_norm is not None:
            keys = self.key_norm(keys)
        return queries, keys


@dataclasses.dataclass(frozen=True)
class HeadResult:
    """One head's tensors (views into the LayerAttention)."""

    head: int
    queries: torch.Tensor  # (T, Dk)
    keys: torch.Tensor  # (T, Dk)
    values: torch.Tensor  # (T, Dv)
    scores: torch.Tensor  # (T, T) raw Q K^T
    scaled_scores: torch.Tensor  # (T, T) softmax input, masked cells -inf
    weights: torch.Tensor  # (T, T) softmax; rows sum to 1
    context: torch.Tensor  # (T, Dv) weights (after dropout, if any) @ V


@dataclasses.dataclass(frozen=True)
class LayerWeights:
    """One attention layer's weights and what reading them needs: the record a trace
    keeps at ``keep="weights"``, for commands that draw or score the weights only
    (`heads`, `heatmap --what weights`). It holds no per-head vectors: a renderer
    that needs queries, keys, values or the context takes a ``LayerAttention``,
    and reading one of them here raises AttributeError."""

    weights: torch.Tensor  # (H, T, T) softmax of the scaled, masked scores
    mask: torch.Tensor | None  # (T, T) True = the query may not see the key (causal, window); None: nothing hidden
    divisor: float  # scaled_scores = scores / divisor
    layer: int = 0  # 0-based index in the model
    divisor_text: str = ""  # the divisor as a formula, e.g. "sqrt(64)"; "" when it is 1
    threads: int = 0  # torch's intra-op threads the layer was computed with (0: not recorded)
    # What else the softmax read, in this order after the division (trained families only):
    bias: torch.Tensor | None = None  # (H, T, T) or (1, T, T) added to the scaled scores (MPNet's relative positions)
    softcap: float | None = None  # the scaled scores became softcap * tanh(s / softcap) (Gemma 2)
    # Value-weighted norms (attn_cli.analysis.norms), when asked for (--norms):
    norms: torch.Tensor | None = None  # (H, T, T) ||a_ij^h f_h(x_j)||: what head h moves from key j to query i
    layer_norms: torch.Tensor | None = None  # (T, T) ||sum_h a_ij^h f_h(x_j)||: what the layer moves
    cross: bool = False  # cross-attention: (H, T, S), queries from one text, keys from another (an encoder-decoder's)

    @property
    def n_heads(self) -> int:
        return self.weights.shape[0]

    @property
    def causal(self) -> bool:
        """Whether any key is hidden from some query (renderers call such a layer masked)."""
        return self.mask is not None and bool(self.mask.any())

    def masked(self, query: int, key: int) -> bool:
        return self.mask is not None and bool(self.mask[query, key])

    def visible_keys(self) -> list[int]:
        """(T,) how many keys each query may attend to."""
        n_tokens = self.weights.shape[-1]
        if self.mask is None:
            return [n_tokens] * n_tokens
        return (~self.mask).sum(dim=-1).tolist()  # (T, T) -> (T,)

    def weights_only(self) -> LayerWeights:
        """This layer as the lighter record (itself when it is one): the weights, the
        mask and the divisor, without the vectors that made them."""
        if type(self) is LayerWeights:
            return self
        return LayerWeights(
            self.weights, self.mask, self.divisor, self.layer, self.divisor_text, self.threads, self.bias, self.softcap,
            self.norms, self.layer_norms, self.cross,
        )  # fmt: skip

    def softmax_input(
        self, scores: torch.Tensor, start: int = 0, stop: int | None = None, head: int | None = None
    ) -> torch.Tensor:
        """The softmax input of rows ``start:stop`` from their raw scores, (H, R, T) for
        every head or (R, T) for ``head``: the division, this layer's bias and
        soft-capping, the mask; the operations ``attention_weights`` made the weights with."""
        rows = slice(start, stop)
        bias = self.bias
        if bias is not None:
            bias = bias[:, rows, :]  # (H or 1, R, T)
            if head is not None:
                bias = bias[head % bias.shape[0]]  # (R, T)
        mask = None if self.mask is None else self.mask[rows]
        return _softmax_input(scores, self.divisor, mask, bias, self.softcap)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SavedScores(LayerWeights):
    """A layer read back from a saved trace (``--from``): its weights and, as the file
    holds them, the raw scores and the softmax input (``-inf`` where the mask hides a
    key); no vectors. The page and the pictures show these scores as saved."""

    scores: torch.Tensor  # (H, T, T) raw Q K^T
    scaled_scores: torch.Tensor  # (H, T, T) the softmax input, masked cells -inf


# kw_only: the vectors follow LayerWeights' fields, some of which have defaults.
@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerAttention(LayerWeights):
    """One attention layer's tensors, whatever made them (the seeded toy model or a
    trained checkpoint): what every renderer reads (``keep="all"``).

    Head h's queries, keys and values are what its scores were computed from:
    after RoPE where the family has it, and for grouped-query attention the
    key/value head the query head shares (repeated, so index h always works).
    """

    queries: torch.Tensor  # (H, T, Dk)
    keys: torch.Tensor  # (H, T, Dk)
    values: torch.Tensor  # (H, T, Dv)
    dropped_weights: torch.Tensor | None  # (H, T, T) weights after dropout, when dropout > 0
    context: torch.Tensor  # (H, T, Dv)
    concat: torch.Tensor  # (T, H*Dv) heads side by side
    output: torch.Tensor  # (T, Dout) concat, through W_o when there is one
    projections: Projections  # the layer's W_q, W_k, W_v (all heads' rows) and W_o; query None: Q = K = V = X
    x: torch.Tensor | None = None  # (T, D) what the projections read: the toy's X, a checkpoint layer's normed input
    source: torch.Tensor | None = None  # (S, D) cross-attention: what the keys and values read (the encoder's output)

    # The raw and scaled scores are derived, not stored: a run keeps one T x T
    # tensor per head (the weights), like torch's own attention, and recomputing
    # them repeats the very operations that made the weights, on as many threads
    # (a BLAS may sum in another order on another count), so the numbers agree.
    @functools.cached_property
    def scores(self) -> torch.Tensor:
        """(H, T, T) raw Q K^T (computed on first use)."""
        with using_threads(self.threads) if self.threads else contextlib.nullcontext():
            return self.queries @ self.keys.transpose(-2, -1)  # (H, T, Dk) @ (H, Dk, T) -> (H, T, T)

    @property
    def scaled_scores(self) -> torch.Tensor:
        """(H, T, T) the softmax input, masked cells -inf."""
        return self.softmax_input(self.scores)

    def scaled_score(self, h: int, query: int, key: int) -> float:
        """One cell of ``scaled_scores`` without deriving the whole (H, T, T) tensor:
        the same float32 operations, the same mask."""
        if self.masked(query, key):
            return -math.inf
        bias = None if self.bias is None else self.bias[h % self.bias.shape[0], query, key]  # ()
        return _softmax_input(self.scores[h, query, key], self.divisor, None, bias, self.softcap).item()  # () float32

    def head(self, h: int) -> HeadResult:
        scores = self.scores[h]  # (T, T)
        return HeadResult(
            head=h,
            queries=self.queries[h],
            keys=self.keys[h],
            values=self.values[h],
            scores=scores,
            scaled_scores=self.softmax_input(scores, head=h),
            weights=self.weights[h],
            context=self.context[h],
        )


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
    _check_finite((q, k, v), "the queries, keys or values", "use smaller embeddings or another --init")
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
    _check_finite((output,), "the output projection", "use smaller embeddings or drop --out-proj")
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


def attend(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    divisor: float,
    mask: torch.Tensor | None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / divisor (+ bias, soft-capped), masked) V, the one masked softmax
    every source uses.

    Shapes: queries (H, T, Dk), keys (H, T, Dk), values (H, T, Dv), mask (T, T)
    True = hidden, bias (H, T, T) or (1, T, T) -> (context (H, T, Dv), weights (H, T, T)).
    ``out``: the (H, T, T) block the weights are written into (``attention_weights``).
    """
    weights = attention_weights(queries, keys, divisor=divisor, mask=mask, bias=bias, softcap=softcap, out=out)
    return weights @ values, weights  # (H, T, T) @ (H, T, Dv) -> (H, T, Dv)


def attention_weights(
    queries: torch.Tensor,
    keys: torch.Tensor,
    *,
    divisor: float,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(Q K^T / divisor, masked) over the keys. Shapes (..., T, Dk) -> (..., T, T);
    ``mask`` (T, T) is True where a query may not see a key (every row must keep one key).
    A family's score modifiers come after the division, before the mask, as
    transformers applies them: ``bias`` (..., T, T) added (MPNet's relative
    positions), then ``softcap`` * tanh(s / ``softcap``) (Gemma 2's soft-capping).

    Every step works in place in one (..., T, T) buffer, so the peak memory is one
    T x T tensor per head, as in torch's own attention: a new one, or ``out`` (a block of
    that shape and dtype the caller chose where it lives).
    """
    transposed = keys.transpose(-2, -1)  # (H, Dk, T)
    weights = queries @ transposed if out is None else torch.matmul(queries, transposed, out=out)  # (H, T, T) raw scores
    weights.div_(divisor)  # the same operation as _softmax_input, so scaled_scores agree
    if bias is not None:
        weights.add_(bias)  # (H, T, T) + (H or 1, T, T)
    if softcap is not None:
        weights.div_(softcap).tanh_().mul_(softcap)
    if mask is not None:
        weights.add_(hiding(mask, weights.dtype))  # (H, T, T) + (T, T): -inf where hidden, 0 elsewhere
    # softmax subtracts the row max, so large finite inputs cannot overflow; a
    # masked cell is exp(-inf) = exactly 0.
    _softmax_(weights)
    if not math.isfinite(float(weights.sum())):
        _explain_overflow(queries, keys, divisor)
    return weights


def _softmax_(x: torch.Tensor) -> None:
    """Softmax over the last dimension, written back into x one (T, T) block at a
    time: torch.softmax's own numbers (public API) with one block of extra memory,
    not a second (H, T, T), and that block allocated once for every head. A masked
    cell (-inf) becomes exactly 0. Half-precision scores are exponentiated in
    float32 and rounded back, as transformers' eager attention does."""
    blocks = x.reshape(-1, *x.shape[-2:]) if x.dim() > 2 else x.unsqueeze(0)  # (..., T, T) -> (B, T, T), a view
    scratch = torch.empty(blocks.shape[-2:], dtype=torch.float32, device=x.device)  # (T, T)
    for block in blocks:
        torch.softmax(block, dim=-1, dtype=torch.float32, out=scratch)  # (T, T)
        block.copy_(scratch)  # cast back to x's dtype


def _explain_overflow(queries: torch.Tensor, keys: torch.Tensor, divisor: float) -> None:
    """Raise the error that says which step overflowed float32 (weights came out NaN or inf)."""
    scores = queries @ keys.transpose(-2, -1)  # (H, T, T)
    _check_finite((scores,), "the attention scores Q K^T", "use smaller embeddings")
    raise ConfigError(
        f"the softmax input (scores divided by {divisor:.3g}): a value overflows float32 "
        f"(beyond +-3.4e38); raise --temperature"
    )


def hiding(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(T, T) -inf where ``mask`` hides a key, 0 where a query sees it: added to finite scores,
    the masked_fill(mask, -inf) of ``_softmax_input`` cell for cell (s + 0 is s, s - inf is -inf),
    in one vectorised add (a masked_fill_ through a mask broadcast over the heads took 3.6 ms
    of a 16 x 512 x 512 table, the add 0.4). A score that overflowed to +inf where it is hidden
    becomes NaN, which ``attention_weights`` reports as the overflow it is."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))


def causal_mask(n_tokens: int) -> torch.Tensor:
    """(T, T) True above the diagonal: the keys a query may not see."""
    return torch.ones(n_tokens, n_tokens, dtype=torch.bool).triu(diagonal=1)


def _softmax_input(
    scores: torch.Tensor,
    divisor: float,
    mask: torch.Tensor | None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """The softmax input from raw scores, in ``attention_weights``' order of operations."""
    scaled = scores / divisor  # (..., T, T)
    if bias is not None:
        scaled = scaled + bias
    if softcap is not None:
        scaled = torch.tanh(scaled / softcap) * softcap
    if mask is not None:
        scaled = scaled.masked_fill(mask, float("-inf"))
    return scaled


AttentionResult = LayerAttention  # the name before layers (the Python API keeps it)


def _check_finite(tensors: tuple[torch.Tensor, ...], what: str, fix: str) -> None:
    if not all(bool(torch.isfinite(t).all()) for t in tensors):
        raise ConfigError(f"{what}: a value overflows float32 (beyond +-3.4e38); {fix}")


def split_heads(m: torch.Tensor, heads: int) -> torch.Tensor:
    """Head h's columns of a (..., T, H*d) projection, heads first (a checkpoint's
    ablations run a batch of texts: the leading dimensions)."""
    return m.reshape(*m.shape[:-1], heads, -1).transpose(-3, -2)  # (..., T, H*d) -> (..., T, H, d) -> (..., H, T, d)


def _draw(init: Init, d_in: int, d_out: int, bias: bool) -> Linear:
    with torch.no_grad():
        if init is Init.linear:
            layer = torch.nn.Linear(d_in, d_out, bias=bias)
            return Linear(layer.weight.detach(), layer.bias.detach() if bias else None)
        rand = torch.rand if init is Init.uniform else torch.randn
        weight = rand(d_out, d_in)  # (out, in)
        return Linear(weight, rand(d_out) if bias else None)
