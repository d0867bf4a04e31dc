"""The Python API: attn-cli's traces and views from a notebook or a script.

A front end like the command line (it reaches both the sources and the renderers),
with the same errors: ``attn_cli.runtime.errors``' typed exceptions, whose messages are
the command line's. ``Trace``'s notebook methods (``heatmap``, ``page``,
``to_json``...) call the functions here.

    import attn_cli
    t = attn_cli.trace("The cat sat on the mat", model=path)   # every layer and head
    t.weights(layer=-1, head=0)                                  # (T, T) tensor
    t.heatmap(layer=2)                                           # a matplotlib Figure
    attn_cli.head_view(attentions, tokens)                       # bertviz's call, drawn offline
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch
    from matplotlib.figure import Figure

    from attn_cli.records.trace import Trace

# The toy model's keyword arguments: the command line's options, as Config names them
# (num_heads is --heads: ``heads`` chooses which heads to keep, as --head does).
TOY_OPTIONS = {
    "tokenizer": "tokenizer", "seed": "seed", "d_model": "d_model", "d_k": "d_k", "d_v": "d_v", "num_heads": "heads",
    "causal": "causal", "scale": "scale", "temperature": "temperature", "dropout": "dropout", "qkv_bias": "qkv_bias",
    "out_proj": "out_proj", "init": "init", "projections": "projections", "positional": "positional",
    "embeddings": "embeddings", "max_tokens": "max_tokens",
}  # fmt: skip
MODEL_OPTIONS = ("pair", "revision", "dtype", "device", "truncate", "target")


def trace(
    text: str,
    *,
    model: str | os.PathLike[str] | None = None,
    layers: Any = None,
    heads: Any = None,
    hide_tokens: str | Sequence[Any] | None = None,
    rollout: bool = False,
    norms: bool = False,
    **options: Any,
) -> Trace:
    """``text`` through the seeded toy model (its options as keywords: ``num_heads=4,
    causal=True, tokenizer="words"``...) or through the checkpoint ``model`` (a folder,
    str or any os.PathLike, or ORG/NAME in the Hugging Face cache; ``pair``,
    ``revision``, ``dtype``, ``device``, ``truncate`` as keywords; ``target``, an
    encoder-decoder's decoder text, gives a trace of three stacks: ``Trace.stack("cross")``,
    ``"decoder"`` or ``"encoder"`` is each as a trace of its own). ``layers`` and
    ``heads``: what to keep, as --layer and --head take them (an index, a list, a
    range, "0-3", "all"); every layer and head by default. ``hide_tokens``: as
    --hide-tokens ("special", positions, labels). ``rollout``, ``norms``: as --rollout and
    --norms (``Trace.rollout``, each kept layer's ``norms`` and ``layer_norms``). Raises the
    command line's errors."""
    from attn_cli.sources.toy.config import Config, Init, Positional
    from attn_cli.records.hiding import HideSpec, hide
    from attn_cli.source import SourceSpec
    from attn_cli.records.selection import IndexSpec

    if not isinstance(text, str):
        raise UsageError(f"text is a {type(text).__name__}; give a str")
    unknown = sorted(set(options) - set(TOY_OPTIONS) - set(MODEL_OPTIONS))
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)}: not an option of attn_cli.trace(); the toy model takes {', '.join(TOY_OPTIONS)}, "
            f"a checkpoint {', '.join(MODEL_OPTIONS)}"
        )
    toy = {TOY_OPTIONS[k]: v for k, v in options.items() if k in TOY_OPTIONS}
    trained = {k: v for k, v in options.items() if k in MODEL_OPTIONS}
    if model is not None:
        given = sorted(set(options) & (set(TOY_OPTIONS) - {"seed", "max_tokens"}))
        if given:
            raise UsageError(
                f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} of the seeded toy model; "
                f"model={os.fspath(model)!s} brings its own tokenizer, sizes and weights: drop {'it' if len(given) == 1 else 'them'}"
            )
    elif trained:
        raise UsageError(f"{', '.join(sorted(trained))} only make{'s' if len(trained) == 1 else ''} sense with model=")
    if isinstance(toy.get("init"), str):
        toy["init"] = Init(toy["init"])
    if isinstance(toy.get("positional"), str):
        toy["positional"] = Positional(toy["positional"])
    if toy.get("embeddings") is not None:
        toy["embeddings"] = Path(os.fspath(toy["embeddings"]))
    try:
        config = Config(**toy)
    except ValueError as err:  # an Init or Positional name that is not one
        raise UsageError(str(err)) from None
    spec = SourceSpec(
        config=config,
        model=None if model is None else os.fspath(model),
        layers=IndexSpec.parse(_index_text(layers, "layers"), "layers"),
        heads=IndexSpec.parse(_index_text(heads, "heads"), "heads"),
        hide=HideSpec.parse(_index_text(hide_tokens, "hide_tokens")),
        **trained,
    )
    source = spec.open()
    made = source.run(text, spec.select(source, everything=True, rollout=rollout, norms=norms))
    return hide(made, spec.hide)


