"""`attn-cli compare`'s outputs: JSON, tidy CSV, a ranked table and a picture of A, B and B - A.

Shapes: T tokens, H the heads shown. Reads a ``Comparison`` (attn_cli.analysis.compare),
whatever the two traces came from.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attn_cli.formats.export import StreamedTable, as_lists, token_dicts

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import RenderableType

    from attn_cli.analysis.compare import Comparison
    from attn_cli.records.trace import Trace

SCHEMA_VERSION = 1  # compare's own document
CSV_COLUMNS = ("table", "head", "layer", "row", "col", "row_token", "col_token", "value")


def pair_label(a: str, b: str) -> str:
    """A position's label in a comparison: the token, or "he→she" where the two differ."""
    return a if a == b else f"{a}→{b}"


def pair_labels(c: Comparison) -> list[str]:
    return [pair_label(x, y) for x, y in zip(c.a.tokens.labels, c.b.tokens.labels)]


def _run(trace: Trace) -> dict[str, Any]:
    return {"text": trace.text, "tokens": token_dicts(trace.tokens), "model": trace.model.as_dict()}


def comparison_dict(c: Comparison, *, table: Any = as_lists) -> dict[str, Any]:
    """The documented JSON object (docs/analyses.md): ``a`` and ``b`` (text, tokens,
    model), ``heads[]`` (layer, head, mean_tv, max_tv, max_row; model order) and
    ``layers[].heads[].difference`` (B - A, T x T)."""
    heads = list(c.a.shown_heads)
    return {
        "schema_version": SCHEMA_VERSION,
        "a": _run(c.a),
        "b": _run(c.b),
        "heads": [h.as_dict() for h in c.heads],
        "layers": [
            {"layer": layer.layer, "heads": [{"head": h, "difference": table(diff[i])} for i, h in enumerate(heads)]}
            for layer, diff in zip(c.a.layers, c.differences)
        ],
    }


def json_pieces(c: Comparison) -> Iterator[str]:
    """``comparison_dict`` as one line of JSON, the differences written a block of rows at a time."""
    import json

    made = comparison_dict(c, table=StreamedTable)
    layers = made.pop("layers")
    yield json.dumps(made, ensure_ascii=False, allow_nan=False)[:-1] + ', "layers": ['
    for i, layer in enumerate(layers):
        yield ("" if i == 0 else ", ") + '{"layer": ' + str(layer["layer"]) + ', "heads": ['
        for j, head in enumerate(layer["heads"]):
            yield ("" if j == 0 else ", ") + '{"head": ' + str(head["head"]) + ', "difference": '
            yield from head["difference"].json_pieces()
            yield "}"
        yield "]}"
    yield "]}"


