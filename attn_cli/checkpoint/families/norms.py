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
    wide = x.float()  # (..., D)
    return wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)  # (..., D) float32


def rms_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm as Llama, Mistral, Qwen, Phi-3: normed in float32, rounded back, then times the gain."""
    return weight * _normed(x, eps).to(x.dtype)  # (..., D)


def rms_norm_wide_gain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm as OLMo 2: the gain applied in float32, then rounded back."""
    return (weight.float() * _normed(x, eps)).to(x.dtype)  # (..., D)


def rms_norm_plus_one(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: x / rms(x) * (1 + weight), multiplied in float32, then rounded back
    (a stored weight of 0 is the identity gain)."""
    return (_normed(x, eps) * (1.0 + weight.float())).to(x.dtype)  # (..., D)
