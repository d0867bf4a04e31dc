"""`attn-cli compare -o NAME.png`: one head's weights for A, B and B - A side by side, as a
matplotlib Figure. Shapes: T tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attn_cli.formats.compare import pair_labels

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from attn_cli.analysis.compare import Comparison


def compare_figure(c: Comparison, layer: int, head: int, *, dpi: float = 150, size: tuple[float, float] | None = None) -> Figure:
    """A, B and B - A of one layer and head side by side: the weights on the fixed 0..1
    viridis scale, the difference on RdBu_r centred on 0, masked cells grey."""
    import numpy as np
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from attn_cli.render.picture.fonts import font_families
    from attn_cli.render.picture.canvas import check_pixels, tick_step
    from attn_cli.render.picture.panels import MASKED_COLOR, colour_map
    from attn_cli.render.picture.titles import fit_title

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
            _label_ticks(ax, ticks, labels, c)
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


def _label_ticks(ax: Any, ticks: list[int], labels: list[str], c: Comparison) -> None:
    """The panel's token ticks: special tokens in their colour, tokens that differ between A and B in bold."""
    from attn_cli.render.picture.canvas import shorten
    from attn_cli.render.picture.panels import SPECIAL_COLOR

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


def _short(text: str, limit: int = 50) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
