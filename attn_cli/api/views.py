"""What the Python API draws: bertviz's ``head_view`` and ``model_view`` over attention from
anywhere (an attn-cli page that shows itself in Jupyter), and what ``attn_cli.api.Trace``'s
notebook methods call (the command line's JSON, CSV, picture, page and heads census).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.records.trace import Trace
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch
    from matplotlib.figure import Figure


class View:
    """An attn-cli page that shows itself in Jupyter (a sandboxed iframe, no network)
    and gives its HTML as ``html`` (``save(path)`` writes it)."""

    def __init__(self, traces: Sequence[Trace], height: int, view: str) -> None:
        self.traces = list(traces)
        self.height = height
        self.view = view

    def _repr_html_(self) -> str:
        from attn_cli.render.page import notebook_html

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

    from attn_cli.sources.outside import from_attentions

    if html_action not in ("view", "return"):
        raise UsageError(f"html_action={html_action!r}: give 'view' or 'return'")
    made = attention if isinstance(attention, Trace) else from_attentions(attention, list(tokens or []))
    needs_tables(made, f"{view}_view()")
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


def needs_tables(t: Trace, what: str) -> None:
    """UsageError where ``t`` kept statistics and rows, not tables (a long text's, ``tables_omitted``)."""
    if t.tables_omitted is not None:
        raise UsageError(
            f"{what} reads the attention tables, which this trace did not keep ({t.tables_omitted}); "
            f"read Trace.stats() and Trace.rows(), or trace fewer layers (layer=) to keep the tables"
        )


def stats(t: Trace, layer: int = -1) -> list[dict[str, Any]]:
    """Each shown head's statistics in layer ``layer``, as the JSON's ``stats``."""
    from attn_cli.analysis.rowstats import stats_of

    return [s.as_dict() for s in stats_of(t.layer(weights_layer(t, layer)), t.shown_heads)]


def rows(t: Trace, layer: int = -1, head: int | None = None) -> torch.Tensor:
    """(Q, H, S) the ``query=`` rows' weights of the shown heads, or (Q, S) for ``head``."""
    import torch

    from attn_cli.analysis.rowstats import row_of

    if not t.queries:
        raise UsageError("this trace kept no query rows: trace it with query= (\"last\", \"last:16\", \"100:200\", a token)")
    found = t.layer(weights_layer(t, layer))
    heads = t.shown_heads if head is None else (head,)
    made = torch.stack([torch.stack([row_of(found, q, h) for h in heads]) for q in t.queries])  # (Q, H, S)
    return made if head is None else made[:, 0]


def weights(t: Trace, layer: int = -1, head: int | None = None) -> torch.Tensor:
    """(H, T, T), or (T, T) for ``head``: layer ``layer``'s weights (a model index; -1:
    the last layer the trace kept)."""
    needs_tables(t, "weights()")
    found = t.layer(weights_layer(t, layer))
    if head is None:
        return found.weights
    if not -found.n_heads <= head < found.n_heads:
        raise UsageError(f"head {head} is out of range: layer {layer} has heads 0 to {found.n_heads - 1}")
    return found.weights[head]


def to_json(t: Trace) -> str:
    from attn_cli.formats.export import to_json as made

    return made(t)


def to_csv(t: Trace) -> str:
    from attn_cli.formats.export import to_csv as made

    return made(t)


def heatmap(
    t: Trace,
    *,
    layer: int | str | Sequence[int] | None = None,
    head: int | Sequence[int] | None = None,
    what: str = "weights",
    heads: Sequence[int] | None = None,
    **options: Any,
) -> Figure:
    """The command line's picture as a matplotlib Figure: one layer's heads (``layer``: a
    model index, default the last kept), or the model view (``layer="all"`` or a list);
    ``head``: the heads drawn, as --head (an index or a list). ``options``: HeatmapOptions'
    fields (per_head_scale, annotate, cmap, log, size, dpi). ``heads=``, the first release's
    name for ``head=``, still works, with a warning: ``attn_cli.trace(heads=)`` is --heads."""
    import dataclasses

    from attn_cli.render.picture.panels import HeatmapOptions
    from attn_cli.render.picture.heatmap import check_options, heatmap_figure
    from attn_cli.render.picture.kinds import What

    if t.tables_omitted is not None and what == "weights":  # a long text: its pooled maps, or its rows as strips
        return _long_heatmap(t, layer, head, options)
    needs_tables(t, "heatmap()")
    if heads is not None:
        if head is not None:
            raise UsageError("heads= and head= both choose the heads to draw: give head= alone")
        warnings.warn(f"Trace.heatmap(heads={heads!r}): write head={heads!r}, as --head", DeprecationWarning, stacklevel=3)
        head = heads
    try:
        kind = What(what)
        drawing = HeatmapOptions(what=kind, heads=None if head is None else (head,) if isinstance(head, int) else tuple(head), **options)
    except (ValueError, TypeError) as err:
        raise UsageError(f"heatmap: {err}") from None
    kept = [k.layer for k in t.layers]
    if layer == "all" or isinstance(layer, (list, tuple, range)):
        chosen = kept if layer == "all" else list(layer)  # type: ignore[arg-type]
        from attn_cli.render.picture.model_view import check_model_view, model_view_figure

        shown = dataclasses.replace(t, layers=tuple(t.layer(i) for i in chosen))
        check_model_view(drawing, len(chosen), len(drawing.heads or shown.shown_heads))
        return model_view_figure(shown, drawing)
    index = kept[-1] if layer is None else weights_layer(t, int(layer))  # type: ignore[arg-type]
    shown = dataclasses.replace(t, layers=(t.layer(index),))
    check_options(drawing, list(drawing.heads or shown.shown_heads))
    return heatmap_figure(shown, drawing)


def _long_heatmap(t: Trace, layer: Any, head: Any, options: dict[str, Any]) -> Figure:
    """``heatmap()`` of a trace without tables: ``render.picture.pooled``'s picture of its kept
    layers (``layer="all"``) or one, the --query rows as strips where the trace has them."""
    import dataclasses

    from attn_cli.render.picture.panels import HeatmapOptions
    from attn_cli.render.picture.pooled import LongView, long_figure

    try:
        drawing = HeatmapOptions(heads=None if head is None else (head,) if isinstance(head, int) else tuple(head), **options)
    except TypeError as err:
        raise UsageError(f"heatmap: {err}") from None
    kept = [k.layer for k in t.layers]
    chosen = kept if layer == "all" else list(layer) if isinstance(layer, (list, tuple, range)) else [weights_layer(t, -1 if layer is None else int(layer))]
    return long_figure(dataclasses.replace(t, layers=tuple(t.layer(i) for i in chosen)), drawing, LongView())


def weights_layer(t: Trace, layer: int) -> int:
    """A model layer index (negative: from the end of the kept layers) that the trace kept."""
    kept = [k.layer for k in t.layers]
    index = kept[layer] if layer < 0 and -layer <= len(kept) else layer
    if index not in kept:
        raise UsageError(f"layer {layer} is not in the trace (it kept {kept})")
    return index


def page(t: Trace, *, view: str | None = None, max_size: float | None = None) -> str:
    """The `attn-cli html` page of ``t``, as a string (``max_size`` in MB; None: no limit)."""
    from attn_cli.render.page import page as made
    from attn_cli.render.page import reproduce_command

    needs_tables(t, "page()")
    return made([t], command=reproduce_command(t), max_bytes=None if not max_size else round(max_size * 2**20), view=view)


def heads(t: Trace) -> list[dict[str, Any]]:
    """The heads census of ``t`` (masses, entropy, role) per kept layer and shown head,
    as `attn-cli heads --no-probe` computes it; ``norm_special_mass`` needs a trace with its
    norms (``trace(..., norms=True)``), and is None otherwise."""
    from attn_cli.analysis.headroles import text_scores

    needs_tables(t, "heads()")
    found: list[dict[str, Any]] = []
    for layer in t.layers:
        scores = text_scores(layer.weights, layer=layer.layer, special=t.tokens.special, mask=layer.mask, norms=layer.norms)
        found += [scores[h].as_dict() for h in t.shown_heads]
    return found


def notebook(t: Trace) -> str:
    from attn_cli.render.page import notebook_html

    return notebook_html([t])