def csv_pieces(c: Comparison) -> Iterator[str]:
    """Tidy rows (``CSV_COLUMNS``): ``token_a``/``token_b`` (a row per position, the id as
    value), ``mean_tv`` and ``max_tv`` (a row per head, ``row`` of max_tv its query row),
    ``tv`` (a row per head and query) and ``difference`` (a row per head, query and key)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    labels = pair_labels(c)
    for name, trace in (("token_a", c.a), ("token_b", c.b)):
        writer.writerows((name, "", "", i, "", label, "", tid) for i, (label, tid) in enumerate(zip(trace.tokens.labels, trace.tokens.ids)))
    for h in c.heads:
        writer.writerow(("mean_tv", h.head, h.layer, "", "", "", "", h.mean_tv))
        writer.writerow(("max_tv", h.head, h.layer, h.max_row, "", labels[h.max_row], "", h.max_tv))
    yield buffer.getvalue()
    heads = list(c.a.shown_heads)
    for layer, diff in zip(c.a.layers, c.differences):
        for i, h in enumerate(heads):
            buffer.seek(0)
            buffer.truncate()
            tv = (0.5 * diff[i].double().abs().sum(dim=-1)).tolist()  # (T,)
            writer.writerows(("tv", h, layer.layer, q, "", labels[q], "", v) for q, v in enumerate(tv))
            for q, row in enumerate(StreamedTable(diff[i]).row_lists()):
                writer.writerows(("difference", h, layer.layer, q, k, labels[q], labels[k], v) for k, v in enumerate(row))
            yield buffer.getvalue()


def compare_view(c: Comparison, *, top: int, precision: int) -> RenderableType:
    """The heads ranked by mean total variation, for people."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from attn_cli.render.tables import printable

    labels = pair_labels(c)
    a, b = c.a, c.b
    title = Text()
    if a.model.source != b.model.source:
        title.append(f"{printable(a.text)!r}", style="bold")
        title.append(f"  through {a.model.name} (A) and {b.model.name} (B)")
    else:
        title.append("A ", style="bold")
        title.append(repr(printable(a.text)))
        title.append("\nB ", style="bold")
        title.append(repr(printable(b.text)))
        title.append(f"\n{a.model.name}: {len(a.tokens)} tokens each")
    differ = [i for i, (x, y) in enumerate(zip(a.tokens.ids, b.tokens.ids)) if x != y]
    lines: list[Any] = [title]
    if differ and a.model.source == b.model.source:
        lines.append(Text(f"differ at position{'s' if len(differ) > 1 else ''} " + ", ".join(f"{i} ({labels[i]})" for i in differ), style="dim"))
    f = f"{{:.{precision}f}}"
    table = Table(box=box.SIMPLE_HEAD, title=f"Heads that change most (of {len(c.heads)})", title_justify="left", title_style="bold", pad_edge=False)
    for name, justify in (("rank", "right"), ("layer", "right"), ("head", "right"), ("mean_tv", "right"), ("max_tv", "right"), ("at query", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, h in enumerate(c.ranked()[:top], start=1):
        table.add_row(str(rank), str(h.layer), str(h.head), f.format(h.mean_tv), f.format(h.max_tv), labels[h.max_row])
    lines += [table, Text(
        "tv: each query row's total variation distance, 0.5 x sum over keys of |B - A|: 0 the same attention, "
        "1 none in common; mean_tv averages it over the rows. -o NAME.png draws A, B and B - A of the top head "
        "(or --layer/--head); -F json has every difference.",
        style="dim",
    )]  # fmt: skip
    return Group(*lines)


def compare_figure(c: Comparison, layer: int, head: int, *, dpi: float = 150, size: tuple[float, float] | None = None) -> Figure:
    """A, B and B - A of one layer and head side by side: the weights on the fixed 0..1
    viridis scale, the difference on RdBu_r centred on 0, masked cells grey."""
    import numpy as np
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from attn_cli.render.fonts import font_families
    from attn_cli.render.heatmap import MASKED_COLOR, SPECIAL_COLOR, check_pixels, colour_map, shorten, tick_step
    from attn_cli.render.titles import fit_title

    labels = pair_labels(c)
    n = len(labels)
    index = [kept.layer for kept in c.a.layers].index(layer)
    la, lb = c.a.layers[index], c.b.layers[index]
    mask = None
    if la.mask is not None and lb.mask is not None:
        mask = (la.mask & lb.mask).numpy()  # (T, T) hidden in both
    panels = [
        ("A", la.weights[head].numpy(), "viridis", (0.0, 1.0)),
        ("B", lb.weights[head].numpy(), "viridis", (0.0, 1.0)),
    ]
    diff = c.difference(layer, head).numpy()
    extent = float(np.abs(diff).max()) or 1.0
    panels.append(("B − A", diff, "RdBu_r", (-extent, extent)))
    side = min(6.0, max(2.6, 0.28 * n + 1.2))
    figsize = size or (3 * side + 1.4, side + 1.4)
    check_pixels(figsize, dpi)
    change = next(h for h in c.heads if h.layer == layer and h.head == head)
    with rc_context({"font.family": font_families(c.a.text + c.b.text + "".join(labels))}):
        fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 3)
        step = tick_step(n, int(side * 72 / 9))
        ticks = list(range(0, n, step))
        for ax, (name, values, cmap_name, limits) in zip(axes, panels):
            cmap = colour_map(cmap_name).with_extremes(bad=MASKED_COLOR)
            data = np.ma.masked_array(values, mask=mask if mask is not None else np.zeros(values.shape, dtype=bool))
            image = ax.imshow(data, cmap=cmap, norm=Normalize(*limits), aspect="equal", interpolation="nearest")
            image.set_label(f"{name} layer {layer} head {head}")
            ax.set_title(name if name != "B − A" else "B − A (red: more in B)", fontsize=11)
            ax.set_xticks(ticks)
            ax.set_yticks(ticks)
            ax.set_xticklabels([shorten(labels[i], 14) for i in ticks], rotation=60, ha="right", rotation_mode="anchor", fontsize=8, parse_math=False)
            ax.set_yticklabels([shorten(labels[i], 14) for i in ticks], fontsize=8, parse_math=False)
            for tick_labels in (ax.get_xticklabels(), ax.get_yticklabels()):
                for i, text in zip(ticks, tick_labels):
                    if c.a.tokens.is_special(i):
                        text.set_color(SPECIAL_COLOR)
                    if c.a.tokens.ids[i] != c.b.tokens.ids[i]:
                        text.set_fontweight("bold")
            ax.set_xlabel("key", fontsize=9)
            ax.tick_params(length=0)
            for spine in ax.spines.values():
                spine.set_visible(False)
            fig.colorbar(image, ax=ax, shrink=0.8, pad=0.02, aspect=25).ax.tick_params(labelsize=7)
        axes[0].set_ylabel("query", fontsize=9)
        texts = f"A “{_short(c.a.text)}” · B “{_short(c.b.text)}”" if c.a.text != c.b.text else f"“{_short(c.a.text)}”"
        models = c.a.model.name if c.a.model.source == c.b.model.source else f"A {c.a.model.name} · B {c.b.model.name}"
        title = [
            [f"Attention compared, layer {layer} head {head}: {texts}"],
            [models, f"mean tv {change.mean_tv:.3f}", f"max tv {change.max_tv:.3f} at {labels[change.max_row]}",
             *(["grey: masked in both"] if mask is not None and mask.any() else [])],  # fmt: skip
        ]
        fig.suptitle(fit_title(title, (figsize[0] - 0.2) * 72, 11), fontsize=11, parse_math=False)
    return fig


def _short(text: str, limit: int = 50) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