def _index_text(value: Any, name: str) -> str | None:
    """An index, a list or range of them, or a string, as the command line writes it."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise UsageError(f"{name}={value!r}: give an index, a list of indexes, a range or 'all'")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (range, Sequence)):
        items = list(value)
        if not items or not all(isinstance(i, (int, str)) and not isinstance(i, bool) for i in items):
            raise UsageError(f"{name}={value!r}: give an index, a list of indexes, a range or 'all'")
        return ",".join(str(i) for i in items)
    raise UsageError(f"{name}={value!r}: give an index, a list of indexes, a range or 'all'")


def from_attentions(
    attentions: Any,
    tokens: Sequence[str],
    *,
    model_name: str | None = None,
    special: Sequence[bool] | None = None,
    rollout: bool = False,
) -> Trace:
    """A Trace of attention computed elsewhere (see ``attn_cli.saved.from_attentions``);
    ``rollout``: with the rollout through its last layer (every layer from 0 must be given)."""
    import dataclasses

    from attn_cli.analysis.rollout import rollout_of
    from attn_cli.saved import from_attentions as made

    trace = made(attentions, tokens, model_name=model_name, special=special)
    return dataclasses.replace(trace, rollout=rollout_of(trace.layers)) if rollout else trace


def load(path: str | os.PathLike[str]) -> Trace:
    """The trace a schema-2 JSON holds (``run -F json``, ``Trace.to_json()``), to re-draw."""
    from attn_cli.saved import load_json

    return load_json(path)


# -- views -----------------------------------------------------------------------


class View:
    """An attn-cli page that shows itself in Jupyter (a sandboxed iframe, no network)
    and gives its HTML as ``html`` (``save(path)`` writes it)."""

    def __init__(self, traces: Sequence[Trace], height: int, view: str) -> None:
        self.traces = list(traces)
        self.height = height
        self.view = view

    def _repr_html_(self) -> str:
        from attn_cli.render.html import notebook_html

        return notebook_html(self.traces, height=self.height, view=self.view)

    @property
    def html(self) -> str:
        return page(self.traces[0], view=self.view)

    def save(self, path: str | os.PathLike[str]) -> None:
        from attn_cli.runtime.files import atomic_writer

        with atomic_writer(Path(os.fspath(path))) as f:
            f.write(self.html.encode("utf-8"))


def head_view(
    attention: Any,
    tokens: Sequence[str],
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    layer: int | None = None,
    heads: Sequence[int] | None = None,
    include_layers: Sequence[int] | None = None,
    html_action: str = "view",
) -> Any:
    """bertviz's ``head_view(attention, tokens)``, drawn by attn-cli: ``attention`` as
    transformers returns it (a tuple of (1, H, T, T) per layer) or a Trace. Returns an
    object that shows itself in a notebook; ``html_action="return"`` gives the HTML.
    ``layer`` and ``heads`` keep that layer and those heads; ``prettify_tokens`` is taken
    for bertviz's calls (tokens are drawn as given, their whitespace made visible)."""
    return _view(attention, tokens, sentence_b_start, include_layers, heads, layer, "head", html_action)


def model_view(
    attention: Any,
    tokens: Sequence[str],
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    display_mode: str = "dark",
    include_layers: Sequence[int] | None = None,
    include_heads: Sequence[int] | None = None,
    html_action: str = "view",
) -> Any:
    """bertviz's ``model_view(attention, tokens)``: every layer by every head."""
    return _view(attention, tokens, sentence_b_start, include_layers, include_heads, None, "model", html_action)


def _view(
    attention: Any,
    tokens: Sequence[str] | None,
    sentence_b_start: int | None,
    include_layers: Sequence[int] | None,
    include_heads: Sequence[int] | None,
    layer: int | None,
    view: str,
    html_action: str,
) -> Any:
    import dataclasses

    from attn_cli.records.trace import Trace

    if html_action not in ("view", "return"):
        raise UsageError(f"html_action={html_action!r}: give 'view' or 'return'")
    made = attention if isinstance(attention, Trace) else from_attentions(attention, list(tokens or []))
    if sentence_b_start is not None:
        n = len(made.tokens)
        if not 0 < sentence_b_start < n:
            raise UsageError(f"sentence_b_start={sentence_b_start}: give a position between 1 and {n - 1}")
        made = dataclasses.replace(made, tokens=dataclasses.replace(made.tokens, type_ids=tuple(int(i >= sentence_b_start) for i in range(n))))
    if include_layers is not None or layer is not None:
        chosen = list(include_layers) if include_layers is not None else [layer]
        have = [kept.layer for kept in made.layers]
        missing = [i for i in chosen if i not in have]
        if missing:
            raise UsageError(f"include_layers: layers {missing} are not in the attention (it has {have})")
        made = dataclasses.replace(made, layers=tuple(made.layer(i) for i in chosen))
    if include_heads is not None:
        heads = tuple(include_heads)
        bad = [h for h in heads if not 0 <= h < made.model.heads]
        if bad:
            raise UsageError(f"include_heads: heads {bad} are out of range (the attention has {made.model.heads})")
        made = dataclasses.replace(made, chosen_heads=heads)
    shown = View([made], height=640, view=view)
    return shown.html if html_action == "return" else shown


