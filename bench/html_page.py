"""How long headless Chromium takes to load and draw `attn-cli html` pages, and their sizes.

    python bench/html_page.py            # 20, 128 and 512 tokens; toy and a MiniLM-shaped trace
    python bench/html_page.py --reps 3   # fewer repetitions

Each page is opened from file:// in a fresh tab, REPS times, and timed from
navigation to the first view drawn (the page sets ``body[data-ready]``, then two
animation frames pass so the canvas is on screen); the median is given as a ratio
to the same measurement of a blank page with one script. Then the matrix view
is opened and timed the same way. Not a test: absolute times are the machine's.

The MiniLM rows use a trace built by hand with all-MiniLM-L6-v2's shape (6 layers,
12 heads of 32, no mask, [CLS]/[SEP]): this machine has no checkpoint, and the
page's cost depends only on the shapes and how well the weights compress.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
BLANK = "<!doctype html><meta charset='utf-8'><body><script>document.body.dataset.ready = '1';</script></body>"
DRAWN = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


def pages(folder: Path) -> list[tuple[str, Path]]:
    from attn_cli.render.page import page
    from html_support import hand_trace, toy

    words = ("the quick brown fox jumps over the lazy dog and then " * 60).split()
    made = []
    for n in (20, 128, 512):
        for name, trace in (
            (f"toy, 4 heads, causal, {n} tokens", toy(" ".join(words[:n]), heads=4, causal=True)),
            (f"MiniLM shape (6 x 12), {n} tokens", hand_trace(n, layers=6, heads=12, head_dim=32, causal=False)),
        ):
            path = folder / f"{len(made)}.html"
            path.write_text(page([trace], command="bench"), encoding="utf-8")
            made.append((name, path))
    return made


def timed(browser, path: Path, reps: int, view: str | None = None) -> float:
    times = []
    for _ in range(reps):
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto("about:blank")
        start = time.perf_counter()
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready]", state="attached")
        tab.evaluate(DRAWN)
        if view:
            start = time.perf_counter()
            tab.click(f"#tab-{view}")
            tab.wait_for_selector("#app[aria-busy=false]", state="attached")
            tab.evaluate(DRAWN)
        times.append(time.perf_counter() - start)
        tab.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    options = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        folder = Path(tmp)
        blank = folder / "blank.html"
        blank.write_text(BLANK, encoding="utf-8")
        browser = p.chromium.launch(executable_path=options.chromium, args=ARGS)
        timed(browser, blank, 2)  # warm the browser
        base = timed(browser, blank, options.reps)
        print(f"blank page: {base * 1000:.0f} ms\n")
        print("| page | size | load + head view | ratio to blank | matrix view |")
        print("| --- | --- | --- | --- | --- |")
        for name, path in pages(folder):
            load = timed(browser, path, options.reps)
            matrix = timed(browser, path, options.reps, view="matrix")
            size = path.stat().st_size
            shown = f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 1024:.0f} kB"
            print(f"| {name} | {shown} | {load * 1000:.0f} ms | {load / base:.1f}x | {matrix * 1000:.0f} ms |", flush=True)
        browser.close()


if __name__ == "__main__":
    main()
