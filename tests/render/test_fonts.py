"""matplotlib's font list, read from a cache file older than the installed fonts: attn-cli
builds it again, once, so a CJK or emoji token is drawn with the font installed since.

Each test that draws runs in its own process with its own MPLCONFIGDIR (matplotlib reads the
font list when it is imported): the user's cache is never read or written."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, skip_or_fail
from matplotlib import font_manager

from attn_cli.render.picture import fonts

# The command draws a heatmap of a CJK and an emoji token; "as-cached" keeps the font list
# as the cache file has it (the control: attn-cli as it was).
DRAW = """
import sys
from attn_cli.render.picture import fonts
if sys.argv[1] == "as-cached":
    fonts.refresh_font_list = lambda: False
from attn_cli.cli import app
app(["heatmap", "猫 🦊 cat", "-t", "words", "-o", sys.argv[2]], prog_name="attn-cli")
"""


def installed_font_for(char: str) -> Path | None:
    """A font file on this machine with a glyph for ``char``, found without matplotlib's font list."""
    for path in sorted(font_manager.findSystemFonts()):
        if ord(char) in fonts._charmap(path):
            return Path(path)
    return None


def run(code: str, *args: str, config: Path, ignore_system_fonts: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MPL_IGNORE_SYSTEM_FONTS"}
    env.update(MPLCONFIGDIR=str(config), PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    if ignore_system_fonts:
        env["MPL_IGNORE_SYSTEM_FONTS"] = "1"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def cjk_font() -> Path:
    cjk = installed_font_for("猫")
    if cjk is None or installed_font_for("🦊") is None:
        skip_or_fail("no installed font has 猫 and 🦊 (Debian: fonts-wqy-microhei, fonts-symbola)")
    return cjk


def stale_config(config: Path, cjk: Path) -> Path:
    """A matplotlib config folder whose font list lists none of the system's fonts and was
    written an hour before the CJK font's folder last changed; its font list file."""
    config.mkdir()
    # with system fonts ignored, matplotlib lists only its own fonts: as before the fonts were installed
    made = run("import matplotlib.font_manager", config=config, ignore_system_fonts=True)
    assert made.returncode == 0, made.stderr
    (listing,) = config.glob("fontlist-v*.json")
    assert cjk.name not in listing.read_text(encoding="utf-8")
    before = cjk.parent.stat().st_mtime - 3600
    os.utime(listing, (before, before))
    return listing


def test_a_font_list_older_than_the_fonts_is_built_again_and_the_cjk_font_found(cjk_font: Path, tmp_path: Path) -> None:
    listing = stale_config(tmp_path / "mpl", cjk_font)
    written = listing.stat().st_mtime
    drawn = run(DRAW, "refresh", str(tmp_path / "cat.png"), config=listing.parent)
    assert drawn.returncode == 0, drawn.stderr
    assert "no installed font has" not in drawn.stderr
    assert listing.stat().st_mtime > written and cjk_font.name in listing.read_text(encoding="utf-8")  # kept for the next process


def test_without_building_it_again_the_stale_list_draws_boxes(cjk_font: Path, tmp_path: Path) -> None:
    """The control for the test above: the same stale list, used as the cache file has it."""
    listing = stale_config(tmp_path / "mpl", cjk_font)
    written = listing.stat().st_mtime
    drawn = run(DRAW, "as-cached", str(tmp_path / "boxes.png"), config=listing.parent)
    assert drawn.returncode == 0, drawn.stderr
    assert "no installed font has 猫 (U+732B), 🦊 (U+1F98A)" in drawn.stderr
    assert listing.stat().st_mtime == written


def test_a_font_list_newer_than_the_fonts_is_kept(cjk_font: Path, tmp_path: Path) -> None:
    listing = stale_config(tmp_path / "mpl", cjk_font)
    now = time.time() + 3600  # written after every font folder changed: kept, boxes and all
    os.utime(listing, (now, now))
    kept = run(DRAW, "refresh", str(tmp_path / "cat.png"), config=listing.parent)
    assert kept.returncode == 0, kept.stderr
    assert "no installed font has 猫" in kept.stderr and listing.stat().st_mtime == now


def test_the_font_list_is_built_again_at_most_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    monkeypatch.setattr(fonts, "_font_list_is_stale", lambda: True)
    monkeypatch.setattr(font_manager, "_load_fontmanager", lambda **_: built.append(1) or copy.copy(font_manager.fontManager))
    fonts.refresh_font_list.cache_clear()
    fonts._covering.cache_clear()
    try:
        for text in ("猫", "🦊", "猫 again"):
            fonts.font_families(text)
        fonts._candidates()
        assert built == [1]
        fonts.refresh_font_list.__wrapped__()  # the control: unguarded, a second call builds again
        assert built == [1, 1]
    finally:
        fonts.refresh_font_list.cache_clear()
        fonts._covering.cache_clear()


def test_text_every_font_has_never_looks_at_the_font_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    looked = []
    monkeypatch.setattr(fonts, "_font_list_is_stale", lambda: looked.append(1) or False)
    fonts.refresh_font_list.cache_clear()
    try:
        assert fonts.font_families("The cat sat") == list(fonts.rcParams["font.family"])
    finally:
        fonts.refresh_font_list.cache_clear()
    assert looked == []


def test_a_folder_changed_after_the_file_makes_it_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "fonts"
    (top / "truetype" / "dejavu").mkdir(parents=True)
    listing = tmp_path / "cache" / "fontlist-v999.json"
    listing.parent.mkdir()
    listing.write_text("{}")
    monkeypatch.setattr(fonts, "font_list_file", lambda: listing)
    monkeypatch.setattr(fonts, "_font_folders", lambda: [str(top), str(tmp_path / "absent")])
    monkeypatch.delenv("MPL_IGNORE_SYSTEM_FONTS", raising=False)
    for folder in (top, top / "truetype", top / "truetype" / "dejavu"):
        os.utime(folder, (1000, 1000))
    os.utime(listing, (2000, 2000))
    assert not fonts._font_list_is_stale()
    (top / "truetype" / "wqy").mkdir()  # a font package installed after the list was written: its folder's parent changes
    assert fonts._font_list_is_stale()
    os.utime(top / "truetype", (1000, 1000))
    os.utime(top / "truetype" / "wqy", (3000, 3000))  # deep in the tree
    assert fonts._font_list_is_stale()
    monkeypatch.setenv("MPL_IGNORE_SYSTEM_FONTS", "1")
    assert not fonts._font_list_is_stale()
    monkeypatch.delenv("MPL_IGNORE_SYSTEM_FONTS")
    listing.unlink()  # no file: the process built its own list
    assert not fonts._font_list_is_stale()
