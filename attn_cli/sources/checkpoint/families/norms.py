"""The normalisations trained families use, each as transformers computes it
(the order of the casts matters in bfloat16; in float32 the RMS kinds differ
only in Gemma's 1 + weight).

Shapes: (..., D) in, (..., D) out; the statistics are over the last dimension.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Norm = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", float], torch.Tensor]


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias."""
    return torch.nn.functional.layer_norm(x, weight.shape, weight, bias, eps)  # (..., D)


def _normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """(..., D) x / rms(x) in float32: a new tensor, never x itself (the gains below are
    multiplied into it in place)."""
    wide = x.float()  # (..., D)
    return wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)  # (..., D) float32


def _times(y: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """gain * y, written into y (a fresh tensor) where the product keeps y's dtype: the same
    bits as transformers' ``weight * y`` (multiplication commutes exactly), without a
    second (..., D) block to map."""
    return y.mul_(gain) if gain.dtype == y.dtype else gain * y  # (..., D)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm as Llama, Mistral, Qwen, Phi-3: normed in float32, rounded back, then times the gain."""
    return _times(_normed(x, eps).to(x.dtype), weight)  # (..., D); .to: itself in float32, else a new tensor


def rms_norm_in_gain_dtype(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm as T5: normed in float32, rounded to the gain's dtype (not the input's: in float16,
    T5's residual stream turns float32 after its first feed-forward), then times the gain."""
    return _times(_normed(x, eps).to(weight.dtype), weight)  # (..., D)


def rms_norm_wide_gain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm as OLMo 2: the gain applied in float32, then rounded back."""
    return _times(_normed(x, eps), weight.float()).to(x.dtype)  # (..., D)


def rms_norm_plus_one(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: x / rms(x) * (1 + weight), multiplied in float32, then rounded back
    (a stored weight of 0 is the identity gain)."""
    return _times(_normed(x, eps), 1.0 + weight.float()).to(x.dtype)  # (..., D)
