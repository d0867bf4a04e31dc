"""Every option of a run, in one frozen dataclass, validated once.

No torch here: the CLI builds a ``Config`` (and so rejects bad values) before
anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from pathlib import Path

from attn_cli.runtime.errors import ConfigError

DEFAULT_TOKENIZER = "gpt2"
DEFAULT_SEED = 123  # the tutorials' habit (manual_seed(123))
DEFAULT_D_MODEL = 16  # nn.Embedding(6, 16) in the "Life is short" walk-through
DEFAULT_MAX_TOKENS = 4096
MAX_SEED = 2**63 - 1


class Init(str, enum.Enum):
    """How W_q, W_k, W_v (and W_o) are drawn after ``torch.manual_seed(seed)``."""

    linear = "linear"  # nn.Linear(in, out): Kaiming-uniform weights, as in the book's classes
    uniform = "uniform"  # torch.rand(out, in): the "Life is short" walk-through
    normal = "normal"  # torch.randn(out, in)


class Positional(str, enum.Enum):
    none = "none"
    sinusoidal = "sinusoidal"  # "Attention Is All You Need", section 3.5


@dataclasses.dataclass(frozen=True)
class Config:
    """One run's options; ``None`` sizes are filled in by ``resolved``."""

    tokenizer: str | None = None  # None: DEFAULT_TOKENIZER, falling back to "words" offline
    seed: int = DEFAULT_SEED  # seeds the embedding table and, again, the projections
    d_model: int | None = None  # embedding width D; None: DEFAULT_D_MODEL or the file's width
    d_k: int | None = None  # per-head query/key size; None: d_model // heads
    d_v: int | None = None  # per-head value size; None: d_model // heads
    heads: int = 1  # H
    causal: bool = False  # mask keys after the query before the softmax
    scale: bool = True  # divide scores by sqrt(d_k)
    temperature: float = 1.0  # divide the softmax input by this as well
    dropout: float = 0.0  # dropout on the weights before they mix the values (seeded)
    qkv_bias: bool = False  # bias in the query, key and value projections
    out_proj: bool = False  # a (H*Dv, H*Dv) linear layer after the heads are concatenated
    init: Init = Init.linear
    projections: bool = True  # False: Q = K = V = X (the tutorials' naive first step)
    positional: Positional = Positional.none
    embeddings: Path | None = None  # user-supplied vectors instead of the seeded table
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        if self.tokenizer is not None and not self.tokenizer.strip():
            # Otherwise "" would silently mean the default tokenizer.
            raise ConfigError("--tokenizer is empty: give 'words', an encoding such as gpt2, or a model name such as gpt-4o")
        _check_int("--seed", self.seed, low=0, high=MAX_SEED)
        for flag, value in (("--d-model", self.d_model), ("--d-k", self.d_k), ("--d-v", self.d_v)):
            if value is not None:
                _check_int(flag, value, low=1, high=1 << 20)
        _check_int("--heads", self.heads, low=1, high=4096)
        _check_int("--max-tokens", self.max_tokens, low=1, high=1 << 24)
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"--temperature must be a positive number, got {self.temperature}")
        if not (math.isfinite(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ConfigError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.d_model is not None:
            self._check_sizes(self.d_model)

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer or DEFAULT_TOKENIZER

    @property
    def scale_factor(self) -> float:
        """What the raw scores are multiplied by to give the softmax input."""
        d_k = self.d_k if self.d_k is not None else 1
        return (1.0 / math.sqrt(d_k) if self.scale else 1.0) / self.temperature

    def _check_sizes(self, d_model: int) -> None:
        if (self.d_k is None or self.d_v is None or not self.projections) and d_model % self.heads:
            raise ConfigError(
                f"--heads {self.heads} does not divide d_model {d_model}: "
                f"pick heads that divide it, or give --d-k and --d-v"
            )
        if not self.projections:
            per_head = d_model // self.heads
            for flag, value in (("--d-k", self.d_k), ("--d-v", self.d_v)):
                if value is not None and value != per_head:
                    raise ConfigError(
                        f"{flag} {value} conflicts with --no-projections: "
                        f"without projections each head sees d_model / heads = {per_head} dimensions"
                    )
        if not self.projections and self.qkv_bias:
            raise ConfigError("--qkv-bias needs projections: drop it or drop --no-projections")

    def resolved(self, d_model: int | None = None) -> Config:
        """This config with d_model, d_k and d_v filled in for an input of width ``d_model``
        (None: no embeddings file, so --d-model or DEFAULT_D_MODEL)."""
        if d_model is None:
            d_model = self.d_model or DEFAULT_D_MODEL
        if self.d_model is not None and self.d_model != d_model:
            raise ConfigError(
                f"--d-model {self.d_model} does not match the embeddings' width {d_model}: drop --d-model"
            )
        self._check_sizes(d_model)
        per_head = d_model // self.heads
        d_k = per_head if (self.d_k is None or not self.projections) else self.d_k
        d_v = per_head if (self.d_v is None or not self.projections) else self.d_v
        return dataclasses.replace(self, d_model=d_model, d_k=d_k, d_v=d_v)

    def describe(self, tokenizer: str) -> list[str]:
        """The configuration in words, one short phrase per option, for headers
        (explain's, the emitted script's); options left at their off value are omitted."""
        scale = f"1/sqrt({self.d_k})" if self.scale else "off"
        if self.temperature != 1.0:
            scale += f", temperature {self.temperature:g}"
        parts = [
            f"tokenizer {tokenizer}",
            f"seed {self.seed}",
            f"d_model {self.d_model}",
            f"heads {self.heads}",
            f"d_k {self.d_k}",
            f"d_v {self.d_v}",
            f"scale {scale}",
            f"causal {'yes' if self.causal else 'no'}",
            f"init {self.init.value}" if self.projections else "no projections (Q = K = V = X)",
        ]
        optional = [
            (self.qkv_bias, "qkv bias"),
            (self.out_proj, "output projection"),
            (self.dropout > 0, f"dropout {self.dropout:g}"),
            (self.positional is not Positional.none, f"positions {self.positional.value}"),
            (self.embeddings is not None, f"embeddings from {self.embeddings.name if self.embeddings else ''}"),
        ]
        return parts + [phrase for on, phrase in optional if on]

    def weights_origin(self) -> str:
        """Where the numbers come from, as the sentence under the headers (run's, explain's, the
        page's): what the seed draws and what the user gave, never random weights where there are none."""
        drawn = (["W_q", "W_k", "W_v"] if self.projections else []) + (["W_o"] if self.out_proj else [])
        meaning = ": the patterns show the mechanics, not meaning."
        if self.embeddings is None and self.projections:
            return "Random weights drawn from the seed, not a trained model's" + meaning
        if self.embeddings is None:  # --no-projections: the seeded table is all there is (and W_o)
            also = f", {drawn[0]} drawn from the seed too" if drawn else ""
            return f"Seeded random embeddings (not a trained model's), no projections (Q = K = V = X){also}" + meaning
        x = f"X from your file {self.embeddings.name}"
        if self.projections:
            return f"{x}; {', '.join(drawn)} drawn from the seed, not a trained model's" + meaning
        if drawn:
            return f"{x}, no projections (Q = K = V = X); only {drawn[0]} is drawn from the seed."
        return f"{x}, no projections (Q = K = V = X): no random weights at all, the weights come from your vectors' dot products."

    def as_dict(self) -> dict[str, object]:
        """The documented ``config`` object of the JSON output."""
        return {
            "seed": self.seed,
            "d_model": self.d_model,
            "heads": self.heads,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "causal": self.causal,
            "scale": self.scale,
            "scale_factor": self.scale_factor,
            "temperature": self.temperature,
            "init": self.init.value,
            "projections": self.projections,
            "qkv_bias": self.qkv_bias,
            "out_proj": self.out_proj,
            "dropout": self.dropout,
            "positional": self.positional.value,
            "embeddings": str(self.embeddings) if self.embeddings is not None else None,
        }


def _check_int(flag: str, value: int, *, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{flag} must be a whole number from {low} to {high}, got {value}")


# Config's fields are the toy's options, listed once: the command line's and the Python API's
# names for them are derived from these (``config_fields``).
SHARED_FIELDS = ("seed", "max_tokens")  # every source's (a checkpoint's too), not the toy's alone
NEGATED = {"scale": "no_scale", "projections": "no_projections"}  # the command line's --no-scale, --no-projections


def config_fields() -> tuple[str, ...]:
    """Config's fields, in order."""
    return tuple(f.name for f in dataclasses.fields(Config))
