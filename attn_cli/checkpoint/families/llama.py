"""Llama-style decoders (Llama 2/3, Mistral, Qwen2): RMSNorm, rotary positions,
grouped-query attention, a SiLU-gated MLP, a causal mask (and Mistral's window).

Shapes: T tokens, D d_model (hidden_size), H query heads, Hkv key/value heads,
Dk = Dv = head_dim (config.json's, or D / H), F intermediate_size.

Rotary embeddings pair dimension i with i + Dk/2 of each head ("rotate_half",
as transformers and Meta's Hugging Face weights do), not (2i, 2i + 1): the
checkpoints' W_q and W_k rows are permuted for that pairing. Query head h
shares key/value head h // (H / Hkv): heads are grouped, not tiled.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attn_cli.attention import FusedLinear, Projections, causal_mask
from attn_cli.checkpoint.families.base import Family, LayerTensors, Weights, activation, scaled_divisor, token_rows
from attn_cli.errors import ModelUnavailable
from attn_cli.tokens import Tokens

ROPE_TYPES = ("default", "llama3")


def rope_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The rotary settings, whichever keys the file uses: ``rope_parameters`` (what
    transformers 5 writes: rope_theta inside it) or ``rope_theta`` + ``rope_scaling``
    (older files; ``type`` before ``rope_type``). Returns rope_type, rope_theta and,
    for llama3, its four numbers."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ModelUnavailable(
            f"config.json rope type {rope_type!r}: attn-cli computes rotary embeddings of type "
            f"{', '.join(ROPE_TYPES)} only"
        )
    if float(params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))) != 1.0:
        raise ModelUnavailable("config.json partial_rotary_factor: attn-cli rotates every dimension of a head only")
    settings = {"rope_type": rope_type, "rope_theta": float(params.get("rope_theta", config.get("rope_theta", 10000.0)))}
    if rope_type == "llama3":
        try:
            settings.update(
                factor=float(params["factor"]),
                low_freq_factor=float(params["low_freq_factor"]),
                high_freq_factor=float(params["high_freq_factor"]),
                original_max_position_embeddings=int(
                    params.get("original_max_position_embeddings", config.get("max_position_embeddings", 2048))
                ),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ModelUnavailable(f"config.json llama3 rope scaling lacks a number ({err}); fetch config.json again") from None
    return settings


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """(Dk/2,) the rotation speed of each dimension pair, as transformers computes it in float32."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def llama3_scaled(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    """(Dk/2,) Llama 3.1's long-context frequencies: slow pairs (wavelength beyond
    original / low_freq_factor) divided by ``factor``, fast ones (below original /
    high_freq_factor) kept, the ones between blended smoothly."""
    old = s["original_max_position_embeddings"]
    low, high, factor = s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    wavelen = 2 * math.pi / inv_freq  # (Dk/2,)
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)  # (Dk/2,)
    smooth = (old / wavelen - low) / (high - low)  # (Dk/2,)
    blended = (1 - smooth) * scaled / factor + smooth * scaled  # (Dk/2,)
    between = ~(wavelen < old / high) * ~(wavelen > old / low)  # (Dk/2,) bool
    return torch.where(between, blended, scaled)  # (Dk/2,)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(..., Dk): the pairs (i, i + Dk/2) turned a quarter: (-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (..., Dk)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """(T, D) -> (T, D) in float32 whatever x's dtype, then back, times the gain (as LlamaRMSNorm)."""
    wide = x.float()  # (T, D)
    normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)  # (T, D)
    return weight * normed.to(x.dtype)  # (T, D)


