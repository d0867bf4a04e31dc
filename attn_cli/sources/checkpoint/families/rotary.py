"""Rotary position embeddings (RoPE) for every family and scaling type: default,
linear, llama3, yarn and longrope, on all of a head's dimensions or on its first
``partial_rotary_factor`` share.

Shapes: T tokens, H query heads, Hkv key/value heads, Dk per-head size, R the
rotated dimensions (Dk, or Dk * partial_rotary_factor), R/2 pairs.

Dimensions i and i + R/2 of a head turn together ("rotate_half", as transformers
and the Hugging Face weights pair them, not (2i, 2i + 1)). Frequencies are
computed in float32 as transformers computes them; cos and sin are multiplied by
the scaling type's attention factor (yarn, longrope) and cast to the run's dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch

from attn_cli.runtime.errors import ModelUnavailable

ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


@dataclasses.dataclass(frozen=True)
class RopeSettings:
    """One rotary embedding's numbers, whichever config keys they came from."""

    rope_type: str  # one of ROPE_TYPES
    theta: float  # the base: pair i turns at theta^(-2i/R) per position
    rotated: int  # R, the dimensions of a head that turn (the first R; the rest pass)
    head_dim: int  # Dk
    params: Mapping[str, Any]  # the scaling type's own numbers (factor, original_max_position_embeddings, ...)
    max_positions: int  # config.json's max_position_embeddings (longrope and yarn's factor default)


def settings(
    params: Mapping[str, Any] | None,
    *,
    head_dim: int,
    max_positions: int,
    theta: float = 10000.0,
    partial: float = 1.0,
    original: int | None = None,
) -> RopeSettings:
    """A family's rotary settings from one ``rope_parameters`` dict (transformers 5) or
    ``rope_scaling`` dict (older files, ``type`` before ``rope_type``), with the
    family's fallbacks for what the dict lacks: ``theta`` (``rope_theta`` beside it in
    older files), ``partial`` (partial_rotary_factor, rotary_pct) and ``original``
    (a top-level original_max_position_embeddings, which Phi-3 gives priority)."""
    given = dict(params or {})
    rope_type = str(given.get("rope_type", given.get("type", "default")))
    if rope_type not in ROPE_TYPES:
        raise ModelUnavailable(
            f"config.json rope type {rope_type!r}: attn-cli computes rotary embeddings of type {', '.join(ROPE_TYPES)}"
        )
    factor = float(given.get("partial_rotary_factor", partial))
    rotated = int(head_dim * factor)
    if rotated < 2 or rotated % 2 or rotated > head_dim:
        raise ModelUnavailable(
            f"config.json partial_rotary_factor {factor:g} rotates {rotated} of a head's {head_dim} dimensions; "
            f"rotary embeddings turn an even number of them"
        )
    if rope_type in ("llama3", "yarn", "longrope"):
        if original is not None:
            given["original_max_position_embeddings"] = original
        given.setdefault("original_max_position_embeddings", max_positions)
    needs = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
             "longrope": ("short_factor", "long_factor")}.get(rope_type, ())  # fmt: skip
    missing = [key for key in needs if given.get(key) is None]
    if missing:
        raise ModelUnavailable(f"config.json {rope_type} rope scaling lacks {', '.join(missing)}; fetch config.json again")
    if rope_type == "longrope":
        for key in ("short_factor", "long_factor"):
            if len(given[key]) != rotated // 2:
                raise ModelUnavailable(
                    f"config.json longrope {key} has {len(given[key])} numbers for {rotated // 2} dimension pairs; "
                    f"fetch config.json again"
                )
    return RopeSettings(rope_type, float(given.get("rope_theta", theta)), rotated, head_dim, given, max_positions)


def inverse_frequencies(rotated: int, theta: float) -> torch.Tensor:
    """(R/2,) each pair's rotation per position, as transformers computes it in float32."""
    return 1.0 / (theta ** (torch.arange(0, rotated, 2, dtype=torch.int64).float() / rotated))


def llama3_scaled(inv_freq: torch.Tensor, params: Mapping[str, Any]) -> torch.Tensor:
    """(R/2,) Llama 3.1's long-context frequencies: slow pairs (wavelength beyond
    original / low_freq_factor) divided by ``factor``, fast ones (below original /
    high_freq_factor) kept, the ones between blended smoothly."""
    old = params["original_max_position_embeddings"]
    low, high, factor = params["low_freq_factor"], params["high_freq_factor"], params["factor"]
    wavelen = 2 * math.pi / inv_freq  # (R/2,)
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)  # (R/2,)
    smooth = (old / wavelen - low) / (high - low)  # (R/2,)
    blended = (1 - smooth) * scaled / factor + smooth * scaled  # (R/2,)
    between = ~(wavelen < old / high) * ~(wavelen > old / low)  # (R/2,) bool
    return torch.where(between, blended, scaled)  # (R/2,)


