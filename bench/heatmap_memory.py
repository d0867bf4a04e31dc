"""What drawing a heatmap allocates: tracemalloc's peak around heatmap_figure + write_figure.

The constants in attn_cli/render/picture/canvas.py (HELD_BYTES_PER_CELL, DRAW_BYTES_PER_CELL,
FIXED_DRAW_BYTES) come from these figures; bench/README.md has a run.

    python bench/heatmap_memory.py            # the default table
    python bench/heatmap_memory.py 3000 2 1   # T, heads, causal (0/1)
"""

from __future__ import annotations

import io
import sys
import tracemalloc

from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource
from attn_cli.render.picture.panels import HeatmapOptions
from attn_cli.render.picture.heatmap import heatmap_figure
from attn_cli.render.picture.canvas import write_figure

CASES = [(500, 1, False), (1000, 1, False), (2000, 1, False), (3000, 1, False), (4000, 1, False), (2000, 4, True), (4000, 4, True)]


def measure(n_tokens: int, heads: int, causal: bool) -> tuple[int, int]:
    """(peak bytes while the figure is built, peak bytes up to the end of saving it as PNG)."""
    text = " ".join(f"w{i}" for i in range(n_tokens))
    run = ToySource(Config(tokenizer="words", heads=heads, causal=causal, max_tokens=n_tokens)).run(text)
    tracemalloc.start()
    fig = heatmap_figure(run, HeatmapOptions())
    built = tracemalloc.get_traced_memory()[1]
    write_figure(fig, io.BytesIO(), "png")
    saved = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return built, saved


def main() -> None:
    cases = [(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1")] if len(sys.argv) == 4 else CASES
    print("| T | heads | causal | figure built (MiB) | bytes/cell/panel held | saved, peak (MiB) | bytes/cell of one panel, drawing |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for n, heads, causal in cases:
        built, saved = measure(n, heads, causal)
        cells = n * n
        print(f"| {n:,} | {heads} | {'yes' if causal else 'no'} | {built / 2**20:.0f} | {built / (cells * heads):.1f} "
              f"| {saved / 2**20:.0f} | {(saved - built) / cells:.1f} |")


if __name__ == "__main__":
    main()