# -- what Trace's notebook methods call ----------------------------------------------


def weights(t: Trace, layer: int = -1, head: int | None = None) -> torch.Tensor:
    """(H, T, T), or (T, T) for ``head``: layer ``layer``'s weights (a model index; -1:
    the last layer the trace kept)."""
    found = t.layer(weights_layer(t, layer))
    if head is None:
        return found.weights
    if not -found.n_heads <= head < found.n_heads:
        raise UsageError(f"head {head} is out of range: layer {layer} has heads 0 to {found.n_heads - 1}")
    return found.weights[head]


def to_json(t: Trace) -> str:
    from attn_cli.render.export import to_json as made

    return made(t)


def to_csv(t: Trace) -> str:
    from attn_cli.render.export import to_csv as made

    return made(t)


def heatmap(
    t: Trace,
    *,
    layer: int | str | Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    what: str = "weights",
    **options: Any,
) -> Figure:
    """The command line's picture as a matplotlib Figure: one layer's heads (``layer``: a
    model index, default the last kept), or the model view (``layer="all"`` or a list).
    ``options``: HeatmapOptions' fields (per_head_scale, annotate, cmap, log, size, dpi)."""
    import dataclasses

    from attn_cli.render.heatmap import HeatmapOptions, check_options, heatmap_figure
    from attn_cli.render.kinds import What

    try:
        kind = What(what)
        drawing = HeatmapOptions(what=kind, heads=None if heads is None else tuple(heads), **options)
    except (ValueError, TypeError) as err:
        raise UsageError(f"heatmap: {err}") from None
    kept = [k.layer for k in t.layers]
    if layer == "all" or isinstance(layer, (list, tuple, range)):
        chosen = kept if layer == "all" else list(layer)  # type: ignore[arg-type]
        from attn_cli.render.model_view import check_model_view, model_view_figure

        shown = dataclasses.replace(t, layers=tuple(t.layer(i) for i in chosen))
        check_model_view(drawing, len(chosen), len(drawing.heads or shown.shown_heads))
        return model_view_figure(shown, drawing)
    index = kept[-1] if layer is None else weights_layer(t, int(layer))  # type: ignore[arg-type]
    shown = dataclasses.replace(t, layers=(t.layer(index),))
    check_options(drawing, list(drawing.heads or shown.shown_heads))
    return heatmap_figure(shown, drawing)


def weights_layer(t: Trace, layer: int) -> int:
    """A model layer index (negative: from the end of the kept layers) that the trace kept."""
    kept = [k.layer for k in t.layers]
    index = kept[layer] if layer < 0 and -layer <= len(kept) else layer
    if index not in kept:
        raise UsageError(f"layer {layer} is not in the trace (it kept {kept})")
    return index


def page(t: Trace, *, view: str | None = None, max_size: float | None = None) -> str:
    """The `attn-cli html` page of ``t``, as a string (``max_size`` in MB; None: no limit)."""
    from attn_cli.render.html import page as made
    from attn_cli.render.html import reproduce_command

    return made([t], command=reproduce_command(t), max_bytes=None if not max_size else round(max_size * 2**20), view=view)


def heads(t: Trace) -> list[dict[str, Any]]:
    """The heads census of ``t`` (masses, entropy, role) per kept layer and shown head,
    as `attn-cli heads --no-probe` computes it; ``norm_special_mass`` needs a trace with its
    norms (``trace(..., norms=True)``), and is None otherwise."""
    from attn_cli.analysis.headroles import text_scores

    found: list[dict[str, Any]] = []
    for layer in t.layers:
        scores = text_scores(layer.weights, layer=layer.layer, special=t.tokens.special, mask=layer.mask, norms=layer.norms)
        found += [scores[h].as_dict() for h in t.shown_heads]
    return found


def notebook(t: Trace) -> str:
    from attn_cli.render.html import notebook_html

    return notebook_html([t])
