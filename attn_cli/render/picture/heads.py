"""`attn-cli heads --ablate -o NAME.png`: the layers x heads grid of each head's change in
next-token loss, as a matplotlib Figure.
"""

from __future__ import annotations

from typing import Any

from attn_cli.analysis.headroles import HeadsReport


def ablation_figure(report: HeadsReport, *, dpi: float = 150) -> Any:
    """--ablate -o NAME.png: the layers x heads grid of loss deltas on RdBu_r centred on 0
    (red: the loss rises without the head, it matters)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from attn_cli.render.picture.canvas import check_pixels
    from attn_cli.render.picture.panels import colour_map

    ablation = report.ablation
    assert ablation is not None, "an ablation picture needs heads --ablate"
    deltas = np.array(ablation.deltas, dtype=float)  # (L, H)
    layers, heads = deltas.shape
    extent = float(np.abs(deltas).max()) or 1.0
    size = (max(6.0, min(18.0, 2.5 + 0.45 * heads)), max(3.5, min(18.0, 2.0 + 0.4 * layers)))
    check_pixels(size, dpi)
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    image = ax.imshow(deltas, cmap=colour_map("RdBu_r"), norm=Normalize(-extent, extent), aspect="auto", interpolation="nearest")
    image.set_label("ablation_loss_delta")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    if layers * heads <= 400:
        for l in range(layers):
            for h in range(heads):
                ax.text(h, l, f"{deltas[l, h]:+.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(deltas[l, h]) > 0.6 * extent else "black")  # fmt: skip
    fig.colorbar(image, ax=ax, shrink=0.9).set_label("loss change (nats)")
    from attn_cli.render.picture.titles import fit_title

    trace = report.trace
    stack = trace.view_stack
    if stack is None:  # a decoder's next-token loss over its text
        headline = [f"Head ablation ({ablation.method}): next-token loss change on “{_short(trace.text)}”"]
    else:  # an encoder-decoder's: the heads of one stack, the target's loss
        target = stack.texts[1] if stack.texts is not None else trace.text
        whose = {"encoder": "encoder self-attention", "decoder": "decoder self-attention"}.get(stack.name, "cross-attention")
        headline = [f"Head ablation ({ablation.method}) of {whose}", f"target loss change on “{_short(target)}”"]
    lines = [
        headline,
        [report.trace.model.name, f"clean loss {ablation.clean_loss:.3f} nats", "red: the loss rises without the head"],
    ]
    fig.suptitle(fit_title(lines, (size[0] - 0.2) * 72, 10), fontsize=10, parse_math=False)
    return fig


def _short(text: str) -> str:
    """The text on one line, cut to 50 characters."""
    text = " ".join(text.split())
    return text if len(text) <= 50 else text[:49] + "…"