class Llama(Family):
    family = "llama"
    anchor = "embed_tokens.weight"
    input_text = "input_layernorm (RMSNorm) of the residual stream"
    embedding_tensors = {"tokens": "embed_tokens.weight"}
    first_hidden = (
        "h_0 = embed_tokens[ids]: the token embeddings alone; no position is added here, "
        "positions enter each layer through the rotation of its queries and keys (step 3)"
    )
    layer_input = "x = input_layernorm(h_L) = h_L / sqrt(mean(h_L²) + eps) · g: the RMSNorm before attention (pre-norm)"
    out_proj_name = "self_attn.o_proj"
    layer_tensors = {}  # set per config: the biases depend on it

    def __init__(self, config: dict[str, Any]) -> None:
        # Keys absent from config.json take LlamaConfig's defaults.
        self.model_type = str(config.get("model_type", "llama"))
        self.layers = int(config.get("num_hidden_layers", 32))
        self.heads = int(config.get("num_attention_heads", 32))
        self._kv_heads = int(config.get("num_key_value_heads") or self.heads)
        self.d_model = int(config.get("hidden_size", 4096))
        self._head_dim = int(config.get("head_dim") or self.d_model // max(self.heads, 1))
        self.d_ffn = int(config.get("intermediate_size", 11008))
        self.max_positions = int(config.get("max_position_embeddings", 2048))
        self.vocab_rows = int(config.get("vocab_size", 32000))
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.act = activation(config.get("hidden_act", "silu"), "hidden_act", self.family)
        self.rope = rope_settings(config)
        self.windows = _windows(config, self.model_type, self.layers)
        qkv_bias = self.model_type == "qwen2" or bool(config.get("attention_bias", False))
        out_bias = self.model_type != "qwen2" and bool(config.get("attention_bias", False))
        mlp_bias = bool(config.get("mlp_bias", False))
        self.qkv_bias, self.out_bias, self.mlp_bias = qkv_bias, out_bias, mlp_bias
        tensors = {
            "input_layernorm.weight": "layers.{layer}.input_layernorm.weight",
            "q_proj.weight": "layers.{layer}.self_attn.q_proj.weight",  # (H*Dk, D)
            "k_proj.weight": "layers.{layer}.self_attn.k_proj.weight",  # (Hkv*Dk, D)
            "v_proj.weight": "layers.{layer}.self_attn.v_proj.weight",  # (Hkv*Dv, D)
            "o_proj.weight": "layers.{layer}.self_attn.o_proj.weight",  # (D, H*Dv)
            "post_attention_layernorm.weight": "layers.{layer}.post_attention_layernorm.weight",
            "gate_proj.weight": "layers.{layer}.mlp.gate_proj.weight",  # (F, D)
            "up_proj.weight": "layers.{layer}.mlp.up_proj.weight",  # (F, D)
            "down_proj.weight": "layers.{layer}.mlp.down_proj.weight",  # (D, F)
        }
        biased = (["q_proj", "k_proj", "v_proj"] if qkv_bias else []) + (["o_proj"] if out_bias else [])
        for role in biased:
            tensors[f"{role}.bias"] = f"layers.{{layer}}.self_attn.{role}.bias"
        for role in ("gate_proj", "up_proj", "down_proj") if mlp_bias else ():
            tensors[f"{role}.bias"] = f"layers.{{layer}}.mlp.{role}.bias"
        self.layer_tensors = tensors
        self._rotary: dict[tuple[int, torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def head_dim(self) -> int:
        return self._head_dim

    @property
    def kv_heads(self) -> int:
        return self._kv_heads

    def inconsistency(self) -> str | None:
        if self.layers < 1 or self.heads < 1 or self.kv_heads < 1 or self.heads % self.kv_heads:
            return (
                f"config.json has {self.layers} layers, {self.heads} query heads and {self.kv_heads} key/value heads; "
                f"the key/value heads must divide the query heads"
            )
        if self._head_dim % 2:
            return f"config.json head_dim {self._head_dim} is odd; rotary embeddings pair a head's dimensions"
        return None

    def layer_elements(self) -> int:
        d, f, q, kv = self.d_model, self.d_ffn, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = d * (q + 2 * kv) + q * d + (q + 2 * kv if self.qkv_bias else 0) + (d if self.out_bias else 0)
        mlp = 3 * d * f + ((2 * f + d) if self.mlp_bias else 0)
        return attention + mlp + 2 * d  # and the two RMSNorm gains

    def tensor_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        d, f, q, kv = self.d_model, self.d_ffn, self.heads * self.head_dim, self.kv_heads * self.head_dim
        model = (
            f"vocab_size {self.vocab_rows}, hidden_size {d}, num_attention_heads {self.heads}, "
            f"num_key_value_heads {self.kv_heads}, head_dim {self.head_dim}, intermediate_size {f}"
        )
        shapes = {
            "tokens": (self.vocab_rows, d), "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
            "q_proj.weight": (q, d), "k_proj.weight": (kv, d), "v_proj.weight": (kv, d), "o_proj.weight": (d, q),
            "q_proj.bias": (q,), "k_proj.bias": (kv,), "v_proj.bias": (kv,), "o_proj.bias": (d,),
            "gate_proj.weight": (f, d), "up_proj.weight": (f, d), "down_proj.weight": (d, f),
            "gate_proj.bias": (f,), "up_proj.bias": (f,), "down_proj.bias": (d,),
        }  # fmt: skip  (nn.Linear weights are (out, in))
        return {role: (shape, model) for role, shape in shapes.items()}

    def embed(self, weights: Weights, tokens: Tokens) -> torch.Tensor:
        return token_rows(weights, "embed_tokens.weight", tokens.ids, self.vocab_rows)  # (T, D)

    def attention_input(self, t: LayerTensors, hidden: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden, t["input_layernorm.weight"], self.eps)  # (T, D)

    def projections(self, t: LayerTensors) -> Projections:
        def linear(role: str, biased: bool) -> FusedLinear:
            return FusedLinear(t[f"{role}.weight"], t[f"{role}.bias"] if biased else None)

        return Projections(
            linear("q_proj", self.qkv_bias),  # (H*Dk, D)
            linear("k_proj", self.qkv_bias),  # (Hkv*Dk, D)
            linear("v_proj", self.qkv_bias),  # (Hkv*Dv, D)
            linear("o_proj", self.out_bias),  # (D, H*Dv)
        )

    def rotary_text(self) -> str:
        half = self.head_dim // 2
        base = self.rope["rope_theta"]
        scaled = (
            f"; llama3 scaling divides the slow pairs' speeds by {self.rope['factor']:g} (beyond "
            f"{self.rope['original_max_position_embeddings']} positions' wavelengths) and blends the middle ones"
            if self.rope["rope_type"] == "llama3"
            else ""
        )
        return (
            f"RoPE, rotary position embedding: at position p, dimensions i and i + {half} of each query and key "
            f"(i < {half}) turn together by the angle p · θ_i, θ_i = {base:g}^(−2i/{self.head_dim}){scaled}: "
            f"Q_rot = Q · cos(pθ) + rotate_half(Q) · sin(pθ), likewise K, so Q_rot · K_rot depends on the two "
            f"positions only through their distance"
        )

    def rotate(self, queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary positions on (H, T, Dk) queries and (Hkv, T, Dk) keys, position t at token t."""
        cos, sin = self._cos_sin(queries.shape[1], queries.dtype, queries.device)  # (T, Dk) each
        return queries * cos + rotate_half(queries) * sin, keys * cos + rotate_half(keys) * sin

    def _cos_sin(self, n_tokens: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (n_tokens, dtype, device)
        if key not in self._rotary:
            inv_freq = self.frequencies()  # (Dk/2,)
            angles = torch.arange(n_tokens).float()[:, None] * inv_freq[None, :]  # (T, 1) * (1, Dk/2) -> (T, Dk/2)
            both = torch.cat((angles, angles), dim=-1)  # (T, Dk): pair i and i + Dk/2 turn alike
            self._rotary = {key: (both.cos().to(device, dtype), both.sin().to(device, dtype))}
        return self._rotary[key]

    def frequencies(self) -> torch.Tensor:
        """(Dk/2,) each dimension pair's rotation per position, scaled as config.json says."""
        inv_freq = inverse_frequencies(self.head_dim, self.rope["rope_theta"])
        return llama3_scaled(inv_freq, self.rope) if self.rope["rope_type"] == "llama3" else inv_freq

    def divisor(self, layer: int) -> tuple[float, str]:
        return scaled_divisor(self.head_dim, True, 1)

    def mask(self, n_tokens: int) -> torch.Tensor:
        return causal_mask(n_tokens)  # (T, T)

    def layer_mask(self, layer: int, shared: torch.Tensor | None) -> torch.Tensor | None:
        window = self.windows[layer]
        if window is None or shared is None or shared.shape[0] <= window:
            return shared
        n_tokens = shared.shape[0]
        # key k is hidden from query q when k <= q - window: each query sees itself and window - 1 before it
        return shared | torch.ones(n_tokens, n_tokens, dtype=torch.bool, device=shared.device).tril(diagonal=-window)

    def finish_layer(self, t: LayerTensors, hidden: torch.Tensor, attention_output: torch.Tensor) -> torch.Tensor:
        hidden = hidden + attention_output  # (T, D) residual
        normed = rms_norm(hidden, t["post_attention_layernorm.weight"], self.eps)  # (T, D)

        def linear(role: str) -> FusedLinear:
            return FusedLinear(t[f"{role}.weight"], t[f"{role}.bias"] if self.mlp_bias else None)

        gated = self.act(linear("gate_proj")(normed)) * linear("up_proj")(normed)  # (T, D) -> (T, F)
        return hidden + linear("down_proj")(gated)  # (T, F) -> (T, D), residual


def _windows(config: dict[str, Any], model_type: str, layers: int) -> list[int | None]:
    """Each layer's sliding window (None: every earlier token is seen). Mistral: every
    layer when sliding_window is set; Qwen2: layer_types' "sliding_attention" layers,
    else layers from max_window_layers on when use_sliding_window."""
    window = config.get("sliding_window")
    if model_type == "mistral":
        return [int(window) if window else None] * layers
    if model_type == "qwen2" and window and config.get("use_sliding_window", False):
        types = config.get("layer_types")
        if not types:
            first = int(config.get("max_window_layers", 28))
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
        return [int(window) if kind == "sliding_attention" else None for kind in types]
    return [None] * layers
