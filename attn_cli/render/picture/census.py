"""`attn-cli census -o NAME.png`: the pictures a paper shows of a census, as one matplotlib Figure:
the attention to [CLS], [SEP] and punctuation by layer (each head a dot, the layer's mean a line,
as Clark et al. 2019's figure), and a layers x heads grid of each main measure; with --against,
the grids of each head's total variation and cosine from the other model.
"""

from __future__ import annotations

from typing import Any

SPECIAL = (("cls", "[CLS] / first token", "#d62728"), ("sep", "[SEP] / EOS", "#1f77b4"), ("punct", '". " or ", "', "#2ca02c"))
GRIDS = (
    ("previous", "previous token", "Blues", (0.0, 1.0)),
    ("next", "next token", "Blues", (0.0, 1.0)),
    ("self", "self", "Blues", (0.0, 1.0)),
    ("entropy_nats", "entropy (nats)", "viridis", None),
    ("sink_rate", "sink rate", "Reds", (0.0, 1.0)),
    ("positional", "positional share", "Purples", (0.0, 1.0)),
    ("confidence", "confidence", "Oranges", (0.0, 1.0)),
)
AGAINST = (("tv", "total variation from --against", "Reds", (0.0, 1.0)), ("cosine", "cosine with --against", "Greens", (0.0, 1.0)))


def census_figure(made: dict[str, Any], name: str, *, dpi: float = 150) -> Any:
    """The figure of a ``formats.census.census_dict`` of model ``name``: the special-token curves, then the grids."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attn_cli.render.picture.canvas import check_pixels
    from attn_cli.render.picture.titles import fit_title

    heads = made["heads"]
    n_layers = max(h["layer"] for h in heads) + 1
    n_heads = max(h["head"] for h in heads) + 1
    grids = GRIDS + (AGAINST if "changed" in made else ())
    grid = {key: np.full((n_layers, n_heads), np.nan) for key in ["cls", "sep", "punct"] + [g[0] for g in grids]}
    for head in heads:
        for key, table in grid.items():
            value = head["measures"][key]
            table[head["layer"], head["head"]] = np.nan if value is None else value
    columns = (len(grids) + 2) // 2
    size = (4.0 * columns, 8.0)
    check_pixels(size, dpi)
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, columns)
    _special_curves(axes[0, 0], grid, n_layers)
    for ax, (key, title, cmap, limits) in zip(list(axes[0, 1:]) + list(axes[1]), grids):
        _grid(fig, ax, grid[key], title, cmap, limits)
    rate = made["sink_rate"]
    lines = [
        [f"Census of {made['texts']:,} texts ({made['tokens']:,} tokens)", name],
        [f"every row of every text averaged (token-weighted); sink rate {'–' if rate is None else f'{rate:.3f}'} at epsilon {made['epsilon']}"],
    ]
    fig.suptitle(fit_title(lines, (size[0] - 0.2) * 72, 11), fontsize=11, parse_math=False)
    return fig


def _special_curves(ax: Any, grid: dict[str, Any], n_layers: int) -> None:
    """Each head's attention to a kind of token as a dot at its layer, the layer's mean as a line."""
    import numpy as np

    layers = np.arange(n_layers)
    for offset, (key, label, colour) in zip((-0.15, 0.0, 0.15), SPECIAL):
        table = grid[key]  # (L, H)
        for layer in range(n_layers):
            ax.scatter(np.full(table.shape[1], layer + offset), table[layer], s=8, color=colour, alpha=0.45, linewidths=0)
        ax.plot(layers, np.nanmean(table, axis=1), color=colour, label=label, linewidth=2)
    ax.set_xlabel("layer")
    ax.set_ylabel("mean attention")
    ax.set_xticks(layers)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("attention to special tokens, by layer", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _grid(fig: Any, ax: Any, table: Any, title: str, cmap: str, limits: tuple[float, float] | None) -> None:
    """One measure's layers x heads grid."""
    from attn_cli.render.picture.panels import colour_map

    lo, hi = limits if limits is not None else (float(_finite_min(table)), float(_finite_max(table)))
    image = ax.imshow(table, cmap=colour_map(cmap), vmin=lo, vmax=hi if hi > lo else lo + 1, aspect="auto", interpolation="nearest")
    image.set_label(title)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(table.shape[1]) if table.shape[1] <= 24 else range(0, table.shape[1], 4))
    ax.set_yticks(range(table.shape[0]) if table.shape[0] <= 24 else range(0, table.shape[0], 4))
    fig.colorbar(image, ax=ax, shrink=0.85)


def _finite_min(table: Any) -> float:
    import numpy as np

    finite = table[np.isfinite(table)]
    return float(finite.min()) if finite.size else 0.0


def _finite_max(table: Any) -> float:
    import numpy as np

    finite = table[np.isfinite(table)]
    return float(finite.max()) if finite.size else 1.0
