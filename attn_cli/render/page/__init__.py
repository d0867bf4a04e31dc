"""The page of `attn-cli html`: one self-contained HTML file to explore attention.

``page(traces, command=...)`` returns the whole file as a string: styles, script
and data inline, no request of any kind (a Content-Security-Policy forbids them),
and it works from ``file://``. It reads only ``Trace``, ``ModelInfo``,
``LayerAttention`` and ``Tokens`` (the toy's ``Config`` only through
``trace.model.config``), so a trained model's many layers render unchanged.

Shapes: T tokens, D d_model, H heads, Dk/Dv per-head sizes.

The data travels as binary chunks, base64 in ``<script type="text/plain">``
tags (gzip'ed, for the browser's ``DecompressionStream``, when large), each
decoded on first use:

- weights, per layer: uint16 (H, T, T) holding ``round(w * 10**4)``, the weight
  to the page's 4 decimals rounded half to even, as Python's ``f"{w:.4f}"``
  rounds the JSON's float32; ``MASKED`` marks a cell the query may not see;
- raw scores, per layer: float32 (H, T, T), exact; the scaled scores are
  ``fround(raw / fround(divisor))``, which is how torch divides float32 by a
  Python float (checked per layer; a layer where it differs carries its own);
- the toy's vectors: float32 X (T, D), Q, K (H, T, Dk), V, context (H, T, Dv).

The script formats a float32 to 4 decimals exactly as Python does, so every
number shown equals the JSON export's to the shown precision.

A page is kept under ``max_bytes`` by leaving out whole chunks: later layers'
weights first go last, raw scores before weights; the page and ``Page.left_out``
say what is missing and the flag that adds it.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import html
import json
import math
import zlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from attn_cli.records.hiding import cut
from attn_cli.render.commands import command_line
from attn_cli.render.terminal.fit import spans
from attn_cli.records.trace import EXTERNAL, STACKS
from attn_cli.records.hiding import shown

if TYPE_CHECKING:
    from attn_cli.records.layers import LayerAttention, LayerWeights
    from attn_cli.records.tokens import Tokens
    from attn_cli.records.trace import Trace

DEFAULT_MAX_BYTES = 20 * 2**20  # a 512-token page of a 12-layer model keeps a few layers
NOTEBOOK_MAX_BYTES = 8 * 2**20  # a notebook stores every output it shows
PRECISION = 4  # digits after the point, everywhere on the page
SCALE = 10**PRECISION
MASKED = 0xFFFF  # in the weights: the query may not see this key
COMPRESS_OVER = 64 * 1024  # smaller chunks stay plain (readable by browsers without DecompressionStream)
SIZE_FLAG = "--max-size"

_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


@dataclasses.dataclass(frozen=True)
class Page:
    html: str
    left_out: tuple[str, ...]  # what the size budget left out, in sentences (the page shows them too)


VIEWS = {"head": "heads", "heads": "heads", "matrix": "matrix", "model": "overview", "overview": "overview", "steps": "steps"}


def page(
    traces: Sequence[Trace], *, command: str, max_bytes: int | None = DEFAULT_MAX_BYTES, title: str | None = None,
    view: str | None = None,
) -> str:  # fmt: skip
    """The whole HTML file for ``traces`` (one, or several for --lines: the page has a picker).

    ``command`` is the command line that reproduces the page, shown in its header;
    ``max_bytes`` bounds the file's size (None: keep everything); ``view``: the tab it
    opens on (head, matrix, model, steps; default the head view).
    """
    return build(traces, command=command, max_bytes=max_bytes, title=title, view=view).html


def build(
    traces: Sequence[Trace], *, command: str, max_bytes: int | None = DEFAULT_MAX_BYTES, title: str | None = None,
    view: str | None = None, stack: str | None = None,
) -> Page:  # fmt: skip
    """``page``'s page and what it left out. An encoder-decoder's trace (one, with --target)
    becomes its three stacks, the page's picker choosing between them; ``stack`` the one
    it opens on (default cross-attention)."""
    if not traces:
        raise ValueError("a page needs at least one trace")
    start = 0
    if traces[0].target_tokens is not None:
        if len(traces) > 1:
            raise ValueError("a page holds one encoder-decoder trace")
        traces = [traces[0].stack(name) for name in STACKS]
        start = STACKS.index(stack or "cross")
    traces = [shown(trace) for trace in traces]  # --hide-tokens: the page never sees the hidden tokens
    chunks = _Chunks()
    manifests = [_trace_manifest(trace, chunks) for trace in traces]
    shell = _shell(title or _title(traces))
    budget = _Budget(max_bytes, len(shell) + len(_json(manifests)) + 4096)
    left_out = budget.fill(traces, manifests, chunks)
    manifest = {
        "version": 1,
        "precision": PRECISION,
        "scale": SCALE,
        "masked": MASKED,
        "command": command,
        "maxBytes": max_bytes,
        "sizeFlag": SIZE_FLAG,
        "leftOut": left_out,
        "traces": manifests,
        "chunks": {cid: chunk.meta() for cid, chunk in chunks.kept.items()},
        "view": VIEWS.get(view or "head", "heads"),
        "start": start,  # the trace the page opens on
    }
    data = [f'<script type="application/json" id="attn-manifest">{_json(manifest)}</script>']
    data += [f'<script type="text/plain" id="{cid}">{chunk.text}</script>' for cid, chunk in chunks.kept.items()]
    return Page(shell.replace("<!--DATA-->", "\n".join(data), 1), tuple(left_out))


def notebook_html(
    traces: Sequence[Trace], *, height: int = 640, max_bytes: int | None = NOTEBOOK_MAX_BYTES, view: str | None = None
) -> str:
    """The page in a sandboxed ``<iframe srcdoc>``: scripts run, but in their own
    opaque origin, so several pages in one notebook never meet, and nothing loads
    from a CDN."""
    doc = page(traces, command=reproduce_command(traces[0]), max_bytes=max_bytes, view=view)
    return (
        f'<iframe class="attn-cli-page" sandbox="allow-scripts" style="width: 100%; height: {height}px; border: 0" '
        f'title="attention: {html.escape(_title(traces), quote=True)}" srcdoc="{html.escape(doc, quote=True)}"></iframe>'
    )


# -- the command line that reproduces a trace (for pages made from the Python API) --

def reproduce_command(trace: Trace) -> str:
    """``attn-cli html TEXT ...`` with the options that made ``trace``."""
    if trace.model.family == EXTERNAL:
        return "attention computed outside attn-cli: trace.to_json() saves it, attn-cli html --from FILE.json draws it"
    extra: list[str] = []
    if trace.model.config is None:
        kept = [layer.layer for layer in trace.layers]
        if kept != list(range(trace.model.layers)):
            extra += ["--layer", ",".join(str(i) for i in kept)]
    if trace.hiding is not None and trace.hiding.active:
        extra += ["--hide-tokens", ",".join(str(i) for i in trace.hiding.hidden)]
    return command_line(trace, "html", *extra)


# -- data ----------------------------------------------------------------------

@dataclasses.dataclass
class _Chunk:
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
                data, self._encoding = _gzip(_shuffle(data, 2 if self.dtype == "u16" else 4)), "gzip-shuffled"
            self._text = base64.b64encode(data).decode("ascii")
        return self._text

    def meta(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "encoding": self._encoding}


class _Chunks:
    def __init__(self) -> None:
        self.all: dict[str, _Chunk] = {}
        self.kept: dict[str, _Chunk] = {}

    def add(self, chunk: _Chunk) -> str:
        cid = f"attn-chunk-{len(self.all)}"
        self.all[cid] = chunk
        return cid


def _shuffle(data: bytes, itemsize: int) -> bytes:
    """Byte planes: every number's first byte, then every second byte...: the high
    bytes of weights and the exponents of scores repeat, and gzip finds them."""
    import numpy as np

    return np.frombuffer(data, dtype=np.uint8).reshape(-1, itemsize).T.tobytes()  # (N, size) -> (size, N)


def _gzip(data: bytes) -> bytes:
    # level 1: shuffled data gains little from more effort; mtime 0: the same trace gives the same bytes
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = compressor.compress(data) + compressor.flush()
    return out[:4] + b"\0\0\0\0" + out[8:]


def _f32_scores(layer: LayerAttention) -> bytes:
    return _f32(layer.scores)


def _f32_norms(layer: LayerWeights) -> bytes:
    return _f32(layer.norms)


def _f32(tensor: Any) -> bytes:
    return tensor.detach().to(device="cpu").contiguous().float().numpy().astype("<f4", copy=False).tobytes()


def _fixed_weights(layer: LayerAttention) -> bytes:
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


def _scaled_is_derived(layer: LayerAttention) -> bool:
    """Whether the softmax input is exactly fround(raw / fround(divisor)), -inf where masked."""
    import torch

    derived = layer.scores / torch.tensor(layer.divisor, dtype=torch.float32)  # (H, T, T) float32 division
    if layer.mask is not None:
        derived.masked_fill_(layer.mask, float("-inf"))
    return bool(torch.equal(derived, layer.scaled_scores))


def _scaled_bytes(layer: LayerAttention) -> bytes:
    scaled = layer.scaled_scores  # (H, T, T); masked cells (-inf) are read from the weights
    return _f32(scaled.masked_fill(~scaled.isfinite(), 0))


def _trace_manifest(trace: Trace, chunks: _Chunks) -> dict[str, Any]:
    from attn_cli.records.layers import LayerAttention, SavedScores

    tokens = trace.tokens
    n, m = len(tokens), len(trace.columns)  # queries and keys: T x T, or cross-attention's T_target x T_source
    model = trace.model
    layers = []
    for layer in trace.layers:
        heads = layer.n_heads
        entry: dict[str, Any] = {
            "index": layer.layer,
            "heads": heads,
            "divisor": layer.divisor,
            "divisorText": layer.divisor_text,
            "masked": layer.causal,
            "weights": chunks.add(_Chunk("u16", (heads, n, m), functools.partial(_fixed_weights, layer))),
            # a trace of weights alone (a saved one, attention from elsewhere) has no scores to show
            "scores": chunks.add(_Chunk("f32", (heads, n, m), functools.partial(_f32_scores, layer)))
            if isinstance(layer, (LayerAttention, SavedScores))
            else None,
            "scaled": None,  # decided with the scores: "derived", or a chunk of its own
            # --norms: each head's value-weighted norms ||a f(x)||, float32 (H, T, T)
            "norms": chunks.add(_Chunk("f32", (heads, n, m), functools.partial(_f32_norms, layer))) if layer.norms is not None else None,
        }
        layers.append(entry)
    manifest: dict[str, Any] = {
        "text": trace.text,
        "pair": trace.pair,
        "tokens": _token_lists(tokens),
        "model": {
            "trained": model.trained,
            "source": model.source,
            "name": model.name,
            "family": model.family,
            "layers": model.layers,
            "heads": model.heads,
            "kvHeads": model.kv_heads,
            "headDim": model.head_dim,
            "valueDim": model.value_dim,
            "dModel": model.d_model,
            "inputText": model.input_text,
        },
        "header": _header_rows(trace),
        "stack": trace.stack_name,  # one stack of an encoder-decoder, or None
        # cross-attention's columns: the source's tokens (the rows are the decoder's inputs)
        "keys": _token_lists(trace.key_tokens) if trace.key_tokens is not None else None,
        "layers": layers,
        "vectors": None,
        "rollout": None,
        "predictions": _predictions(trace),
    }
    if trace.rollout is not None:  # --rollout: drawn like one head's weights
        from attn_cli.records.layers import LayerWeights

        as_layer = LayerWeights(trace.rollout.weights[None], trace.rollout.mask, 1.0, trace.rollout.through_layer)  # (1, T, T)
        manifest["rollout"] = {
            "through": trace.rollout.through_layer,
            "weights": chunks.add(_Chunk("u16", (1, n, n), functools.partial(_fixed_weights, as_layer))),
            "masked": trace.rollout.causal,
        }
    config = model.config
    if config is not None and not trace.renormalized and isinstance(trace.layers[0], LayerAttention):  # step by step follows the model's own softmax
        layer = trace.layers[0]
        parts = [("x", layer.x), ("queries", layer.queries), ("keys", layer.keys), ("values", layer.values), ("context", layer.context)]
        if layer.dropped_weights is not None:
            parts.append(("dropped", layer.dropped_weights))
        offsets, total = {}, 0
        for name, tensor in parts:
            if tensor is not None:
                offsets[name] = {"offset": total, "shape": list(tensor.shape)}
                total += tensor.numel()
        make = functools.partial(lambda ts: b"".join(_f32(t) for t in ts), [t for _, t in parts if t is not None])
        manifest["vectors"] = {"chunk": chunks.add(_Chunk("f32", (total,), make)), "parts": offsets}
        manifest["toy"] = {
            "causal": config.causal,
            "scale": config.scale,
            "temperature": config.temperature,
            "dropout": config.dropout,
            "projections": config.projections,
            "outProj": config.out_proj,
            "dK": config.d_k,
            "dV": config.d_v,
        }
    return manifest


def _token_lists(tokens: Tokens) -> dict[str, Any]:
    n = len(tokens)
    return {
        "labels": list(tokens.labels),
        "texts": list(tokens.texts),
        "ids": list(tokens.ids),
        "special": [tokens.is_special(i) for i in range(n)],
        "positions": [tokens.position(i) for i in range(n)],
        "tokenizer": tokens.tokenizer,
    }


def _predictions(trace: Trace) -> dict[str, Any] | None:
    """--predict: per position, the top K labels and their probabilities (4 decimals, as fixed text)."""
    p = trace.predictions
    if p is None:
        return None
    kept = list(trace.hiding.kept) if trace.renormalized and trace.hiding is not None else list(range(len(p.labels)))
    probs = p.probs.tolist()
    return {
        "k": p.k,
        "next": any(layer.causal for layer in trace.layers),  # decoders predict the next token, masked LMs the token itself
        "labels": [list(p.labels[i]) for i in kept],
        "probs": [[f"{v:.{PRECISION}f}" for v in probs[i]] for i in kept],
    }


def _header_rows(trace: Trace) -> list[list[str]]:
    model, tokens = trace.model, trace.tokens
    rows = [["tokenizer", tokens.tokenizer], ["tokens", str(len(tokens))]]
    for hiding in cut(trace):  # the rows' tokens; cross-attention's source columns apart
        source = hiding is trace.key_hiding
        if not source:
            rows[1][1] = f"{len(hiding.kept)} shown of {len(hiding.kept) + len(hiding.hidden)}"
        rows.append([
            "hidden in the source" if source else "hidden",
            f"{', '.join(dict.fromkeys(hiding.labels))} (position{'s' if len(hiding.hidden) > 1 else ''} {spans(hiding.hidden)}): "
            f"left out of every view; each row is divided by its weight on the tokens shown, so it sums to 1" + (" (the step-by-step view, which follows the model's own softmax, too)" if model.config is not None else ""),
        ])
    if model.config is not None:
        rows.append(["model", f"toy, one layer. {model.config.weights_origin()}"])
        rows += [phrase.split(" ", 1) if " " in phrase else [phrase, ""] for phrase in model.config.describe(tokens.tokenizer)[1:]]
        rows.append(["scale factor", f"{1 / trace.layers[0].divisor:.6g}" + (f" = 1/{trace.layers[0].divisor_text}" if trace.layers[0].divisor_text else "")])
        rows.append(["input", model.input_text])
        return rows
    rows.append(["model", model.source + (f" @ {model.revision[:12]}" if model.revision else "")])  # the full path here; titles use the short name
    if model.family == EXTERNAL:  # weights alone: what made them is not known here
        rows.append(["computed", "outside attn-cli (weights given to attn_cli.from_attentions)"])
    else:
        rows.append(["architecture", f"{model.architecture} ({model.family})"])
    kept = [layer.layer for layer in trace.layers]
    rows.append(["layers", f"{model.layers}" + ("" if len(kept) == model.layers else f", this page has {spans(kept)}")])
    heads = f"{model.heads}" + (f" (key/value heads {model.kv_heads})" if model.kv_heads != model.heads else "")
    rows.append(["heads", heads])
    rows += [[name, str(value)] for name, value in (("head size", model.head_dim), ("d_model", model.d_model)) if value]  # 0: not saved
    if model.family != EXTERNAL:
        rows.append(["dtype", model.dtype])
    if trace.pair is not None:
        rows.append(["pair", trace.pair])
    if trace.stack_name is not None:  # one stack of an encoder-decoder: the stack picker chooses
        rows.append(["stack", STACK_ROWS[trace.stack_name]])
        if trace.key_text is not None:
            rows.append(["source", trace.key_text])
    if trace.prompt_length is not None:
        added = len(tokens) - trace.prompt_length
        rows.append(["generated", f"{added} token{'s' if added != 1 else ''} from position {trace.prompt_length} (greedy): {trace.generated_text!r}"])
    return rows


STACK_ROWS = {
    "encoder": "encoder self-attention: the source's tokens attend to each other",
    "decoder": "decoder self-attention, causal: the decoder's inputs (the target shifted right) attend to those before them",
    "cross": "cross-attention: each decoder input (left) attends to the source's tokens (right)",
}


class _Budget:
    """Chooses which chunks go in, in order of use, until ``max_bytes``."""

    def __init__(self, max_bytes: int | None, fixed: int) -> None:
        self.max_bytes = max_bytes
        self.used = fixed

    def _take(self, chunks: _Chunks, cid: str, force: bool = False) -> bool:
        chunk = chunks.all[cid]
        if self.max_bytes is not None and not force:
            # base64 of the raw bytes bounds the encoded size: skip the compression when even the best case cannot fit
            if self.used + chunk.size // 16 > self.max_bytes or self.used + len(chunk.text) > self.max_bytes:
                return False
        chunks.kept[cid] = chunk
        self.used += len(chunk.text) + 64
        return True

    def _drop(self, chunks: _Chunks, cid: str) -> None:
        self.used -= len(chunks.kept.pop(cid).text) + 64

    def fill(self, traces: Sequence[Trace], manifests: list[dict[str, Any]], chunks: _Chunks) -> list[str]:
        # 1. every text's first layer of weights, and its rollout (one T x T), whatever the size: a page shows something
        for m in manifests:
            self._take(chunks, m["layers"][0]["weights"], force=True)
            if m["rollout"] is not None:
                self._take(chunks, m["rollout"]["weights"], force=True)
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
        missing_scores: list[list[int]] = [[] for _ in manifests]
        for i, (trace, m) in enumerate(zip(traces, manifests)):
            full = False
            for layer, entry in zip(trace.layers, m["layers"]):
                if entry["scores"] is None:  # weights only: nothing left out
                    continue
                if entry["weights"] is not None and not full and self._take(chunks, entry["scores"]):
                    if _scaled_is_derived(layer):
                        entry["scaled"] = "derived"
                        continue
                    n, m = len(trace.tokens), len(trace.columns)
                    scaled = chunks.add(_Chunk("f32", (layer.n_heads, n, m), functools.partial(_scaled_bytes, layer)))
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
            which = f"{trace.stack_name}: " if trace.stack_name else f"text {i + 1}: " if len(traces) > 1 else ""
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


# -- the file ------------------------------------------------------------------

def _json(value: Any) -> str:
    """JSON safe inside a <script> element: no '<' at all, so never '</script>'."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _title(traces: Sequence[Trace]) -> str:
    text = " ".join(traces[0].text.split())
    short = text if len(text) <= 60 else text[:59] + "…"
    more = f" (+{len(traces) - 1} more)" if len(traces) > 1 else ""
    model = traces[0].model
    return f"{short}{more}" + (f" · {model.name}" if model.trained else "")


def _shell(title: str) -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="color-scheme" content="light dark">\n'
        '<meta name="generator" content="attn-cli html">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>attention: {html.escape(title)}</title>\n"
        f"<style>\n{_asset('page.css')}</style>\n</head>\n<body>\n"
        '<noscript><p>This page draws attention with JavaScript; turn it on to explore it.</p></noscript>\n'
        '<div id="app" aria-busy="true"><p class="loading">Loading…</p></div>\n'
        "<!--DATA-->\n"
        f"<script>\n{_asset('page.js')}</script>\n</body>\n</html>\n"
    )

