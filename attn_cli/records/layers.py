"""A layer's attention as every stage hands it on, whatever computed it (the seeded toy
model, a trained checkpoint, a saved file): ``LayerWeights`` (the weights, mask and
divisor), ``LayerAttention`` (every tensor: queries, keys, values, context, output) and
``SavedScores`` (a saved trace's scores), with the projections that made them.

Shapes: T tokens, D d_model, H heads, Dk per-head query/key size, Dv per-head value size.
Weights are applied as ``y = x W^T (+ b)``, like ``nn.Linear``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping

import torch

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
    maps: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # the layer's attribution maps (T, T), by JSON name

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
        return softmax_input_of(scores, self.divisor, mask, bias, self.softcap)


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
        return softmax_input_of(self.scores[h, query, key], self.divisor, None, bias, self.softcap).item()  # () float32

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


def softmax_input_of(
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
