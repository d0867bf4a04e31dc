"""The page's data as binary chunks (the page's docstring says their layouts): uint16
weights to 4 decimals, float32 scores, norms and vectors, byte-shuffled and gzip'ed when
large, base64 in the page; and the budget that keeps a page under its size by leaving
whole chunks out, saying which and the flag that adds them.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import math
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.records.results import COMBINED
from attn_cli.render.terminal.fit import spans

if TYPE_CHECKING:
    from attn_cli.records.layers import LayerAttention, LayerWeights
    from attn_cli.records.trace import Trace


SIZE_FLAG = "--max-size"  # the flag that keeps more of a page
PRECISION = 4  # digits after the point, everywhere on the page
SCALE = 10**PRECISION
MASKED = 0xFFFF  # in the weights: the query may not see this key
COMPRESS_OVER = 64 * 1024  # smaller chunks stay plain (readable by browsers without DecompressionStream)


@dataclasses.dataclass
class Chunk:
    """One array of the page, made and encoded only when the budget asks for it."""

    dtype: str  # "u16" or "f32"
    shape: tuple[int, ...]
    make: Callable[[], bytes]  # the array's little-endian bytes
    _text: str | None = None
    _encoding: str = "raw"

    @property
    def size(self) -> int:
        """Bytes of the raw array."""
        return math.prod(self.shape) * (2 if self.dtype == "u16" else 4)

    @property
    def text(self) -> str:
        if self._text is None:
            data = self.make()
            if len(data) > COMPRESS_OVER:
                data, self._encoding = gzip_bytes(shuffled(data, 2 if self.dtype == "u16" else 4)), "gzip-shuffled"
            self._text = base64.b64encode(data).decode("ascii")
        return self._text

    def meta(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "encoding": self._encoding}


class Chunks:
    def __init__(self) -> None:
        self.all: dict[str, Chunk] = {}
        self.kept: dict[str, Chunk] = {}

    def add(self, chunk: Chunk) -> str:
        cid = f"attn-chunk-{len(self.all)}"
        self.all[cid] = chunk
        return cid


def shuffled(data: bytes, itemsize: int) -> bytes:
    """Byte planes: every number's first byte, then every second byte...: the high
    bytes of weights and the exponents of scores repeat, and gzip finds them."""
    import numpy as np

    return np.frombuffer(data, dtype=np.uint8).reshape(-1, itemsize).T.tobytes()  # (N, size) -> (size, N)


def gzip_bytes(data: bytes) -> bytes:
    # level 1: shuffled data gains little from more effort; mtime 0: the same trace gives the same bytes
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = compressor.compress(data) + compressor.flush()
    return out[:4] + b"\0\0\0\0" + out[8:]


def f32_scores(layer: LayerAttention) -> bytes:
    return f32(layer.scores)


def f32_norms(layer: LayerWeights) -> bytes:
    return f32(layer.norms)


def f32(tensor: Any) -> bytes:
    return tensor.detach().to(device="cpu").contiguous().float().numpy().astype("<f4", copy=False).tobytes()


def fixed_weights(layer: LayerAttention) -> bytes:
    """(H, T, T) uint16: the weights to PRECISION decimals, half to even, MASKED where hidden.

    float32 times 10**4 is exact in float64 (24 + 14 bits), so rounding it is
    rounding the float32's own decimal value, as Python's format does.
    """
    import torch

    weights = layer.weights.detach().double()  # (H, T, T)
    fixed = torch.round(weights.nan_to_num(0.0) * SCALE).to(torch.int32)  # (H, T, T)
    if layer.mask is not None:
        fixed[:, layer.mask] = MASKED
    fixed[weights.isnan()] = MASKED  # a renormalized row with no weight left (--hide-tokens)
    return fixed.numpy().astype("<u2").tobytes()


def scaled_is_derived(layer: LayerAttention) -> bool:
    """Whether the softmax input is exactly fround(raw / fround(divisor)), -inf where masked."""
    import torch

    derived = layer.scores / torch.tensor(layer.divisor, dtype=torch.float32)  # (H, T, T) float32 division
    if layer.mask is not None:
        derived.masked_fill_(layer.mask, float("-inf"))
    return bool(torch.equal(derived, layer.scaled_scores))


def scaled_bytes(layer: LayerAttention) -> bytes:
    scaled = layer.scaled_scores  # (H, T, T); masked cells (-inf) are read from the weights
    return f32(scaled.masked_fill(~scaled.isfinite(), 0))


class Budget:
    """Chooses which chunks go in, in order of use, until ``max_bytes``."""

    def __init__(self, max_bytes: int | None, fixed: int) -> None:
        self.max_bytes = max_bytes
        self.used = fixed

    def _take(self, chunks: Chunks, cid: str, force: bool = False) -> bool:
        chunk = chunks.all[cid]
        if self.max_bytes is not None and not force:
            # base64 of the raw bytes bounds the encoded size: skip the compression when even the best case cannot fit
            if self.used + chunk.size // 16 > self.max_bytes or self.used + len(chunk.text) > self.max_bytes:
                return False
        chunks.kept[cid] = chunk
        self.used += len(chunk.text) + 64
        return True

    def _drop(self, chunks: Chunks, cid: str) -> None:
        self.used -= len(chunks.kept.pop(cid).text) + 64

    def fill(self, traces: Sequence[Trace], manifests: list[dict[str, Any]], chunks: Chunks) -> list[str]:
        # 1. every text's first layer of weights, and its rollout (one T x T), whatever the size: a page shows something
        for m in manifests:
            self._take(chunks, m["layers"][0]["weights"], force=True)
            for name in COMBINED:
                if m.get(name) is not None:
                    self._take(chunks, m[name]["weights"], force=True)
        # 2. the other layers' weights, in order; 3. the toy's vectors; 4. raw (and scaled) scores
        missing_weights: list[list[int]] = [[] for _ in manifests]
        for i, m in enumerate(manifests):
            full = False
            for layer in m["layers"][1:]:
                if full or not self._take(chunks, layer["weights"]):
                    full = True
                    missing_weights[i].append(layer["index"])
                    layer["weights"] = None
        for m in manifests:
            if m["vectors"] is not None and not self._take(chunks, m["vectors"]["chunk"]):
                m["vectors"] = None
        # the norms (--norms) of the layers whose weights are in
        self.missing_norms = [[] for _ in manifests]
        for i, m in enumerate(manifests):
            for layer in m["layers"]:
                if layer["norms"] is not None and (layer["weights"] is None or not self._take(chunks, layer["norms"])):
                    if layer["weights"] is not None:
                        self.missing_norms[i].append(layer["index"])
                    layer["norms"] = None
        for m in manifests:  # each layer's attribution maps (--what), where its weights are in
            for layer in m["layers"]:
                for entry in (layer.get("maps") or {}).values():
                    if layer["weights"] is None or not self._take(chunks, entry["weights"]):
                        entry["weights"] = None
        missing_scores: list[list[int]] = [[] for _ in manifests]
        for i, (trace, m) in enumerate(zip(traces, manifests)):
            full = False
            for layer, entry in zip(trace.layers, m["layers"]):
                if entry["scores"] is None:  # weights only: nothing left out
                    continue
                if entry["weights"] is not None and not full and self._take(chunks, entry["scores"]):
                    if scaled_is_derived(layer):
                        entry["scaled"] = "derived"
                        continue
                    n, m = len(trace.tokens), len(trace.own_stack.key_tokens)
                    scaled = chunks.add(Chunk("f32", (layer.n_heads, n, m), functools.partial(scaled_bytes, layer)))
                    if self._take(chunks, scaled):
                        entry["scaled"] = scaled
                        continue
                    self._drop(chunks, entry["scores"])
                if entry["weights"] is not None:
                    full = True
                    missing_scores[i].append(entry["index"])
                entry["scores"] = None
        return self._notes(traces, manifests, missing_weights, missing_scores)

    def _notes(self, traces: Sequence[Trace], manifests: list[dict[str, Any]], weights: list[list[int]], scores: list[list[int]]) -> list[str]:
        if self.max_bytes is None:
            return []
        limit = f"{self.max_bytes / 2**20:g} MB"
        fix = f"{SIZE_FLAG} 0 keeps everything, or give a larger {SIZE_FLAG} in MB"
        notes = []
        for i, trace in enumerate(traces):
            stack = trace.view_stack
            which = f"{stack.name}: " if stack is not None else f"text {i + 1}: " if len(traces) > 1 else ""
            if weights[i]:
                notes.append(f"{which}layers {spans(weights[i])} are left out to keep the page under {limit}; {fix}")
            if scores[i]:
                notes.append(
                    f"{which}the raw and scaled scores of layer{'s' if len(scores[i]) > 1 else ''} {spans(scores[i])} "
                    f"are left out (the weights are there) to keep the page under {limit}; {fix}"
                )
            if self.missing_norms[i]:
                notes.append(f"{which}the value-weighted norms of layers {spans(self.missing_norms[i])} are left out to keep the page under {limit}; {fix}")
            if manifests[i].get("toy") and manifests[i]["vectors"] is None:
                notes.append(f"{which}the step-by-step view is left out to keep the page under {limit}; {fix}")
        if self.used > self.max_bytes:
            notes.append(f"the page is {self.used / 2**20:.1f} MB, over {limit}: one layer of this text is that large")
        return notes
