"""The MLP activations the families name in config.json (gelu and its tanh and fast forms,
relu, silu, ...), each the formula transformers uses, with in-place forms where torch has
them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from attn_cli.runtime.errors import ModelUnavailable


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's own formula ("gelu_new"), as OpenAI and transformers write it,
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), in one (T, F) buffer
    instead of six: the same operations on the same operands (the halving is exact
    wherever it comes), so the same bits in every dtype."""
    if torch.is_grad_enabled() and x.requires_grad:  # attention x gradient's autograd run: the same operations, new tensors
        return (((torch.pow(x, 3.0) * 0.044715 + x) * math.sqrt(2.0 / math.pi)).tanh() + 1.0) * x * 0.5
    out = torch.pow(x, 3.0)  # (T, F)
    out.mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi)).tanh_().add_(1.0).mul_(x).mul_(0.5)
    return out  # (T, F)


def _gelu_fast(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))  # (T, F)


# The activation names config.json uses (transformers' ACT2FN) that these families meet.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": torch.nn.functional.gelu,  # exact, with erf
    "gelu_python": torch.nn.functional.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "gelu_python_tanh": _gelu_tanh,
    "gelu_fast": _gelu_fast,
    "relu": torch.relu,
    "silu": torch.nn.functional.silu,
    "swish": torch.nn.functional.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}


def activation(name: Any, key: str, family: str, in_place: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """config.json's activation ``name``. ``in_place``: one that may overwrite its input and
    returns its result (the input itself where torch has the kernel in place): for an input
    nothing else reads."""
    if name not in ACTIVATIONS:
        raise ModelUnavailable(
            f"config.json {key} {name!r} is not one attn-cli computes for {family}; "
            f"supported: {', '.join(ACTIVATIONS)}"
        )
    return IN_PLACE.get(name, ACTIVATIONS[name]) if in_place else ACTIVATIONS[name]


# The same kernels writing into their input, for the activations torch has them for: a
# gated MLP's (T, F) blocks are a layer's largest, and each fresh one is mapped and faulted in.
IN_PLACE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": torch.ops.aten.gelu_,
    "gelu_python": torch.ops.aten.gelu_,
    "gelu_pytorch_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "relu": torch.relu_,
    "silu": lambda x: torch.nn.functional.silu(x, inplace=True),
    "swish": lambda x: torch.nn.functional.silu(x, inplace=True),
}
