"""Fonts for tokens in any script: matplotlib's font fallback over the installed fonts.

matplotlib's default font (DejaVu Sans) has no CJK ideographs and few emoji, so
such tokens would be drawn as empty boxes. Since matplotlib 3.6 a ``font.family``
list is a fallback chain: each glyph comes from the first family that has it.
``font_families(text)`` returns that list for the characters a picture will draw:
the configured family first, then, only when it lacks some of them, the fewest
installed fonts (found by their character maps) that cover the rest. Characters
no installed font has still draw as boxes; ``missing_glyph_note`` says so once.

matplotlib lists the installed fonts once, in a cache file it never checks again: a font
installed after that is unseen. Before the installed fonts are first looked at, a font
folder changed since the file was written makes the list be built again (once a process).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import matplotlib
from matplotlib import font_manager, rcParams
from matplotlib import ft2font
from matplotlib.ft2font import FT2Font

# Coloured bitmap fonts (Noto Color Emoji) have no outlines matplotlib can scale, and a
# last-resort font (matplotlib ships one) "has" every character as a box: neither helps.
_UNUSABLE = re.compile(r"colou?r|last ?resort", re.IGNORECASE)
MISSING_GLYPHS = "note: no installed font has "  # how the note starts: a command says it once
_GLYPH_WARNING = re.compile(r"Glyph (\d+) .*missing from font")


def font_families(text: str) -> list[str]:
    """The ``font.family`` list that draws every character of ``text`` that an installed font has."""
    configured = list(rcParams["font.family"])
    missing = {ord(c) for c in set(text) if c.isprintable() and not c.isspace()} - _primary_charmap()
    if not missing:
        return configured
    return configured + [name for name in _covering(frozenset(missing)) if name not in configured]


def missing_glyph_note(codepoints: Iterable[int]) -> str:
    """One note naming characters no installed font has (a few of them, with their code points)."""
    chars = sorted(set(codepoints))
    shown = ", ".join(f"{chr(c)} (U+{c:04X})" for c in chars[:5]) + (f" and {len(chars) - 5} more" if len(chars) > 5 else "")
    return (
        f"{MISSING_GLYPHS}{shown}: drawn as empty boxes; install a font that has them "
        f"(e.g. Debian's fonts-noto-cjk or fonts-wqy-microhei for Chinese and Japanese, fonts-symbola for emoji), "
        f"then delete matplotlib's font cache (fontlist-*.json in ~/.cache/matplotlib) so it finds the font"
    )


def missing_glyphs(warning_messages: Iterable[str]) -> list[int]:
    """The code points of matplotlib's "Glyph N ... missing from font(s)" warnings."""
    return [int(m.group(1)) for message in warning_messages if (m := _GLYPH_WARNING.search(message))]


@functools.lru_cache(maxsize=64)
def _covering(missing: frozenset[int]) -> tuple[str, ...]:
    """Family names, fewest first, that between them have as many of ``missing`` as any installed fonts do."""
    left = set(missing)
    chosen: list[str] = []
    candidates = _candidates()
    while left:
        best, covered = None, set()
        for name, path in candidates:  # sans-serif faces first: the first best wins a tie
            here = left & _charmap(path)
            if len(here) > len(covered):
                best, covered = name, here
        if best is None:
            break
        chosen.append(best)
        left -= covered
    return tuple(chosen)


def _candidates() -> list[tuple[str, str]]:
    """(family name, file) of the installed upright regular fonts, one file per family, sans-serif first."""
    refresh_font_list()
    seen: dict[str, str] = {}
    for entry in font_manager.fontManager.ttflist:
        if entry.style != "normal" or entry.weight not in (400, "normal", "regular") or _UNUSABLE.search(entry.name):
            continue
        seen.setdefault(entry.name, entry.fname)
    return sorted(seen.items(), key=lambda item: (not re.search(r"sans|hei|gothic", item[0], re.IGNORECASE), item[0]))


@functools.lru_cache(maxsize=1)
def refresh_font_list() -> bool:
    """Build matplotlib's font list again when its cache file is older than a font folder
    (a font was installed since), in place, as matplotlib does when a listed font file is
    gone, and write the file anew; at most once a process. True when it did."""
    if not _font_list_is_stale():
        return False
    fresh = font_manager._load_fontmanager(try_read_cache=False)  # lists the fonts, writes the cache file
    # text, textpath and the Agg backend hold the instance itself: it must change, not be replaced
    vars(font_manager.fontManager).update(vars(fresh))
    font_manager.fontManager._findfont_cached.cache_clear()
    _primary_charmap.cache_clear()
    return True


def font_list_file() -> Path:
    """The cache file matplotlib reads its font list from."""
    return Path(matplotlib.get_cachedir(), f"fontlist-v{font_manager.FontManager.__version__}.json")


def _font_list_is_stale() -> bool:
    if os.environ.get("MPL_IGNORE_SYSTEM_FONTS"):  # matplotlib lists its own fonts only
        return False
    try:
        written = font_list_file().stat().st_mtime
    except OSError:  # no file: this process built the list (or could not keep it)
        return False
    return any(_changed_since(top, written) for top in _font_folders())


def _changed_since(top: str, when: float) -> bool:
    """Whether a folder under ``top`` (or ``top``) changed after ``when``: a font added, removed
    or renamed changes its folder's mtime (a font file's own mtime is its package's, often older)."""
    for folder, _dirs, _files in os.walk(top):
        try:
            if os.stat(folder).st_mtime > when:
                return True
        except OSError:  # gone since it was listed
            continue
    return False


def _font_folders() -> list[str]:
    """The folders matplotlib looks for fonts in, besides fontconfig's list (the same ones on Linux)."""
    if sys.platform == "win32":
        return [font_manager.win32FontDirectory(), *font_manager.MSUserFontDirectories]
    if sys.platform == "darwin":
        return [*font_manager.X11FontDirectories, *font_manager.OSXFontDirectories]
    return list(font_manager.X11FontDirectories)


@functools.lru_cache(maxsize=1)
def _primary_charmap() -> frozenset[int]:
    return _charmap(font_manager.findfont(font_manager.FontProperties()))


@functools.lru_cache(maxsize=None)
def _charmap(path: str) -> frozenset[int]:
    """The code points a font file has glyphs for; none for a font matplotlib cannot scale or open."""
    try:
        font = FT2Font(path)
    except (OSError, RuntimeError, ValueError):
        return frozenset()
    if not _scalable(font):
        return frozenset()
    return frozenset(font.get_charmap())


def _scalable(font: FT2Font) -> bool:
    flags = getattr(ft2font, "FaceFlags", None)  # matplotlib 3.10+: an enum; before: int bits
    return flags.SCALABLE in font.face_flags if flags is not None else bool(font.face_flags & ft2font.SCALABLE)
