"""`attn-cli faithfulness -o curves.png`: each map's drop in the target's probability against the share deleted."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure


def curves_figure(result: Any, *, dpi: int = 150) -> Figure:
    """One line per map (AOPC in the legend), the random baseline dashed."""
    fig = Figure(figsize=(7.5, 4.8), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    for curve in result.curves:
        ax.plot(result.bins, curve.drops, marker="o", label=f"{curve.method} (AOPC {curve.aopc:.3f})")
    ax.plot(result.bins, result.random.drops, linestyle="--", color="grey", label=f"random, 10 rankings (AOPC {result.random.aopc:.3f})")
    ax.set_xscale("log")
    ax.set_xticks(result.bins, [f"{p}%" for p in result.bins])
    ax.set_xlabel(f"tokens deleted (the map's top ones first; {result.delete_with})")
    ax.set_ylabel("drop in the target's probability")
    ax.axhline(0.0, color="black", linewidth=0.6)
    t = result.targets[0]
    what = t.what if len(result.targets) == 1 else f"each of {len(result.targets)} texts' own target"
    ax.set_title(f"Faithfulness: deleting what each map ranks first ({what})")
    ax.legend(fontsize="small")
    return fig
