"""What the page's script reads about each trace beside the chunks: the tokens, the layers
and heads kept, the predictions, the stack, and the rows of the header (what ran).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from attn_cli.records.results import COMBINED
from attn_cli.records.about import filled
from attn_cli.records.hiding import cut
from attn_cli.records.results import Classification
from attn_cli.render.page.chunks import PRECISION, Chunk, Chunks, f32, f32_norms, f32_scores, fixed_weights
from attn_cli.render.terminal.fit import spans

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerWeights
    from attn_cli.records.tokens import Tokens
    from attn_cli.records.trace import ModelInfo, Trace


def trace_manifest(trace: Trace, chunks: Chunks) -> dict[str, Any]:
    """What the page's script reads about ``trace``; its tables go into ``chunks`` in page order
    (the layers, then the rollout, then the toy's vectors)."""
    tokens, stack = trace.tokens, trace.own_stack
    n, m = len(tokens), len(stack.key_tokens)  # queries and keys: T x T, or cross-attention's T_target x T_source
    layers = [_layer_entry(layer, chunks, n, m) for layer in trace.layers]
    manifest: dict[str, Any] = {
        "text": trace.text,
        "pair": trace.pair,
        "tokens": _token_lists(tokens),
        "model": _model_entry(trace.model),
        "header": _header_rows(trace),
        "stack": view.name if (view := trace.view_stack) is not None else None,  # one stack of an encoder-decoder, or None
        # cross-attention's columns: the source's tokens (the rows are the decoder's inputs)
        "keys": _token_lists(stack.key_tokens) if stack.cross else None,
        "layers": layers,
        "vectors": None,
        **{name: None for name in COMBINED},  # the maps through the layers: rollout, flow, alti, value_zeroing_rollout
        "predictions": _predictions(trace),
        "explained": trace.explained.as_dict() if trace.explained is not None else None,  # attention x gradient's target
    }
    for name in COMBINED:  # --rollout, --what flow, alti, ...: drawn like one head's weights
        combined = trace.combined(name)
        if combined is not None:
            manifest[name] = map_entry(name, combined.weights, combined.mask, combined.through_layer, chunks)
    for layer, entry in zip(trace.layers, layers):  # --what value-zeroing, alti, attention-gradient: each layer's own
        entry["maps"] = {name: map_entry(name, m, layer.mask, layer.layer, chunks) for name, m in layer.maps.items()}
    manifest.update(_toy_entries(trace, chunks))
    return manifest


def map_entry(name: str, weights: torch.Tensor, mask: torch.Tensor | None, through: int, chunks: Chunks) -> dict[str, Any]:
    """A (T, T) map drawn as one head's weights are: shares of a row as they are; attention x gradient's relevance
    (not a share) divided by its largest value, ``scale``, which the page multiplies back for its numbers."""
    from attn_cli.records.layers import LayerWeights as Drawn

    n = weights.shape[-1]
    scale = float(weights.max()) if name == "attention_gradient" else None
    drawn = weights / scale if scale else weights
    as_layer = Drawn(drawn[None], mask, 1.0, through)  # (1, T, T)
    return {
        "through": through,
        "weights": chunks.add(Chunk("u16", (1, n, n), functools.partial(fixed_weights, as_layer))),
        "masked": mask is not None and bool(mask.any()),
        "scale": scale,
    }


def _layer_entry(layer: LayerWeights, chunks: Chunks, n: int, m: int) -> dict[str, Any]:
    from attn_cli.records.layers import LayerAttention, SavedScores

    heads = layer.n_heads
    return {
        "index": layer.layer,
        "heads": heads,
        "divisor": layer.divisor,
        "divisorText": layer.divisor_text,
        "masked": layer.causal,
        "weights": chunks.add(Chunk("u16", (heads, n, m), functools.partial(fixed_weights, layer))),
        # a trace of weights alone (a saved one, attention from elsewhere) has no scores to show
        "scores": chunks.add(Chunk("f32", (heads, n, m), functools.partial(f32_scores, layer)))
        if isinstance(layer, (LayerAttention, SavedScores))
        else None,
        "scaled": None,  # decided with the scores: "derived", or a chunk of its own
        # --norms: each head's value-weighted norms ||a f(x)||, float32 (H, T, T)
        "norms": chunks.add(Chunk("f32", (heads, n, m), functools.partial(f32_norms, layer))) if layer.norms is not None else None,
    }


def _model_entry(model: ModelInfo) -> dict[str, Any]:
    return {
        "trained": model.about.names_model,  # page.js: the heading names the model, one layer has an overview
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
    }


def _toy_entries(trace: Trace, chunks: Chunks) -> dict[str, Any]:
    """The vectors and settings of a source with a step-by-step view (its ``about.steps``: the
    toy's one layer), which follows the model's own softmax, so not for a trace whose hidden
    tokens were taken out; else nothing."""
    from attn_cli.records.layers import LayerAttention

    steps = trace.model.about.steps
    if steps is None or trace.renormalized or not isinstance(trace.layers[0], LayerAttention):
        return {}
    layer = trace.layers[0]
    parts = [("x", layer.x), ("queries", layer.queries), ("keys", layer.keys), ("values", layer.values), ("context", layer.context)]
    if layer.dropped_weights is not None:
        parts.append(("dropped", layer.dropped_weights))
    offsets, total = {}, 0
    for name, tensor in parts:
        if tensor is not None:
            offsets[name] = {"offset": total, "shape": list(tensor.shape)}
            total += tensor.numel()
    make = functools.partial(lambda ts: b"".join(f32(t) for t in ts), [t for _, t in parts if t is not None])
    toy = {SCRIPT_NAMES.get(name, name): value for name, value in steps}
    return {"vectors": {"chunk": chunks.add(Chunk("f32", (total,), make)), "parts": offsets}, "toy": toy}


SCRIPT_NAMES = {"out_proj": "outProj", "d_k": "dK", "d_v": "dV"}  # the page's script's names for the settings


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
    if isinstance(p, Classification):  # one position's labels: shown on the token the head reads
        return {"k": p.k, "next": False, "classified": {"position": p.position, "labels": list(p.labels), "probs": [f"{v:.{PRECISION}f}" for v in p.scores]}}
    kept = list(trace.hiding.kept) if trace.renormalized and trace.hiding is not None else list(range(len(p.labels)))
    probs = p.probs.tolist()
    return {
        "k": p.k,
        "next": any(layer.causal for layer in trace.layers),  # decoders predict the next token, masked LMs the token itself
        "labels": [list(p.labels[i]) for i in kept],
        "probs": [[f"{v:.{PRECISION}f}" for v in probs[i]] for i in kept],
    }


def _header_rows(trace: Trace) -> list[list[str]]:
    model, tokens, stack = trace.model, trace.tokens, trace.own_stack
    rows = [["tokenizer", tokens.tokenizer], ["tokens", str(len(tokens))]]
    for hiding in cut(trace):  # the rows' tokens; cross-attention's source columns apart
        source = stack.cross and hiding is stack.key_hiding
        if not source:
            rows[1][1] = f"{len(hiding.kept)} shown of {len(hiding.kept) + len(hiding.hidden)}"
        rows.append([
            "hidden in the source" if source else "hidden",
            f"{', '.join(dict.fromkeys(hiding.labels))} (position{'s' if len(hiding.hidden) > 1 else ''} {spans(hiding.hidden)}): "
            f"left out of every view; each row is divided by its weight on the tokens shown, so it sums to 1" + (" (the step-by-step view, which follows the model's own softmax, too)" if model.about.steps is not None else ""),
        ])
    rows += [list(row) for row in filled(model.about.page, _own(trace))]
    if trace.pair is not None:
        rows.append(["pair", trace.pair])
    if trace.truncated is not None:  # the text above is whole; the views have its first tokens
        rows.append(["truncated", trace.truncated.sentence(pair=trace.pair is not None) + ", which the text above still shows"])
    view = trace.view_stack
    if view is not None:  # one stack of an encoder-decoder: the stack picker chooses
        rows.append(["stack", STACK_ROWS[view.name]])
        if view.cross:
            rows.append(["source", view.key_text])
    generation = trace.generation()
    if generation is not None:
        rows.append(["generated", generation])
    return rows


def _own(trace: Trace) -> dict[str, str | None]:
    """The page's values for its header's slots: the trace's own (None: it has none)."""
    model, first = trace.model, trace.layers[0]
    kept = [layer.layer for layer in trace.layers]
    return {
        "model": model.source + (f" @ {model.revision[:12]}" if model.revision else ""),  # the full path here; titles use the short name
        "architecture": f"{model.architecture} ({model.family})",
        "layers": f"{model.layers}" + ("" if len(kept) == model.layers else f", this page has {spans(kept)}"),
        "heads": f"{model.heads}" + (f" (key/value heads {model.kv_heads})" if model.kv_heads != model.heads else ""),
        "head size": str(model.head_dim) if model.head_dim else None,  # 0: not saved
        "d_model": str(model.d_model) if model.d_model else None,
        "dtype": model.dtype,
        "scale factor": f"{1 / first.divisor:.6g}" + (f" = 1/{first.divisor_text}" if first.divisor_text else ""),
        "input": model.input_text,
    }


STACK_ROWS = {
    "encoder": "encoder self-attention: the source's tokens attend to each other",
    "decoder": "decoder self-attention, causal: the decoder's inputs (the target shifted right) attend to those before them",
    "cross": "cross-attention: each decoder input (left) attends to the source's tokens (right)",
}
