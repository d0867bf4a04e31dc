"""The page's browser for tests: headless Chromium driven by playwright (the `browser`
fixture, which skips without it and fails under CI), and ``Page``, a loaded page that fails
on any console error, uncaught exception or request other than the page itself.

Shared by the page's own tests (render/test_html_browser.py) and the encoder-decoder's
(sources/checkpoint/test_seq2seq_cli.py): import ``browser`` into a test module to use it (module scope:
one browser a module)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import skip_or_fail

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    named = os.environ.get("ATTN_CLI_TEST_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("browser tests: playwright is not installed (pip install -e '.[test]')")
    executable = chromium_path()
    if executable is None:
        skip_or_fail("browser tests: no chromium on this machine (apt-get install chromium)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=ARGS)
        yield launched
        launched.close()


class Page:
    """A loaded page and everything it did wrong."""

    def __init__(self, browser: Any, path: Path, *, scheme: str = "light", width: int = 1280, wait: bool = True) -> None:
        self.url = path.as_uri()
        self.problems: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"exception: {e}"))
        self.page.on("request", lambda r: r.url != self.url and self.problems.append(f"request: {r.url[:100]}"))
        self.page.goto(self.url)
        if wait:
            self.ready()

    def ready(self) -> None:
        self.page.wait_for_selector("body[data-ready]", state="attached")
        self.page.wait_for_selector("#app[aria-busy=false]", state="attached")
        assert not self.problems, self.problems

    def view(self, name: str) -> None:
        self.page.click(f"#tab-{name}")
        self.ready()

    def text(self, selector: str) -> str:
        return self.page.inner_text(selector).strip()

    def hover_cell(self, q: int, k: int) -> dict[str, str]:
        canvas = self.page.locator("#matrix")
        margin, cell = (float(canvas.get_attribute(a)) for a in ("data-margin", "data-cell"))
        box = canvas.bounding_box()
        y = box["y"] + margin + (q + 0.5) * cell
        self.page.evaluate(f"window.scrollBy(0, {y - 450})")  # the cell into the middle of the viewport
        box = canvas.bounding_box()
        self.page.mouse.move(box["x"] + margin + (k + 0.5) * cell, box["y"] + margin + (q + 0.5) * cell)
        return self.tip()

    def tip(self) -> dict[str, str]:
        self.page.wait_for_selector("#tip:not([hidden])")
        return {dd.get_attribute("data-field"): dd.inner_text() for dd in self.page.locator("#tip dd").all()}

    def close(self) -> None:
        assert not self.problems, self.problems
        self.context.close()