def yarn(s: RopeSettings) -> tuple[torch.Tensor, float]:
    """((R/2,), attention factor): YaRN's blend of the plain frequencies (fast pairs)
    and ones divided by ``factor`` (slow pairs), with a linear ramp between the
    correction dimensions of beta_fast and beta_slow rotations."""
    p, dim, base = s.params, s.rotated, s.theta
    original = p["original_max_position_embeddings"]
    factor = p.get("factor") or s.max_positions / original

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is None:
        both = p.get("mscale") and p.get("mscale_all_dim")
        attention = float(mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])) if both else mscale(factor)
    fast, slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction(fast), correction(slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)  # (R/2,)
    powers = base ** (torch.arange(0, dim, 2).float() / dim)  # (R/2,)
    keep = 1 - ramp  # (R/2,) 1: the plain frequency, 0: divided by factor
    inv_freq = (1.0 / (factor * powers)) * (1 - keep) + (1.0 / powers) * keep  # (R/2,)
    return inv_freq, float(attention)


def longrope(s: RopeSettings, n_tokens: int) -> tuple[torch.Tensor, float]:
    """((R/2,), attention factor): LongRoPE's per-pair factors, ``long_factor`` for every
    position when the text is longer than original_max_position_embeddings, else
    ``short_factor``: chosen once per text, as transformers does."""
    p = s.params
    original = p["original_max_position_embeddings"]
    factor = p.get("factor") or s.max_positions / original
    attention = p.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    chosen = p["long_factor"] if n_tokens > original else p["short_factor"]
    ext = torch.tensor(chosen, dtype=torch.float32)  # (R/2,)
    shape = torch.arange(0, s.rotated, 2, dtype=torch.int64).float() / s.rotated  # (R/2,)
    return 1.0 / (ext * s.theta**shape), float(attention)


def length_class(s: RopeSettings, n_tokens: int) -> int:
    """1 where the rotation of ``n_tokens`` tokens reads their number (LongRoPE past
    original_max_position_embeddings: the long factors), else 0."""
    return int(s.rope_type == "longrope" and n_tokens > s.params["original_max_position_embeddings"])


def frequencies(s: RopeSettings, n_tokens: int) -> tuple[torch.Tensor, float]:
    """((R/2,) each pair's rotation per position, the factor cos and sin are multiplied by)."""
    if s.rope_type == "yarn":
        return yarn(s)
    if s.rope_type == "longrope":
        return longrope(s, n_tokens)
    inv_freq = inverse_frequencies(s.rotated, s.theta)
    if s.rope_type == "linear":
        return inv_freq / s.params["factor"], 1.0
    if s.rope_type == "llama3":
        return llama3_scaled(inv_freq, s.params), 1.0
    return inv_freq, 1.0


