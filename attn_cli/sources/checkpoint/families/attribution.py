"""What value zeroing and ALTI ask of a layer (``analysis.contributions``), through the one layer
loop: ``Attributions`` visits each self-attention layer as ``forward`` passes it (its input, its
tensors, its attention) and keeps each wanted layer's (T, T) maps. Value zeroing runs the layer
again with each key's values zeroed (``value_zeroed``: the layer's own ``finish_layer``, a batch of
keys at a time); ALTI reads the layer's attention block from its family (``Family.attention_block``).

Shapes: T tokens, D d_model, H heads, Dv per-head value size, B keys zeroed in one batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from attn_cli.analysis.contributions import ALTI_BLOCK_BYTES, alti_layer, cosine_distance, joint, normalized_rows
from attn_cli.records.layers import LayerAttention
from attn_cli.records.results import Rollout
from attn_cli.sources.checkpoint.families.base import Family, LayerTensors
from attn_cli.sources.checkpoint.families.loop import merged_heads

LAYER_MAPS = ("value_zeroing", "alti")  # the maps a forward's visitor makes (attention x gradient: families.gradient)
VALUE_ZEROING_BATCH_BYTES = 256 * 2**20  # a batch of re-runs' tensors in flight through one layer


def value_zeroed(family: Family, t: LayerTensors, hidden: torch.Tensor, layer: LayerAttention) -> torch.Tensor:
    """(T, T) C[i, j]: the cosine distance between layer ``layer``'s output at i as the forward made it
    and with key j's values zeroed in every head (the layer run again from its input ``hidden``
    (T, D): attention, residual, norms, MLP). A key the layer's mask hides from i changes nothing:
    0 there. Not normalized."""
    n = hidden.shape[-2]
    clean = family.finish_layer(t, hidden, layer.output)  # (T, D)
    out = torch.zeros(n, n, dtype=torch.float64)
    batch = value_zeroing_batch(family, n)
    for first in range(0, n, batch):
        keys = torch.arange(first, min(first + batch, n))
        values = layer.values.expand(len(keys), *layer.values.shape).clone()  # (B, H, T, Dv)
        values[torch.arange(len(keys)), :, keys] = 0.0  # key first + b's values, every head
        context = layer.weights @ values  # (H, T, T) @ (B, H, T, Dv) -> (B, H, T, Dv), as attend computes it
        output = merged_heads(context, layer.projections)[2]  # (B, T, D)
        changed = family.finish_layer(t, hidden.expand(len(keys), *hidden.shape), output)  # (B, T, D)
        out[:, keys] = cosine_distance(changed, clean).T  # (B, T) -> (T, B)
    if layer.mask is not None:
        out[layer.mask.cpu()] = 0.0
    return out


def value_zeroing_batch(family: Family, n_tokens: int) -> int:
    """How many keys' re-runs go through a layer together."""
    per_key = 4 * n_tokens * (4 * family.d_model + 2 * family.d_ffn + family.heads * family.head_dim)
    return max(1, min(n_tokens, VALUE_ZEROING_BATCH_BYTES // per_key))


class Attributions:
    """A ``forward`` visitor that keeps, for each layer in ``layers`` (self-attention only), the maps
    named in ``names`` ("value_zeroing", "alti"): ``maps[name][layer]`` (T, T) float32, rows summing
    to 1 (a row with no contribution stays 0)."""

    def __init__(self, family: Family, names: Iterable[str], layers: Iterable[int]) -> None:
        self.family = family
        self.names = tuple(names)
        assert set(self.names) <= set(LAYER_MAPS), self.names
        self.wanted = set(layers)
        self.maps: dict[str, dict[int, torch.Tensor]] = {name: {} for name in self.names}
        self.causal = True  # every layer so far hides each query's future keys

    def __call__(self, index: int, hidden: torch.Tensor, t: LayerTensors, layer: LayerAttention) -> None:
        if layer.cross or index not in self.wanted:
            return
        with torch.inference_mode():
            if "value_zeroing" in self.names:
                self.maps["value_zeroing"][index] = normalized_rows(value_zeroed(self.family, t, hidden, layer)).cpu()
            if "alti" in self.names:
                out = layer.projections.out
                assert out is not None
                block = self.family.attention_block(t)
                self.maps["alti"][index] = alti_layer(layer.weights, layer.values, out.weight, out.bias, hidden, block).cpu()
        if layer.mask is not None:  # a causal model's every layer hides each query's future
            future = torch.ones_like(layer.mask, dtype=torch.bool).triu(1)
            self.causal = self.causal and bool(layer.mask[future].all())
        else:
            self.causal = False

    def through(self, name: str, last: int) -> Rollout:
        """``name``'s layers 0 .. ``last`` combined (``contributions.joint``)."""
        maps = self.maps[name]
        assert all(i in maps for i in range(last + 1)), f"{name} through layer {last} needs every layer from 0"
        future = torch.ones_like(maps[0], dtype=torch.bool).triu(1)  # (T, T)
        return joint([maps[i] for i in range(last + 1)], future if self.causal else None)


def attributions_for(family: Family, maps: Iterable[str], kept: Iterable[int]) -> Attributions:
    """The visitor a run that asks for ``maps`` (``Selection.maps``: "value_zeroing", "value_zeroing_rollout",
    "alti") needs: each per-layer map over the kept layers, over every layer from 0 where a map through
    the layers is asked for (value zeroing's rollout, ALTI's product)."""
    asked = set(maps)
    names = [name for name in LAYER_MAPS if name in asked or (name == "value_zeroing" and "value_zeroing_rollout" in asked)]
    kept = list(kept)
    every = bool(asked & {"value_zeroing_rollout", "alti"})
    return Attributions(family, names, range(max(kept) + 1) if every else kept)


def attributions_bytes(family: Family, maps: Iterable[str], n_tokens: int, layers: int) -> int:
    """What ``attributions_for``'s maps hold beside a run: a (T, T) float32 map per layer and name, and one
    layer's work in flight (a batch of value-zeroing re-runs, a block of ALTI's rows and its (H, T, D))."""
    asked = set(maps)
    per_layer = 4 * n_tokens * n_tokens * layers * (("alti" in asked) + bool(asked & {"value_zeroing", "value_zeroing_rollout"}))
    work = VALUE_ZEROING_BATCH_BYTES + ALTI_BLOCK_BYTES + 4 * family.heads * n_tokens * family.d_model
    return per_layer + work


def attach(visitor: Attributions, layers: list[Any], maps: Iterable[str], last: int) -> tuple[list[Any], dict[str, Rollout]]:
    """The kept ``layers`` with their asked-for per-layer maps (``LayerWeights.maps``), and the maps through
    layer ``last`` asked for (``Trace.maps``: "alti", "value_zeroing_rollout")."""
    asked = set(maps)
    kept = [
        dataclasses.replace(layer, maps={name: visitor.maps[name][layer.layer] for name in LAYER_MAPS if name in asked})
        for layer in layers
    ]
    through = {name: visitor.through(source, last) for name, source in (("alti", "alti"), ("value_zeroing_rollout", "value_zeroing")) if name in asked}
    return kept, through