def pairs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., R) -> the two members of every rotated pair, views (..., R/2) each: dimensions
    i and i + R/2 (transformers' rotate_half convention, not Meta's interleaved 2i, 2i + 1)."""
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


# Where a half-precision run rounds the rotation, as each family's transformers code does:
# precision -> (cos and sin rounded to the heads' dtype, the turn worked out in float32)
PRECISIONS = {
    "dtype": (True, False),  # Llama and most: cos and sin rounded, the turn in the heads' dtype
    "float32": (False, True),  # OLMo 2: cos, sin and the turn in float32, the result rounded back
    "float32_turn": (True, True),  # ModernBERT: cos and sin rounded, then the turn in float32, rounded back
}


class Rotary:
    """One rotary embedding: cos and sin per position (cached per length, dtype and
    device), applied to queries and keys; ``precision``, a key of PRECISIONS, says where
    a half-precision run rounds (float32 runs are the same for every key)."""

    def __init__(self, s: RopeSettings, precision: str = "dtype") -> None:
        self.settings = s
        self.rounded, self.wide = PRECISIONS[precision]
        self._cached: dict[tuple[int, torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def cos_sin(self, n_tokens: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(T, R) each: position t's cos and sin, pair i and i + R/2 alike."""
        key = (n_tokens, dtype, device)
        if key not in self._cached or (torch.is_grad_enabled() and self._cached[key][0].is_inference()):  # autograd cannot save those
            inv_freq, attention = frequencies(self.settings, n_tokens)  # (R/2,)
            angles = torch.arange(n_tokens).float()[:, None] * inv_freq[None, :]  # (T, 1) * (1, R/2) -> (T, R/2)
            both = torch.cat((angles, angles), dim=-1)  # (T, R)
            cos, sin = both.cos(), both.sin()  # (T, R) each
            if attention != 1.0:
                cos, sin = cos * attention, sin * attention
            self._cached = {key: (cos.to(device, dtype), sin.to(device, dtype))}
        return self._cached[key]

    def apply(self, queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(H, T, Dk) queries and (Hkv, T, Dk) keys, position t at token t, rotated."""
        dtype = queries.dtype
        cos, sin = self.cos_sin(queries.shape[-2], dtype if self.rounded else torch.float32, queries.device)  # (T, R) each
        if not self.wide or dtype == torch.float32:
            return turn(queries, cos, sin), turn(keys, cos, sin)
        cos, sin = cos.float(), sin.float()  # exact: a rounded cos is a float32 number too
        return turn(queries.float(), cos, sin).to(dtype), turn(keys.float(), cos, sin).to(keys.dtype)

    def text(self) -> str:
        """What the rotation does, in words, with its numbers."""
        s = self.settings
        half, p = s.rotated // 2, s.params
        dims = "" if s.rotated == s.head_dim else f" (the first {s.rotated} of the head's {s.head_dim}; the rest pass unturned)"
        scaled = {
            "linear": f"; linear scaling divides every speed by {p.get('factor', 1):g}",
            "llama3": (
                f"; llama3 scaling divides the slow pairs' speeds by {p.get('factor', 1):g} (beyond "
                f"{p.get('original_max_position_embeddings')} positions' wavelengths) and blends the middle ones"
            ),
            "yarn": f"; YaRN scaling blends each speed with it divided by {p.get('factor') or 1:g} and scales cos and sin",
            "longrope": (
                f"; LongRoPE divides each pair's speed by its factor (long_factor past "
                f"{p.get('original_max_position_embeddings')} tokens, else short_factor) and scales cos and sin"
            ),
        }.get(s.rope_type, "")
        return (
            f"RoPE, rotary position embedding: at position p, dimensions i and i + {half} of each query and key "
            f"(i < {half}){dims} turn together by the angle p · θ_i, θ_i = {s.theta:g}^(−2i/{s.rotated}){scaled}: "
            f"Q_rot = Q · cos(pθ) + rotate_half(Q) · sin(pθ), likewise K, so Q_rot · K_rot depends on the two "
            f"positions only through their distance"
        )


def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(heads, T, Dk): the first R dimensions rotated by (T, R) cos and sin, the rest as they were.

    transformers computes x · cos + rotate_half(x) · sin, rotate_half(x) = (-x2, x1): four and
    a half (heads, T, R)-sized blocks, the result among them. The same products and sums,
    written half by half into the result with one half-sized scratch: x1 · cos1 - x2 · sin1
    (adding (-x2) · sin1 is subtracting x2 · sin1, exactly) and x2 · cos2 + x1 · sin2, so the
    same bits in every dtype, with a third of the memory to map (a fresh block costs its page faults, which
    were a tenth of a Qwen3 forward)."""
    rotated = cos.shape[-1]
    if torch.is_grad_enabled() and x.requires_grad:  # attention x gradient's autograd run: the same products, new tensors
        (x1, x2), (c1, c2), (s1, s2) = pairs(x[..., :rotated]), pairs(cos), pairs(sin)
        return torch.cat([x1 * c1 - x2 * s1, x2 * c2 + x1 * s2, x[..., rotated:]], dim=-1)  # (heads, T, Dk)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # (heads, T, Dk)
    if rotated < x.shape[-1]:
        out[..., rotated:] = x[..., rotated:]  # (heads, T, Dk - R) not turned (partial rotary)
    (x1, x2), (o1, o2) = pairs(x[..., :rotated]), pairs(out[..., :rotated])  # (heads, T, R/2) views
    (c1, c2), (s1, s2) = pairs(cos), pairs(sin)  # (T, R/2) each
    scratch = torch.mul(x2, s1)  # (heads, T, R/2)
    torch.mul(x1, c1, out=o1).sub_(scratch)  # x1 cos - x2 sin
    torch.mul(x1, s2, out=scratch)
    torch.mul(x2, c2, out=o2).add_(scratch)  # x2 cos + x1 sin
    return out  # (heads, T, Dk)
